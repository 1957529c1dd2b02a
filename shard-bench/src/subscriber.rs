//! Consuming connections, each a [`client::Consumer`] on one channel that FINs every message
//! at once. The handler counts the message and, while measuring, records its end-to-end
//! latency from the stamp in its body ([`crate::payload`]).

use crate::error::{BenchError, Result};
use crate::metrics::{record, Latencies, Shared};
use crate::options::LoadPlan;
use crate::payload;
use client::{Consumer, ConsumerConfig, HandlerResult, Message};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Subscribes one consumer connection (per broker) to `channel`, on executor `executor`.
pub async fn subscribe(
    plan: &LoadPlan,
    channel: &str,
    executor: usize,
    shared: Arc<Shared>,
    latencies: Rc<RefCell<Latencies>>,
) -> Result<Consumer> {
    let mut config = ConsumerConfig::new(plan.topic.clone(), channel)
        .client_id("shard-bench")
        .max_in_flight(plan.max_in_flight)
        .output_buffer_timeout(plan.output_buffer_timeout)
        // Every message is FINned; nothing should ever be given up or slow us down.
        .max_attempts(0)
        .backoff_multiplier(Duration::ZERO)
        .lookupd_poll_interval(Duration::from_secs(5))
        .stop_timeout(Duration::from_secs(2));
    config.features = plan.features.clone();
    let handler = move |msg: Message| {
        on_message(&shared, executor, &latencies, msg.body());
        std::future::ready(HandlerResult::Finish)
    };
    let consumer =
        Consumer::new(config, handler).map_err(|e| BenchError::InvalidOption(e.to_string()))?;
    for addr in &plan.brokers {
        consumer
            .connect_to_nsqd(addr.clone())
            .await
            .map_err(|source| BenchError::Connect {
                addr: addr.clone(),
                source,
            })?;
    }
    for lookupd in &plan.lookupds {
        consumer
            .connect_to_lookupd(lookupd.clone())
            .await
            .map_err(|source| BenchError::Connect {
                addr: lookupd.clone(),
                source,
            })?;
    }
    if consumer
        .wait_for_connections(1, Duration::from_secs(5))
        .await
        .is_err()
    {
        consumer.stop().await;
        return Err(BenchError::NoBrokers {
            topic: plan.topic.clone(),
        });
    }
    for (addr, got) in consumer.negotiated() {
        if let Err(source) = crate::publisher::check_negotiated(plan, &got) {
            consumer.stop().await;
            return Err(BenchError::Connect { addr, source });
        }
    }
    Ok(consumer)
}

fn on_message(shared: &Shared, executor: usize, latencies: &RefCell<Latencies>, body: &[u8]) {
    shared.consumed.add(executor, 1);
    shared.consumed_bytes.add(executor, body.len() as u64);
    if shared.measuring() {
        if let Some(sent) = payload::sent_ns(body) {
            // The time of the read that brought it (one clock read per read, not per message).
            let ns = client::clock::wall_ns().saturating_sub(sent);
            record(&mut latencies.borrow_mut().e2e, ns);
        }
    }
}

//! Publishing connections, each a [`client::Producer`].
//!
//! - Closed loop (no `--rate`): `pipeline` workers per connection, each sends one command
//!   (PUB, or MPUB of `batch_size`), waits for its OK, and sends the next. Ack latency is
//!   send → OK.
//! - Open loop (`--rate`): a scheduler per connection sends command k at `start + k·interval`
//!   whether or not earlier ones were answered (up to `max_outstanding` waiting), and both the
//!   ack latency and the stamp in the bodies start at the *scheduled* time. A broker that
//!   stalls for 50 ms therefore shows 50 ms of latency on every message due in that window,
//!   rather than one slow sample (no coordinated omission).

use crate::metrics::{record, Latencies, Shared};
use crate::options::LoadPlan;
use crate::payload;
use bytes::Bytes;
use client::{Producer, ProducerConfig};
use hdrhistogram::Histogram;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many publish errors are printed before the rest are only counted.
const ERRORS_SHOWN: u64 = 5;
/// How long a publisher waits after losing its connection before it tries again.
pub const CONNECTION_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Everything a publishing task needs; cheap to clone.
#[derive(Clone)]
pub struct PubContext {
    pub plan: Arc<LoadPlan>,
    pub shared: Arc<Shared>,
    pub latencies: Rc<RefCell<Latencies>>,
}

/// The producer settings of a run: shard-bench's client id and the run's features.
pub fn producer_config(plan: &LoadPlan) -> ProducerConfig {
    let mut config = ProducerConfig::new().client_id("shard-bench");
    config.features = plan.features.clone();
    config
}

/// Opens a producer; a compression asked for and not granted fails the run (the figures
/// would be of the plain protocol).
pub async fn connect(addr: &str, plan: &LoadPlan) -> client::Result<Producer> {
    let producer = Producer::connect_with(addr, producer_config(plan)).await?;
    check_negotiated(plan, &producer.negotiated())?;
    Ok(producer)
}

/// Fails when the broker left off a compression the run asked for (TLS refused fails the
/// handshake already).
pub fn check_negotiated(plan: &LoadPlan, got: &client::Negotiated) -> client::Result<()> {
    if plan.features.compression().is_some() && got.compression.is_none() {
        return Err(client::Error::InvalidConfig(
            "the broker did not enable the compression asked for",
        ));
    }
    Ok(())
}

/// Runs one connection's publishing until the run stops or `--count` is reached.
pub async fn run(producer: Producer, ctx: PubContext) {
    match ctx.plan.rate {
        None => {
            let workers: Vec<_> = (0..ctx.plan.pipeline)
                .map(|_| glommio::spawn_local(closed_loop(producer.clone(), ctx.clone())))
                .collect();
            for w in workers {
                w.await;
            }
        }
        Some(rate) => {
            let per_conn = rate as f64 / ctx.plan.connections as f64;
            open_loop(producer.clone(), ctx, per_conn).await;
        }
    }
    producer.stop();
}

async fn closed_loop(producer: Producer, ctx: PubContext) {
    let plan = &ctx.plan;
    while !ctx.shared.stopping() {
        let n = ctx.shared.claim(plan.batch_size, plan.count);
        if n == 0 {
            return;
        }
        let bodies = payload::bodies(plan.size, n, payload::now_ns());
        let sent = Instant::now();
        let outcome = publish(&producer, &plan.topic, bodies).await;
        settle(&ctx, outcome, n, sent).await;
    }
}

async fn open_loop(producer: Producer, ctx: PubContext, msgs_per_s: f64) {
    let plan = ctx.plan.clone();
    let interval_ns = (plan.batch_size as f64 / msgs_per_s * 1e9).max(1.0);
    let start = Instant::now();
    let start_wall = payload::now_ns();
    let outstanding = Rc::new(Cell::new(0usize));
    let mut k: u64 = 0;
    while !ctx.shared.stopping() {
        let offset = Duration::from_nanos((k as f64 * interval_ns) as u64);
        let due = start + offset;
        let now = Instant::now();
        if due > now {
            glommio::timer::sleep(due - now).await;
            continue;
        }
        if outstanding.get() >= plan.max_outstanding {
            // Still honest: the late command's latency counts from `due`.
            glommio::timer::sleep(Duration::from_micros(100)).await;
            continue;
        }
        let n = ctx.shared.claim(plan.batch_size, plan.count);
        if n == 0 {
            break;
        }
        k += 1;
        outstanding.set(outstanding.get() + 1);
        let bodies = payload::bodies(plan.size, n, start_wall + offset.as_nanos() as u64);
        let (producer, ctx, outstanding) = (producer.clone(), ctx.clone(), outstanding.clone());
        glommio::spawn_local(async move {
            let outcome = publish(&producer, &ctx.plan.topic, bodies).await;
            settle(&ctx, outcome, n, due).await;
            outstanding.set(outstanding.get() - 1);
        })
        .detach();
    }
    // Let the answers of what was sent arrive (bounded: the producer times out by itself).
    let give_up = Instant::now() + Duration::from_secs(5);
    while outstanding.get() > 0 && Instant::now() < give_up {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

async fn publish(producer: &Producer, topic: &str, mut bodies: Vec<Bytes>) -> client::Result<()> {
    if bodies.len() == 1 {
        producer.publish(topic, bodies.pop().unwrap()).await
    } else {
        producer.multi_publish(topic, bodies).await
    }
}

/// Books the outcome of one publish command of `n` messages sent (or due) at `since`.
async fn settle(ctx: &PubContext, outcome: client::Result<()>, n: usize, since: Instant) {
    let back_off = book(
        &ctx.plan,
        &ctx.shared,
        &mut ctx.latencies.borrow_mut().ack,
        outcome,
        n,
        since,
    );
    if back_off {
        glommio::timer::sleep(CONNECTION_ERROR_PAUSE).await;
    }
}

/// Counts a publish command's outcome and records its ack latency while measuring; prints
/// the first few errors. True when the caller should pause for [`CONNECTION_ERROR_PAUSE`]
/// (the connection is gone: the next publish reconnects, and must not spin while the broker
/// is away). Shared by the executor publishers and `--blocking`'s threads.
pub fn book(
    plan: &LoadPlan,
    shared: &Shared,
    ack: &mut Histogram<u64>,
    outcome: client::Result<()>,
    n: usize,
    since: Instant,
) -> bool {
    match outcome {
        Ok(()) => {
            shared.published.fetch_add(n as u64, Relaxed);
            shared
                .published_bytes
                .fetch_add((n * plan.size) as u64, Relaxed);
            if shared.measuring() {
                record(ack, since.elapsed().as_nanos() as u64);
            }
            false
        }
        Err(e) => {
            let seen = shared.errors.fetch_add(1, Relaxed);
            if seen < ERRORS_SHOWN {
                eprintln!("shard-bench: publish failed: {e}");
            }
            e.is_connection_error()
        }
    }
}

//! `--blocking`: publishing connections driven by plain threads with the synchronous client
//! ([`client::blocking::Producer`]), one thread per connection, each sending a command and
//! blocking in `read` until its OK (closed loop, one command outstanding).
//!
//! Why: when every message waits for its round trip (PUB one at a time on one connection),
//! the client's own scheduling is most of the cost. An executor learns of the answer from an
//! io_uring completion and parks through `io_uring_enter`, about four calls a round trip on
//! our VM; a thread blocked in `read` is woken by the answer's arrival and nothing else. The
//! thread connects on the executor's CPU and, with `--cpus`, is pinned to it, so broker
//! connection steering by CPU keeps the connection's wake-ups on that core.

use crate::metrics::{Latencies, Phase, Shared};
use crate::options::LoadPlan;
use crate::payload;
use crate::publisher;
use client::blocking::Producer;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Opens a synchronous producer (on the calling thread, so on its CPU).
pub fn connect(addr: &str, plan: &LoadPlan) -> client::Result<Producer> {
    let producer = Producer::connect_with(addr, publisher::producer_config(plan))?;
    if let Some(got) = producer.negotiated() {
        publisher::check_negotiated(plan, got)?;
    }
    Ok(producer)
}

/// Starts the thread that publishes through `producer` until the run stops or `--count` is
/// reached; it returns its ack latencies. Call it from the executor that connected the
/// producer: a thread inherits its creator's CPU affinity, so with `--cpus` it runs pinned on
/// the CPU its connection was made from.
pub fn spawn(
    producer: Producer,
    plan: Arc<LoadPlan>,
    shared: Arc<Shared>,
    name: String,
) -> std::io::Result<JoinHandle<Latencies>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(move || run(producer, &plan, &shared))
}

fn run(mut producer: Producer, plan: &LoadPlan, shared: &Shared) -> Latencies {
    let mut latencies = Latencies::default();
    while shared.phase() == Phase::Connecting {
        std::thread::sleep(Duration::from_millis(1));
    }
    while !shared.stopping() {
        let n = shared.claim(plan.batch_size, plan.count);
        if n == 0 {
            break;
        }
        let mut bodies = payload::bodies(plan.size, n, payload::now_ns());
        let sent = Instant::now();
        let outcome = if bodies.len() == 1 {
            let body = bodies.swap_remove(0);
            producer.publish(&plan.topic, body)
        } else {
            producer.multi_publish(&plan.topic, bodies)
        };
        if publisher::book(plan, shared, &mut latencies.ack, outcome, n, sent) {
            std::thread::sleep(publisher::CONNECTION_ERROR_PAUSE);
        }
    }
    producer.close();
    latencies
}

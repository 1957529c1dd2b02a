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

use crate::metrics::{record, Latencies, Phase, Shared};
use crate::options::LoadPlan;
use crate::payload;
use client::blocking::Producer;
use client::ProducerConfig;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many publish errors are printed before the rest are only counted.
const ERRORS_SHOWN: u64 = 5;

/// Opens a synchronous producer (on the calling thread, so on its CPU).
pub fn connect(addr: &str) -> client::Result<Producer> {
    Producer::connect_with(addr, ProducerConfig::new().client_id("shard-bench"))
}

/// Starts the thread that publishes through `producer` until the run stops or `--count` is
/// reached; it returns its ack latencies.
pub fn spawn(
    producer: Producer,
    plan: Arc<LoadPlan>,
    shared: Arc<Shared>,
    cpu: Option<usize>,
    name: String,
) -> std::io::Result<JoinHandle<Latencies>> {
    std::thread::Builder::new().name(name).spawn(move || {
        if let Some(cpu) = cpu {
            pin_to(cpu);
        }
        run(producer, &plan, &shared)
    })
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
        match outcome {
            Ok(()) => {
                shared.published.fetch_add(n as u64, Relaxed);
                shared
                    .published_bytes
                    .fetch_add((n * plan.size) as u64, Relaxed);
                if shared.measuring() {
                    record(&mut latencies.ack, sent.elapsed().as_nanos() as u64);
                }
            }
            Err(e) => {
                let seen = shared.errors.fetch_add(1, Relaxed);
                if seen < ERRORS_SHOWN {
                    eprintln!("shard-bench: publish failed: {e}");
                }
                if e.is_connection_error() {
                    // The next publish reconnects; don't spin while the broker is away.
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
    producer.close();
    latencies
}

/// Pins the calling thread to `cpu` (best effort: a failure leaves it unpinned, with a note).
fn pin_to(cpu: usize) {
    // SAFETY: `set` is a plain bitmask owned by this frame; CPU_SET bounds-checks `cpu`
    // (options already refused CPUs that are not online), and sched_setaffinity only reads it.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !ok {
        eprintln!(
            "shard-bench: could not pin a publishing thread to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

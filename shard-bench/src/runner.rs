//! One load run, from start to result.
//!
//! The main thread starts `executors()` glommio executors (threads), each owning a share of
//! the connections (connection i goes to executor i mod n), then drives the run's
//! [`Phase`]s by the clock: it waits until every executor has connected (consumers first, so
//! a pubsub run's channel exists before the first publish), starts the warm-up, starts
//! measuring, samples the shared counters once a second (progress line and time series), and
//! stops the run at the deadline, at `--count`, or when the publishers have nothing left.
//! The executors' histograms come back through their join handles and are merged.
//!
//! Pinning: with `--cpus`, executor i is pinned to the i-th listed CPU (glommio
//! `Placement::Fixed`); without it, executors are unbound and the kernel places them. The
//! broker pins its shards to CPUs 0..shards, so a bench next to a one-shard broker is best
//! pinned to CPU 1, and next to a two-shard broker on a 2-core machine left unbound.

use crate::blocking_pub;
use crate::error::{BenchError, Result};
use crate::metrics::{Counts, Latencies, Phase, Shared};
use crate::options::{LoadPlan, Mode};
use crate::procstat;
use crate::publisher::{self, PubContext};
use crate::result::{BenchResult, BrokerUsage, Percentiles, Sample, Settings, Throughput, FORMAT};
use crate::subscriber;
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest wait for every executor to connect.
const CONNECT_LIMIT: Duration = Duration::from_secs(15);
/// Longest wait for the executors to wind down after the run stopped.
const STOP_LIMIT: Duration = Duration::from_secs(15);
const TICK: Duration = Duration::from_millis(5);

/// Runs `plan` and returns its result; `command` is recorded in it.
pub fn run(plan: LoadPlan, command: String) -> Result<BenchResult> {
    let plan = Arc::new(plan);
    let executors = plan.executors();
    let shared = Arc::new(Shared::new(executors));
    let mut handles = Vec::with_capacity(executors);
    for i in 0..executors {
        let placement = plan
            .placement(i)
            .map_or(Placement::Unbound, Placement::Fixed);
        let (p, sh) = (plan.clone(), shared.clone());
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("bench-{i}"))
            .spawn(move || executor_main(i, executors, p, sh))
            .map_err(|e| BenchError::Executor(e.to_string()));
        match handle {
            Ok(h) => handles.push(h),
            Err(e) => {
                shared.fail(e.to_string());
                break;
            }
        }
    }

    let outcome = drive(&plan, &shared, executors);
    shared.set_phase(Phase::Stopping);
    let latencies = join_all(handles)?;
    if let Some(why) = shared.fatal.lock().unwrap().take() {
        return Err(BenchError::InvalidOption(why));
    }
    let measured = outcome?;
    let mut result = build_result(&plan, command, measured, latencies);
    result.check_targets(&plan.targets);
    Ok(result)
}

/// What the main thread saw while the run was measured.
struct Measured {
    started_at: u64,
    elapsed: Duration,
    counts: Counts,
    series: Vec<Sample>,
    broker_cpu_s: Option<f64>,
}

/// Moves the run through its phases; returns once it should stop.
fn drive(plan: &LoadPlan, shared: &Shared, executors: usize) -> Result<Measured> {
    let connect_start = Instant::now();
    while shared.ready.load(Relaxed) < executors {
        if shared.stopping() {
            return Err(BenchError::Stuck("connecting failed"));
        }
        if connect_start.elapsed() > CONNECT_LIMIT {
            shared.fail(format!(
                "not every connection was up within {CONNECT_LIMIT:?}"
            ));
            return Err(BenchError::Stuck("connecting"));
        }
        std::thread::sleep(TICK);
    }
    if shared.stopping() {
        return Err(BenchError::Stuck("connecting failed"));
    }

    let warm_start = Instant::now();
    shared.set_phase(Phase::WarmingUp);
    let mut progress = Progress::new(plan, shared.snapshot(), warm_start, "warm");
    while warm_start.elapsed() < plan.warmup && !finished(plan, shared, executors) {
        progress.tick(shared, false);
        std::thread::sleep(TICK);
    }

    let cpu_before = plan
        .broker_pid
        .and_then(|pid| procstat::cpu_seconds(pid).ok());
    let started_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let start = Instant::now();
    let base = shared.snapshot();
    shared.set_phase(Phase::Measuring);
    let mut progress = Progress::new(plan, base, start, "");
    while start.elapsed() < plan.duration && !finished(plan, shared, executors) {
        progress.tick(shared, true);
        std::thread::sleep(TICK);
    }
    let elapsed = start.elapsed();
    let counts = shared.snapshot().since(&base);
    shared.set_phase(Phase::Stopping);
    let broker_cpu_s = match (plan.broker_pid, cpu_before) {
        (Some(pid), Some(before)) => procstat::cpu_seconds(pid).ok().map(|after| after - before),
        _ => None,
    };
    Ok(Measured {
        started_at,
        elapsed,
        counts,
        series: progress.series,
        broker_cpu_s,
    })
}

/// True when the run has nothing more to do before its deadline.
fn finished(plan: &LoadPlan, shared: &Shared, executors: usize) -> bool {
    if shared.stopping() {
        return true;
    }
    if let Some(count) = plan.count {
        let expected = count * plan.channels.len() as u64;
        let done = match plan.mode {
            Mode::Pub => shared.published.load(Relaxed) >= count,
            Mode::Sub | Mode::PubSub => shared.consumed.sum() >= expected,
        };
        if done {
            return true;
        }
    }
    // Publishers that ended on their own (count claimed, or errors) with nobody consuming.
    plan.mode == Mode::Pub && shared.idle.load(Relaxed) >= executors
}

/// The line printed each second, and the time series.
struct Progress {
    start: Instant,
    next: Instant,
    last: Counts,
    last_at: Instant,
    tag: &'static str,
    quiet: bool,
    mode: Mode,
    series: Vec<Sample>,
}

impl Progress {
    fn new(plan: &LoadPlan, base: Counts, start: Instant, tag: &'static str) -> Progress {
        Progress {
            start,
            next: start + Duration::from_secs(1),
            last: base,
            last_at: start,
            tag,
            quiet: plan.quiet,
            mode: plan.mode,
            series: Vec::new(),
        }
    }

    fn tick(&mut self, shared: &Shared, keep: bool) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.next += Duration::from_secs(1);
        let counts = shared.snapshot();
        let d = counts.since(&self.last);
        let secs = (now - self.last_at).as_secs_f64();
        self.last = counts;
        self.last_at = now;
        let t = (now - self.start).as_secs_f64();
        let sample = Sample {
            t,
            pub_per_s: d.published as f64 / secs,
            sub_per_s: d.consumed as f64 / secs,
        };
        if keep {
            self.series.push(sample);
        }
        if self.quiet {
            return;
        }
        let mut line = format!("[{}{:>4.0}s]", self.tag, t);
        if self.mode.publishes() {
            line += &format!(
                " pub {:>10} msg/s {:>7.1} MB/s",
                crate::result::group(sample.pub_per_s),
                d.published_bytes as f64 / secs / 1e6
            );
        }
        if self.mode.consumes() {
            line += &format!(
                " | sub {:>10} msg/s {:>7.1} MB/s",
                crate::result::group(sample.sub_per_s),
                d.consumed_bytes as f64 / secs / 1e6
            );
        }
        line += &format!(
            " | total pub {} sub {} err {}",
            counts.published, counts.consumed, counts.errors
        );
        eprintln!("{line}");
    }
}

fn join_all(handles: Vec<glommio::ExecutorJoinHandle<Latencies>>) -> Result<Latencies> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Latencies::default();
        for h in handles {
            if let Ok(l) = h.join() {
                all.merge(&l);
            }
        }
        let _ = tx.send(all);
    });
    rx.recv_timeout(STOP_LIMIT)
        .map_err(|_| BenchError::Stuck("executors winding down"))
}

/// One executor: connect its share, wait for the start, run, stop, hand back histograms.
async fn executor_main(
    index: usize,
    executors: usize,
    plan: Arc<LoadPlan>,
    shared: Arc<Shared>,
) -> Latencies {
    let latencies = Rc::new(RefCell::new(Latencies::default()));
    let mut consumers = Vec::new();
    let mut producers = Vec::new();
    let mut sync_producers = Vec::new();
    let connected = async {
        if plan.mode.consumes() {
            let slots = plan.sub_connections * plan.channels.len();
            for slot in (index..slots).step_by(executors) {
                let channel = &plan.channels[slot % plan.channels.len()];
                let c =
                    subscriber::subscribe(&plan, channel, index, shared.clone(), latencies.clone())
                        .await?;
                consumers.push(c);
            }
        }
        if plan.mode.publishes() {
            let brokers = publish_brokers(&plan).await?;
            for conn in (index..plan.connections).step_by(executors) {
                let addr = &brokers[conn % brokers.len()];
                let connect_error = |source| BenchError::Connect {
                    addr: addr.clone(),
                    source,
                };
                if plan.blocking {
                    // Blocks this executor for a loopback handshake, before the run starts.
                    sync_producers.push(blocking_pub::connect(addr, &plan).map_err(connect_error)?);
                } else {
                    producers.push(
                        publisher::connect(addr, &plan)
                            .await
                            .map_err(connect_error)?,
                    );
                }
            }
        }
        Ok::<(), BenchError>(())
    }
    .await;
    if let Err(e) = connected {
        shared.fail(e.to_string());
    }
    shared.ready.fetch_add(1, Relaxed);
    while shared.phase() == Phase::Connecting {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }

    let mut threads = Vec::new();
    for (k, p) in sync_producers.into_iter().enumerate() {
        let name = format!("bench-{index}-pub-{k}");
        match blocking_pub::spawn(p, plan.clone(), shared.clone(), name) {
            Ok(t) => threads.push(t),
            Err(e) => shared.fail(format!("could not start a publishing thread: {e}")),
        }
    }
    let ctx = PubContext {
        plan: plan.clone(),
        shared: shared.clone(),
        latencies: latencies.clone(),
    };
    let tasks: Vec<_> = producers
        .into_iter()
        .map(|p| glommio::spawn_local(publisher::run(p, ctx.clone())))
        .collect();
    for t in tasks {
        t.await;
    }
    // Rarely: this executor shares its CPU with the threads it waits for.
    while threads.iter().any(|t| !t.is_finished()) {
        glommio::timer::sleep(Duration::from_millis(50)).await;
    }
    for t in threads {
        match t.join() {
            Ok(l) => latencies.borrow_mut().merge(&l),
            Err(_) => shared.fail("a publishing thread panicked".to_string()),
        }
    }
    shared.idle.fetch_add(1, Relaxed);
    while !shared.stopping() {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    for c in &consumers {
        c.stop().await;
    }
    drop(ctx);
    let l = std::mem::take(&mut *latencies.borrow_mut());
    l
}

/// The brokers to publish to: the given addresses, or the ones the lookups know for the topic.
async fn publish_brokers(plan: &LoadPlan) -> Result<Vec<String>> {
    if !plan.brokers.is_empty() {
        return Ok(plan.brokers.clone());
    }
    let mut answers = Vec::new();
    for l in &plan.lookupds {
        match client::lookup::query(l, &plan.topic, Duration::from_secs(5)).await {
            Ok(a) => answers.push(a),
            Err(e) => eprintln!("shard-bench: lookup {l} failed: {e}"),
        }
    }
    let found: BTreeSet<String> = client::lookup::broker_addresses(&answers);
    if found.is_empty() {
        return Err(BenchError::NoBrokers {
            topic: plan.topic.clone(),
        });
    }
    Ok(found.into_iter().collect())
}

fn build_result(
    plan: &LoadPlan,
    command: String,
    m: Measured,
    latencies: Latencies,
) -> BenchResult {
    let secs = m.elapsed.as_secs_f64();
    let per_million = |cpu: f64, n: u64| (n > 0).then(|| cpu / (n as f64 / 1e6));
    let broker = plan.broker_pid.map(|pid| {
        let cpu_s = m.broker_cpu_s.unwrap_or(0.0);
        let (peak_rss_kb, rss_kb) = procstat::memory_kb(pid).unwrap_or((0, 0));
        BrokerUsage {
            pid,
            cpu_s,
            cpu_s_per_million_pub: per_million(cpu_s, m.counts.published),
            cpu_s_per_million_sub: per_million(cpu_s, m.counts.consumed),
            peak_rss_kb,
            rss_kb,
        }
    });
    BenchResult {
        format: FORMAT,
        label: plan.label.clone(),
        mode: plan.mode_name.clone(),
        command,
        settings: Settings {
            brokers: plan.brokers.clone(),
            lookupds: plan.lookupds.clone(),
            topic: plan.topic.clone(),
            channels: plan.channels.clone(),
            size: plan.size,
            batch_size: plan.batch_size,
            connections: plan.connections,
            sub_connections: plan.sub_connections,
            max_in_flight: plan.max_in_flight,
            output_buffer_timeout_ms: plan
                .output_buffer_timeout
                .map_or(-1, |d| d.as_millis() as i64),
            pipeline: plan.pipeline,
            duration_s: plan.duration.as_secs_f64(),
            warmup_s: plan.warmup.as_secs_f64(),
            rate: plan.rate,
            count: plan.count,
            threads: plan.threads,
            cpus: plan.cpus.clone(),
            blocking: plan.blocking,
            features: plan.feature_names.clone(),
        },
        started_at: m.started_at,
        elapsed_s: secs,
        published: Throughput::new(m.counts.published, m.counts.published_bytes, secs),
        consumed: Throughput::new(m.counts.consumed, m.counts.consumed_bytes, secs),
        errors: m.counts.errors,
        ack_latency_us: Percentiles::from_ns(&latencies.ack),
        e2e_latency_us: Percentiles::from_ns(&latencies.e2e),
        series: m.series,
        broker,
        targets: Vec::new(),
        host_load: procstat::load_average(),
    }
}

//! A publisher or consumer for the fault-injection harness (tests/faults): it records every
//! outcome to a history file that tests/faults/checker.py reads.
//!
//! ```text
//! fault_agent publish --broker H:P [--broker H:P ...] --topic T --name N --out FILE
//!                     --rate PER_SECOND --timeout-ms MS --stop-file PATH --max-seconds S
//! fault_agent consume --lookupd H:P [--lookupd H:P ...] --topic T --channel C --out FILE
//!                     --rate PER_SECOND --fast-file PATH --stop-file PATH --max-seconds S
//! ```
//!
//! publish: one PUB at a time, each with a new body `N-<seq>`, in round robin over the brokers;
//! a broker that failed is skipped for a while (backoff 0.25 s doubling to 2 s). Each attempt is
//! one line: `A` acknowledged, `E` the broker answered an error frame, `F` not sent (no
//! connection), `U` unknown (timeout or connection lost after the PUB was written).
//!
//! consume: the client's `Consumer` with lookup discovery only (polled every second), finishing
//! every message; at most `--rate` messages a second until `--fast-file` exists (so that a
//! backlog builds while faults run), then as fast as they come.
//!
//! Lines (tab-separated, times in seconds since the epoch: all processes share one host clock):
//! `START t`, `A|E|F|U t broker body detail`, `R t broker body attempts`, `END t summary`.
//! The process ends when `--stop-file` exists or after `--max-seconds`.

use client::{Consumer, ConsumerConfig, Error, HandlerResult, Message, Producer, ProducerConfig};
use glommio::LocalExecutor;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::io::{LineWriter, Write};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One history file, line-buffered so that a killed agent leaves whole lines behind.
type Out = Rc<RefCell<LineWriter<File>>>;

struct Args {
    cmd: String,
    brokers: Vec<String>,
    lookupds: Vec<String>,
    topic: String,
    channel: String,
    name: String,
    out: PathBuf,
    rate: f64,
    timeout: Duration,
    max_in_flight: u64,
    fast_file: Option<PathBuf>,
    stop_file: Option<PathBuf>,
    max_seconds: f64,
}

fn usage(why: &str) -> ! {
    eprintln!("fault_agent: {why}");
    eprintln!(
        "usage: fault_agent publish --broker H:P [...] --topic T --name N --out FILE [--rate R] \
         [--timeout-ms MS] [--stop-file P] [--max-seconds S]\n       fault_agent consume \
         --lookupd H:P [...] --topic T --channel C --out FILE [--rate R] [--max-in-flight N] \
         [--fast-file P] [--stop-file P] [--max-seconds S]"
    );
    std::process::exit(2);
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {value:?}")))
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().unwrap_or_else(|| usage("no command"));
    if cmd != "publish" && cmd != "consume" {
        usage(&format!("unknown command {cmd:?}"));
    }
    let mut a = Args {
        cmd,
        brokers: Vec::new(),
        lookupds: Vec::new(),
        topic: String::new(),
        channel: String::new(),
        name: String::new(),
        out: PathBuf::new(),
        rate: 50.0,
        timeout: Duration::from_millis(2500),
        max_in_flight: 20,
        fast_file: None,
        stop_file: None,
        max_seconds: 3600.0,
    };
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--broker" => a.brokers.push(value),
            "--lookupd" => a.lookupds.push(value),
            "--topic" => a.topic = value,
            "--channel" => a.channel = value,
            "--name" => a.name = value,
            "--out" => a.out = PathBuf::from(value),
            "--rate" => a.rate = number(&flag, &value),
            "--timeout-ms" => a.timeout = Duration::from_millis(number(&flag, &value)),
            "--max-in-flight" => a.max_in_flight = number(&flag, &value),
            "--fast-file" => a.fast_file = Some(PathBuf::from(value)),
            "--stop-file" => a.stop_file = Some(PathBuf::from(value)),
            "--max-seconds" => a.max_seconds = number(&flag, &value),
            _ => usage(&format!("unknown flag {flag:?}")),
        }
    }
    if a.topic.is_empty() || a.out.as_os_str().is_empty() {
        usage("--topic and --out are required");
    }
    if a.rate <= 0.0 || a.timeout.is_zero() || a.max_in_flight == 0 {
        usage("--rate, --timeout-ms and --max-in-flight must be positive");
    }
    if a.cmd == "publish" && (a.brokers.is_empty() || a.name.is_empty()) {
        usage("publish needs --broker and --name");
    }
    if a.cmd == "consume" && (a.lookupds.is_empty() || a.channel.is_empty()) {
        usage("consume needs --lookupd and --channel");
    }
    a
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn line(out: &Out, text: String) {
    // A full disk must not stop the run silently: say so once on stderr and go on.
    if let Err(e) = out.borrow_mut().write_all(text.as_bytes()) {
        eprintln!("fault_agent: cannot write the history: {e}");
    }
}

/// One line of detail, without the separators of the history format.
fn clean(text: &str) -> String {
    text.replace(['\t', '\n'], " ").chars().take(200).collect()
}

struct Control {
    stop_file: Option<PathBuf>,
    deadline: Instant,
}

impl Control {
    fn stop(&self) -> bool {
        Instant::now() >= self.deadline || self.stop_file.as_ref().is_some_and(|p| p.exists())
    }
}

async fn publish(a: Args, out: Out, ctl: Control) -> String {
    let config = ProducerConfig::new()
        .connect_timeout(a.timeout)
        .response_timeout(a.timeout);
    let mut producers: HashMap<String, Producer> = HashMap::new();
    let mut down_until: HashMap<String, Instant> = HashMap::new();
    let mut backoff: HashMap<String, Duration> = HashMap::new();
    let (mut seq, mut rr, mut acked) = (0u64, 0usize, 0u64);
    let interval = Duration::from_secs_f64(1.0 / a.rate);
    let mut next = Instant::now();
    while !ctl.stop() {
        let t = Instant::now();
        let ready: Vec<&String> = a
            .brokers
            .iter()
            .filter(|b| down_until.get(*b).is_none_or(|u| *u <= t))
            .collect();
        let Some(broker) = ready.get(rr % ready.len().max(1)).map(|b| (*b).clone()) else {
            glommio::timer::sleep(Duration::from_millis(50)).await;
            continue;
        };
        rr = rr.wrapping_add(1);
        let body = format!("{}-{}", a.name, seq);
        seq += 1;
        let t0 = Instant::now();
        let (kind, detail) = match producers.get(&broker).filter(|p| p.is_connected()) {
            Some(p) => outcome(p.publish(&a.topic, body.clone()).await),
            None => match Producer::connect_with(broker.clone(), config.clone()).await {
                // Nothing was sent on a connection that could not be opened.
                Err(e) => ("F", e.to_string()),
                Ok(p) => {
                    let r = outcome(p.publish(&a.topic, body.clone()).await);
                    producers.insert(broker.clone(), p);
                    r
                }
            },
        };
        let detail = if kind == "A" {
            acked += 1;
            format!("{:.6}", t0.elapsed().as_secs_f64())
        } else {
            if let Some(p) = producers.remove(&broker) {
                p.stop();
            }
            let b = backoff
                .get(&broker)
                .map_or(Duration::from_millis(250), |b| {
                    (*b * 2).min(Duration::from_secs(2))
                });
            backoff.insert(broker.clone(), b);
            down_until.insert(broker.clone(), Instant::now() + b);
            clean(&detail)
        };
        if kind == "A" {
            backoff.remove(&broker);
        }
        line(
            &out,
            format!("{kind}\t{:.6}\t{broker}\t{body}\t{detail}\n", now()),
        );
        next += interval;
        let n = Instant::now();
        if next > n {
            glommio::timer::sleep(next - n).await;
        } else {
            next = n;
        }
    }
    for p in producers.values() {
        p.stop();
    }
    format!("published={seq} acked={acked}")
}

/// The history's kind of a publish's result: an error frame means the broker answered (`E`);
/// anything else that is not OK leaves the outcome unknown (`U`).
fn outcome(r: Result<(), Error>) -> (&'static str, String) {
    match r {
        Ok(()) => ("A", String::new()),
        Err(e @ Error::Broker { .. }) => ("E", e.to_string()),
        Err(e) => ("U", e.to_string()),
    }
}

async fn consume(a: Args, out: Out, ctl: Control) -> Result<String, Error> {
    let received = Rc::new(Cell::new(0u64));
    let slot = Rc::new(Cell::new(Instant::now()));
    let per_message = Duration::from_secs_f64(1.0 / a.rate);
    let config = ConsumerConfig::new(a.topic.clone(), a.channel.clone())
        .max_in_flight(a.max_in_flight)
        // Redelivered messages are counted by the checker, never given up on.
        .max_attempts(0)
        .lookupd_poll_interval(Duration::from_secs(1))
        .lookupd_poll_jitter(0.1)
        .heartbeat_interval(Duration::from_secs(2))
        .reconnect_delay(Duration::from_millis(250))
        .max_reconnect_delay(Duration::from_secs(2))
        .max_backoff_duration(Duration::from_secs(2));
    let (rx, hout, fast) = (received.clone(), out.clone(), a.fast_file.clone());
    let consumer = Consumer::new(config, move |msg: Message| {
        let (rx, out, slot) = (rx.clone(), hout.clone(), slot.clone());
        let paced = !fast.as_ref().is_some_and(|p| p.exists());
        async move {
            if paced {
                // One message per slot: the consumer's rate stays below the publishers'.
                let at = slot.get().max(Instant::now()) + per_message;
                slot.set(at);
                glommio::timer::sleep(at.saturating_duration_since(Instant::now())).await;
            }
            rx.set(rx.get() + 1);
            line(
                &out,
                format!(
                    "R\t{:.6}\t-\t{}\t{}\n",
                    now(),
                    clean(&String::from_utf8_lossy(msg.body())),
                    msg.attempts()
                ),
            );
            HandlerResult::Finish
        }
    })?;
    for l in &a.lookupds {
        // The poller keeps polling a lookup that did not answer the first time.
        if let Err(e) = consumer.connect_to_lookupd(l.clone()).await {
            eprintln!("fault_agent: first poll of lookup {l}: {e}");
        }
    }
    while !ctl.stop() {
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
    consumer.stop().await;
    Ok(format!("received={}", received.get()))
}

fn main() {
    let a = parse_args();
    let file = File::create(&a.out).unwrap_or_else(|e| {
        eprintln!("fault_agent: cannot create {}: {e}", a.out.display());
        std::process::exit(1);
    });
    let out: Out = Rc::new(RefCell::new(LineWriter::new(file)));
    let ctl = Control {
        stop_file: a.stop_file.clone(),
        deadline: Instant::now() + Duration::from_secs_f64(a.max_seconds.max(0.0)),
    };
    let result = LocalExecutor::default().run(async move {
        line(&out, format!("START\t{:.6}\n", now()));
        let summary = if a.cmd == "publish" {
            Ok(publish(a, out.clone(), ctl).await)
        } else {
            consume(a, out.clone(), ctl).await
        };
        if let Ok(s) = &summary {
            line(&out, format!("END\t{:.6}\t{s}\n", now()));
        }
        summary
    });
    if let Err(e) = result {
        eprintln!("fault_agent: {e}");
        std::process::exit(1);
    }
}

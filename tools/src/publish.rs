//! to_nsq: publishes each record of stdin (split at `--delimiter`, one byte, `\n` by default)
//! to `--topic` on every `--nsqd-tcp-address` (each record goes to all of them, as NSQ), at
//! most `--rate` records a second when given. Empty records are skipped.
//!
//! Invariants: a record is published with PUB and its `OK` awaited before the next one is
//! read, so at end of input (exit 0) every record was acknowledged by every destination; a
//! failed publish ends the process with status 1 and a message naming the destination.
//! SIGINT / SIGTERM exit 0 between records (a publish under way is finished first).
//!
//! One difference from NSQ: a last record without a trailing delimiter is published whole
//! (NSQ's to_nsq drops its last byte).

use crate::cli::ProducerFlags;
use crate::cli::{self, Signals};
use crate::goconfig::GoConfig;
use crate::start::{self, ToolOptions};
use clap::Parser;
use client::blocking::Producer;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const TOOL: &str = "to_nsq";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "to_nsq",
    about = "Publishes the lines of stdin to an NSQ topic (NSQ's to_nsq)",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Options {
    /// NSQ topic to publish to
    #[arg(long, default_value = "")]
    pub topic: String,
    /// character to split input from stdin
    #[arg(long, default_value = "\n")]
    pub delimiter: String,
    /// destination nsqd TCP address (may be given multiple times)
    #[arg(long = "nsqd-tcp-address")]
    pub nsqd_tcp_address: Vec<String>,
    /// Throttle messages to n/second. 0 to disable
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub rate: i64,
    /// print version string (not in NSQ's to_nsq; the other tools have it)
    #[arg(long, value_parser = cli::go_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub version: bool,
    #[command(flatten)]
    pub producer: ProducerFlags,
}

impl ToolOptions for Options {
    fn version(&self) -> bool {
        self.version
    }
}

/// Spaces records out to at most `rate` a second, allowing a burst of up to one second's
/// worth after an idle spell (NSQ's balance, capped at `rate`).
pub struct Throttle {
    interval: Duration,
    next: Instant,
}

impl Throttle {
    pub fn new(rate: u64, now: Instant) -> Throttle {
        Throttle {
            interval: Duration::from_secs(1) / rate.clamp(1, u64::from(u32::MAX)) as u32,
            next: now,
        }
    }

    /// How long to wait before the next record at `now`; books it.
    pub fn delay(&mut self, now: Instant) -> Duration {
        let window = Duration::from_secs(1).saturating_sub(self.interval);
        let floor = now.checked_sub(window).unwrap_or(now);
        let at = self.next.max(floor);
        self.next = at + self.interval;
        at.saturating_duration_since(now)
    }
}

/// Splits `input` at `delim`, yielding non-empty records without the delimiter.
pub fn records<R: Read>(input: R, delim: u8) -> impl Iterator<Item = std::io::Result<Vec<u8>>> {
    let mut reader = BufReader::with_capacity(64 * 1024, input);
    std::iter::from_fn(move || loop {
        let mut rec = Vec::new();
        match reader.read_until(delim, &mut rec) {
            Ok(0) => return None,
            Ok(_) => {
                if rec.last() == Some(&delim) {
                    rec.pop();
                }
                if !rec.is_empty() {
                    return Some(Ok(rec));
                }
            }
            Err(e) => return Some(Err(e)),
        }
    })
}

/// The program; the exit status.
pub fn main() -> i32 {
    let Some(opts) = start::options::<Options>(TOOL) else {
        return 0;
    };
    if opts.topic.is_empty() {
        return start::fatal(TOOL, "--topic required");
    }
    if opts.delimiter.len() != 1 {
        return start::fatal(TOOL, "--delimiter must be a single byte");
    }
    let go = match GoConfig::parse(&opts.producer.producer_opt) {
        Ok(g) => g,
        Err(e) => cli::fail(TOOL, format!("--producer-opt: {e}")),
    };
    let signals = match Signals::register().and_then(|s| exit_when_idle().map(|_| s)) {
        Ok(s) => s,
        Err(e) => return start::fatal(TOOL, format!("installing signal handlers: {e}")),
    };
    let config = go
        .producer(client::ProducerConfig::new())
        .user_agent(cli::user_agent(TOOL));
    let mut producers = Vec::new();
    for addr in &opts.nsqd_tcp_address {
        match Producer::connect_with(addr.as_str(), config.clone()) {
            Ok(p) => producers.push(p),
            Err(e) => {
                return start::fatal(
                    TOOL,
                    format!("failed to create nsq.Producer for {addr} - {e}"),
                )
            }
        }
    }
    if producers.is_empty() {
        return start::fatal(TOOL, "--nsqd-tcp-address required");
    }
    let mut throttle = (opts.rate >= 1).then(|| Throttle::new(opts.rate as u64, Instant::now()));
    let delim = opts.delimiter.as_bytes()[0];
    let stdin = std::io::stdin().lock();
    for record in records(stdin, delim) {
        if signals.terminating() {
            return 0;
        }
        let record = match record {
            Ok(r) => r,
            Err(e) => return start::fatal(TOOL, format!("reading stdin: {e}")),
        };
        if let Some(t) = &mut throttle {
            std::thread::sleep(t.delay(Instant::now()));
        }
        let body = bytes::Bytes::from(record);
        PUBLISHING.store(true, Ordering::SeqCst);
        if signals.terminating() {
            return 0;
        }
        for p in &mut producers {
            if let Err(e) = p.publish(&opts.topic, body.clone()) {
                return start::fatal(TOOL, format!("publishing to {}: {e}", p.addr()));
            }
        }
        PUBLISHING.store(false, Ordering::SeqCst);
    }
    0
}

/// True while a record is being published: a signal then waits for its end.
static PUBLISHING: AtomicBool = AtomicBool::new(false);

/// SIGINT / SIGTERM while waiting for input (nothing unacknowledged) end the process at once
/// with status 0; during a publish the loop sees the flag after it.
fn exit_when_idle() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for sig in [SIGINT, SIGTERM] {
        // SAFETY: the handler only reads an atomic and calls `_exit`, both async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, || {
                if !PUBLISHING.load(Ordering::SeqCst) {
                    libc::_exit(0);
                }
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_skip_empty_and_keep_an_unterminated_last() {
        let got: Vec<Vec<u8>> = records(&b"a\n\nbb\nc"[..], b'\n')
            .map(|r| r.expect("read"))
            .collect();
        assert_eq!(got, [b"a".to_vec(), b"bb".to_vec(), b"c".to_vec()]);
        let got: Vec<Vec<u8>> = records(&b"x,y,"[..], b',')
            .map(|r| r.expect("read"))
            .collect();
        assert_eq!(got, [b"x".to_vec(), b"y".to_vec()]);
    }

    #[test]
    fn throttle_spaces_records_and_caps_the_burst() {
        let start = Instant::now();
        let mut t = Throttle::new(10, start);
        assert_eq!(t.delay(start), Duration::ZERO);
        assert_eq!(t.delay(start), Duration::from_millis(100));
        // after a long idle spell, at most one second's worth goes at once
        let later = start + Duration::from_secs(60);
        let burst = (0..20).take_while(|_| t.delay(later).is_zero()).count();
        assert_eq!(burst, 10);
    }
}

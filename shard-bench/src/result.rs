//! The result of one run: what `--json` writes, what `report` reads, and what is printed at
//! the end. The JSON shape is versioned (`format`); fields only ever get added.

use crate::error::{BenchError, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// Bumped when a field changes meaning; readers refuse results from a newer format.
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    pub format: u32,
    pub label: String,
    /// `pub`, `sub`, `pubsub`, `raw-pub` or `raw-sub`.
    pub mode: String,
    /// The command line that produced this result.
    pub command: String,
    pub settings: Settings,
    /// Unix seconds when measuring began.
    pub started_at: u64,
    /// Seconds measured (warm-up excluded).
    pub elapsed_s: f64,
    pub published: Throughput,
    pub consumed: Throughput,
    /// Publishes that failed (each failed command counts once).
    pub errors: u64,
    /// Publish command → OK, in microseconds; one sample per command.
    pub ack_latency_us: Option<Percentiles>,
    /// Stamped send time → consumer, in microseconds; one sample per message.
    pub e2e_latency_us: Option<Percentiles>,
    /// Messages per second, second by second, while measuring.
    pub series: Vec<Sample>,
    pub broker: Option<BrokerUsage>,
    #[serde(default)]
    pub targets: Vec<TargetCheck>,
    /// The host's 1-minute load average at the end (/proc/loadavg): a loaded machine
    /// explains noisy numbers.
    #[serde(default)]
    pub host_load: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub brokers: Vec<String>,
    pub lookupds: Vec<String>,
    pub topic: String,
    pub channels: Vec<String>,
    pub size: usize,
    pub batch_size: usize,
    pub connections: usize,
    pub sub_connections: usize,
    pub max_in_flight: u64,
    /// The consumers' IDENTIFY `output_buffer_timeout` in ms (-1: none).
    #[serde(default)]
    pub output_buffer_timeout_ms: i64,
    pub pipeline: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub rate: Option<u64>,
    pub count: Option<u64>,
    pub threads: usize,
    pub cpus: Vec<usize>,
    /// Publishers on plain threads with the synchronous client (`--blocking`).
    #[serde(default)]
    pub blocking: bool,
    /// What every connection had on: `tls`, `snappy`, `deflate-N`, `auth` (empty: plain).
    #[serde(default)]
    pub features: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Throughput {
    pub messages: u64,
    pub bytes: u64,
    pub msgs_per_s: f64,
    pub mb_per_s: f64,
}

impl Throughput {
    pub fn new(messages: u64, bytes: u64, elapsed_s: f64) -> Throughput {
        let per_s = |n: u64| {
            if elapsed_s > 0.0 {
                n as f64 / elapsed_s
            } else {
                0.0
            }
        };
        Throughput {
            messages,
            bytes,
            msgs_per_s: per_s(messages),
            mb_per_s: per_s(bytes) / 1e6,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    /// The summary of a histogram of nanoseconds, in microseconds; `None` when empty.
    pub fn from_ns(h: &Histogram<u64>) -> Option<Percentiles> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Percentiles {
            count: h.len(),
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        })
    }

    pub fn values(&self) -> [(&'static str, f64); 5] {
        [
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("p99.9", self.p999),
            ("max", self.max),
        ]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since measuring began, at the end of this interval.
    pub t: f64,
    pub pub_per_s: f64,
    pub sub_per_s: f64,
}

/// The broker's cost, from /proc/PID/stat and /proc/PID/status.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BrokerUsage {
    pub pid: u32,
    /// user + system CPU seconds the broker used while measuring.
    pub cpu_s: f64,
    /// CPU seconds per million messages published (= µs per message); `None` if none.
    pub cpu_s_per_million_pub: Option<f64>,
    pub cpu_s_per_million_sub: Option<f64>,
    /// VmHWM at the end: the broker's peak resident memory since it started.
    pub peak_rss_kb: u64,
    /// VmRSS at the end.
    pub rss_kb: u64,
}

impl BenchResult {
    /// The messages per second the run is about: consumed if it consumes, else published.
    pub fn primary_rate(&self) -> f64 {
        if self.consumes() {
            self.consumed.msgs_per_s
        } else {
            self.published.msgs_per_s
        }
    }

    pub fn primary_mb(&self) -> f64 {
        if self.consumes() {
            self.consumed.mb_per_s
        } else {
            self.published.mb_per_s
        }
    }

    /// Broker CPU µs per message of the primary direction.
    pub fn cpu_us_per_msg(&self) -> Option<f64> {
        let b = self.broker.as_ref()?;
        if self.consumes() {
            b.cpu_s_per_million_sub
        } else {
            b.cpu_s_per_million_pub
        }
    }

    pub fn consumes(&self) -> bool {
        self.mode.ends_with("sub")
    }

    pub fn metric(&self, m: Metric) -> Option<f64> {
        match m {
            Metric::PubRate => Some(self.published.msgs_per_s),
            Metric::SubRate => Some(self.consumed.msgs_per_s),
            Metric::AckP99Us => self.ack_latency_us.map(|p| p.p99),
            Metric::E2eP99Us => self.e2e_latency_us.map(|p| p.p99),
            Metric::E2eP999Us => self.e2e_latency_us.map(|p| p.p999),
            Metric::CpuUsPerMsg => self.cpu_us_per_msg(),
            Metric::CpuUsPerPub => self.broker.and_then(|b| b.cpu_s_per_million_pub),
            Metric::CpuUsPerSub => self.broker.and_then(|b| b.cpu_s_per_million_sub),
        }
    }

    /// Checks `targets` against this result and stores the outcome.
    pub fn check_targets(&mut self, targets: &[Target]) {
        self.targets = targets
            .iter()
            .map(|t| {
                let measured = self.metric(t.metric);
                TargetCheck {
                    goal: t.to_string(),
                    measured,
                    met: measured.is_some_and(|v| t.is_met_by(v)),
                }
            })
            .collect();
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a result always serializes")
    }

    pub fn from_json(text: &str) -> std::result::Result<BenchResult, serde_json::Error> {
        serde_json::from_str(text)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_json() + "\n").map_err(|source| BenchError::File {
            path: path.to_path_buf(),
            source,
        })
    }

    pub fn read(path: &Path) -> Result<BenchResult> {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::File {
            path: path.to_path_buf(),
            source,
        })?;
        let r = BenchResult::from_json(&text).map_err(|source| BenchError::BadResult {
            path: path.to_path_buf(),
            source,
        })?;
        if r.format > FORMAT {
            return Err(BenchError::InvalidOption(format!(
                "{} has result format {}, newer than this shard-bench ({FORMAT})",
                path.display(),
                r.format
            )));
        }
        Ok(r)
    }
}

impl fmt::Display for BenchResult {
    /// The human summary printed at the end of a run.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "== {} ({:.1} s measured)", self.label, self.elapsed_s)?;
        for (name, t) in [("published", &self.published), ("consumed", &self.consumed)] {
            if t.messages > 0 {
                writeln!(
                    f,
                    "{name:>10}: {} msgs, {} msg/s, {:.1} MB/s",
                    t.messages,
                    group(t.msgs_per_s),
                    t.mb_per_s
                )?;
            }
        }
        if self.errors > 0 {
            writeln!(f, "{:>10}: {}", "errors", self.errors)?;
        }
        for (name, p) in [("ack", &self.ack_latency_us), ("e2e", &self.e2e_latency_us)] {
            if let Some(p) = p {
                write!(f, "{name:>10}:")?;
                for (q, v) in p.values() {
                    write!(f, " {q} {}", micros(v))?;
                }
                writeln!(f, "  ({} samples)", p.count)?;
            }
        }
        if let Some(b) = &self.broker {
            write!(f, "{:>10}: pid {} cpu {:.2} s", "broker", b.pid, b.cpu_s)?;
            if let Some(x) = b.cpu_s_per_million_pub {
                write!(f, ", {x:.3} cpu-s per M published")?;
            }
            if let Some(x) = b.cpu_s_per_million_sub {
                write!(f, ", {x:.3} cpu-s per M consumed")?;
            }
            writeln!(f, ", peak RSS {:.1} MB", b.peak_rss_kb as f64 / 1024.0)?;
        }
        if let Some(load) = self.host_load {
            writeln!(f, "{:>10}: load average {load:.2}", "host")?;
        }
        for t in &self.targets {
            writeln!(
                f,
                "{:>10}: {} measured {} → {}",
                "target",
                t.goal,
                t.measured.map_or("n/a".to_string(), |v| format!("{v:.3}")),
                if t.met { "met" } else { "NOT met" }
            )?;
        }
        Ok(())
    }
}

/// `1234567.8` → `1,234,568`.
pub fn group(v: f64) -> String {
    let s = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Microseconds, in the unit that reads best.
pub fn micros(us: f64) -> String {
    if us >= 1_000_000.0 {
        format!("{:.2}s", us / 1e6)
    } else if us >= 1000.0 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{us:.0}µs")
    }
}

/// What a `--target` can be about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    PubRate,
    SubRate,
    AckP99Us,
    E2eP99Us,
    E2eP999Us,
    CpuUsPerMsg,
    CpuUsPerPub,
    CpuUsPerSub,
}

const METRICS: [(&str, Metric); 8] = [
    ("pub_rate", Metric::PubRate),
    ("sub_rate", Metric::SubRate),
    ("ack_p99_us", Metric::AckP99Us),
    ("e2e_p99_us", Metric::E2eP99Us),
    ("e2e_p999_us", Metric::E2eP999Us),
    ("cpu_us_per_msg", Metric::CpuUsPerMsg),
    ("cpu_us_per_pub", Metric::CpuUsPerPub),
    ("cpu_us_per_sub", Metric::CpuUsPerSub),
];

/// A goal such as `sub_rate>=1200000` or `e2e_p99_us<=1000`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub metric: Metric,
    pub at_least: bool,
    pub value: f64,
}

impl Target {
    pub fn is_met_by(&self, v: f64) -> bool {
        if self.at_least {
            v >= self.value
        } else {
            v <= self.value
        }
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Target, String> {
        let (name, at_least, value) = if let Some((n, v)) = s.split_once(">=") {
            (n, true, v)
        } else if let Some((n, v)) = s.split_once("<=") {
            (n, false, v)
        } else {
            return Err(format!("{s:?}: expected METRIC>=N or METRIC<=N"));
        };
        let metric = METRICS
            .iter()
            .find(|(n, _)| *n == name.trim())
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                let known: Vec<&str> = METRICS.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown metric {:?} (known: {})",
                    name.trim(),
                    known.join(", ")
                )
            })?;
        let value = value
            .trim()
            .replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("{s:?}: {:?} is not a number", value.trim()))?;
        Ok(Target {
            metric,
            at_least,
            value,
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = METRICS
            .iter()
            .find(|(_, m)| *m == self.metric)
            .map_or("?", |(n, _)| n);
        let op = if self.at_least { ">=" } else { "<=" };
        write!(f, "{name}{op}{}", self.value)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetCheck {
    pub goal: String,
    pub measured: Option<f64>,
    pub met: bool,
}

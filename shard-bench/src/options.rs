//! The command line: `shard-bench pub | sub | pubsub | raw | sink | report | compare`, and the
//! checks that turn it into a [`LoadPlan`] a run can trust.
//!
//! Flag names follow nsq's own tools where they have one (`--nsqd-tcp-address`,
//! `--lookupd-http-address`, `--topic`, `--channel`, `--size`, `--batch-size`,
//! `--max-in-flight`); durations take Go's forms (`10s`, `250ms`, `1m30s`) as the broker's do.

use crate::error::{BenchError, Result};
use crate::result::Target;
use clap::{Args, Parser, Subcommand, ValueEnum};
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use std::path::PathBuf;
use std::time::Duration;

/// Bytes at the start of every body: the send time and a marker (see [`crate::payload`]).
pub const MIN_MESSAGE_SIZE: usize = crate::payload::STAMP_LEN;

#[derive(Parser, Debug)]
#[command(
    name = "shard-bench",
    version,
    about = "Load tool for NSQ-compatible brokers (ours or nsqd): throughput, HDR latency, \
             broker CPU per message and peak RSS, charts"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Publish (PUB, or MPUB with --batch-size > 1) as fast as acknowledged, or at --rate.
    Pub(LoadArgs),
    /// Consume a topic's channel(s) and FIN every message (e.g. to drain a backlog).
    Sub(LoadArgs),
    /// Publish and consume at once; end-to-end latency from the stamp in each body.
    Pubsub(LoadArgs),
    /// The same client and framing against a trivial in-process sink: the ceiling.
    Raw(RawArgs),
    /// Run the trivial sink of `raw` as a server on an address, until killed: the ceiling of a
    /// broker on this runtime, for any client (`compare`, NSQ's bench tools).
    Sink(SinkArgs),
    /// Turn result files into a markdown table and SVG charts.
    Report(ReportArgs),
    /// One workload against two or more broker commands, alternately, a fresh broker each
    /// run; prints the medians and the ratios (e.g. ours against an nsqd).
    Compare(crate::compare::CompareArgs),
}

/// Everything a load run takes.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Broker TCP address, host:port (repeatable; default 127.0.0.1:4150 without lookups).
    #[arg(long = "nsqd-tcp-address", value_name = "ADDR")]
    pub nsqd_tcp_addresses: Vec<String>,
    /// Lookup HTTP address, host:port, to discover the brokers of --topic (repeatable).
    #[arg(long = "lookupd-http-address", value_name = "ADDR")]
    pub lookupd_http_addresses: Vec<String>,
    /// Topic to publish to / consume from.
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Channel to consume (repeatable: each channel gets its own consumers).
    #[arg(long = "channel", value_name = "NAME")]
    pub channels: Vec<String>,
    /// Message body size in bytes (at least 16: the send time and a marker lead each body).
    #[arg(long, default_value_t = 200)]
    pub size: usize,
    /// Messages per publish command: 1 sends PUB, more send MPUB.
    #[arg(long, default_value_t = 200)]
    pub batch_size: usize,
    /// Publishing connections.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Consumer connections per channel (default: --connections).
    #[arg(long)]
    pub sub_connections: Option<usize>,
    /// Most messages in flight per consumer connection (its RDY).
    #[arg(long, default_value_t = 2500)]
    pub max_in_flight: u64,
    /// How long the broker may hold messages in a consumer connection's output buffer
    /// (IDENTIFY's `output_buffer_timeout`; go-nsq's 250ms by default). `-1`: written at once.
    #[arg(long, default_value = "250ms", value_parser = parse_output_buffer_timeout,
          allow_hyphen_values = true)]
    // Spelled out so that clap takes the parser's `Option` as the value, not as "optional".
    pub output_buffer_timeout: ::std::option::Option<Duration>,
    /// Publish commands outstanding per connection when not rate-limited (1: send, wait for
    /// OK, send the next).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// How long to measure (after --warmup). Also the deadline of a --count run.
    #[arg(long, default_value = "10s", value_parser = protocol::duration::parse_flag_duration)]
    pub duration: Duration,
    /// Time to run before measuring; its messages count toward --count but not the results.
    #[arg(long, default_value = "0s", value_parser = protocol::duration::parse_flag_duration)]
    pub warmup: Duration,
    /// Open loop: publish this many messages per second in total on a fixed timetable, and
    /// measure latency from each message's scheduled time (no coordinated omission).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Stop after this many messages: published (pub), or consumed per channel (sub, pubsub).
    #[arg(long)]
    pub count: Option<u64>,
    /// Open loop only: most publish commands awaiting their OK at once, per connection.
    #[arg(long, default_value_t = 4096)]
    pub max_outstanding: usize,
    /// Publish from plain threads with the synchronous client, one thread per publishing
    /// connection blocked in `read` until each OK (closed loop, --pipeline 1, no --rate). The
    /// cheapest client for one-at-a-time round trips. Each thread connects from, and is pinned
    /// with, the executor that owns its connection.
    #[arg(long)]
    pub blocking: bool,
    /// glommio executors (threads) the bench runs on; connections are spread over them.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Pin executor i to the i-th CPU of this list (e.g. `1` or `0,1`); default: not pinned.
    #[arg(long, value_delimiter = ',', value_name = "CPU")]
    pub cpus: Vec<usize>,
    /// The broker's PID: report its CPU seconds per million messages and its peak RSS.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Write the result as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// A name for this run in reports (default: the mode and main settings).
    #[arg(long)]
    pub label: Option<String>,
    /// A goal to check, `METRIC>=N` or `METRIC<=N` (repeatable); see `Target` for metrics.
    #[arg(long = "target", value_name = "GOAL")]
    pub targets: Vec<Target>,
    /// No progress line each second.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub features: FeatureArgs,
}

/// TLS, compression and AUTH on every connection of a pub, sub or pubsub run, so that their
/// cost can be measured against the same run without them.
#[derive(Args, Debug, Clone, Default)]
pub struct FeatureArgs {
    /// Upgrade every connection to TLS (IDENTIFY's tls_v1); the run fails if the broker
    /// does not.
    #[arg(long)]
    pub tls: bool,
    /// CA certificates (PEM) to check the broker's certificate with (default: the system's).
    #[arg(long, value_name = "FILE")]
    pub tls_root_ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for a broker with --tls-client-auth-policy; needs --tls-key.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Do not check the broker's certificate chain and name.
    #[arg(long)]
    pub tls_insecure_skip_verify: bool,
    /// Snappy compression on every connection.
    #[arg(long)]
    pub snappy: bool,
    /// Deflate compression on every connection.
    #[arg(long)]
    pub deflate: bool,
    /// Deflate level, 1 (fastest) ..= 9 (smallest).
    #[arg(long, default_value_t = 6)]
    pub deflate_level: u32,
    /// Secret sent in AUTH to a broker that requires it.
    #[arg(long, value_name = "SECRET")]
    pub auth_secret: Option<String>,
}

impl FeatureArgs {
    fn any(&self) -> bool {
        self.tls || self.snappy || self.deflate || self.auth_secret.is_some()
    }

    /// The client settings these flags describe, checked (the certificate files are read).
    pub fn features(&self) -> std::result::Result<client::Features, String> {
        let tls_flag = self.tls_root_ca_file.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_insecure_skip_verify;
        if tls_flag && !self.tls {
            return Err("--tls-root-ca-file, --tls-cert, --tls-key and \
                        --tls-insecure-skip-verify need --tls"
                .into());
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("--tls-cert and --tls-key go together".into());
        }
        if self.snappy && self.deflate {
            return Err("--snappy and --deflate cannot both be on".into());
        }
        if !(1..=9).contains(&self.deflate_level) {
            return Err("--deflate-level must be in 1..=9".into());
        }
        let tls_config = client::TlsConfig {
            root_ca_file: self.tls_root_ca_file.clone(),
            cert_file: self.tls_cert.clone(),
            key_file: self.tls_key.clone(),
            server_name: None,
            insecure_skip_verify: self.tls_insecure_skip_verify,
        };
        let features = client::Features {
            tls_v1: self.tls,
            tls_config,
            snappy: self.snappy,
            deflate: self.deflate,
            deflate_level: self.deflate_level,
            auth_secret: self.auth_secret.clone(),
        };
        features.tls_client_config().map_err(|e| e.to_string())?;
        Ok(features)
    }

    /// What is on, for labels and results: `tls`, `snappy`, `deflate-N`, `auth`.
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if self.tls {
            names.push("tls".to_string());
        }
        if self.snappy {
            names.push("snappy".to_string());
        }
        if self.deflate {
            names.push(format!("deflate-{}", self.deflate_level));
        }
        if self.auth_secret.is_some() {
            names.push("auth".to_string());
        }
        names
    }
}

/// Which side `raw` drives against its sink.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawWorkload {
    /// Producers against a sink that answers OK to every publish.
    Pub,
    /// Consumers against a sink that sends messages as fast as RDY allows.
    Sub,
}

#[derive(Args, Debug, Clone)]
pub struct RawArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// What to measure against the sink.
    #[arg(long, value_enum, default_value = "pub")]
    pub workload: RawWorkload,
    /// Pin the sink's executor to this CPU (default: not pinned).
    #[arg(long)]
    pub sink_cpu: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct SinkArgs {
    /// Where to listen, host:port.
    #[arg(long, default_value = "127.0.0.1:4150")]
    pub tcp_address: std::net::SocketAddr,
    /// Pin its executor to this CPU (default: not pinned; with --executors above 1 the
    /// executors are pinned to CPUs 0, 1, ... and this is refused).
    #[arg(long, conflicts_with = "executors")]
    pub cpu: Option<usize>,
    /// Executors serving connections: the first accepts and gives the connections to the
    /// executors in turn (connection i to executor i mod N), one executor per CPU at most.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub executors: u64,
    /// Body size of the messages it sends to a subscriber.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(MIN_MESSAGE_SIZE as u64..))]
    pub size: u64,
    /// Keep every published body in files in this directory (created if missing), written
    /// 1 MiB at a time with direct I/O and fdatasynced after each write, before its OK: the
    /// ceiling of a broker that keeps a topic on disk. Default: keep nothing.
    #[arg(long, value_name = "DIR")]
    pub data_path: Option<PathBuf>,
    /// With --data-path: answer a publish only once the write holding it is done (the next
    /// write starts as soon as the last ends, with whatever came meanwhile), as the broker
    /// does under --mem-queue-size 0; an fdatasync once 1 MiB is written since the last.
    #[arg(long, requires = "data_path")]
    pub ack_after_write: bool,
    /// Deliver to subscribers no more messages than were published (on the same executor)
    /// and not yet delivered, as a broker delivers what it is sent; default: as many as
    /// their RDY allows.
    #[arg(long)]
    pub relay: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Result files written by --json.
    #[arg(required = true, value_name = "RESULT")]
    pub results: Vec<PathBuf>,
    /// Directory for report.md, throughput.svg and latency.svg (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Title above the table and on the charts.
    #[arg(long, default_value = "shard-bench")]
    pub title: String,
}

/// What a run publishes and consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pub,
    Sub,
    PubSub,
}

impl Mode {
    pub fn publishes(self) -> bool {
        matches!(self, Mode::Pub | Mode::PubSub)
    }
    pub fn consumes(self) -> bool {
        matches!(self, Mode::Sub | Mode::PubSub)
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pub => "pub",
            Mode::Sub => "sub",
            Mode::PubSub => "pubsub",
        }
    }
}

/// A validated load run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// `pub`, `sub`, `pubsub`, `raw-pub` or `raw-sub`: what the result is called.
    pub mode_name: String,
    pub mode: Mode,
    pub brokers: Vec<String>,
    pub lookupds: Vec<String>,
    pub topic: String,
    pub channels: Vec<String>,
    pub size: usize,
    pub batch_size: usize,
    pub connections: usize,
    pub sub_connections: usize,
    pub max_in_flight: u64,
    /// IDENTIFY's `output_buffer_timeout` of the consumers (`None`: -1, no holding).
    pub output_buffer_timeout: Option<Duration>,
    pub pipeline: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub rate: Option<u64>,
    pub count: Option<u64>,
    pub max_outstanding: usize,
    pub blocking: bool,
    pub threads: usize,
    pub cpus: Vec<usize>,
    pub broker_pid: Option<u32>,
    pub json: Option<PathBuf>,
    pub label: String,
    pub targets: Vec<Target>,
    pub quiet: bool,
    /// TLS, compression and AUTH on every connection.
    pub features: client::Features,
    /// Their names (`tls`, `snappy`, `deflate-N`, `auth`), for results.
    pub feature_names: Vec<String>,
}

impl LoadArgs {
    /// Checks the flags together and fills in defaults.
    pub fn plan(&self, mode: Mode, mode_name: &str) -> Result<LoadPlan> {
        let bad = |s: String| Err(BenchError::InvalidOption(s));
        if !is_valid_topic_name(&self.topic) {
            return bad(format!(
                "--topic {:?} is not a valid topic name",
                self.topic
            ));
        }
        let channels = if self.channels.is_empty() {
            vec!["bench".to_string()]
        } else {
            self.channels.clone()
        };
        if let Some(c) = channels.iter().find(|c| !is_valid_channel_name(c)) {
            return bad(format!("--channel {c:?} is not a valid channel name"));
        }
        if self.size < MIN_MESSAGE_SIZE {
            return bad(format!(
                "--size must be at least {MIN_MESSAGE_SIZE} (each body starts with its send time)"
            ));
        }
        for (flag, v) in [
            ("--batch-size", self.batch_size),
            ("--connections", self.connections),
            ("--pipeline", self.pipeline),
            ("--max-outstanding", self.max_outstanding),
            ("--threads", self.threads),
        ] {
            if v == 0 {
                return bad(format!("{flag} must be at least 1"));
            }
        }
        if self.sub_connections == Some(0) {
            return bad("--sub-connections must be at least 1".into());
        }
        if self.max_in_flight == 0 {
            return bad("--max-in-flight must be at least 1".into());
        }
        if self.duration.is_zero() {
            return bad("--duration must be positive".into());
        }
        if self.rate == Some(0) {
            return bad("--rate must be positive".into());
        }
        if self.count == Some(0) {
            return bad("--count must be positive".into());
        }
        if !mode.publishes() && self.rate.is_some() {
            return bad("--rate needs a mode that publishes (pub, pubsub)".into());
        }
        if self.blocking {
            if !mode.publishes() {
                return bad("--blocking needs a mode that publishes (pub, pubsub)".into());
            }
            if self.rate.is_some() {
                return bad("--blocking is closed loop: it does not take --rate".into());
            }
            if self.pipeline > 1 {
                return bad("--blocking sends one command at a time: --pipeline must be 1".into());
            }
        }
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(cpu) = self.cpus.iter().find(|&&c| c >= online) {
            return bad(format!(
                "--cpus names CPU {cpu}, but only {online} are online"
            ));
        }
        if mode_name.starts_with("raw") && self.features.any() {
            return bad(
                "raw's sink speaks neither TLS, compression nor AUTH: measure them with pub, \
                 sub or pubsub"
                    .into(),
            );
        }
        let features = match self.features.features() {
            Ok(f) => f,
            Err(e) => return bad(e),
        };
        let mut brokers = self.nsqd_tcp_addresses.clone();
        if brokers.is_empty() && self.lookupd_http_addresses.is_empty() {
            brokers.push("127.0.0.1:4150".to_string());
        }
        let sub_connections = self.sub_connections.unwrap_or(self.connections);
        let label = self.label.clone().unwrap_or_else(|| {
            default_label(mode_name, self, mode, sub_connections, channels.len())
        });
        Ok(LoadPlan {
            mode_name: mode_name.to_string(),
            mode,
            brokers,
            lookupds: self.lookupd_http_addresses.clone(),
            topic: self.topic.clone(),
            channels,
            size: self.size,
            batch_size: self.batch_size,
            connections: self.connections,
            sub_connections,
            max_in_flight: self.max_in_flight,
            output_buffer_timeout: self.output_buffer_timeout,
            pipeline: self.pipeline,
            duration: self.duration,
            warmup: self.warmup,
            rate: self.rate,
            count: self.count,
            max_outstanding: self.max_outstanding,
            blocking: self.blocking,
            threads: self.threads,
            cpus: self.cpus.clone(),
            broker_pid: self.broker_pid,
            json: self.json.clone(),
            label,
            targets: self.targets.clone(),
            quiet: self.quiet,
            features,
            feature_names: self.features.names(),
        })
    }
}

fn default_label(
    mode_name: &str,
    a: &LoadArgs,
    mode: Mode,
    sub_connections: usize,
    channels: usize,
) -> String {
    let mut parts = vec![mode_name.to_string()];
    if mode.publishes() {
        let cmd = if a.batch_size == 1 {
            "PUB".to_string()
        } else {
            format!("MPUB {}", a.batch_size)
        };
        parts.push(format!("{cmd} x{} conn", a.connections));
        if a.blocking {
            parts.push("blocking".to_string());
        }
        if let Some(r) = a.rate {
            parts.push(format!("@{r}/s"));
        }
    }
    if mode.consumes() {
        parts.push(format!("{channels} ch x{sub_connections} conn"));
    }
    parts.extend(a.features.names());
    parts.join(" ")
}

impl LoadPlan {
    /// Bench executors to start: never more than there are connections to spread.
    pub fn executors(&self) -> usize {
        let mut conns = 0;
        if self.mode.publishes() {
            conns += self.connections;
        }
        if self.mode.consumes() {
            conns += self.sub_connections * self.channels.len();
        }
        self.threads.min(conns.max(1))
    }

    /// Where executor `i` runs.
    pub fn placement(&self, i: usize) -> Option<usize> {
        if self.cpus.is_empty() {
            None
        } else {
            Some(self.cpus[i % self.cpus.len()])
        }
    }

    /// The hard deadline of the whole run, connecting and stopping included.
    pub fn hard_limit(&self) -> Duration {
        self.warmup + self.duration + Duration::from_secs(20)
    }
}

/// `--output-buffer-timeout`: a Go duration, or `-1` for none.
fn parse_output_buffer_timeout(s: &str) -> std::result::Result<Option<Duration>, String> {
    if s.trim() == "-1" {
        return Ok(None);
    }
    let d = protocol::duration::parse_flag_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err("at least 1ms, or -1 for none".to_string());
    }
    Ok(Some(d))
}

//! The command line as clap reads it ([`Args`]): every nsqd flag with its name, meaning and
//! default, plus ours; the config-file keys nsqd spells differently ([`RENAMED_KEYS`]) and
//! those it knows that stand for no flag here ([`IGNORED_KEYS`]); and the flags accepted for
//! compatibility that have no effect here ([`Args::without_effect`]).
//! Turning them into a checked [`super::Config`] is `config/mod.rs`'s job.

use super::size;
use clap::Parser;
use protocol::duration::parse_flag_duration;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "broker",
    // Scripts that parse nsqd's `nsqd v1.3.0 (built w/go...)` find `nsqd v1.3.0` here too.
    version = concat!(env!("CARGO_PKG_VERSION"), " (nsqd v1.3.0-compatible)"),
    about = "NSQ-compatible message broker (a drop-in nsqd), one shard per core on io_uring",
    // As Go's flag package: a flag given twice takes its last value (an operator's extra
    // flags can override a unit file's); list flags still add up.
    args_override_self = true
)]
pub struct Args {
    /// address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)
    #[arg(long, default_value = "0.0.0.0:4150")]
    pub tcp_address: String,
    /// address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket)
    #[arg(long, default_value = "0.0.0.0:4151")]
    pub http_address: String,
    /// <addr>:<port> to listen on for HTTPS clients: the HTTP API over TLS, with --tls-cert
    /// and --tls-key (default 0.0.0.0:4152 when they are given; "" for none)
    #[arg(long)]
    pub https_address: Option<String>,
    /// address that will be registered with lookupd (defaults to the OS hostname)
    #[arg(long)]
    pub broadcast_address: Option<String>,
    /// TCP port that will be registered with lookupd (defaults to the TCP port we listen on)
    #[arg(long, default_value_t = 0)]
    pub broadcast_tcp_port: u16,
    /// HTTP port that will be registered with lookupd (defaults to the HTTP port we listen on)
    #[arg(long, default_value_t = 0)]
    pub broadcast_http_port: u16,
    /// lookupd TCP address (may be given multiple times)
    #[arg(long = "lookupd-tcp-address")]
    pub lookupd_tcp_addresses: Vec<String>,
    /// path to store disk-backed messages
    #[arg(long, default_value = ".")]
    pub data_path: PathBuf,
    /// number of messages to keep in memory (per topic/channel)
    #[arg(long, default_value_t = 10_000)]
    pub mem_queue_size: u64,
    /// number of bytes per diskqueue file before rolling
    #[arg(long, default_value_t = 100 * 1024 * 1024)]
    pub max_bytes_per_file: u64,
    /// how long a topic keeps what every channel has finished (Go duration; 0: not kept)
    #[arg(long, default_value = "0", value_parser = parse_flag_duration)]
    pub retention_time: Duration,
    /// bytes of a topic's history kept (1024, 512MiB, 10GiB, 1GB; 0: none kept)
    #[arg(long, default_value = "0", value_parser = size::parse_byte_size)]
    pub retention_bytes: u64,
    /// deliveries before a message goes to its channel's dead-letter topic (0: unlimited)
    #[arg(long, default_value_t = 0)]
    pub max_attempts: u16,
    /// number of messages per diskqueue fsync
    #[arg(long, default_value_t = 2500)]
    pub sync_every: u64,
    /// duration of time per diskqueue fsync
    #[arg(long, default_value = "2s", value_parser = parse_flag_duration)]
    pub sync_timeout: Duration,
    /// answer PUB/MPUB/DPUB only after the fsync that covers them (group commit)
    #[arg(long, default_value_t = false)]
    pub durable: bool,
    /// default duration to wait before auto-requeueing a message
    #[arg(long, default_value = "60s", value_parser = parse_flag_duration)]
    pub msg_timeout: Duration,
    /// maximum duration before a message will timeout
    #[arg(long, default_value = "15m", value_parser = parse_flag_duration)]
    pub max_msg_timeout: Duration,
    /// maximum size of a single message in bytes
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_msg_size: u64,
    /// maximum requeuing timeout for a message
    #[arg(long, default_value = "1h", value_parser = parse_flag_duration)]
    pub max_req_timeout: Duration,
    /// maximum size of a single command body
    #[arg(long, default_value_t = 5 * 1024 * 1024)]
    pub max_body_size: u64,
    /// maximum number of consumers per channel (0 = no limit)
    #[arg(long, default_value_t = 0)]
    pub max_channel_consumers: u64,
    /// maximum RDY count for a client
    #[arg(long, default_value_t = 2500)]
    pub max_rdy_count: u64,
    /// maximum client configurable duration of time between client heartbeats
    #[arg(long, default_value = "60s", value_parser = parse_flag_duration)]
    pub max_heartbeat_interval: Duration,
    /// maximum client configurable size (in bytes) for a client output buffer
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_output_buffer_size: u64,
    /// maximum client configurable duration of time between flushing to a client
    #[arg(long, default_value = "30s", value_parser = parse_flag_duration)]
    pub max_output_buffer_timeout: Duration,
    /// minimum client configurable duration of time between flushing to a client
    #[arg(long, default_value = "25ms", value_parser = parse_flag_duration)]
    pub min_output_buffer_timeout: Duration,
    /// default duration of time between flushing data to clients
    #[arg(long, default_value = "250ms", value_parser = parse_flag_duration)]
    pub output_buffer_timeout: Duration,
    /// message processing time percentiles (as float (0, 1.0]) to track (can be given multiple
    /// times or comma separated '1.0,0.99,0.95')
    #[arg(long = "e2e-processing-latency-percentile", value_delimiter = ',')]
    pub e2e_processing_latency_percentiles: Vec<f64>,
    /// calculate end to end latency quantiles for this duration of time
    #[arg(long, default_value = "10m", value_parser = parse_flag_duration)]
    pub e2e_processing_latency_window_time: Duration,
    /// UDP <addr>:<port> of a statsd daemon for pushing stats
    #[arg(long, default_value = "")]
    pub statsd_address: String,
    /// prefix used for keys sent to statsd (%s for host replacement)
    #[arg(long, default_value = "nsq.%s")]
    pub statsd_prefix: String,
    /// duration between pushing to statsd
    #[arg(long, default_value = "60s", value_parser = parse_flag_duration)]
    pub statsd_interval: Duration,
    /// toggle sending memory stats to statsd (nsqd's mem.* names; see README)
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub statsd_mem_stats: bool,
    /// the size in bytes of statsd UDP packets
    #[arg(long, default_value_t = 508)]
    pub statsd_udp_packet_size: usize,
    /// skip ephemeral topics and channels when sending stats to statsd
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub statsd_exclude_ephemeral: bool,
    /// unique part for message IDs, (int) in range [0,1024) (kept for nsqd compatibility)
    #[arg(long, default_value_t = 0)]
    pub node_id: u64,
    /// log level: debug, info, warn, error or fatal
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// <addr>:<port> or a full url to query auth server (may be given multiple times)
    #[arg(long = "auth-http-address")]
    pub auth_http_addresses: Vec<String>,
    /// HTTP method to use for auth server requests (get or post)
    #[arg(long, default_value = "get")]
    pub auth_http_request_method: String,
    /// timeout for HTTP connect (to the auth servers)
    #[arg(long, default_value = "2s", value_parser = parse_flag_duration)]
    pub http_client_connect_timeout: Duration,
    /// timeout for HTTP request (to the auth servers)
    #[arg(long, default_value = "5s", value_parser = parse_flag_duration)]
    pub http_client_request_timeout: Duration,
    // ---- TLS and compression on TCP connections (nsqd's flags; see crate::tls) ----
    /// path to certificate file
    #[arg(long, default_value = "")]
    pub tls_cert: String,
    /// path to key file
    #[arg(long, default_value = "")]
    pub tls_key: String,
    /// client certificate auth policy ('require' or 'require-verify'); implies --tls-required
    #[arg(long, default_value = "")]
    pub tls_client_auth_policy: String,
    /// path to certificate authority file (the CA client certificates must chain to)
    #[arg(long, default_value = "")]
    pub tls_root_ca_file: String,
    /// require TLS for client connections (true, false, tcp-https); bare: true
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub tls_required: String,
    /// minimum TLS version acceptable ('tls1.2' or 'tls1.3'; 'tls1.0' and 'tls1.1' mean
    /// tls1.2, the oldest there is here)
    #[arg(long, default_value = "")]
    pub tls_min_version: String,
    /// enable snappy feature negotiation (client compression); bare: true
    #[arg(long, default_value = "true", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub snappy: bool,
    /// enable deflate feature negotiation (client compression); bare: true
    #[arg(long, default_value = "true", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub deflate: bool,
    /// maximum deflate compression level a client can negotiate (1-9)
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub max_deflate_level: u64,
    /// number of shards: one glommio executor pinned to each (default: the CPUs this process may use)
    #[arg(long)]
    pub shards: Option<usize>,
    /// which shard takes a new connection: `cpu` = a shard on the CPU that received it (keeps a
    /// connection's packets and wake-ups on one core; needs a multi-queue NIC or loopback to
    /// spread), `hash` = the kernel's hash of the addresses
    #[arg(long, value_enum, default_value = "cpu")]
    pub connection_steering: crate::sys::listen::Steering,
    /// move a TCP connection to the shard that owns the topic of its SUB or of its first
    /// PUB, MPUB or DPUB, once; not one running TLS, compression or AUTH. Its publishes and
    /// deliveries then take no hop between shards; bare: true
    #[arg(long, default_value = "true", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub move_to_owner: bool,
    /// how long a shard that ran out of work keeps polling before it sleeps (default 0: sleep
    /// at once). 20-50us saves a wake-up per hop under load when the broker has its cores to
    /// itself; where clients share the cores it takes CPU from them
    #[arg(long, default_value = "0s", value_parser = parse_flag_duration)]
    pub spin_before_park: Duration,
    /// <host>:<port> other brokers reach this one on for replication (broker to broker); enables
    /// the session with the replication controller in the lookups (default: none, no
    /// replication)
    #[arg(long)]
    pub replication_address: Option<String>,
    /// copies of each new topic's log, on that many brokers of the cluster (needs
    /// --replication-address and lookups running the controller); 1: not replicated
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub replicas: u32,
    /// replicas that must hold a message before its publish is answered OK (default: a
    /// majority of --replicas)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub min_insync_replicas: Option<u32>,
    /// a publish to a replicated topic not stored on enough replicas within this gets
    /// E_PUB_FAILED
    #[arg(long, default_value = "5s", value_parser = parse_flag_duration)]
    pub replication_timeout: Duration,
    /// path to config file (nsqd's TOML keys; flags given here win over the file)
    #[arg(long)]
    pub config: Option<String>,
    /// log message prefix (accepted for nsqd compatibility; log lines carry no prefix)
    #[arg(long, default_value = "[nsqd] ")]
    pub log_prefix: String,
    /// [deprecated] has no effect, use --log-level
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, default_value_t = false)]
    pub verbose: bool,
    /// [deprecated] use --node-id (accepted; no effect)
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, default_value_t = false)]
    pub worker_id: bool,
    /// nsqd's timeout scan (no effect here: every channel's timers are exact, see ARCHITECTURE.md)
    #[arg(long, default_value_t = 4)]
    pub queue_scan_worker_pool_max: u64,
    /// nsqd's timeout scan (no effect here: every channel's timers are exact)
    #[arg(long, default_value_t = 20)]
    pub queue_scan_selection_count: u64,
    /// nsqd 1.3's topology-aware delivery region (accepted; no effect yet)
    #[arg(long, default_value = "")]
    pub topology_region: String,
    /// nsqd 1.3's topology-aware delivery zone (accepted; no effect yet)
    #[arg(long, default_value = "")]
    pub topology_zone: String,
    /// nsqd 1.3's experiments (`topology-aware-consumption`; accepted, no effect yet)
    #[arg(long = "enable-experiment")]
    pub enable_experiments: Vec<String>,
}

/// The config file keys nsqd names differently from its flags (nsqd's `cfg` tags).
pub const RENAMED_KEYS: &[(&str, &str)] = &[
    ("id", "node-id"),
    ("nsqlookupd_tcp_addresses", "lookupd-tcp-address"),
    ("auth_http_addresses", "auth-http-address"),
    (
        "e2e_processing_latency_percentiles",
        "e2e-processing-latency-percentile",
    ),
    ("enable_experiment", "enable-experiment"),
];

/// The config file keys nsqd 1.3 knows that stand for no flag here, accepted with any value
/// and without effect: its options that have no flag (read from a file by nothing in nsqd
/// either; `queue_scan_*` tune its timeout scan, which the broker does not have) and its flags
/// that are no option (`version`, `config`).
pub const IGNORED_KEYS: &[&str] = &[
    "queue_scan_interval",
    "queue_scan_refresh_interval",
    "queue_scan_dirty_percent",
    "client_timeout",
    "version",
    "config",
];

impl Args {
    /// The flags given that have no effect here, each with why (logged once at start-up).
    pub fn without_effect(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let mut note = |given: bool, text: &str| {
            if given {
                notes.push(text.to_string());
            }
        };
        note(
            self.log_prefix != "[nsqd] ",
            "--log-prefix: log lines carry no prefix",
        );
        note(
            self.verbose,
            "--verbose: deprecated in nsqd, use --log-level",
        );
        note(
            self.worker_id,
            "--worker-id: deprecated in nsqd, use --node-id",
        );
        note(
            self.queue_scan_worker_pool_max != 4 || self.queue_scan_selection_count != 20,
            "--queue-scan-*: timeouts are exact per channel, there is no scan",
        );
        note(
            !self.topology_region.is_empty() || !self.topology_zone.is_empty(),
            "--topology-region/--topology-zone: topology-aware delivery is not built",
        );
        note(
            !self.enable_experiments.is_empty(),
            "--enable-experiment: no experiments are built",
        );
        notes
    }
}

/// A boolean flag's value as Go's `strconv.ParseBool` reads it.
fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {s:?} (true or false)")),
    }
}

//! Configuration: the command line and config file, checked into the [`Config`] every shard
//! reads. The flags themselves (nsqd's names, meanings and defaults, plus ours such as
//! `--shards`) are [`Args`] in `args.rs`; byte sizes are parsed in `size.rs`.
//!
//! Go programs accept `-flag value` as well as `--flag value`; so do we, so that existing
//! nsqd command lines and unit files work unchanged. Durations take Go's forms (`60s`,
//! `250ms`, `1m30s`). Anything we do not understand, or that nsqd would silently ignore
//! (`--https-address` without a certificate), is refused at start-up with a clear message.

mod args;
pub mod size;

pub use args::{Args, IGNORED_KEYS, RENAMED_KEYS};

use crate::sys::listen::ListenAddr;
use clap::Parser;
use protocol::identify::IdentifyLimits;
use protocol::Limits;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// The validated configuration every shard reads. Immutable after start-up.
#[derive(Debug, Clone)]
pub struct Config {
    pub tcp_address: ListenAddr,
    pub http_address: ListenAddr,
    /// Where the HTTP API is served over TLS (`--https-address`, with a certificate only; its
    /// port 0 becomes the real port at start-up, as for the others).
    pub https_address: Option<SocketAddr>,
    pub broadcast_address: String,
    pub broadcast_tcp_port: u16,
    pub broadcast_http_port: u16,
    pub lookupd_tcp_addresses: Vec<String>,
    pub data_path: PathBuf,
    pub mem_queue_size: u64,
    pub max_bytes_per_file: u64,
    pub retention_time: Duration,
    pub retention_bytes: u64,
    pub max_attempts: u16,
    pub sync_every: u64,
    pub sync_timeout: Duration,
    pub durable: bool,
    pub msg_timeout: Duration,
    pub max_msg_timeout: Duration,
    pub max_msg_size: u64,
    pub max_req_timeout: Duration,
    pub max_body_size: u64,
    pub max_channel_consumers: u64,
    pub max_rdy_count: u64,
    pub max_heartbeat_interval: Duration,
    pub max_output_buffer_size: u64,
    pub max_output_buffer_timeout: Duration,
    pub min_output_buffer_timeout: Duration,
    pub output_buffer_timeout: Duration,
    pub max_deflate_level: u64,
    pub e2e_processing_latency_percentiles: Vec<f64>,
    pub e2e_processing_latency_window_time: Duration,
    pub log_level: String,
    /// nsqd's `--node-id` (IDs do not use it; `/config/id` reports it).
    pub node_id: u64,
    /// nsqd's `--deflate` and `--snappy`: offered in feature negotiation.
    pub deflate: bool,
    pub snappy: bool,
    /// nsqd flags given that have no effect here, each with why (logged once at start-up).
    pub without_effect: Vec<String>,
    /// nsqd's config file keys the `--config` file sets that stand for nothing here
    /// ([`IGNORED_KEYS`]; logged once at start-up).
    pub ignored_keys: Vec<String>,
    /// Where and how to push metrics to statsd (`--statsd-*`); `None` without an address.
    pub statsd: Option<StatsdConfig>,
    /// `--tls-cert` and friends; `None` without a certificate.
    pub tls: Option<crate::tls::TlsSettings>,
    /// `--tls-required` (a client auth policy implies `true`, as in nsqd).
    pub tls_required: crate::tls::TlsRequired,
    /// The rustls configuration made from `tls` at start-up (`crate::tls::server_config`,
    /// called by launch.rs) and made again on SIGHUP; `None` without a certificate.
    pub tls_server: Option<std::sync::Arc<crate::tls::Reloadable>>,
    /// `--replication-address`: this broker's broker-to-broker address, checked (a host and a
    /// non-zero port); None: no replication, nothing of it constructed.
    pub replication_address: Option<String>,
    /// `--replicas`: copies of each new topic's log (1: not replicated).
    pub replicas: u32,
    /// `--min-insync-replicas` (checked against `replicas`; a majority by default).
    pub min_insync_replicas: u32,
    /// `--replication-timeout`: bound on a replicated publish's answer.
    pub replication_timeout: Duration,
    /// The session with the replication controller, set at start-up once the identity is
    /// loaded (only with `--replication-address`).
    pub cluster: Option<std::sync::Arc<crate::cluster::Status>>,
    /// CPUs the shards are pinned to, shard i on `cpus[i % cpus.len()]`.
    pub cpus: Vec<usize>,
    pub shards: usize,
    pub connection_steering: crate::sys::listen::Steering,
    /// `--move-to-owner`: see `tcp::handover`.
    pub move_to_owner: bool,
    pub spin_before_park: Duration,
    /// The auth servers (`--auth-http-address`; none: AUTH disabled) and how to ask them
    /// (`--auth-http-request-method`, `--http-client-connect-timeout`,
    /// `--http-client-request-timeout`).
    pub auth: crate::auth::AuthSettings,
    /// The flags as given (after the config file and Go's forms), for `/config/:opt`: nsqd
    /// reports every option it has a flag for, including those that have no effect here.
    pub given: Args,
}

/// nsqd's `--statsd-*` flags, checked.
#[derive(Debug, Clone)]
pub struct StatsdConfig {
    /// `--statsd-address`, resolved at every push (as nsqd dials it at every push).
    pub address: String,
    /// `--statsd-prefix` as given (`%s` is replaced by the host key, see
    /// [`StatsdConfig::prefix_for`]).
    pub prefix: String,
    pub interval: Duration,
    pub mem_stats: bool,
    pub udp_packet_size: usize,
    pub exclude_ephemeral: bool,
}

impl StatsdConfig {
    /// The prefix of every metric name, as nsqd makes it: `%s` replaced by
    /// `<broadcast-address>_<broadcast-http-port>` with `.` and `:` turned into `_`, and a `.`
    /// appended when missing; empty stays empty.
    pub fn prefix_for(&self, broadcast_address: &str, http_port: u16) -> String {
        if self.prefix.is_empty() {
            return String::new();
        }
        let host = format!("{broadcast_address}:{http_port}").replace(['.', ':'], "_");
        let mut prefix = self.prefix.replace("%s", &host);
        if !prefix.ends_with('.') {
            prefix.push('.');
        }
        prefix
    }
}

/// Heartbeat interval used when a client does not ask for one (nsqd: client timeout / 2).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);
/// The least [`Config::output_window`]: 4 MiB.
pub const MIN_OUTPUT_WINDOW: u64 = 4 * 1024 * 1024;

/// Why the command line is refused. Its text is what the operator reads (printed as is, before
/// logging starts).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The command line does not parse (an unknown flag, a malformed value): clap's text, with
    /// the usage line.
    #[error("{0}")]
    Usage(clap::Error),
    /// A flag's value is refused by the broker's own checks: the text names the flag and what
    /// it accepts (or that the broker does not support it).
    #[error("{0}")]
    BadFlag(String),
    /// An address flag whose host does not resolve.
    #[error("{flag} {addr:?}: {source}")]
    Unresolvable {
        flag: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("{flag} {addr:?}: resolves to no address")]
    NoAddress { flag: &'static str, addr: String },
}

/// `--replication-address`: `host:port` with a non-zero port and a host other brokers can
/// dial (not 0.0.0.0 or ::), as it is registered with the controller as given; shard `i`
/// listens on the port + `i`, so the last shard's port must be at most 65535.
fn replication_address(addr: &str, shards: usize) -> Result<String, ConfigError> {
    let refuse = |why: &str| {
        bad(format!(
            "--replication-address {addr:?}: {why}; give <host>:<port> where other brokers \
             reach this one"
        ))
    };
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(refuse("no port"));
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match port.parse::<u16>() {
        Ok(0) => return Err(refuse("port 0 cannot be dialled")),
        Ok(_) => {}
        Err(_) => return Err(refuse("the port is not a number from 1 to 65535")),
    }
    if host.is_empty() {
        return Err(refuse("no host"));
    }
    if host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return Err(refuse("an unspecified address cannot be dialled"));
    }
    crate::cluster::peers::shard_addresses(addr, shards)
        .map_err(|why| bad(format!("--replication-address {why}")))?;
    Ok(addr.to_owned())
}

/// [`ConfigError::BadFlag`].
fn bad(message: impl Into<String>) -> ConfigError {
    ConfigError::BadFlag(message.into())
}

impl Config {
    /// Parses the process arguments; `Err` holds the text to print (clap's, or ours).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::parse_from(std::env::args())
    }

    pub fn parse_from<I: IntoIterator<Item = String>>(argv: I) -> Result<Config, ConfigError> {
        let argv = nsq_common::cli::go_style_flags::<Args, _>(argv);
        let (argv, ignored) = nsq_common::config_file::with_config_file_ignoring::<Args>(
            argv,
            RENAMED_KEYS,
            IGNORED_KEYS,
        )
        .map_err(|e| ConfigError::BadFlag(e.to_string()))?;
        let args = Args::try_parse_from(argv).map_err(|e| {
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) {
                // --help and --version: printed to stdout, exit 0.
                e.exit()
            }
            ConfigError::Usage(e)
        })?;
        let mut config = Config::from_args(args)?;
        config.ignored_keys = ignored;
        Ok(config)
    }

    fn from_args(a: Args) -> Result<Config, ConfigError> {
        let given = a.clone();
        let auth = auth_settings(&a)?;
        let (tls, tls_required) = crate::tls::settings(&crate::tls::Flags {
            cert: &a.tls_cert,
            key: &a.tls_key,
            root_ca_file: &a.tls_root_ca_file,
            client_auth_policy: &a.tls_client_auth_policy,
            required: &a.tls_required,
            min_version: &a.tls_min_version,
        })
        .map_err(bad)?;
        if a.max_msg_size == 0 || a.max_msg_size > u32::MAX as u64 / 2 {
            return Err(bad(format!(
                "--max-msg-size {} must be between 1 and {}",
                a.max_msg_size,
                u32::MAX / 2
            )));
        }
        // As in nsqd, the two limits are independent: --max-msg-size bounds one message (PUB,
        // DPUB, /pub, each message of an MPUB), --max-body-size a whole MPUB or /mpub body.
        if a.max_body_size == 0 || a.max_body_size > u32::MAX as u64 / 2 {
            return Err(bad(format!(
                "--max-body-size {} must be between 1 and {}",
                a.max_body_size,
                u32::MAX / 2
            )));
        }
        if a.node_id >= 1024 {
            return Err(bad(format!("--node-id {} must be in [0,1024)", a.node_id)));
        }
        if a.max_rdy_count == 0 {
            return Err(bad("--max-rdy-count must be at least 1"));
        }
        if a.msg_timeout < Duration::from_millis(1) || a.msg_timeout > a.max_msg_timeout {
            return Err(bad(format!(
                "--msg-timeout {:?} must be between 1ms and --max-msg-timeout ({:?})",
                a.msg_timeout, a.max_msg_timeout
            )));
        }
        if a.max_heartbeat_interval < Duration::from_secs(1) {
            return Err(bad("--max-heartbeat-interval must be at least 1s"));
        }
        if a.min_output_buffer_timeout > a.max_output_buffer_timeout {
            return Err(bad(
                "--min-output-buffer-timeout exceeds --max-output-buffer-timeout",
            ));
        }
        for p in &a.e2e_processing_latency_percentiles {
            if !(*p > 0.0 && *p <= 1.0) {
                return Err(bad(format!(
                    "--e2e-processing-latency-percentile {p} must be in (0, 1.0]"
                )));
            }
        }
        match a.log_level.to_ascii_lowercase().as_str() {
            "debug" | "info" | "warn" | "error" | "fatal" | "trace" => {}
            other => {
                return Err(bad(format!(
                    "--log-level {other:?}: use debug, info, warn or error"
                )))
            }
        }
        let tcp_address = listen_addr("--tcp-address", &a.tcp_address)?;
        let http_address = listen_addr("--http-address", &a.http_address)?;
        let is_port_0 = |a: &ListenAddr| matches!(a, ListenAddr::Tcp(t) if t.port() == 0);
        if !is_port_0(&tcp_address) && tcp_address == http_address {
            return Err(bad(format!(
                "--tcp-address and --http-address are both {tcp_address}: they need two addresses"
            )));
        }
        let https_address = crate::tls::https_address(a.https_address.as_deref(), tls.is_some())
            .map_err(bad)?
            .map(|addr| resolve("--https-address", addr))
            .transpose()?;
        if let Some(https) = https_address.filter(|a| a.port() != 0) {
            if [&tcp_address, &http_address].contains(&&ListenAddr::Tcp(https)) {
                return Err(bad(format!(
                    "--https-address {https} is also --tcp-address or --http-address: give it \
                     its own port"
                )));
            }
        }
        let cpus = allowed_cpus();
        let shards = a.shards.unwrap_or(cpus.len());
        if shards == 0 || shards > 256 {
            return Err(bad(format!("--shards {shards} must be between 1 and 256")));
        }
        // nsqd registers port 0 for a unix socket, which every lookup refuses (IDENTIFY
        // missing fields), then retries for ever: say so at start-up instead.
        if !a.lookupd_tcp_addresses.is_empty() {
            for (flag, addr, broadcast, bflag) in [
                (
                    "--tcp-address",
                    &tcp_address,
                    a.broadcast_tcp_port,
                    "--broadcast-tcp-port",
                ),
                (
                    "--http-address",
                    &http_address,
                    a.broadcast_http_port,
                    "--broadcast-http-port",
                ),
            ] {
                if matches!(addr, ListenAddr::Unix(_)) && broadcast == 0 {
                    return Err(bad(format!(
                        "{flag} {addr} is a unix socket, which has no port to register with the \
                         lookups (they refuse port 0, as nsqlookupd does); give {bflag} (where \
                         clients reach this broker) or leave out --lookupd-tcp-address"
                    )));
                }
            }
        }
        let replication_address = a
            .replication_address
            .as_deref()
            .map(|addr| replication_address(addr, shards))
            .transpose()?;
        let replicas = a.replicas;
        let min_insync_replicas = a.min_insync_replicas.unwrap_or(replicas / 2 + 1);
        if min_insync_replicas > replicas {
            return Err(bad(format!(
                "--min-insync-replicas {min_insync_replicas} is more than --replicas {replicas}"
            )));
        }
        if replicas > 1 && replication_address.is_none() {
            return Err(bad(format!(
                "--replicas {replicas} needs --replication-address (where the other brokers \
                 reach this one) and --lookupd-tcp-address (lookups running the controller)"
            )));
        }
        if a.replication_timeout.is_zero() {
            return Err(bad(
                "--replication-timeout must be more than zero".to_owned()
            ));
        }
        let without_effect = a.without_effect();
        let broadcast_address = a.broadcast_address.unwrap_or_else(nsq_common::hostname);
        if a.statsd_interval.is_zero() {
            return Err(bad("--statsd-interval must be more than 0s"));
        }
        if a.statsd_udp_packet_size < 64 || a.statsd_udp_packet_size > 65_507 {
            return Err(bad(format!(
                "--statsd-udp-packet-size {} must be between 64 and 65507",
                a.statsd_udp_packet_size
            )));
        }
        let statsd = (!a.statsd_address.is_empty()).then(|| StatsdConfig {
            address: a.statsd_address.clone(),
            prefix: a.statsd_prefix.clone(),
            interval: a.statsd_interval,
            mem_stats: a.statsd_mem_stats,
            udp_packet_size: a.statsd_udp_packet_size,
            exclude_ephemeral: a.statsd_exclude_ephemeral,
        });
        Ok(Config {
            tcp_address,
            http_address,
            https_address,
            broadcast_address,
            broadcast_tcp_port: a.broadcast_tcp_port,
            broadcast_http_port: a.broadcast_http_port,
            lookupd_tcp_addresses: a.lookupd_tcp_addresses,
            data_path: a.data_path,
            mem_queue_size: a.mem_queue_size,
            max_bytes_per_file: a.max_bytes_per_file,
            retention_time: a.retention_time,
            retention_bytes: a.retention_bytes,
            max_attempts: a.max_attempts,
            sync_every: a.sync_every,
            sync_timeout: a.sync_timeout,
            durable: a.durable,
            msg_timeout: a.msg_timeout,
            max_msg_timeout: a.max_msg_timeout,
            max_msg_size: a.max_msg_size,
            max_req_timeout: a.max_req_timeout,
            max_body_size: a.max_body_size,
            max_channel_consumers: a.max_channel_consumers,
            max_rdy_count: a.max_rdy_count,
            max_heartbeat_interval: a.max_heartbeat_interval,
            max_output_buffer_size: a.max_output_buffer_size,
            max_output_buffer_timeout: a.max_output_buffer_timeout,
            min_output_buffer_timeout: a.min_output_buffer_timeout,
            output_buffer_timeout: a.output_buffer_timeout,
            max_deflate_level: a.max_deflate_level,
            e2e_processing_latency_percentiles: a.e2e_processing_latency_percentiles,
            e2e_processing_latency_window_time: a.e2e_processing_latency_window_time,
            log_level: a.log_level.to_ascii_lowercase(),
            node_id: a.node_id,
            deflate: a.deflate,
            snappy: a.snappy,
            without_effect,
            ignored_keys: Vec::new(),
            statsd,
            tls,
            tls_required,
            tls_server: None,
            replication_address,
            replicas,
            min_insync_replicas,
            replication_timeout: a.replication_timeout,
            cluster: None,
            cpus,
            shards,
            connection_steering: a.connection_steering,
            move_to_owner: a.move_to_owner,
            spin_before_park: a.spin_before_park,
            auth,
            given,
        })
    }

    /// Whether a publish is answered only once it is on disk: after the fsync that covers it
    /// (`--durable`), or after its write to the segment file (`--mem-queue-size 0`: as nsqd
    /// writes every message to its file before answering, so a process crash loses nothing
    /// acknowledged). Otherwise a publish is answered once it is in the owner's memory.
    pub fn acks_wait_for_disk(&self) -> bool {
        self.durable || self.mem_queue_size == 0
    }

    /// The limits the command decoder enforces.
    pub fn limits(&self) -> Limits {
        Limits {
            max_msg_size: self.max_msg_size,
            max_body_size: self.max_body_size,
            max_rdy_count: self.max_rdy_count,
            max_req_timeout_ms: self.max_req_timeout.as_millis() as u64,
        }
    }

    /// Bytes of message frames a consumer's connection may hold unwritten (encoded by the
    /// topic's owner, not yet taken by the client's socket) before the owner delivers it no
    /// more: `--max-output-buffer-size`, but at least [`MIN_OUTPUT_WINDOW`], so that a
    /// consumer of large messages still has several in the pipe between the owner and its
    /// socket.
    pub fn output_window(&self) -> u64 {
        self.max_output_buffer_size.max(MIN_OUTPUT_WINDOW)
    }

    /// The bounds IDENTIFY is checked against.
    pub fn identify_limits(&self) -> IdentifyLimits {
        IdentifyLimits {
            default_heartbeat_ms: DEFAULT_HEARTBEAT
                .min(self.max_heartbeat_interval)
                .as_millis() as u64,
            max_heartbeat_ms: self.max_heartbeat_interval.as_millis() as u64,
            default_output_buffer_size: 16 * 1024,
            max_output_buffer_size: self.max_output_buffer_size,
            default_output_buffer_timeout_ms: self.output_buffer_timeout.as_millis() as u64,
            min_output_buffer_timeout_ms: self.min_output_buffer_timeout.as_millis() as u64,
            max_output_buffer_timeout_ms: self.max_output_buffer_timeout.as_millis() as u64,
            default_msg_timeout_ms: self.msg_timeout.as_millis() as u64,
            max_msg_timeout_ms: self.max_msg_timeout.as_millis() as u64,
            max_deflate_level: self.max_deflate_level,
            tls_available: self.tls_server.is_some(),
            snappy_available: self.snappy,
            deflate_available: self.deflate,
            both_compressions_offered: self.deflate && self.snappy,
        }
    }

    /// The shard that owns `topic` under this `--shards`: see [`crate::placement`].
    #[inline]
    pub fn owner_of(&self, topic: &str) -> usize {
        crate::placement::owner_of(topic, self.shards)
    }
}

/// The auth flags, checked as nsqd checks them (and an address this broker cannot ask is
/// refused here, not at every AUTH).
fn auth_settings(a: &Args) -> Result<crate::auth::AuthSettings, ConfigError> {
    let servers = a
        .auth_http_addresses
        .iter()
        .map(|s| crate::auth::AuthServer::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    let method = crate::auth::AuthMethod::parse(&a.auth_http_request_method).map_err(bad)?;
    for (flag, d) in [
        (
            "--http-client-connect-timeout",
            a.http_client_connect_timeout,
        ),
        (
            "--http-client-request-timeout",
            a.http_client_request_timeout,
        ),
    ] {
        if d.is_zero() {
            return Err(bad(format!("{flag} must be more than 0s")));
        }
    }
    Ok(crate::auth::AuthSettings {
        servers,
        method,
        connect_timeout: a.http_client_connect_timeout,
        request_timeout: a.http_client_request_timeout,
    })
}

/// `--tcp-address` or `--http-address`: a unix socket path when Go cannot split it into host
/// and port (nsqd 1.3), else `host:port` resolved.
fn listen_addr(flag: &'static str, addr: &str) -> Result<ListenAddr, ConfigError> {
    if !addr.is_empty() && crate::sys::unix_listen::is_path(addr) {
        return Ok(ListenAddr::Unix(PathBuf::from(addr)));
    }
    resolve(flag, addr).map(ListenAddr::Tcp)
}

/// Resolves `host:port`; an empty host (`:4150`) means every interface, as in Go.
fn resolve(flag: &'static str, addr: &str) -> Result<SocketAddr, ConfigError> {
    let full = if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    };
    full.to_socket_addrs()
        .map_err(|source| ConfigError::Unresolvable {
            flag,
            addr: addr.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| ConfigError::NoAddress {
            flag,
            addr: addr.to_string(),
        })
}

/// The CPUs this process may run on (its affinity mask), in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this process.
    let cpus = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            Vec::new()
        } else {
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    };
    if cpus.is_empty() {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        (0..n).collect()
    } else {
        cpus
    }
}

#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod flags_doc;

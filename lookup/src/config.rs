//! Command-line flags, with nsqlookupd's names, meanings and defaults.
//!
//! nsqlookupd is a Go program, so its users write `-tcp-address=:4160` as often as
//! `--tcp-address :4160`; [`nsq_common::cli::go_style_flags`] turns a single-dash long flag that we know into its
//! double-dash form before clap sees it. Everything is checked before the lookup binds anything:
//! a flag we do not know, or a value we cannot read, stops start-up with a message.

use clap::{CommandFactory, Parser};
use protocol::duration::parse_flag_duration;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// The flags as clap reads them.
#[derive(Debug, Parser)]
#[command(
    name = "lookup",
    version = concat!(env!("CARGO_PKG_VERSION"), " (nsqlookupd v1.3.0-compatible)"),
    about = "NSQ-compatible lookup (nsqlookupd replacement)",
    // As Go's flag package: a flag given twice takes its last value (wrapper scripts append
    // their extra flags to the defaults).
    args_override_self = true
)]
struct Flags {
    /// <addr>:<port> to listen on for TCP clients
    #[arg(long, default_value = "0.0.0.0:4160", value_parser = parse_addr)]
    tcp_address: SocketAddr,

    /// <addr>:<port> to listen on for HTTP clients
    #[arg(long, default_value = "0.0.0.0:4161", value_parser = parse_addr)]
    http_address: SocketAddr,

    /// address of this lookupd node (default: the hostname)
    #[arg(long)]
    broadcast_address: Option<String>,

    /// duration of time a producer will remain in the active list since its last ping
    #[arg(long, default_value = "5m", value_parser = parse_flag_duration)]
    inactive_producer_timeout: Duration,

    /// duration of time a producer will remain tombstoned if registration remains
    #[arg(long, default_value = "45s", value_parser = parse_flag_duration)]
    tombstone_lifetime: Duration,

    /// log level: debug, info, warn, error or fatal
    #[arg(long, default_value = "info", value_parser = nsq_common::cli::parse_log_level)]
    log_level: tracing::Level,

    /// path to config file (nsqlookupd's TOML keys; flags given here win over the file)
    #[arg(long)]
    config: Option<String>,

    /// log message prefix (accepted for nsqlookupd compatibility; log lines carry no prefix)
    #[arg(long, default_value = "[nsqlookupd] ")]
    log_prefix: String,

    /// [deprecated] has no effect, use --log-level
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, default_value_t = false)]
    verbose: bool,

    /// this lookup's id in the replication controller (non-zero; with --controller-peers and --data-path; without it no controller runs)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    controller_id: Option<u64>,

    /// every controller's Raft address, this one's included: <id>=<host>:<port>,... (three or five for a quorum)
    #[arg(long)]
    controller_peers: Option<String>,

    /// <addr>:<port> this controller listens on for Raft (default: its own entry in --controller-peers)
    #[arg(long, value_parser = parse_addr)]
    controller_address: Option<SocketAddr>,

    /// directory for the controller's Raft log and state (required with --controller-id)
    #[arg(long)]
    data_path: Option<PathBuf>,

    /// entries the controller applies between two snapshots of its metadata (0: never; for tests and tuning)
    #[arg(long, hide = true)]
    controller_snapshot_every: Option<u64>,

    /// entries kept in the controller's log below a snapshot, for followers slightly behind (for tests and tuning)
    #[arg(long, hide = true)]
    controller_snapshot_margin: Option<u64>,
}

/// The replication controller's settings (`docs/design/replication.md`), present only with
/// `--controller-id`.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// This node's Raft id.
    pub id: u64,
    /// Every voter's Raft address, by id (this node's included).
    pub peers: BTreeMap<u64, String>,
    /// Where this node listens for Raft.
    pub listen: SocketAddr,
    /// Where the Raft log and state live.
    pub data_path: PathBuf,
    /// Applied entries between two snapshots (0: never).
    pub snapshot_every: u64,
    /// Entries kept below a snapshot's index.
    pub snapshot_margin: u64,
}

/// The lookup's settings, checked and ready to use.
#[derive(Debug, Clone)]
pub struct Config {
    pub tcp_address: SocketAddr,
    pub http_address: SocketAddr,
    /// What IDENTIFY answers as `broadcast_address`.
    pub broadcast_address: String,
    /// This machine's name, answered as `hostname`.
    pub hostname: String,
    pub inactive_producer_timeout: Duration,
    pub tombstone_lifetime: Duration,
    pub log_level: tracing::Level,
    /// nsqlookupd flags given that have no effect here, each with why (logged at start-up).
    pub without_effect: Vec<String>,
    /// The replication controller, if this lookup runs one.
    pub controller: Option<ControllerConfig>,
}

impl Config {
    /// Reads the flags from `args` (the first item is the program name). On a bad flag, or on
    /// `--help` / `--version`, returns clap's error, which prints itself and knows its exit code.
    pub fn from_args<I>(args: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = String>,
    {
        let args = nsq_common::cli::go_style_flags::<Flags, _>(args);
        let args = nsq_common::config_file::with_config_file::<Flags>(args, &[]).map_err(|e| {
            Flags::command().error(clap::error::ErrorKind::InvalidValue, e.to_string())
        })?;
        let flags = Flags::try_parse_from(args)?;
        if flags.tcp_address.port() != 0 && flags.tcp_address == flags.http_address {
            return Err(Flags::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--tcp-address and --http-address are both {}; give them different ports",
                    flags.tcp_address
                ),
            ));
        }
        let controller = controller_config(&flags)
            .map_err(|e| Flags::command().error(clap::error::ErrorKind::ArgumentConflict, e))?;
        let hostname = nsq_common::hostname();
        let mut without_effect = Vec::new();
        if flags.log_prefix != "[nsqlookupd] " {
            without_effect.push("--log-prefix: log lines carry no prefix".to_string());
        }
        if flags.verbose {
            without_effect.push("--verbose: deprecated in nsqlookupd, use --log-level".to_string());
        }
        Ok(Config {
            tcp_address: flags.tcp_address,
            http_address: flags.http_address,
            broadcast_address: flags.broadcast_address.unwrap_or_else(|| hostname.clone()),
            hostname,
            inactive_producer_timeout: flags.inactive_producer_timeout,
            tombstone_lifetime: flags.tombstone_lifetime,
            log_level: flags.log_level,
            without_effect,
            controller,
        })
    }
}

/// The controller's flags, checked together: all or none of id, peers and data path.
fn controller_config(flags: &Flags) -> Result<Option<ControllerConfig>, String> {
    let Some(id) = flags.controller_id else {
        let stray = [
            ("--controller-peers", flags.controller_peers.is_some()),
            ("--controller-address", flags.controller_address.is_some()),
            ("--data-path", flags.data_path.is_some()),
            (
                "--controller-snapshot-every",
                flags.controller_snapshot_every.is_some(),
            ),
            (
                "--controller-snapshot-margin",
                flags.controller_snapshot_margin.is_some(),
            ),
        ];
        if let Some((name, _)) = stray.iter().find(|(_, given)| *given) {
            return Err(format!(
                "{name} is for the replication controller: give --controller-id too"
            ));
        }
        return Ok(None);
    };
    let Some(list) = &flags.controller_peers else {
        return Err(
            "--controller-id needs --controller-peers (every controller's <id>=<host>:<port>)"
                .into(),
        );
    };
    let Some(data_path) = flags.data_path.clone() else {
        return Err("--controller-id needs --data-path (where the Raft log is kept)".into());
    };
    let peers = parse_peers(list)?;
    let Some(own) = peers.get(&id) else {
        return Err(format!(
            "--controller-peers has no entry for this lookup's --controller-id {id}"
        ));
    };
    let listen = match flags.controller_address {
        Some(address) => address,
        None => parse_addr(own).map_err(|e| format!("--controller-peers entry {id}: {e}"))?,
    };
    let defaults = replication::controller::NodeConfig::default();
    Ok(Some(ControllerConfig {
        id,
        peers,
        listen,
        data_path,
        snapshot_every: flags
            .controller_snapshot_every
            .unwrap_or(defaults.snapshot_every),
        snapshot_margin: flags
            .controller_snapshot_margin
            .unwrap_or(defaults.snapshot_margin),
    }))
}

/// `1=host:port,2=host:port,...`: distinct non-zero ids and distinct addresses with a port.
fn parse_peers(list: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut peers = BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((id, address)) = item.split_once('=') else {
            return Err(format!(
                "--controller-peers: {item:?} is not <id>=<host>:<port>"
            ));
        };
        let id: u64 = match id.trim().parse() {
            Ok(id) if id > 0 => id,
            _ => {
                return Err(format!(
                    "--controller-peers: {item:?}: the id must be a non-zero integer"
                ))
            }
        };
        let address = address.trim();
        let port_ok = address.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(format!(
                "--controller-peers: {item:?}: the address must be <host>:<port>"
            ));
        }
        if peers.values().any(|a| a == address) {
            return Err(format!("--controller-peers: {address} is given twice"));
        }
        if peers.insert(id, address.to_owned()).is_some() {
            return Err(format!("--controller-peers: id {id} is given twice"));
        }
    }
    if peers.is_empty() {
        return Err("--controller-peers is empty".into());
    }
    Ok(peers)
}

/// Reads `host:port` as Go's listeners do: an empty host (`:4160`) means every interface.
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.to_socket_addrs()
        .map_err(|e| format!("invalid address {s:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("invalid address {s:?}: resolves to nothing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        std::iter::once("lookup")
            .chain(list.iter().copied())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn defaults_are_nsqlookupd_defaults() {
        let c = Config::from_args(args(&[])).unwrap();
        assert_eq!(c.tcp_address.to_string(), "0.0.0.0:4160");
        assert_eq!(c.http_address.to_string(), "0.0.0.0:4161");
        assert_eq!(c.inactive_producer_timeout, Duration::from_secs(300));
        assert_eq!(c.tombstone_lifetime, Duration::from_secs(45));
        assert_eq!(c.broadcast_address, c.hostname);
    }

    #[test]
    fn go_style_flags_are_accepted() {
        let c = Config::from_args(args(&[
            "-tcp-address=127.0.0.1:1",
            "-http-address",
            ":2",
            "--broadcast-address=b",
            "-inactive-producer-timeout=1m30s",
            "-tombstone-lifetime",
            "1s",
        ]))
        .unwrap();
        assert_eq!(c.tcp_address.to_string(), "127.0.0.1:1");
        assert_eq!(c.http_address.to_string(), "0.0.0.0:2");
        assert_eq!(c.broadcast_address, "b");
        assert_eq!(c.inactive_producer_timeout, Duration::from_secs(90));
        assert_eq!(c.tombstone_lifetime, Duration::from_secs(1));
    }

    #[test]
    fn bad_flags_are_errors() {
        assert!(Config::from_args(args(&["--nope"])).is_err());
        assert!(Config::from_args(args(&["-nope=1"])).is_err());
        assert!(Config::from_args(args(&["--tombstone-lifetime", "soon"])).is_err());
        assert!(Config::from_args(args(&["--tcp-address", "nowhere"])).is_err());
        assert!(Config::from_args(args(&["--log-level", "loud"])).is_err());
        let e = Config::from_args(args(&["--tombstone-lifetime", "45"])).unwrap_err();
        assert!(e.to_string().contains("has no unit"), "{e}");
        assert!(Config::from_args(args(&["--inactive-producer-timeout=300"])).is_err());
        assert!(Config::from_args(args(&["--tombstone-lifetime=0"])).is_ok());
        let e = Config::from_args(args(&[
            "--tcp-address=:4170",
            "--http-address=0.0.0.0:4170",
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("different ports"), "{e}");
    }

    #[test]
    fn the_controller_flags_go_together() {
        let c = Config::from_args(args(&[])).unwrap();
        assert!(c.controller.is_none());
        let peers = "--controller-peers=1=127.0.0.1:5001, 2=127.0.0.1:5002,3=localhost:5003";
        let c =
            Config::from_args(args(&["--controller-id=2", peers, "--data-path=/tmp/x"])).unwrap();
        let ctl = c.controller.unwrap();
        assert_eq!(ctl.id, 2);
        assert_eq!(ctl.peers.len(), 3);
        assert_eq!(ctl.listen.to_string(), "127.0.0.1:5002");
        let defaults = replication::controller::NodeConfig::default();
        assert_eq!(ctl.snapshot_every, defaults.snapshot_every);
        assert_eq!(ctl.snapshot_margin, defaults.snapshot_margin);
        let c = Config::from_args(args(&[
            "--controller-id=2",
            peers,
            "--data-path=/tmp/x",
            "--controller-snapshot-every=20",
            "--controller-snapshot-margin=5",
        ]))
        .unwrap();
        let ctl = c.controller.unwrap();
        assert_eq!((ctl.snapshot_every, ctl.snapshot_margin), (20, 5));
        let c = Config::from_args(args(&[
            "--controller-id=3",
            peers,
            "--data-path=/tmp/x",
            "--controller-address=0.0.0.0:6000",
        ]))
        .unwrap();
        assert_eq!(c.controller.unwrap().listen.to_string(), "0.0.0.0:6000");
        for (list, needle) in [
            (
                &["--controller-id=0", peers, "--data-path=d"][..],
                "controller-id",
            ),
            (
                &["--controller-id=1", "--data-path=d"],
                "needs --controller-peers",
            ),
            (&["--controller-id=1", peers], "needs --data-path"),
            (&["--controller-id=4", peers, "--data-path=d"], "no entry"),
            (&[peers], "give --controller-id"),
            (&["--data-path=d"], "--data-path is for"),
            (&["--controller-address=:1"], "--controller-address is for"),
            (
                &["--controller-snapshot-every=5"],
                "--controller-snapshot-every is for",
            ),
            (
                &[
                    "--controller-id=1",
                    "--controller-peers=1=a:1,1=b:2",
                    "--data-path=d",
                ],
                "given twice",
            ),
            (
                &[
                    "--controller-id=1",
                    "--controller-peers=1=a:1,2=a:1",
                    "--data-path=d",
                ],
                "given twice",
            ),
            (
                &[
                    "--controller-id=1",
                    "--controller-peers=1=a",
                    "--data-path=d",
                ],
                "<host>:<port>",
            ),
            (
                &[
                    "--controller-id=1",
                    "--controller-peers=x=a:1",
                    "--data-path=d",
                ],
                "non-zero integer",
            ),
        ] {
            let e = Config::from_args(args(list)).unwrap_err();
            assert!(e.to_string().contains(needle), "{list:?}: {e}");
        }
    }
}

/// The lookup's section of the flags reference (`docs/flags.md`), generated from [`Flags`] and
/// checked against the committed file: a flag changed without the file fails `cargo test`.
#[cfg(test)]
mod flags_doc {
    use super::*;

    #[test]
    fn flags_doc_matches_the_code() {
        let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/flags.md");
        let table = nsq_common::flags_doc::table(&Flags::command(), &[]);
        if let Err(e) = nsq_common::flags_doc::check_section(&doc, "lookup", &table) {
            panic!("{e}");
        }
    }
}

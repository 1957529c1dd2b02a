//! Command-line flags, with nsqlookupd's names, meanings and defaults.
//!
//! nsqlookupd is a Go program, so its users write `-tcp-address=:4160` as often as
//! `--tcp-address :4160`; [`nsq_common::cli::go_style_flags`] turns a single-dash long flag that we know into its
//! double-dash form before clap sees it. Everything is checked before the lookup binds anything:
//! a flag we do not know, or a value we cannot read, stops start-up with a message.

use clap::{CommandFactory, Parser};
use protocol::duration::parse_flag_duration;
use std::net::{SocketAddr, ToSocketAddrs};
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
        })
    }
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

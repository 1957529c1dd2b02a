//! What every tool does around its work: reading its command line as Go's flag package would
//! (`-flag=value`, `-flag value`, `--flag value`; a boolean takes its value only after `=`),
//! `--version` in NSQ's words, logging to stderr, SIGINT / SIGTERM (and SIGHUP) turned
//! into flags a glommio task can watch, and the tool's executor ([`executor`]: RLIMIT_MEMLOCK
//! checked first).
//!
//! The flags several tools share, with NSQ's names, defaults and help, are defined once here
//! and `#[command(flatten)]`ed into each tool's `Options`: [`VersionFlag`], [`ConsumerFlags`]
//! (nsqd / lookupd addresses, `--max-in-flight`, `--consumer-opt`), [`ProducerFlags`]
//! (`--producer-opt`) and [`StatsFlag`] (`--stats-address`). TLS, snappy, deflate and AUTH come
//! through `--consumer-opt` / `--producer-opt` (go-nsq's config keys), as in NSQ.
//!
//! Invariant: a bad command line never starts any work: it ends the process with status 2 and
//! a message naming the flag ([`parse_args`], [`fail`]).

use clap::{Args, Parser};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `--version` of nsq_to_file, nsq_tail, nsq_to_http and nsq_to_nsq (nsq_stat's and to_nsq's
/// help words differ, so they keep their own).
#[derive(Args, Debug, Clone)]
pub struct VersionFlag {
    /// print version string
    #[arg(long, value_parser = go_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub version: bool,
}

/// Where and how a consuming tool subscribes (nsq_to_file, nsq_tail, nsq_to_http,
/// nsq_to_nsq); `--topic` and `--channel` stay each tool's (their defaults and arity differ).
#[derive(Args, Debug, Clone)]
pub struct ConsumerFlags {
    /// max number of messages to allow in flight
    #[arg(long = "max-in-flight", default_value_t = 200)]
    pub max_in_flight: u64,
    /// nsqd TCP address (may be given multiple times)
    #[arg(long = "nsqd-tcp-address")]
    pub nsqd_tcp_address: Vec<String>,
    /// lookupd HTTP address (may be given multiple times)
    #[arg(long = "lookupd-http-address")]
    pub lookupd_http_address: Vec<String>,
    /// option to passthrough to nsq.Consumer (may be given multiple times,
    /// http://godoc.org/github.com/nsqio/go-nsq#Config)
    #[arg(long = "consumer-opt")]
    pub consumer_opt: Vec<String>,
}

/// go-nsq producer settings of a publishing tool (to_nsq, nsq_to_nsq).
#[derive(Args, Debug, Clone)]
pub struct ProducerFlags {
    /// option to passthrough to nsq.Producer (may be given multiple times,
    /// http://godoc.org/github.com/nsqio/go-nsq#Config)
    #[arg(long = "producer-opt")]
    pub producer_opt: Vec<String>,
}

/// `--stats-address` of the long-running tools (nsq_to_file, nsq_to_http, nsq_to_nsq).
#[derive(Args, Debug, Clone)]
pub struct StatsFlag {
    /// HTTP address (host:port) to serve Prometheus metrics on (`GET /metrics`; not in NSQ)
    #[arg(long = "stats-address", default_value = "")]
    pub stats_address: String,
}

/// The version the tools report, NSQ's form: `<tool> v1.3.0 (nsq-rs 0.1.0)`.
pub fn version_line(tool: &str) -> String {
    format!(
        "{tool} v{} (nsq-rs {})",
        protocol::NSQD_COMPAT_VERSION,
        env!("CARGO_PKG_VERSION")
    )
}

/// NSQ's user agent form: `nsq_to_file/1.3.0 nsq-rs/0.1.0`.
pub fn user_agent(tool: &str) -> String {
    format!(
        "{tool}/{} nsq-rs/{}",
        protocol::NSQD_COMPAT_VERSION,
        env!("CARGO_PKG_VERSION")
    )
}

/// The process's arguments parsed into `T`, Go-style single-dash flags included; on error
/// clap's message (it names the flag) and status 2; `--help` prints and exits 0.
pub fn parse_args<T: Parser>() -> T {
    let args = nsq_common::cli::go_style_flags::<T, _>(std::env::args());
    T::try_parse_from(&args).unwrap_or_else(|e| {
        if e.kind() == clap::error::ErrorKind::UnknownArgument {
            // clap names `-bogus` by its first letter; Go's words name the whole flag.
            if let Some(flag) = args.iter().skip(1).find(|a| is_unknown_go_flag::<T>(a)) {
                eprintln!("flag provided but not defined: {flag}");
                eprintln!("Run with --help for the flags.");
                std::process::exit(2);
            }
        }
        e.exit()
    })
}

/// `-name` or `-name=value` where `name` (two letters or more) is no flag of `T`.
fn is_unknown_go_flag<T: Parser>(arg: &str) -> bool {
    let Some(rest) = arg.strip_prefix('-') else {
        return false;
    };
    let name = rest.split('=').next().unwrap_or_default();
    if name.len() < 2 || rest.starts_with('-') || name.parse::<f64>().is_ok() {
        return false;
    }
    !T::command()
        .get_arguments()
        .any(|a| a.get_long() == Some(name))
}

/// Ends the process for a bad flag value found after parsing: the message and status 2.
pub fn fail(tool: &str, message: impl std::fmt::Display) -> ! {
    eprintln!("{tool}: {message}");
    std::process::exit(2)
}

/// Logs to stderr at `level` (`--log-level`, nsqd's names), with `RUST_LOG` taking over when
/// set.
pub fn init_logging(level: tracing::Level) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.as_str()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// The tool's one glommio executor, named `tool`: RLIMIT_MEMLOCK raised first if it must be
/// (`Err` says what to set), and glommio's smallest registered buffer pool, as the tools do no
/// direct I/O through it.
pub fn executor(tool: &str) -> Result<glommio::LocalExecutorBuilder, String> {
    use nsq_common::memlock;
    memlock::ensure(tool, false, 1, "").map_err(|e| e.to_string())?;
    Ok(glommio::LocalExecutorBuilder::default()
        .name(tool)
        .io_memory(memlock::IO_MEMORY_PER_EXECUTOR))
}

/// clap value parser: a Go boolean (`true`, `1`, `F`, ...).
pub fn go_bool(s: &str) -> Result<bool, String> {
    crate::goconfig::go_bool(s)
}

/// clap value parser: a Go duration that must carry a unit (`30s`, `1m`; `0` alone is zero).
pub fn go_duration(s: &str) -> Result<Duration, String> {
    protocol::duration::parse_flag_duration(s)
}

/// The signals a tool reacts to, as flags set by signal-hook's handlers.
#[derive(Clone)]
pub struct Signals {
    pub term: Arc<AtomicBool>,
    pub hup: Arc<AtomicBool>,
}

impl Signals {
    /// Registers SIGINT and SIGTERM (`term`) and SIGHUP (`hup`).
    pub fn register() -> std::io::Result<Signals> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let s = Signals {
            term: Arc::new(AtomicBool::new(false)),
            hup: Arc::new(AtomicBool::new(false)),
        };
        signal_hook::flag::register(SIGINT, s.term.clone())?;
        signal_hook::flag::register(SIGTERM, s.term.clone())?;
        signal_hook::flag::register(SIGHUP, s.hup.clone())?;
        Ok(s)
    }

    /// True once SIGINT or SIGTERM came.
    pub fn terminating(&self) -> bool {
        self.term.load(Ordering::Relaxed)
    }

    /// True once per SIGHUP.
    pub fn take_hup(&self) -> bool {
        self.hup.swap(false, Ordering::Relaxed)
    }

    /// Resolves when SIGINT or SIGTERM came (checked every 50 ms: a handler cannot wake a
    /// glommio executor).
    pub async fn terminated(&self) {
        while !self.terminating() {
            glommio::timer::sleep(Duration::from_millis(50)).await;
        }
    }
}

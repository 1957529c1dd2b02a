//! `lookup`: an nsqlookupd replacement. Brokers register their topics and channels over TCP
//! (port 4160); consumers and admin tools find them over HTTP (port 4161).
//!
//! The lookup is small, so it runs on a single glommio executor: no sharding, no locks. The
//! modules, from the outside in:
//! - [`config`]: the flags (nsqlookupd's names and defaults, Go's `-flag=value` form too);
//! - [`server`]: the shared state and the two listeners;
//! - [`tcp`]: the V1 protocol brokers speak;
//! - [`http_api`]: the HTTP API;
//! - [`db`]: the registration database both sides read and write;
//! - [`controller`]: the replication controller, with `--controller-id` only.

mod config;
mod controller;
mod db;
mod http_api;
mod server;
mod tcp;

use config::Config;
use glommio::{LocalExecutorBuilder, Placement};
use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match Config::from_args(std::env::args()) {
        Ok(config) => config,
        Err(e) => {
            // clap prints usage errors to stderr (exit 2) and --help/--version to stdout (0).
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    init_logging(config.log_level);
    for note in &config.without_effect {
        tracing::warn!("flag accepted without effect: {note}");
    }
    if let Err(e) = nsq_common::cli::exit_on_signals() {
        eprintln!("lookup: cannot handle SIGTERM/SIGINT: {e}");
        return ExitCode::FAILURE;
    }
    // glommio refuses an executor under a small RLIMIT_MEMLOCK: raise it, or say what to set.
    if let Err(e) = nsq_common::memlock::ensure("lookup", false, 1, "") {
        tracing::error!("{e}");
        eprintln!("lookup: {e}");
        return ExitCode::FAILURE;
    }
    let executor = LocalExecutorBuilder::new(Placement::Unbound)
        .name("lookup")
        // The lookup does no storage I/O: glommio's smallest registered buffer.
        .io_memory(nsq_common::memlock::IO_MEMORY_PER_EXECUTOR)
        .make();
    let executor = match executor {
        Ok(executor) => executor,
        Err(e) => {
            eprintln!("lookup: cannot start the io_uring executor: {e}");
            return ExitCode::FAILURE;
        }
    };
    match executor.run(server::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("lookup: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(level: tracing::Level) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.as_str()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

//! `admin-ui`: an nsqadmin replacement. A web page and a JSON API over the lookups' and the
//! brokers' own HTTP APIs: topics, channels, clients and nodes of a cluster, and the actions an
//! operator takes on them (create, pause, empty, delete, tombstone).
//!
//! It is small and serves few people, so it is plain threads and blocking sockets: one thread
//! per browser connection, and a scoped thread per broker or lookup asked. The modules, from
//! the outside in:
//! - [`config`]: the flags (nsqadmin's names);
//! - [`server`]: the listener and each connection's request loop;
//! - [`api`]: the routes of the JSON API and the static page;
//! - [`audit`]: who may take actions, and the notification of each one;
//! - [`cluster`]: what the cluster looks like, gathered from lookups and brokers, and the
//!   actions fanned out to them;
//! - [`upstream`]: one HTTP request to a lookup or a broker, over HTTPS when a broker
//!   requires TLS;
//! - [`tls`]: the TLS client settings (`--http-client-tls-*`).

mod api;
mod audit;
mod cluster;
mod config;
mod server;
mod tls;
mod upstream;

use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match config::Config::from_args(std::env::args()) {
        Ok(config) => config,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    // RUST_LOG, when set, wins over --log-level.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| config.log_level.as_str().into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(e) = nsq_common::cli::exit_on_signals() {
        eprintln!("admin-ui: cannot handle SIGTERM/SIGINT: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = server::run(config) {
        tracing::error!("{e}");
        eprintln!("admin-ui: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

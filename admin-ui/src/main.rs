//! `admin-ui`: an nsqadmin replacement. A web page and a JSON API over the lookups' and the
//! brokers' own HTTP APIs: topics, channels, clients and nodes of a cluster, and the actions an
//! operator takes on them (create, pause, empty, delete, tombstone; and for the brokers'
//! features beyond nsqd: retention, rewind, max attempts, dead letters sent back).
//!
//! It is small and serves few people, so it is plain threads and blocking sockets: one thread
//! per browser connection, and a scoped thread per broker or lookup asked. The modules, from
//! the outside in:
//! - [`config`]: the flags (nsqadmin's names);
//! - [`server`]: the listener and each connection's request loop;
//! - [`api`]: the routes (under `--base-path`) and the JSON API;
//! - [`action`]: what an operator's POST or DELETE asks for;
//! - [`pages`]: the page at its path-style URLs, and its static files;
//! - [`live_config`]: `/config/:opt`, the options read and changed while running;
//! - [`cidr`]: the networks `/config` changes are allowed from;
//! - [`graphite`]: the Graphite proxy, `/api/graphite` and the statsd key settings;
//! - [`audit`]: who may take actions, and the notification of each one;
//! - [`rates`]: the live rates' series kept from the brokers' `/stats` (`/api/rates`);
//! - [`sampler`]: the thread that samples every node for [`rates`];
//! - [`shapes`]: nsqadmin's JSON shapes of topics, channels, clients and nodes;
//! - [`cluster`]: what the cluster looks like, gathered from lookups and brokers, and the
//!   actions fanned out to them;
//! - [`warnings`]: what did not answer, as the answers say it;
//! - [`history`]: the brokers' features beyond nsqd (dead letters, channel settings,
//!   rewind, retention), read and set on every broker concerned;
//! - [`upstream`]: one HTTP request to a lookup or a broker, over HTTPS when a broker
//!   requires TLS, and what failed when it gives nothing usable;
//! - [`wire`]: the lookups' and brokers' answers read into typed structs;
//! - [`tls`]: the TLS client settings (`--http-client-tls-*`).
//!
//! No two modules import each other, directly or through others: shared types live below
//! their users ([`wire`], [`action`], [`warnings`] and [`cidr`] import no other module).

mod action;
mod api;
mod audit;
mod cidr;
mod cluster;
mod config;
mod graphite;
mod history;
mod live_config;
mod pages;
mod rates;
mod sampler;
mod server;
mod shapes;
mod tls;
mod upstream;
mod warnings;
mod wire;

use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match config::Config::from_args(std::env::args()) {
        Ok(config) => config,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    // RUST_LOG, when set, wins over --log-level (until PUT /config/log_level).
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| config.log_level.as_str().into());
    let (filter, reload) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .init();
    for note in &config.without_effect {
        tracing::warn!("flag accepted without effect: {note}");
    }
    let set_log_level = Box::new(move |level: tracing::Level| {
        let set = reload.modify(|f| *f = tracing_subscriber::EnvFilter::new(level.as_str()));
        if let Err(e) = set {
            tracing::warn!("cannot change the log level: {e}");
        }
    });
    if let Err(e) = nsq_common::cli::exit_on_signals() {
        eprintln!("admin-ui: cannot handle SIGTERM/SIGINT: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = server::run(config, set_log_level) {
        tracing::error!("{e}");
        eprintln!("admin-ui: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

//! NSQ's utilities on the workspace's `client` crate, with NSQ's names, flags, defaults and
//! output formats, so that existing command lines, cron jobs and systemd units keep working.
//! Each binary (`src/bin/<name>.rs`) calls one `main` here.
//!
//! - [`archive`]: `nsq_to_file` (topics to files; FIN only after the sync);
//! - [`tail`]: `nsq_tail` (topics to stdout);
//! - [`publish`]: `to_nsq` (stdin to a topic);
//! - [`relay`]: `nsq_to_nsq` (topics to other brokers; FIN only after their `OK`), with
//!   [`jsonfilter`] (its `--*-json-*` filters);
//! - [`to_http`]: `nsq_to_http` (a topic to HTTP/HTTPS endpoints; FIN only after a 2xx);
//! - [`stat`]: `nsq_stat` (a channel's stats summed over a topic's brokers, every interval);
//! - shared: [`start`] (each tool's `main` start and end: flags, `--version`, logging,
//!   signals, the executor, fatal errors), [`cli`] (Go-style flags, `--version`, logging,
//!   signals), [`http`] (one HTTP/HTTPS request),
//!   [`pool`] (`--mode`: which destination; `--status-every` lines),
//!   [`goconfig`] (`--consumer-opt` / `--producer-opt`: go-nsq's config keys), [`filename`] and
//!   [`strftime`] (nsq_to_file's file names), [`metrics`] and [`stats_server`]
//!   (`--stats-address` of the long-running tools: Prometheus `/metrics`).
//!
//! No protocol code lives here: connections, TLS, compression and AUTH are the client's.

pub mod archive;
pub mod cli;
pub mod filename;
pub mod goconfig;
pub mod http;
pub mod jsonfilter;
pub mod metrics;
pub mod pool;
pub mod publish;
pub mod relay;
pub mod start;
pub mod stat;
pub mod stats_server;
pub mod strftime;
pub mod tail;
pub mod to_http;

//! nsqd's HTTP API, served by every shard on `--http-address`, and over TLS on
//! `--https-address`.
//!
//! Each shard binds its own listener (glommio sets SO_REUSEPORT), so the kernel spreads HTTP
//! connections over the shards like TCP ones. A request is served by the shard that accepted
//! it; whatever concerns a topic goes to the topic's owner through the mailboxes
//! (`Mail::Publish`, `Mail::Admin`), and `/stats`, `/metrics` and `/ping` ask every shard and
//! merge the answers.
//!
//! - [`server`]: the accept loops and the per-connection loop (HTTP/1.1 keep-alive and
//!   pipelining on `http1`), generic over [`conn_io`] (plain, or TLS);
//! - [`routes`]: path and method to handler, nsqd's 404 and 405;
//! - [`api_error`]: the error answers, one variant per code, with status and text;
//! - [`pub_routes`]: `/pub` and `/mpub`;
//! - [`manage`]: `/topic/*` and `/channel/*`;
//! - [`replay_routes`]: `/channel/rewind`, and `/channel/create` with `from=` (ours);
//! - [`dead_letter_routes`]: `/channel/config`, `/dead_letters`, `/topic/redrive`;
//! - [`info`]: `/ping`, `/info`, `/config/:opt`;
//! - [`report`]: `/stats` (JSON and text) and `/metrics` (Prometheus text);
//! - [`ask`]: requests to one shard or to every shard.

mod api_error;
mod ask;
mod conn_io;
mod dead_letter_routes;
mod info;
mod manage;
mod pub_routes;
mod replay_routes;
mod report;
mod routes;
pub(crate) mod server;

use crate::shard::Shard;
use std::rc::Rc;

/// Starts this shard's HTTP (and HTTPS) listeners and their accept loops.
pub fn start(
    shard: &Rc<Shard>,
    http: Option<std::os::fd::OwnedFd>,
    https: Option<std::os::fd::OwnedFd>,
) {
    server::start(shard, http, https);
}

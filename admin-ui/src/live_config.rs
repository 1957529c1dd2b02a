//! nsqadmin's `GET /config/:opt` and `PUT /config/:opt`: any option read by its config-file
//! name, and the two nsqadmin lets change while running, `nsqlookupd_http_addresses` (a JSON
//! array of `host:port`) and `log_level` (`debug` ... `fatal`), allowed only from
//! `--allow-config-from-cidr` (default `127.0.0.1/8`; empty: from anywhere).
//!
//! Invariants: a refused or malformed request changes nothing; a change is seen by every
//! request that starts after it (the lookups are read per request from [`Cluster`]); the
//! values answered are nsqadmin's JSON (durations in nanoseconds, the log level as its
//! number 1-5, a string as plain text).

use crate::cidr::Cidr;
use crate::cluster::Cluster;
use crate::config::level_number;
use http1::Response;
use serde_json::{Map, Value};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// The options as `/config` shows them, and what applies a change.
pub struct LiveConfig {
    /// Every option by its config-file name, as nsqadmin's JSON.
    pub options: RwLock<Map<String, Value>>,
    pub allow: Option<Cidr>,
    pub cluster: Arc<Cluster>,
    /// Sets the log level of the running process.
    pub set_log_level: Box<dyn Fn(tracing::Level) + Send + Sync>,
}

fn fail(status: u16, message: &str) -> Response {
    Response::json(
        status,
        serde_json::json!({ "message": message }).to_string(),
    )
    .with_header("X-NSQ-Content-Type", "nsq; version=1.0")
}

/// The largest PUT body nsqadmin reads.
const MAX_BODY: usize = 1024 * 1024;

impl LiveConfig {
    /// `GET` or `PUT /config/{opt}` from `peer` (`ip:port`).
    pub fn handle(&self, method: &str, opt: &str, body: &[u8], peer: &str) -> Response {
        if let Some(allow) = &self.allow {
            let Ok(peer) = peer.parse::<SocketAddr>() else {
                tracing::error!("failed to parse RemoteAddr {peer}");
                return fail(400, "INVALID_REMOTE_ADDR");
            };
            if !allow.contains(peer.ip()) {
                return fail(403, "FORBIDDEN");
            }
        }
        if method == "PUT" {
            if body.is_empty() || body.len() > MAX_BODY {
                return fail(413, "INVALID_VALUE");
            }
            match self.put(opt, body) {
                Ok(()) => {}
                Err(r) => return r,
            }
        }
        let value = match self.options.read() {
            Ok(o) => o.get(opt).cloned(),
            Err(_) => None,
        };
        match value {
            None => fail(400, "INVALID_OPTION"),
            // nsqadmin writes a string as it is, not as JSON.
            Some(Value::String(s)) => Response::empty(200)
                .with_header("Content-Type", "text/plain; charset=utf-8")
                .with_header("X-NSQ-Content-Type", "nsq; version=1.0")
                .with_body(s),
            Some(v) => Response::json(200, v.to_string())
                .with_header("X-NSQ-Content-Type", "nsq; version=1.0"),
        }
    }

    /// Applies a PUT of `opt`.
    fn put(&self, opt: &str, body: &[u8]) -> Result<(), Response> {
        let invalid = || fail(400, "INVALID_VALUE");
        let value = match opt {
            "nsqlookupd_http_addresses" => {
                let addrs: Vec<String> = serde_json::from_slice(body).map_err(|_| invalid())?;
                let addrs = addrs
                    .iter()
                    .map(|a| crate::config::upstream_addr(a))
                    .collect::<Result<Vec<String>, String>>()
                    .map_err(|_| invalid())?;
                let addrs = crate::warnings::dedup(addrs);
                self.cluster.set_lookups(addrs.clone());
                tracing::info!(lookups = ?addrs, "lookups changed through /config");
                Value::from(addrs)
            }
            "log_level" => {
                let text = std::str::from_utf8(body).map_err(|_| invalid())?;
                let level = nsq_common::cli::parse_log_level(text).map_err(|_| invalid())?;
                (self.set_log_level)(level);
                let number = if text.eq_ignore_ascii_case("fatal") {
                    5
                } else {
                    level_number(level)
                };
                Value::from(number)
            }
            _ => return Err(fail(400, "INVALID_OPTION")),
        };
        if let Ok(mut o) = self.options.write() {
            o.insert(opt.to_owned(), value);
        }
        Ok(())
    }
}

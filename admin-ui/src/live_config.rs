//! nsqadmin's `GET /config/:opt` and `PUT /config/:opt`: any option read by its config-file
//! name, and the two nsqadmin lets change while running, `nsqlookupd_http_addresses` (a JSON
//! array of `host:port`) and `log_level` (`debug` ... `fatal`), allowed only from
//! `--allow-config-from-cidr` (default `127.0.0.1/8`; empty: from anywhere).
//!
//! Invariants: a refused or malformed request changes nothing; a change is seen by every
//! request that starts after it (the lookups are read per request from [`Cluster`]); the
//! values answered are nsqadmin's JSON (durations in nanoseconds, the log level as its
//! number 1-5, a string as plain text).

use crate::cluster::Cluster;
use http1::Response;
use serde_json::{Map, Value};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

/// An IPv4 or IPv6 network, `addr/bits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

/// `ip` as a 128-bit number, IPv4 mapped into IPv6 as Go's `net.IP` holds it.
fn as_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl Cidr {
    /// Reads `a.b.c.d/n` or `x::y/n`, as Go's `net.ParseCIDR`.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (ip, bits) = s
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR address: {s}"))?;
        let net: IpAddr = ip
            .parse()
            .map_err(|_| format!("invalid CIDR address: {s}"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits: u8 = match bits.parse() {
            Ok(b) if b <= max && !bits.starts_with('+') => b,
            _ => return Err(format!("invalid CIDR address: {s}")),
        };
        Ok(Cidr { net, bits })
    }

    /// Whether `ip` is in the network (an IPv4 address and its IPv6-mapped form alike).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if ip.is_ipv4() != self.net.is_ipv4() {
            return false;
        }
        let width = if self.net.is_ipv4() { 32 } else { 128 };
        let host_bits = u32::from(width - self.bits);
        let mask = u128::MAX.checked_shl(host_bits).unwrap_or(0);
        as_u128(ip) & mask == as_u128(self.net) & mask
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

/// The options as `/config` shows them, and what applies a change.
pub struct LiveConfig {
    /// Every option by its config-file name, as nsqadmin's JSON.
    pub options: RwLock<Map<String, Value>>,
    pub allow: Option<Cidr>,
    pub cluster: Arc<Cluster>,
    /// Sets the log level of the running process.
    pub set_log_level: Box<dyn Fn(tracing::Level) + Send + Sync>,
}

/// nsqd's number for a log level (`lg.LogLevel`).
pub fn level_number(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::TRACE | tracing::Level::DEBUG => 1,
        tracing::Level::INFO => 2,
        tracing::Level::WARN => 3,
        tracing::Level::ERROR => 4,
    }
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
                let addrs = crate::cluster::dedup(addrs);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_as_go() {
        let c = Cidr::parse("127.0.0.1/8").unwrap();
        assert!(c.contains("127.9.9.9".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.2".parse().unwrap()));
        assert!(!c.contains("10.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("192.168.1.1".parse().unwrap()));
        let one = Cidr::parse("10.1.2.3/32").unwrap();
        assert!(one.contains("10.1.2.3".parse().unwrap()));
        assert!(!one.contains("10.1.2.4".parse().unwrap()));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        for bad in ["127.0.0.1", "127.0.0.1/33", "x/8", "::1/129", "1.2.3.4/+8"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}

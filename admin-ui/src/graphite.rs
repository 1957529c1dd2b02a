//! Graphite, as nsqadmin uses it: `--graphite-url` (where the brokers' statsd metrics end up),
//! `--proxy-graphite` (`GET <base>/render` forwarded to it, so a browser that cannot reach
//! Graphite still gets its charts), `GET <base>/api/graphite?metric=rate&target=T` (a
//! target's rate over the last statsd interval), and the statsd key settings
//! (`--statsd-prefix`, `--statsd-counter-format`, `--statsd-gauge-format`,
//! `--statsd-interval`) the page uses to name its targets.
//!
//! Invariants: without `--graphite-url` nothing is asked of any Graphite (the proxy route
//! does not exist, `/api/graphite` answers nsqadmin's 500); a Graphite answer is never
//! trusted: a missing or null data point is an error answer, never a panic.

use crate::upstream::Upstream;
use http1::{percent_encode, Query, Response};
use serde_json::Value;
use std::time::Duration;

/// `--graphite-url` split: over TLS or not, `host:port`, and its path (no trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphiteUrl {
    pub tls: bool,
    pub addr: String,
    pub path: String,
    /// As given, for the page.
    pub text: String,
}

impl GraphiteUrl {
    /// Reads `http(s)://host[:port][/path]` (the default port of the scheme when none).
    pub fn parse(url: &str) -> Result<GraphiteUrl, String> {
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => return Err("an http:// or https:// URL is needed".into()),
        };
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        // `host:port`, `[v6]:port`, or a host alone (`[v6]` included).
        let has_port = match host.rsplit_once(':') {
            Some((_, port)) if port.parse::<u16>().is_ok() => true,
            Some((h, port)) if !h.contains(':') && !h.starts_with('[') => {
                return Err(format!("bad port {port:?}"))
            }
            _ => false,
        };
        let addr = if has_port {
            host.to_owned()
        } else {
            format!("{host}:{}", if tls { 443 } else { 80 })
        };
        Ok(GraphiteUrl {
            tls,
            addr,
            path: path.to_owned(),
            text: url.trim_end_matches('/').to_owned(),
        })
    }
}

/// The Graphite and statsd flags.
#[derive(Debug, Clone)]
pub struct GraphiteSettings {
    pub url: Option<GraphiteUrl>,
    pub proxy: bool,
    pub statsd_prefix: String,
    pub statsd_counter_format: String,
    pub statsd_gauge_format: String,
    pub statsd_interval: Duration,
}

fn fail(status: u16, message: &str) -> Response {
    Response::json(
        status,
        serde_json::json!({ "message": message }).to_string(),
    )
    .with_header("X-NSQ-Content-Type", "nsq; version=1.0")
}

impl GraphiteSettings {
    /// `GET <base>/render?<query>` with `--proxy-graphite`: Graphite's answer as it is.
    pub fn proxy(&self, upstream: &Upstream, raw_query: &str) -> Response {
        let Some(url) = self.url.as_ref().filter(|_| self.proxy) else {
            return fail(404, "NOT_FOUND");
        };
        let path = if raw_query.is_empty() {
            format!("{}/render", url.path)
        } else {
            format!("{}/render?{raw_query}", url.path)
        };
        match upstream.get_from(url.tls, &url.addr, &path) {
            Ok(answer) => {
                let mut r = Response::empty(answer.status).with_body(answer.body);
                if !answer.content_type.is_empty() {
                    r = r.with_header("Content-Type", answer.content_type);
                }
                r
            }
            Err(e) => {
                tracing::warn!("graphite proxy: {e}");
                // What Go's reverse proxy answers when the backend cannot be reached.
                Response::empty(502)
            }
        }
    }

    /// `GET <base>/api/graphite?metric=rate&target=T`: `{"rate": "12.34"}` (per second, over
    /// the statsd interval before last), `"N/A"` for a negative value; nsqadmin's errors.
    pub fn rate(&self, upstream: &Upstream, query: Option<&Query>) -> Response {
        let Some(query) = query else {
            return fail(400, "INVALID_REQUEST");
        };
        if query.get("metric") != Some("rate") {
            return fail(400, "INVALID_ARG_METRIC");
        }
        let Some(target) = query.get("target") else {
            return fail(400, "INVALID_ARG_TARGET");
        };
        let Some(url) = &self.url else {
            return fail(500, "INTERNAL_ERROR");
        };
        let secs = self.statsd_interval.as_secs().max(1);
        // Go's url.Values.Encode: keys sorted.
        let path = format!(
            "{}/render?format=json&from=-{}sec&target={}&until=-{}sec",
            url.path,
            secs * 2,
            percent_encode(target),
            secs
        );
        tracing::info!("GRAPHITE: {}{path}", url.text);
        let first = upstream
            .get_from(url.tls, &url.addr, &path)
            .map_err(|e| e.to_string())
            .and_then(|a| {
                if a.status == 200 {
                    serde_json::from_slice::<Value>(&a.body).map_err(|e| e.to_string())
                } else {
                    Err(format!("HTTP {}", a.status))
                }
            })
            .map(|v| v.pointer("/0/datapoints/0/0").and_then(Value::as_f64));
        match first {
            Ok(Some(rate)) => {
                let rate = if rate < 0.0 {
                    "N/A".to_owned()
                } else {
                    format!("{:.2}", rate / secs as f64)
                };
                Response::json(200, serde_json::json!({ "rate": rate }).to_string())
                    .with_header("X-NSQ-Content-Type", "nsq; version=1.0")
            }
            Ok(None) => {
                tracing::error!("graphite request failed - no data point for {target}");
                fail(500, "INTERNAL_ERROR")
            }
            Err(e) => {
                tracing::error!("graphite request failed - {e}");
                fail(500, "INTERNAL_ERROR")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphite_urls() {
        let u = GraphiteUrl::parse("http://g.example:8080/").unwrap();
        assert_eq!(
            (u.tls, u.addr.as_str(), u.path.as_str()),
            (false, "g.example:8080", "")
        );
        let u = GraphiteUrl::parse("https://g.example/graphite").unwrap();
        assert_eq!(
            (u.tls, u.addr.as_str(), u.path.as_str()),
            (true, "g.example:443", "/graphite")
        );
        assert_eq!(GraphiteUrl::parse("http://g").unwrap().addr, "g:80");
        assert!(GraphiteUrl::parse("g:80").is_err());
        assert!(GraphiteUrl::parse("http:///x").is_err());
        assert!(GraphiteUrl::parse("http://g:port").is_err());
    }
}

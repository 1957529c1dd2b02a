//! AUTH as nsqd does it: asking the operator's auth servers (`--auth-http-address`) what a
//! client's secret may do, and matching its commands against the answer.
//!
//! - [`endpoint`]: an auth server's address (`host:port` means `http://host:port/auth`, or a
//!   full `http://` URL), checked at start-up, and the request sent to it: `GET` with
//!   `?common_name=&remote_ip=&secret=&tls=` or `POST` with the same values as JSON, as nsqd.
//! - [`query`]: one request per server on the shard's executor (a glommio `TcpStream` and
//!   `http1::client`), servers tried in turn from a random one until one answers
//!   ([`query_any`]); each attempt is bounded by `--http-client-connect-timeout` (connecting)
//!   and `--http-client-request-timeout` (the whole attempt), and its answer by
//!   [`query::ANSWER_LIMITS`].
//! - [`state`]: the answer (`ttl`, `identity`, `identity_url`, `authorizations`), validated as
//!   nsqd validates it (known permissions, regexes that compile, `ttl > 0`), its expiry, and
//!   the matching of a topic and channel against it ([`AuthState::is_allowed`]).
//!
//! Invariants: a failed, slow, oversized or malformed answer is an [`AuthError`], never a
//! state that grants anything, never a panic; the caller (the connection) turns it into
//! `E_AUTH_FAILED`. Nothing here blocks the shard: the only blocking step, resolving a host
//! name, runs on glommio's blocking pool. This module depends on no other module of the
//! broker, so `config` can check the addresses at start-up.

pub mod endpoint;
pub mod query;
pub mod state;

pub use endpoint::{AuthMethod, AuthRequest, AuthServer};
pub use query::query_any;
pub use state::AuthState;

use std::time::Duration;

/// The auth servers and how to ask them, from the command line.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// `--auth-http-address`, in the order given; empty: AUTH is disabled.
    pub servers: Vec<AuthServer>,
    /// `--auth-http-request-method`.
    pub method: AuthMethod,
    /// `--http-client-connect-timeout`: bound on connecting to one server.
    pub connect_timeout: Duration,
    /// `--http-client-request-timeout`: bound on one whole attempt (connect, send, answer).
    pub request_timeout: Duration,
}

impl AuthSettings {
    /// Whether clients must AUTH before publishing or subscribing (nsqd's `IsAuthEnabled`).
    pub fn enabled(&self) -> bool {
        !self.servers.is_empty()
    }
}

/// Why no auth server gave a usable answer. The text is for the broker's log only: the
/// client is told `E_AUTH_FAILED` and nothing more, as nsqd does.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

/// `s` as Go's `encoding/json` writes a string's content: serde_json's escaping plus `<`, `>`,
/// `&`, U+2028 and U+2029 as `\u` escapes (Go's HTML-safe default), so answers built here
/// are byte for byte nsqd's.
pub fn go_json_escape_html(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The body of nsqd's answer to a successful AUTH:
/// `{"identity":..,"identity_url":..,"permission_count":N}`.
pub fn auth_response_json(state: &AuthState) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Answer<'a> {
        identity: &'a str,
        identity_url: &'a str,
        permission_count: usize,
    }
    let json = serde_json::to_string(&Answer {
        identity: &state.identity,
        identity_url: &state.identity_url,
        permission_count: state.authorizations.len(),
    })
    .unwrap_or_default();
    go_json_escape_html(&json).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_auth_answer_is_nsqds_json() {
        let state = AuthState::from_answer(
            br#"{"ttl":5,"identity":"a<b>&c","identity_url":"http://x/?a=1&b=2",
                "authorizations":[{"topic":".*","channels":[".*"],"permissions":["publish"]}]}"#,
            Instant::now(),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(auth_response_json(&state)).unwrap(),
            r#"{"identity":"a\u003cb\u003e\u0026c","identity_url":"http://x/?a=1\u0026b=2","permission_count":1}"#
        );
    }

    #[test]
    fn enabled_means_some_server() {
        let mut s = AuthSettings {
            servers: Vec::new(),
            method: AuthMethod::Get,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
        };
        assert!(!s.enabled());
        s.servers.push(AuthServer::parse("127.0.0.1:4181").unwrap());
        assert!(s.enabled());
    }
}

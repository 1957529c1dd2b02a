//! The tools' HTTP client: one request over a fresh connection (`Connection: close`), plain or
//! over TLS, with NSQ's two timeouts (`--http-client-connect-timeout` for the TCP connect,
//! `--http-client-request-timeout` for the whole request). The request bytes and the reading
//! of the answer are the workspace's `http1` crate; TLS is the client's rustls stream
//! ([`client::transport::TlsStream`]); sockets and time are glommio's. Used by `nsq_stat`
//! (brokers' `/stats`, lookups' `/lookup`) and `nsq_to_http` (its endpoints).
//!
//! Invariants: every failure (bad URL, connect, TLS, timeout, a malformed or oversized answer)
//! is an `Err` with a sentence naming the address; nothing here panics on what a server sends.

use futures_lite::future;
use http1::client::{exchange, request_bytes};
use http1::{Limits, ReceivedResponse};
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

/// Bounds on an answer.
const LIMITS: Limits = Limits {
    max_header_bytes: 64 * 1024,
    max_headers: 100,
    max_body: 16 * 1024 * 1024,
};

/// An endpoint: `http://host:port/path?query` or `https://...` (no scheme reads as `http`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    /// `host:port` (the port defaulted from the scheme).
    pub authority: String,
    /// The host alone, for `Host:` and the TLS server name.
    pub host: String,
    /// Path and query, `/` at least.
    pub target: String,
}

impl Url {
    /// Reads `s`; an error names what is wrong.
    pub fn parse(s: &str) -> Result<Url, String> {
        let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else if s.contains("://") {
            return Err(format!("{s:?}: only http:// and https:// are supported"));
        } else {
            (false, s)
        };
        let (authority, target) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        if authority.is_empty() {
            return Err(format!("{s:?}: no host"));
        }
        let has_port = match authority.rfind(':') {
            Some(i) => !authority[i..].contains(']'),
            None => false,
        };
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        let host = match authority.rfind(':') {
            Some(i) => authority[..i].to_string(),
            None => authority.clone(),
        };
        Ok(Url {
            tls,
            authority,
            host,
            target,
        })
    }
}

/// The two timeouts of NSQ's HTTP clients.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

/// One request: `method` to `url` with `headers` and `body`. `tls` is needed for `https`.
pub async fn request(
    url: &Url,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeouts: Timeouts,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<ReceivedResponse, String> {
    let bytes = request_bytes(method, &url.authority, &url.target, headers, body);
    let work = async {
        let addr = url
            .authority
            .to_socket_addrs()
            .map_err(|e| format!("{}: {e}", url.authority))?
            .next()
            .ok_or_else(|| format!("{} resolves to no address", url.authority))?;
        let connect = async {
            glommio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connecting to {}: {e}", url.authority))
        };
        let mut tcp = with_timeout(timeouts.connect, connect, || {
            format!("connecting to {}: timed out", url.authority)
        })
        .await?;
        let _ = tcp.set_nodelay(true);
        let answer = if url.tls {
            let config = tls.ok_or("https needs TLS settings")?.clone();
            let name = rustls::pki_types::ServerName::try_from(url.host.trim_matches(['[', ']']))
                .map_err(|_| format!("{:?} is not a valid TLS server name", url.host))?
                .to_owned();
            let conn = rustls::ClientConnection::new(config, name)
                .map_err(|e| format!("TLS to {}: {e}", url.authority))?;
            let mut s = client::transport::TlsStream::connect(tcp, conn)
                .await
                .map_err(|e| format!("TLS handshake with {}: {e}", url.authority))?;
            exchange(&mut s, &bytes, &LIMITS).await
        } else {
            exchange(&mut tcp, &bytes, &LIMITS).await
        };
        answer.map_err(|e| format!("{} {}: {e}", method, url.authority))
    };
    with_timeout(timeouts.request, work, || {
        format!("{method} {}{}: timed out", url.authority, url.target)
    })
    .await
}

/// `fut`, or `Err(timed_out())` after `d`.
async fn with_timeout<T>(
    d: Duration,
    fut: impl std::future::Future<Output = Result<T, String>>,
    timed_out: impl FnOnce() -> String,
) -> Result<T, String> {
    future::or(fut, async {
        glommio::timer::sleep(d).await;
        Err(timed_out())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_read_as_go_reads_them() {
        let u = Url::parse("http://127.0.0.1:8080/x?a=%s").expect("url");
        assert_eq!(
            (
                u.tls,
                u.authority.as_str(),
                u.host.as_str(),
                u.target.as_str()
            ),
            (false, "127.0.0.1:8080", "127.0.0.1", "/x?a=%s")
        );
        let u = Url::parse("https://example.com").expect("url");
        assert_eq!(
            (u.tls, u.authority.as_str(), u.target.as_str()),
            (true, "example.com:443", "/")
        );
        let u = Url::parse("127.0.0.1:4151?x").expect("url");
        assert_eq!(
            (u.authority.as_str(), u.target.as_str()),
            ("127.0.0.1:4151", "/?x")
        );
        let u = Url::parse("http://[::1]/p").expect("url");
        assert_eq!(
            (u.authority.as_str(), u.host.as_str()),
            ("[::1]:80", "[::1]")
        );
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http:///p").is_err());
    }
}

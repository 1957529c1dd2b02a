//! The tools' HTTP client: [`request`], one request over a fresh connection (`Connection:
//! close`), and [`Client`], which keeps connections open between requests (HTTP/1.1
//! keep-alive, as Go's client does), each plain or over TLS, with NSQ's two timeouts (`--http-client-connect-timeout` for the TCP connect,
//! `--http-client-request-timeout` for the whole request). The request bytes and the reading
//! of the answer are the workspace's `http1` crate; TLS is the client's rustls stream
//! ([`client::transport::TlsStream`]); sockets and time are glommio's. Used by `nsq_stat`
//! (brokers' `/stats`, lookups' `/lookup`) and `nsq_to_http` (its endpoints).
//!
//! Invariants: a kept connection is reused only after a whole answer that framed its body
//! (`Content-Length` or chunked) on HTTP/1.1 without `Connection: close`, and by one request at
//! a time; a request that fails on a reused connection (the server may have closed it while
//! idle) is sent once more on a fresh one. Every failure (bad URL, connect, TLS, timeout, a malformed or oversized answer)
//! is an `Err` with a sentence naming the address; nothing here panics on what a server sends.

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use http1::client::{exchange, request_bytes};
use http1::{Limits, ReceivedResponse, Version};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::ToSocketAddrs;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
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
        let mut conn = connect(url, timeouts.connect, tls).await?;
        exchange(&mut conn, &bytes, &LIMITS)
            .await
            .map_err(|e| format!("{method} {}: {e}", url.authority))
    };
    with_timeout(timeouts.request, work, || {
        format!("{method} {}{}: timed out", url.authority, url.target)
    })
    .await
}

/// A connection to one endpoint, plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<client::transport::TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_close(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// Opens a connection to `url`'s authority (TLS for `https`), within the connect timeout.
async fn connect(
    url: &Url,
    timeout: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Conn, String> {
    let addr = url
        .authority
        .to_socket_addrs()
        .map_err(|e| format!("{}: {e}", url.authority))?
        .next()
        .ok_or_else(|| format!("{} resolves to no address", url.authority))?;
    let connect = async {
        TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {}: {e}", url.authority))
    };
    let tcp = with_timeout(timeout, connect, || {
        format!("connecting to {}: timed out", url.authority)
    })
    .await?;
    let _ = tcp.set_nodelay(true);
    if !url.tls {
        return Ok(Conn::Plain(tcp));
    }
    let config = tls.ok_or("https needs TLS settings")?.clone();
    let name = rustls::pki_types::ServerName::try_from(url.host.trim_matches(['[', ']']))
        .map_err(|_| format!("{:?} is not a valid TLS server name", url.host))?
        .to_owned();
    let conn = rustls::ClientConnection::new(config, name)
        .map_err(|e| format!("TLS to {}: {e}", url.authority))?;
    let s = client::transport::TlsStream::connect(tcp, conn)
        .await
        .map_err(|e| format!("TLS handshake with {}: {e}", url.authority))?;
    Ok(Conn::Tls(Box::new(s)))
}

/// A request head and body that leave the connection open (HTTP/1.1's default).
fn keep_alive_request(method: &str, url: &Url, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let one_line =
        |s: &str| -> String { s.chars().filter(|c| !matches!(c, '\r' | '\n')).collect() };
    let mut head = String::with_capacity(128 + url.target.len());
    let _ = write!(head, "{method} {} HTTP/1.1\r\n", one_line(&url.target));
    let _ = write!(head, "Host: {}\r\n", one_line(&url.authority));
    for (name, value) in headers {
        let _ = write!(head, "{}: {}\r\n", one_line(name), one_line(value));
    }
    if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
        let _ = write!(head, "Content-Length: {}\r\n", body.len());
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// True when the connection that carried `answer` may carry another request.
fn reusable(answer: &ReceivedResponse) -> bool {
    let framed = answer.header("content-length").is_some()
        || answer
            .header("transfer-encoding")
            .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
    let close = answer
        .header("connection")
        .is_some_and(|c| c.eq_ignore_ascii_case("close"));
    answer.version == Version::Http11 && framed && !close
}

/// Idle connections kept per endpoint (`scheme://authority`).
const MAX_IDLE_PER_ENDPOINT: usize = 256;

/// Requests with connections kept open between them.
pub struct Client {
    timeouts: Timeouts,
    tls: Option<Arc<rustls::ClientConfig>>,
    idle: RefCell<HashMap<String, Vec<Conn>>>,
}

impl Client {
    pub fn new(timeouts: Timeouts, tls: Option<Arc<rustls::ClientConfig>>) -> Client {
        Client {
            timeouts,
            tls,
            idle: RefCell::new(HashMap::new()),
        }
    }

    /// One request: on an idle connection to the endpoint if there is one (once more on a
    /// fresh connection if that fails), else on a fresh one; the whole within the request
    /// timeout.
    pub async fn request(
        &self,
        url: &Url,
        method: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ReceivedResponse, String> {
        let key = format!("{}{}", if url.tls { "s:" } else { ":" }, url.authority);
        let bytes = keep_alive_request(method, url, headers, body);
        let work = async {
            let kept = self.idle.borrow_mut().get_mut(&key).and_then(Vec::pop);
            let fresh = kept.is_none();
            let mut conn = match kept {
                Some(c) => c,
                None => connect(url, self.timeouts.connect, self.tls.as_ref()).await?,
            };
            let answer = match exchange(&mut conn, &bytes, &LIMITS).await {
                Ok(a) => a,
                Err(e) if fresh => return Err(format!("{method} {}: {e}", url.authority)),
                Err(_) => {
                    conn = connect(url, self.timeouts.connect, self.tls.as_ref()).await?;
                    exchange(&mut conn, &bytes, &LIMITS)
                        .await
                        .map_err(|e| format!("{method} {}: {e}", url.authority))?
                }
            };
            if reusable(&answer) {
                let mut idle = self.idle.borrow_mut();
                let list = idle.entry(key.clone()).or_default();
                if list.len() < MAX_IDLE_PER_ENDPOINT {
                    list.push(conn);
                }
            }
            Ok(answer)
        };
        with_timeout(self.timeouts.request, work, || {
            format!("{method} {}{}: timed out", url.authority, url.target)
        })
        .await
    }
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

//! The tools' HTTP client: [`request`], one request over a fresh connection (`Connection:
//! close`), and [`Client`], which keeps connections open between requests (HTTP/1.1
//! keep-alive, as Go's client does), each plain or over TLS, with NSQ's two timeouts (`--http-client-connect-timeout` for the TCP connect,
//! `--http-client-request-timeout` for the whole request). The request bytes and the reading
//! of the answer are the workspace's `http1` crate; TLS is the client's rustls stream
//! ([`client::transport::TlsStream`]); sockets and time are glommio's. Used by `nsq_stat`
//! (brokers' `/stats`, lookups' `/lookup`) and `nsq_to_http` (its endpoints).
//!
//! Connections per endpoint, as Go's `http.Transport` that NSQ's tools use: a request takes an
//! idle one (the one used last) if there is one, else opens one, so there are never more than
//! the requests under way; idle beyond [`MAX_IDLE_PER_ENDPOINT`] (Go's default, 2) for
//! [`IDLE_GRACE`] a connection closes, so a burst leaves two open, while steady concurrent
//! requests keep reusing theirs instead of opening one a request (Go closes the third idle one
//! at once). Beyond Go, new connections are let out [`MAX_OPENING_PER_ENDPOINT`] at a
//! time: a request that would open one while that many fresh ones still wait for their first
//! answer waits for one of them (or an idle one) instead. A burst of requests against a server
//! with a small listen backlog (Python's `http.server`: 5) then does not overflow its accept
//! queue; a connection the server's kernel dropped there (SYN cookies) looks open to us, and
//! its request waits out TCP's doubling retransmissions, which the burst's newer connections
//! keep winning, past the request timeout. (The price: an endpoint that closes every
//! connection after its answer gets at most that many requests at once. Counting a connection
//! as opened once the server's kernel acknowledged the request is not enough: the kernel
//! queues what the application has not accepted yet, and that queue is what overflows.)
//!
//! Invariants: a kept connection is reused only after a whole answer that framed its body
//! (`Content-Length` or chunked) on HTTP/1.1 without `Connection: close`, and by one request at
//! a time; a request that fails on a reused connection (the server may have closed it while
//! idle) is sent once more on a fresh one; the count of fresh connections waiting for their
//! first answer is given back however the request ends (answer, error, timeout). Every failure
//! (bad URL, connect, TLS, timeout, a malformed or oversized answer) is an `Err` with a
//! sentence naming the address; nothing here panics on what a server sends.

use futures_lite::io::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use http1::client::{exchange, request_bytes};
use http1::{Limits, ReceivedResponse, Version};
use nsq_common::local_sync::Notify;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::ToSocketAddrs;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

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

/// Idle connections kept per endpoint (`scheme://authority`) once a burst is over: Go's
/// `DefaultMaxIdleConnsPerHost`.
pub const MAX_IDLE_PER_ENDPOINT: usize = 2;
/// How long a connection beyond [`MAX_IDLE_PER_ENDPOINT`] may stay idle.
pub const IDLE_GRACE: Duration = Duration::from_secs(1);
/// A bound on idle connections per endpoint at any moment.
const MAX_IDLE_BURST: usize = 256;
/// Fresh connections per endpoint that may wait for their first answer at once; below a stock
/// listen backlog of 5, so a burst never overflows a small server's accept queue.
pub const MAX_OPENING_PER_ENDPOINT: usize = 4;

/// One endpoint's connections.
#[derive(Default)]
struct Endpoint {
    /// Idle connections and when each went idle, the most recent last.
    idle: Vec<(Conn, Instant)>,
    /// Fresh connections (being opened, or waiting for their first answer).
    opening: usize,
}

/// Requests with connections kept open between them.
pub struct Client {
    timeouts: Timeouts,
    tls: Option<Arc<rustls::ClientConfig>>,
    endpoints: Rc<RefCell<HashMap<String, Endpoint>>>,
    /// True while a task is due to close the idle connections beyond the kept ones.
    reaping: Rc<Cell<bool>>,
    /// Poked when a connection goes idle or a fresh one stops counting as opening.
    freed: Notify,
}

/// A fresh connection's place among [`MAX_OPENING_PER_ENDPOINT`], given back when dropped.
struct Opening<'a> {
    client: &'a Client,
    key: &'a str,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Some(ep) = self.client.endpoints.borrow_mut().get_mut(self.key) {
            ep.opening = ep.opening.saturating_sub(1);
        }
        self.client.freed.notify();
    }
}

/// How a request gets its connection.
enum Slot<'a> {
    Kept(Conn),
    Fresh(Opening<'a>),
}

impl Client {
    pub fn new(timeouts: Timeouts, tls: Option<Arc<rustls::ClientConfig>>) -> Client {
        Client {
            timeouts,
            tls,
            endpoints: Rc::default(),
            reaping: Rc::default(),
            freed: Notify::new(),
        }
    }

    /// An idle connection to `key`, or the right to open one; waits while neither is free.
    async fn slot<'a>(&'a self, key: &'a str) -> Slot<'a> {
        loop {
            let freed = {
                let mut endpoints = self.endpoints.borrow_mut();
                let ep = endpoints.entry(key.to_string()).or_default();
                if let Some((conn, _)) = ep.idle.pop() {
                    return Slot::Kept(conn);
                }
                if ep.opening < MAX_OPENING_PER_ENDPOINT {
                    ep.opening += 1;
                    return Slot::Fresh(Opening { client: self, key });
                }
                self.freed.changed()
            };
            freed.await;
        }
    }

    async fn open(&self, url: &Url) -> Result<Conn, String> {
        connect(url, self.timeouts.connect, self.tls.as_ref()).await
    }

    /// One request: on an idle connection to the endpoint if there is one (once more on a
    /// fresh connection if that fails), else on a fresh one; the whole, waiting for a
    /// connection included, within the request timeout.
    pub async fn request(
        &self,
        url: &Url,
        method: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ReceivedResponse, String> {
        let key = format!("{}{}", if url.tls { "s:" } else { ":" }, url.authority);
        let bytes = keep_alive_request(method, url, headers, body);
        let failed = |e: http1::client::ExchangeError| format!("{method} {}: {e}", url.authority);
        let work = async {
            let (mut conn, opening) = match self.slot(&key).await {
                Slot::Fresh(opening) => (self.open(url).await?, Some(opening)),
                Slot::Kept(mut conn) => match exchange(&mut conn, &bytes, &LIMITS).await {
                    Ok(answer) => {
                        self.keep(&key, conn, &answer);
                        return Ok(answer);
                    }
                    // The server may have closed it while it was idle: once more, fresh.
                    Err(_) => {
                        drop(conn);
                        match self.slot(&key).await {
                            Slot::Kept(c) => (c, None),
                            Slot::Fresh(opening) => (self.open(url).await?, Some(opening)),
                        }
                    }
                },
            };
            let answer = exchange(&mut conn, &bytes, &LIMITS).await.map_err(failed)?;
            drop(opening);
            self.keep(&key, conn, &answer);
            Ok(answer)
        };
        with_timeout(self.timeouts.request, work, || {
            format!("{method} {}{}: timed out", url.authority, url.target)
        })
        .await
    }

    /// Keeps `conn` idle after `answer` if it may carry another request; otherwise it closes
    /// (dropped). Past [`MAX_IDLE_PER_ENDPOINT`] idle, the reaper is due.
    fn keep(&self, key: &str, conn: Conn, answer: &ReceivedResponse) {
        let crowded = reusable(answer) && {
            let mut endpoints = self.endpoints.borrow_mut();
            let ep = endpoints.entry(key.to_string()).or_default();
            if ep.idle.len() < MAX_IDLE_BURST {
                ep.idle.push((conn, Instant::now()));
            }
            ep.idle.len() > MAX_IDLE_PER_ENDPOINT
        };
        if crowded && !self.reaping.replace(true) {
            let (endpoints, reaping) = (Rc::downgrade(&self.endpoints), self.reaping.clone());
            glommio::spawn_local(reap(endpoints, reaping)).detach();
        }
        self.freed.notify();
    }
}

/// Closes, every [`IDLE_GRACE`], the connections idle that long beyond the
/// [`MAX_IDLE_PER_ENDPOINT`] most recently used of each endpoint; ends when none is left over
/// (or the client is gone).
async fn reap(endpoints: Weak<RefCell<HashMap<String, Endpoint>>>, reaping: Rc<Cell<bool>>) {
    loop {
        glommio::timer::sleep(IDLE_GRACE).await;
        let Some(all) = endpoints.upgrade() else {
            return;
        };
        let mut all = all.borrow_mut();
        let now = Instant::now();
        let mut left_over = false;
        for ep in all.values_mut() {
            let extra = ep.idle.len().saturating_sub(MAX_IDLE_PER_ENDPOINT);
            // The oldest come first: close the ones of the surplus idle the whole grace.
            let stale = ep.idle[..extra]
                .iter()
                .take_while(|(_, since)| now.duration_since(*since) >= IDLE_GRACE)
                .count();
            ep.idle.drain(..stale);
            left_over |= ep.idle.len() > MAX_IDLE_PER_ENDPOINT;
        }
        if !left_over {
            reaping.set(false);
            return;
        }
    }
}

/// `fut`, or `Err(timed_out())` after `d`.
async fn with_timeout<T>(
    d: Duration,
    fut: impl std::future::Future<Output = Result<T, String>>,
    timed_out: impl FnOnce() -> String,
) -> Result<T, String> {
    nsq_common::timeout::with_timeout(d, fut)
        .await
        .unwrap_or_else(|| Err(timed_out()))
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

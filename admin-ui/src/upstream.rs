//! One HTTP request to a lookup or a broker: a fresh connection (`Connection: close`), bounded
//! in time, sent and read by `http1::client` over the blocking socket, in the clear or over
//! TLS. A failure is an [`UpstreamError`] (no answer, an error status, a body that is not
//! JSON) whose text names the URL asked, ready to show an operator.
//!
//! The scheme follows nsqadmin: every request goes to `http://host:port` first; a broker that
//! serves its API over HTTPS only (nsqd's `--tls-required`) answers `403` with
//! `{"message": "TLS_REQUIRED", "https_port": N}`, and the request is sent again, once, to
//! `https://host:N` with the TLS settings of [`crate::tls`]. Nothing is remembered between
//! requests, so a broker that changes its mind is followed at once.
//!
//! Every request is logged as nsqadmin logs its upstream calls (`querying GET http://...`), at
//! info, or at debug on a thread marked quiet ([`set_quiet_here`]: the rates sampler's, which
//! asks every node each interval).
//!
//! Invariants: a request never waits longer than the connect timeout to connect, the request
//! timeout for any one read or write (TLS handshake included), and [`DEADLINE_FACTOR`] request
//! timeouts for the whole answer; an answer is never
//! larger than [`MAX_ANSWER`]; a failed handshake (a certificate not trusted, a client
//! certificate refused) is an error saying so, never a hang nor a plaintext retry.

use crate::wire::{self, ErrorBody};
use futures_lite::io::AssertAsync;
use http1::client::{exchange, request_bytes, ExchangeError};
use http1::Limits;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Logs this thread's requests at debug (true) or info (false, the default).
pub fn set_quiet_here(quiet: bool) {
    QUIET.with(|q| q.set(quiet));
}

/// Whether this thread's requests are logged at debug only.
pub fn quiet_here() -> bool {
    QUIET.with(std::cell::Cell::get)
}

/// How many request timeouts a whole answer may take, however its bytes trickle in (15 s at
/// nsqadmin's default 5 s: a busy broker's `/stats` is large).
const DEADLINE_FACTOR: u32 = 3;
/// The largest answer read (a busy broker's `/stats` with every client is large).
const MAX_ANSWER: usize = 64 << 20;
/// Who asks.
const USER_AGENT: &str = concat!("admin-ui/", env!("CARGO_PKG_VERSION"));

/// Why a request to a lookup or a broker gave nothing usable; its text names the request
/// (`GET http://host:port/path`).
#[derive(Debug)]
pub enum UpstreamError {
    /// No answer: the address does not resolve, or connecting, the TLS handshake, sending or
    /// reading failed (`what` says which).
    Unreachable { request: String, what: String },
    /// An answer whose status says the request failed, with what its body says.
    Status {
        request: String,
        status: u16,
        says: String,
    },
    /// A `200` whose body is not JSON.
    NotJson {
        request: String,
        error: serde_json::Error,
    },
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Unreachable { request, what } => write!(f, "{request}: {what}"),
            UpstreamError::Status {
                request,
                status,
                says,
            } => write!(f, "{request}: HTTP {status}: {says}"),
            UpstreamError::NotJson { request, error } => write!(f, "{request}: not JSON: {error}"),
        }
    }
}

impl std::error::Error for UpstreamError {}

/// An answer: where it came from (`http://host:port` or `https://host:port`), its status and
/// body.
pub struct Answer {
    pub origin: String,
    pub status: u16,
    /// Its `Content-Type`, empty when it had none.
    pub content_type: String,
    pub body: bytes::Bytes,
}

/// How long a request may wait (nsqadmin's `--http-client-connect-timeout` and
/// `--http-client-request-timeout`, both more than zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To connect.
    pub connect: Duration,
    /// For any one read or write, the TLS handshake's included.
    pub request: Duration,
}

impl Default for Timeouts {
    /// nsqadmin's defaults: 2 s to connect, 5 s per request.
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(2),
            request: Duration::from_secs(5),
        }
    }
}

/// Sends requests to lookups and brokers, with the TLS settings for those that want HTTPS.
pub struct Upstream {
    tls: Arc<ClientConfig>,
    timeouts: Timeouts,
}

/// A blocking socket whose reads fail once the request's deadline has passed, so that an
/// answer trickling in byte by byte cannot hold a request longer than that; its timeouts are
/// said in words.
struct Deadlined {
    sock: TcpStream,
    until: Instant,
    timeouts: Timeouts,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if Instant::now() > self.until {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no whole answer within {:?}",
                    self.timeouts.request * DEADLINE_FACTOR
                ),
            ));
        }
        self.sock.read(buf).map_err(|e| self.timed_out(e))
    }
}

impl Deadlined {
    /// A socket timeout (which Linux reports as `WouldBlock`) said in words.
    fn timed_out(&self, e: std::io::Error) -> std::io::Error {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("timed out: nothing for {:?}", self.timeouts.request),
            ),
            _ => e,
        }
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sock.write(buf).map_err(|e| self.timed_out(e))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

/// The connection a request travels on.
enum Conn {
    Plain(Deadlined),
    Tls(Box<StreamOwned<ClientConnection, Deadlined>>),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            // Go's and Python's servers close without TLS's close_notify: that ends the
            // stream, and the HTTP decoder still refuses an answer cut short of its length.
            Conn::Tls(s) => match s.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// `host:port` split at its last colon, the brackets of an IPv6 host kept.
fn split_addr(addr: &str) -> (&str, &str) {
    addr.rsplit_once(':').unwrap_or((addr, ""))
}

/// The HTTPS port of a `403` that says TLS is required (nsqd's `TLS_REQUIRED` answer).
fn tls_required_port(answer: &Answer) -> Option<u16> {
    if answer.status != 403 {
        return None;
    }
    let body: ErrorBody = wire::parse(&answer.body).ok()?;
    u16::try_from(body.https_port?).ok().filter(|p| *p != 0)
}

/// The flag that would help with a TLS error `e`, if any (empty otherwise).
fn tls_hint(e: &std::io::Error) -> &'static str {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_)) => {
            " (the broker's certificate is not trusted: see --http-client-tls-root-ca-file \
             and --http-client-tls-insecure-skip-verify)"
        }
        Some(rustls::Error::AlertReceived(_)) => {
            " (the broker refused the TLS session: does it want a client certificate, \
             --http-client-tls-cert and --http-client-tls-key?)"
        }
        _ => "",
    }
}

impl Upstream {
    pub fn new(tls: Arc<ClientConfig>, timeouts: Timeouts) -> Upstream {
        Upstream { tls, timeouts }
    }

    /// Sends `method path` (with its query) to `addr` (`host:port`) and reads the answer;
    /// again over HTTPS when the broker answers that it requires TLS.
    pub fn request(&self, addr: &str, method: &str, path: &str) -> Result<Answer, UpstreamError> {
        self.request_with(addr, method, path, None)
    }

    /// [`Upstream::request`] with a body: its content type and bytes.
    fn request_with(
        &self,
        addr: &str,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<Answer, UpstreamError> {
        let answer = self.send(false, addr, method, path, body)?;
        match tls_required_port(&answer) {
            Some(port) => {
                let secure = format!("{}:{port}", split_addr(addr).0);
                self.send(true, &secure, method, path, body)
            }
            None => Ok(answer),
        }
    }

    /// One request on a fresh connection to `addr`, over TLS when `tls`.
    fn send(
        &self,
        tls: bool,
        addr: &str,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<Answer, UpstreamError> {
        let timeouts = self.timeouts;
        let until = Instant::now() + timeouts.request * DEADLINE_FACTOR;
        let scheme = if tls { "https" } else { "http" };
        if quiet_here() {
            tracing::debug!("querying {method} {scheme}://{addr}{path}");
        } else {
            tracing::info!("querying {method} {scheme}://{addr}{path}");
        }
        let fail = |what: &str| UpstreamError::Unreachable {
            request: format!("{method} {scheme}://{addr}{path}"),
            what: what.to_owned(),
        };
        let target = addr
            .to_socket_addrs()
            .map_err(|e| fail(&e.to_string()))?
            .next()
            .ok_or_else(|| fail("resolves to nothing"))?;
        let sock = TcpStream::connect_timeout(&target, timeouts.connect)
            .map_err(|e| fail(&format!("cannot connect: {e}")))?;
        let _ = sock.set_nodelay(true);
        sock.set_read_timeout(Some(timeouts.request))
            .and_then(|()| sock.set_write_timeout(Some(timeouts.request)))
            .map_err(|e| fail(&e.to_string()))?;
        let sock = Deadlined {
            sock,
            until,
            timeouts,
        };
        let conn = if tls {
            let host = split_addr(addr)
                .0
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| fail(&format!("not a TLS server name: {e}")))?;
            let tls_conn = ClientConnection::new(self.tls.clone(), name)
                .map_err(|e| fail(&format!("TLS: {e}")))?;
            let mut stream = StreamOwned::new(tls_conn, sock);
            while stream.conn.is_handshaking() {
                stream
                    .conn
                    .complete_io(&mut stream.sock)
                    .map_err(|e| fail(&format!("TLS handshake failed: {e}{}", tls_hint(&e))))?;
            }
            Conn::Tls(Box::new(stream))
        } else {
            Conn::Plain(sock)
        };
        let (content_type, body) = body.unwrap_or(("", &[]));
        let mut headers = vec![("Accept", "application/json"), ("User-Agent", USER_AGENT)];
        if !content_type.is_empty() {
            headers.push(("Content-Type", content_type));
        }
        let request = request_bytes(method, addr, path, &headers, body);
        let limits = Limits {
            max_body: MAX_ANSWER,
            ..Limits::default()
        };
        let mut stream = AssertAsync::new(conn);
        let resp = futures_lite::future::block_on(exchange(&mut stream, &request, &limits))
            .map_err(|e| {
                let hint = match &e {
                    ExchangeError::Send(io) | ExchangeError::Receive(io) => tls_hint(io),
                    ExchangeError::Response(_) => "",
                };
                fail(&format!("{e}{hint}"))
            })?;
        Ok(Answer {
            origin: format!("{scheme}://{addr}"),
            status: resp.status,
            content_type: resp.header("Content-Type").unwrap_or_default().to_owned(),
            body: resp.body,
        })
    }

    /// GETs `path` from `addr` over HTTPS when `tls` (a URL whose scheme is known, such as
    /// Graphite's: no `TLS_REQUIRED` round), whatever the status.
    pub fn get_from(&self, tls: bool, addr: &str, path: &str) -> Result<Answer, UpstreamError> {
        self.send(tls, addr, "GET", path, None)
    }

    /// GETs `path` from `addr` and reads its JSON body as `T` (see [`wire::parse`]); anything
    /// but a 200 is an error.
    pub fn get_json<T: DeserializeOwned + Default>(
        &self,
        addr: &str,
        path: &str,
    ) -> Result<T, UpstreamError> {
        let answer = self.request(addr, "GET", path)?;
        if answer.status != 200 {
            return Err(answer.failed("GET", path, body_text(&answer.body)));
        }
        answer.json("GET", path)
    }

    /// POSTs `path` (an action: its arguments in the query) to `addr`; anything but a 2xx is
    /// an error carrying the body's `message` when there is one.
    pub fn post(&self, addr: &str, path: &str) -> Result<(), UpstreamError> {
        check_posted(path, self.request(addr, "POST", path)?)
    }

    /// POSTs `body` to `path` of `addr`, over HTTPS when `tls` (a notification endpoint's
    /// scheme is known beforehand: no `TLS_REQUIRED` round); as [`Upstream::post`].
    pub fn post_body(
        &self,
        tls: bool,
        addr: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<(), UpstreamError> {
        let body = Some((content_type, body));
        let answer = if tls {
            self.send(true, addr, "POST", path, body)?
        } else {
            self.request_with(addr, "POST", path, body)?
        };
        check_posted(path, answer)
    }
}

fn check_posted(path: &str, answer: Answer) -> Result<(), UpstreamError> {
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    let says = wire::parse::<ErrorBody>(&answer.body)
        .ok()
        .and_then(|b| b.message)
        .unwrap_or_else(|| body_text(&answer.body));
    Err(answer.failed("POST", path, says))
}

/// A body as text to quote in an error, its surrounding white space trimmed.
pub fn body_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).trim().to_owned()
}

impl Answer {
    /// The error for this answer to `method path`: its status, and `says`.
    pub fn failed(&self, method: &str, path: &str, says: String) -> UpstreamError {
        UpstreamError::Status {
            request: format!("{method} {}{path}", self.origin),
            status: self.status,
            says,
        }
    }

    /// Its body read as `T` (see [`wire::parse`]); an error when it is not JSON.
    pub fn json<T: DeserializeOwned + Default>(
        &self,
        method: &str,
        path: &str,
    ) -> Result<T, UpstreamError> {
        wire::parse(&self.body).map_err(|error| UpstreamError::NotJson {
            request: format!("{method} {}{path}", self.origin),
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            origin: "http://h:1".into(),
            status,
            content_type: String::new(),
            body: bytes::Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    #[test]
    fn only_nsqds_tls_required_answer_switches_to_https() {
        let required = r#"{"message": "TLS_REQUIRED", "https_port": 4152}"#;
        assert_eq!(tls_required_port(&answer(403, required)), Some(4152));
        assert_eq!(tls_required_port(&answer(200, required)), None);
        assert_eq!(
            tls_required_port(&answer(403, r#"{"message": "FORBIDDEN"}"#)),
            None
        );
        assert_eq!(
            tls_required_port(&answer(403, r#"{"https_port": 0}"#)),
            None
        );
        assert_eq!(
            tls_required_port(&answer(403, r#"{"https_port": 70000}"#)),
            None
        );
        assert_eq!(tls_required_port(&answer(403, "not json")), None);
        assert_eq!(split_addr("[::1]:4151"), ("[::1]", "4151"));
    }

    /// A listener that answers every connection with `reply` (after reading the request's
    /// first bytes) and closes it.
    fn serve(reply: Vec<u8>) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let mut conn = conn;
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(&reply);
            }
        });
        port
    }

    #[test]
    fn tls_required_is_followed_to_https_and_a_failed_handshake_says_so() {
        // The "HTTPS" port speaks plain HTTP: the handshake fails at once, with the URL.
        let https = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_vec());
        let body = format!(r#"{{"message": "TLS_REQUIRED", "https_port": {https}}}"#);
        let plain = serve(
            format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        );
        let tls = crate::tls::client_config(&crate::tls::TlsFlags::default()).unwrap();
        let up = Upstream::new(tls, Timeouts::default());
        let e = up
            .get_json::<crate::wire::Stats>(&format!("127.0.0.1:{plain}"), "/stats?format=json")
            .expect_err("a plain answer on the HTTPS port is an error")
            .to_string();
        assert!(
            e.starts_with(&format!(
                "GET https://127.0.0.1:{https}/stats?format=json: TLS handshake failed"
            )),
            "{e}"
        );
        // A plain broker is asked once, in the clear.
        let ok = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": true}".to_vec());
        let v: serde_json::Value = up.get_json(&format!("127.0.0.1:{ok}"), "/info").unwrap();
        assert_eq!(v, serde_json::json!({"a": true}));
    }
}

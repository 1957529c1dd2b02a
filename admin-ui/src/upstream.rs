//! One HTTP request to a lookup or a broker: a fresh connection (`Connection: close`), bounded
//! in time, sent and read by `http1::client` over the blocking socket. Failures come back as
//! text that names the address and the path, ready to show an operator.

use futures_lite::io::AssertAsync;
use http1::client::{exchange, request_bytes};
use http1::Limits;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one read or write may block.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole request may take, however its bytes trickle in.
const DEADLINE: Duration = Duration::from_secs(15);
/// The largest answer read (a busy broker's `/stats` with every client is large).
const MAX_ANSWER: usize = 64 << 20;
/// Who asks.
const USER_AGENT: &str = concat!("admin-ui/", env!("CARGO_PKG_VERSION"));

/// An answer: its status and body.
pub struct Answer {
    pub status: u16,
    pub body: bytes::Bytes,
}

/// A blocking socket whose reads fail once the request's deadline has passed, so that an
/// answer trickling in byte by byte cannot hold a request longer than [`DEADLINE`].
struct Deadlined {
    sock: TcpStream,
    until: Instant,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if Instant::now() > self.until {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no whole answer within {DEADLINE:?}"),
            ));
        }
        self.sock.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

/// Sends `method path` (with its query) to `addr` (`host:port`) and reads the answer.
pub fn request(addr: &str, method: &str, path: &str) -> Result<Answer, String> {
    request_with(addr, method, path, None)
}

/// [`request`] with a body: its content type and bytes.
fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
) -> Result<Answer, String> {
    let until = Instant::now() + DEADLINE;
    let fail = |what: &str| format!("{method} http://{addr}{path}: {what}");
    let target = addr
        .to_socket_addrs()
        .map_err(|e| fail(&e.to_string()))?
        .next()
        .ok_or_else(|| fail("resolves to nothing"))?;
    let sock = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
        .map_err(|e| fail(&format!("cannot connect: {e}")))?;
    let _ = sock.set_nodelay(true);
    sock.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| sock.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| fail(&e.to_string()))?;
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
    let mut stream = AssertAsync::new(Deadlined { sock, until });
    let resp = futures_lite::future::block_on(exchange(&mut stream, &request, &limits))
        .map_err(|e| fail(&e.to_string()))?;
    Ok(Answer {
        status: resp.status,
        body: resp.body,
    })
}

/// GETs `path` from `addr` and reads its JSON body; anything but a 200 is an error.
pub fn get_json(addr: &str, path: &str) -> Result<serde_json::Value, String> {
    let answer = request(addr, "GET", path)?;
    if answer.status != 200 {
        return Err(format!(
            "GET http://{addr}{path}: HTTP {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body).trim()
        ));
    }
    serde_json::from_slice(&answer.body)
        .map_err(|e| format!("GET http://{addr}{path}: not JSON: {e}"))
}

/// POSTs `path` (an action: its arguments in the query) to `addr`; anything but a 2xx is an
/// error carrying the body's `message` when there is one.
pub fn post(addr: &str, path: &str) -> Result<(), String> {
    check_posted(addr, path, request(addr, "POST", path)?)
}

/// POSTs `body` to `path` of `addr`; as [`post`].
pub fn post_body(addr: &str, path: &str, content_type: &str, body: &[u8]) -> Result<(), String> {
    let answer = request_with(addr, "POST", path, Some((content_type, body)))?;
    check_posted(addr, path, answer)
}

fn check_posted(addr: &str, path: &str, answer: Answer) -> Result<(), String> {
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    let text = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&answer.body).trim().to_owned());
    Err(format!(
        "POST http://{addr}{path}: HTTP {}: {text}",
        answer.status
    ))
}

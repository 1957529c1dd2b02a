//! One HTTP request to a lookup or a broker: a fresh connection (`Connection: close`), bounded
//! in time, the answer read with `protocol::http::decode_response`. Failures come back as text
//! that names the address and the path, ready to show an operator.

use protocol::http::{decode_response, Limits};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one read or write may block.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole request may take, however its bytes trickle in.
const DEADLINE: Duration = Duration::from_secs(15);
/// The largest answer read (a busy broker's `/stats` with every client is large).
const MAX_ANSWER: usize = 64 << 20;

/// An answer: its status and body.
pub struct Answer {
    pub status: u16,
    pub body: bytes::Bytes,
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
    let started = std::time::Instant::now();
    let fail = |what: &str| format!("{method} http://{addr}{path}: {what}");
    let target = addr
        .to_socket_addrs()
        .map_err(|e| fail(&e.to_string()))?
        .next()
        .ok_or_else(|| fail("resolves to nothing"))?;
    let mut sock = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
        .map_err(|e| fail(&format!("cannot connect: {e}")))?;
    let _ = sock.set_nodelay(true);
    sock.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| sock.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| fail(&e.to_string()))?;
    let (content_type, body) = body.unwrap_or(("", &[]));
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\
         User-Agent: admin-ui/{}\r\nContent-Length: {}\r\nConnection: close\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    if !content_type.is_empty() {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes())
        .and_then(|()| sock.write_all(body))
        .map_err(|e| fail(&format!("cannot send: {e}")))?;
    let limits = Limits {
        max_body: MAX_ANSWER,
        ..Limits::default()
    };
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if started.elapsed() > DEADLINE {
            return Err(fail(&format!("no whole answer within {DEADLINE:?}")));
        }
        let n = sock
            .read(&mut chunk)
            .map_err(|e| fail(&format!("cannot read the answer: {e}")))?;
        buf.extend_from_slice(&chunk[..n]);
        match decode_response(&buf, n == 0, &limits) {
            Ok(Some((resp, _))) => {
                return Ok(Answer {
                    status: resp.status,
                    body: resp.body,
                })
            }
            Ok(None) if n > 0 => {}
            Ok(None) => return Err(fail("connection closed before the answer")),
            Err(e) => return Err(fail(&format!("bad answer: {e}"))),
        }
    }
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

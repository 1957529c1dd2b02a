//! One request over a fresh connection, and its answer: what the admin UI asks of brokers and
//! lookups, what the client library asks a lookup (`/lookup`) and what the broker asks a lookup
//! (`/channels`).
//!
//! [`request_bytes`] writes the request (HTTP/1.1, `Connection: close`); [`exchange`] sends it
//! on any `futures-lite` stream and reads until [`decode_response`] has the whole answer (the
//! server need not close first). The caller owns connecting and time: it wraps [`exchange`] in
//! its runtime's timeout, or, on a blocking socket, gives it an `AssertAsync` stream with read
//! and write timeouts.
//!
//! Invariants: the answer buffer never holds more than `limits` allow (the decoder refuses a
//! longer head or body as soon as it sees it); a closed connection before the whole answer is
//! an error, never a partial answer.

use crate::response_decoder::{decode_response, ReceivedResponse, ResponseError};
use crate::Limits;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::fmt::Write as _;

/// `Accept` for nsqlookupd's and nsqd's V1 API answers.
pub const ACCEPT_NSQ_V1: &str = "application/vnd.nsq; version=1.0";

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

/// Why an [`exchange`] has no answer. The connection is of no further use.
#[derive(Debug)]
pub enum ExchangeError {
    /// Writing the request failed.
    Send(std::io::Error),
    /// Reading the answer failed.
    Receive(std::io::Error),
    /// The answer is not a response within the limits, or the server closed before its end.
    Response(ResponseError),
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Send(e) => write!(f, "cannot send: {e}"),
            ExchangeError::Receive(e) => write!(f, "cannot read the answer: {e}"),
            ExchangeError::Response(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ExchangeError {}

/// A request for `target` (path and query, already percent-encoded) of `host`, with `headers`
/// (besides `Host`, `Content-Length` and `Connection`) and `body`: HTTP/1.1, and the connection
/// closes after the answer. `Content-Length` is written unless a GET or HEAD has no body. A
/// header value is written as one line (CR and LF dropped).
pub fn request_bytes(
    method: &str,
    host: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = String::with_capacity(128 + target.len());
    let _ = write!(head, "{method} {target} HTTP/1.1\r\n");
    let one_line =
        |s: &str| -> String { s.chars().filter(|c| !matches!(c, '\r' | '\n')).collect() };
    let _ = write!(head, "Host: {}\r\n", one_line(host));
    for (name, value) in headers {
        let _ = write!(head, "{name}: {}\r\n", one_line(value));
    }
    if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
        let _ = write!(head, "Content-Length: {}\r\n", body.len());
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Sends `request` on `stream` and reads the answer, within `limits`. Returns as soon as the
/// answer is whole.
pub async fn exchange<S>(
    stream: &mut S,
    request: &[u8],
    limits: &Limits,
) -> Result<ReceivedResponse, ExchangeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream
        .write_all(request)
        .await
        .map_err(ExchangeError::Send)?;
    stream.flush().await.map_err(ExchangeError::Send)?;
    let mut raw = Vec::with_capacity(READ_CHUNK);
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(ExchangeError::Receive)?;
        raw.extend_from_slice(&chunk[..n]);
        // With `n == 0` (closed) the decoder answers a response or an error, never "more".
        match decode_response(&raw, n == 0, limits) {
            Ok(Some((response, _))) => return Ok(response),
            Ok(None) if n > 0 => {}
            Ok(None) => return Err(ExchangeError::Response(ResponseError::Truncated)),
            Err(e) => return Err(ExchangeError::Response(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A peer that answers `reply` in reads of `step` bytes and records what it was sent.
    struct Peer {
        reply: Vec<u8>,
        at: usize,
        step: usize,
        sent: Vec<u8>,
    }

    impl AsyncRead for Peer {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = self.step.min(buf.len()).min(self.reply.len() - self.at);
            let at = self.at;
            buf[..n].copy_from_slice(&self.reply[at..at + n]);
            self.at += n;
            Poll::Ready(Ok(n))
        }
    }

    impl AsyncWrite for Peer {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.sent.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn peer(reply: &[u8], step: usize) -> Peer {
        Peer {
            reply: reply.to_vec(),
            at: 0,
            step,
            sent: Vec::new(),
        }
    }

    #[test]
    fn request_head_is_one_line_per_header() {
        let get = request_bytes(
            "GET",
            "h:1",
            "/lookup?topic=t",
            &[("Accept", ACCEPT_NSQ_V1), ("X", "a\r\nEvil: 1")],
            b"",
        );
        assert_eq!(
            String::from_utf8(get).unwrap(),
            "GET /lookup?topic=t HTTP/1.1\r\nHost: h:1\r\nAccept: application/vnd.nsq; version=1.0\r\nX: aEvil: 1\r\nConnection: close\r\n\r\n"
        );
        let post = request_bytes("POST", "h", "/x", &[], b"ab");
        assert!(post.ends_with(b"Content-Length: 2\r\nConnection: close\r\n\r\nab"));
        let empty_post = request_bytes("POST", "h", "/x", &[], b"");
        assert!(empty_post.ends_with(b"Content-Length: 0\r\nConnection: close\r\n\r\n"));
    }

    #[test]
    fn answer_read_byte_by_byte_ends_when_whole() {
        // the peer never closes: the answer is done at its Content-Length
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        let mut p = peer(reply, 1);
        p.reply.extend_from_slice(b"never read");
        let r = block_on(exchange(
            &mut p,
            b"GET / HTTP/1.1\r\n\r\n",
            &Limits::default(),
        ))
        .expect("an answer");
        assert_eq!((r.status, &r.body[..]), (200, &b"{}"[..]));
        assert_eq!(p.sent, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(p.at, reply.len());
    }

    #[test]
    fn close_before_the_end_and_oversized_answers_are_errors() {
        let mut p = peer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}", 64);
        assert!(matches!(
            block_on(exchange(&mut p, b"", &Limits::default())),
            Err(ExchangeError::Response(ResponseError::Truncated))
        ));
        let mut p = peer(b"HTTP/1.0 200 OK\r\n\r\n0123456789", 4);
        let small = Limits {
            max_body: 5,
            ..Limits::default()
        };
        assert!(matches!(
            block_on(exchange(&mut p, b"", &small)),
            Err(ExchangeError::Response(ResponseError::BodyTooLarge))
        ));
        // a body that runs to the close is whole at the close
        let mut p = peer(b"HTTP/1.0 200 OK\r\n\r\n01234", 4);
        let r = block_on(exchange(&mut p, b"", &small)).expect("an answer");
        assert_eq!(&r.body[..], b"01234");
    }
}

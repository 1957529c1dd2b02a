//! Cutting requests off the front of a connection's read buffer ([`RequestDecoder`]): the head
//! parsed by `httparse` and bounded in size and header count, the body by `Content-Length` or
//! `chunked` and bounded by `max_body`, `Expect: 100-continue` signalled once per request.
//!
//! Invariants: `decode` consumes a request whole or nothing; an error leaves the stream
//! unusable (answer it, then close); any bytes give an answer, never a panic.

use crate::chunked::{ChunkError, Chunked};
use crate::escape::percent_decode;
use crate::fields::{framing, keep_alive, trimmed_value, with_header_slots, Framing, FramingError};
use crate::request::{Request, RequestHead};
use crate::response::{reason_phrase, Response};
use crate::{Limits, Version};
use bytes::{Bytes, BytesMut};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::ops::Range;

/// What [`RequestDecoder::decode`] found in the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A whole request, cut off the front of the buffer.
    Request(Request),
    /// More bytes are needed; nothing was consumed.
    Incomplete,
    /// The client waits for `100 Continue` before sending the body: write
    /// [`CONTINUE_RESPONSE`], then read on. Given once per request.
    SendContinue,
}

/// A request that cannot be served. After answering it ([`HttpError::to_response`]) the
/// connection must be closed: the stream cannot be resynchronised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// Not HTTP/1.x, or framing that does not add up: 400.
    Malformed(&'static str),
    /// Request line and headers over `max_header_bytes` or `max_headers`: 431.
    HeadersTooLarge,
    /// Body over `max_body`; the head is kept so the server can answer in its own words: 413.
    BodyTooLarge(Box<RequestHead>),
    /// A transfer coding other than `chunked`: 501.
    UnsupportedTransferEncoding,
}

impl HttpError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Malformed(_) => 400,
            HttpError::HeadersTooLarge => 431,
            HttpError::BodyTooLarge(_) => 413,
            HttpError::UnsupportedTransferEncoding => 501,
        }
    }

    /// A plain-text answer as Go's net/http gives for such requests (`400 Bad Request: ...`).
    /// Write it with `keep_alive` false.
    pub fn to_response(&self) -> Response {
        let status = self.status();
        let mut text = format!("{status} {}", reason_phrase(status));
        match self {
            HttpError::Malformed(why) => {
                let _ = write!(text, ": {why}");
            }
            HttpError::UnsupportedTransferEncoding => text = "Unsupported transfer encoding".into(),
            _ => {}
        }
        Response::text(status, text)
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Malformed(why) => write!(f, "malformed request: {why}"),
            HttpError::HeadersTooLarge => f.write_str("request headers too large"),
            HttpError::BodyTooLarge(head) => {
                write!(
                    f,
                    "request body too large ({} {})",
                    head.method(),
                    head.path()
                )
            }
            HttpError::UnsupportedTransferEncoding => f.write_str("unsupported transfer encoding"),
        }
    }
}

impl std::error::Error for HttpError {}

/// Cuts requests off the front of a connection's read buffer. One per connection: it remembers
/// whether `100 Continue` was already asked for the request in progress, and how far a chunked
/// body in progress was read.
#[derive(Debug, Clone)]
pub struct RequestDecoder {
    limits: Limits,
    continue_sent: bool,
    chunked: Chunked,
}

enum BodyFraming {
    Length(usize),
    Chunked,
}

impl RequestDecoder {
    pub fn new(limits: Limits) -> Self {
        RequestDecoder {
            limits,
            continue_sent: false,
            chunked: Chunked::default(),
        }
    }

    /// Whether the decoder holds no state of a request in progress (it has not answered
    /// `100 Continue` to a request whose body is still to come).
    pub fn is_idle(&self) -> bool {
        !self.continue_sent && self.chunked.pos == 0
    }

    /// Decodes the next request from `buf`, if all of it is there.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, HttpError> {
        let Some(head) = self.parse_head(buf)? else {
            return Ok(Decoded::Incomplete);
        };
        let data = &buf[head.len..];
        let body = match head.framing {
            BodyFraming::Length(len) if len > self.limits.max_body => {
                return Err(HttpError::BodyTooLarge(Box::new(head.copied(buf))))
            }
            BodyFraming::Length(len) => data
                .get(..len)
                .map(|body| (len, Bytes::copy_from_slice(body))),
            BodyFraming::Chunked => match self.chunked.resume(data, self.limits.max_body) {
                Ok(body) => body,
                Err(e) => {
                    self.chunked = Chunked::default();
                    return Err(match e {
                        ChunkError::TooLarge => HttpError::BodyTooLarge(Box::new(head.copied(buf))),
                        ChunkError::Malformed(why) => HttpError::Malformed(why),
                    });
                }
            },
        };
        let Some((body_len, body)) = body else {
            if head.expects_continue && head.version == Version::Http11 && !self.continue_sent {
                self.continue_sent = true;
                return Ok(Decoded::SendContinue);
            }
            return Ok(Decoded::Incomplete);
        };
        self.continue_sent = false;
        self.chunked = Chunked::default();
        // The body is copied (above): a message may outlive the read buffer by far. The head
        // is cut off the buffer as it is.
        let raw = buf.split_to(head.len).freeze();
        let _ = buf.split_to(body_len);
        Ok(Decoded::Request(Request {
            head: head.with_raw(raw),
            body,
        }))
    }

    fn parse_head(&self, buf: &[u8]) -> Result<Option<ParsedHead>, HttpError> {
        with_header_slots(self.limits.max_headers, |slots| {
            self.parse_head_in(buf, slots)
        })
    }

    fn parse_head_in<'b>(
        &self,
        buf: &'b [u8],
        slots: &mut [MaybeUninit<httparse::Header<'b>>],
    ) -> Result<Option<ParsedHead>, HttpError> {
        let mut req = httparse::Request::new(&mut []);
        let head_len = match req.parse_with_uninit_headers(buf, slots) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => {
                if buf.len() > self.limits.max_header_bytes {
                    return Err(HttpError::HeadersTooLarge);
                }
                return Ok(None);
            }
            Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadersTooLarge),
            Err(httparse::Error::Version) => {
                return Err(HttpError::Malformed("unsupported version"))
            }
            Err(_) => return Err(HttpError::Malformed("malformed request line or header")),
        };
        if head_len > self.limits.max_header_bytes {
            return Err(HttpError::HeadersTooLarge);
        }
        let version = match req.version {
            Some(0) => Version::Http10,
            Some(1) => Version::Http11,
            _ => return Err(HttpError::Malformed("unsupported version")),
        };
        // Where a part of the request line lies in `buf` (httparse hands out slices of it).
        let at = |part: &str| {
            let start = part.as_ptr() as usize - buf.as_ptr() as usize;
            start..start + part.len()
        };
        let method = at(req.method.unwrap_or_default());
        let target = req.path.unwrap_or_default();
        let (path, raw_query) = split_target(target)?;
        let decoded_path = match percent_decode(path, false) {
            None => return Err(HttpError::Malformed("invalid URL escape")),
            Some(Cow::Borrowed("")) => Some("/".to_owned()),
            Some(Cow::Borrowed(_)) => None,
            Some(Cow::Owned(p)) => Some(p),
        };
        let headers = || req.headers.iter().map(|h| (h.name, trimmed_value(h.value)));
        let framing = match framing(headers()) {
            Ok(Framing::Length(len)) => BodyFraming::Length(len),
            Ok(Framing::Chunked) => BodyFraming::Chunked,
            // a request without either has no body
            Ok(Framing::Unspecified) => BodyFraming::Length(0),
            Err(FramingError::BadLength) => return Err(HttpError::Malformed("bad Content-Length")),
            Err(FramingError::Both) => {
                return Err(HttpError::Malformed(
                    "both Transfer-Encoding and Content-Length",
                ))
            }
            Err(FramingError::UnsupportedCoding) => {
                return Err(HttpError::UnsupportedTransferEncoding)
            }
        };
        Ok(Some(ParsedHead {
            len: head_len,
            method,
            path: at(path),
            decoded_path,
            raw_query: at(raw_query),
            version,
            keep_alive: keep_alive(version, headers()),
            // Go's server sends 100 Continue to HTTP/1.1 clients only (1.0 has no such thing).
            expects_continue: version == Version::Http11
                && headers().any(|(n, v)| {
                    n.eq_ignore_ascii_case("Expect") && v.eq_ignore_ascii_case("100-continue")
                }),
            framing,
        }))
    }
}

/// A request head found at the front of the read buffer, before its body is all there.
struct ParsedHead {
    /// Bytes of the request line and headers.
    len: usize,
    method: Range<usize>,
    path: Range<usize>,
    decoded_path: Option<String>,
    raw_query: Range<usize>,
    version: Version,
    keep_alive: bool,
    expects_continue: bool,
    framing: BodyFraming,
}

impl ParsedHead {
    /// The head over its bytes, `raw` (cut off the buffer).
    fn with_raw(self, raw: Bytes) -> RequestHead {
        RequestHead {
            raw,
            method: self.method,
            path: self.path,
            decoded_path: self.decoded_path,
            raw_query: self.raw_query,
            version: self.version,
            keep_alive: self.keep_alive,
        }
    }

    /// The head over a copy of its bytes in `buf` (the buffer is left as it is).
    fn copied(self, buf: &[u8]) -> RequestHead {
        let raw = Bytes::copy_from_slice(&buf[..self.len]);
        self.with_raw(raw)
    }
}

/// Splits a request target into its path and its raw query (both slices of `target`, neither
/// decoded). `*` is a path of its own; an absolute-form target loses its authority.
fn split_target(target: &str) -> Result<(&str, &str), HttpError> {
    let target = if target == "*" {
        return Ok((target, &target[1..]));
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        // absolute-form: drop the authority
        rest.find('/').map_or(&rest[rest.len()..], |i| &rest[i..])
    } else if target.starts_with('/') {
        target
    } else {
        return Err(HttpError::Malformed("invalid request target"));
    };
    let target = target.split('#').next().unwrap_or_default();
    let (path, query) = target
        .split_once('?')
        .unwrap_or((target, &target[target.len()..]));
    Ok((path, query))
}

#[cfg(test)]
mod tests;

//! Reading one HTTP/1.x response as a client ([`decode_response`]): head by `httparse`, body by
//! `Content-Length`, chunked encoding, or the connection's close; interim 1xx responses
//! skipped; "need more bytes" until it is all there.
//!
//! Invariants: nothing is consumed until the response is whole; with `eof` the answer is never
//! "need more"; any bytes give an answer, never a panic.

use crate::chunked::{decode_chunked, ChunkError};
use crate::fields::{framing, owned_headers, with_header_slots, Framing, FramingError};
use crate::request::header_in;
use crate::{Limits, Version};
use bytes::Bytes;
use std::mem::MaybeUninit;

/// A response as a client reads it, from [`decode_response`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedResponse {
    pub version: Version,
    pub status: u16,
    /// Header fields in the order sent; values are read as UTF-8 (lossily) and trimmed.
    pub headers: Vec<(String, String)>,
    /// The body, chunked framing removed.
    pub body: Bytes,
}

impl ReceivedResponse {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }
}

/// Why [`decode_response`] cannot read a response. The connection is of no further use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// Not HTTP/1.x, or framing that does not add up.
    Malformed(&'static str),
    /// Status line and headers over `max_header_bytes` or `max_headers`.
    HeadersTooLarge,
    /// Body over `max_body`.
    BodyTooLarge,
    /// A transfer coding other than `chunked`.
    UnsupportedTransferEncoding,
    /// The peer closed the connection before the response was complete.
    Truncated,
}

impl ResponseError {
    /// What went wrong, in a few words.
    pub fn as_str(&self) -> &'static str {
        match self {
            ResponseError::Malformed(why) => why,
            ResponseError::HeadersTooLarge => "response headers too large",
            ResponseError::BodyTooLarge => "response body too large",
            ResponseError::UnsupportedTransferEncoding => "unsupported transfer encoding",
            ResponseError::Truncated => "connection closed before the end of the response",
        }
    }
}

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad HTTP response: {}", self.as_str())
    }
}

impl std::error::Error for ResponseError {}

/// Reads one HTTP/1.x response from the start of `buf`: the response and the number of bytes
/// it took, or `Ok(None)` when more bytes are needed (nothing is consumed; call again with
/// the buffer grown).
///
/// `eof` says the peer has closed the connection, so `buf` is all there will ever be: a body
/// delimited by neither `Content-Length` nor chunked encoding runs to its end, and a response
/// still incomplete is [`ResponseError::Truncated`]. With `eof` the answer is never `Ok(None)`.
///
/// The body is framed as RFC 9112 says for a response: none for 1xx, 204 and 304; else
/// `Transfer-Encoding: chunked` (extensions and trailers skipped), else `Content-Length`, else
/// up to the close. Interim 1xx responses (`100 Continue`) before the final one are skipped;
/// `101 Switching Protocols` is final. Not for answers to HEAD, whose `Content-Length` does not
/// describe a body. Both `Content-Length` and `Transfer-Encoding`, differing `Content-Length`s,
/// or another transfer coding are refused. `limits` bound the status line and headers and the
/// body (a `Content-Length` over `max_body` is refused before the body arrives). Any bytes give
/// an answer, never a panic.
pub fn decode_response(
    buf: &[u8],
    eof: bool,
    limits: &Limits,
) -> Result<Option<(ReceivedResponse, usize)>, ResponseError> {
    let incomplete = if eof {
        Err(ResponseError::Truncated)
    } else {
        Ok(None)
    };
    let mut start = 0usize;
    loop {
        let rest = buf.get(start..).unwrap_or_default();
        let Some(ResponseHead {
            version,
            status,
            headers,
            len: head_len,
        }) = parse_response_head(rest, limits)?
        else {
            return incomplete;
        };
        if (100..200).contains(&status) && status != 101 {
            // an interim response: the final one follows
            start += head_len;
            continue;
        }
        let data = rest.get(head_len..).unwrap_or_default();
        let body = if status < 200 || status == 204 || status == 304 {
            Some((0, Bytes::new()))
        } else {
            match framing(headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))) {
                Ok(Framing::Length(len)) => {
                    if len > limits.max_body {
                        return Err(ResponseError::BodyTooLarge);
                    }
                    data.get(..len)
                        .map(|body| (len, Bytes::copy_from_slice(body)))
                }
                Ok(Framing::Chunked) => match decode_chunked(data, limits.max_body) {
                    Ok(body) => body,
                    Err(ChunkError::TooLarge) => return Err(ResponseError::BodyTooLarge),
                    Err(ChunkError::Malformed(why)) => return Err(ResponseError::Malformed(why)),
                },
                Ok(Framing::Unspecified) => {
                    if data.len() > limits.max_body {
                        return Err(ResponseError::BodyTooLarge);
                    }
                    eof.then(|| (data.len(), Bytes::copy_from_slice(data)))
                }
                Err(FramingError::BadLength) => {
                    return Err(ResponseError::Malformed("bad Content-Length"))
                }
                Err(FramingError::Both) => {
                    return Err(ResponseError::Malformed(
                        "both Transfer-Encoding and Content-Length",
                    ))
                }
                Err(FramingError::UnsupportedCoding) => {
                    return Err(ResponseError::UnsupportedTransferEncoding)
                }
            }
        };
        let Some((body_len, body)) = body else {
            return incomplete;
        };
        let response = ReceivedResponse {
            version,
            status,
            headers,
            body,
        };
        return Ok(Some((response, start + head_len + body_len)));
    }
}

/// A response's status line and headers.
struct ResponseHead {
    version: Version,
    status: u16,
    headers: Vec<(String, String)>,
    /// Bytes taken, the empty line included.
    len: usize,
}

/// The status line and headers at the start of `buf`, or `None` if they are not all there yet.
fn parse_response_head(buf: &[u8], limits: &Limits) -> Result<Option<ResponseHead>, ResponseError> {
    with_header_slots(limits.max_headers, |slots| {
        parse_response_head_in(buf, limits, slots)
    })
}

fn parse_response_head_in<'b>(
    buf: &'b [u8],
    limits: &Limits,
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
) -> Result<Option<ResponseHead>, ResponseError> {
    let mut resp = httparse::Response::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, slots);
    let head_len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.max_header_bytes {
                return Err(ResponseError::HeadersTooLarge);
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::HeadersTooLarge),
        Err(httparse::Error::Version) => return Err(ResponseError::Malformed("not HTTP/1.x")),
        Err(httparse::Error::Status) => return Err(ResponseError::Malformed("bad status code")),
        Err(_) => return Err(ResponseError::Malformed("malformed status line or header")),
    };
    if head_len > limits.max_header_bytes {
        return Err(ResponseError::HeadersTooLarge);
    }
    let version = match resp.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(ResponseError::Malformed("not HTTP/1.x")),
    };
    let status = resp
        .code
        .ok_or(ResponseError::Malformed("bad status code"))?;
    Ok(Some(ResponseHead {
        version,
        status,
        headers: owned_headers(resp.headers),
        len: head_len,
    }))
}

#[cfg(test)]
mod tests;

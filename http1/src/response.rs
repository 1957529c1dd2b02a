//! Writing a response ([`Response`]) with nsqd's headers: `Content-Type` for text and JSON
//! bodies (none for an empty one), `X-NSQ-Content-Type` on V1 answers, `Content-Length`, the
//! connection decision, and nsqd's error body `{"message":"CODE"}`.
//!
//! Invariants: a header value is written as one line (CR and LF dropped); 1xx, 204 and 304
//! carry no body and no `Content-Length`; HEAD gets the head only.

use crate::request::RequestHead;
use crate::{
    Version, CONTENT_TYPE_JSON, CONTENT_TYPE_TEXT, NSQ_CONTENT_TYPE_HEADER, NSQ_CONTENT_TYPE_V1,
};
use bytes::{BufMut, Bytes, BytesMut};
use std::fmt::Write as _;

/// A response to write. Build it with [`Response::text`], [`Response::json`],
/// [`Response::empty`] or [`Response::error`], then [`Response::write_to`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header fields besides `Content-Length` and `Connection`, which are written from the body
    /// and the keep-alive decision.
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

impl Response {
    /// No body and no `Content-Type` (what nsqd answers to a successful POST /topic/create).
    pub fn empty(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// A `text/plain; charset=utf-8` body.
    pub fn text(status: u16, body: impl Into<Bytes>) -> Self {
        Response::empty(status)
            .with_header("Content-Type", CONTENT_TYPE_TEXT)
            .with_body(body)
    }

    /// An `application/json; charset=utf-8` body, already encoded.
    pub fn json(status: u16, body: impl Into<Bytes>) -> Self {
        Response::empty(status)
            .with_header("Content-Type", CONTENT_TYPE_JSON)
            .with_body(body)
    }

    /// nsqd's V1 error answer: `{"message":"CODE"}` as JSON, with `X-NSQ-Content-Type`.
    pub fn error(status: u16, message: &str) -> Self {
        let body = serde_json::json!({ "message": message }).to_string();
        Response::json(status, body).nsq_v1()
    }

    /// Adds `X-NSQ-Content-Type: nsq; version=1.0`, as nsqd's V1 API answers carry.
    pub fn nsq_v1(self) -> Self {
        self.with_header(NSQ_CONTENT_TYPE_HEADER, NSQ_CONTENT_TYPE_V1)
    }

    /// Adds a header field.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Replaces the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Appends the response to `req`, in the request's HTTP version as Go's server answers:
    /// keep-alive as the request asks (`Connection: keep-alive` is written for an HTTP/1.0
    /// client that wants it), and no body for HEAD.
    pub fn write_for(&self, req: &RequestHead, out: &mut BytesMut) {
        let connection = match (req.keep_alive, req.version) {
            (false, _) => Some("close"),
            (true, Version::Http10) => Some("keep-alive"),
            (true, Version::Http11) => None,
        };
        self.write_inner(out, req.version, connection, req.is_head());
    }

    /// As [`Response::write_for`], and the connection closes after it (`Connection: close`)
    /// whatever the request asked.
    pub fn write_closing(&self, req: &RequestHead, out: &mut BytesMut) {
        self.write_inner(out, req.version, Some("close"), req.is_head());
    }

    /// Appends the response as HTTP/1.1. With `keep_alive` false it says `Connection: close`
    /// (write an [`HttpError`]'s answer so); `head_only` leaves the body out but keeps its
    /// `Content-Length`. Prefer [`Response::write_for`] when there is a request.
    pub fn write_to(&self, out: &mut BytesMut, keep_alive: bool, head_only: bool) {
        self.write_inner(
            out,
            Version::Http11,
            (!keep_alive).then_some("close"),
            head_only,
        );
    }

    fn write_inner(
        &self,
        out: &mut BytesMut,
        version: Version,
        connection: Option<&str>,
        head_only: bool,
    ) {
        let mut head = String::with_capacity(128);
        let version = match version {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        };
        let _ = write!(
            head,
            "{version} {} {}\r\n",
            self.status,
            reason_phrase(self.status)
        );
        for (name, value) in &self.headers {
            // A value is one line: never a header line of the client's making.
            let _ = write!(head, "{name}: ");
            head.extend(value.chars().filter(|c| !matches!(c, '\r' | '\n')));
            head.push_str("\r\n");
        }
        let bodiless = self.status < 200 || self.status == 204 || self.status == 304;
        if !bodiless {
            let _ = write!(head, "Content-Length: {}\r\n", self.body.len());
        }
        if let Some(connection) = connection {
            let _ = write!(head, "Connection: {connection}\r\n");
        }
        head.push_str("\r\n");
        out.put_slice(head.as_bytes());
        if !head_only && !bodiless {
            out.put_slice(&self.body);
        }
    }
}

/// The reason phrase of a status code.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Request Entity Too Large",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests;

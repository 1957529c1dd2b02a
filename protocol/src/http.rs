//! Just enough HTTP/1.1, without sockets or runtime: the server side of the broker's and the
//! lookup's HTTP APIs, and the reading of a response for the few requests made to lookups
//! ([`decode_response`]). Each server drives the server side from its own I/O loop:
//!
//! ```text
//! loop {
//!     read bytes into `buf`
//!     while let Decoded::Request(req) = decoder.decode(&mut buf)? {   // httparse underneath
//!         let resp = route(&req);                                     // the server's own
//!         resp.write_for(&req.head, &mut out);
//!         if !req.head.keep_alive { flush, close }
//!     }
//!     // Decoded::SendContinue: write CONTINUE_RESPONSE, keep reading
//!     // Err(e): e.to_response().write_to(&mut out, false, false), flush, close
//! }
//! ```
//!
//! What it covers, the way Go's net/http serves nsqd and nsqlookupd:
//! - request heads parsed by `httparse`, bounded in size and header count;
//! - bodies by `Content-Length` or `Transfer-Encoding: chunked`, bounded by `max_body`; both at
//!   once, or any other transfer coding, are refused;
//! - `Expect: 100-continue` answered when the decoder reaches the body;
//! - keep-alive: HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0 closes it
//!   unless `Connection: keep-alive`;
//! - the query string parsed like Go's `url.ParseQuery` (percent-decoding, `+` as space, several
//!   values per key, `;` refused), lazily, since nsqd's handlers that take no arguments never
//!   look at it;
//! - responses with nsqd's headers: `Content-Type` for text and JSON bodies (none for an empty
//!   one), `X-NSQ-Content-Type: nsq; version=1.0` on V1 API answers, `Content-Length`, and the
//!   standard error body `{"message":"CODE"}`.
//!
//! On the client side ([`decode_response`], for the client library's `/lookup` and the broker's
//! `/channels` queries to lookups): a whole response read from a buffer, head by `httparse`,
//! body by `Content-Length`, chunked encoding, or the connection's close; 1xx interim
//! responses skipped; "need more bytes" until it is all there.

use bytes::{BufMut, Bytes, BytesMut};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::ops::Range;

/// `Content-Type` of a plain-text body.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; charset=utf-8";
/// `Content-Type` of a JSON body.
pub const CONTENT_TYPE_JSON: &str = "application/json; charset=utf-8";
/// The name of nsqd's API version header.
pub const NSQ_CONTENT_TYPE_HEADER: &str = "X-NSQ-Content-Type";
/// The value of nsqd's API version header on every V1 answer.
pub const NSQ_CONTENT_TYPE_V1: &str = "nsq; version=1.0";
/// What to write when [`RequestDecoder::decode`] returns [`Decoded::SendContinue`].
pub const CONTINUE_RESPONSE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Longest chunk-size line (with extensions) accepted in a chunked body.
const MAX_CHUNK_LINE: usize = 4096;

/// Bounds on what one request (or, for [`decode_response`], one response) may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Request or status line and headers together (Go's default is 1 MiB).
    pub max_header_bytes: usize,
    /// Number of header fields.
    pub max_headers: usize,
    /// Body bytes, after removing chunked framing.
    pub max_body: usize,
}

/// Header slots a request parse keeps on the stack (the default `max_headers`).
const STACK_HEADERS: usize = 128;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 1024 * 1024,
            max_headers: STACK_HEADERS,
            max_body: 5 * 1024 * 1024,
        }
    }
}

/// The protocol version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// Everything about a request but its body: the request line and headers as received, and
/// where their parts lie in them. Decoding a request allocates nothing for its head (the
/// bytes are cut off the read buffer); headers are looked up when asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The request line and headers, the empty line included.
    raw: Bytes,
    method: Range<usize>,
    /// The path as sent (in `raw`), and its percent-decoded form when that differs.
    path: Range<usize>,
    decoded_path: Option<String>,
    raw_query: Range<usize>,
    pub version: Version,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
}

/// The first value of header `name` (case-insensitive) in a parsed header list.
pub fn header_in<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl RequestHead {
    /// As sent (`GET`, `POST`, ...).
    pub fn method(&self) -> &str {
        self.text(&self.method)
    }

    /// The percent-decoded path, `/` for an empty one.
    pub fn path(&self) -> &str {
        match &self.decoded_path {
            Some(p) => p,
            None => self.text(&self.path),
        }
    }

    /// What followed `?` in the target, not decoded; see [`RequestHead::query`].
    pub fn raw_query(&self) -> &str {
        self.text(&self.raw_query)
    }

    /// `raw[range]`, which parsing found to be text (httparse checks the request line).
    fn text(&self, range: &Range<usize>) -> &str {
        std::str::from_utf8(&self.raw[range.clone()]).unwrap_or_default()
    }

    /// The first value of a header, by case-insensitive name, trimmed; read as UTF-8
    /// (lossily).
    pub fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        self.headers()
            .into_iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every header field in the order sent, values trimmed and read as UTF-8 (lossily).
    pub fn headers(&self) -> Vec<(&str, Cow<'_, str>)> {
        // The head parsed once already: a second parse of the same bytes succeeds, with as
        // many slots as it can have headers (each takes at least 3 bytes).
        with_header_slots(self.raw.len() / 3, |slots| {
            let mut req = httparse::Request::new(&mut []);
            if req.parse_with_uninit_headers(&self.raw, slots).is_err() {
                return Vec::new();
            }
            req.headers
                .iter()
                .map(|h| (h.name, trimmed_value(h.value)))
                .collect()
        })
    }

    /// Parses the query string (see [`Query::parse`]).
    pub fn query(&self) -> Result<Query<'_>, QueryError> {
        Query::parse(self.raw_query())
    }

    /// True for HEAD: the response carries headers only.
    pub fn is_head(&self) -> bool {
        self.method() == "HEAD"
    }
}

/// Runs `f` with `count` uninitialised header slots for httparse: on the stack up to
/// [`STACK_HEADERS`], so a parse costs no allocation and no zeroing (a zeroed 4 KiB `Vec` per
/// request was a tenth of the HTTP /pub profile), on the heap beyond.
fn with_header_slots<'b, R>(
    count: usize,
    f: impl FnOnce(&mut [MaybeUninit<httparse::Header<'b>>]) -> R,
) -> R {
    if count <= STACK_HEADERS {
        let mut slots = [const { MaybeUninit::uninit() }; STACK_HEADERS];
        f(&mut slots[..count])
    } else {
        let mut slots = Vec::with_capacity(count);
        f(&mut slots.spare_capacity_mut()[..count])
    }
}

/// A header value read as UTF-8 (lossily), without surrounding whitespace.
fn trimmed_value(value: &[u8]) -> Cow<'_, str> {
    match String::from_utf8_lossy(value) {
        Cow::Borrowed(v) => Cow::Borrowed(v.trim()),
        Cow::Owned(v) => Cow::Owned(v.trim().to_owned()),
    }
}

/// A complete request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub head: RequestHead,
    pub body: Bytes,
}

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

fn keep_alive<'a, V: AsRef<str>>(
    version: Version,
    headers: impl Iterator<Item = (&'a str, V)>,
) -> bool {
    let mut close = false;
    let mut keep = false;
    for (_, value) in headers.filter(|(n, _)| n.eq_ignore_ascii_case("Connection")) {
        for token in value.as_ref().split(',').map(str::trim) {
            close |= token.eq_ignore_ascii_case("close");
            keep |= token.eq_ignore_ascii_case("keep-alive");
        }
    }
    match version {
        Version::Http11 => !close,
        Version::Http10 => keep && !close,
    }
}

/// How the headers of a request or a response say its body is delimited.
enum Framing {
    Length(usize),
    Chunked,
    /// Neither `Content-Length` nor `Transfer-Encoding`.
    Unspecified,
}

enum FramingError {
    /// Not a decimal number, or several different values.
    BadLength,
    /// A transfer coding other than one `chunked`.
    UnsupportedCoding,
    /// Both `Transfer-Encoding` and `Content-Length` (request smuggling or response splitting).
    Both,
}

fn framing<'a, V: AsRef<str>>(
    headers: impl Iterator<Item = (&'a str, V)>,
) -> Result<Framing, FramingError> {
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for (name, value) in headers {
        let value = value.as_ref();
        if name.eq_ignore_ascii_case("Content-Length") {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(FramingError::BadLength);
            }
            let len: usize = value.parse().map_err(|_| FramingError::BadLength)?;
            if length.is_some_and(|l| l != len) {
                return Err(FramingError::BadLength);
            }
            length = Some(len);
        } else if name.eq_ignore_ascii_case("Transfer-Encoding") {
            for coding in value.split(',').map(str::trim) {
                if chunked || !coding.eq_ignore_ascii_case("chunked") {
                    // chunked must be the one and only coding
                    return Err(FramingError::UnsupportedCoding);
                }
                chunked = true;
            }
        }
    }
    match (chunked, length) {
        (true, Some(_)) => Err(FramingError::Both),
        (true, None) => Ok(Framing::Chunked),
        (false, Some(len)) => Ok(Framing::Length(len)),
        (false, None) => Ok(Framing::Unspecified),
    }
}

/// Header fields as owned pairs, values read as UTF-8 (lossily) and trimmed.
fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_owned(),
                String::from_utf8_lossy(h.value).trim().to_owned(),
            )
        })
        .collect()
}

enum ChunkError {
    TooLarge,
    Malformed(&'static str),
}

/// How far a chunked body has been read: the bytes of it (framing included) taken so far, and
/// the data of the complete chunks among them. A body that arrives in many reads is walked
/// once, not from its start at every read (which made a body of tiny chunks cost quadratic
/// time), and holds no more than its own data.
#[derive(Debug, Clone, Default)]
struct Chunked {
    pos: usize,
    body: BytesMut,
    in_trailers: bool,
}

impl Chunked {
    /// Goes on reading the chunked body that starts at `data[0]` (the same body as the calls
    /// before, with more bytes): the bytes used and the body once it is complete, `None`
    /// while it is not. Chunk extensions and trailers are skipped.
    fn resume(
        &mut self,
        data: &[u8],
        max_body: usize,
    ) -> Result<Option<(usize, Bytes)>, ChunkError> {
        while !self.in_trailers {
            let Some(line) = crlf_line(&data[self.pos..])? else {
                return Ok(None);
            };
            let size_text = line.split(|&b| b == b';').next().unwrap_or_default();
            let size =
                parse_hex(trim_ascii(size_text)).ok_or(ChunkError::Malformed("bad chunk size"))?;
            let start = self.pos + line.len() + 2;
            if size == 0 {
                self.pos = start;
                self.in_trailers = true;
                break;
            }
            let total = self
                .body
                .len()
                .checked_add(size)
                .ok_or(ChunkError::TooLarge)?;
            if total > max_body {
                return Err(ChunkError::TooLarge);
            }
            let Some(end) = start.checked_add(size).filter(|&e| e + 2 <= data.len()) else {
                return Ok(None);
            };
            if &data[end..end + 2] != b"\r\n" {
                return Err(ChunkError::Malformed("chunk data not followed by CRLF"));
            }
            self.body.put_slice(&data[start..end]);
            self.pos = end + 2;
        }
        // trailer fields, then an empty line
        loop {
            let Some(line) = crlf_line(&data[self.pos..])? else {
                return Ok(None);
            };
            self.pos += line.len() + 2;
            if line.is_empty() {
                let used = std::mem::take(&mut self.pos);
                self.in_trailers = false;
                return Ok(Some((used, std::mem::take(&mut self.body).freeze())));
            }
        }
    }
}

/// Reads a whole chunked body from the start of `data` (see [`Chunked::resume`]).
fn decode_chunked(data: &[u8], max_body: usize) -> Result<Option<(usize, Bytes)>, ChunkError> {
    Chunked::default().resume(data, max_body)
}

/// The line at the start of `data` without its CRLF, or `None` if it is not complete yet.
fn crlf_line(data: &[u8]) -> Result<Option<&[u8]>, ChunkError> {
    match data.windows(2).position(|w| w == b"\r\n") {
        Some(end) if end <= MAX_CHUNK_LINE => Ok(Some(&data[..end])),
        Some(_) => Err(ChunkError::Malformed("chunk line too long")),
        None if data.len() > MAX_CHUNK_LINE => Err(ChunkError::Malformed("chunk line too long")),
        None => Ok(None),
    }
}

fn trim_ascii(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !first.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !last.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    s
}

fn parse_hex(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 15 {
        return None;
    }
    s.iter().try_fold(0usize, |acc, &b| {
        let digit = (b as char).to_digit(16)?;
        acc.checked_mul(16)?.checked_add(digit as usize)
    })
}

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

/// Percent-encodes a query value (unreserved characters kept), the inverse of the decoding
/// [`Query::parse`] does: what a client puts after `?topic=`.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Escapes a decoded URL path for a `Location` header as Go's `URL.EscapedPath` does: letters,
/// digits, `-_.~` and `$&+,/:;=@` stay, every other byte (`?`, `%`, spaces, CR, LF, non-ASCII)
/// becomes `%XX`.
pub fn escape_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b'/'
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            );
        if keep {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Escapes text for HTML (`&`, `<`, `>`, `"`, `'`), as Go's `html.EscapeString`.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-decodes `s` (and `+` to a space when `plus_is_space`); `None` on a bad escape.
fn percent_decode(s: &str, plus_is_space: bool) -> Option<Cow<'_, str>> {
    if !s.bytes().any(|b| b == b'%' || (plus_is_space && b == b'+')) {
        return Some(Cow::Borrowed(s));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hi = (hex[0] as char).to_digit(16)?;
                let lo = (hex[1] as char).to_digit(16)?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
}

/// A parsed query string: keys with their values in order; a key may come several times.
/// Keys and values borrow the query string unless decoding changed them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

/// Why a query string was refused (nsqd answers `400 INVALID_REQUEST`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// A `;` in the query (Go stopped taking it as a separator).
    Semicolon,
    /// A `%` not followed by two hex digits.
    BadEscape(String),
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryError::Semicolon => f.write_str("invalid semicolon separator in query"),
            QueryError::BadEscape(s) => write!(f, "invalid URL escape in {s:?}"),
        }
    }
}

impl std::error::Error for QueryError {}

impl<'a> Query<'a> {
    /// Parses `a=1&b=x%20y&a=2` as Go's `url.ParseQuery` does: pairs split on `&`, key and value
    /// on the first `=` (a missing `=` gives an empty value), both percent-decoded with `+` as
    /// a space, empty pairs skipped.
    pub fn parse(raw: &'a str) -> Result<Query<'a>, QueryError> {
        let mut pairs = Vec::new();
        for part in raw.split('&') {
            if part.contains(';') {
                return Err(QueryError::Semicolon);
            }
            if part.is_empty() {
                continue;
            }
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let decode =
                |s: &'a str| percent_decode(s, true).ok_or_else(|| QueryError::BadEscape(s.into()));
            pairs.push((decode(key)?, decode(value)?));
        }
        Ok(Query { pairs })
    }

    /// The first value of `key`; `Some("")` when the key is there with no value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// Every value of `key`, in order.
    pub fn get_all<'s>(&'s self, key: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// Every pair, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }
}

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
mod tests {
    use super::*;

    fn decoder() -> RequestDecoder {
        RequestDecoder::new(Limits {
            max_header_bytes: 1024,
            max_headers: 16,
            max_body: 64,
        })
    }

    fn decode_one(bytes: &[u8]) -> Result<Decoded, HttpError> {
        decoder().decode(&mut BytesMut::from(bytes))
    }

    fn request(bytes: &[u8]) -> Request {
        match decode_one(bytes) {
            Ok(Decoded::Request(r)) => r,
            other => panic!("expected a request, got {other:?}"),
        }
    }

    #[test]
    fn get_with_query_and_keep_alive() {
        let r = request(b"GET /lookup?topic=a%20b&x=1&x=2 HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(r.head.method(), "GET");
        assert_eq!(r.head.path(), "/lookup");
        assert_eq!(r.head.version, Version::Http11);
        assert!(r.head.keep_alive);
        assert_eq!(r.head.header("host").as_deref(), Some("h"));
        let q = r.head.query().unwrap();
        assert_eq!(q.get("topic"), Some("a b"));
        assert_eq!(q.get_all("x").collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(q.get("nope"), None);
        assert!(r.body.is_empty());
    }

    /// A request with `n` headers `X-i: i`.
    fn with_headers(n: usize) -> Vec<u8> {
        let mut r = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..n {
            r.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
        }
        r.extend_from_slice(b"\r\n");
        r
    }

    #[test]
    fn header_count_limit_on_stack_and_beyond() {
        for (max, n, fits) in [
            (16, 16, true),
            (16, 17, false),
            (300, 200, true),
            (300, 301, false),
        ] {
            let mut d = RequestDecoder::new(Limits {
                max_header_bytes: 1 << 20,
                max_headers: max,
                max_body: 64,
            });
            let got = d.decode(&mut BytesMut::from(&with_headers(n)[..]));
            match got {
                Ok(Decoded::Request(r)) if fits => {
                    assert_eq!(r.head.headers().len(), n);
                    assert_eq!(
                        r.head.header(&format!("x-{}", n - 1)).as_deref(),
                        Some(&*format!("{}", n - 1))
                    );
                }
                Err(HttpError::HeadersTooLarge) if !fits => {}
                other => panic!("max {max}, {n} headers: {other:?}"),
            }
        }
    }

    #[test]
    fn connection_rules() {
        assert!(
            !request(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .head
                .keep_alive
        );
        assert!(!request(b"GET / HTTP/1.0\r\n\r\n").head.keep_alive);
        assert!(
            request(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .head
                .keep_alive
        );
        assert!(
            !request(b"GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n")
                .head
                .keep_alive
        );
    }

    #[test]
    fn content_length_body_and_pipelining() {
        let mut buf = BytesMut::from(
            &b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /ping HTTP/1.1\r\n\r\n"[..],
        );
        let mut d = decoder();
        match d.decode(&mut buf) {
            Ok(Decoded::Request(r)) => assert_eq!(&r.body[..], b"hello"),
            other => panic!("{other:?}"),
        }
        match d.decode(&mut buf) {
            Ok(Decoded::Request(r)) => assert_eq!(r.head.path(), "/ping"),
            other => panic!("{other:?}"),
        }
        assert!(buf.is_empty());
        assert_eq!(d.decode(&mut buf), Ok(Decoded::Incomplete));
    }

    #[test]
    fn partial_requests_consume_nothing() {
        let full = b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(
                decoder().decode(&mut buf),
                Ok(Decoded::Incomplete),
                "cut {cut}"
            );
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn chunked_bodies() {
        let r = request(
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n",
        );
        assert_eq!(&r.body[..], b"abc0123456789");
        let full = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n";
        for cut in 0..full.len() {
            assert_eq!(
                decode_one(&full[..cut]),
                Ok(Decoded::Incomplete),
                "cut {cut}"
            );
        }
        assert!(matches!(
            decode_one(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            Err(HttpError::Malformed(_))
        ));
        assert!(matches!(
            decode_one(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX"),
            Err(HttpError::Malformed(_))
        ));
        assert!(matches!(
            decode_one(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n"),
            Err(HttpError::BodyTooLarge(_))
        ));
    }

    /// A body of many tiny chunks that arrives a byte at a time is read as it comes (each
    /// read resumes where the last stopped) and gives the same body; the next request on
    /// the connection starts afresh.
    #[test]
    fn chunked_bodies_read_a_byte_at_a_time() {
        let mut wire = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut want = Vec::new();
        for i in 0..3000u32 {
            let b = b'a' + (i % 26) as u8;
            wire.extend_from_slice(b"1\r\n");
            wire.push(b);
            wire.extend_from_slice(b"\r\n");
            want.push(b);
        }
        wire.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\n");
        wire.extend_from_slice(
            b"POST /y HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        );
        let mut d = RequestDecoder::new(Limits {
            max_header_bytes: 1024,
            max_headers: 16,
            max_body: 3000,
        });
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in &wire {
            buf.put_u8(byte);
            match d.decode(&mut buf) {
                Ok(Decoded::Request(r)) => {
                    got.push(r);
                    assert!(d.is_idle());
                }
                Ok(Decoded::Incomplete) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(&got[0].body[..], &want[..]);
        assert_eq!(got[1].head.path(), "/y");
        assert_eq!(&got[1].body[..], b"ok");
        assert!(buf.is_empty());
    }

    #[test]
    fn malformed_requests_are_refused() {
        for bad in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET noslash HTTP/1.1\r\n\r\n",
            b"GET /a%zz HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            let err = decode_one(bad).expect_err(&String::from_utf8_lossy(bad));
            assert_eq!(err.status(), 400, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            decode_one(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Err(HttpError::UnsupportedTransferEncoding)
        );
    }

    #[test]
    fn limits_are_enforced_before_the_body_arrives() {
        match decode_one(b"POST /pub HTTP/1.1\r\nContent-Length: 65\r\n\r\n") {
            Err(HttpError::BodyTooLarge(head)) => assert_eq!(head.path(), "/pub"),
            other => panic!("{other:?}"),
        }
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.extend(vec![b'a'; 2000]);
        assert_eq!(decode_one(&long), Err(HttpError::HeadersTooLarge));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..20 {
            many.extend(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend(b"\r\n");
        assert_eq!(decode_one(&many), Err(HttpError::HeadersTooLarge));
    }

    #[test]
    fn a_header_value_is_written_as_one_line() {
        let mut out = BytesMut::new();
        Response::empty(301)
            .with_header("Location", "/a\r\nSet-Cookie: x\n")
            .write_to(&mut out, true, false);
        assert_eq!(
            &out[..],
            b"HTTP/1.1 301 Moved Permanently\r\nLocation: /aSet-Cookie: x\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn expect_continue_is_signalled_once() {
        let mut d = decoder();
        let mut buf = BytesMut::from(
            &b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"[..],
        );
        assert_eq!(d.decode(&mut buf), Ok(Decoded::SendContinue));
        assert_eq!(d.decode(&mut buf), Ok(Decoded::Incomplete));
        buf.extend_from_slice(b"ok");
        assert!(matches!(d.decode(&mut buf), Ok(Decoded::Request(_))));
        // HTTP/1.0 has no 100 Continue: the body is simply waited for.
        let mut buf = BytesMut::from(
            &b"POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"[..],
        );
        assert_eq!(d.decode(&mut buf), Ok(Decoded::Incomplete));
        buf.extend_from_slice(b"ok");
        assert!(matches!(d.decode(&mut buf), Ok(Decoded::Request(_))));
    }

    #[test]
    fn absolute_form_targets() {
        let r = request(b"GET http://h:1/ping?x=1 HTTP/1.1\r\n\r\n");
        assert_eq!(r.head.path(), "/ping");
        assert_eq!(r.head.raw_query(), "x=1");
    }

    /// Every form of request target, as the head's ranges and decoded path give it back.
    #[test]
    fn request_targets() {
        for (target, path, query) in [
            ("/pub?topic=t", "/pub", "topic=t"),
            ("/a%20b/%23c?x=%41", "/a b/#c", "x=%41"),
            ("/pub#frag", "/pub", ""),
            ("/pub?x=1#frag", "/pub", "x=1"),
            ("http://h:1", "/", ""),
            ("https://h:1/s?q", "/s", "q"),
            ("*", "*", ""),
        ] {
            let line = format!("OPTIONS {target} HTTP/1.1\r\nHost: h\r\n\r\n");
            let r = request(line.as_bytes());
            assert_eq!(r.head.method(), "OPTIONS", "{target}");
            assert_eq!(
                (r.head.path(), r.head.raw_query()),
                (path, query),
                "{target}"
            );
        }
        for bad in ["/a%zz", "relative"] {
            let line = format!("GET {bad} HTTP/1.1\r\n\r\n");
            let mut d = RequestDecoder::new(Limits::default());
            let got = d.decode(&mut BytesMut::from(line.as_bytes()));
            assert!(
                matches!(got, Err(HttpError::Malformed(_))),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn query_parsing_like_go() {
        let q = Query::parse("a=1&&b&c=x+y%2B&a=").unwrap();
        assert_eq!(
            q.pairs().collect::<Vec<_>>(),
            [("a", "1"), ("b", ""), ("c", "x y+"), ("a", "")]
        );
        assert_eq!(Query::parse("a=1;b=2"), Err(QueryError::Semicolon));
        assert!(matches!(
            Query::parse("a=%zz"),
            Err(QueryError::BadEscape(_))
        ));
        assert!(matches!(
            Query::parse("a=%2"),
            Err(QueryError::BadEscape(_))
        ));
        assert_eq!(Query::parse("").unwrap().pairs().count(), 0);
    }

    #[test]
    fn response_bytes() {
        let mut out = BytesMut::new();
        Response::text(200, "OK").write_to(&mut out, true, false);
        assert_eq!(
            &out[..],
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nOK"
        );
        out.clear();
        Response::error(404, "TOPIC_NOT_FOUND").write_to(&mut out, false, false);
        assert_eq!(
            &out[..],
            &b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nX-NSQ-Content-Type: nsq; version=1.0\r\nContent-Length: 29\r\nConnection: close\r\n\r\n{\"message\":\"TOPIC_NOT_FOUND\"}"[..]
        );
        out.clear();
        Response::empty(200)
            .nsq_v1()
            .write_to(&mut out, true, false);
        assert!(!out.windows(14).any(|w| w == b"\r\nContent-Type"));
        assert!(out.ends_with(b"Content-Length: 0\r\n\r\n"));
        out.clear();
        let head = request(b"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").head;
        Response::json(200, "{}").write_for(&head, &mut out);
        assert!(out.ends_with(b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\n"));
        out.clear();
        let head = request(b"GET / HTTP/1.0\r\n\r\n").head;
        Response::json(200, "{}").write_for(&head, &mut out);
        assert!(out.ends_with(b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"));
    }

    #[test]
    fn error_responses() {
        let r = HttpError::Malformed("x").to_response();
        assert_eq!(r.status, 400);
        assert_eq!(&r.body[..], b"400 Bad Request: x");
        assert_eq!(HttpError::HeadersTooLarge.to_response().status, 431);
        assert_eq!(
            HttpError::UnsupportedTransferEncoding.to_response().status,
            501
        );
    }

    const RESPONSE_LIMITS: Limits = Limits {
        max_header_bytes: 1024,
        max_headers: 16,
        max_body: 64,
    };

    fn response(
        bytes: &[u8],
        eof: bool,
    ) -> Result<Option<(ReceivedResponse, usize)>, ResponseError> {
        decode_response(bytes, eof, &RESPONSE_LIMITS)
    }

    fn complete(bytes: &[u8], eof: bool) -> (ReceivedResponse, usize) {
        match response(bytes, eof) {
            Ok(Some(r)) => r,
            other => panic!("expected a response, got {other:?}"),
        }
    }

    #[test]
    fn response_with_content_length() {
        let raw =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        for eof in [false, true] {
            let (r, used) = complete(raw, eof);
            assert_eq!(r.version, Version::Http11);
            assert_eq!(r.status, 200);
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_eq!(&r.body[..], b"{}");
            assert_eq!(used, raw.len());
        }
        // what follows the body is not taken
        let mut two = raw.to_vec();
        two.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
        let (r, used) = complete(&two, false);
        assert_eq!(&r.body[..], b"{}");
        assert_eq!(used, raw.len());
        let (r, used) = complete(&two[used..], false);
        assert_eq!((r.status, used), (204, 27));
        // no reason phrase, HTTP/1.0, a 404 with its body
        let (r, _) = complete(b"HTTP/1.0 404\r\nContent-Length: 1\r\n\r\nx", false);
        assert_eq!(
            (r.version, r.status, &r.body[..]),
            (Version::Http10, 404, &b"x"[..])
        );
    }

    #[test]
    fn partial_responses_need_more_bytes_or_are_truncated() {
        let full: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
        ];
        for full in full {
            for cut in 0..full.len() {
                assert_eq!(response(&full[..cut], false), Ok(None), "cut {cut}");
                assert_eq!(
                    response(&full[..cut], true),
                    Err(ResponseError::Truncated),
                    "cut {cut}"
                );
            }
            let (r, used) = complete(full, false);
            assert_eq!((&r.body[..], used), (&b"abc"[..], full.len()));
        }
    }

    #[test]
    fn chunked_responses() {
        let raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nrest";
        let (r, used) = complete(raw, false);
        assert_eq!(&r.body[..], b"abc0123456789");
        assert_eq!(used, raw.len() - 4);
        let (r, _) = complete(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            false,
        );
        assert!(r.body.is_empty());
    }

    #[test]
    fn a_body_without_length_runs_to_the_close() {
        let raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it";
        assert_eq!(response(raw, false), Ok(None));
        let (r, used) = complete(raw, true);
        assert_eq!((&r.body[..], used), (&b"all of it"[..], raw.len()));
        let (r, _) = complete(b"HTTP/1.1 200 OK\r\n\r\n", true);
        assert!(r.body.is_empty());
    }

    #[test]
    fn bodiless_statuses_and_interim_responses() {
        for raw in [
            &b"HTTP/1.1 204 No Content\r\n\r\n"[..],
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
        ] {
            let (r, used) = complete(raw, false);
            assert!(r.body.is_empty());
            assert_eq!(used, raw.len());
        }
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nno";
        let (r, used) = complete(raw, false);
        assert_eq!((r.status, &r.body[..], used), (500, &b"no"[..], raw.len()));
    }

    #[test]
    fn malformed_responses_are_refused() {
        let malformed = |raw: &[u8]| {
            for eof in [false, true] {
                assert!(
                    matches!(response(raw, eof), Err(ResponseError::Malformed(_))),
                    "{} -> {:?}",
                    String::from_utf8_lossy(raw),
                    response(raw, eof)
                );
            }
        };
        malformed(b"garbage");
        malformed(b"garbage\r\n\r\n");
        malformed(b"GET / HTTP/1.1\r\n\r\n");
        malformed(b"HTTP/2.0 200 OK\r\n\r\n");
        malformed(b"HTTP/1.1 abc OK\r\n\r\n");
        malformed(b"HTTP/1.1 \xff\xfe\r\n\r\n");
        malformed(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n");
        malformed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}");
        malformed(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n");
        malformed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
        malformed(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n");
        malformed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n");
        malformed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
        malformed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX");
        assert_eq!(
            response(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                false
            ),
            Err(ResponseError::UnsupportedTransferEncoding)
        );
        // the same Content-Length twice is fine
        let (r, _) = complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            false,
        );
        assert_eq!(&r.body[..], b"x");
    }

    #[test]
    fn response_limits() {
        let too_large = |raw: &[u8], eof: bool| {
            assert_eq!(
                response(raw, eof),
                Err(ResponseError::BodyTooLarge),
                "{raw:?}"
            );
        };
        // refused from the head alone
        too_large(b"HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n", false);
        too_large(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n",
            false,
        );
        let mut close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        close.extend([b'a'; 64]);
        assert!(response(&close, true).is_ok());
        close.push(b'a');
        too_large(&close, false);
        too_large(&close, true);
        let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        long.extend(vec![b'a'; 2000]);
        assert_eq!(response(&long, false), Err(ResponseError::HeadersTooLarge));
        long.extend(b"\r\n\r\n");
        assert_eq!(response(&long, false), Err(ResponseError::HeadersTooLarge));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..20 {
            many.extend(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend(b"\r\n");
        assert_eq!(response(&many, false), Err(ResponseError::HeadersTooLarge));
    }

    #[test]
    fn response_error_texts() {
        assert_eq!(
            ResponseError::Malformed("bad chunk size").as_str(),
            "bad chunk size"
        );
        assert_eq!(
            ResponseError::Truncated.to_string(),
            "bad HTTP response: connection closed before the end of the response"
        );
    }
}

//! A decoded request: [`RequestHead`] (the request line and headers as received, with where
//! their parts lie) and [`Request`] (the head and the whole body).
//!
//! Invariants: a head's ranges lie inside its `raw` bytes and on UTF-8 boundaries (the decoder
//! checks the request line is text); headers are parsed again from `raw` only when asked for.

use crate::fields::{trimmed_value, with_header_slots};
use crate::query::{Query, QueryError};
use crate::Version;
use bytes::Bytes;
use std::borrow::Cow;
use std::ops::Range;

/// Everything about a request but its body: the request line and headers as received, and
/// where their parts lie in them. Decoding a request allocates nothing for its head (the
/// bytes are cut off the read buffer); headers are looked up when asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The request line and headers, the empty line included.
    pub(crate) raw: Bytes,
    pub(crate) method: Range<usize>,
    /// The path as sent (in `raw`), and its percent-decoded form when that differs.
    pub(crate) path: Range<usize>,
    pub(crate) decoded_path: Option<String>,
    pub(crate) raw_query: Range<usize>,
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

/// A complete request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub head: RequestHead,
    pub body: Bytes,
}

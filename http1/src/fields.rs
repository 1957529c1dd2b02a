//! Header fields, for requests and responses alike: the header slots a parse gets from
//! `httparse` (on the stack up to [`STACK_HEADERS`]), how a value is read (UTF-8, lossily,
//! trimmed), and what the fields say about the message: its body framing ([`framing`]:
//! `Content-Length`, `chunked`, or neither; both, or another coding, refused) and whether the
//! connection stays open ([`keep_alive`]).

use crate::Version;
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// Header slots a parse keeps on the stack (the default `max_headers`).
pub(crate) const STACK_HEADERS: usize = 128;

/// Runs `f` with `count` uninitialised header slots for httparse: on the stack up to
/// [`STACK_HEADERS`], so a parse costs no allocation and no zeroing (a zeroed `Vec` per request
/// shows in an HTTP /pub profile: docs/benchmarks.md, "Codec micro-benchmarks"), on the heap beyond.
pub(crate) fn with_header_slots<'b, R>(
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
pub(crate) fn trimmed_value(value: &[u8]) -> Cow<'_, str> {
    match String::from_utf8_lossy(value) {
        Cow::Borrowed(v) => Cow::Borrowed(v.trim()),
        Cow::Owned(v) => Cow::Owned(v.trim().to_owned()),
    }
}

pub(crate) fn keep_alive<'a, V: AsRef<str>>(
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
pub(crate) enum Framing {
    Length(usize),
    Chunked,
    /// Neither `Content-Length` nor `Transfer-Encoding`.
    Unspecified,
}

pub(crate) enum FramingError {
    /// Not a decimal number, or several different values.
    BadLength,
    /// A transfer coding other than one `chunked`.
    UnsupportedCoding,
    /// Both `Transfer-Encoding` and `Content-Length` (request smuggling or response splitting).
    Both,
}

pub(crate) fn framing<'a, V: AsRef<str>>(
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
pub(crate) fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
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

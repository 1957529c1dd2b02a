//! Escaping text for URLs and HTML: [`percent_encode`] for a query value, [`escape_path`] for a
//! `Location` path as Go's `URL.EscapedPath`, [`escape_html`] as Go's `html.EscapeString`, and
//! the percent-decoding that paths and queries share.

use std::borrow::Cow;
use std::fmt::Write as _;

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
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> Option<Cow<'_, str>> {
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

//! A query string read as Go's `url.ParseQuery` reads it ([`Query`]): pairs split on `&`,
//! percent-decoded with `+` as a space, several values per key, `;` refused.

use crate::escape::percent_decode;
use std::borrow::Cow;

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

//! Reading a `Transfer-Encoding: chunked` body ([`Chunked`]), resumably: a body that arrives in
//! many reads is walked once. Chunk extensions and trailers are skipped; a chunk-size line is
//! bounded by [`MAX_CHUNK_LINE`] and the body by the caller's `max_body`.

use bytes::{BufMut, Bytes, BytesMut};

/// Longest chunk-size line (with extensions) accepted in a chunked body.
const MAX_CHUNK_LINE: usize = 4096;

pub(crate) enum ChunkError {
    TooLarge,
    Malformed(&'static str),
}

/// How far a chunked body has been read: the bytes of it (framing included) taken so far, and
/// the data of the complete chunks among them. A body that arrives in many reads is walked
/// once, not from its start at every read (which made a body of tiny chunks cost quadratic
/// time), and holds no more than its own data.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chunked {
    pub(crate) pos: usize,
    body: BytesMut,
    in_trailers: bool,
}

impl Chunked {
    /// Goes on reading the chunked body that starts at `data[0]` (the same body as the calls
    /// before, with more bytes): the bytes used and the body once it is complete, `None`
    /// while it is not. Chunk extensions and trailers are skipped.
    pub(crate) fn resume(
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
pub(crate) fn decode_chunked(
    data: &[u8],
    max_body: usize,
) -> Result<Option<(usize, Bytes)>, ChunkError> {
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

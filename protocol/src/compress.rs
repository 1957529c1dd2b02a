//! The compressions IDENTIFY can switch on for the rest of a V2 connection, as nsqd speaks
//! them: snappy's framing format (stream identifier, then chunks of at most 64 KiB of data,
//! each with its masked CRC-32C) and raw deflate (no zlib header, a sync flush after each
//! write). Sans-IO: bytes in, bytes out; the caller owns the socket. The broker's connections
//! and the client library's transports (async and blocking) both use these types.
//!
//! Invariants: a [`Decompressor`] never produces more than the budget (or buffer) it is given
//! per call
//! and holds at most one incomplete snappy chunk (at most [`MAX_SNAPPY_CHUNK`] bytes) or
//! nothing (deflate) once [`Decompressor::decompress`] returned 0, so a peer cannot make it
//! buffer without bound: a decompression bomb only yields output as fast as the caller takes
//! it. Any malformed input (a bad checksum, an unknown unskippable chunk, an oversized chunk,
//! a corrupt deflate block, bytes after the deflate stream's end) is an error and the stream
//! is dead from then on. A [`Compressor`] turns each [`Compressor::compress`] call into
//! output the peer can decode whole (one or more snappy chunks; a deflate sync flush).

use std::io::{Read, Write};

/// Largest snappy chunk accepted: the largest compressed form of a 64 KiB block (snappy's
/// `max_compress_len(65536)`) plus its 4-byte checksum. Larger chunks (allowed for skippable
/// chunk types by the format) are refused, as Go's snappy reader refuses them.
pub const MAX_SNAPPY_CHUNK: usize = 32 + 65536 + 65536 / 6 + 4;
/// Output a [`Decompressor`] produces at most per call when the caller asks for more.
const STEP: usize = 64 * 1024;

/// Why a compressed stream cannot be read (or, never in practice, written).
#[derive(Debug)]
pub enum CompressError {
    Snappy(String),
    Deflate(String),
    /// Bytes after the end of a deflate stream.
    AfterEnd,
    /// The stream failed before; it takes nothing more.
    Dead,
}

impl std::fmt::Display for CompressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompressError::Snappy(e) => write!(f, "snappy stream: {e}"),
            CompressError::Deflate(e) => write!(f, "deflate stream: {e}"),
            CompressError::AfterEnd => f.write_str("deflate stream: data after its end"),
            CompressError::Dead => f.write_str("compressed stream failed before"),
        }
    }
}

impl std::error::Error for CompressError {}

/// What a stream that failed is to an `std::io` reader or writer: invalid data.
impl From<CompressError> for std::io::Error {
    fn from(e: CompressError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    }
}

/// The compression IDENTIFY switched on for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Snappy,
    /// Raw deflate, written at `level` (1 fastest ..= 9 smallest; clamped to that range).
    Deflate {
        level: u32,
    },
}

/// The compressed input of one connection, decoded on demand.
pub struct Decompressor {
    dec: Dec,
    /// Where [`Decompressor::decompress`] decodes before appending (allocated on first use).
    scratch: Vec<u8>,
}

enum Dec {
    Snappy(Box<snap::read::FrameDecoder<Chunks>>),
    Deflate {
        inflate: Box<flate2::Decompress>,
        input: Vec<u8>,
        /// Offset in `input` of the first byte not consumed yet.
        at: usize,
        ended: bool,
    },
    Failed,
}

/// Whole snappy chunks, handed to `snap`'s frame decoder only once complete: the decoder then
/// never sees a chunk cut short, and at a chunk boundary it reads end of input (0) and waits.
struct Chunks {
    buf: Vec<u8>,
    /// Offset of the first byte not read by the decoder.
    at: usize,
    /// End of the complete chunks (`at..complete` may be read).
    complete: usize,
}

impl Chunks {
    /// Extends `complete` over every whole chunk now in `buf`.
    fn scan(&mut self) -> Result<(), CompressError> {
        loop {
            let rest = &self.buf[self.complete..];
            if rest.len() < 4 {
                return Ok(());
            }
            let len = usize::from(rest[1]) | usize::from(rest[2]) << 8 | usize::from(rest[3]) << 16;
            if len > MAX_SNAPPY_CHUNK {
                return Err(CompressError::Snappy(format!(
                    "chunk of {len} bytes (more than {MAX_SNAPPY_CHUNK})"
                )));
            }
            if rest.len() < 4 + len {
                return Ok(());
            }
            self.complete += 4 + len;
        }
    }

    fn push(&mut self, data: &[u8]) -> Result<(), CompressError> {
        if self.at > 0 && self.at == self.buf.len() {
            self.buf.clear();
            self.complete = 0;
            self.at = 0;
        } else if self.at >= self.buf.len() / 2 && self.at > 0 {
            self.buf.drain(..self.at);
            self.complete -= self.at;
            self.at = 0;
        }
        self.buf.extend_from_slice(data);
        self.scan()
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.at
    }
}

impl Read for Chunks {
    fn read(&mut self, dst: &mut [u8]) -> std::io::Result<usize> {
        let n = dst.len().min(self.complete - self.at);
        dst[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Decompressor {
    fn with(dec: Dec) -> Decompressor {
        Decompressor {
            dec,
            scratch: Vec::new(),
        }
    }

    /// Reads what `c` writes.
    pub fn new(c: Compression) -> Decompressor {
        match c {
            Compression::Snappy => Decompressor::snappy(),
            Compression::Deflate { .. } => Decompressor::deflate(),
        }
    }

    /// Reads snappy's framing format.
    pub fn snappy() -> Decompressor {
        let chunks = Chunks {
            buf: Vec::new(),
            at: 0,
            complete: 0,
        };
        Decompressor::with(Dec::Snappy(Box::new(snap::read::FrameDecoder::new(chunks))))
    }

    /// Reads raw deflate (RFC 1951, no zlib header).
    pub fn deflate() -> Decompressor {
        Decompressor::with(Dec::Deflate {
            inflate: Box::new(flate2::Decompress::new(false)),
            input: Vec::new(),
            at: 0,
            ended: false,
        })
    }

    /// Takes compressed bytes as they arrived; nothing is decoded yet.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), CompressError> {
        let result = match &mut self.dec {
            Dec::Snappy(frames) => frames.get_mut().push(data),
            Dec::Deflate {
                input, at, ended, ..
            } => {
                if *ended && !data.is_empty() {
                    Err(CompressError::AfterEnd)
                } else {
                    if *at == input.len() {
                        input.clear();
                        *at = 0;
                    }
                    input.extend_from_slice(data);
                    Ok(())
                }
            }
            Dec::Failed => Err(CompressError::Dead),
        };
        if result.is_err() {
            self.dec = Dec::Failed;
        }
        result
    }

    /// Compressed bytes taken and not decoded yet (an incomplete snappy chunk, deflate input
    /// not inflated): a stream cut here is truncated.
    pub fn buffered(&self) -> usize {
        match &self.dec {
            Dec::Snappy(frames) => frames.get_ref().pending(),
            Dec::Deflate { input, at, .. } => input.len() - at,
            Dec::Failed => 0,
        }
    }

    /// True once a deflate stream's final block was decoded (nsqd never ends one; a reader
    /// takes it as the end of the connection).
    pub fn ended(&self) -> bool {
        matches!(self.dec, Dec::Deflate { ended: true, .. })
    }

    /// Decodes what it can, at most `budget` bytes of output (at least 1), appended to `out`;
    /// returns how many. 0 means every byte fed so far is decoded (but for an incomplete
    /// snappy chunk): feed more.
    pub fn decompress(
        &mut self,
        out: &mut bytes::BytesMut,
        budget: usize,
    ) -> Result<usize, CompressError> {
        let budget = budget.max(1);
        if self.scratch.len() < STEP {
            self.scratch.resize(STEP, 0);
        }
        let mut produced = 0;
        while produced < budget {
            let want = (budget - produced).min(STEP);
            let n = self.step(want)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&self.scratch[..n]);
            produced += n;
        }
        Ok(produced)
    }

    /// Decodes into `dst`, at most its length; returns how many bytes. 0 (for a non-empty
    /// `dst`) means every byte fed so far is decoded, or the deflate stream [`ended`]: feed
    /// more. For `std::io::Read`-style callers with their own buffer.
    ///
    /// [`ended`]: Decompressor::ended
    pub fn read(&mut self, dst: &mut [u8]) -> Result<usize, CompressError> {
        if dst.is_empty() {
            return Ok(0);
        }
        let result = self.dec.step(dst);
        if result.is_err() {
            self.dec = Dec::Failed;
        }
        result
    }

    /// One [`Dec::step`] of at most `want` bytes into the scratch buffer.
    fn step(&mut self, want: usize) -> Result<usize, CompressError> {
        let result = self.dec.step(&mut self.scratch[..want]);
        if result.is_err() {
            self.dec = Dec::Failed;
        }
        result
    }
}

impl Dec {
    /// Decodes at most `dst.len()` bytes into `dst`; 0 means nothing more can be decoded
    /// from what was fed. An error leaves the stream to be marked failed by the caller.
    fn step(&mut self, dst: &mut [u8]) -> Result<usize, CompressError> {
        match self {
            Dec::Snappy(frames) => frames
                .read(dst)
                .map_err(|e| CompressError::Snappy(e.to_string())),
            Dec::Deflate {
                inflate,
                input,
                at,
                ended,
            } => {
                let mut made = 0;
                // Also with no input left: the inflater may hold output a full `dst` cut off.
                while !*ended {
                    let (before_in, before_out) = (inflate.total_in(), inflate.total_out());
                    let status = inflate
                        .decompress(&input[*at..], dst, flate2::FlushDecompress::None)
                        .map_err(|e| CompressError::Deflate(e.to_string()))?;
                    let consumed = (inflate.total_in() - before_in) as usize;
                    made = (inflate.total_out() - before_out) as usize;
                    *at += consumed;
                    if status == flate2::Status::StreamEnd {
                        *ended = true;
                        if *at < input.len() {
                            return Err(CompressError::AfterEnd);
                        }
                    }
                    if made > 0 || consumed == 0 {
                        // Output, or more input is needed (a block cut short).
                        break;
                    }
                }
                if *at == input.len() {
                    input.clear();
                    *at = 0;
                    if input.capacity() > 4 * STEP {
                        *input = Vec::new();
                    }
                }
                Ok(made)
            }
            Dec::Failed => Err(CompressError::Dead),
        }
    }
}

/// The compressed output of one connection.
pub struct Compressor(Enc);

enum Enc {
    Snappy(Box<snap::write::FrameEncoder<Vec<u8>>>),
    Deflate(Box<flate2::Compress>),
}

impl Compressor {
    /// Writes what `c` says.
    pub fn new(c: Compression) -> Compressor {
        match c {
            Compression::Snappy => Compressor::snappy(),
            Compression::Deflate { level } => Compressor::deflate(level),
        }
    }

    /// Writes snappy's framing format.
    pub fn snappy() -> Compressor {
        Compressor(Enc::Snappy(Box::new(snap::write::FrameEncoder::new(
            Vec::new(),
        ))))
    }

    /// Writes raw deflate at `level` (1-9).
    pub fn deflate(level: u32) -> Compressor {
        Compressor(Enc::Deflate(Box::new(flate2::Compress::new(
            flate2::Compression::new(level.clamp(1, 9)),
            false,
        ))))
    }

    /// Compresses `input` onto the end of `out`, flushed: the peer can decode all of it.
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
        match &mut self.0 {
            Enc::Snappy(frames) => {
                let err = |e: std::io::Error| CompressError::Snappy(e.to_string());
                frames.write_all(input).map_err(err)?;
                frames.flush().map_err(err)?;
                // Flushed: everything is in the writer, and taking it leaves the encoder's
                // state alone.
                let written = frames.get_mut();
                if out.is_empty() {
                    std::mem::swap(out, written);
                } else {
                    out.append(written);
                }
                Ok(())
            }
            Enc::Deflate(deflate) => {
                let mut at = 0;
                loop {
                    out.reserve(input.len() - at + 64);
                    let before = deflate.total_in();
                    deflate
                        .compress_vec(&input[at..], out, flate2::FlushCompress::Sync)
                        .map_err(|e| CompressError::Deflate(e.to_string()))?;
                    at += (deflate.total_in() - before) as usize;
                    // Done once all input is in and the flush left room to spare.
                    if at == input.len() && out.len() < out.capacity() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn roundtrip(mut c: Compressor, mut d: Decompressor) {
        let mut wire = Vec::new();
        let inputs: Vec<Vec<u8>> = vec![
            b"OK".to_vec(),
            vec![b'x'; 200_000],
            (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect(),
            b"PUB t\n\0\0\0\x01a".to_vec(),
        ];
        for i in &inputs {
            c.compress(i, &mut wire).unwrap();
        }
        let want: Vec<u8> = inputs.concat();
        // Fed in uneven pieces, decoded in small budgets.
        let mut got = BytesMut::new();
        for piece in wire.chunks(777) {
            d.feed(piece).unwrap();
            while d.decompress(&mut got, 1000).unwrap() > 0 {}
        }
        assert!(
            got[..] == want[..],
            "got {} bytes, want {}",
            got.len(),
            want.len()
        );
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn snappy_roundtrip() {
        roundtrip(Compressor::snappy(), Decompressor::snappy());
    }

    #[test]
    fn deflate_roundtrip() {
        for level in [1, 6, 9] {
            roundtrip(Compressor::deflate(level), Decompressor::deflate());
        }
    }

    #[test]
    fn every_write_is_decodable_on_its_own() {
        for (mut c, mut d) in [
            (Compressor::snappy(), Decompressor::snappy()),
            (Compressor::deflate(6), Decompressor::deflate()),
        ] {
            for msg in [&b"first"[..], b"second", b"third"] {
                let mut wire = Vec::new();
                c.compress(msg, &mut wire).unwrap();
                d.feed(&wire).unwrap();
                let mut got = BytesMut::new();
                d.decompress(&mut got, 1 << 20).unwrap();
                assert_eq!(&got[..], msg);
            }
        }
    }

    #[test]
    fn a_bomb_comes_out_one_budget_at_a_time() {
        let mut c = Compressor::deflate(9);
        let mut wire = Vec::new();
        c.compress(&vec![0u8; 64 << 20], &mut wire).unwrap();
        assert!(wire.len() < 1 << 20);
        let mut d = Decompressor::deflate();
        d.feed(&wire).unwrap();
        let mut got = BytesMut::new();
        assert_eq!(d.decompress(&mut got, 4096).unwrap(), 4096);
        assert_eq!(got.len(), 4096);
    }

    #[test]
    fn corrupt_streams_fail_and_stay_failed() {
        let mut d = Decompressor::snappy();
        // A compressed chunk with a wrong checksum after a valid stream identifier.
        let mut c = Compressor::snappy();
        let mut wire = Vec::new();
        c.compress(&[b'a'; 1000], &mut wire).unwrap();
        let last = wire.len() - 1;
        wire[last] ^= 0xff;
        d.feed(&wire).unwrap();
        assert!(d.decompress(&mut BytesMut::new(), 1 << 20).is_err());
        assert!(d.feed(b"x").is_err());

        let mut d = Decompressor::snappy();
        assert!(
            d.feed(&[0x00, 0xff, 0xff, 0xff]).is_err(),
            "oversized chunk"
        );

        let mut d = Decompressor::deflate();
        d.feed(&[0xff; 64]).unwrap();
        assert!(d.decompress(&mut BytesMut::new(), 1 << 20).is_err());
    }

    /// Decoded through [`Decompressor::read`] into a small buffer, fed in pieces of `step`.
    fn read_all(c: Compression, pieces: &[&[u8]], step: usize) -> Vec<u8> {
        let mut enc = Compressor::new(c);
        let mut wire = Vec::new();
        for p in pieces {
            enc.compress(p, &mut wire).expect("compress");
        }
        let mut dec = Decompressor::new(c);
        let mut got = Vec::new();
        let mut buf = [0u8; 333];
        for chunk in wire.chunks(step) {
            dec.feed(chunk).expect("feed");
            loop {
                let n = dec.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(dec.buffered(), 0);
        assert!(!dec.ended());
        got
    }

    #[test]
    fn read_into_a_buffer_whatever_the_feed_sizes() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let pieces: [&[u8]; 4] = [b"OK", b"", &big, b"PUB t\n"];
        let want: Vec<u8> = pieces.concat();
        for c in [Compression::Snappy, Compression::Deflate { level: 6 }] {
            for step in [1, 7, 4096, 1 << 20] {
                let got = read_all(c, &pieces, step);
                assert!(
                    got == want,
                    "{c:?} step {step}: {} of {}",
                    got.len(),
                    want.len()
                );
            }
        }
    }

    #[test]
    fn read_yields_only_what_the_buffer_holds() {
        let zeros = vec![0u8; 8 << 20];
        for c in [Compression::Snappy, Compression::Deflate { level: 9 }] {
            let mut wire = Vec::new();
            Compressor::new(c)
                .compress(&zeros, &mut wire)
                .expect("compress");
            assert!(wire.len() < zeros.len() / 20, "{c:?} compresses zeros");
            let mut dec = Decompressor::new(c);
            dec.feed(&wire).expect("feed");
            let mut buf = [0u8; 1000];
            assert_eq!(dec.read(&mut buf).expect("read"), 1000, "{c:?}");
            assert_eq!(dec.read(&mut []).expect("read"), 0);
        }
    }

    #[test]
    fn the_end_of_a_deflate_stream_is_seen_and_nothing_may_follow() {
        let mut z = flate2::Compress::new(flate2::Compression::new(6), false);
        let mut wire = Vec::with_capacity(64);
        z.compress_vec(b"last", &mut wire, flate2::FlushCompress::Finish)
            .expect("finish");
        let mut d = Decompressor::deflate();
        d.feed(&wire).expect("feed");
        let mut buf = [0u8; 16];
        assert_eq!(d.read(&mut buf).expect("read"), 4);
        assert!(d.ended());
        assert_eq!(d.read(&mut buf).expect("read"), 0);
        assert!(matches!(d.feed(b"x"), Err(CompressError::AfterEnd)));
        let e: std::io::Error = CompressError::AfterEnd.into();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }

    /// Random bytes and valid streams with bits flipped, fed in random pieces and read into
    /// a small buffer: an error or data, never a panic, never more out than asked.
    #[test]
    fn mangled_streams_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for c in [Compression::Snappy, Compression::Deflate { level: 6 }] {
            let mut valid = Vec::new();
            let mut enc = Compressor::new(c);
            for i in 0..20u8 {
                enc.compress(&vec![i; 3000 + usize::from(i) * 100], &mut valid)
                    .expect("compress");
            }
            for round in 0..400 {
                let mut wire = if round % 2 == 0 {
                    (0..next() % 4096)
                        .map(|_| next() as u8)
                        .collect::<Vec<u8>>()
                } else {
                    let mut v = valid.clone();
                    for _ in 0..1 + next() % 4 {
                        let at = (next() as usize) % v.len();
                        v[at] ^= 1 << (next() % 8);
                    }
                    v
                };
                if round % 5 == 0 {
                    wire.truncate((next() as usize) % (wire.len() + 1));
                }
                let mut dec = Decompressor::new(c);
                let mut out = [0u8; 777];
                let mut rest = &wire[..];
                'feed: while !rest.is_empty() {
                    let n = (1 + next() as usize % 5000).min(rest.len());
                    if dec.feed(&rest[..n]).is_err() {
                        break;
                    }
                    rest = &rest[n..];
                    loop {
                        match dec.read(&mut out) {
                            Ok(0) => break,
                            Ok(n) => assert!(n <= out.len()),
                            Err(_) => break 'feed,
                        }
                    }
                }
            }
        }
    }
}

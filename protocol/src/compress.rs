//! The compressions IDENTIFY can switch on for the rest of a V2 connection, as nsqd speaks
//! them: snappy's framing format (stream identifier, then chunks of at most 64 KiB of data,
//! each with its masked CRC-32C) and raw deflate (no zlib header, a sync flush after each
//! write). Sans-IO: bytes in, bytes out; the caller owns the socket.
//!
//! Invariants: a [`Decompressor`] never produces more than the budget it is given per call
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

/// The compressed input of one connection, decoded on demand.
pub struct Decompressor(Dec);

enum Dec {
    Snappy {
        frames: Box<snap::read::FrameDecoder<Chunks>>,
        out: Vec<u8>,
    },
    Deflate {
        inflate: Box<flate2::Decompress>,
        input: Vec<u8>,
        /// Offset in `input` of the first byte not consumed yet.
        at: usize,
        out: Vec<u8>,
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
    /// Reads snappy's framing format.
    pub fn snappy() -> Decompressor {
        let chunks = Chunks {
            buf: Vec::new(),
            at: 0,
            complete: 0,
        };
        Decompressor(Dec::Snappy {
            frames: Box::new(snap::read::FrameDecoder::new(chunks)),
            out: Vec::new(),
        })
    }

    /// Reads raw deflate (RFC 1951, no zlib header).
    pub fn deflate() -> Decompressor {
        Decompressor(Dec::Deflate {
            inflate: Box::new(flate2::Decompress::new(false)),
            input: Vec::new(),
            at: 0,
            out: Vec::new(),
            ended: false,
        })
    }

    /// Takes compressed bytes as they arrived; nothing is decoded yet.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), CompressError> {
        let result = match &mut self.0 {
            Dec::Snappy { frames, .. } => frames.get_mut().push(data),
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
            self.0 = Dec::Failed;
        }
        result
    }

    /// Compressed bytes taken and not decoded yet.
    pub fn buffered(&self) -> usize {
        match &self.0 {
            Dec::Snappy { frames, .. } => frames.get_ref().pending(),
            Dec::Deflate { input, at, .. } => input.len() - at,
            Dec::Failed => 0,
        }
    }

    /// Decodes what it can, at most `budget` bytes of output (at least 1), appended to `out`;
    /// returns how many. 0 means every byte fed so far is decoded (but for an incomplete
    /// snappy chunk): feed more.
    pub fn decompress(
        &mut self,
        out: &mut bytes::BytesMut,
        budget: usize,
    ) -> Result<usize, CompressError> {
        let result = self.decompress_inner(out, budget.max(1));
        if result.is_err() {
            self.0 = Dec::Failed;
        }
        result
    }

    fn decompress_inner(
        &mut self,
        dst: &mut bytes::BytesMut,
        budget: usize,
    ) -> Result<usize, CompressError> {
        let mut produced = 0;
        match &mut self.0 {
            Dec::Snappy { frames, out } => {
                if out.len() < STEP {
                    out.resize(STEP, 0);
                }
                while produced < budget {
                    let want = (budget - produced).min(out.len());
                    let n = frames
                        .read(&mut out[..want])
                        .map_err(|e| CompressError::Snappy(e.to_string()))?;
                    if n == 0 {
                        break;
                    }
                    dst.extend_from_slice(&out[..n]);
                    produced += n;
                }
            }
            Dec::Deflate {
                inflate,
                input,
                at,
                out,
                ended,
            } => {
                if out.len() < STEP {
                    out.resize(STEP, 0);
                }
                // Also with no input left: the inflater may hold output a full budget cut off.
                while produced < budget && !*ended {
                    let want = (budget - produced).min(STEP);
                    let (before_in, before_out) = (inflate.total_in(), inflate.total_out());
                    let status = inflate
                        .decompress(
                            &input[*at..],
                            &mut out[..want],
                            flate2::FlushDecompress::None,
                        )
                        .map_err(|e| CompressError::Deflate(e.to_string()))?;
                    let consumed = (inflate.total_in() - before_in) as usize;
                    let made = (inflate.total_out() - before_out) as usize;
                    *at += consumed;
                    dst.extend_from_slice(&out[..made]);
                    produced += made;
                    match status {
                        flate2::Status::StreamEnd => {
                            *ended = true;
                            if *at < input.len() {
                                return Err(CompressError::AfterEnd);
                            }
                        }
                        flate2::Status::Ok | flate2::Status::BufError => {
                            if consumed == 0 && made == 0 {
                                // Needs more input than is here (a block cut short).
                                break;
                            }
                        }
                    }
                }
                if *at == input.len() {
                    input.clear();
                    *at = 0;
                    if input.capacity() > 4 * STEP {
                        *input = Vec::new();
                    }
                }
            }
            Dec::Failed => return Err(CompressError::Dead),
        }
        Ok(produced)
    }
}

/// The compressed output of one connection.
pub struct Compressor(Enc);

enum Enc {
    Snappy(Box<snap::write::FrameEncoder<Written>>),
    Deflate(Box<flate2::Compress>),
}

/// Where snap's frame encoder writes: a buffer this side can empty (the encoder lends its
/// writer only by shared reference).
#[derive(Clone, Default)]
struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Written {
    fn take_into(&self, out: &mut Vec<u8>) {
        let mut written = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if out.is_empty() {
            std::mem::swap(out, &mut written);
        } else {
            out.append(&mut written);
        }
    }
}

impl Write for Written {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Compressor {
    /// Writes snappy's framing format.
    pub fn snappy() -> Compressor {
        Compressor(Enc::Snappy(Box::new(snap::write::FrameEncoder::new(
            Written::default(),
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
                frames.get_ref().take_into(out);
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
}

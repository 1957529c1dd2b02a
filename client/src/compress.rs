//! The compression codecs a connection can switch on after IDENTIFY, as nsqd speaks them:
//! snappy's framing format (the `snap` crate) and raw deflate, no zlib header (`flate2`), each
//! written with a flush at the end of every write so the peer can decode it at once.
//!
//! Both directions are state machines over bytes, with no I/O: an [`Encoder`] turns what a
//! connection writes into compressed bytes, a [`Decoder`] is fed what the socket (or TLS)
//! delivered with [`Decoder::push`] and hands out decompressed bytes with [`Decoder::read`].
//! The async transport ([`crate::transport`]) and the blocking one share them.
//!
//! Invariants:
//! - a decoder never produces more than the caller's buffer per [`Decoder::read`], and it is
//!   only fed when it has nothing to give, so a stream that decompresses to gigabytes costs
//!   no more memory than the reader above asks for (the frame reader refuses frames over its
//!   size limit);
//! - a decoder holds at most one incomplete snappy chunk (the format caps a chunk at
//!   [`MAX_SNAPPY_CHUNK`] bytes: a longer one is an error at once) or what one socket read
//!   brought of a deflate stream;
//! - corrupt input is an `InvalidData` error, never a panic; after it the connection is
//!   dropped by whoever reads it.

use bytes::{Buf, BytesMut};
use flate2::{Compress, Decompress, FlushCompress, FlushDecompress, Status};
use std::io::{self, Read, Write};

/// Longest snappy chunk body the `snap` decoder accepts (the worst-case compressed size of a
/// 64 KiB block, the format's largest); a longer announced length is refused at its header.
pub const MAX_SNAPPY_CHUNK: usize = 32 + 65536 + 65536 / 6;

/// Which compression a connection uses after IDENTIFY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Snappy,
    /// Raw deflate at `level` (1 fastest ..= 9 smallest) for what this side writes.
    Deflate {
        level: u32,
    },
}

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Compresses what one side writes.
pub struct Encoder {
    kind: EncoderKind,
}

enum EncoderKind {
    Snappy(Box<snap::write::FrameEncoder<Vec<u8>>>),
    Deflate(Box<Compress>),
}

impl Encoder {
    pub fn new(c: Compression) -> Encoder {
        let kind = match c {
            Compression::Snappy => {
                EncoderKind::Snappy(Box::new(snap::write::FrameEncoder::new(Vec::new())))
            }
            Compression::Deflate { level } => EncoderKind::Deflate(Box::new(Compress::new(
                flate2::Compression::new(level.min(9)),
                false,
            ))),
        };
        Encoder { kind }
    }

    /// Appends `data`, compressed and flushed (decodable by the peer up to its last byte),
    /// to `out`.
    pub fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match &mut self.kind {
            EncoderKind::Snappy(enc) => {
                enc.write_all(data)?;
                enc.flush()?;
                let written = enc.get_mut();
                if out.is_empty() {
                    std::mem::swap(out, written);
                } else {
                    out.extend_from_slice(written);
                    written.clear();
                }
                Ok(())
            }
            EncoderKind::Deflate(c) => deflate_sync(c, data, out),
        }
    }
}

/// Compresses `data` into `out` and ends with a sync flush (an empty stored block), as Go's
/// `flate.Writer.Flush` does after each of nsqd's writes.
fn deflate_sync(c: &mut Compress, mut data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    // Deflate's worst case grows data by 5 bytes per 16 KiB stored block; the flush adds a
    // few more. With room to spare after a sync-flushing call, the flush is complete.
    out.reserve(data.len() + data.len() / 64 + 64);
    loop {
        let before = c.total_in();
        c.compress_vec(data, out, FlushCompress::Sync)
            .map_err(invalid)?;
        let used = (c.total_in() - before) as usize;
        data = &data[used.min(data.len())..];
        if data.is_empty() && out.len() < out.capacity() {
            return Ok(());
        }
        out.reserve(data.len() / 2 + 4096);
    }
}

/// Decompresses what the peer writes.
pub struct Decoder {
    kind: DecoderKind,
}

enum DecoderKind {
    Snappy(Box<snap::read::FrameDecoder<ChunkFeed>>),
    Deflate {
        inflate: Box<Decompress>,
        input: BytesMut,
        ended: bool,
    },
}

/// What the snappy decoder reads from: the bytes pushed so far, of which only whole chunks
/// are visible, so the decoder never stops inside a chunk (it keeps no state across a short
/// read: it only ever sees end of input before a chunk's header).
#[derive(Default)]
struct ChunkFeed {
    buf: BytesMut,
    /// Bytes at the front of `buf` that form whole chunks.
    complete: usize,
}

impl ChunkFeed {
    /// Extends `complete` over every whole chunk now in `buf`.
    fn scan(&mut self) -> io::Result<()> {
        loop {
            let rest = &self.buf[self.complete..];
            if rest.len() < 4 {
                return Ok(());
            }
            let len = usize::from(rest[1]) | usize::from(rest[2]) << 8 | usize::from(rest[3]) << 16;
            if len > MAX_SNAPPY_CHUNK {
                return Err(invalid(format!(
                    "snappy chunk of {len} bytes is longer than the format allows"
                )));
            }
            if rest.len() < 4 + len {
                return Ok(());
            }
            self.complete += 4 + len;
        }
    }
}

impl Read for ChunkFeed {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = out.len().min(self.complete);
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.advance(n);
        self.complete -= n;
        Ok(n)
    }
}

impl Decoder {
    pub fn new(c: Compression) -> Decoder {
        let kind = match c {
            Compression::Snappy => DecoderKind::Snappy(Box::new(snap::read::FrameDecoder::new(
                ChunkFeed::default(),
            ))),
            Compression::Deflate { .. } => DecoderKind::Deflate {
                inflate: Box::new(Decompress::new(false)),
                input: BytesMut::new(),
                ended: false,
            },
        };
        Decoder { kind }
    }

    /// Adds compressed bytes from the peer. Feed only after [`Decoder::read`] returned 0.
    pub fn push(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.kind {
            DecoderKind::Snappy(dec) => {
                let feed = dec.get_mut();
                feed.buf.extend_from_slice(data);
                feed.scan()
            }
            DecoderKind::Deflate { input, .. } => {
                input.extend_from_slice(data);
                Ok(())
            }
        }
    }

    /// Decompresses into `out`; 0 means more input is needed (or the stream ended: see
    /// [`Decoder::ended`]). Corrupt input is an `InvalidData` error.
    pub fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        match &mut self.kind {
            DecoderKind::Snappy(dec) => dec.read(out).map_err(|e| {
                if e.kind() == io::ErrorKind::InvalidData {
                    e
                } else {
                    invalid(format!("snappy: {e}"))
                }
            }),
            DecoderKind::Deflate {
                inflate,
                input,
                ended,
            } => loop {
                // Called even with no new input: inflate may hold output it could not hand
                // out last time for want of room.
                if *ended {
                    return Ok(0);
                }
                let (in_before, out_before) = (inflate.total_in(), inflate.total_out());
                let status = inflate
                    .decompress(input, out, FlushDecompress::None)
                    .map_err(|e| invalid(format!("deflate: {e}")))?;
                let used = (inflate.total_in() - in_before) as usize;
                let made = (inflate.total_out() - out_before) as usize;
                input.advance(used.min(input.len()));
                if status == Status::StreamEnd {
                    *ended = true;
                }
                if made > 0 {
                    return Ok(made);
                }
                if used == 0 {
                    return Ok(0);
                }
            },
        }
    }

    /// True once a deflate stream's final block was read (nsqd never ends one; the
    /// connection reads as closed after it).
    pub fn ended(&self) -> bool {
        matches!(self.kind, DecoderKind::Deflate { ended: true, .. })
    }

    /// True when bytes were pushed that have not been decoded: a stream cut there is
    /// truncated.
    pub fn has_partial_input(&self) -> bool {
        match &self.kind {
            DecoderKind::Snappy(dec) => !dec.get_ref().buf.is_empty(),
            DecoderKind::Deflate { input, ended, .. } => !*ended && !input.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(c: Compression, pieces: &[&[u8]], step: usize) -> Vec<u8> {
        let mut enc = Encoder::new(c);
        let mut wire = Vec::new();
        for p in pieces {
            enc.encode(p, &mut wire).expect("encode");
        }
        let mut dec = Decoder::new(c);
        let mut got = Vec::new();
        let mut buf = [0u8; 333];
        for chunk in wire.chunks(step) {
            dec.push(chunk).expect("push");
            loop {
                let n = dec.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        }
        assert!(!dec.has_partial_input());
        got
    }

    #[test]
    fn both_codecs_round_trip_whatever_the_read_sizes() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let pieces: [&[u8]; 4] = [b"OK", b"", &big, b"PUB t\n"];
        let want: Vec<u8> = pieces.concat();
        for c in [Compression::Snappy, Compression::Deflate { level: 6 }] {
            for step in [1, 7, 4096, usize::MAX] {
                let got = round_trip(c, &pieces, step.min(1 << 20));
                assert!(
                    got == want,
                    "{c:?} step {step}: {} bytes of {}",
                    got.len(),
                    want.len()
                );
            }
        }
    }

    #[test]
    fn each_encode_is_decodable_on_its_own() {
        for c in [Compression::Snappy, Compression::Deflate { level: 1 }] {
            let mut enc = Encoder::new(c);
            let mut dec = Decoder::new(c);
            for msg in [&b"first"[..], b"second", b"third"] {
                let mut wire = Vec::new();
                enc.encode(msg, &mut wire).expect("encode");
                dec.push(&wire).expect("push");
                let mut buf = [0u8; 64];
                let n = dec.read(&mut buf).expect("read");
                assert_eq!(&buf[..n], msg, "{c:?}");
            }
        }
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        for c in [Compression::Snappy, Compression::Deflate { level: 6 }] {
            let mut dec = Decoder::new(c);
            let pushed = dec.push(&[0xff; 64]);
            let mut buf = [0u8; 64];
            let read = pushed.and_then(|_| dec.read(&mut buf));
            let e = read.expect_err("garbage");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{c:?}: {e}");
        }
        // A snappy chunk header announcing more than the format allows fails at once.
        let mut dec = Decoder::new(Compression::Snappy);
        assert!(dec.push(&[0x00, 0xff, 0xff, 0xff]).is_err());
        // A good stream with a flipped byte fails its checksum.
        let mut wire = Vec::new();
        Encoder::new(Compression::Snappy)
            .encode(b"hello hello hello", &mut wire)
            .expect("encode");
        let last = wire.len() - 1;
        wire[last] ^= 1;
        let mut dec = Decoder::new(Compression::Snappy);
        dec.push(&wire).expect("whole chunks");
        assert!(dec.read(&mut [0u8; 64]).is_err());
    }

    #[test]
    fn a_bomb_yields_only_what_is_asked() {
        let zeros = vec![0u8; 8 << 20];
        for c in [Compression::Snappy, Compression::Deflate { level: 9 }] {
            let mut wire = Vec::new();
            Encoder::new(c).encode(&zeros, &mut wire).expect("encode");
            assert!(wire.len() < zeros.len() / 20, "{c:?} compresses zeros");
            let mut dec = Decoder::new(c);
            dec.push(&wire).expect("push");
            let mut buf = [0u8; 1000];
            assert_eq!(dec.read(&mut buf).expect("read"), 1000, "{c:?}");
        }
    }

    /// Random bytes and valid streams with bytes flipped, fed in random pieces: an error or
    /// data, never a panic, and never more out than asked.
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
            let mut enc = Encoder::new(c);
            for i in 0..20u8 {
                enc.encode(&vec![i; 3000 + usize::from(i) * 100], &mut valid)
                    .expect("encode");
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
                let mut dec = Decoder::new(c);
                let mut out = [0u8; 777];
                let mut rest = &wire[..];
                'feed: while !rest.is_empty() {
                    let n = (1 + next() as usize % 5000).min(rest.len());
                    if dec.push(&rest[..n]).is_err() {
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

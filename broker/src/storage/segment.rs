//! The on-disk format of a topic's log: segment files of framed, checksummed records.
//!
//! ```text
//! segment file <20-digit base seq>.seg
//! ┌──────────────────────────── header, 32 bytes ─────────────────────────────┐
//! │ magic "NSQSHSEG" (8) │ version u32 BE (=1) │ header len u32 BE (=32)        │
//! │ base seq u64 BE      │ created ns i64 BE                                  │
//! └───────────────────────────────────────────────────────────────────────────┘
//! record, repeated
//! ┌──────────────┬──────────────┬─────────────────────────── payload ─────────────────────────┐
//! │ len u32 BE   │ crc32 u32 BE │ seq u64 │ timestamp i64 │ defer until i64 │ id [16] │ body   │
//! └──────────────┴──────────────┴───────────────────────────────────────────────────────────┘
//!   len = payload length; crc32 (crc32fast, IEEE) covers the payload; all integers big endian.
//!   seq: the message's position in the topic, strictly increasing through the log.
//!   defer until: wall-clock ns at which a DPUB message becomes deliverable, 0 if none.
//! ```
//!
//! A record is written once whatever the number of channels. Reading never trusts a record
//! whose checksum fails: [`scan`] walks a segment, skips corrupt records by searching for the
//! next valid one, and reports a torn tail so recovery can cut it. Must stay in lockstep with
//! the "On-disk format" section of ARCHITECTURE.md.

use bytes::{BufMut, Bytes};
use protocol::{Message, MessageId};

pub const MAGIC: &[u8; 8] = b"NSQSHSEG";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 32;
/// Bytes before a record's payload.
pub const FRAME_LEN: usize = 8;
/// Bytes of payload before the body.
pub const PAYLOAD_FIXED: usize = 8 + 8 + 8 + 16;

/// A message as the log stores it: its topic sequence number and deferral.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub msg: Message,
    /// Wall-clock nanoseconds from which it may be delivered; 0 = at once.
    pub defer_until: i64,
}

pub fn encode_header(out: &mut Vec<u8>, base_seq: u64, created_ns: i64) {
    out.put_slice(MAGIC);
    out.put_u32(VERSION);
    out.put_u32(HEADER_LEN as u32);
    out.put_u64(base_seq);
    out.put_i64(created_ns);
}

/// Checks a segment header; returns its base seq.
pub fn decode_header(b: &[u8]) -> Result<u64, String> {
    if b.len() < HEADER_LEN {
        return Err(format!("header too short ({} bytes)", b.len()));
    }
    if &b[..8] != MAGIC {
        return Err("bad magic".into());
    }
    let version = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    if version != VERSION {
        return Err(format!("unsupported segment version {version}"));
    }
    Ok(u64::from_be_bytes(b[16..24].try_into().unwrap_or([0; 8])))
}

/// Appends one record for `s` to `out`; returns its length in bytes.
pub fn encode_record(out: &mut Vec<u8>, s: &Stored) -> usize {
    let payload_len = PAYLOAD_FIXED + s.msg.body.len();
    let start = out.len();
    out.reserve(FRAME_LEN + payload_len);
    out.put_u32(payload_len as u32);
    out.put_u32(0); // crc, filled below
    out.put_u64(s.seq);
    out.put_i64(s.msg.timestamp);
    out.put_i64(s.defer_until);
    out.put_slice(&s.msg.id.0);
    out.put_slice(&s.msg.body);
    let crc = crc32fast::hash(&out[start + FRAME_LEN..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    FRAME_LEN + payload_len
}

/// What is at an offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A valid record and the offset just after it.
    Record(Stored, usize),
    /// The bytes end before the record does (a torn write, or the end of what was written).
    Incomplete,
    /// The bytes there are not a valid record.
    Corrupt,
}

/// Parses the record at `off` of `seg` (the whole segment as one `Bytes`, so bodies are
/// zero-copy slices of it). `max_payload` bounds a plausible length.
pub fn parse_at(seg: &Bytes, off: usize, max_payload: usize) -> Parsed {
    parse_within(seg, seg.len(), off, max_payload)
}

/// [`parse_at`] looking only at `seg[..limit]` (the written part of a mapping).
pub fn parse_within(seg: &Bytes, limit: usize, off: usize, max_payload: usize) -> Parsed {
    let b = &seg[..limit.min(seg.len())];
    match view(&b[off.min(b.len())..], max_payload) {
        Viewed::Record(v, len) => {
            let p = off + FRAME_LEN;
            let body = seg.slice(p + PAYLOAD_FIXED..p + len - FRAME_LEN);
            Parsed::Record(v.stored(body), off + len)
        }
        Viewed::Incomplete => Parsed::Incomplete,
        Viewed::Corrupt => Parsed::Corrupt,
    }
}

/// A record's fields, its body borrowed.
#[derive(Debug)]
pub struct View<'a> {
    pub seq: u64,
    pub timestamp: i64,
    pub defer_until: i64,
    pub id: MessageId,
    pub body: &'a [u8],
}

impl Stored {
    /// Gives the body its own allocation, so that a message kept for long (a REQ with a
    /// delay) does not keep alive the buffer it was cut from: a 256 KiB segment block, a
    /// connection's read buffer.
    pub fn detach_body(&mut self) {
        self.msg.body = Bytes::copy_from_slice(&self.msg.body);
    }
}

impl View<'_> {
    pub fn stored(&self, body: Bytes) -> Stored {
        Stored {
            seq: self.seq,
            msg: Message {
                id: self.id,
                timestamp: self.timestamp,
                attempts: 0,
                body,
            },
            defer_until: self.defer_until,
        }
    }
}

/// What [`view`] found at the start of a slice.
#[derive(Debug)]
pub enum Viewed<'a> {
    /// A valid record and its whole length (frame included).
    Record(View<'a>, usize),
    Incomplete,
    Corrupt,
}

/// The payload length a frame header announces, if plausible.
pub fn frame_payload_len(b: &[u8], max_payload: usize) -> Option<usize> {
    let len = u32::from_be_bytes(b.get(..4)?.try_into().ok()?) as usize;
    (PAYLOAD_FIXED..=max_payload).contains(&len).then_some(len)
}

/// Parses the record at the start of `b`, checking its checksum.
pub fn view(b: &[u8], max_payload: usize) -> Viewed<'_> {
    if b.len() < FRAME_LEN {
        return Viewed::Incomplete;
    }
    let Some(len) = frame_payload_len(b, max_payload) else {
        return Viewed::Corrupt;
    };
    let end = FRAME_LEN + len;
    if end > b.len() {
        return Viewed::Incomplete;
    }
    let crc = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    let p = &b[FRAME_LEN..end];
    if crc32fast::hash(p) != crc {
        return Viewed::Corrupt;
    }
    let int = |at: usize| u64::from_be_bytes(p[at..at + 8].try_into().unwrap_or([0; 8]));
    let Some(id) = MessageId::from_slice(&p[24..40]) else {
        return Viewed::Corrupt;
    };
    Viewed::Record(
        View {
            seq: int(0),
            timestamp: int(8) as i64,
            defer_until: int(16) as i64,
            id,
            body: &p[PAYLOAD_FIXED..],
        },
        end,
    )
}

/// A segment's bytes by offset, as the search after damage ([`resync`]) sees them: the whole
/// file at start-up, the log's block cache afterwards.
pub trait ByteSource {
    /// Why bytes are not at hand yet (a block still to be read); stops the search.
    type Missing;
    /// `f` applied to the bytes `off..off + len`; `Ok(None)` when they cannot be had (past the
    /// end, or unreadable).
    fn with<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, Self::Missing>;
}

impl ByteSource for [u8] {
    type Missing = std::convert::Infallible;
    fn with<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, Self::Missing> {
        let Ok(off) = usize::try_from(off) else {
            return Ok(None);
        };
        Ok(self.get(off..off.saturating_add(len)).map(f))
    }
}

/// After damage: the first offset in `from..stop` where a valid record with a seq above
/// `last_seq` starts, `None` if there is none. Every offset is tried, so no valid record
/// after the damage is passed over. `Err((at, missing))`: deciding about the record at `at`
/// needs bytes the source does not have yet; the search can go on from `at` later.
pub fn resync<S: ByteSource + ?Sized>(
    src: &S,
    from: u64,
    stop: u64,
    last_seq: Option<u64>,
    max_payload: usize,
) -> Result<Option<u64>, (u64, S::Missing)> {
    for at in from..stop {
        let len = src
            .with(at, FRAME_LEN, |b| frame_payload_len(b, max_payload))
            .map_err(|m| (at, m))?;
        let Some(Some(len)) = len else {
            continue;
        };
        let valid = src
            .with(at, FRAME_LEN + len, |b| {
                matches!(view(b, max_payload), Viewed::Record(v, _) if last_seq.is_none_or(|l| v.seq > l))
            })
            .map_err(|m| (at, m))?;
        if valid == Some(true) {
            return Ok(Some(at));
        }
    }
    Ok(None)
}

/// [`resync`] over a whole segment in memory, from just after `off`.
fn resync_after(
    seg: &[u8],
    off: usize,
    last_seq: Option<u64>,
    max_payload: usize,
) -> Option<usize> {
    match resync(seg, off as u64 + 1, seg.len() as u64, last_seq, max_payload) {
        Ok(found) => found.map(|at| at as usize),
        Err((_, never)) => match never {},
    }
}

/// What a full scan of a segment found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Offset just after the last valid record (where appends may continue).
    pub valid_end: usize,
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Sparse index: (seq, offset) of every `INDEX_EVERY`th record, and of any record
    /// `INDEX_BYTES` or more past the last point (see [`is_index_point`]).
    pub index: Vec<(u64, usize)>,
    /// Corrupt stretches skipped: (offset, bytes).
    pub skipped: Vec<(usize, usize)>,
    /// Bytes after `valid_end` that hold no valid record (a torn or corrupt tail).
    pub torn_tail: usize,
    /// The highest number behind a broker-made message ID (see `MessageId::to_u64`).
    pub max_id: Option<u64>,
    /// (seq, defer-until ns) of every record published with a deferral, in order.
    pub deferred: Vec<(u64, i64)>,
}

pub const INDEX_EVERY: u64 = 256;
/// A record that starts this many bytes or more past the last index point gets one too. A
/// reader that starts from an index point then passes less than this before the record it
/// wants, never a large record it does not want (which could need more blocks than the read
/// cache holds).
pub const INDEX_BYTES: u64 = 256 * 1024;

/// Whether the record at `offset`, the `records`-th of its segment (from 0), is an index
/// point, given the offset of the last one.
pub fn is_index_point(records: u64, offset: u64, last_point: Option<u64>) -> bool {
    records.is_multiple_of(INDEX_EVERY) || last_point.is_none_or(|p| offset >= p + INDEX_BYTES)
}

/// Walks every record of a segment (after its header).
pub fn scan(seg: &Bytes, max_payload: usize) -> ScanReport {
    let mut r = ScanReport {
        valid_end: HEADER_LEN.min(seg.len()),
        ..ScanReport::default()
    };
    let mut off = HEADER_LEN;
    while off < seg.len() {
        match parse_at(seg, off, max_payload) {
            Parsed::Record(s, next) => {
                if r.last_seq.is_some_and(|l| s.seq <= l) {
                    // A stale record (a seq going backwards) is corruption too.
                    match resync_after(seg, off, r.last_seq, max_payload) {
                        Some(n) => {
                            r.skipped.push((off, n - off));
                            off = n;
                            continue;
                        }
                        None => break,
                    }
                }
                let last_point = r.index.last().map(|&(_, o)| o as u64);
                if is_index_point(r.records, off as u64, last_point) {
                    r.index.push((s.seq, off));
                }
                r.first_seq.get_or_insert(s.seq);
                r.last_seq = Some(s.seq);
                if let Some(n) = s.msg.id.to_u64() {
                    r.max_id = r.max_id.max(Some(n));
                }
                if s.defer_until != 0 {
                    r.deferred.push((s.seq, s.defer_until));
                }
                r.records += 1;
                off = next;
                r.valid_end = next;
            }
            Parsed::Incomplete => break,
            Parsed::Corrupt => match resync_after(seg, off, r.last_seq, max_payload) {
                Some(n) => {
                    r.skipped.push((off, n - off));
                    off = n;
                }
                None => break,
            },
        }
    }
    r.torn_tail = seg.len().saturating_sub(r.valid_end);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(seq: u64, body: &str) -> Stored {
        Stored {
            seq,
            msg: Message {
                id: MessageId::from_u64(seq + 1000),
                timestamp: seq as i64 * 10,
                attempts: 0,
                body: Bytes::from(body.to_string()),
            },
            defer_until: 0,
        }
    }

    fn segment(n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(&mut out, 0, 0);
        for i in 0..n {
            encode_record(&mut out, &stored(i, &format!("body-{i}")));
        }
        out
    }

    #[test]
    fn records_round_trip() {
        let seg = Bytes::from(segment(3));
        assert_eq!(decode_header(&seg), Ok(0));
        let r = scan(&seg, 1 << 20);
        assert_eq!(r.records, 3);
        assert_eq!(r.valid_end, seg.len());
        assert_eq!(r.torn_tail, 0);
        match parse_at(&seg, HEADER_LEN, 1 << 20) {
            Parsed::Record(s, _) => assert_eq!(s, stored(0, "body-0")),
            other => panic!("{other:?}"),
        }
    }

    /// Index points every INDEX_EVERY records and, past a large record, at the next one:
    /// from any index point a reader passes less than INDEX_BYTES before the record it wants.
    #[test]
    fn index_points_by_count_and_by_bytes() {
        let big = "x".repeat(INDEX_BYTES as usize + 10);
        let mut out = Vec::new();
        encode_header(&mut out, 0, 0);
        let mut starts = Vec::new();
        for i in 0..600u64 {
            starts.push(out.len());
            let body = if i == 300 {
                big.clone()
            } else {
                format!("body-{i}")
            };
            encode_record(&mut out, &stored(i, &body));
        }
        let r = scan(&Bytes::from(out), 1 << 20);
        let seqs: Vec<u64> = r.index.iter().map(|&(seq, _)| seq).collect();
        assert_eq!(seqs, [0, 256, 301, 512]);
        for &(seq, off) in &r.index {
            assert_eq!(off, starts[seq as usize]);
        }
    }

    #[test]
    fn torn_tail_is_reported_not_delivered() {
        let full = segment(3);
        let cut = Bytes::from(full[..full.len() - 5].to_vec());
        let r = scan(&cut, 1 << 20);
        assert_eq!(r.records, 2);
        assert!(r.torn_tail > 0);
        assert_eq!(r.valid_end + r.torn_tail, cut.len());
    }

    #[test]
    fn flipped_byte_skips_only_that_record() {
        let mut bytes = segment(5);
        // Flip a byte inside the body of the third record.
        let third = HEADER_LEN + 2 * (FRAME_LEN + PAYLOAD_FIXED + 6);
        bytes[third + FRAME_LEN + PAYLOAD_FIXED + 2] ^= 0xff;
        let seg = Bytes::from(bytes);
        let r = scan(&seg, 1 << 20);
        assert_eq!(r.records, 4);
        assert_eq!(r.skipped.len(), 1);
        assert_eq!(r.last_seq, Some(4));
    }

    #[test]
    fn flipped_length_resyncs() {
        let mut bytes = segment(5);
        let second = HEADER_LEN + (FRAME_LEN + PAYLOAD_FIXED + 6);
        bytes[second] ^= 0x40;
        let seg = Bytes::from(bytes);
        let r = scan(&seg, 1 << 20);
        assert_eq!(r.records, 4);
        assert_eq!(r.last_seq, Some(4));
    }

    #[test]
    fn bad_header() {
        assert!(decode_header(b"short").is_err());
        let mut h = segment(0);
        h[0] = b'X';
        assert!(decode_header(&h).is_err());
    }
}

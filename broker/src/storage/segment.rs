//! The on-disk format of a topic's log is defined here: the segment files, their header and
//! their records, in both versions (version 2 is written, version 1 is read), with the code
//! that encodes them, checks them and scans them. A segment file holds framed, checksummed
//! records; a topic's `meta.json` is defined in [`super::meta`].
//!
//! ```text
//! <data-path>/<topic>/                 one directory per topic (see `super::topic_dir`)
//!     00000000000000000000.seg         segment, named by the seq of its first record (base seq)
//!     00000000000000123456.seg
//!     meta.json                        channels, pauses, cursors (`super::meta`)
//!     epochs.json                      a replicated topic only: its epoch history (`super::log`'s `replica.rs`)
//!
//! segment file <20-digit base seq>.seg, version 2 (written)
//! ┌──────────────────────────── header, 36 bytes ─────────────────────────────┐
//! │ magic "NSQSHSEG" (8) │ version u32 (=2) │ header len u32 (=36)             │
//! │ base seq u64         │ created ns i64   │ crc32 u32 of the 32 bytes before │
//! └───────────────────────────────────────────────────────────────────────────┘
//! record, repeated
//! ┌──────────────────────── frame, 24 bytes ────────────────────────┬──────────── payload ────────────────┐
//! │ mark "\xD5NR2" │ len u32 │ seq u64 │ payload crc32 │ frame crc32 │ timestamp │ defer until │ id │ body │
//! └─────────────────────────────────────────────────────────────────┴─────────────────────────────────────┘
//!   len = payload length; the payload crc32 covers the payload, the frame crc32 len and seq
//!   (what a reader must trust before the payload: where the record ends, which message it
//!   is); crc32 is IEEE (crc32fast); integers are big endian; timestamp and defer until are
//!   i64 ns, id 16 bytes.
//!   seq: the message's position in the topic, strictly increasing through the log.
//!   defer until: wall-clock ns at which a DPUB message becomes deliverable, 0 if none.
//!
//! version 1 (read, never written): header 32 bytes, the same without its crc32;
//!   record: len u32 │ crc32 u32 │ seq u64 │ timestamp i64 │ defer until i64 │ id [16] │ body,
//!   len = bytes after the crc32, which covers them.
//!
//! after the last record: zero bytes up to the end of a direct-I/O block (at most 4095 with
//!   4 KiB blocks), the padding of the last direct write when the broker did not stop
//!   cleanly; readers and recovery know them for padding, not damage.
//! ```
//!
//! A record is written once whatever the number of channels. Records are validated against
//! the format alone (never against flags such as `--max-msg-size`, which may have been larger
//! when they were written):
//!
//! - A version-2 frame checks itself: a damaged length or seq fails the frame crc at once, so
//!   it is known for damage, not taken for a record running past the end of the file. The mark
//!   lets the search for the next record ([`resync`]) pass most offsets with one comparison.
//! - [`scan`] walks a segment; after bytes that are not a valid record it resynchronises on
//!   the next offset where one is (every offset is tried), so damage costs only the records it
//!   touches. Only bytes after the last valid record, with no valid record after them, are a
//!   torn tail (a crash mid-write), which recovery cuts from the newest segment.
//! - The header is not needed to read the records: the base seq is in the file name, and a
//!   segment whose header is damaged is scanned in each version ([`recover`]).
//!
//! Must stay in lockstep with the "On-disk format" section of ARCHITECTURE.md.

use bytes::{BufMut, Bytes};
use protocol::{Message, MessageId};

pub const MAGIC: &[u8; 8] = b"NSQSHSEG";
/// The version this build writes.
pub const VERSION: u32 = 2;
/// Header bytes of a version-2 segment.
pub const HEADER_LEN: usize = 36;
/// Bytes of a version-2 record before its payload.
pub const FRAME_LEN: usize = 24;
/// Bytes of a version-2 payload before the body.
pub const PAYLOAD_FIXED: usize = 8 + 8 + 16;
/// Bytes of a version-2 record before its body.
pub const BODY_AT: usize = FRAME_LEN + PAYLOAD_FIXED;
/// The first bytes of every version-2 record.
pub const RECORD_MARK: [u8; 4] = *b"\xD5NR2";

/// Version 1's layout (see the module doc).
const V1_HEADER_LEN: usize = 32;
const V1_FRAME_LEN: usize = 8;
const V1_PAYLOAD_FIXED: usize = 8 + 8 + 8 + 16;

/// A segment's record layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Read only: segments written before version 2.
    V1,
    /// What this build writes.
    V2,
}

impl Format {
    pub const CURRENT: Format = Format::V2;

    pub fn header_len(self) -> usize {
        match self {
            Format::V1 => V1_HEADER_LEN,
            Format::V2 => HEADER_LEN,
        }
    }

    /// Bytes [`Format::frame`] looks at: enough for the length and the seq.
    pub fn probe_len(self) -> usize {
        match self {
            Format::V1 => 16,
            Format::V2 => FRAME_LEN,
        }
    }

    /// Where the body starts in a record.
    pub fn body_at(self) -> usize {
        match self {
            Format::V1 => V1_FRAME_LEN + V1_PAYLOAD_FIXED,
            Format::V2 => BODY_AT,
        }
    }

    /// Whether a frame that [`Format::frame`] accepts is known to be intact (version 2: its
    /// own crc), so its length and seq can be trusted without the payload.
    pub fn frame_checks_itself(self) -> bool {
        self == Format::V2
    }

    /// The frame at the start of `b` (at least [`Format::probe_len`] bytes), if it holds up on
    /// its own: version 2 checks the mark and the frame crc; version 1 only that the length
    /// is one a record can have (its seq is then unchecked until the payload crc is).
    pub fn frame(self, b: &[u8]) -> Option<Frame> {
        let h = b.get(..self.probe_len())?;
        let u32_at = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let seq = u64::from_be_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
        let (frame_len, fixed, len_at) = match self {
            Format::V1 => (V1_FRAME_LEN, V1_PAYLOAD_FIXED, 0),
            Format::V2 => {
                if h[..4] != RECORD_MARK || crc32fast::hash(&h[4..16]) != u32_at(20) {
                    return None;
                }
                (FRAME_LEN, PAYLOAD_FIXED, 4)
            }
        };
        let payload = u32_at(len_at) as usize;
        (payload >= fixed).then_some(Frame {
            len: frame_len + payload,
            seq,
        })
    }

    /// Parses the record at the start of `b`, checking every checksum.
    pub fn view(self, b: &[u8]) -> Viewed<'_> {
        if b.len() < self.probe_len() {
            return Viewed::Incomplete;
        }
        let Some(frame) = self.frame(b) else {
            return Viewed::Corrupt;
        };
        let Some(rec) = b.get(..frame.len) else {
            return Viewed::Incomplete;
        };
        let (crc_at, payload_at) = match self {
            Format::V1 => (4, V1_FRAME_LEN),
            Format::V2 => (16, FRAME_LEN),
        };
        let crc = u32::from_be_bytes([
            rec[crc_at],
            rec[crc_at + 1],
            rec[crc_at + 2],
            rec[crc_at + 3],
        ]);
        if crc32fast::hash(&rec[payload_at..]) != crc {
            return Viewed::Corrupt;
        }
        let body_at = self.body_at();
        let i64_at = |at: usize| i64::from_be_bytes(rec[at..at + 8].try_into().unwrap_or([0; 8]));
        let Some(id) = MessageId::from_slice(&rec[body_at - 16..body_at]) else {
            return Viewed::Corrupt;
        };
        Viewed::Record(
            View {
                seq: frame.seq,
                timestamp: i64_at(body_at - 32),
                defer_until: i64_at(body_at - 24),
                id,
                body: &rec[body_at..],
            },
            frame.len,
        )
    }
}

/// A record's frame: what it says before its payload is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The whole record's length.
    pub len: usize,
    pub seq: u64,
}

/// A message as the log stores it: its topic sequence number and deferral.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub msg: Message,
    /// Wall-clock nanoseconds from which it may be delivered; 0 = at once.
    pub defer_until: i64,
}

/// Appends a version-2 segment header.
pub fn encode_header(out: &mut Vec<u8>, base_seq: u64, created_ns: i64) {
    let start = out.len();
    out.put_slice(MAGIC);
    out.put_u32(VERSION);
    out.put_u32(HEADER_LEN as u32);
    out.put_u64(base_seq);
    out.put_i64(created_ns);
    let crc = crc32fast::hash(&out[start..]);
    out.put_u32(crc);
}

/// A segment header that holds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: Format,
    pub base: u64,
}

/// Why a segment header is not one. Not an error of storage's operations: recovery reads a
/// segment whose header is damaged by its file name, and logs this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderDamage {
    #[error("header too short ({0} bytes)")]
    Short(usize),
    #[error("bad magic")]
    Magic,
    #[error("unknown segment version {0}")]
    Version(u32),
    #[error("header length {0} does not fit its version")]
    Length(u32),
    #[error("header checksum mismatch")]
    Checksum,
}

/// Checks a segment header (either version).
pub fn decode_header(b: &[u8]) -> Result<Header, HeaderDamage> {
    let h = b.get(..V1_HEADER_LEN).ok_or(HeaderDamage::Short(b.len()))?;
    if &h[..8] != MAGIC {
        return Err(HeaderDamage::Magic);
    }
    let u32_at = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let format = match u32_at(8) {
        1 => Format::V1,
        2 => Format::V2,
        v => return Err(HeaderDamage::Version(v)),
    };
    // The length must match the version too: a version field damaged into the other
    // version's number is not believed.
    let len = u32_at(12);
    if len as usize != format.header_len() {
        return Err(HeaderDamage::Length(len));
    }
    if format == Format::V2 {
        let h = b.get(..HEADER_LEN).ok_or(HeaderDamage::Short(b.len()))?;
        if crc32fast::hash(&h[..32]) != u32_at(32) {
            return Err(HeaderDamage::Checksum);
        }
    }
    Ok(Header {
        format,
        base: u64::from_be_bytes(h[16..24].try_into().unwrap_or([0; 8])),
    })
}

/// A version-2 record's length for a body of `body_len` bytes.
pub fn record_len(body_len: usize) -> usize {
    BODY_AT + body_len
}

/// Appends one version-2 record for `s` to `out`; returns its length in bytes.
pub fn encode_record(out: &mut Vec<u8>, s: &Stored) -> usize {
    let start = out.len();
    out.resize(start + record_len(s.msg.body.len()), 0);
    let len = encode_unsealed_at(&mut out[start..], s);
    seal_record_at(&mut out[start..]);
    len
}

/// Writes one version-2 record for `s` at the start of `out`, which must hold at least
/// [`record_len`] bytes (a write buffer filled in place), with its two crcs left zero:
/// [`seal_record_at`] fills them. A writer filling a buffer with many records seals each a
/// few records later ([`RecordSealer`]). Returns the record's length in bytes.
pub fn encode_unsealed_at(out: &mut [u8], s: &Stored) -> usize {
    let payload_len = PAYLOAD_FIXED + s.msg.body.len();
    let len = FRAME_LEN + payload_len;
    let mut w = &mut out[..len];
    w.put_slice(&RECORD_MARK);
    w.put_u32(payload_len as u32);
    w.put_u64(s.seq);
    w.put_u64(0); // the two crcs, filled by seal_record_at
    w.put_i64(s.msg.timestamp);
    w.put_i64(s.defer_until);
    w.put_slice(&s.msg.id.0);
    w.put_slice(&s.msg.body);
    len
}

/// Fills the two crcs of the version-2 record at the start of `rec`, whose frame holds its
/// length ([`encode_unsealed_at`] wrote it).
pub fn seal_record_at(rec: &mut [u8]) {
    let payload_len = u32::from_be_bytes([rec[4], rec[5], rec[6], rec[7]]) as usize;
    let crc = crc32fast::hash(&rec[FRAME_LEN..FRAME_LEN + payload_len]);
    rec[16..20].copy_from_slice(&crc.to_be_bytes());
    let frame_crc = crc32fast::hash(&rec[4..16]);
    rec[20..24].copy_from_slice(&frame_crc.to_be_bytes());
}

/// Seals the records of a buffer being filled [`SEAL_LAG`] records behind the one just
/// encoded. The crc of a record read back right after its copy waits on the copy's stores
/// (the write buffer's lines are not in the cache; their loads cannot be served until the
/// stores land); a few records later the stores are in the cache and the crc runs at its
/// speed. Every record handed to [`RecordSealer::encoded`] is sealed once [`RecordSealer::finish`]
/// returns.
pub struct RecordSealer {
    starts: [usize; SEAL_LAG],
    pending: usize,
    next: usize,
}

/// How many records behind the copy their crcs are taken (about 2 KiB of 200-byte messages).
pub const SEAL_LAG: usize = 8;

impl RecordSealer {
    pub fn new() -> RecordSealer {
        RecordSealer {
            starts: [0; SEAL_LAG],
            pending: 0,
            next: 0,
        }
    }

    /// A record was encoded unsealed at `start` of `buf`; seals the one [`SEAL_LAG`] before it.
    pub fn encoded(&mut self, buf: &mut [u8], start: usize) {
        if self.pending == SEAL_LAG {
            seal_record_at(&mut buf[self.starts[self.next]..]);
        } else {
            self.pending += 1;
        }
        self.starts[self.next] = start;
        self.next = (self.next + 1) % SEAL_LAG;
    }

    /// Seals every record not sealed yet.
    pub fn finish(&mut self, buf: &mut [u8]) {
        let first = (self.next + SEAL_LAG - self.pending) % SEAL_LAG;
        for i in 0..self.pending {
            seal_record_at(&mut buf[self.starts[(first + i) % SEAL_LAG]..]);
        }
        self.pending = 0;
    }
}

impl Default for RecordSealer {
    fn default() -> Self {
        RecordSealer::new()
    }
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
/// zero-copy slices of it).
pub fn parse_at(seg: &Bytes, format: Format, off: usize) -> Parsed {
    match format.view(seg.get(off..).unwrap_or_default()) {
        Viewed::Record(v, len) => {
            let body = seg.slice(off + format.body_at()..off + len);
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

/// What [`Format::view`] found at the start of a slice.
#[derive(Debug)]
pub enum Viewed<'a> {
    /// A valid record and its whole length (frame included).
    Record(View<'a>, usize),
    Incomplete,
    Corrupt,
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
/// after the damage is passed over; a frame that does not hold up, or names a seq not above
/// `last_seq`, is passed over before its payload is read. `Err((at, missing))`: deciding
/// about the record at `at` needs bytes the source does not have yet; the search can go on
/// from `at` later.
pub fn resync<S: ByteSource + ?Sized>(
    src: &S,
    format: Format,
    from: u64,
    stop: u64,
    last_seq: Option<u64>,
) -> Result<Option<u64>, (u64, S::Missing)> {
    let above = |seq: u64| last_seq.is_none_or(|l| seq > l);
    for at in from..stop {
        let frame = src
            .with(at, format.probe_len(), |b| format.frame(b))
            .map_err(|m| (at, m))?;
        let Some(Some(frame)) = frame else {
            continue;
        };
        if !above(frame.seq) {
            continue;
        }
        let valid = src
            .with(
                at,
                frame.len,
                |b| matches!(format.view(b), Viewed::Record(v, _) if above(v.seq)),
            )
            .map_err(|m| (at, m))?;
        if valid == Some(true) {
            return Ok(Some(at));
        }
    }
    Ok(None)
}

/// [`resync`] over a whole segment in memory, from `from`.
fn resync_from(seg: &[u8], format: Format, from: usize, last_seq: Option<u64>) -> Option<usize> {
    match resync(seg, format, from as u64, seg.len() as u64, last_seq) {
        Ok(found) => found.map(|at| at as usize),
        Err((_, never)) => match never {},
    }
}

/// What a full scan of a segment found.
#[derive(Debug, PartialEq, Eq)]
pub struct ScanReport {
    /// The record layout the scan read.
    pub format: Format,
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

/// Walks every record of a segment of the given format (after its header).
pub fn scan(seg: &Bytes, format: Format) -> ScanReport {
    let header_len = format.header_len();
    let mut r = ScanReport {
        format,
        valid_end: header_len.min(seg.len()),
        records: 0,
        first_seq: None,
        last_seq: None,
        index: Vec::new(),
        skipped: Vec::new(),
        torn_tail: 0,
        max_id: None,
        deferred: Vec::new(),
    };
    let mut off = header_len;
    while off < seg.len() {
        let resume_from = match parse_at(seg, format, off) {
            Parsed::Record(s, next) if r.last_seq.is_none_or(|l| s.seq > l) => {
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
                continue;
            }
            // A stale record (a seq going backwards) is damage too.
            Parsed::Record(..) => off + 1,
            // A frame that checks itself but whose payload does not: the record's extent is
            // known, so the search starts after it (a body may hold bytes that look like a
            // record).
            Parsed::Corrupt if format.frame_checks_itself() => match format.frame(&seg[off..]) {
                Some(f) if off + f.len <= seg.len() => off + f.len,
                _ => off + 1,
            },
            // A length past the end: a torn write if no valid record follows, damage if one
            // does.
            Parsed::Incomplete | Parsed::Corrupt => off + 1,
        };
        match resync_from(seg, format, resume_from, r.last_seq) {
            Some(n) => {
                r.skipped.push((off, n - off));
                off = n;
            }
            None => break,
        }
    }
    r.torn_tail = seg.len().saturating_sub(r.valid_end);
    r
}

/// What recovery learns of a segment file: its format, the header's damage if any, and the
/// scan.
#[derive(Debug)]
pub struct Recovered {
    pub header: Result<Header, HeaderDamage>,
    pub report: ScanReport,
}

/// Scans a segment file, in the version its header names when the header holds up. A
/// damaged header hides nothing: the file is scanned as version 2 (fast: the record mark),
/// then, if that finds no record, as version 1; whichever finds records wins (the base seq
/// comes from the file name). A version-1 header whose scan finds nothing gets the same
/// second look, since version 1's header has no checksum.
pub fn recover(seg: &Bytes) -> Recovered {
    let header = decode_header(seg);
    let report = match header {
        Ok(Header {
            format: Format::V2, ..
        }) => scan(seg, Format::V2),
        Ok(Header {
            format: Format::V1, ..
        }) => {
            let v1 = scan(seg, Format::V1);
            if v1.records > 0 {
                v1
            } else {
                better(scan(seg, Format::V2), v1)
            }
        }
        Err(_) => {
            let v2 = scan(seg, Format::V2);
            if v2.records > 0 {
                v2
            } else {
                better(scan(seg, Format::V1), v2)
            }
        }
    };
    Recovered { header, report }
}

/// The scan that found records, else `fallback`.
fn better(candidate: ScanReport, fallback: ScanReport) -> ScanReport {
    if candidate.records > 0 {
        candidate
    } else {
        fallback
    }
}

/// Version 1's encoder, for tests only (this build never writes version 1): data directories
/// written before version 2 must still be read.
#[cfg(test)]
pub mod v1 {
    use super::*;

    pub fn encode_header(out: &mut Vec<u8>, base_seq: u64, created_ns: i64) {
        out.put_slice(MAGIC);
        out.put_u32(1);
        out.put_u32(V1_HEADER_LEN as u32);
        out.put_u64(base_seq);
        out.put_i64(created_ns);
    }

    pub fn encode_record(out: &mut Vec<u8>, s: &Stored) -> usize {
        let payload_len = V1_PAYLOAD_FIXED + s.msg.body.len();
        let start = out.len();
        out.put_u32(payload_len as u32);
        out.put_u32(0);
        out.put_u64(s.seq);
        out.put_i64(s.msg.timestamp);
        out.put_i64(s.defer_until);
        out.put_slice(&s.msg.id.0);
        out.put_slice(&s.msg.body);
        let crc = crc32fast::hash(&out[start + V1_FRAME_LEN..]);
        out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
        V1_FRAME_LEN + payload_len
    }
}

#[cfg(test)]
mod segment_tests;

//! A topic's log: the sequence of every message published to the topic, written once whatever
//! the number of channels, in segment files under `<data-path>/<topic>/`, with the newest
//! messages also kept in memory.
//!
//! - `append` gives each message the next sequence number and keeps it in the in-memory window.
//!   It never waits.
//! - The shard's flusher first has [`TopicLog::plan`] encode the records appended since its
//!   last round into the pending write buffer, leaving out those every channel has finished
//!   (below the topic's floor), then ([`flush`], [`sync`]) writes them with direct I/O through
//!   the shard's io_uring (whole aligned blocks, see [`flush`]), and fsyncs by the sync policy.
//! - Channels read by sequence number ([`TopicLog::read`]): from the window when the message
//!   is recent or not written yet, else from the log's block cache ([`super::blocks`]), with a
//!   per-reader hint so sequential reading never searches. A block not cached yet makes the
//!   read return [`Read::Wait`]; the shard's fetcher ([`fetch`]) reads it and wakes the
//!   channels. Bodies read from disk are slices of their block.
//! - Memory bound: the window holds the newest `mem_limit` messages plus those not yet
//!   written; everything older is read back from disk. An ephemeral topic has no files: what
//!   falls out of its window is gone.
//! - Segments are deleted once every channel's floor has passed them ([`TopicLog::release_below`]).
//! - Start-up recovery ([`TopicLog::open`]) scans every segment through a memory mapping.
//! - The log lists its DPUB records (seq and due time) from its start on, for /stats: a channel
//!   counts those it has not taken yet as deferred ([`TopicLog::deferred_between`]).
//! - A deleted log ([`TopicLog::destroy`]) writes nothing more, not even a flush under way.

use super::blocks::{self, BlockKey, Blocks, BLOCK};
use super::file::SegFile;
use super::segment::{self, Format, Stored, Viewed, HEADER_LEN};
use bytes::Bytes;
use protocol::Message;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;
use tracing::{debug, info, warn};

/// One segment file.
struct Segment {
    base: u64,
    /// Its record layout: [`Format::CURRENT`] for segments this build made; an older one is
    /// read, never appended to.
    format: Format,
    /// One past the last seq written to it (or planned: pending chunks count).
    end: u64,
    path: PathBuf,
    /// Bytes of the file planned so far (written + pending).
    planned_len: u64,
    /// Bytes known to be in the file.
    written_len: u64,
    file: Option<Rc<SegFile>>,
    /// Direct I/O writes whole aligned blocks: the file's bytes from the last block boundary
    /// below `written_len` up to it, written again in front of the next write. `None` until
    /// read from the file (a segment recovered at start-up).
    tail: Option<Vec<u8>>,
    /// The file opened for direct reads (older segments; the newest reads through `file`).
    rfile: RefCell<Option<Rc<SegFile>>>,
    /// Sparse (seq, offset) index.
    index: Vec<(u64, usize)>,
    records: u64,
    /// Damage met in this segment, by the offset of the first record it spoils: recovery's
    /// findings, and what readers have met since.
    skips: RefCell<BTreeMap<u64, Skip>>,
}

/// Where reading goes on after damage at an offset of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// At this offset: the next valid record, an index point, or the end of the segment.
    To(u64),
    /// The search (damage met while serving) is under way: offsets below this were tried. It
    /// goes on once the blocks it needs are read, or the segment grows.
    Searching(u64),
}

/// A segment's bytes through the block cache, as [`segment::resync`] reads them. Bytes past
/// `limit`, or in an unreadable block, cannot be had; in a segment still `growing`, the first
/// offset whose record ran past the written end is remembered.
struct CachedBytes<'a> {
    cache: &'a Blocks,
    base: u64,
    limit: u64,
    growing: bool,
    first_past_end: std::cell::Cell<Option<u64>>,
}

impl segment::ByteSource for CachedBytes<'_> {
    type Missing = BlockKey;

    fn with<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, BlockKey> {
        if off + len as u64 > self.limit {
            if self.growing && self.first_past_end.get().is_none() {
                self.first_past_end.set(Some(off));
            }
            return Ok(None);
        }
        match self.cache.with_bytes(self.base, off, len, f) {
            Ok(r) => Ok(Some(r)),
            Err(key) if self.cache.is_bad(key) => Ok(None),
            Err(key) => Err(key),
        }
    }
}

/// Encoded records waiting to be written at `offset` of the segment starting at `base`.
struct Chunk {
    base: u64,
    offset: u64,
    bytes: Vec<u8>,
    /// One past the last seq in the chunk.
    end_seq: u64,
}

/// A read that needs blocks: the first one missing, and the range of blocks it needs (first
/// and last block numbers of the same segment).
struct Missing(BlockKey, u64, u64);

impl Missing {
    /// The same, needing the blocks from `block` on as well (where the reader started).
    fn from(self, block: u64) -> Missing {
        Missing(self.0, self.1.min(block), self.2)
    }
}

/// One record met while reading the disk.
enum Step {
    /// The record looked for (body copied out of the block), and its length.
    Found(Stored, usize),
    /// A record before it: its length and seq.
    Before(usize, u64),
    Corrupt,
}

/// Where a reader stopped on disk: reading `seq` next means parsing at `offset` of `base`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskHint {
    seq: u64,
    base: u64,
    offset: usize,
    valid: bool,
}

/// What a read found.
pub enum Read {
    /// The message at (or, after a gap, the first one after) the asked seq.
    Msg(Stored, DiskHint),
    /// Nothing readable below this seq: continue from it.
    Skip(u64),
    /// Nothing more to read yet.
    End,
    /// The record is on disk and not cached: the blocks are asked for; the shard's fetcher
    /// reads them and wakes the topic's channels.
    Wait,
}

pub struct TopicLog {
    name: String,
    dir: Option<PathBuf>,
    segments: Vec<Segment>,
    head: u64,
    /// First seq still retained.
    start: u64,
    window: VecDeque<Stored>,
    mem_limit: usize,
    pending: Vec<Chunk>,
    /// Seqs below this are encoded into `pending` (or skipped, or written); the window holds
    /// the records from here to `head`, not encoded yet ([`TopicLog::plan`]).
    planned_end: u64,
    /// Record bytes of the seqs from `planned_end` to `head`.
    unplanned_bytes: usize,
    /// Seqs below this are in the files (or were skipped: nobody wants them).
    written_end: u64,
    /// Seqs below this are fsynced.
    pub synced_end: u64,
    pub unsynced: u64,
    pub last_sync: Instant,
    max_bytes_per_file: u64,
    /// Segments written since the last fsync.
    dirty: Vec<Rc<SegFile>>,
    /// The last write or sync error, until one succeeds.
    pub failed: Option<String>,
    pub bytes_written: u64,
    /// Blocks of segments read back from disk (see [`super::blocks`]).
    blocks: RefCell<Blocks>,
    /// Segments opened for reading, most recent last (at most [`READ_FILES`] stay open).
    read_files: RefCell<VecDeque<u64>>,
    /// The topic was deleted: a flush in progress drops what it holds.
    destroyed: bool,
    /// Released segment files and destroyed directories, renamed out of the way, that the
    /// shard deletes off its thread ([`TopicLog::take_trash`], [`super::delete_in_background`]).
    trash: Vec<PathBuf>,
    /// The highest number behind a message ID found in the segments at open, so the topic's
    /// new IDs can start above it ([`crate::ids::IdGen::resume_after`]).
    max_id: Option<u64>,
    /// (seq, defer-until ns) of the records from `start` on that were published with a
    /// deferral (DPUB), in seq order. A channel counts those it has not taken yet, and whose
    /// time has not come, as deferred rather than waiting (nsqd hands a DPUB to each
    /// channel's deferred queue as it is published). See [`TopicLog::deferred_between`].
    deferred: VecDeque<(u64, i64)>,
    /// Capacity a new pending chunk starts with: about what the last flush took, so a chunk
    /// of a busy topic is not copied over as it grows (see [`next_chunk_capacity`]).
    chunk_cap: usize,
}

/// Segment files a log keeps open for reading.
const READ_FILES: usize = 4;

impl TopicLog {
    /// A log that never touches disk (`#ephemeral` topics).
    pub fn in_memory(name: &str, mem_limit: u64) -> TopicLog {
        TopicLog::new(name, None, mem_limit, u64::MAX)
    }

    fn new(name: &str, dir: Option<PathBuf>, mem_limit: u64, max_bytes_per_file: u64) -> TopicLog {
        TopicLog {
            name: name.to_string(),
            dir,
            segments: Vec::new(),
            head: 0,
            start: 0,
            window: VecDeque::new(),
            mem_limit: mem_limit as usize,
            pending: Vec::new(),
            planned_end: 0,
            unplanned_bytes: 0,
            written_end: 0,
            synced_end: 0,
            unsynced: 0,
            last_sync: Instant::now(),
            max_bytes_per_file: max_bytes_per_file.max(HEADER_LEN as u64 + 1),
            dirty: Vec::new(),
            failed: None,
            bytes_written: 0,
            blocks: RefCell::new(Blocks::default()),
            read_files: RefCell::new(VecDeque::new()),
            destroyed: false,
            trash: Vec::new(),
            max_id: None,
            deferred: VecDeque::new(),
            chunk_cap: MIN_CHUNK,
        }
    }

    /// Opens (recovering) or creates the log in `dir`. Runs at start-up, before the shard
    /// serves anything, so it uses blocking file I/O. Cuts a torn tail, skips corrupt records,
    /// and logs both. Records are judged by the segment format alone, never by the flags
    /// (`--max-msg-size` may have been larger when they were written).
    pub fn open(
        name: &str,
        dir: PathBuf,
        mem_limit: u64,
        max_bytes_per_file: u64,
    ) -> std::io::Result<TopicLog> {
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir)?;
            // The new directory's name, so a power loss cannot take the topic's files with it.
            if let Some(parent) = dir.parent() {
                super::sync_dir(parent)?;
            }
        }
        let mut log = TopicLog::new(name, Some(dir.clone()), mem_limit, max_bytes_per_file);
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
            let p = entry.path();
            if super::is_trash(&p) {
                // Released before a stop or crash, not deleted yet.
                if let Err(e) = std::fs::remove_file(&p) {
                    warn!(topic = name, file = %p.display(), "cannot delete released segment: {e}");
                }
                continue;
            }
            let Some(stem) = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".seg"))
            else {
                continue;
            };
            if let Ok(base) = stem.parse::<u64>() {
                files.push((base, p));
            }
        }
        files.sort();
        let count = files.len();
        for (i, (base, path)) in files.into_iter().enumerate() {
            let last = i + 1 == count;
            match recover_segment(name, base, &path, last)? {
                Some(found) => {
                    log.head = log.head.max(found.segment.end);
                    log.segments.push(found.segment);
                    log.max_id = log.max_id.max(found.max_id);
                    log.deferred.extend(found.deferred);
                }
                None => continue,
            }
        }
        if let Some(first) = log.segments.first() {
            log.start = first.base;
        }
        log.planned_end = log.head;
        log.written_end = log.head;
        log.synced_end = log.head;
        Ok(log)
    }

    pub fn is_persistent(&self) -> bool {
        self.dir.is_some()
    }

    /// The topic was deleted: nothing of it will be written any more.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed
    }

    pub fn head(&self) -> u64 {
        self.head
    }

    /// The highest number behind a message ID in the segments found at open.
    pub fn recovered_max_id(&self) -> Option<u64> {
        self.max_id
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    fn window_start(&self) -> u64 {
        self.head - self.window.len() as u64
    }

    /// How many records in `[from, to)` were published with a deferral that has not come at
    /// `now_ns` (wall-clock nanoseconds, as `defer_until`). For /stats: linear in the
    /// deferred records of the range.
    pub fn deferred_between(&self, from: u64, to: u64, now_ns: i64) -> u64 {
        if from >= to {
            return 0;
        }
        let lo = self.deferred.partition_point(|&(seq, _)| seq < from);
        let hi = self.deferred.partition_point(|&(seq, _)| seq < to);
        self.deferred
            .range(lo..hi)
            .filter(|&&(_, due)| due > now_ns)
            .count() as u64
    }

    /// Forgets the deferral of records below the start (nobody reads them any more).
    fn forget_deferred_below_start(&mut self) {
        while self
            .deferred
            .front()
            .is_some_and(|&(seq, _)| seq < self.start)
        {
            self.deferred.pop_front();
        }
    }

    /// Appends messages; returns the seq after the last one.
    pub fn append(&mut self, msgs: Vec<Message>, defer_until: i64) -> u64 {
        for msg in msgs {
            let mut stored = Stored {
                seq: self.head,
                msg,
                defer_until,
            };
            if defer_until != 0 {
                // Channels keep a deferred message for its whole delay: its body gets its own
                // allocation here, once, instead of keeping a connection's read buffer alive.
                stored.detach_body();
                self.deferred.push_back((stored.seq, defer_until));
            }
            self.head += 1;
            if self.dir.is_some() {
                self.unplanned_bytes += record_len(&stored) as usize;
            }
            self.window.push_back(stored);
        }
        self.evict();
        self.head
    }

    /// Encodes the records appended since the last plan into the pending write buffer, except
    /// those below `floor` (every channel has finished them: nobody will read them again, so
    /// they need not be written). The newest record is always encoded, so the files end with
    /// the log's head (and its highest ID), which recovery starts from. Called by the flusher
    /// just before it writes, when consumers have had the most time to finish what it holds.
    ///
    /// Returns how many records it encoded and how many it skipped.
    pub fn plan(&mut self, floor: u64) -> Planned {
        let mut planned = Planned::default();
        if self.dir.is_none() || self.planned_end >= self.head {
            return planned;
        }
        let window = std::mem::take(&mut self.window);
        let ws = self.head - window.len() as u64;
        let last = self.head - 1;
        for seq in self.planned_end.max(ws)..self.head {
            if seq < floor && seq != last {
                planned.skipped += 1;
                continue;
            }
            planned.encoded += 1;
            self.encode(&window[(seq - ws) as usize]);
        }
        self.window = window;
        self.planned_end = self.head;
        self.unplanned_bytes = 0;
        planned
    }

    fn encode(&mut self, s: &Stored) {
        let rec_len = record_len(s);
        let needs_new = match self.segments.last() {
            None => true,
            // A segment of an older format (recovered) is read, never appended to.
            Some(seg) => {
                seg.format != Format::CURRENT
                    || seg.records > 0 && seg.planned_len + rec_len > self.max_bytes_per_file
            }
        };
        if needs_new {
            self.roll(s.seq);
        }
        let Some(seg) = self.segments.last_mut() else {
            return;
        };
        let offset = seg.planned_len;
        // A chunk stops growing at MAX_WRITE (the next starts where it ends): doubling a Vec
        // past that copied megabytes at every step and left glibc holding the big buffers.
        let same_chunk = matches!(self.pending.last(),
            Some(c) if c.base == seg.base && c.bytes.len() + rec_len as usize <= MAX_WRITE);
        if !same_chunk {
            self.pending.push(Chunk {
                base: seg.base,
                offset,
                bytes: Vec::with_capacity(self.chunk_cap),
                end_seq: s.seq,
            });
        }
        let last_point = seg.index.last().map(|&(_, o)| o as u64);
        if segment::is_index_point(seg.records, offset, last_point) {
            seg.index.push((s.seq, offset as usize));
        }
        seg.records += 1;
        seg.end = s.seq + 1;
        if let Some(chunk) = self.pending.last_mut() {
            segment::encode_record(&mut chunk.bytes, s);
            chunk.end_seq = s.seq + 1;
        }
        seg.planned_len += rec_len;
    }

    fn roll(&mut self, base: u64) {
        let Some(dir) = &self.dir else { return };
        let path = dir.join(format!("{base:020}.seg"));
        let mut header = Vec::with_capacity(self.chunk_cap);
        segment::encode_header(&mut header, base, crate::ids::now_nanos());
        self.segments.push(Segment {
            base,
            format: Format::CURRENT,
            end: base,
            path,
            planned_len: HEADER_LEN as u64,
            written_len: 0,
            file: None,
            tail: Some(Vec::new()),
            rfile: RefCell::new(None),
            index: Vec::new(),
            records: 0,
            skips: RefCell::default(),
        });
        self.pending.push(Chunk {
            base,
            offset: 0,
            bytes: header,
            end_seq: base,
        });
    }

    /// Drops from memory what is written and older than the newest `mem_limit`.
    fn evict(&mut self) {
        while self.window.len() > self.mem_limit {
            let Some(front) = self.window.front() else {
                break;
            };
            if self.dir.is_some() && front.seq >= self.written_end {
                break;
            }
            self.window.pop_front();
        }
        if self.dir.is_none() {
            self.start = self.start.max(self.window_start());
            self.forget_deferred_below_start();
        }
    }

    /// Bytes of records appended but not written yet.
    pub fn unwritten_bytes(&self) -> usize {
        self.unplanned_bytes + self.pending.iter().map(|c| c.bytes.len()).sum::<usize>()
    }

    /// Seqs below this are encoded for writing, written, or left out ([`TopicLog::plan`]).
    pub fn planned_end(&self) -> u64 {
        self.planned_end
    }

    /// Seqs below this are in the files.
    pub fn written_end(&self) -> u64 {
        self.written_end
    }

    /// Reads the message at `seq`, or the first one after it if `seq` is gone.
    pub fn read(&self, seq: u64, hint: DiskHint) -> Read {
        if seq >= self.head {
            return Read::End;
        }
        if seq < self.start {
            return Read::Skip(self.start);
        }
        let ws = self.window_start();
        if seq >= ws {
            let s = &self.window[(seq - ws) as usize];
            return Read::Msg(s.clone(), DiskHint::default());
        }
        if self.dir.is_none() {
            return Read::Skip(ws);
        }
        self.read_disk(seq, hint).unwrap_or(Read::Skip(ws))
    }

    fn read_disk(&self, seq: u64, hint: DiskHint) -> Option<Read> {
        // The segment holding `seq`, or the first one when `seq` lies before it: records every
        // channel had finished are never written, so a wanted seq (a cursor restored after a
        // crash, say) may fall in a gap before the first segment left, and reading goes on
        // from there.
        let mut idx = self
            .segments
            .partition_point(|s| s.base <= seq)
            .saturating_sub(1);
        let hinted = hint.valid
            && hint.seq == seq
            && self.segments.get(idx).is_some_and(|s| s.base == hint.base);
        let mut offset = hinted.then_some(hint.offset as u64);
        let cache = self.blocks.borrow();
        loop {
            let seg = self.segments.get(idx)?;
            let mut off = match offset.take() {
                Some(o) => o,
                None => {
                    let i = seg.index.partition_point(|(s, _)| *s <= seq);
                    i.checked_sub(1)
                        .map(|i| seg.index[i].1 as u64)
                        .unwrap_or(seg.format.header_len() as u64)
                }
            };
            // This attempt reads the segment from here on: the blocks from here to the end of
            // the record it looks for are what it needs, all at once (see `wait_for`).
            let first_block = off / BLOCK;
            let limit = seg.written_len;
            let mut last_seq = None;
            while off + seg.format.probe_len() as u64 <= limit {
                // Damage: where the search for the next valid record starts, and what to log.
                let (from, what) = match self.step_at(&cache, seg, off, seq) {
                    Ok(None) => break,
                    // Unreadable (I/O errors): what lies in the block is lost.
                    Err(Missing(key, ..)) if cache.is_bad(key) => {
                        ((key.1 + 1) * BLOCK, "unreadable block; its records skipped")
                    }
                    Err(missing) => {
                        drop(cache);
                        return Some(self.wait_for(missing.from(first_block), limit));
                    }
                    Ok(Some(Step::Found(s, n))) => {
                        let next = off + n as u64;
                        let hint = DiskHint {
                            seq: s.seq + 1,
                            base: seg.base,
                            offset: next as usize,
                            valid: true,
                        };
                        if !hinted || off / BLOCK != next / BLOCK {
                            drop(cache);
                            self.read_ahead(seg.base, next / BLOCK, limit);
                        }
                        return Some(Read::Msg(s, hint));
                    }
                    Ok(Some(Step::Before(n, s))) => {
                        last_seq = Some(s);
                        off += n as u64;
                        continue;
                    }
                    Ok(Some(Step::Corrupt)) => (off + 1, "corrupt record while reading; skipped"),
                };
                match self.past_damage(&cache, seg, off, from, last_seq, what) {
                    Ok(Some(n)) => off = n,
                    Ok(None) => break,
                    Err(key) => {
                        drop(cache);
                        let missing = Missing(key, key.1, key.1).from(first_block);
                        return Some(self.wait_for(missing, limit));
                    }
                }
            }
            // Nothing at or after `seq` in this segment: the next one, from its start.
            idx += 1;
            if idx >= self.segments.len() {
                return Some(Read::Skip(self.window_start()));
            }
        }
    }

    /// Whether `seg` may still be written to: records past its written end may be on their
    /// way, not damage.
    fn is_growing(&self, seg: &Segment) -> bool {
        seg.written_len < seg.planned_len
            || seg.format == Format::CURRENT
                && self.segments.last().is_some_and(|l| l.base == seg.base)
    }

    /// The record at `off` of `seg` (read up to its written end) from the cache: `None` when
    /// it is not all written yet, `Err` names a missing block.
    fn step_at(
        &self,
        cache: &Blocks,
        seg: &Segment,
        off: u64,
        seq: u64,
    ) -> Result<Option<Step>, Missing> {
        let (base, format, limit) = (seg.base, seg.format, seg.written_len);
        let one = |k: BlockKey| Missing(k, k.1, k.1);
        // A record inside one block (most): its body is a slice of the block.
        let (block, at, valid) = cache.tail_from(base, off).map_err(one)?;
        let here = &block[at..valid];
        let probe = format.probe_len();
        let frame = if here.len() >= probe {
            format.frame(here)
        } else {
            // The frame itself straddles two blocks.
            cache
                .with_bytes(base, off, probe, |b| format.frame(b))
                .map_err(one)?
        };
        let Some(frame) = frame else {
            return Ok(Some(Step::Corrupt));
        };
        let rec = frame.len;
        if off + rec as u64 > limit {
            // Not written yet, or (in a segment nothing more is written to) damage.
            return Ok((!self.is_growing(seg)).then_some(Step::Corrupt));
        }
        if format.frame_checks_itself() {
            if frame.seq < seq {
                // Its frame is intact: the next record starts right after it.
                return Ok(Some(Step::Before(rec, frame.seq)));
            }
        } else if seg
            .index
            .get(seg.index.partition_point(|&(_, o)| o as u64 <= off))
            .is_some_and(|&(_, next)| off + rec as u64 > next as u64)
        {
            // A version-1 length is not checked by itself; a record never runs past the next
            // index point (a record that scanning found valid), so this one is damaged, and
            // reading its blocks would be wasted.
            return Ok(Some(Step::Corrupt));
        }
        let body_at = format.body_at();
        let judge = |b: &[u8], body: &dyn Fn(&segment::View) -> Bytes| match format.view(b) {
            Viewed::Record(v, n) if v.seq >= seq => Step::Found(v.stored(body(&v)), n),
            Viewed::Record(v, n) => Step::Before(n, v.seq),
            _ => Step::Corrupt,
        };
        if rec <= here.len() {
            // A slice of the block; but a deferred message may wait for hours, so its body is
            // copied out rather than keep the block alive (once here, not by every channel).
            let body = |v: &segment::View| {
                if v.defer_until != 0 {
                    Bytes::copy_from_slice(v.body)
                } else {
                    block.slice(at + body_at..at + rec)
                }
            };
            return Ok(Some(judge(&here[..rec], &body)));
        }
        // Straddling blocks: copied out once, joined, and the body is a slice of that. Every
        // missing block of the record is asked for at once (a record may be larger than the
        // whole cache).
        let (first, last) = (off / BLOCK, (off + rec as u64 - 1) / BLOCK);
        let joined = cache
            .joined(base, off, rec)
            .map_err(|k| Missing(k, first, last))?;
        let body = |_: &segment::View| joined.slice(body_at..);
        Ok(Some(judge(&joined, &body)))
    }

    /// Where reading goes on after damage at `off` of `seg` (a corrupt record, or a record in
    /// an unreadable block): the first valid record from `from` on, with a seq above
    /// `last_seq`. The search tries every offset up to the next index point (a record recovery
    /// found valid; no record runs past it), so only the damaged bytes are lost; it is
    /// remembered, so the next reader jumps straight there and the damage is logged once.
    /// `Ok(None)`: nothing valid up to the written end of a segment still written to (yet).
    /// `Err`: the search needs a block that is not cached.
    fn past_damage(
        &self,
        cache: &Blocks,
        seg: &Segment,
        off: u64,
        from: u64,
        last_seq: Option<u64>,
        what: &str,
    ) -> Result<Option<u64>, BlockKey> {
        let start = match seg.skips.borrow().get(&off) {
            Some(Skip::To(n)) => return Ok(Some(*n)),
            Some(Skip::Searching(at)) => (*at).max(from),
            None => from,
        };
        let limit = seg.written_len;
        let stop = seg
            .index
            .iter()
            .map(|(_, o)| *o as u64)
            .find(|&o| o >= from)
            .unwrap_or(limit)
            .min(limit);
        let growing = self.is_growing(seg);
        let bytes = CachedBytes {
            cache,
            base: seg.base,
            limit: stop,
            growing,
            first_past_end: Default::default(),
        };
        let (skip, found) = match segment::resync(&bytes, seg.format, start, stop, last_seq) {
            Ok(Some(n)) => (Skip::To(n), Some(n)),
            Ok(None) if stop < limit || !growing => (Skip::To(stop), Some(stop)),
            Ok(None) => (
                Skip::Searching(bytes.first_past_end.get().unwrap_or(stop)),
                None,
            ),
            Err((at, key)) => {
                seg.skips.borrow_mut().insert(off, Skip::Searching(at));
                return Err(key);
            }
        };
        let first_time = seg
            .skips
            .borrow_mut()
            .insert(off, skip)
            .is_none_or(|s| s != skip);
        if first_time {
            if let Skip::To(n) = skip {
                warn!(topic = %self.name, segment = %seg.path.display(), offset = off, resumed_at = n, lost_bytes = n - off, "{what}");
            }
        }
        Ok(found)
    }

    /// Asks for a missing block and the ones after it; the reader waits.
    fn wait_for(&self, Missing(key, from, to): Missing, limit: u64) -> Read {
        {
            let mut cache = self.blocks.borrow_mut();
            cache.want(key);
            // A reader needing more than two blocks (a large record, and the records before
            // it from where the reader started) asks for all of them in one round, cached ones
            // too, so that the round which brings the last cannot evict the first (a record
            // may be larger than the whole cache). Asking only for the missing ones let two
            // rounds evict each other's blocks forever.
            for n in from..=to {
                if to - from > 1 || !cache.has(key.0, n, limit) {
                    cache.want((key.0, n));
                }
            }
        }
        self.read_ahead(key.0, to, limit);
        Read::Wait
    }

    /// Asks for the blocks after block `n` of segment `base` that are not cached.
    fn read_ahead(&self, base: u64, n: u64, limit: u64) {
        let mut cache = self.blocks.borrow_mut();
        for k in n + 1..=n + blocks::READ_AHEAD {
            if k * BLOCK >= limit {
                break;
            }
            if !cache.has(base, k, limit) {
                cache.want((base, k));
            }
        }
    }

    /// The segment starting at `base`, if it still exists (segments are sorted by base).
    fn segment(&self, base: u64) -> Option<&Segment> {
        let i = self.segments.binary_search_by_key(&base, |s| s.base).ok()?;
        self.segments.get(i)
    }

    fn segment_mut(&mut self, base: u64) -> Option<&mut Segment> {
        let i = self.segments.binary_search_by_key(&base, |s| s.base).ok()?;
        self.segments.get_mut(i)
    }

    /// How to read block `key`: its file offset, the read size (rounded up to `align`) and how
    /// many of the bytes read are valid. Bytes below the segment's written length were
    /// written before the read is issued, so the read sees them. `None`: the segment is gone,
    /// or nothing of that block is written.
    fn block_read(&self, key: BlockKey, align: u64) -> Option<(u64, usize, usize)> {
        let written = self.segment(key.0)?.written_len;
        let pos = key.1 * BLOCK;
        let len = BLOCK.min(written.checked_sub(pos).filter(|&n| n > 0)?);
        Some((pos, len.next_multiple_of(align) as usize, len as usize))
    }

    /// [`TopicLog::segment`] for a write or read that needs it: gone is an error.
    fn live_segment(&self, base: u64) -> Result<&Segment, String> {
        self.segment(base)
            .ok_or_else(|| format!("segment {base} vanished"))
    }

    /// Bytes of segment blocks cached for readers.
    pub fn cached_bytes(&self) -> u64 {
        self.blocks.borrow().cached_bytes() as u64
    }

    /// Drops cached blocks nobody read since the last call; whether any are left.
    pub fn age_blocks(&self) -> bool {
        self.blocks.borrow_mut().age()
    }

    /// Whether readers wait for blocks the fetcher has not read yet.
    pub fn has_wanted_blocks(&self) -> bool {
        self.blocks.borrow().has_wanted()
    }

    /// [`TopicLog::read`] that reads missing blocks at once, with blocking I/O: for start-up
    /// only, before the shard serves anything.
    pub fn read_blocking(&self, seq: u64) -> Read {
        for _ in 0..64 {
            match self.read(seq, DiskHint::default()) {
                Read::Wait => {}
                r => return r,
            }
            let wanted = {
                let mut cache = self.blocks.borrow_mut();
                cache.begin_round();
                cache.take_wanted()
            };
            for key in wanted {
                let (Some(seg), Some((pos, len, valid))) =
                    (self.segment(key.0), self.block_read(key, 1))
                else {
                    self.blocks.borrow_mut().give_up(key);
                    continue;
                };
                // Tried here up to BAD_AFTER times (a failed block is not asked for again
                // within RETRY_AFTER); then readers skip it.
                for _ in 0..blocks::BAD_AFTER {
                    let mut buf = vec![0u8; len];
                    let read = std::fs::File::open(&seg.path)
                        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, pos));
                    match read {
                        Ok(()) => {
                            self.blocks
                                .borrow_mut()
                                .insert(key, Bytes::from(buf), valid);
                            break;
                        }
                        Err(e) => {
                            warn!(topic = %self.name, segment = %seg.path.display(), "cannot read: {e}");
                            self.blocks.borrow_mut().failed(key);
                        }
                    }
                }
            }
        }
        Read::End
    }

    /// Moves the start to `floor` (nothing below it is wanted, written or not) and deletes the
    /// written segments entirely below it (every channel has passed them).
    pub fn release_below(&mut self, floor: u64) {
        // Nobody wants what is below `floor`, written or not (emptying a topic that has no
        // channel, or deleting its last one, right after a publish must drop that publish);
        // files go only as far as what is written.
        self.start = self.start.max(floor.min(self.head));
        self.forget_deferred_below_start();
        let floor = floor.min(self.written_end);
        while self.segments.len() > 1 && self.segments[0].end <= floor {
            let seg = self.segments.remove(0);
            self.blocks.borrow_mut().drop_segment(seg.base);
            // Renaming is a quick metadata change; freeing the file's extents is not (31 ms
            // for a 100 MiB segment here), so that happens off the shard's thread.
            let doomed = super::trash_name(&seg.path);
            match std::fs::rename(&seg.path, &doomed) {
                Ok(()) => {
                    info!(topic = %self.name, segment = %seg.path.display(), "segment released: every channel has passed it");
                    self.trash.push(doomed);
                }
                Err(e) => {
                    warn!(topic = %self.name, segment = %seg.path.display(), "cannot delete segment: {e}")
                }
            }
        }
        if self.dir.is_none() {
            while self.window.front().is_some_and(|s| s.seq < floor) {
                self.window.pop_front();
            }
        }
    }

    /// Drops everything (topic deleted). The directory is renamed at once (a topic of the same
    /// name may be created right after) and goes to the trash with its files; the rename is
    /// durable once the data path is fsynced. Fails (the reason) when the directory cannot be
    /// renamed: it would come back at the next start.
    pub fn destroy(&mut self) -> Result<(), String> {
        self.pending.clear();
        self.planned_end = self.head;
        self.unplanned_bytes = 0;
        self.window.clear();
        self.segments.clear();
        self.blocks.borrow_mut().clear();
        self.deferred.clear();
        self.destroyed = true;
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let doomed = super::trash_name(dir);
        match std::fs::rename(dir, &doomed) {
            Ok(()) => {
                self.trash.push(doomed);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                let reason = format!("cannot remove {}: {e}", dir.display());
                warn!(topic = %self.name, "{reason}");
                Err(reason)
            }
        }
    }

    /// What [`TopicLog::release_below`] and [`TopicLog::destroy`] left to delete.
    pub fn take_trash(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.trash)
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

/// What recovery found in a segment file.
struct Recovered {
    segment: Segment,
    /// The highest number behind a message ID in it.
    max_id: Option<u64>,
    /// (seq, defer-until ns) of its records published with a deferral.
    deferred: Vec<(u64, i64)>,
}

/// Recovers one segment file at start-up: scans it, logs what it skipped, and cuts a torn
/// tail from the newest segment (`last`). `None`: the file holds no record and is removed (a
/// file shorter than any header, or a newest segment of an older format that holds only its
/// header, which new records could not be appended to).
fn recover_segment(
    topic: &str,
    base: u64,
    path: &Path,
    last: bool,
) -> std::io::Result<Option<Recovered>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len < Format::V1.header_len().min(HEADER_LEN) as u64 {
        warn!(topic, segment = %path.display(), len, "segment shorter than its header; removed");
        drop(file);
        std::fs::remove_file(path)?;
        return Ok(None);
    }
    // SAFETY: nothing else writes the file during recovery.
    let mmap = unsafe { memmap2::Mmap::map(&file) }?;
    let data = Bytes::from_owner(mmap);
    let segment::Recovered { header, report } = segment::recover(&data);
    match header {
        Ok(h) if h.base == base => {}
        Ok(h) => {
            warn!(topic, segment = %path.display(), header_base = h.base, "segment header names another base seq; using the file name")
        }
        Err(e) => {
            warn!(topic, segment = %path.display(), records = report.records, version = ?report.format, "damaged segment header ({e}); its records read by the file name's base seq")
        }
    }
    for (off, n) in &report.skipped {
        warn!(topic, segment = %path.display(), offset = off, bytes = n, "corrupt data skipped; its records will not be delivered");
    }
    let mut valid = report.valid_end as u64;
    let padding = report.torn_tail > 0 && data[report.valid_end..].iter().all(|&b| b == 0);
    if padding {
        // The zeros after the last direct write (a stop that was not clean): not damage.
        debug!(topic, segment = %path.display(), offset = report.valid_end, bytes = report.torn_tail, "write padding cut");
        drop(data);
        if last {
            file.set_len(valid)?;
            file.sync_all()?;
        }
    } else if report.torn_tail > 0 {
        if last {
            warn!(topic, segment = %path.display(), offset = report.valid_end, bytes = report.torn_tail, "torn tail cut");
            drop(data);
            file.set_len(valid)?;
            file.sync_all()?;
        } else {
            warn!(topic, segment = %path.display(), offset = report.valid_end, bytes = report.torn_tail, "corrupt tail ignored");
        }
    } else {
        valid = len.min(valid);
    }
    if last && report.format != Format::CURRENT && report.records == 0 {
        // New records go to a segment of the current format, which would take this name.
        info!(topic, segment = %path.display(), "empty segment of an older format removed");
        drop(file);
        std::fs::remove_file(path)?;
        return Ok(None);
    }
    let end = report.last_seq.map(|s| s + 1).unwrap_or(base);
    let segment = Segment {
        base,
        format: report.format,
        end,
        path: path.to_path_buf(),
        planned_len: valid,
        written_len: valid,
        file: None,
        tail: None,
        rfile: RefCell::new(None),
        index: report.index,
        records: report.records,
        skips: RefCell::new(
            report
                .skipped
                .iter()
                .map(|&(o, n)| (o as u64, Skip::To((o + n) as u64)))
                .collect(),
        ),
    };
    Ok(Some(Recovered {
        segment,
        max_id: report.max_id,
        deferred: report.deferred,
    }))
}

/// What [`TopicLog::plan`] did with the records appended since the last plan.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Encoded for writing.
    pub encoded: u64,
    /// Finished by every channel already: not written.
    pub skipped: u64,
}

/// A record's length in a segment.
fn record_len(s: &Stored) -> u64 {
    segment::record_len(s.msg.body.len()) as u64
}

/// The largest single write: a pending chunk bigger than this goes out in pieces.
const MAX_WRITE: usize = 1 << 20;

/// The smallest capacity a pending chunk starts with.
const MIN_CHUNK: usize = 64 * 1024;

/// The capacity for the next pending chunks after a flush took `flushed` bytes: that with a
/// quarter to spare, between [`MIN_CHUNK`] and [`MAX_WRITE`]. Starting every chunk at 64 KiB
/// had a topic taking a few hundred KiB per flush reallocate (copy) its chunk twice each time.
fn next_chunk_capacity(flushed: usize) -> usize {
    (flushed + flushed / 4).clamp(MIN_CHUNK, MAX_WRITE)
}

fn align_down(v: u64, align: u64) -> u64 {
    v - v % align
}

/// Writes every pending chunk of `log`. On failure the unwritten part stays pending (written
/// again on the next flush) and the error is returned, so a failure never loses a chunk.
///
/// Segments are written with direct I/O (`O_DIRECT` through the shard's io_uring): the bytes
/// go from a reused, registered buffer to the device, not through freshly allocated page
/// cache. Each write covers whole aligned blocks: the partial block at the end of the file
/// (`Segment::tail`) is written again, with the same bytes, in front of the new records, and
/// the last block is padded with zeros (recovery knows such a tail; a clean stop trims it).
pub async fn flush(log: &RefCell<TopicLog>) -> Result<(), String> {
    let result = flush_pending(log).await;
    let mut l = log.borrow_mut();
    if l.destroyed {
        // Deleted meanwhile: nothing left to write to, and nothing to retry.
        l.pending.clear();
        l.failed = None;
        return Ok(());
    }
    result
}

async fn flush_pending(log: &RefCell<TopicLog>) -> Result<(), String> {
    let chunks = {
        let mut l = log.borrow_mut();
        // What the shard did not plan with its channels' floor: nothing below the start is
        // wanted.
        let start = l.start;
        l.plan(start);
        let chunks = std::mem::take(&mut l.pending);
        l.chunk_cap = next_chunk_capacity(chunks.iter().map(|c| c.bytes.len()).sum());
        chunks
    };
    let mut chunks = VecDeque::from(chunks);
    while let Some(mut chunk) = chunks.pop_front() {
        let file = match segment_file(log, chunk.base).await {
            Ok(f) => f,
            Err(e) => {
                chunks.push_front(chunk);
                return Err(restore(log, chunks, e));
            }
        };
        if log.borrow().destroyed {
            // Deleted while its file was being opened (by path: the open may have reached a
            // directory of the same name made since). Nothing of it may be written.
            return Ok(());
        }
        let len = chunk.bytes.len();
        let mut written = 0usize;
        while written < len {
            let at = chunk.offset + written as u64;
            match write_piece(log, &file, chunk.base, at, &chunk.bytes[written..]).await {
                Ok(n) => written += n,
                Err(e) => {
                    chunk.bytes.drain(..written);
                    chunk.offset += written as u64;
                    chunks.push_front(chunk);
                    return Err(restore(log, chunks, e));
                }
            }
        }
        let mut l = log.borrow_mut();
        l.bytes_written += len as u64;
        l.written_end = l.written_end.max(chunk.end_seq);
        l.unsynced += 1;
        if !l.dirty.iter().any(|f| Rc::ptr_eq(f, &file)) {
            l.dirty.push(file);
        }
    }
    let mut l = log.borrow_mut();
    l.failed = None;
    l.evict();
    Ok(())
}

/// Writes the start of `data` (at most [`MAX_WRITE`] bytes) at `at`, which must be the
/// segment's written length; returns how many bytes of `data` are now in the file.
async fn write_piece(
    log: &RefCell<TopicLog>,
    file: &Rc<SegFile>,
    base: u64,
    at: u64,
    data: &[u8],
) -> Result<usize, String> {
    let align = file.alignment();
    let take = data.len().min(MAX_WRITE);
    let (start, tail, size) = {
        let l = log.borrow();
        let seg = l.live_segment(base)?;
        let tail = match &seg.tail {
            Some(t) if seg.written_len == at => t,
            _ => {
                return Err(format!(
                    "write at {at} of segment {base} does not follow its end {}",
                    seg.written_len
                ))
            }
        };
        let start = at - tail.len() as u64;
        let total = tail.len() + take;
        let size = total.div_ceil(align as usize) * align as usize;
        (start, tail.clone(), size)
    };
    let data_end = at + take as u64;
    // The new tail: the bytes of the last, partial block.
    let tail_from = align_down(data_end, align).max(start);
    let mut new_tail = Vec::with_capacity((data_end - tail_from) as usize);
    if tail_from < at {
        new_tail.extend_from_slice(&tail[(tail_from - start) as usize..]);
    }
    new_tail.extend_from_slice(&data[(tail_from.max(at) - at) as usize..take]);
    let fill = |b: &mut [u8]| {
        b[..tail.len()].copy_from_slice(&tail);
        b[tail.len()..tail.len() + take].copy_from_slice(&data[..take]);
        b[tail.len() + take..].fill(0);
    };
    let n = file
        .write_with(size, start, fill)
        .await
        .map_err(|e| e.to_string())?;
    let reached = (start + n.min(size) as u64).min(data_end);
    if reached <= at {
        return Err("write wrote nothing (disk full?)".into());
    }
    if reached < data_end {
        // A short write (rare): it ends on a block boundary, so no partial block is left.
        new_tail.clear();
        if !reached.is_multiple_of(align) {
            return Err(format!(
                "short write ending off a block boundary at {reached}"
            ));
        }
    }
    let mut l = log.borrow_mut();
    if let Some(seg) = l.segment_mut(base) {
        seg.written_len = reached;
        seg.tail = Some(new_tail);
    }
    Ok((reached - at) as usize)
}

/// Puts unwritten chunks back in front of anything appended meanwhile, and records the error.
fn restore(log: &RefCell<TopicLog>, chunks: VecDeque<Chunk>, e: String) -> String {
    let mut l = log.borrow_mut();
    let newer = std::mem::take(&mut l.pending);
    l.pending = chunks.into_iter().chain(newer).collect();
    l.failed = Some(e.clone());
    e
}

async fn segment_file(log: &RefCell<TopicLog>, base: u64) -> Result<Rc<SegFile>, String> {
    let path = {
        let l = log.borrow();
        let seg = l.live_segment(base)?;
        if let Some(f) = &seg.file {
            return Ok(f.clone());
        }
        seg.path.clone()
    };
    let file = SegFile::open(&path, true).await?;
    let align = file.alignment();
    let file = Rc::new(file);
    let mut l = log.borrow_mut();
    // Only the newest segment keeps its file open; older ones are read through mappings.
    for seg in l.segments.iter_mut() {
        if seg.base != base {
            seg.file = None;
        }
    }
    if let Some(seg) = l.segment_mut(base) {
        if seg.tail.is_none() {
            // A segment from before a restart: its last partial block, read once (at most one
            // block, from the page cache recovery just filled).
            let from = align_down(seg.written_len, align);
            let mut tail = vec![0u8; (seg.written_len - from) as usize];
            std::fs::File::open(&seg.path)
                .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut tail, from))
                .map_err(|e| format!("read the end of {}: {e}", path.display()))?;
            seg.tail = Some(tail);
        }
        seg.file = Some(file.clone());
    }
    Ok(file)
}

/// Cuts the zero padding of the last direct write off the newest segment (a clean stop), so
/// that the file ends with its last record.
pub async fn trim_padding(log: &RefCell<TopicLog>) -> Result<(), String> {
    let (file, len) = {
        let l = log.borrow();
        let Some(seg) = l.segments.last() else {
            return Ok(());
        };
        let Some(file) = seg.file.clone() else {
            return Ok(());
        };
        (file, seg.written_len)
    };
    file.truncate(len).await.map_err(|e| e.to_string())
}

/// Reads every block the log's readers asked for, all at once, with direct I/O; returns how
/// many arrived and how many failed. A block that cannot be read is given up (asked for again
/// by the next reader).
pub async fn fetch(log: &RefCell<TopicLog>) -> (usize, usize) {
    let wanted = {
        let l = log.borrow();
        let mut cache = l.blocks.borrow_mut();
        cache.begin_round();
        cache.take_wanted()
    };
    let mut reads = Vec::with_capacity(wanted.len());
    let mut failed = 0;
    for key in wanted {
        let file = match read_file(log, key.0).await {
            Ok(f) => f,
            Err(e) => {
                let l = log.borrow();
                warn!(topic = %l.name, segment_base = key.0, "cannot open for reading: {e}");
                l.blocks.borrow_mut().failed(key);
                failed += 1;
                continue;
            }
        };
        let Some((pos, size, valid)) = log.borrow().block_read(key, file.alignment()) else {
            log.borrow().blocks.borrow_mut().give_up(key);
            continue;
        };
        reads.push((
            key,
            valid,
            glommio::spawn_local(async move { file.read(pos, size).await }),
        ));
    }
    let mut arrived = 0;
    for (key, valid, read) in reads {
        let result = read.await;
        let l = log.borrow();
        let mut cache = l.blocks.borrow_mut();
        match result {
            Ok(data) if l.segment(key.0).is_some() => {
                cache.insert(key, data, valid);
                arrived += 1;
            }
            Ok(_) => cache.give_up(key),
            Err(e) => {
                warn!(topic = %l.name, segment_base = key.0, block = key.1, "segment read failed: {e}");
                cache.failed(key);
                failed += 1;
            }
        }
    }
    (arrived, failed)
}

/// The file to read segment `base` from: the newest segment's open file, else its own.
async fn read_file(log: &RefCell<TopicLog>, base: u64) -> Result<Rc<SegFile>, String> {
    let path = {
        let l = log.borrow();
        let seg = l.live_segment(base)?;
        if let Some(f) = seg.file.as_ref().or(seg.rfile.borrow().as_ref()) {
            return Ok(f.clone());
        }
        seg.path.clone()
    };
    let file = Rc::new(SegFile::open(&path, false).await?);
    let l = log.borrow();
    if let Some(seg) = l.segment(base) {
        *seg.rfile.borrow_mut() = Some(file.clone());
        // A few stay open (readers move forward); a reader racing through a long backlog
        // must not hold a descriptor per segment.
        let mut open = l.read_files.borrow_mut();
        open.retain(|b| *b != base);
        open.push_back(base);
        while open.len() > READ_FILES {
            if let Some(old) = open.pop_front() {
                if let Some(s) = l.segment(old) {
                    *s.rfile.borrow_mut() = None;
                }
            }
        }
    }
    Ok(file)
}

/// fsyncs every file written since the last sync; on success everything written is durable.
pub async fn sync(log: &RefCell<TopicLog>) -> Result<(), String> {
    let (files, end) = {
        let mut l = log.borrow_mut();
        (std::mem::take(&mut l.dirty), l.written_end)
    };
    for f in &files {
        if let Err(e) = f.fdatasync().await {
            let mut l = log.borrow_mut();
            l.dirty.extend(files.iter().cloned());
            l.failed = Some(e.to_string());
            return Err(e.to_string());
        }
    }
    let mut l = log.borrow_mut();
    l.synced_end = l.synced_end.max(end);
    l.unsynced = 0;
    l.last_sync = Instant::now();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::MessageId;

    fn message(i: u64) -> Message {
        // Bodies of 100 to ~6,000 bytes: records end anywhere inside a 4 KiB block, and some
        // straddle the cache's blocks.
        let len = 100 + (i as usize * 1_237) % 6_000;
        Message {
            id: MessageId::from_u64(i + 1),
            timestamp: i as i64,
            attempts: 0,
            body: Bytes::from(vec![(i % 251) as u8; len]),
        }
    }

    /// Appends, flushes in several rounds (each rewrites the partial last block; the last round
    /// is over MAX_WRITE, so it goes out as several chunks of one segment), reads every message
    /// back through the block cache, trims, and recovers the segment after a reopen.
    fn round_trip(direct: bool) {
        let name = if direct { "direct" } else { "buffered" };
        with_dir(name, |dir| async move {
            if !direct {
                super::super::file::force_buffered();
            }
            let topic_dir = dir.join("t");
            let total: u64 = 1000;
            let log = RefCell::new(TopicLog::open("t", topic_dir.clone(), 0, 8 << 20).unwrap());
            let mut next = 0;
            for round in [1u64, 7, 40, 52, 200, 700] {
                let msgs: Vec<Message> = (next..next + round).map(message).collect();
                next += round;
                log.borrow_mut().append(msgs, 0);
                if round == 700 {
                    log.borrow_mut().plan(0);
                    let l = log.borrow();
                    assert!(
                        l.pending.len() >= 2,
                        "a round over MAX_WRITE makes several chunks"
                    );
                    assert!(l.pending.iter().all(|c| c.bytes.len() <= MAX_WRITE));
                }
                flush(&log).await.unwrap();
            }
            assert_eq!(next, total);
            sync(&log).await.unwrap();
            let seg = log.borrow().segments[0].path.clone();
            let written = log.borrow().segments[0].written_len;
            let on_disk = std::fs::read(&seg).unwrap();
            if direct {
                assert_eq!(on_disk.len() % 4096, 0, "direct writes cover whole blocks");
            } else {
                assert_eq!(
                    on_disk.len() as u64,
                    written,
                    "buffered writes are not padded"
                );
            }
            assert!(
                on_disk[written as usize..].iter().all(|&b| b == 0),
                "padding is zeros"
            );
            let report = segment::scan(&Bytes::from(on_disk), Format::V2);
            assert_eq!(report.records, total);
            assert!(report.skipped.is_empty());
            // Every message read back from disk (mem limit 0), through Wait and the fetcher.
            let mut hint = DiskHint::default();
            for seq in 0..total {
                let mut waits = 0;
                let got = loop {
                    let r = log.borrow().read(seq, hint);
                    match r {
                        Read::Msg(s, h) => break (s, h),
                        Read::Wait => {
                            waits += 1;
                            assert!(waits < 10, "seq {seq} never arrived");
                            fetch(&log).await;
                        }
                        Read::Skip(n) => panic!("seq {seq}: skip to {n}"),
                        Read::End => panic!("seq {seq}: end"),
                    }
                };
                assert_eq!(got.0.seq, seq);
                assert_eq!(got.0.msg, message(seq));
                hint = got.1;
            }
            trim_padding(&log).await.unwrap();
            assert_eq!(std::fs::metadata(&seg).unwrap().len(), written);
            drop(log);
            let reopened = TopicLog::open("t", topic_dir, 0, 8 << 20).unwrap();
            assert_eq!(reopened.head(), total);
            // message(i) has ID i + 1.
            assert_eq!(reopened.recovered_max_id(), Some(total));
        });
    }

    /// A DPUB body is copied out of the buffer it came in (a connection's read buffer) once,
    /// when appended, and every channel reading it shares that copy; other bodies are not
    /// copied at all.
    #[test]
    fn deferred_bodies_are_copied_once_at_append() {
        let mut log = TopicLog::in_memory("t", 100);
        let read_buffer = Bytes::from(vec![7u8; 4096]);
        let body = |i: usize| read_buffer.slice(i * 100..i * 100 + 100);
        let msg = |i: usize| Message {
            id: MessageId::from_u64(i as u64 + 1),
            timestamp: 0,
            attempts: 0,
            body: body(i),
        };
        log.append(vec![msg(0)], 0);
        log.append(vec![msg(1)], 1);
        let read = |seq| match log.read(seq, DiskHint::default()) {
            Read::Msg(s, _) => s.msg.body,
            _ => panic!("seq {seq} not read"),
        };
        assert_eq!(read(0).as_ptr(), body(0).as_ptr(), "not deferred: shared");
        let (first, second) = (read(1), read(1));
        assert_eq!(first, body(1));
        assert_ne!(first.as_ptr(), body(1).as_ptr(), "deferred: copied");
        assert_eq!(first.as_ptr(), second.as_ptr(), "once");
    }

    /// Reads `seq` through the fetcher; panics if it never arrives.
    async fn read_through(log: &RefCell<TopicLog>, seq: u64, hint: DiskHint) -> Read {
        for _ in 0..10 {
            let r = log.borrow().read(seq, hint);
            match r {
                Read::Wait => {
                    fetch(log).await;
                }
                r => return r,
            }
        }
        panic!("seq {seq} never arrived");
    }

    /// Runs `test` on a glommio executor with a fresh data directory named after `name`.
    fn with_dir<F: std::future::Future<Output = ()>>(name: &str, test: impl FnOnce(PathBuf) -> F) {
        let dir = std::env::temp_dir().join(format!("log-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(512 * 1024)
            .make()
            .unwrap();
        ex.run(async {
            super::super::file::probe(&dir, 0).await;
            test(dir.clone()).await;
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A log (nothing kept in memory) holding messages `0..total`, written and synced, and
    /// the file offset where each record starts.
    async fn written_log(dir: &Path, total: u64) -> (RefCell<TopicLog>, Vec<u64>) {
        let log = RefCell::new(TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap());
        log.borrow_mut()
            .append((0..total).map(message).collect(), 0);
        flush(&log).await.unwrap();
        sync(&log).await.unwrap();
        let mut starts = Vec::new();
        let mut at = HEADER_LEN as u64;
        for i in 0..total {
            starts.push(at);
            at += segment::record_len(message(i).body.len()) as u64;
        }
        starts.push(at);
        (log, starts)
    }

    /// Reads the whole log in order as a channel does; the seqs delivered.
    async fn read_all(log: &RefCell<TopicLog>) -> Vec<u64> {
        let mut delivered = Vec::new();
        let mut hint = DiskHint::default();
        let mut seq = 0;
        loop {
            match read_through(log, seq, hint).await {
                Read::Msg(s, h) => {
                    assert_eq!(s.msg, message(s.seq));
                    delivered.push(s.seq);
                    seq = s.seq + 1;
                    hint = h;
                }
                Read::Skip(n) => panic!("skip from {seq} to {n}"),
                Read::End => return delivered,
                Read::Wait => unreachable!(),
            }
        }
    }

    /// Records below the floor given to `plan` (every channel finished them) are never
    /// written, except the newest, so the files still end with the head and its ID. A reader
    /// asking for a left-out seq gets the next record there is, and a reopened log continues
    /// after the head.
    #[test]
    fn records_finished_before_the_write_are_left_out() {
        with_dir("plan", |dir| async move {
            let (log, _) = written_log(&dir, 3).await;
            log.borrow_mut().append((3..10).map(message).collect(), 0);
            assert_eq!(
                log.borrow_mut().plan(6),
                Planned {
                    encoded: 4,
                    skipped: 3
                }
            );
            log.borrow_mut().append((10..13).map(message).collect(), 0);
            assert_eq!(
                log.borrow_mut().plan(13),
                Planned {
                    encoded: 1,
                    skipped: 2
                },
                "the head is written even when finished"
            );
            assert_eq!(log.borrow_mut().plan(13), Planned::default());
            flush(&log).await.unwrap();
            sync(&log).await.unwrap();
            assert_eq!(log.borrow().written_end(), 13);
            // Nothing is kept in memory (mem limit 0): reads go to the file.
            for (asked, got) in [(3, 6), (4, 6), (6, 6), (9, 9), (10, 12)] {
                match read_through(&log, asked, DiskHint::default()).await {
                    Read::Msg(s, _) => {
                        assert_eq!(s.seq, got, "asked {asked}");
                        assert_eq!(s.msg, message(got));
                    }
                    _ => panic!("seq {asked}: no message"),
                }
            }
            drop(log);
            let reopened = TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap();
            assert_eq!(reopened.head(), 13);
            assert_eq!(reopened.recovered_max_id(), Some(13));
            let on_disk = std::fs::read(dir.join("t").join(format!("{:020}.seg", 0))).unwrap();
            assert_eq!(segment::scan(&Bytes::from(on_disk), Format::V2).records, 8);
        });
    }

    /// A wanted seq in a gap before the first segment left (left out when every channel had
    /// finished it, and the segment before the gap deleted since) reads the next record there
    /// is, not a skip past everything on disk (a crashed channel's restored cursor can be
    /// there).
    #[test]
    fn a_seq_before_the_first_segment_reads_from_it() {
        with_dir("gap-first", |dir| async move {
            // One record a segment.
            let log = RefCell::new(TopicLog::open("t", dir.join("t"), 0, 1).unwrap());
            log.borrow_mut().append(vec![message(0)], 0);
            flush(&log).await.unwrap();
            log.borrow_mut().append((1..10).map(message).collect(), 0);
            assert_eq!(log.borrow_mut().plan(8).skipped, 7);
            flush(&log).await.unwrap();
            log.borrow_mut().release_below(5);
            assert_eq!(log.borrow().segments[0].base, 8, "segment 0 deleted");
            match read_through(&log, 5, DiskHint::default()).await {
                Read::Msg(s, _) => assert_eq!(s.seq, 8),
                _ => panic!("seq 5 must read the next record, 8"),
            }
        });
    }

    /// Releasing past what is written moves the start at once (what a topic without channels
    /// drops when emptied), and the write that follows keeps the file whole.
    #[test]
    fn releasing_unwritten_records_drops_them_at_once() {
        with_dir("release", |dir| async move {
            let (log, _) = written_log(&dir, 3).await;
            log.borrow_mut().append((3..6).map(message).collect(), 0);
            assert_eq!(log.borrow().written_end(), 3);
            log.borrow_mut().release_below(6);
            assert_eq!(
                log.borrow().start(),
                6,
                "the unwritten records are dropped too"
            );
            assert!(matches!(
                log.borrow().read(3, DiskHint::default()),
                Read::Skip(6)
            ));
            flush(&log).await.unwrap();
            assert_eq!(log.borrow().written_end(), 6);
            log.borrow_mut().append(vec![message(6)], 0);
            match read_through(&log, 6, DiskHint::default()).await {
                Read::Msg(s, _) => assert_eq!(s.seq, 6),
                _ => panic!("seq 6 is readable after the release"),
            }
        });
    }

    /// Damage that appears after start-up (the file changes under the broker) costs only the
    /// damaged records: reading resynchronises on the very next record, even when that one
    /// starts in a block not cached yet, instead of jumping to the next index point (up to 255
    /// records further). The search is remembered, so a second pass meets the same result.
    #[test]
    fn damage_after_start_up_loses_only_the_damaged_records() {
        with_dir("damage", |dir| async move {
            let total = 600;
            let (log, starts) = written_log(&dir, total).await;
            // The record that straddles the first block boundary (the next one starts in a
            // block of its own), and one in the middle of a block.
            let straddling = (0..total as usize)
                .find(|&i| starts[i] < BLOCK && starts[i + 1] > BLOCK)
                .unwrap() as u64;
            assert!(straddling < segment::INDEX_EVERY - 2);
            let damaged = [straddling, straddling + 40];
            let path = log.borrow().segments[0].path.clone();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            for &d in &damaged {
                let body_at = starts[d as usize] + (segment::BODY_AT + 5) as u64;
                std::os::unix::fs::FileExt::write_all_at(&file, &[0xA5], body_at).unwrap();
            }
            drop(file);
            let expected: Vec<u64> = (0..total).filter(|s| !damaged.contains(s)).collect();
            assert_eq!(read_all(&log).await, expected, "first pass");
            assert_eq!(read_all(&log).await, expected, "second pass");
            let skips = log.borrow().segments[0].skips.borrow().clone();
            for d in damaged {
                let (from, to) = (starts[d as usize], starts[d as usize + 1]);
                assert_eq!(skips.get(&from), Some(&Skip::To(to)));
            }
        });
    }

    /// A record larger than the whole block cache, read by readers that have no hint (one
    /// coming from the in-memory window, or starting over): each read must find what it needs
    /// after a round or two. Before, such a reader started at an index point before the large
    /// record, needed its blocks and the earlier ones together, and the rounds fetching them
    /// evicted each other's blocks forever (a delivery stall seen in CI at --shards 4).
    #[test]
    fn a_record_larger_than_the_cache_does_not_stall_readers_without_a_hint() {
        with_dir("huge", |dir| async move {
            let big_len = (blocks::CAPACITY + 8) * BLOCK as usize;
            let log = TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap();
            let log = RefCell::new(log);
            let big = 150;
            let msgs = (0..300)
                .map(|i| {
                    let mut m = message(i);
                    if i == big {
                        m.body = Bytes::from(vec![7u8; big_len]);
                    }
                    m
                })
                .collect();
            log.borrow_mut().append(msgs, 0);
            flush(&log).await.unwrap();
            sync(&log).await.unwrap();
            // A reader in order up to the large record fills the cache with earlier blocks.
            let mut hint = DiskHint::default();
            for seq in 0..big {
                match read_through(&log, seq, hint).await {
                    Read::Msg(s, h) => {
                        assert_eq!(s.seq, seq);
                        hint = h;
                    }
                    _ => panic!("seq {seq} not read"),
                }
            }
            for seq in [big, big + 1, big - 1, big + 2] {
                match read_through(&log, seq, DiskHint::default()).await {
                    Read::Msg(s, _) => {
                        assert_eq!(s.seq, seq);
                        assert_eq!(
                            s.msg.body.len(),
                            if seq == big {
                                big_len
                            } else {
                                message(seq).body.len()
                            }
                        );
                    }
                    _ => panic!("seq {seq} not read"),
                }
            }
        });
    }

    /// A block that cannot be read (its reads failed BAD_AFTER times) loses the records that
    /// touch it, and only those: reading goes on at the first record after it.
    #[test]
    fn an_unreadable_block_loses_only_its_records() {
        with_dir("unreadable", |dir| async move {
            let total = 600;
            let (log, starts) = written_log(&dir, total).await;
            let base = log.borrow().segments[0].base;
            for _ in 0..blocks::BAD_AFTER {
                log.borrow().blocks.borrow_mut().failed((base, 1));
            }
            let (lost_from, lost_to) = (BLOCK, 2 * BLOCK);
            let expected: Vec<u64> = (0..total)
                .filter(|&i| {
                    let (start, end) = (starts[i as usize], starts[i as usize + 1]);
                    end <= lost_from || start >= lost_to
                })
                .collect();
            assert!(expected.len() < total as usize - 50, "block 1 held records");
            assert!(expected.contains(&(segment::INDEX_EVERY - 1)));
            assert_eq!(read_all(&log).await, expected);
        });
    }

    /// Writes a version-1 segment of `seqs` (messages as `message`) into `dir`.
    fn write_v1_segment(dir: &Path, seqs: std::ops::Range<u64>) {
        let mut out = Vec::new();
        segment::v1::encode_header(&mut out, seqs.start, 0);
        for seq in seqs.clone() {
            let s = Stored {
                seq,
                msg: message(seq),
                defer_until: 0,
            };
            segment::v1::encode_record(&mut out, &s);
        }
        std::fs::write(dir.join(format!("{:020}.seg", seqs.start)), out).unwrap();
    }

    /// A data directory of version-1 segments (written before version 2) opens and reads
    /// whole; new records go to a new version-2 segment, never appended to the version-1
    /// one, and everything reads back after a reopen. A newest version-1 segment holding only
    /// its header gives its name to the version-2 segment that follows.
    #[test]
    fn version_1_segments_are_read_and_new_records_go_to_version_2() {
        with_dir("v1-upgrade", |dir| async move {
            for (name, last_empty) in [("t", false), ("u", true)] {
                let topic = dir.join(name);
                std::fs::create_dir_all(&topic).unwrap();
                write_v1_segment(&topic, 0..50);
                write_v1_segment(&topic, 50..if last_empty { 50 } else { 100 });
                let head = if last_empty { 50 } else { 100 };
                let log = RefCell::new(TopicLog::open(name, topic.clone(), 0, 64 << 20).unwrap());
                assert_eq!(log.borrow().head(), head);
                assert_eq!(log.borrow().recovered_max_id(), Some(head));
                log.borrow_mut()
                    .append((head..head + 50).map(message).collect(), 0);
                flush(&log).await.unwrap();
                sync(&log).await.unwrap();
                trim_padding(&log).await.unwrap();
                let all: Vec<u64> = (0..head + 50).collect();
                assert_eq!(read_all(&log).await, all);
                drop(log);
                let newest = std::fs::read(topic.join(format!("{head:020}.seg"))).unwrap();
                assert_eq!(
                    segment::decode_header(&newest).map(|h| h.format),
                    Ok(Format::V2)
                );
                assert_eq!(
                    std::fs::read_dir(&topic).unwrap().count(),
                    if last_empty { 2 } else { 3 }
                );
                let reopened = RefCell::new(TopicLog::open(name, topic, 0, 64 << 20).unwrap());
                assert_eq!(reopened.borrow().head(), head + 50);
                assert_eq!(read_all(&reopened).await, all);
            }
        });
    }

    /// splitmix64: seeded randomness for the damage runs.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// The message stored at `seq` in the damage runs: bodies of 0 to 3,000 bytes that
    /// differ from seq to seq, some deferred.
    fn damage_run_message(seq: u64) -> Stored {
        let mut rng = Rng(seq * 7919 + 1);
        let len = rng.below(3000) as usize;
        let body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        Stored {
            seq,
            msg: Message {
                id: MessageId::from_u64(seq + 1),
                timestamp: seq as i64 * 1000,
                attempts: 0,
                body: Bytes::from(body),
            },
            defer_until: if seq.is_multiple_of(5) { seq as i64 } else { 0 },
        }
    }

    /// One segment file of the damage runs: its bytes, and each record's (seq, start, end).
    fn damage_run_segment(
        format: Format,
        seqs: std::ops::Range<u64>,
    ) -> (Vec<u8>, Vec<(u64, usize, usize)>) {
        let mut out = Vec::new();
        match format {
            Format::V1 => segment::v1::encode_header(&mut out, seqs.start, 0),
            Format::V2 => segment::encode_header(&mut out, seqs.start, 0),
        }
        let mut records = Vec::new();
        for seq in seqs {
            let start = out.len();
            let s = damage_run_message(seq);
            match format {
                Format::V1 => segment::v1::encode_record(&mut out, &s),
                Format::V2 => segment::encode_record(&mut out, &s),
            };
            records.push((seq, start, out.len()));
        }
        (out, records)
    }

    /// Opens the log in `dir` (as at start-up) and reads it all from disk, checking every
    /// message delivered against what was stored: the seqs delivered.
    fn recover_and_read(dir: &Path, seed: u64) -> Vec<u64> {
        read_blocking_all(
            &TopicLog::open("t", dir.to_path_buf(), 0, 64 << 20).unwrap(),
            seed,
        )
    }

    /// Reads all of `log` from disk, checking every message delivered against what was
    /// stored: the seqs delivered.
    fn read_blocking_all(log: &TopicLog, seed: u64) -> Vec<u64> {
        let mut delivered = Vec::new();
        let mut seq = 0;
        loop {
            match log.read_blocking(seq) {
                Read::Msg(s, _) => {
                    assert_eq!(s, damage_run_message(s.seq), "seed {seed}: garbled record");
                    delivered.push(s.seq);
                    seq = s.seq + 1;
                }
                Read::Skip(n) => {
                    assert!(n > seq, "seed {seed}: skip backwards");
                    seq = n;
                }
                Read::End => return delivered,
                Read::Wait => panic!("seed {seed}: blocking read waits"),
            }
        }
    }

    /// Random damage as a disk does it, over many seeds: one byte anywhere in one segment
    /// (header, frame, length, checksums, body, padding) in most runs, several bytes or a
    /// burst in the others, in data directories mixing version-1 and version-2 segments, the
    /// newest ending with or without direct-write padding. Reading in a log opened before the
    /// damage (damage while running), recovery and reading (a start), and a second start
    /// after it must each deliver every record no damaged byte touches, each exactly as
    /// stored: messages lost <= records damaged, no garbled body, and start-up deletes no
    /// undamaged record.
    #[test]
    fn random_damage_loses_only_the_damaged_records() {
        let base =
            std::env::temp_dir().join(format!("log-test-{}-damage-runs", std::process::id()));
        let (mut total_damaged, mut total_lost) = (0, 0);
        for seed in 0..400u64 {
            let mut rng = Rng(seed);
            let dir = base.join(format!("{seed}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            // Three segments of 20 to 80 records each.
            let mut files = Vec::new();
            let mut next = 0;
            for i in 0..3 {
                let n = 20 + rng.below(60);
                let format = if rng.below(3) == 0 || i == 2 && rng.below(2) == 0 {
                    Format::V1
                } else {
                    Format::V2
                };
                let (mut bytes, records) = damage_run_segment(format, next..next + n);
                if i == 2 && rng.below(2) == 0 {
                    bytes.resize(bytes.len().next_multiple_of(4096), 0);
                }
                files.push((dir.join(format!("{next:020}.seg")), bytes, records, format));
                next += n;
            }
            for (path, bytes, ..) in &files {
                std::fs::write(path, bytes).unwrap();
            }
            let running = TopicLog::open("t", dir.clone(), 0, 64 << 20).unwrap();
            // The damage: bytes changed, and the records they touch.
            let hits: Vec<(usize, usize)> = match rng.below(10) {
                0..=6 => vec![(rng.below(3) as usize, 1)],
                7 | 8 => (0..2 + rng.below(6))
                    .map(|_| (rng.below(3) as usize, 1))
                    .collect(),
                _ => vec![(rng.below(3) as usize, 2 + rng.below(40) as usize)],
            };
            let mut damaged = std::collections::BTreeSet::new();
            for (file, burst) in hits {
                let (_, bytes, records, format) = &mut files[file];
                // Anywhere, or where a byte does the most harm: the header, or a record's
                // frame (its length, seq, checksums).
                let at = match rng.below(4) {
                    0 => rng.below(format.header_len() as u64) as usize,
                    1 => {
                        let (_, start, _) = records[rng.below(records.len() as u64) as usize];
                        start + rng.below(format.probe_len() as u64) as usize
                    }
                    _ => rng.below(bytes.len() as u64) as usize,
                };
                let to = (at + burst).min(bytes.len());
                for b in bytes[at..to].iter_mut() {
                    *b ^= 1 + rng.below(255) as u8;
                }
                for &(seq, start, end) in records.iter() {
                    if start < (at + burst) && at < end {
                        damaged.insert(seq);
                    }
                }
            }
            for (path, bytes, ..) in &files {
                std::fs::write(path, bytes).unwrap();
            }
            let while_running = read_blocking_all(&running, seed);
            drop(running);
            let lost_running: Vec<u64> = (0..next).filter(|s| !while_running.contains(s)).collect();
            assert!(
                lost_running.iter().all(|s| damaged.contains(s)),
                "seed {seed}: lost {lost_running:?} while running, damaged {damaged:?}"
            );
            let first = recover_and_read(&dir, seed);
            let lost: Vec<u64> = (0..next).filter(|s| !first.contains(s)).collect();
            assert!(
                lost.iter().all(|s| damaged.contains(s)),
                "seed {seed}: lost {lost:?}, damaged {damaged:?}"
            );
            let second = recover_and_read(&dir, seed);
            assert_eq!(first, second, "seed {seed}: the second start differs");
            let _ = std::fs::remove_dir_all(&dir);
            total_damaged += damaged.len();
            total_lost += lost.len();
        }
        let _ = std::fs::remove_dir_all(&base);
        // The runs did damage records (and recovery lost those).
        assert!(
            total_damaged > 300 && total_lost > 300,
            "{total_damaged} damaged, {total_lost} lost"
        );
    }

    #[test]
    fn direct_io_round_trip() {
        round_trip(true);
    }

    #[test]
    fn buffered_fallback_round_trip() {
        round_trip(false);
    }
}

//! A topic's log: the sequence of every message published to the topic, written once whatever
//! the number of channels, in segment files under `<data-path>/<topic>/`, with the newest
//! messages also kept in memory.
//!
//! - `append` gives each message the next sequence number and keeps it in the in-memory window.
//!   It never waits.
//! - The shard's flusher first has [`TopicLog::plan`] place the records appended since its
//!   last round in the pending chunks, leaving out those every channel has finished (below the
//!   topic's floor), then ([`flush`], [`sync`]) writes them with direct I/O through the
//!   shard's io_uring (whole aligned blocks, each record encoded from the window straight into
//!   the write's buffer, see [`flush`]), and fsyncs by the sync policy.
//! - Channels read by sequence number ([`TopicLog::read`]): from the window when the message
//!   is recent or not written yet, else from the log's block cache ([`super::blocks`]), with a
//!   per-reader hint so sequential reading never searches. A block not cached yet makes the
//!   read return [`Read::Wait`]; the shard's fetcher ([`fetch`]) reads it and wakes the
//!   channels. Bodies read from disk are slices of their block.
//! - Memory bound: the window holds the newest `mem_limit` messages plus those not yet
//!   written, less what is written and every channel has read past
//!   ([`TopicLog::forget_read`]); everything older is read back from disk. An ephemeral
//!   topic has no files: what falls out of its window is gone.
//! - Segments are deleted once every channel's floor has passed them and the topic's retention
//!   (time, bytes) does not keep them ([`TopicLog::release_below`], [`Retention`]).
//! - Start-up recovery ([`TopicLog::open`]) scans every segment through a memory mapping.
//! - The log lists its DPUB records (seq and due time) from its start on, for /stats: a channel
//!   counts those it has not taken yet as deferred ([`TopicLog::deferred_between`]).
//! - A deleted log ([`TopicLog::destroy`]) writes nothing more, not even a flush under way.
//!
//! This file holds the log's state ([`TopicLog`], its segments, the chunks waiting to be
//! written) and its small accessors; each
//! job on that state has a file of its own, all of them `impl TopicLog` blocks or functions
//! over a `RefCell<TopicLog>`:
//!
//! | file | owns |
//! | --- | --- |
//! | `window.rs` | `append`, the in-memory window and its eviction, the list of DPUB records |
//! | `plan.rs` | `plan`: placing records in pending chunks (offsets, index points), rolling segments |
//! | `write.rs` | `flush`, `sync`, `trim_padding`: the direct-I/O writes of the pending chunks |
//! | `read.rs` | `read`: by seq from the window or the block cache, hints, damage met while serving |
//! | `fetch.rs` | `fetch`: reading the blocks readers wait for; `read_blocking` at start-up |
//! | `recovery.rs` | `open`: scanning the segments at start-up, cutting torn tails |
//! | `retention.rs` | `release_below`, `destroy`: dropping what nobody wants nor retention keeps, the trash |
//! | `seek.rs` | replay: how far back the history goes, the first record at or after a time, reopening the start |
//! | `replica.rs` | a replicated topic's log as `replication::replica::ReplicaLog`: records, epoch history, sync requests |
//! | `truncate.rs` | `cut_to`: cutting a replicated log's end at run time, durably |
//!
//! Invariants: the window holds consecutive seqs ending at `head`, and in a persistent log
//! every seq from `written_end` on (until the log is destroyed); `synced_end <= written_end <=
//! planned_end <= head`; segments are sorted by base, and records are appended only to the
//! newest one, and only when it has the current format.

mod fetch;
#[cfg(test)]
mod log_tests;
mod plan;
mod read;
mod recovery;
pub mod replica;
#[cfg(test)]
mod replica_tests;
mod retention;
#[cfg(test)]
mod retention_tests;
mod seek;
#[cfg(test)]
mod seek_tests;
mod truncate;
mod window;
mod write;

pub use fetch::fetch;
pub use plan::MAX_WRITE;
pub use replica::ReplicaStore;
pub use retention::Retention;
pub use seek::{seek_time, History, Seek};
pub use write::{flush, sync, trim_padding};

use super::blocks::Blocks;
use super::file::SegFile;
use super::segment::{Format, Stored, HEADER_LEN};
use super::StorageError;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

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
    /// Timestamp (ns) of its first message (0 when unknown: nothing readable in it).
    first_ts: i64,
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

/// Bytes planned for `offset` of the segment starting at `base`, not written yet: `head`
/// (bytes encoded already: a segment header, or what a short write left of a chunk), then the
/// records of `seqs`, which stay in the window and are encoded straight into the write's
/// buffer when the chunk is written (see `write.rs`): a record is copied once on its way to
/// the disk, and no second copy of what is unwritten waits in memory.
struct Chunk {
    base: u64,
    offset: u64,
    head: Vec<u8>,
    /// Ascending, disjoint ranges of seqs whose records follow `head`.
    seqs: Vec<std::ops::Range<u64>>,
    /// The chunk's length in bytes: `head` and the records of `seqs`.
    len: usize,
    /// One past the last seq in the chunk.
    end_seq: u64,
}

/// What [`TopicLog::plan`] did with the records appended since the last plan.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Planned for writing.
    pub kept: u64,
    /// Finished by every channel already: not written.
    pub skipped: u64,
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
    /// Every channel had read below this at the flusher's last round: written records below
    /// it leave the window ([`TopicLog::forget_read`]). 0 until then, and in an ephemeral log.
    read_past: u64,
    pending: Vec<Chunk>,
    /// Bytes of the chunks a flush has taken from `pending` and not written yet.
    writing: usize,
    /// Seqs below this are planned in `pending` (or skipped, or written); the window holds the
    /// records from here to `head`, not planned yet ([`TopicLog::plan`]).
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
    /// How much history is kept beyond what channels need (see `retention.rs`).
    retention: Retention,
    /// A replicated topic's log (`replica.rs`): every record is written, finished by every
    /// channel or not (followers and a future leader need them). Off by default.
    replicated: bool,
    /// A replica asked for an fsync of what is appended; the flusher serves it.
    sync_requested: bool,
    /// An fsync completed since the replica's owner last asked ([`TopicLog::take_synced`]).
    synced_unreported: bool,
    /// Truncations so far: a block read issued before one is not trusted (`fetch.rs`).
    cuts: u64,
    /// Recovery cut a torn tail (not write padding) off the newest segment at open.
    torn_at_open: bool,
}

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
            read_past: 0,
            pending: Vec::new(),
            writing: 0,
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
            retention: Retention::default(),
            replicated: false,
            sync_requested: false,
            synced_unreported: false,
            cuts: 0,
            torn_at_open: false,
        }
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

    /// The highest number behind a message ID in the segments found at open, and in the
    /// records a replicated log took from its leader since.
    pub fn recovered_max_id(&self) -> Option<u64> {
        self.max_id
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    fn window_start(&self) -> u64 {
        self.head - self.window.len() as u64
    }

    /// The record of `seq` if the window holds it.
    fn in_window(&self, seq: u64) -> Option<&Stored> {
        let i = seq.checked_sub(self.window_start())?;
        self.window.get(usize::try_from(i).ok()?)
    }

    /// Bytes of records appended but not written yet (those of a write under way too).
    pub fn unwritten_bytes(&self) -> usize {
        self.unplanned_bytes + self.pending.iter().map(|c| c.len).sum::<usize>() + self.writing
    }

    /// Seqs below this are planned for writing, written, or left out ([`TopicLog::plan`]).
    pub fn planned_end(&self) -> u64 {
        self.planned_end
    }

    /// Seqs below this are in the files.
    pub fn written_end(&self) -> u64 {
        self.written_end
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

    /// [`TopicLog::segment`] for a write or read that needs it: gone is an error.
    fn live_segment(&self, base: u64) -> Result<&Segment, StorageError> {
        self.segment(base)
            .ok_or_else(|| StorageError::SegmentVanished {
                topic: self.name.clone(),
                base,
            })
    }

    /// Bytes of segment blocks cached for readers.
    pub fn cached_bytes(&self) -> u64 {
        self.blocks.borrow().cached_bytes() as u64
    }

    /// Drops the cached blocks that hold only records below `readers_from` (the lowest seq
    /// any channel reads next): they are read again only if a channel goes back for them.
    /// The position of `readers_from` comes from its segment's sparse index, at or before
    /// the record, so no block a reader still needs is dropped.
    pub fn drop_passed_blocks(&self, readers_from: u64) {
        if self.dir.is_none() {
            return;
        }
        let at = self.segments.partition_point(|s| s.base <= readers_from);
        let Some(seg) = at.checked_sub(1).and_then(|i| self.segments.get(i)) else {
            return;
        };
        let i = seg.index.partition_point(|(s, _)| *s <= readers_from);
        let off = i.checked_sub(1).map_or(0, |i| seg.index[i].1 as u64);
        self.blocks.borrow_mut().drop_passed(seg.base, off);
    }

    /// Drops cached blocks nobody read since the last call; whether any are left.
    pub fn age_blocks(&self) -> bool {
        self.blocks.borrow_mut().age()
    }

    /// Whether readers wait for blocks the fetcher has not read yet.
    pub fn has_wanted_blocks(&self) -> bool {
        self.blocks.borrow().has_wanted()
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

//! A topic's log: the sequence of every message published to the topic, written once whatever
//! the number of channels, in segment files under `<data-path>/<topic>/`, with the newest
//! messages also kept in memory.
//!
//! - `append` gives each message the next sequence number, keeps it in the in-memory window
//!   and encodes its record into the pending write buffer. It never waits.
//! - The shard's flusher ([`flush`], [`sync`]) writes pending records with one `write_at` per
//!   segment chunk through the shard's io_uring, and fsyncs by the sync policy.
//! - Channels read by sequence number ([`TopicLog::read`]): from the window when the message
//!   is recent or not written yet, else from the segment, memory-mapped, with a per-reader
//!   hint so sequential reading never searches. Bodies read from disk are slices of the mapping
//!   (no copy, and not anonymous memory).
//! - Memory bound: the window holds the newest `mem_limit` messages plus those not yet
//!   written; everything older is read back from disk. An ephemeral topic has no files: what
//!   falls out of its window is gone.
//! - Segments are deleted once every channel's floor has passed them ([`TopicLog::release_below`]).

use super::segment::{self, Parsed, Stored, HEADER_LEN};
use bytes::Bytes;
use glommio::io::{BufferedFile, OpenOptions};
use protocol::Message;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;
use tracing::{info, warn};

/// One segment file.
struct Segment {
    base: u64,
    /// One past the last seq written to it (or planned: pending chunks count).
    end: u64,
    path: PathBuf,
    /// Bytes of the file planned so far (written + pending).
    planned_len: u64,
    /// Bytes known to be in the file.
    written_len: u64,
    file: Option<Rc<BufferedFile>>,
    /// A mapping of the file and the length it covers.
    map: RefCell<Option<Bytes>>,
    /// Sparse (seq, offset) index.
    index: Vec<(u64, usize)>,
    records: u64,
}

/// Encoded records waiting to be written at `offset` of the segment starting at `base`.
struct Chunk {
    base: u64,
    offset: u64,
    bytes: Vec<u8>,
    /// One past the last seq in the chunk.
    end_seq: u64,
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
    /// Seqs below this are in the files.
    written_end: u64,
    /// Seqs below this are fsynced.
    pub synced_end: u64,
    pub unsynced: u64,
    pub last_sync: Instant,
    max_bytes_per_file: u64,
    max_payload: usize,
    /// Segments written since the last fsync.
    dirty: Vec<Rc<BufferedFile>>,
    /// The last write or sync error, until one succeeds.
    pub failed: Option<String>,
    pub bytes_written: u64,
}

impl TopicLog {
    /// A log that never touches disk (`#ephemeral` topics).
    pub fn in_memory(name: &str, mem_limit: u64) -> TopicLog {
        TopicLog::new(name, None, mem_limit, u64::MAX, usize::MAX)
    }

    fn new(
        name: &str,
        dir: Option<PathBuf>,
        mem_limit: u64,
        max_bytes_per_file: u64,
        max_payload: usize,
    ) -> TopicLog {
        TopicLog {
            name: name.to_string(),
            dir,
            segments: Vec::new(),
            head: 0,
            start: 0,
            window: VecDeque::new(),
            mem_limit: mem_limit as usize,
            pending: Vec::new(),
            written_end: 0,
            synced_end: 0,
            unsynced: 0,
            last_sync: Instant::now(),
            max_bytes_per_file: max_bytes_per_file.max(HEADER_LEN as u64 + 1),
            max_payload,
            dirty: Vec::new(),
            failed: None,
            bytes_written: 0,
        }
    }

    /// Opens (recovering) or creates the log in `dir`. Runs at start-up, before the shard
    /// serves anything, so it uses blocking file I/O. Cuts a torn tail, skips corrupt records,
    /// and logs both.
    pub fn open(
        name: &str,
        dir: PathBuf,
        mem_limit: u64,
        max_bytes_per_file: u64,
        max_payload: usize,
    ) -> std::io::Result<TopicLog> {
        std::fs::create_dir_all(&dir)?;
        let mut log = TopicLog::new(
            name,
            Some(dir.clone()),
            mem_limit,
            max_bytes_per_file,
            max_payload,
        );
        let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let p = e.path();
                let stem = p.file_name()?.to_str()?.strip_suffix(".seg")?.to_string();
                Some((stem.parse::<u64>().ok()?, p))
            })
            .collect();
        files.sort();
        let count = files.len();
        for (i, (base, path)) in files.into_iter().enumerate() {
            let last = i + 1 == count;
            match recover_segment(name, base, &path, last, max_payload)? {
                Some(seg) => {
                    log.head = log.head.max(seg.end);
                    log.segments.push(seg);
                }
                None => continue,
            }
        }
        if let Some(first) = log.segments.first() {
            log.start = first.base;
        }
        log.written_end = log.head;
        log.synced_end = log.head;
        Ok(log)
    }

    pub fn is_persistent(&self) -> bool {
        self.dir.is_some()
    }

    pub fn head(&self) -> u64 {
        self.head
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    fn window_start(&self) -> u64 {
        self.head - self.window.len() as u64
    }

    /// Messages of this log that are only on disk, from `from` on.
    pub fn on_disk_from(&self, from: u64) -> u64 {
        self.window_start().saturating_sub(from.max(self.start))
    }

    /// Appends messages; returns the seq after the last one.
    pub fn append(&mut self, msgs: Vec<Message>, defer_until: i64) -> u64 {
        for msg in msgs {
            let stored = Stored {
                seq: self.head,
                msg,
                defer_until,
            };
            self.head += 1;
            if self.dir.is_some() {
                self.encode(&stored);
            }
            self.window.push_back(stored);
        }
        self.evict();
        self.head
    }

    fn encode(&mut self, s: &Stored) {
        let rec_len = (segment::FRAME_LEN + segment::PAYLOAD_FIXED + s.msg.body.len()) as u64;
        let needs_new = match self.segments.last() {
            None => true,
            Some(seg) => seg.records > 0 && seg.planned_len + rec_len > self.max_bytes_per_file,
        };
        if needs_new {
            self.roll(s.seq);
        }
        let Some(seg) = self.segments.last_mut() else {
            return;
        };
        let offset = seg.planned_len;
        let same_chunk = matches!(self.pending.last(), Some(c) if c.base == seg.base);
        if !same_chunk {
            self.pending.push(Chunk {
                base: seg.base,
                offset,
                bytes: Vec::with_capacity(64 * 1024),
                end_seq: s.seq,
            });
        }
        if seg.records % segment::INDEX_EVERY == 0 {
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
        let mut header = Vec::with_capacity(64 * 1024);
        segment::encode_header(&mut header, base, crate::ids::now_nanos());
        self.segments.push(Segment {
            base,
            end: base,
            path,
            planned_len: HEADER_LEN as u64,
            written_len: 0,
            file: None,
            map: RefCell::new(None),
            index: Vec::new(),
            records: 0,
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
        }
    }

    /// Bytes of records appended but not written yet.
    pub fn unwritten_bytes(&self) -> usize {
        self.pending.iter().map(|c| c.bytes.len()).sum()
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
        let mut idx = self
            .segments
            .partition_point(|s| s.base <= seq)
            .checked_sub(1)?;
        let mut offset = if hint.valid && hint.seq == seq && self.segments[idx].base == hint.base {
            Some(hint.offset)
        } else {
            None
        };
        loop {
            let seg = self.segments.get(idx)?;
            // Borrowed, not cloned: a clone per read is an atomic on the mapping's shared
            // count, and each delivered body already takes one.
            seg.ensure_mapped()?;
            let map = seg.map.borrow();
            let data = map.as_ref()?;
            let mut off = match offset.take() {
                Some(o) => o,
                None => {
                    let i = seg.index.partition_point(|(s, _)| *s <= seq);
                    i.checked_sub(1)
                        .map(|i| seg.index[i].1)
                        .unwrap_or(HEADER_LEN)
                }
            };
            let limit = (seg.written_len as usize).min(data.len());
            let mut last_seq = None;
            while off < limit {
                match segment::parse_within(data, limit, off, self.max_payload) {
                    Parsed::Record(s, next) => {
                        if s.seq >= seq {
                            let hint = DiskHint {
                                seq: s.seq + 1,
                                base: seg.base,
                                offset: next,
                                valid: true,
                            };
                            return Some(Read::Msg(s, hint));
                        }
                        last_seq = Some(s.seq);
                        off = next;
                    }
                    Parsed::Incomplete => break,
                    Parsed::Corrupt => {
                        warn!(topic = %self.name, segment = %seg.path.display(), offset = off, "corrupt record skipped while reading");
                        match segment::resync(&data.slice(..limit), off, last_seq, self.max_payload)
                        {
                            Some(n) => off = n,
                            None => break,
                        }
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

    /// Deletes segments entirely below `floor` (every channel has passed them).
    pub fn release_below(&mut self, floor: u64) {
        let floor = floor.min(self.written_end);
        self.start = self.start.max(floor.min(self.head));
        while self.segments.len() > 1 && self.segments[0].end <= floor {
            let seg = self.segments.remove(0);
            match std::fs::remove_file(&seg.path) {
                Ok(()) => {
                    info!(topic = %self.name, segment = %seg.path.display(), "segment deleted: every channel has passed it")
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

    /// Drops everything (topic deleted): removes the files.
    pub fn destroy(&mut self) {
        self.pending.clear();
        self.window.clear();
        self.segments.clear();
        if let Some(dir) = &self.dir {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                warn!(topic = %self.name, "cannot remove {}: {e}", dir.display());
            }
        }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

impl Segment {
    /// Makes `map` hold the segment's bytes as one shared buffer, remapped when the file grew.
    fn ensure_mapped(&self) -> Option<()> {
        let mut map = self.map.borrow_mut();
        if let Some(m) = map.as_ref() {
            if m.len() as u64 >= self.written_len {
                return Some(());
            }
        }
        let file = std::fs::File::open(&self.path).ok()?;
        // SAFETY: segment files are only appended to (never truncated or rewritten) while the
        // broker runs, and reads stay below the written length, so the mapping stays valid.
        let mmap = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        *map = Some(Bytes::from_owner(LoneMap(mmap)));
        Some(())
    }
}

/// A mapping as the owner of the `Bytes` every body read from it shares. Aligned and padded to
/// two cache lines so that the shared count `Bytes` keeps next to it never shares a line with
/// another allocation: each delivered body clones and drops that count, and a neighbour that
/// another thread writes (a mail batch freed by another shard, say) made every one of those
/// atomics a cache miss (found with perf annotate: 11-18% of a drain's CPU on the `lock xadd`).
#[repr(align(128))]
struct LoneMap(memmap2::Mmap);

impl AsRef<[u8]> for LoneMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

fn recover_segment(
    topic: &str,
    base: u64,
    path: &Path,
    last: bool,
    max_payload: usize,
) -> std::io::Result<Option<Segment>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len < HEADER_LEN as u64 {
        warn!(topic, segment = %path.display(), len, "segment shorter than its header; removed");
        drop(file);
        std::fs::remove_file(path)?;
        return Ok(None);
    }
    // SAFETY: nothing else writes the file during recovery.
    let mmap = unsafe { memmap2::Mmap::map(&file) }?;
    let data = Bytes::from_owner(mmap);
    match segment::decode_header(&data) {
        Ok(b) if b == base => {}
        Ok(b) => {
            warn!(topic, segment = %path.display(), header_base = b, "segment header names another base seq; using the file name")
        }
        Err(e) => {
            let aside = path.with_extension("corrupt");
            warn!(topic, segment = %path.display(), "unreadable segment header ({e}); moved aside to {}", aside.display());
            std::fs::rename(path, &aside)?;
            return Ok(None);
        }
    }
    let report = segment::scan(&data, max_payload);
    for (off, n) in &report.skipped {
        warn!(topic, segment = %path.display(), offset = off, bytes = n, "corrupt data skipped; its records will not be delivered");
    }
    let mut valid = report.valid_end as u64;
    if report.torn_tail > 0 {
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
    let end = report.last_seq.map(|s| s + 1).unwrap_or(base);
    Ok(Some(Segment {
        base,
        end,
        path: path.to_path_buf(),
        planned_len: valid,
        written_len: valid,
        file: None,
        map: RefCell::new(None),
        index: report.index,
        records: report.records,
    }))
}

/// Writes every pending chunk of `log`. On failure the unwritten part stays pending (written
/// again on the next flush) and the error is returned. Each `write_at` gets its own copy of the
/// bytes (io_uring owns the buffer while the write runs), so a failure never loses a chunk.
pub async fn flush(log: &RefCell<TopicLog>) -> Result<(), String> {
    let chunks = std::mem::take(&mut log.borrow_mut().pending);
    let mut chunks = VecDeque::from(chunks);
    while let Some(mut chunk) = chunks.pop_front() {
        let file = match segment_file(log, chunk.base).await {
            Ok(f) => f,
            Err(e) => {
                chunks.push_front(chunk);
                return Err(restore(log, chunks, e));
            }
        };
        let len = chunk.bytes.len();
        let mut written = 0usize;
        while written < len {
            let copy = chunk.bytes[written..].to_vec();
            match file.write_at(copy, chunk.offset + written as u64).await {
                Ok(0) => {
                    chunk.bytes.drain(..written);
                    chunk.offset += written as u64;
                    chunks.push_front(chunk);
                    return Err(restore(
                        log,
                        chunks,
                        "write wrote nothing (disk full?)".into(),
                    ));
                }
                Ok(n) => written += n,
                Err(e) => {
                    chunk.bytes.drain(..written);
                    chunk.offset += written as u64;
                    chunks.push_front(chunk);
                    return Err(restore(log, chunks, e.to_string()));
                }
            }
        }
        let mut l = log.borrow_mut();
        l.bytes_written += len as u64;
        if let Some(seg) = l.segments.iter_mut().find(|s| s.base == chunk.base) {
            seg.written_len = seg.written_len.max(chunk.offset + len as u64);
        }
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

/// Puts unwritten chunks back in front of anything appended meanwhile, and records the error.
fn restore(log: &RefCell<TopicLog>, chunks: VecDeque<Chunk>, e: String) -> String {
    let mut l = log.borrow_mut();
    let newer = std::mem::take(&mut l.pending);
    l.pending = chunks.into_iter().chain(newer).collect();
    l.failed = Some(e.clone());
    e
}

async fn segment_file(log: &RefCell<TopicLog>, base: u64) -> Result<Rc<BufferedFile>, String> {
    let path = {
        let l = log.borrow();
        let Some(seg) = l.segments.iter().find(|s| s.base == base) else {
            return Err(format!("segment {base} vanished"));
        };
        if let Some(f) = &seg.file {
            return Ok(f.clone());
        }
        seg.path.clone()
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .buffered_open(&path)
        .await
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    let file = Rc::new(file);
    let mut l = log.borrow_mut();
    // Only the newest segment keeps its file open; older ones are read through mappings.
    for seg in l.segments.iter_mut() {
        if seg.base != base {
            seg.file = None;
        }
    }
    if let Some(seg) = l.segments.iter_mut().find(|s| s.base == base) {
        seg.file = Some(file.clone());
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

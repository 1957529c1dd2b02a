//! A replicated topic's log as the replica drives it: [`ReplicatedLog`] implements
//! `replication::replica::ReplicaLog` over a [`TopicLog`] and the topic's [`ReplicaStore`]
//! (its epoch history and whether recovery damaged it). Nothing here exists for a topic that is
//! not replicated.
//!
//! - A record's `bytes` are the payload of its version-2 segment record (timestamp, defer
//!   until, message ID, body; see `segment.rs`) and its `crc` is the payload crc32 that record
//!   stores. The seq travels beside them, as the segment frame keeps it. A follower checks the
//!   crc, stores the message, and its flusher encodes the very same record (the encoding is
//!   canonical), so leader and follower files hold identical records.
//! - Appends: the leader's publishes go through [`ReplicatedLog::append_local`], a follower's
//!   records through `append`, both into the window like a publish; the flusher plans and
//!   writes them as usual. A replicated log leaves no record out of its files (`plan.rs`).
//! - The epoch history lives in `epochs.json` beside the segments, written atomically
//!   (temporary file, fsync, rename, fsync of the directory) whenever it changes, before the
//!   append that changes it returns: no record of an epoch reaches the disk before its entry.
//! - `truncate_to` cuts the log durably before it returns (`truncate.rs`), and `start_at`
//!   (or a truncation below the start) empties it to begin at a later seq; while a write is
//!   under way both answer [`LogError::NotReady`] and the replica asks again.
//! - `read` serves one epoch's records from the window or the block cache; blocks not cached
//!   are asked for and the read answers [`LogError::NotReady`] (the shard's fetcher reads them;
//!   the leader tries again on its next tick). A record that does not verify on disk is
//!   [`LogError::Damaged`], never returned.
//! - `request_sync` asks the flusher for an fsync; [`TopicLog::take_synced`] tells the owner
//!   that one completed (it then calls `Replica::on_synced`).
//!
//! Invariants: seqs run without a hole from the log's start to its end; the epoch history
//! covers exactly the records held (entries past the end are dropped at open, and by every
//! truncation); a log whose open cut records (a torn tail, damage, a hole) is `damaged`.

use super::TopicLog;
use crate::storage::segment::{Stored, Viewed, PAYLOAD_FIXED};
use crate::storage::StorageError;
use bytes::Bytes;
use protocol::{Message, MessageId};
use replication::ids::{Epoch, Seq};
use replication::replica::{Batch, EpochHistory, LogError, Record, ReplicaLog};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tracing::warn;

/// The epoch history's file in a topic's directory.
pub const EPOCHS_FILE: &str = "epochs.json";
const EPOCHS_TMP: &str = "epochs.json.tmp";

/// What a replicated topic keeps beside its log: the epoch history, and whether opening the
/// log cut records from it.
#[derive(Debug)]
pub struct ReplicaStore {
    epochs: EpochHistory,
    /// Where the history is written; `None` for a log without files.
    dir: Option<PathBuf>,
    damaged: bool,
}

/// A [`TopicLog`] and its [`ReplicaStore`], borrowed for a call of the replica.
pub struct ReplicatedLog<'a> {
    log: &'a mut TopicLog,
    store: &'a mut ReplicaStore,
}

impl ReplicaStore {
    /// Makes `log` a replicated log: loads its epoch history, and reconciles it with what
    /// recovery found (a hole or a torn tail cuts the log there; records no epoch covers are
    /// cut; entries past the end are dropped). Blocking I/O: at start-up, or when a topic
    /// becomes replicated.
    pub fn open(log: &mut TopicLog) -> Result<ReplicaStore, StorageError> {
        log.replicated = true;
        let dir = log.dir.clone();
        let mut store = ReplicaStore {
            epochs: EpochHistory::default(),
            dir: dir.clone(),
            damaged: log.torn_at_open,
        };
        let Some(dir) = dir else {
            return Ok(store);
        };
        if let Some(hole) = first_hole(log)? {
            warn!(topic = %log.name, seq = hole, "replicated log has a hole; cut there");
            store.damaged = true;
            log.cut_to(hole)?;
        }
        let loaded = load_epochs(&dir)?;
        let uncovered = match loaded.as_ref().and_then(|h| h.entries().first()) {
            Some(&(_, first)) => first > log.start,
            None => true,
        };
        if uncovered && log.head > log.start {
            warn!(topic = %log.name, "records without an epoch; cut");
            store.damaged = true;
            log.cut_to(log.start)?;
        }
        store.epochs = loaded.unwrap_or_default();
        let before = store.epochs.clone();
        store.epochs.truncate_to(log.head);
        if store.epochs != before {
            store.persist()?;
        }
        Ok(store)
    }

    /// The epoch history.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn epochs(&self) -> &EpochHistory {
        &self.epochs
    }

    /// Whether opening the log cut records from it (the replica is then created damaged).
    pub fn damaged(&self) -> bool {
        self.damaged
    }

    fn persist(&self) -> Result<(), StorageError> {
        match &self.dir {
            Some(dir) => write_epochs(dir, &self.epochs),
            None => Ok(()),
        }
    }
}

impl<'a> ReplicatedLog<'a> {
    /// `log` as a replica's log (`store` from [`ReplicaStore::open`] on it).
    pub fn new(log: &'a mut TopicLog, store: &'a mut ReplicaStore) -> ReplicatedLog<'a> {
        ReplicatedLog { log, store }
    }

    /// The leader's publish: appends `msgs` under `epoch` like [`TopicLog::append`]; returns
    /// the seq after the last one.
    pub fn append_local(
        &mut self,
        epoch: Epoch,
        msgs: Vec<Message>,
        defer_until: i64,
    ) -> Result<u64, LogError> {
        if msgs.is_empty() {
            return Ok(self.log.head);
        }
        self.note_epoch(epoch, self.log.head)?;
        Ok(self.log.append(msgs, defer_until))
    }

    /// Adds `(epoch, first)` to the history if `epoch` is new, durably.
    fn note_epoch(&mut self, epoch: Epoch, first: Seq) -> Result<(), LogError> {
        let mut next = self.store.epochs.clone();
        next.on_append(epoch, first)
            .map_err(|e| LogError::EpochRegression {
                last: e.last,
                appended: e.appended,
            })?;
        if next != self.store.epochs {
            let old = std::mem::replace(&mut self.store.epochs, next);
            if let Err(e) = self.store.persist() {
                self.store.epochs = old;
                return Err(LogError::Storage(e.to_string()));
            }
        }
        Ok(())
    }

    /// Empties the epoch history (the log holds no record), durably when it can: entries past
    /// the end are dropped at open too, so a failure here loses nothing.
    fn forget_epochs(&mut self) {
        if self.store.epochs.entries().is_empty() {
            return;
        }
        self.store.epochs = EpochHistory::default();
        if let Err(e) = self.store.persist() {
            warn!(topic = %self.log.name, "epoch history not rewritten after the log began again: {e}");
        }
    }

    /// The record at `seq` as shipped: from the window, else from the block cache.
    fn record_at(&self, seq: Seq, hint: &mut super::DiskHint) -> Result<Record, LogError> {
        if let Some(s) = self.log.in_window(seq) {
            return Ok(to_record(s));
        }
        match self.log.read(seq, *hint) {
            super::Read::Msg(s, h) if s.seq == seq => {
                *hint = h;
                Ok(to_record(&s))
            }
            // The reader passed damage: the record asked for did not verify.
            super::Read::Msg(..) | super::Read::Skip(_) | super::Read::End => {
                Err(LogError::Damaged { seq })
            }
            super::Read::Wait => Err(LogError::NotReady),
        }
    }
}

impl TopicLog {
    /// Whether an fsync completed since the last call (for a replicated log: the owner then
    /// tells the replica, `Replica::on_synced`).
    pub fn take_synced(&mut self) -> bool {
        std::mem::take(&mut self.synced_unreported)
    }

    /// Whether a replica asked for an fsync the flusher has not served yet.
    pub fn sync_requested(&self) -> bool {
        self.sync_requested
    }
}

impl ReplicaLog for ReplicatedLog<'_> {
    fn end(&self) -> Seq {
        self.log.head
    }

    fn start(&self) -> Seq {
        self.log.start
    }

    fn start_at(&mut self, start: Seq) -> Result<(), LogError> {
        match self.log.begin_at(start) {
            Ok(true) => {}
            Ok(false) => return Err(LogError::NotReady),
            Err(e) => return Err(LogError::Storage(e.to_string())),
        }
        self.forget_epochs();
        Ok(())
    }

    fn durable_end(&self) -> Seq {
        if self.log.dir.is_some() {
            self.log.synced_end
        } else {
            self.log.head
        }
    }

    fn epochs(&self) -> &EpochHistory {
        &self.store.epochs
    }

    fn append(&mut self, epoch: Epoch, records: &[Record]) -> Result<(), LogError> {
        let Some(first) = records.first() else {
            return Ok(());
        };
        let end = self.log.head;
        if records
            .iter()
            .enumerate()
            .any(|(i, r)| r.seq != end + i as Seq)
        {
            return Err(LogError::NotAtEnd {
                end,
                base: first.seq,
            });
        }
        // Every record is checked before any is stored: a batch is appended whole or not.
        let stored = records
            .iter()
            .map(from_record)
            .collect::<Result<Vec<_>, _>>()?;
        self.note_epoch(epoch, end)?;
        self.log.append_stored(stored);
        Ok(())
    }

    fn truncate_to(&mut self, end: Seq) -> Result<(), LogError> {
        if end >= self.log.head {
            return Ok(());
        }
        if end < self.log.start {
            return self.start_at(end);
        }
        match self.log.cut_to(end) {
            Ok(true) => {}
            Ok(false) => return Err(LogError::NotReady),
            Err(e) => return Err(LogError::Storage(e.to_string())),
        }
        let before = self.store.epochs.clone();
        self.store.epochs.truncate_to(end);
        if self.store.epochs != before {
            // Entries past the end are dropped at open too: a failure here loses nothing.
            if let Err(e) = self.store.persist() {
                warn!(topic = %self.log.name, "epoch history not rewritten after a truncation: {e}");
            }
        }
        Ok(())
    }

    fn read(&self, from: Seq, max_records: usize) -> Result<Batch, LogError> {
        let end = self.log.head;
        if from < self.log.start || from >= end {
            return Err(LogError::OutOfRange { from, end });
        }
        let epoch = self
            .store
            .epochs
            .epoch_of(from)
            .ok_or_else(|| LogError::Storage(format!("no epoch holds seq {from}")))?;
        let stop = self
            .store
            .epochs
            .start_after(epoch)
            .unwrap_or(end)
            .min(end)
            .min(from.saturating_add(max_records.max(1) as Seq));
        let mut hint = super::DiskHint::default();
        let mut records = Vec::with_capacity((stop - from).min(1024) as usize);
        for seq in from..stop {
            match self.record_at(seq, &mut hint) {
                Ok(r) => records.push(r),
                // What is at hand goes now; the next read meets the error at its start.
                Err(_) if !records.is_empty() => break,
                Err(e) => return Err(e),
            }
        }
        Ok(Batch { epoch, records })
    }

    fn request_sync(&mut self) {
        if self.log.dir.is_some() && self.log.synced_end < self.log.head {
            self.log.sync_requested = true;
        }
    }
}

impl TopicLog {
    /// Appends records that have their seqs already (a follower's), into the window like
    /// [`TopicLog::append`]; the first is at `head`.
    fn append_stored(&mut self, records: Vec<Stored>) {
        self.window.reserve(records.len());
        for stored in records {
            // A follower that leads later stamps IDs after every one it holds.
            self.max_id = self.max_id.max(stored.msg.id.to_u64());
            if stored.defer_until != 0 {
                self.deferred.push_back((stored.seq, stored.defer_until));
            }
            self.head = stored.seq + 1;
            if self.dir.is_some() {
                self.unplanned_bytes += super::plan::record_len(&stored) as usize;
            }
            self.window.push_back(stored);
        }
        self.evict();
    }
}

/// A stored message as a replicated record: the payload of its segment record, and that
/// payload's crc32.
pub(super) fn to_record(s: &Stored) -> Record {
    let mut bytes = Vec::with_capacity(PAYLOAD_FIXED + s.msg.body.len());
    bytes.extend_from_slice(&s.msg.timestamp.to_be_bytes());
    bytes.extend_from_slice(&s.defer_until.to_be_bytes());
    bytes.extend_from_slice(&s.msg.id.0);
    bytes.extend_from_slice(&s.msg.body);
    Record::new(s.seq, bytes)
}

/// A shipped record as a stored message, if its bytes match its crc and hold a payload.
fn from_record(r: &Record) -> Result<Stored, LogError> {
    if !r.intact() {
        return Err(LogError::Damaged { seq: r.seq });
    }
    let b = &r.bytes;
    let (Some(ts), Some(defer), Some(id)) = (
        b.get(..8).and_then(|x| x.try_into().ok()),
        b.get(8..16).and_then(|x| x.try_into().ok()),
        b.get(16..PAYLOAD_FIXED).and_then(MessageId::from_slice),
    ) else {
        return Err(LogError::Storage(format!(
            "record {}: {} bytes, shorter than a payload",
            r.seq,
            b.len()
        )));
    };
    Ok(Stored {
        seq: r.seq,
        msg: Message {
            id,
            timestamp: i64::from_be_bytes(ts),
            attempts: 0,
            body: Bytes::copy_from_slice(&b[PAYLOAD_FIXED..]),
        },
        defer_until: i64::from_be_bytes(defer),
    })
}

/// The first seq missing between the log's start and its head: a gap between segments, or
/// inside one (damage recovery skipped, a tail it did not cut). Reads the segments whose
/// record count does not match their seqs.
fn first_hole(log: &TopicLog) -> Result<Option<u64>, StorageError> {
    let mut expected = log.start;
    for seg in &log.segments {
        if seg.base != expected {
            return Ok(Some(expected));
        }
        if seg.records != seg.end - seg.base || !seg.skips.borrow().is_empty() {
            return Ok(Some(first_hole_in(seg)?));
        }
        expected = seg.end;
    }
    Ok((expected != log.head).then_some(expected))
}

/// The first seq of `seg` not found, in order and intact, by walking its records.
fn first_hole_in(seg: &super::Segment) -> Result<u64, StorageError> {
    let file = std::fs::File::open(&seg.path).map_err(|source| StorageError::Open {
        path: seg.path.clone(),
        source,
    })?;
    let mut data = vec![0u8; seg.written_len as usize];
    file.read_exact_at(&mut data, 0)
        .map_err(|source| StorageError::Read {
            path: seg.path.clone(),
            source,
        })?;
    let mut expected = seg.base;
    let mut off = seg.format.header_len();
    while off < data.len() {
        match seg.format.view(&data[off..]) {
            Viewed::Record(v, len) if v.seq == expected => {
                expected += 1;
                off += len;
            }
            _ => break,
        }
    }
    Ok(expected)
}

fn load_epochs(dir: &Path) -> Result<Option<EpochHistory>, StorageError> {
    let path = dir.join(EPOCHS_FILE);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StorageError::Read { path, source }),
    };
    let entries: Vec<(u64, u64)> = match serde_json::from_slice(&text) {
        Ok(e) => e,
        Err(e) => {
            warn!(file = %path.display(), "epoch history unreadable ({e}); the log is cut");
            return Ok(None);
        }
    };
    let mut h = EpochHistory::default();
    for (epoch, first) in entries {
        let prev = h.entries().last().copied();
        if prev.is_some_and(|(e, f)| e.0 >= epoch || f >= first)
            || h.on_append(Epoch(epoch), first).is_err()
        {
            warn!(file = %path.display(), "epoch history out of order; the log is cut");
            return Ok(None);
        }
    }
    Ok(Some(h))
}

/// Writes the history atomically: temporary file, fsync, rename, fsync of the directory.
fn write_epochs(dir: &Path, h: &EpochHistory) -> Result<(), StorageError> {
    let text: String = h
        .entries()
        .iter()
        .map(|&(e, s)| format!("[{},{}]", e.0, s))
        .collect::<Vec<_>>()
        .join(",");
    let text = format!("[{text}]\n").into_bytes();
    let tmp = dir.join(EPOCHS_TMP);
    let path = dir.join(EPOCHS_FILE);
    let write = || -> std::io::Result<()> {
        let f = std::fs::File::create(&tmp)?;
        f.write_all_at(&text, 0)?;
        f.sync_all()
    };
    write().map_err(|source| StorageError::Write {
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, &path).map_err(|source| StorageError::Rename {
        from: tmp.clone(),
        to: path.clone(),
        source,
    })?;
    crate::storage::sync_dir(dir)
}

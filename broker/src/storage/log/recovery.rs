//! Recovery at start-up: [`TopicLog::open`] scans every segment file of a topic (through a
//! memory mapping, with blocking I/O, before the shard serves anything), logs what it skips,
//! cuts a torn tail or the zero padding from the newest segment, and removes leftovers
//! (released segments not deleted yet, files that hold no record).
//!
//! Invariants: records are judged by the segment format alone, never by the flags; only bytes
//! after the last valid record of the newest segment are cut; the damage found is handed to
//! the readers (`Segment::skips`), who then pass it without searching.

use super::{Segment, Skip, TopicLog};
use crate::storage::segment::{self, Format, HEADER_LEN};
use crate::storage::StorageError;
use bytes::Bytes;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use tracing::{debug, info, warn};

impl TopicLog {
    /// Opens (recovering) or creates the log in `dir`. Runs at start-up, before the shard
    /// serves anything, so it uses blocking file I/O. Cuts a torn tail, skips corrupt records,
    /// and logs both. Records are judged by the segment format alone, never by the flags
    /// (`--max-msg-size` may have been larger when they were written).
    pub fn open(
        name: &str,
        dir: PathBuf,
        mem_limit: u64,
        max_bytes_per_file: u64,
    ) -> Result<TopicLog, StorageError> {
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir).map_err(|source| StorageError::Create {
                path: dir.clone(),
                source,
            })?;
            // The new directory's name, so a power loss cannot take the topic's files with it.
            if let Some(parent) = dir.parent() {
                crate::storage::sync_dir(parent)?;
            }
        }
        let mut log = TopicLog::new(name, Some(dir.clone()), mem_limit, max_bytes_per_file);
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        let entries = std::fs::read_dir(&dir).map_err(|source| StorageError::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries.filter_map(|e| e.ok()) {
            let p = entry.path();
            if crate::storage::is_trash(&p) {
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
                    log.torn_at_open |= found.torn;
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
        log.read_first_timestamps();
        Ok(log)
    }
}

impl TopicLog {
    /// Reads the timestamp of each segment's first message (what retention by time and /stats
    /// go by): one block a segment, with blocking I/O, at start-up.
    fn read_first_timestamps(&mut self) {
        let bases: Vec<u64> = self.segments.iter().map(|s| s.base).collect();
        for base in bases {
            let ts = match self.read_blocking(base) {
                super::Read::Msg(s, _) => s.msg.timestamp,
                _ => 0,
            };
            if let Some(seg) = self.segment_mut(base) {
                seg.first_ts = ts;
            }
        }
        // One block of each segment is not worth keeping cached (a backlog of many segments
        // would hold them all until the trimmer's rounds): readers fetch what they need.
        self.blocks.borrow_mut().clear();
    }
}

/// What recovery found in a segment file.
struct Recovered {
    segment: Segment,
    /// The highest number behind a message ID in it.
    max_id: Option<u64>,
    /// (seq, defer-until ns) of its records published with a deferral.
    deferred: Vec<(u64, i64)>,
    /// A torn tail (not write padding) was cut from it.
    torn: bool,
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
) -> Result<Option<Recovered>, StorageError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| StorageError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    let read_failed = |source| StorageError::Read {
        path: path.to_path_buf(),
        source,
    };
    let len = file.metadata().map_err(read_failed)?.len();
    if len < Format::V1.header_len().min(HEADER_LEN) as u64 {
        warn!(topic, segment = %path.display(), len, "segment shorter than its header; removed");
        drop(file);
        remove(path)?;
        return Ok(None);
    }
    // SAFETY: nothing else writes the file during recovery.
    let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(read_failed)?;
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
    let mut torn = false;
    let padding = report.torn_tail > 0 && data[report.valid_end..].iter().all(|&b| b == 0);
    if padding {
        // The zeros after the last direct write (a stop that was not clean): not damage.
        debug!(topic, segment = %path.display(), offset = report.valid_end, bytes = report.torn_tail, "write padding cut");
        drop(data);
        if last {
            cut(&file, path, valid)?;
        }
    } else if report.torn_tail > 0 {
        torn = last;
        if last {
            warn!(topic, segment = %path.display(), offset = report.valid_end, bytes = report.torn_tail, "torn tail cut");
            drop(data);
            cut(&file, path, valid)?;
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
        remove(path)?;
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
        first_ts: 0,
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
        torn,
    }))
}

/// Cuts segment file `file` (at `path`) to `len` bytes, durably.
fn cut(file: &std::fs::File, path: &Path, len: u64) -> Result<(), StorageError> {
    file.set_len(len).map_err(|source| StorageError::Truncate {
        path: path.to_path_buf(),
        source,
    })?;
    file.sync_all().map_err(|source| StorageError::Fsync {
        path: path.to_path_buf(),
        source,
    })
}

/// Removes a segment file recovery found of no use.
fn remove(path: &Path) -> Result<(), StorageError> {
    std::fs::remove_file(path).map_err(|source| StorageError::Remove {
        path: path.to_path_buf(),
        source,
    })
}

//! Cutting the end of a replicated log at run time: [`TopicLog::cut_to`] drops every record at
//! or after a seq from the window, the pending chunks and the segment files, durably, before
//! it returns; [`TopicLog::begin_at`] drops every record and makes the log begin, empty, at a
//! later seq (a follower whose leader released what it misses).
//!
//! Order on disk: the segment holding the cut is shortened and fsynced first, then the newer
//! segments are deleted and the directory fsynced. A crash between the two leaves newer
//! segments after a hole, which a replicated log's open cuts away (`replica.rs`); no order
//! brings a cut record back as part of the log.
//!
//! Invariants: it runs only on a replicated log (no record is left out of the files, so a
//! segment holds the seqs from its base on without a hole) and never while a write is under way
//! (the caller retries); it uses blocking file I/O, which is rare (a follower's truncation when
//! an epoch changes) and bounded (one shortened file, the newer files, two fsyncs); afterwards
//! `synced_end <= written_end <= planned_end <= head` hold again with `head` at the cut, and
//! no cached block, index point, damage record or DPUB entry refers to a cut record.

use super::plan::record_len;
use super::TopicLog;
use crate::storage::StorageError;
use std::os::unix::fs::FileExt;
use std::path::Path;

impl TopicLog {
    /// Cuts every record at or after `end` (nothing when `end >= head`). `Ok(false)`: a write
    /// is under way, nothing was cut; ask again once it is done.
    pub(super) fn cut_to(&mut self, end: u64) -> Result<bool, StorageError> {
        if end >= self.head {
            return Ok(true);
        }
        if self.writing > 0 {
            return Ok(false);
        }
        // Records below `keep_disk` stay in the files; those from it to `end` stay in the
        // window, unplanned, and are planned again by the next flush.
        let keep_disk = end.min(self.written_end);
        if self.dir.is_some() {
            self.cut_files(keep_disk)?;
        }
        self.pending.clear();
        while self.window.back().is_some_and(|s| s.seq >= end) {
            self.window.pop_back();
        }
        self.head = end;
        self.start = self.start.min(end);
        self.written_end = keep_disk;
        self.planned_end = if self.dir.is_some() { keep_disk } else { end };
        self.synced_end = self.synced_end.min(keep_disk);
        self.read_past = self.read_past.min(end);
        self.unplanned_bytes = if self.dir.is_some() {
            (keep_disk..end)
                .filter_map(|seq| self.in_window(seq))
                .map(|s| record_len(s) as usize)
                .sum()
        } else {
            0
        };
        while self.deferred.back().is_some_and(|&(seq, _)| seq >= end) {
            self.deferred.pop_back();
        }
        self.cuts += 1;
        Ok(true)
    }

    /// Drops every record, its files included (durably), and makes the log begin, empty, at
    /// `start`: the next record appended is `start`, in a new segment based there.
    /// `Ok(false)`: a write is under way, nothing was dropped; ask again once it is done.
    ///
    /// Until that segment is written, the files hold nothing: a restart opens an empty log at
    /// 0, which its leader begins again at its start.
    pub(super) fn begin_at(&mut self, start: u64) -> Result<bool, StorageError> {
        if self.writing > 0 {
            return Ok(false);
        }
        if self.dir.is_some() {
            self.cut_files(0)?;
        }
        self.pending.clear();
        self.window.clear();
        self.deferred.clear();
        self.head = start;
        self.start = start;
        self.written_end = start;
        self.planned_end = start;
        self.synced_end = start;
        self.read_past = start;
        self.unplanned_bytes = 0;
        self.unsynced = 0;
        self.cuts += 1;
        Ok(true)
    }

    /// Cuts the segment files so that they hold exactly the seqs below `keep` (at most
    /// `written_end`): every segment is forgotten as planned beyond what is written, the one
    /// holding `keep` is shortened to where its record starts, newer ones are deleted.
    fn cut_files(&mut self, keep: u64) -> Result<(), StorageError> {
        let kept = self.segments.partition_point(|s| s.base < keep);
        let newer: Vec<_> = self.segments.drain(kept..).collect();
        if let Some(seg) = self.segments.last_mut() {
            let off = disk_offset(seg, keep)?;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&seg.path)
                .map_err(|source| StorageError::Open {
                    path: seg.path.clone(),
                    source,
                })?;
            file.set_len(off).map_err(|source| StorageError::Truncate {
                path: seg.path.clone(),
                source,
            })?;
            file.sync_all().map_err(|source| StorageError::Fsync {
                path: seg.path.clone(),
                source,
            })?;
            seg.planned_len = off;
            seg.written_len = off;
            seg.end = keep;
            seg.records = keep - seg.base;
            seg.index.retain(|&(s, _)| s < keep);
            seg.skips.borrow_mut().retain(|&o, _| o < off);
            // The direct-I/O tail is read again from the file by the next write.
            seg.file = None;
            seg.tail = None;
            self.blocks.borrow_mut().drop_segment(seg.base);
        }
        let mut removed = false;
        for seg in &newer {
            self.blocks.borrow_mut().drop_segment(seg.base);
            self.read_files.borrow_mut().retain(|&b| b != seg.base);
            self.dirty.retain(|f| f.path() != seg.path);
            match std::fs::remove_file(&seg.path) {
                Ok(()) => removed = true,
                // A segment planned but never opened has no file.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(StorageError::Remove {
                        path: seg.path.clone(),
                        source,
                    })
                }
            }
        }
        if removed {
            if let Some(dir) = &self.dir {
                crate::storage::sync_dir(dir)?;
            }
        }
        Ok(())
    }
}

/// Where the record `seq` starts in `seg`'s file (its written length when `seq` is past its
/// last written record), found by reading frames from the last index point at or before it.
fn disk_offset(seg: &super::Segment, seq: u64) -> Result<u64, StorageError> {
    let probe = seg.format.probe_len();
    let mut off = seg
        .index
        .iter()
        .rev()
        .find(|&&(s, o)| s <= seq && (o as u64) < seg.written_len)
        .map_or(seg.format.header_len() as u64, |&(_, o)| o as u64);
    let file = open_read(&seg.path)?;
    let mut frame = vec![0u8; probe];
    while off + probe as u64 <= seg.written_len {
        file.read_exact_at(&mut frame, off)
            .map_err(|source| StorageError::Read {
                path: seg.path.clone(),
                source,
            })?;
        match seg.format.frame(&frame) {
            Some(f) if f.seq < seq && off + f.len as u64 <= seg.written_len => off += f.len as u64,
            // The record itself, or bytes that are not a whole record (what a failed write
            // left): the files end here.
            _ => return Ok(off),
        }
    }
    Ok(off.min(seg.written_len))
}

fn open_read(path: &Path) -> Result<std::fs::File, StorageError> {
    std::fs::File::open(path).map_err(|source| StorageError::Open {
        path: path.to_path_buf(),
        source,
    })
}

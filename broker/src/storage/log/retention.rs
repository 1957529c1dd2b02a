//! Retention of a topic's log: [`TopicLog::release_below`] moves the start past what every
//! channel has finished and releases the segments entirely below it that the topic's
//! [`Retention`] does not keep; [`TopicLog::destroy`] drops everything of a deleted topic.
//! Files are renamed into the trash (`~deleted`) at once and deleted off the shard's thread by
//! the caller ([`TopicLog::take_trash`], [`crate::storage::delete_in_background`]).
//!
//! The retention rule (`--retention-time`, `--retention-bytes`, or a topic's own through
//! `POST /topic/config`): with neither limit set (0, the default) a segment goes as soon as
//! every channel has passed it, as nsqd drops what every channel consumed. With a limit set, a
//! passed segment stays until a set limit says it may go: its newest message is older than the
//! time (read as the first timestamp of the segment after it), or the newer segments alone
//! hold the bytes. Segments go oldest first.
//!
//! Invariants: the newest segment is never released, nor a segment with records not written
//! or not passed (retention only ever keeps more); nothing is unlinked on the shard's thread.

use super::TopicLog;
use crate::storage::StorageError;
use std::path::PathBuf;
use tracing::{info, warn};

/// How much history a topic keeps beyond what its channels still need. 0 is "not set".
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Nanoseconds a passed segment's newest message is kept.
    pub time_ns: u64,
    /// Bytes of segments kept (the passed oldest goes once the newer ones hold this much).
    pub bytes: u64,
}

impl Retention {
    /// Whether any limit is set (else passed segments go at once, as without retention).
    pub fn is_set(&self) -> bool {
        self.time_ns > 0 || self.bytes > 0
    }

    /// Whether a passed segment may go: `newer_ts` is the first timestamp (ns) after it,
    /// `newer_bytes` the size of the segments after it, `now` in ns.
    pub fn lets_go(&self, newer_ts: i64, newer_bytes: u64, now: i64) -> bool {
        if !self.is_set() {
            return true;
        }
        let aged = self.time_ns > 0
            && now.saturating_sub(newer_ts) > i64::try_from(self.time_ns).unwrap_or(i64::MAX);
        let big = self.bytes > 0 && newer_bytes >= self.bytes;
        aged || big
    }
}

/// What a topic's files hold, for /stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// The first seq in the oldest segment (its base), and the timestamp (ns) of its first
    /// message; 0 for a log with no segment.
    pub oldest_offset: u64,
    pub oldest_timestamp: i64,
    /// Bytes of the segment files.
    pub bytes: u64,
}

impl TopicLog {
    /// Sets how much history the log keeps; applied at the next [`TopicLog::release_below`].
    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// What the files hold (see [`Retained`]).
    pub fn retained(&self) -> Retained {
        let Some(first) = self.segments.first() else {
            return Retained::default();
        };
        Retained {
            oldest_offset: first.base,
            oldest_timestamp: first.first_ts,
            bytes: self.segments.iter().map(|s| s.planned_len).sum(),
        }
    }

    /// Whether segments every channel has passed are kept by a retention time: the log must
    /// be looked at again later, even if nothing moves, for them to go.
    pub fn keeps_for_a_time(&self) -> bool {
        self.retention.time_ns > 0 && self.segments.len() > 1
    }

    /// Moves the start to `floor` (nothing below it is wanted, written or not) and deletes the
    /// written segments entirely below it (every channel has passed them) that the retention
    /// does not keep.
    pub fn release_below(&mut self, floor: u64) {
        self.release_below_at(floor, crate::ids::now_nanos());
    }

    /// [`TopicLog::release_below`] at time `now` (ns).
    pub(super) fn release_below_at(&mut self, floor: u64, now: i64) {
        // Nobody wants what is below `floor`, written or not (emptying a topic that has no
        // channel, or deleting its last one, right after a publish must drop that publish);
        // files go only as far as what is written.
        self.start = self.start.max(floor.min(self.head));
        self.forget_deferred_below_start();
        let floor = floor.min(self.written_end);
        let mut newer_bytes: u64 = self.segments.iter().map(|s| s.planned_len).sum();
        while self.segments.len() > 1 && self.segments[0].end <= floor {
            newer_bytes = newer_bytes.saturating_sub(self.segments[0].planned_len);
            if !self
                .retention
                .lets_go(self.segments[1].first_ts, newer_bytes, now)
            {
                break;
            }
            let seg = self.segments.remove(0);
            self.blocks.borrow_mut().drop_segment(seg.base);
            // Renaming is a quick metadata change; freeing the file's extents is a long journal
            // transaction, so that happens off the shard's thread
            // (docs/design/storage.md#the-log-storage).
            let doomed = crate::storage::trash_name(&seg.path);
            match std::fs::rename(&seg.path, &doomed) {
                Ok(()) => {
                    info!(topic = %self.name, segment = %seg.path.display(), "segment released: every channel has passed it, and retention does not keep it");
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
    /// durable once the data path is fsynced. Fails when the directory cannot be renamed: it
    /// would come back at the next start.
    pub fn destroy(&mut self) -> Result<(), StorageError> {
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
        let doomed = crate::storage::trash_name(dir);
        match std::fs::rename(dir, &doomed) {
            Ok(()) => {
                self.trash.push(doomed);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => {
                let e = StorageError::Rename {
                    from: dir.clone(),
                    to: doomed,
                    source,
                };
                warn!(topic = %self.name, "cannot remove the topic's files: {e}");
                Err(e)
            }
        }
    }

    /// What [`TopicLog::release_below`] and [`TopicLog::destroy`] left to delete.
    pub fn take_trash(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.trash)
    }
}

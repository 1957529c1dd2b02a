//! Retention of a topic's log: [`TopicLog::release_below`] moves the start past what every
//! channel has finished and releases the segments entirely below it; [`TopicLog::destroy`]
//! drops everything of a deleted topic. Files are renamed into the trash (`~deleted`) at once
//! and deleted off the shard's thread by the caller ([`TopicLog::take_trash`],
//! [`crate::storage::delete_in_background`]).
//!
//! Invariants: the newest segment is never released, nor a segment with records not written
//! or not passed; nothing is unlinked on the shard's thread.

use super::TopicLog;
use crate::storage::StorageError;
use std::path::PathBuf;
use tracing::{info, warn};

impl TopicLog {
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
            let doomed = crate::storage::trash_name(&seg.path);
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

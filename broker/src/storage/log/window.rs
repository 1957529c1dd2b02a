//! The in-memory window of a topic's log: [`TopicLog::append`] gives each message the next
//! seq and keeps it at the back; eviction drops from the front what is written and older than
//! the newest `mem_limit` messages (an ephemeral log, which writes nothing, drops what falls
//! out), and, after each write, what is written and every channel has read past
//! ([`TopicLog::forget_read`]: with no channel, or consumers that keep up, the window holds
//! little more than what is not written yet). Also the list of DPUB records (seq, due time)
//! from the log's start on, from which /stats counts a channel's deferred messages
//! ([`TopicLog::deferred_between`]).
//!
//! Invariants: appending never waits and does no I/O; a persistent log evicts nothing that is
//! not written; the DPUB list is in seq order and holds nothing below the log's start.

use super::plan::record_len;
use super::TopicLog;
use crate::storage::segment::Stored;
use protocol::Message;

/// The fewest records the window grows by.
const GROW_AT_LEAST: usize = 64;

/// Window capacity (records) below which [`TopicLog::shrink_window`] leaves it alone.
const SHRINK_ABOVE: usize = 1024;

impl TopicLog {
    /// Appends messages; returns the seq after the last one.
    pub fn append(&mut self, msgs: Vec<Message>, defer_until: i64) -> u64 {
        let (len, cap) = (self.window.len(), self.window.capacity());
        if len + msgs.len() > cap {
            // A quarter more, not double: the window's peak is what a fast publisher's
            // unwritten records reach, and doubling past it left up to half of it unused.
            self.window
                .reserve_exact(msgs.len().max(cap / 4).max(GROW_AT_LEAST));
        }
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

    /// Records `readers_from`, the lowest seq any channel reads next, and drops from memory
    /// what is written below it, now and as later writes complete (a channel that wants it
    /// after all, a new one or one rewound, reads the file). Only a persistent log: an
    /// ephemeral one's window is all there is.
    pub fn forget_read(&mut self, readers_from: u64) {
        if self.dir.is_none() {
            return;
        }
        self.read_past = readers_from;
        self.evict();
        self.drop_passed_blocks(readers_from);
    }

    /// Gives back the window's spare room once it holds far less than it has room for (a
    /// burst of unwritten records, or a backlog read by now). Called at checkpoints, not
    /// after every write, so a busy topic's window is not reallocated round after round.
    pub fn shrink_window(&mut self) {
        let (len, cap) = (self.window.len(), self.window.capacity());
        if cap > SHRINK_ABOVE && len < cap / 4 {
            self.window.shrink_to(len * 2);
        }
    }

    /// Drops from memory what is written and older than the newest `mem_limit`, or below
    /// what every channel had read at the last [`TopicLog::forget_read`].
    pub(super) fn evict(&mut self) {
        let persistent = self.dir.is_some();
        let read_past = if persistent { self.read_past } else { 0 };
        while let Some(front) = self.window.front() {
            if persistent && front.seq >= self.written_end {
                break;
            }
            if self.window.len() <= self.mem_limit && front.seq >= read_past {
                break;
            }
            self.window.pop_front();
        }
        if self.dir.is_none() {
            self.start = self.start.max(self.window_start());
            self.forget_deferred_below_start();
        }
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
    pub(super) fn forget_deferred_below_start(&mut self) {
        while self
            .deferred
            .front()
            .is_some_and(|&(seq, _)| seq < self.start)
        {
            self.deferred.pop_front();
        }
    }
}

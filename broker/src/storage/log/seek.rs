//! Finding a position in a topic's log for replay (`POST /channel/rewind`, `/channel/create`
//! with `from=`): how far back the log's history goes ([`TopicLog::history`]), the first
//! record published at or after a time ([`seek_time`]), and reopening the log's start for a
//! channel rewound below it ([`TopicLog::reopen_from`]).
//!
//! A time is found as the brief of the storage allows: the in-memory window by a binary search
//! of its timestamps; otherwise the segment whose first timestamp (which each segment keeps in
//! memory) is the last at or before the time, scanned record by record through the ordinary
//! read path ([`TopicLog::read`]: the block cache, the fetcher's [`super::fetch`] for a block
//! not cached), never a second reader.
//!
//! Invariants: nothing here moves a channel; [`TopicLog::history`] names only seqs a read can
//! still return (a record in the window or in a segment file), so a channel rewound there owes
//! what is on disk or in memory, and the flusher's floor (the lowest seq any channel owes)
//! keeps it there.

use super::{DiskHint, Read, TopicLog};
use std::cell::RefCell;

/// How far back a log's history goes: the first seq a read can still return, and the
/// timestamp (ns) of that record. A log with nothing readable: the head, and 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct History {
    pub oldest_offset: u64,
    pub oldest_timestamp: i64,
}

/// Where [`seek_time`] begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SeekStart {
    /// Found without reading the disk.
    At(u64),
    /// Scan the records from this seq on.
    Scan(u64),
    /// The time lies before the oldest record kept, and older records existed.
    BeforeHistory,
}

/// Records scanned between two yields to the shard's other tasks.
const SCAN_BATCH: usize = 256;

/// Fetches in a row without progress before [`seek_time`] gives up scanning.
const MAX_WAITS: usize = 16;

impl TopicLog {
    /// How far back the history goes (see [`History`]): the older of the first segment's base
    /// and the window's first record.
    pub fn history(&self) -> History {
        let seg = self.segments.first().map(|s| (s.base, s.first_ts));
        let win = self.window.front().map(|s| (s.seq, s.msg.timestamp));
        match (seg, win) {
            (Some(s), Some(w)) => {
                let (oldest_offset, oldest_timestamp) = if w.0 < s.0 { w } else { s };
                History {
                    oldest_offset,
                    oldest_timestamp,
                }
            }
            (Some((oldest_offset, oldest_timestamp)), None)
            | (None, Some((oldest_offset, oldest_timestamp))) => History {
                oldest_offset,
                oldest_timestamp,
            },
            (None, None) => History {
                oldest_offset: self.head,
                oldest_timestamp: 0,
            },
        }
    }

    /// Whether a rewind to `seq` stays within the history: from its oldest record to the
    /// head (the head itself: nothing to replay).
    pub fn holds(&self, seq: u64) -> bool {
        seq >= self.history().oldest_offset && seq <= self.head
    }

    /// A channel was rewound to `seq`: reads at or above it are served again (the start is
    /// where reading is refused; release moves it up again once every channel passed it).
    pub fn reopen_from(&mut self, seq: u64) {
        self.start = self.start.min(seq);
    }

    /// The timestamp (ns) of the record at `seq`, from memory: exact while it is in the
    /// window, else the first timestamp of the segment holding it (no later than the
    /// record's). `None` past the head or before everything kept. For /stats: never reads.
    pub fn timestamp_near(&self, seq: u64) -> Option<i64> {
        if seq >= self.head {
            return None;
        }
        let ws = self.window_start();
        if seq >= ws {
            return self
                .window
                .get((seq - ws) as usize)
                .map(|s| s.msg.timestamp);
        }
        let i = self.segments.partition_point(|s| s.base <= seq);
        let seg = self.segments.get(i.saturating_sub(1))?;
        Some(seg.first_ts)
    }

    pub(super) fn seek_start(&self, t: i64) -> SeekStart {
        let history = self.history();
        if let Some(front) = self.window.front() {
            // The window holds the newest records: a time at or after its first is in it.
            if front.msg.timestamp <= t {
                let i = self.window.partition_point(|s| s.msg.timestamp < t);
                return SeekStart::At(self.window_start() + i as u64);
            }
        }
        // The last segment that began at or before `t` (a segment whose first timestamp is
        // unknown, 0, began before anything dated).
        let i = self.segments.partition_point(|s| s.first_ts <= t);
        if i == 0 {
            if history.oldest_offset == 0 || t >= history.oldest_timestamp {
                return SeekStart::At(history.oldest_offset);
            }
            return SeekStart::BeforeHistory;
        }
        SeekStart::Scan(self.segments[i - 1].base)
    }
}

/// What [`seek_time`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// The first record published at or after the time (the head when none is).
    At(u64),
    /// The time lies before the oldest record the log keeps.
    BeforeHistory(History),
}

/// The first record of `log` whose timestamp is at or after `t` (ns). Reads the disk through
/// the log's block cache; a block not cached is read by [`super::fetch`], as the shard's
/// fetcher reads it for channels. Timestamps are the owner's clock at publication, so they
/// rise with the seq (a clock stepped back can make the answer a little early: more replayed,
/// never less).
pub async fn seek_time(log: &RefCell<TopicLog>, t: i64) -> Seek {
    let start = log.borrow().seek_start(t);
    let mut seq = match start {
        SeekStart::At(seq) => return Seek::At(seq),
        SeekStart::BeforeHistory => return Seek::BeforeHistory(log.borrow().history()),
        SeekStart::Scan(seq) => seq,
    };
    let mut hint = DiskHint::default();
    let mut scanned = 0;
    // Rounds of the fetcher in a row that brought nothing readable: a block that cannot be
    // had is given up by the cache after a few failures, so this is only a backstop.
    let mut waits = 0;
    loop {
        let read = log.borrow().read_above(seq, hint, 0);
        match read {
            Read::Msg(s, h) => {
                waits = 0;
                if s.msg.timestamp >= t {
                    return Seek::At(s.seq);
                }
                seq = s.seq + 1;
                hint = h;
            }
            Read::Skip(next) if next > seq => seq = next,
            Read::Skip(_) | Read::End => return Seek::At(log.borrow().head().max(seq)),
            Read::Wait if waits < MAX_WAITS => {
                waits += 1;
                super::fetch(log).await;
            }
            Read::Wait => {
                tracing::warn!(topic = %log.borrow().name, seq, "seek by time: the segment cannot be read; answering where the scan stopped");
                return Seek::At(seq);
            }
        }
        scanned += 1;
        if scanned % SCAN_BATCH == 0 {
            glommio::yield_if_needed().await;
        }
    }
}

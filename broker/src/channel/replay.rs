//! Replay: a channel moved to another position of its topic's log ([`Channel::rewind`]), and
//! where it stands for /stats ([`Channel::position`]).
//!
//! After a rewind to `seq` the channel owes its in-flight messages (they finish normally: a
//! FIN, REQ or timeout of one works as before) and every message of the log from `seq` on
//! (attempts start over). What it held requeued or deferred is dropped: from `seq` on it comes
//! again from the log, and what lies before `seq` is done, as it would be for a channel
//! created there. A message both in flight and reached again by the cursor is not handed out
//! a second time while its first delivery is in flight (`rewound_until`, checked in
//! [`Channel::dispatch`]): the in-flight table holds one entry per ID, and every message stays
//! owed exactly once.
//!
//! Invariant: the rewind lowers the channel's floor; the caller reopens the log there
//! (`TopicLog::reopen_from`) and checks that the log still holds it, and the flusher's floor
//! (the lowest over channels) keeps it from then on.

use super::Channel;
use crate::storage::log::{DiskHint, TopicLog};

/// Where a channel stands in its topic's log, for /stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// The next seq it takes from the log.
    pub offset: u64,
    /// The timestamp (ns) of the oldest message it still owes (taken or not), 0 when it owes
    /// nothing. For a message not in memory, the first timestamp of its segment (no later).
    pub oldest_owed_timestamp: i64,
}

impl Channel {
    /// Moves the cursor to `seq` (before or after where it was); see the module's text.
    pub fn rewind(&mut self, seq: u64) {
        self.rewound_until = self.rewound_until.max(self.cursor).max(seq);
        self.cursor = seq;
        self.hint = DiskHint::default();
        self.skip = None;
        self.requeued.clear();
        self.deferred.clear();
        self.deferred_order.clear();
        tracing::info!(topic = %self.topic, channel = %self.name, offset = seq, "channel rewound");
    }

    /// The channel's position in `log` (see [`Position`]).
    pub fn position(&self, log: &TopicLog) -> Position {
        let owed = self
            .requeued
            .iter()
            .map(|r| &r.msg)
            .chain(self.in_flight.values().map(|f| &f.msg))
            .chain(self.deferred.values().map(|d| &d.msg))
            .map(|s| s.msg.timestamp);
        let at_cursor = (self.cursor < self.visible_end)
            .then(|| log.timestamp_near(self.cursor))
            .flatten();
        Position {
            offset: self.cursor,
            oldest_owed_timestamp: owed.chain(at_cursor).min().unwrap_or(0),
        }
    }
}

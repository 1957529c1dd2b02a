//! Replay: a channel moved to another position of its topic's log ([`Channel::rewind`]), and
//! where it stands for /stats ([`Channel::position`]).
//!
//! After a rewind to `seq` the channel owes every message of the log from `seq` on (attempts
//! start over), and its in-flight messages before `seq` (they finish normally: a FIN, REQ or
//! timeout of one works as before). What it held requeued or deferred is dropped: from `seq`
//! on it comes again from the log, and what lies before `seq` is done, as it would be for a
//! channel created there. A message in flight at or after `seq` is owed again, once, after its
//! delivery, however that delivery ends and whenever its FIN or REQ reaches the owner
//! (`owes.rs`): the cursor does not hand it out a second time while its first delivery is in
//! flight (`rewound_until`, checked in `take_from_log`; the in-flight table holds one entry
//! per ID), and the delivery's end gives a fresh copy back.
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
        self.reposition(seq);
        tracing::info!(topic = %self.topic, channel = %self.name, offset = seq, "channel rewound");
    }

    /// The rewind itself, without its log line (a follower takes its leader's position often).
    pub(super) fn reposition(&mut self, seq: u64) {
        self.rewound_until = self.rewound_until.max(self.cursor).max(seq);
        self.mark_rewound(seq);
        self.cursor = seq;
        self.hint = DiskHint::default();
        self.skip = None;
        self.next_foreign = 0;
        self.finished_elsewhere.clear();
        self.requeued.clear();
        self.deferred.clear();
        self.deferred_order.clear();
    }

    /// The channel's position in `log` (see [`Position`]).
    pub fn position(&self, log: &TopicLog) -> Position {
        let owed = self
            .requeued
            .iter()
            .map(|r| &r.msg)
            .chain(
                self.in_flight
                    .values()
                    .filter(|f| self.owed_by(f).is_some())
                    .map(|f| &f.msg),
            )
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

#[cfg(test)]
mod tests {
    use super::super::{ClientInfo, ConsumerKey, ConsumerSpec, Deliveries, TimerQueue};
    use super::*;
    use crate::timer::TimerKind;
    use bytes::Bytes;
    use protocol::{Message, MessageId};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const MAX: Duration = Duration::from_secs(900);

    fn spec() -> ConsumerSpec {
        ConsumerSpec {
            key: ConsumerKey { shard: 0, conn: 1 },
            msg_timeout: Duration::from_secs(60),
            info: Arc::new(ClientInfo::default()),
            output_window: u64::MAX,
        }
    }

    /// A log of 10 messages and a channel reading it from the start.
    fn setup() -> (TopicLog, std::rc::Rc<std::cell::RefCell<Channel>>) {
        let mut log = TopicLog::in_memory("t", 1000);
        let msgs = (0..10u64).map(|n| Message {
            id: MessageId::from_u64(n + 1),
            timestamp: n as i64,
            attempts: 0,
            body: Bytes::from(format!("m{n}")),
        });
        let end = log.append(msgs.collect(), 0);
        (log, Channel::new(Arc::from("t"), "c", 100, 0, end))
    }

    fn seqs(out: &Deliveries) -> Vec<u64> {
        out.iter()
            .map(|d| d.msg.id.to_u64().unwrap_or(0) - 1)
            .collect()
    }

    /// A rewind while messages are in flight: those before its point finish normally; the
    /// replay passes over those still in flight (one entry per ID) and delivers the rest
    /// again with attempts starting over; each one passed comes again once its delivery
    /// ends, whether by FIN or REQ.
    #[test]
    fn a_rewind_replays_from_its_point_including_what_was_in_flight() {
        let timers = TimerQueue::default();
        let (log, ch) = setup();
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(), 0).unwrap();
        c.set_rdy(spec().key, 4);
        let mut first = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut first);
        assert_eq!(seqs(&first), [0, 1, 2, 3]);
        // 0..4 in flight; back to 2, with room for everything.
        c.rewind(2);
        assert_eq!(c.position(&log).offset, 2);
        assert_eq!(c.position(&log).oldest_owed_timestamp, 0, "0 is still owed");
        c.finish(spec().key, first[0].msg.id).unwrap();
        c.set_rdy(spec().key, 100);
        let mut replay = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut replay);
        assert_eq!(
            seqs(&replay),
            [4, 5, 6, 7, 8, 9],
            "2 and 3 are in flight already"
        );
        assert!(replay.iter().all(|d| d.msg.attempts == 1));
        // 1 lies before the point: its FIN finishes it. The old deliveries of 2 and 3 end
        // (a FIN, a REQ): each comes again once, fresh.
        c.finish(spec().key, first[1].msg.id).unwrap();
        c.finish(spec().key, first[2].msg.id).unwrap();
        c.requeue(spec().key, first[3].msg.id, Duration::ZERO, now, &timers)
            .unwrap();
        let mut again = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut again);
        assert_eq!(seqs(&again), [2, 3]);
        assert!(again.iter().all(|d| d.msg.attempts == 1));
        for d in replay.iter().chain(again.iter()) {
            c.finish(spec().key, d.msg.id).unwrap();
        }
        assert_eq!((c.floor(), c.waiting()), (10, 0));
        let mut nothing = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut nothing);
        assert!(nothing.is_empty(), "each message came again once");
        // Forward too: a position past the cursor skips what lies between.
        c.rewind(0);
        c.rewind(8);
        let mut tail = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut tail);
        assert_eq!(seqs(&tail), [8, 9]);
    }

    /// What ends a delivery the replay has not reached yet (a FIN, a REQ) leaves the message
    /// to the log, which delivers it once; what ends one it passed (a FIN, a timeout) brings
    /// a fresh copy back: after the rewind every message from its point comes exactly once.
    #[test]
    fn every_message_from_the_point_comes_once_whatever_ends_its_old_delivery() {
        let timers = TimerQueue::default();
        let (log, ch) = setup();
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(), 0).unwrap();
        c.set_rdy(spec().key, 4);
        let mut first = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut first);
        // 0..4 in flight and the consumer full: the rewind to 0 delivers nothing yet.
        c.rewind(0);
        c.requeue(spec().key, first[2].msg.id, Duration::ZERO, now, &timers)
            .unwrap();
        c.finish(spec().key, first[3].msg.id).unwrap();
        assert_eq!(c.waiting(), 10, "the log owes 0..10, nothing twice");
        c.set_rdy(spec().key, 100);
        let mut replay = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut replay);
        assert_eq!(seqs(&replay), [2, 3, 4, 5, 6, 7, 8, 9], "0 and 1 in flight");
        // The replay passed 0 and 1: a FIN and a timeout of them bring each back once.
        c.finish(spec().key, first[0].msg.id).unwrap();
        let later = now + Duration::from_secs(61);
        for d in replay.iter() {
            c.touch(spec().key, d.msg.id, MAX, later, &timers).unwrap();
        }
        c.on_timer(TimerKind::InFlight, later, later, &timers);
        let mut again = Deliveries::default();
        c.dispatch(&log, later, MAX, &timers, &mut again);
        assert_eq!(seqs(&again), [0, 1]);
        assert!(again.iter().all(|d| d.msg.attempts == 1));
    }

    /// A clean stop right after a rewind saves the in-flight messages before the cursor as
    /// owed; those at or after it come back from the log only, so the restart hands each out
    /// once.
    #[test]
    fn a_clean_stop_after_a_rewind_restores_each_message_once() {
        let timers = TimerQueue::default();
        let (log, ch) = setup();
        let now = Instant::now();
        let meta = {
            let mut c = ch.borrow_mut();
            c.add_consumer(spec(), 0).unwrap();
            c.set_rdy(spec().key, 4);
            let mut out = Deliveries::default();
            c.dispatch(&log, now, MAX, &timers, &mut out);
            c.rewind(2);
            c.to_meta(true, now)
        };
        assert_eq!(meta.cursor, 2);
        let pending: Vec<u64> = meta.pending.iter().map(|p| p.seq).collect();
        assert_eq!(
            pending,
            [0, 1],
            "0..4 were in flight; the log owes 2 and 3 again"
        );
        let again = Channel::new(Arc::from("t"), "c", 100, 0, log.head());
        let mut c = again.borrow_mut();
        assert_eq!(c.restore(&meta, true, &log, now, &timers), 2, "0 and 1");
        c.add_consumer(spec(), 0).unwrap();
        c.set_rdy(spec().key, 100);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        let mut got = seqs(&out);
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<u64>>());
    }
}

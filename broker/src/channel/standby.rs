//! A replicated topic's channel position, as its leader sends it
//! ([`Channel::replicated_position`]) and a follower's channel takes it
//! ([`Channel::take_position`]).
//!
//! A position is the channel's cursor and the seqs below it that the channel still owes (in
//! flight, requeued, deferred); everything else below the cursor is finished. A follower's
//! channel takes it by moving its cursor to the lowest owed seq (as a rewind does: what it
//! held is dropped) and passing over the finished stretches between the owed seqs
//! (`finished_elsewhere`). When its replica leads, the channel delivers what the old leader
//! still owed and everything from its cursor on, not what was finished there.
//!
//! While the topic's replica does not lead, its channels stand by (`Channel::standby`, set by
//! `Topic::stand_by`): they hand out nothing, so a deposed leader's consumers never get what
//! the new leader delivers.
//!
//! Invariants: `finished_elsewhere` is sorted and disjoint, and the cursor passes over each
//! stretch once (then it is dropped); a rewind forgets them (a replay delivers everything from
//! its point); a position with more owed seqs than one message carries is sent as its lowest
//! owed seq with nothing owed (more comes again; nothing owed is ever skipped).

use super::Channel;
use crate::storage::log::DiskHint;

impl Channel {
    /// Where the channel stands, as a leader sends it: its cursor and the seqs below it it
    /// still owes (strictly increasing, at most `max_owed` of them).
    pub fn replicated_position(&self, max_owed: usize) -> (u64, Vec<u64>) {
        let in_flight = self
            .in_flight
            .values()
            .filter(|f| self.owed_by(f).is_some())
            .map(|f| f.msg.seq);
        let mut owed: Vec<u64> = self
            .requeued
            .iter()
            .map(|r| r.msg.seq)
            .chain(self.deferred.values().map(|d| d.msg.seq))
            .chain(self.dead.sending.keys().copied())
            .chain(in_flight)
            .filter(|&s| s < self.cursor)
            .collect();
        owed.sort_unstable();
        owed.dedup();
        if owed.len() > max_owed {
            return (owed[0], Vec::new());
        }
        (self.cursor, owed)
    }

    /// Takes the leader's position (see the module's text). `owed` is strictly increasing and
    /// below `cursor` (the wire checks it).
    pub fn take_position(&mut self, cursor: u64, owed: &[u64]) {
        let floor = owed.first().copied().unwrap_or(cursor).min(cursor);
        self.reposition(floor);
        let mut from = None;
        for &o in owed {
            if let Some(f) = from.filter(|&f| o > f) {
                self.finished_elsewhere.push_back((f, o));
            }
            from = Some(o + 1);
        }
        if let Some(f) = from.filter(|&f| cursor > f) {
            self.finished_elsewhere.push_back((f, cursor));
        }
    }

    /// Moves the cursor past a stretch finished on the old leader it stands in; true when it
    /// moved.
    pub(super) fn pass_finished_elsewhere(&mut self) -> bool {
        while let Some(&(from, to)) = self.finished_elsewhere.front() {
            if self.cursor >= to {
                self.finished_elsewhere.pop_front();
                continue;
            }
            if self.cursor >= from {
                self.cursor = to;
                self.hint = DiskHint::default();
                self.finished_elsewhere.pop_front();
                return true;
            }
            break;
        }
        false
    }

    /// Messages of the visible log in stretches finished on the old leader.
    pub(super) fn finished_elsewhere_waiting(&self) -> u64 {
        self.finished_elsewhere
            .iter()
            .map(|&(from, to)| {
                to.min(self.visible_end)
                    .saturating_sub(from.max(self.cursor))
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ClientInfo, ConsumerKey, ConsumerSpec, Deliveries, TimerQueue};
    use super::*;
    use crate::storage::log::TopicLog;
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

    fn log_of(n: u64) -> TopicLog {
        let mut log = TopicLog::in_memory("t", 1000);
        let msgs = (0..n).map(|i| Message {
            id: MessageId::from_u64(i + 1),
            timestamp: i as i64,
            attempts: 0,
            body: Bytes::from(format!("m{i}")),
        });
        log.append(msgs.collect(), 0);
        log
    }

    fn seqs(out: &Deliveries) -> Vec<u64> {
        out.iter()
            .map(|d| d.msg.id.to_u64().unwrap_or(0) - 1)
            .collect()
    }

    /// A leader's channel with messages finished out of order and one requeued: the position
    /// names its cursor and what it owes; a follower's channel that takes it delivers exactly
    /// that, once it may deliver.
    #[test]
    fn a_follower_delivers_what_the_leader_owed_and_what_follows() {
        let timers = TimerQueue::default();
        let log = log_of(12);
        let now = Instant::now();
        let leader = Channel::new(Arc::from("t"), "c", 100, 0, 12);
        let mut l = leader.borrow_mut();
        l.add_consumer(spec(), 0).unwrap();
        l.set_rdy(spec().key, 6);
        let mut out = Deliveries::default();
        l.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(seqs(&out), [0, 1, 2, 3, 4, 5]);
        // 0, 2, 3 and 5 finished; 1 requeued; 4 still in flight.
        for i in [0, 2, 3, 5] {
            l.finish(spec().key, out[i].msg.id).unwrap();
        }
        l.requeue(spec().key, out[1].msg.id, Duration::ZERO, now, &timers)
            .unwrap();
        assert_eq!(l.replicated_position(100), (6, vec![1, 4]));
        assert_eq!(
            l.replicated_position(1),
            (1, vec![]),
            "over the bound: no skip"
        );

        // The follower's channel, created late, sees nothing until its replica leads.
        let follower = Channel::new(Arc::from("t"), "c", 100, 0, 0);
        let mut f = follower.borrow_mut();
        f.take_position(6, &[1, 4]);
        assert_eq!(f.floor(), 1);
        f.visible_end = 12;
        f.add_consumer(spec(), 0).unwrap();
        f.set_rdy(spec().key, 100);
        let mut got = Deliveries::default();
        f.dispatch(&log, now, MAX, &timers, &mut got);
        assert_eq!(seqs(&got), [1, 4, 6, 7, 8, 9, 10, 11]);
        assert_eq!(f.waiting(), 0);
    }

    /// A channel standing by (its replica does not lead) hands out nothing, not even what it
    /// holds requeued; once its replica leads it delivers again.
    #[test]
    fn a_channel_standing_by_delivers_nothing() {
        let timers = TimerQueue::default();
        let log = log_of(4);
        let now = Instant::now();
        let ch = Channel::new(Arc::from("t"), "c", 100, 0, 4);
        let mut c = ch.borrow_mut();
        c.add_consumer(spec(), 0).unwrap();
        c.set_rdy(spec().key, 1);
        let mut first = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut first);
        assert_eq!(seqs(&first), [0]);
        c.requeue(spec().key, first[0].msg.id, Duration::ZERO, now, &timers)
            .unwrap();
        c.standby = true;
        c.set_rdy(spec().key, 10);
        let mut none = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut none);
        assert!(none.is_empty());
        c.standby = false;
        let mut all = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut all);
        // The requeued message waits for the log position it was given back at.
        assert_eq!(seqs(&all), [1, 2, 3, 0]);
    }

    /// A rewind after a position replays everything from its point.
    #[test]
    fn a_rewind_forgets_what_was_finished_elsewhere() {
        let timers = TimerQueue::default();
        let log = log_of(8);
        let now = Instant::now();
        let ch = Channel::new(Arc::from("t"), "c", 100, 0, 8);
        let mut c = ch.borrow_mut();
        c.take_position(5, &[2]);
        assert_eq!(c.waiting(), 4, "2, then 5, 6 and 7");
        c.rewind(0);
        c.add_consumer(spec(), 0).unwrap();
        c.set_rdy(spec().key, 100);
        let mut got = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut got);
        assert_eq!(seqs(&got), (0..8).collect::<Vec<_>>());
    }
}

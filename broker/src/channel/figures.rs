//! What a channel counts: its figures for `/stats` ([`Figures`], as nsqd defines them) and its
//! floor, the lowest seq it still owes, which the flusher uses to decide which segments every
//! channel has passed.

use super::Channel;
use crate::storage::log::TopicLog;

/// A channel's counts for /stats ([`Channel::figures`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub depth: u64,
    pub backend_depth: u64,
    pub in_flight: u64,
    pub deferred: u64,
}

impl Channel {
    /// Messages not taken yet: the log's from the cursor (deferred records among them
    /// included) plus the requeued.
    pub fn waiting(&self) -> usize {
        self.waiting_in_log() as usize + self.requeued.len()
    }

    /// The channel's figures for /stats, as nsqd defines them, at wall-clock `now_ns`.
    ///
    /// - `depth`: messages ready for a consumer (nsqd: its memory queue plus its backend):
    ///   the log's not yet taken and the requeued, less the log's deferred records (DPUB)
    ///   whose time has not come; never the in-flight or deferred ones.
    /// - `backend_depth`: the part of `depth` beyond the `--mem-queue-size` messages the
    ///   channel holds in memory (nsqd's disk queue; what a channel reads from the segment
    ///   files), all of it with `--mem-queue-size 0`; 0 for `#ephemeral` channels, which have
    ///   no backend and drop what exceeds their memory.
    /// - `deferred`: DPUB records of the log not taken yet and not due, plus what the channel
    ///   holds deferred (taken DPUBs, REQ with a delay).
    pub fn figures(&self, log: &TopicLog, now_ns: i64) -> Figures {
        let deferred_in_log = self.deferred_in_log(log, now_ns);
        let depth = (self.waiting() as u64).saturating_sub(deferred_in_log);
        let backend_depth = if self.ephemeral {
            0
        } else {
            depth.saturating_sub(self.mem_queue_size)
        };
        Figures {
            depth,
            backend_depth,
            in_flight: self.in_flight.len() as u64,
            deferred: self.deferred.len() as u64 + deferred_in_log,
        }
    }

    /// The log's records this channel has yet to take that wait for their deferral.
    fn deferred_in_log(&self, log: &TopicLog, now_ns: i64) -> u64 {
        let all = log.deferred_between(self.cursor, self.visible_end, now_ns);
        let skipped = match self.skip {
            Some((from, to)) => {
                log.deferred_between(from.max(self.cursor), to.min(self.visible_end), now_ns)
            }
            None => 0,
        };
        all - skipped.min(all)
    }

    /// Messages of the log this channel has yet to take (less a skipped stretch).
    pub(super) fn waiting_in_log(&self) -> u64 {
        let waiting = self.visible_end.saturating_sub(self.cursor);
        let skipped = match self.skip {
            Some((from, to)) => to
                .min(self.visible_end)
                .saturating_sub(from.max(self.cursor)),
            None => 0,
        };
        let foreign: u64 = self
            .foreign
            .iter()
            .map(|&(from, to)| {
                to.min(self.visible_end)
                    .saturating_sub(from.max(self.cursor))
            })
            .sum();
        waiting.saturating_sub(skipped + foreign + self.finished_elsewhere_waiting())
    }

    /// The next seq this channel takes from the topic's log.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The lowest seq this channel may still need.
    pub fn floor(&self) -> u64 {
        self.floor_above(0)
    }

    /// [`Channel::floor`] for a caller that only needs it when it lies above `bound`: the
    /// search stops at the first owed seq at or below `bound` and returns that. The flusher
    /// asks with its log's planned end at every round, so it looks at no more than what the
    /// channel owes of the messages published since (in ID order the in-flight table starts
    /// with the oldest), not at everything the channel holds (a million deferred messages).
    pub fn floor_above(&self, bound: u64) -> u64 {
        if self.cursor <= bound {
            return self.cursor;
        }
        let owed = self
            .requeued
            .iter()
            .map(|r| r.msg.seq)
            .chain(
                self.in_flight
                    .values()
                    .filter(|f| self.owed_by(f).is_some())
                    .map(|f| f.msg.seq),
            )
            .chain(self.deferred.values().map(|d| d.msg.seq))
            .chain(self.dead.sending.keys().copied());
        let mut floor = self.cursor;
        for seq in owed {
            if seq <= bound {
                return seq;
            }
            floor = floor.min(seq);
        }
        floor
    }
}

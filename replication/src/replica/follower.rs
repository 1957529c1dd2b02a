//! A topic's follower for one epoch: first finds where its log leaves the leader's (asking
//! the leader where the follower's last epoch ends, as often as needed), truncates there, then
//! appends what the leader ships and answers with its ends.
//!
//! Invariants:
//! - the log is cut only at a point the leader's epoch history gives, never at a position
//!   remembered locally (the loss Kafka's KIP-101 closed);
//! - a batch is stored only if it carries the current epoch, comes from this epoch's leader,
//!   starts at the log's end, has consecutive seqs and every record's crc matches; a gap or a
//!   damaged record is answered with the log's end so that the leader resends from there
//!   (damage is refetched, never stored), a stale copy only with the log's end;
//! - nothing is acknowledged before the truncation is done, so every ack the leader counts
//!   describes a prefix of its own log;
//! - the log begins again only at the start its leader names, and only when it ends below it
//!   (what lies between was acknowledged and consumed, and the leader released it).

use super::config::ReplicaConfig;
use super::log::ReplicaLog;
use super::messages::{Millis, Msg, Output};
use super::mutation::{self, Mutation};
use super::record::Batch;
use crate::ids::{BrokerId, Epoch, Seq};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Asked the leader where `asked` ends; waiting for the answer.
    Resolving { asked: Epoch, sent_at: Millis },
    /// Truncated to the leader's history: appending.
    Following,
}

/// The follower's state for one epoch.
#[derive(Debug)]
pub(crate) struct Follower {
    epoch: Epoch,
    leader: BrokerId,
    phase: Phase,
}

/// What the follower knows beyond its epoch: the leader's high watermark as last shipped, and
/// whether its log still misses a suffix recovery cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FollowerMemory {
    pub(crate) incarnation: u64,
    pub(crate) known_hw: Seq,
    pub(crate) damaged: bool,
}

impl Follower {
    pub(crate) fn start(
        epoch: Epoch,
        leader: BrokerId,
        log: &mut dyn ReplicaLog,
        mem: &mut FollowerMemory,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Follower {
        let mut f = Follower {
            epoch,
            leader,
            phase: Phase::Following,
        };
        if mutation::on(Mutation::TruncateToLocalHw) {
            let _ = log.truncate_to(mem.known_hw);
            f.ack(log, mem, true, out);
        } else if mutation::on(Mutation::SkipTruncation) {
            f.ack(log, mem, true, out);
        } else {
            f.resolve(log, mem, now, out);
        }
        f
    }

    pub(crate) fn leader(&self) -> BrokerId {
        self.leader
    }

    /// Asks where the last epoch ends, or starts following when the log is empty.
    fn resolve(
        &mut self,
        log: &mut dyn ReplicaLog,
        mem: &FollowerMemory,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        match log.epochs().last_epoch() {
            None => {
                self.phase = Phase::Following;
                self.ack(log, mem, true, out);
            }
            Some(asked) => {
                self.phase = Phase::Resolving {
                    asked,
                    sent_at: now,
                };
                out.push(Output::Send {
                    to: self.leader,
                    msg: Msg::EpochEndQuery {
                        epoch: self.epoch,
                        last_epoch: asked,
                    },
                });
            }
        }
    }

    fn ack(&self, log: &dyn ReplicaLog, mem: &FollowerMemory, resend: bool, out: &mut Vec<Output>) {
        out.push(Output::Send {
            to: self.leader,
            msg: Msg::Ack {
                epoch: self.epoch,
                incarnation: mem.incarnation,
                end: log.end(),
                durable_end: log.durable_end(),
                clean: !mem.damaged,
                resend,
            },
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_message(
        &mut self,
        from: BrokerId,
        msg: Msg,
        log: &mut dyn ReplicaLog,
        mem: &mut FollowerMemory,
        now: Millis,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        if from != self.leader {
            return;
        }
        match msg {
            Msg::Append {
                epoch,
                hw,
                base,
                batch,
            } if epoch == self.epoch && self.phase == Phase::Following => {
                self.on_append(hw, base, batch, log, mem, cfg, out)
            }
            Msg::StartAt { epoch, hw, start }
                if epoch == self.epoch && self.phase == Phase::Following =>
            {
                if log.end() < start {
                    if log.start_at(start).is_err() {
                        // Not now (a write under way): the leader sends it again.
                        return;
                    }
                    mem.known_hw = mem.known_hw.max(hw.min(start));
                    if mem.damaged && log.end() >= hw {
                        mem.damaged = false;
                    }
                }
                self.ack(log, mem, true, out);
            }
            Msg::EpochEndAnswer {
                epoch,
                asked,
                found,
            } if epoch == self.epoch => {
                if let Phase::Resolving { asked: a, .. } = self.phase {
                    if a == asked {
                        self.on_answer(asked, found, log, mem, now, out);
                    }
                }
            }
            _ => {}
        }
    }

    fn on_answer(
        &mut self,
        asked: Epoch,
        found: Option<(Epoch, Seq)>,
        log: &mut dyn ReplicaLog,
        mem: &mut FollowerMemory,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        let cut = match found {
            None => 0,
            // The leader has the same last epoch: the logs agree up to where it ends in both.
            Some((e, end)) if e == asked => end.min(log.end()),
            // The leader never had `asked`: the logs may agree up to where `e` ends in both;
            // below that, the next round compares the older epochs again.
            Some((e, end)) => end.min(log.epochs().start_after(e).unwrap_or(log.end())),
        };
        if log.truncate_to(cut).is_err() {
            return;
        }
        mem.known_hw = mem.known_hw.min(log.end());
        match (found, log.epochs().last_epoch()) {
            (Some((e, _)), Some(last)) if last != e && last < asked => {
                self.resolve(log, mem, now, out)
            }
            _ => {
                self.phase = Phase::Following;
                self.ack(log, mem, true, out);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_append(
        &mut self,
        hw: Seq,
        base: Seq,
        mut batch: Batch,
        log: &mut dyn ReplicaLog,
        mem: &mut FollowerMemory,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        let end = log.end();
        if base < end {
            // A duplicate or a resend overlapping what is held (this epoch's records below the
            // log's end are the leader's): keep only what is new. Answering a stale copy with
            // a resend would make the leader ship its whole window again for every one.
            let held = usize::try_from(end - base).unwrap_or(usize::MAX);
            if held >= batch.records.len() {
                self.ack(log, mem, false, out);
                return;
            }
            batch.records.drain(..held);
            return self.on_append(hw, end, batch, log, mem, cfg, out);
        }
        let well_formed = batch.consecutive_from(base) && batch.epoch <= self.epoch;
        let damaged = !mutation::on(Mutation::SkipCrc) && batch.first_damaged().is_some();
        if base != end || !well_formed || damaged {
            self.ack(log, mem, true, out);
            return;
        }
        if !batch.records.is_empty() {
            if log.append(batch.epoch, &batch.records).is_err() {
                self.ack(log, mem, true, out);
                return;
            }
            if cfg.durable {
                log.request_sync();
                out.push(Output::Sync);
            }
        }
        mem.known_hw = mem.known_hw.max(hw.min(log.end()));
        if mem.damaged && log.end() >= hw {
            mem.damaged = false;
        }
        self.ack(log, mem, false, out);
    }

    /// The log completed a sync: the leader learns the new durable end.
    pub(crate) fn on_synced(
        &self,
        log: &dyn ReplicaLog,
        mem: &FollowerMemory,
        out: &mut Vec<Output>,
    ) {
        if self.phase == Phase::Following {
            self.ack(log, mem, false, out);
        }
    }

    pub(crate) fn tick(
        &mut self,
        log: &mut dyn ReplicaLog,
        mem: &FollowerMemory,
        now: Millis,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        if let Phase::Resolving { sent_at, .. } = self.phase {
            if now.saturating_sub(sent_at) >= cfg.retry_after {
                self.resolve(log, mem, now, out);
            }
        }
    }
}

//! A topic's leader for one epoch: ships its log to each follower, takes their acks, keeps
//! the high watermark, releases publishes, fails them at their deadline, and asks the
//! controller to shrink or grow the in-sync set.
//!
//! Invariants:
//! - the high watermark never decreases within the epoch, and never passes a point some member
//!   of the *maximal* in-sync set (the confirmed set plus a pending proposal's) has not
//!   acknowledged in this epoch (its durable end in durable mode): while a change is pending,
//!   acknowledgements wait for both the old and the proposed set;
//! - a publish is acknowledged only once the high watermark passes it and the confirmed set has
//!   at least `min_insync` members, never "whoever is left"; every publish ends as acknowledged
//!   or failed by its deadline (or by losing the leadership), never hangs;
//! - in-sync changes are only proposed (one at a time, based on the confirmed `isr_version`,
//!   naming the incarnation of each member whose acks were counted);
//!   they take effect when the controller's decision comes back; a follower is proposed only
//!   once it holds both the high watermark and the log's end at the epoch's start (which
//!   covers everything acknowledged in earlier epochs);
//! - a follower counts only with acks of this epoch, sent after it truncated to this leader's
//!   history, and only while it reports a clean log;
//! - a follower that needs records below the log's start (released: acknowledged and
//!   consumed) is told to begin its log at that start, never sent a gap.

use std::collections::{BTreeMap, VecDeque};

use super::config::ReplicaConfig;
use super::log::ReplicaLog;
use super::messages::{Millis, Msg, Output, PublishError, PublishId, TopicState};
use super::mutation::{self, Mutation};
use super::record::Batch;
use crate::ids::{BrokerId, Epoch, Seq};

/// A batch sent and not yet covered by an ack.
#[derive(Debug, Clone)]
struct Flight {
    base: Seq,
    end: Seq,
    sent_at: Millis,
    /// The batch reached the leader's log end when it was sent.
    reaches_end: bool,
}

/// What the leader knows of one follower.
#[derive(Debug, Clone)]
struct Peer {
    /// The follower's incarnation its acks come from.
    incarnation: u64,
    next: Seq,
    flights: VecDeque<Flight>,
    /// `(end, durable end)` of its last ack in this epoch.
    acked: Option<(Seq, Seq)>,
    clean: bool,
    caught_up_at: Millis,
    last_sent: Option<Millis>,
}

/// An ack's fields.
#[derive(Debug, Clone, Copy)]
struct AckOf {
    incarnation: u64,
    end: Seq,
    durable_end: Seq,
    clean: bool,
    resend: bool,
}

#[derive(Debug, Clone)]
struct Pending {
    id: PublishId,
    end: Seq,
    deadline: Millis,
}

#[derive(Debug, Clone)]
struct Proposal {
    id: u64,
    isr: Vec<BrokerId>,
    base_version: u64,
    at: Millis,
    incarnations: BTreeMap<BrokerId, u64>,
}

/// The leader's state for one epoch.
#[derive(Debug)]
pub(crate) struct Leader {
    me: BrokerId,
    epoch: Epoch,
    hw: Seq,
    isr: Vec<BrokerId>,
    isr_version: u64,
    peers: BTreeMap<BrokerId, Peer>,
    pending: VecDeque<Pending>,
    proposal: Option<Proposal>,
    /// Proposals made in this epoch (names the next one).
    proposals_made: u64,
    /// The log's end when this epoch began: it holds every record acknowledged before, so a
    /// follower joins the in-sync set only once it holds this much (the high watermark alone
    /// may lag behind it on a new leader).
    epoch_start: Seq,
}

impl Leader {
    pub(crate) fn new(
        me: BrokerId,
        state: &TopicState,
        log: &dyn ReplicaLog,
        known_hw: Seq,
        now: Millis,
    ) -> Leader {
        let mut l = Leader {
            me,
            epoch: state.epoch,
            hw: known_hw.min(log.end()),
            isr: state.isr.clone(),
            isr_version: state.isr_version,
            peers: BTreeMap::new(),
            pending: VecDeque::new(),
            proposal: None,
            proposals_made: 0,
            epoch_start: log.end(),
        };
        l.sync_peers(&state.replicas, log, now);
        l
    }

    pub(crate) fn epoch(&self) -> Epoch {
        self.epoch
    }

    pub(crate) fn hw(&self) -> Seq {
        self.hw
    }

    pub(crate) fn isr(&self) -> &[BrokerId] {
        &self.isr
    }

    fn sync_peers(&mut self, replicas: &[BrokerId], log: &dyn ReplicaLog, now: Millis) {
        self.peers.retain(|b, _| replicas.contains(b));
        for &b in replicas {
            if b != self.me {
                self.peers.entry(b).or_insert(Peer {
                    incarnation: 0,
                    next: log.end(),
                    flights: VecDeque::new(),
                    acked: None,
                    clean: true,
                    caught_up_at: now,
                    last_sent: None,
                });
            }
        }
    }

    /// A newer decision of the controller within this epoch.
    pub(crate) fn on_state(&mut self, state: &TopicState, log: &dyn ReplicaLog, now: Millis) {
        self.isr = state.isr.clone();
        self.isr_version = state.isr_version;
        if self
            .proposal
            .as_ref()
            .is_some_and(|p| state.isr_version > p.base_version)
        {
            self.proposal = None;
        }
        self.sync_peers(&state.replicas, log, now);
    }

    /// The controller answered proposal `id` with its decision as of `isr_version` (already
    /// applied through `on_state` when newer): still the proposal's base means it refused.
    pub(crate) fn on_refused(&mut self, epoch: Epoch, isr_version: u64, id: u64) {
        if epoch == self.epoch
            && self
                .proposal
                .as_ref()
                .is_some_and(|p| p.id == id && p.base_version == isr_version)
        {
            self.proposal = None;
        }
    }

    /// The caller appended records up to `end` for publish `id`.
    pub(crate) fn published(&mut self, id: PublishId, end: Seq, now: Millis, cfg: &ReplicaConfig) {
        self.pending.push_back(Pending {
            id,
            end,
            deadline: now.saturating_add(cfg.publish_timeout),
        });
    }

    /// Fails every pending publish (the leadership ended).
    pub(crate) fn abandon(&mut self, out: &mut Vec<Output>) {
        for p in self.pending.drain(..) {
            out.push(Output::Failed(p.id, PublishError::NotLeader));
        }
    }

    pub(crate) fn on_message(
        &mut self,
        from: BrokerId,
        msg: Msg,
        log: &dyn ReplicaLog,
        now: Millis,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        match msg {
            Msg::Ack {
                epoch,
                incarnation,
                end,
                durable_end,
                clean,
                resend,
            } if epoch == self.epoch => {
                let ack = AckOf {
                    incarnation,
                    end,
                    durable_end,
                    clean,
                    resend,
                };
                self.on_ack(from, ack, log, now);
                self.advance(log, now, cfg, out);
            }
            Msg::EpochEndQuery { epoch, last_epoch } if epoch == self.epoch => {
                let found = log.epochs().end_of(last_epoch, log.end());
                out.push(Output::Send {
                    to: from,
                    msg: Msg::EpochEndAnswer {
                        epoch,
                        asked: last_epoch,
                        found,
                    },
                });
            }
            _ => {}
        }
    }

    fn on_ack(&mut self, from: BrokerId, ack: AckOf, log: &dyn ReplicaLog, now: Millis) {
        let AckOf {
            incarnation,
            end,
            durable_end,
            clean,
            resend,
        } = ack;
        let log_end = log.end();
        let Some(peer) = self.peers.get_mut(&from) else {
            return;
        };
        if incarnation < peer.incarnation {
            return;
        }
        if incarnation > peer.incarnation {
            // The follower restarted: what it acknowledged before may be gone.
            peer.incarnation = incarnation;
            peer.acked = None;
            peer.flights.clear();
            peer.next = end.min(log_end);
        }
        if end > log_end {
            // A log longer than the leader's in this epoch has not truncated to it: not counted.
            peer.acked = None;
            return;
        }
        peer.acked = Some((end, durable_end.min(end)));
        peer.clean = clean;
        if resend {
            peer.next = end;
            peer.flights.clear();
        } else {
            while let Some(f) = peer.flights.front() {
                if f.end > end {
                    break;
                }
                if f.reaches_end {
                    peer.caught_up_at = peer.caught_up_at.max(f.sent_at);
                }
                peer.flights.pop_front();
            }
            if peer.next < end {
                peer.next = end;
            }
        }
        if clean && end == log_end && peer.flights.is_empty() {
            peer.caught_up_at = now;
        }
    }

    /// After new records, an ack, a sync or a tick: the high watermark, acknowledgements,
    /// shipping.
    pub(crate) fn advance(
        &mut self,
        log: &dyn ReplicaLog,
        now: Millis,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        self.update_hw(log, cfg);
        self.release(log, cfg, out);
        self.ship(log, now, cfg, out);
    }

    fn counted_end(cfg: &ReplicaConfig, end: Seq, durable: Seq) -> Seq {
        if cfg.durable && !mutation::on(Mutation::CountUnsynced) {
            durable
        } else {
            end
        }
    }

    fn update_hw(&mut self, log: &dyn ReplicaLog, cfg: &ReplicaConfig) {
        let mut low = Self::counted_end(cfg, log.end(), log.durable_end());
        let proposed = self.proposal.iter().flat_map(|p| p.isr.iter());
        for m in self.isr.iter().chain(proposed) {
            if *m == self.me {
                continue;
            }
            match self.peers.get(m) {
                Some(Peer {
                    acked: Some((end, durable)),
                    clean: true,
                    ..
                }) => low = low.min(Self::counted_end(cfg, *end, *durable)),
                _ => return,
            }
        }
        self.hw = if mutation::on(Mutation::HwFollowsAcks) {
            low
        } else {
            self.hw.max(low)
        };
    }

    fn release(&mut self, log: &dyn ReplicaLog, cfg: &ReplicaConfig, out: &mut Vec<Output>) {
        let reach = if mutation::on(Mutation::AckBeforeIsr) {
            log.end()
        } else if self.isr.len() >= cfg.min_insync {
            self.hw
        } else {
            return;
        };
        while self.pending.front().is_some_and(|p| p.end <= reach) {
            if let Some(p) = self.pending.pop_front() {
                out.push(Output::Acked(p.id));
            }
        }
    }

    fn ship(
        &mut self,
        log: &dyn ReplicaLog,
        now: Millis,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        let end = log.end();
        for (&to, peer) in self.peers.iter_mut() {
            if peer
                .flights
                .front()
                .is_some_and(|f| now.saturating_sub(f.sent_at) >= cfg.resend_after)
            {
                if let Some(f) = peer.flights.front() {
                    peer.next = f.base;
                }
                peer.flights.clear();
            }
            if peer.next > end {
                peer.next = peer.acked.map_or(end, |a| a.0.min(end));
            }
            while peer.flights.len() < cfg.window.max(1) && peer.next < end {
                if peer.next < log.start() && !mutation::on(Mutation::NoStartAt) {
                    // The follower needs records this log released: it begins its log at
                    // this log's start (what it misses was acknowledged and consumed).
                    let start = if mutation::on(Mutation::StartAtEnd) {
                        end
                    } else {
                        log.start()
                    };
                    peer.flights.push_back(Flight {
                        base: peer.next,
                        end: start,
                        sent_at: now,
                        reaches_end: start == end,
                    });
                    peer.next = start;
                    peer.last_sent = Some(now);
                    out.push(Output::Send {
                        to,
                        msg: Msg::StartAt {
                            epoch: self.epoch,
                            hw: self.hw,
                            start,
                        },
                    });
                    continue;
                }
                let Ok(batch) = log.read(peer.next, cfg.max_batch) else {
                    break;
                };
                let Some(batch_end) = batch.end() else {
                    break;
                };
                let base = peer.next;
                peer.flights.push_back(Flight {
                    base,
                    end: batch_end,
                    sent_at: now,
                    reaches_end: batch_end == end,
                });
                peer.next = batch_end;
                peer.last_sent = Some(now);
                out.push(Output::Send {
                    to,
                    msg: Msg::Append {
                        epoch: self.epoch,
                        hw: self.hw,
                        base,
                        batch,
                    },
                });
            }
            let idle = peer
                .last_sent
                .is_none_or(|t| now.saturating_sub(t) >= cfg.heartbeat_every);
            if peer.flights.is_empty() && idle {
                peer.flights.push_back(Flight {
                    base: peer.next,
                    end: peer.next,
                    sent_at: now,
                    reaches_end: peer.next == end,
                });
                peer.last_sent = Some(now);
                out.push(Output::Send {
                    to,
                    msg: Msg::Append {
                        epoch: self.epoch,
                        hw: self.hw,
                        base: peer.next,
                        batch: Batch {
                            epoch: log.epochs().last_epoch().unwrap_or(self.epoch),
                            records: Vec::new(),
                        },
                    },
                });
            }
        }
    }

    /// The timer: deadlines, resends, heartbeats, in-sync changes.
    pub(crate) fn tick(
        &mut self,
        log: &dyn ReplicaLog,
        now: Millis,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        self.pending.retain(|p| {
            let late = p.deadline <= now;
            if late {
                out.push(Output::Failed(p.id, PublishError::Timeout));
            }
            !late
        });
        self.advance(log, now, cfg, out);
        self.propose_isr(log, now, cfg, out);
    }

    fn propose_isr(
        &mut self,
        log: &dyn ReplicaLog,
        now: Millis,
        cfg: &ReplicaConfig,
        out: &mut Vec<Output>,
    ) {
        if let Some(p) = &mut self.proposal {
            // Until the controller answers, the proposal stands (its members count toward the
            // high watermark): the same one is sent again.
            if now.saturating_sub(p.at) >= cfg.retry_after {
                p.at = now;
                let incarnations = p
                    .isr
                    .iter()
                    .filter(|m| **m != self.me)
                    .map(|m| (*m, p.incarnations.get(m).copied().unwrap_or(0)))
                    .collect();
                out.push(Output::AlterIsr {
                    epoch: self.epoch,
                    isr_version: p.base_version,
                    isr: p.isr.clone(),
                    incarnations,
                    proposal: p.id,
                });
            }
            return;
        }
        let lagging: Vec<BrokerId> = self
            .isr
            .iter()
            .copied()
            .filter(|m| *m != self.me)
            .filter(|m| match self.peers.get(m) {
                Some(p) => !p.clean || now.saturating_sub(p.caught_up_at) > cfg.lag_time,
                None => true,
            })
            .collect();
        let isr: Vec<BrokerId> = if !lagging.is_empty() {
            self.isr
                .iter()
                .copied()
                .filter(|m| !lagging.contains(m))
                .collect()
        } else {
            let mut grown = self.isr.clone();
            for (&b, p) in &self.peers {
                let caught_up = p.clean
                    && p.acked.is_some_and(|(end, durable)| {
                        let counted = Self::counted_end(cfg, end, durable);
                        counted >= self.hw && counted >= self.epoch_start && end <= log.end()
                    });
                if caught_up && !grown.contains(&b) {
                    grown.push(b);
                }
            }
            if !grown.contains(&self.me) {
                grown.push(self.me);
            }
            grown.sort();
            if grown == self.isr {
                return;
            }
            grown
        };
        let incarnations: Vec<(BrokerId, u64)> = isr
            .iter()
            .filter(|m| **m != self.me)
            .map(|m| (*m, self.peers.get(m).map_or(0, |p| p.incarnation)))
            .collect();
        self.proposals_made += 1;
        let id = self.proposals_made;
        self.proposal = Some(Proposal {
            id,
            isr: isr.clone(),
            base_version: self.isr_version,
            at: now,
            incarnations: incarnations.iter().copied().collect(),
        });
        out.push(Output::AlterIsr {
            epoch: self.epoch,
            isr_version: self.isr_version,
            isr,
            incarnations,
            proposal: id,
        });
    }
}

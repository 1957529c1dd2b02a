//! The simulation's reference controller: one deterministic oracle that applies
//! `RegisterBroker`, `FenceBroker`, `AlterIsr`, `ElectLeader` and `Reassign` atomically and at
//! once, by the design's rules. The real controller (`raft_control`) applies the same rules
//! through Raft, with a commit's delay and its own faults; the oracle stays as the fast
//! reference: a data-path bug shows here without the controller's timing, in less time
//! per seed, and a divergence between the two runs points at the controller. The world
//! delivers its decisions to brokers over the simulated network, after a delay.
//!
//! Rules (docs/design/replication.md):
//! - a leader is elected only among live members of the in-sync set, or, when none is live,
//!   among live members of the eligible set (members that left the in-sync set while it was
//!   below `min_insync`: no publish was acknowledged without them since, so they hold every
//!   acknowledged record); never anyone else;
//! - `AlterIsr` applies only from the epoch's leader, with the current epoch and `isr_version`,
//!   to a set holding the leader, within the replicas, adding only live brokers in the
//!   incarnation whose acks the leader counted (a broker restarted since may have lost them);
//!   proposals are numbered within an epoch, and one not newer than the last answered (applied
//!   or refused) is ignored, so that a delayed copy of a refused one never applies;
//! - the in-sync set never becomes empty while the eligible set is empty (its last member
//!   stays, as the only holder of what was acknowledged);
//! - a broker's new incarnation ends the epoch of every topic it leads (it must not go on
//!   leading with a log its crash shortened), and the topics whose logs its recovery cut leave
//!   its in-sync and eligible sets;
//! - a new broker id at the address of a known one means that data path was wiped: the old id
//!   is gone for good, leaves every set, and its replicas are reassigned to a live broker.

use std::collections::{BTreeMap, BTreeSet};

use super::rng::Rng;
use crate::ids::{BrokerId, Epoch};
use crate::replica::mutation::{self, Mutation};
use crate::replica::{Millis, TopicState};

#[derive(Debug, Clone)]
pub(crate) struct OTopic {
    pub(crate) state: TopicState,
    pub(crate) elr: BTreeSet<BrokerId>,
    /// The newest `AlterIsr` answered (applied or refused), by epoch and proposal number.
    answered: (Epoch, u64),
}

#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) host: usize,
    pub(crate) incarnation: u64,
    last_heard: Millis,
    pub(crate) live: bool,
}

/// What a decision changed, for the world to deliver and check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    Changed(usize),
    Elected {
        topic: usize,
        leader: BrokerId,
    },
    /// `to`'s in-sync proposal `proposal` of `topic` was answered (applied or refused): it is
    /// sent the topic's state.
    Answered {
        to: BrokerId,
        topic: usize,
        proposal: u64,
    },
}

#[derive(Debug)]
pub(crate) struct Oracle {
    pub(crate) topics: Vec<OTopic>,
    pub(crate) sessions: BTreeMap<BrokerId, Session>,
    pub(crate) gone: BTreeSet<BrokerId>,
    min_insync: usize,
    session_timeout: Millis,
}

impl Oracle {
    /// Brokers `ids[i]` on host `i`, all live; `topics` topics of `replicas` replicas each.
    pub(crate) fn new(
        ids: &[BrokerId],
        topics: usize,
        replicas: usize,
        min_insync: usize,
        session_timeout: Millis,
        rng: &mut Rng,
    ) -> Oracle {
        let mut o = Oracle {
            topics: Vec::new(),
            sessions: BTreeMap::new(),
            gone: BTreeSet::new(),
            min_insync,
            session_timeout,
        };
        for (host, &id) in ids.iter().enumerate() {
            o.sessions.insert(
                id,
                Session {
                    host,
                    incarnation: 1,
                    last_heard: 0,
                    live: true,
                },
            );
        }
        for _ in 0..topics {
            let mut set = Vec::new();
            while set.len() < replicas {
                match o.least_loaded(&set) {
                    Some(b) => set.push(b),
                    None => break,
                }
            }
            set.sort();
            let leader = rng.pick(&set);
            o.topics.push(OTopic {
                state: TopicState {
                    epoch: Epoch(1),
                    leader,
                    isr: set.clone(),
                    isr_version: 1,
                    replicas: set,
                },
                elr: BTreeSet::new(),
                answered: (Epoch(0), 0),
            });
        }
        o
    }

    fn live(&self, b: BrokerId) -> bool {
        !self.gone.contains(&b) && self.sessions.get(&b).is_some_and(|s| s.live)
    }

    /// The live broker holding the fewest replicas, not in `exclude` (lowest id on a tie).
    fn least_loaded(&self, exclude: &[BrokerId]) -> Option<BrokerId> {
        self.sessions
            .keys()
            .copied()
            .filter(|b| self.live(*b) && !exclude.contains(b))
            .min_by_key(|b| {
                let load = self
                    .topics
                    .iter()
                    .filter(|t| t.state.replicas.contains(b))
                    .count();
                (load, *b)
            })
    }

    /// A broker's heartbeat; the first of an incarnation registers it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn heartbeat(
        &mut self,
        id: BrokerId,
        host: usize,
        incarnation: u64,
        damaged: &BTreeSet<usize>,
        now: Millis,
        rng: &mut Rng,
        out: &mut Vec<Effect>,
    ) {
        if self.gone.contains(&id) {
            return;
        }
        match self.sessions.get_mut(&id) {
            None => {
                self.sessions.insert(
                    id,
                    Session {
                        host,
                        incarnation,
                        last_heard: now,
                        live: true,
                    },
                );
                let olds: Vec<BrokerId> = self
                    .sessions
                    .iter()
                    .filter(|(b, s)| s.host == host && **b != id)
                    .map(|(b, _)| *b)
                    .collect();
                for old in olds {
                    self.retire(old, rng, out);
                }
            }
            Some(s) if incarnation > s.incarnation => {
                s.incarnation = incarnation;
                s.last_heard = now;
                s.live = true;
                for &t in damaged {
                    if t < self.topics.len() {
                        self.drop_member(t, id, false, out);
                    }
                }
                for t in 0..self.topics.len() {
                    if self.topics[t].state.leader == Some(id) {
                        self.elect(t, rng, out);
                    }
                }
            }
            Some(s) if incarnation == s.incarnation => {
                s.last_heard = now;
                s.live = true;
            }
            Some(_) => return,
        }
        self.elect_leaderless(rng, out);
    }

    /// Fences the brokers whose sessions expired.
    pub(crate) fn tick(&mut self, now: Millis, rng: &mut Rng, out: &mut Vec<Effect>) {
        let expired: Vec<BrokerId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.live && now.saturating_sub(s.last_heard) > self.session_timeout)
            .map(|(b, _)| *b)
            .collect();
        for b in expired {
            if let Some(s) = self.sessions.get_mut(&b) {
                s.live = false;
            }
            for t in 0..self.topics.len() {
                self.drop_member(t, b, true, out);
                if self.topics[t].state.leader == Some(b) {
                    self.elect(t, rng, out);
                }
            }
        }
    }

    /// A leader's proposal number `proposal` to change its in-sync set, based on `(epoch,
    /// isr_version)`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alter_isr(
        &mut self,
        topic: usize,
        from: BrokerId,
        (epoch, isr_version): (Epoch, u64),
        isr: &[BrokerId],
        incarnations: &[(BrokerId, u64)],
        proposal: u64,
        out: &mut Vec<Effect>,
    ) {
        let Some(t) = self.topics.get_mut(topic) else {
            return;
        };
        // A copy of a proposal already answered (a resend, or one delayed past the leader's
        // next) is never applied: the leader may have dropped it as refused.
        if (epoch, proposal) <= t.answered {
            return;
        }
        if t.state.leader == Some(from) && t.state.epoch == epoch {
            t.answered = (epoch, proposal);
        }
        let t = &self.topics[topic];
        let st = &t.state;
        // An added broker must be live, in the incarnation whose acks the leader counted.
        let current = |b: &BrokerId| {
            self.live(*b)
                && incarnations.iter().any(|(m, i)| {
                    m == b && self.sessions.get(b).is_some_and(|s| s.incarnation == *i)
                })
        };
        let valid = st.leader == Some(from)
            && st.epoch == epoch
            && st.isr_version == isr_version
            && isr.contains(&from)
            && isr.iter().all(|b| st.replicas.contains(b))
            && isr.iter().all(|b| st.isr.contains(b) || current(b));
        if !valid {
            return;
        }
        let mut isr = isr.to_vec();
        isr.sort();
        isr.dedup();
        let min = self.min_insync;
        let t = &mut self.topics[topic];
        let removed: Vec<BrokerId> = t
            .state
            .isr
            .iter()
            .copied()
            .filter(|b| !isr.contains(b))
            .collect();
        if isr.len() < min {
            t.elr.extend(removed);
        } else {
            t.elr.clear();
        }
        for b in &isr {
            t.elr.remove(b);
        }
        t.state.isr = isr;
        t.state.isr_version += 1;
        out.push(Effect::Changed(topic));
    }

    /// Takes `b` out of a topic's in-sync (and eligible) set; `eligible`: it keeps its log (a
    /// fenced session), so it may stand for election while the set is below `min_insync`.
    fn drop_member(&mut self, topic: usize, b: BrokerId, eligible: bool, out: &mut Vec<Effect>) {
        let min = self.min_insync;
        let t = &mut self.topics[topic];
        // A fenced broker keeps its log, and with it its eligibility.
        let was_eligible = !eligible && t.elr.remove(&b);
        if !t.state.isr.contains(&b) {
            if was_eligible {
                t.state.isr_version += 1;
                out.push(Effect::Changed(topic));
            }
            return;
        }
        let rest: Vec<BrokerId> = t.state.isr.iter().copied().filter(|m| *m != b).collect();
        if rest.is_empty() && t.elr.is_empty() {
            if !eligible && was_eligible {
                t.state.isr_version += 1;
                out.push(Effect::Changed(topic));
            }
            return;
        }
        if rest.len() < min && eligible {
            t.elr.insert(b);
        }
        t.state.isr = rest;
        t.state.isr_version += 1;
        out.push(Effect::Changed(topic));
    }

    /// A new epoch for `topic`, led by a live in-sync member, else a live eligible one, else
    /// nobody (the old leader is fenced either way).
    fn elect(&mut self, topic: usize, rng: &mut Rng, out: &mut Vec<Effect>) {
        let t = &self.topics[topic];
        let pool: Vec<BrokerId> = if mutation::on(Mutation::ElectOutsideIsr) {
            t.state.replicas.clone()
        } else {
            t.state.isr.clone()
        };
        let mut cands: Vec<BrokerId> = pool.into_iter().filter(|b| self.live(*b)).collect();
        let mut from_elr = false;
        if cands.is_empty() {
            cands = t.elr.iter().copied().filter(|b| self.live(*b)).collect();
            from_elr = true;
        }
        let leader = rng.pick(&cands);
        if leader.is_none() && t.state.leader.is_none() {
            return;
        }
        let t = &mut self.topics[topic];
        if !mutation::on(Mutation::ReuseEpoch) {
            t.state.epoch = Epoch(t.state.epoch.0 + 1);
        }
        t.state.isr_version += 1;
        t.state.leader = leader;
        if let Some(l) = leader {
            if from_elr {
                t.elr.remove(&l);
                if !t.state.isr.contains(&l) {
                    t.state.isr.push(l);
                    t.state.isr.sort();
                }
            }
            out.push(Effect::Elected { topic, leader: l });
        }
        out.push(Effect::Changed(topic));
    }

    fn elect_leaderless(&mut self, rng: &mut Rng, out: &mut Vec<Effect>) {
        for t in 0..self.topics.len() {
            if self.topics[t].state.leader.is_none() {
                self.elect(t, rng, out);
            }
        }
    }

    /// `old`'s data path was wiped: it is gone for good.
    fn retire(&mut self, old: BrokerId, rng: &mut Rng, out: &mut Vec<Effect>) {
        self.gone.insert(old);
        if let Some(s) = self.sessions.get_mut(&old) {
            s.live = false;
        }
        for t in 0..self.topics.len() {
            if !self.topics[t].state.replicas.contains(&old) {
                continue;
            }
            self.drop_member(t, old, false, out);
            if self.topics[t].state.leader == Some(old) {
                self.elect(t, rng, out);
            }
            if self.topics[t].state.isr.contains(&old) {
                // The last holder of the acknowledged records is gone: nothing can replace it.
                continue;
            }
            let set = self.topics[t].state.replicas.clone();
            if let Some(new) = self.least_loaded(&set) {
                let st = &mut self.topics[t].state;
                st.replicas.retain(|b| *b != old);
                st.replicas.push(new);
                st.replicas.sort();
                st.isr_version += 1;
                out.push(Effect::Changed(t));
            }
        }
        self.sessions.remove(&old);
    }
}

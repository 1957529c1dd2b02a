//! What the data path's simulation asks of a controller, so that the same world runs with
//! either the [`Oracle`] (a fast, atomic reference) or [`RaftControl`] (the real controller: a
//! three-node Raft cluster driven in the same virtual time from the same seed).
//!
//! A controller answers brokers' heartbeats and in-sync proposals and fences silent brokers on
//! its ticks; what it decided comes back as [`Effect`]s (a topic changed, a leader was elected,
//! a proposal was answered), which the world delivers to the brokers over the simulated
//! network and checks. The queries are the decided state (for a Raft cluster: the metadata of
//! the node that applied the most).
//!
//! [`RaftControl`]: super::raft_control::RaftControl

use std::collections::BTreeSet;

use super::oracle::{Effect, Oracle};
use super::rng::Rng;
use crate::ids::{BrokerId, Epoch};
use crate::replica::{Millis, TopicState};

/// An in-sync proposal as a topic's leader sends it.
#[derive(Debug, Clone)]
pub(crate) struct Proposal {
    pub(crate) topic: usize,
    pub(crate) from: BrokerId,
    pub(crate) base: (Epoch, u64),
    pub(crate) isr: Vec<BrokerId>,
    pub(crate) incarnations: Vec<(BrokerId, u64)>,
    pub(crate) proposal: u64,
}

/// The controller the simulated brokers talk to.
pub(crate) trait Control {
    /// Virtual time between two calls of [`Control::tick`].
    fn tick_every(&self) -> Millis;
    fn tick(&mut self, now: Millis, rng: &mut Rng, out: &mut Vec<Effect>);
    /// A fault of the controller itself, while faults run (none by default).
    fn fault(&mut self, _now: Millis, _rng: &mut Rng) {}
    /// Crashes of the controller's own nodes so far.
    fn crashes(&self) -> u64 {
        0
    }
    /// Its nodes' snapshots so far: (installed from a leader, restarts from one, restarts that
    /// failed).
    fn snapshot_counts(&self) -> (u64, u64, u64) {
        (0, 0, 0)
    }
    /// Faults stop: the controller is whole again soon.
    fn heal(&mut self, _now: Millis) {}
    /// A broker's heartbeat; true when that incarnation is registered (it is sent the state).
    #[allow(clippy::too_many_arguments)]
    fn heartbeat(
        &mut self,
        id: BrokerId,
        host: usize,
        incarnation: u64,
        damaged: &BTreeSet<usize>,
        now: Millis,
        rng: &mut Rng,
        out: &mut Vec<Effect>,
    ) -> bool;
    /// A leader's proposal; its answer comes back as an [`Effect::Answered`].
    fn alter_isr(&mut self, p: Proposal, now: Millis, out: &mut Vec<Effect>);
    /// The decided state of `topic`.
    fn state(&self, topic: usize) -> TopicState;
    /// Its eligible set.
    fn elr(&self, topic: usize) -> Vec<BrokerId>;
    /// The holders of every acknowledged record of `topic`: its in-sync and eligible sets.
    fn holders(&self, topic: usize) -> Vec<BrokerId> {
        let mut h = self.state(topic).isr;
        h.extend(self.elr(topic));
        h.sort();
        h.dedup();
        h
    }
    /// The incarnation `id` is registered in (None: unknown or retired).
    fn incarnation(&self, id: BrokerId) -> Option<u64>;
    /// Every registered broker and its incarnation (the recipients of decisions).
    fn registered(&self) -> Vec<(BrokerId, u64)>;
    /// A one-line description of the controller's state of `topic`, for traces.
    fn describe(&self, topic: usize) -> String {
        let st = self.state(topic);
        format!(
            "epoch {} leader {:?} isr {:?} eligible {:?} replicas {:?}",
            st.epoch.0,
            st.leader.map(|b| b.0),
            st.isr.iter().map(|b| b.0).collect::<Vec<_>>(),
            self.elr(topic).iter().map(|b| b.0).collect::<Vec<_>>(),
            st.replicas.iter().map(|b| b.0).collect::<Vec<_>>()
        )
    }
}

impl Control for Oracle {
    fn tick_every(&self) -> Millis {
        100
    }

    fn tick(&mut self, now: Millis, rng: &mut Rng, out: &mut Vec<Effect>) {
        Oracle::tick(self, now, rng, out);
    }

    fn heartbeat(
        &mut self,
        id: BrokerId,
        host: usize,
        incarnation: u64,
        damaged: &BTreeSet<usize>,
        now: Millis,
        rng: &mut Rng,
        out: &mut Vec<Effect>,
    ) -> bool {
        Oracle::heartbeat(self, id, host, incarnation, damaged, now, rng, out);
        self.sessions
            .get(&id)
            .is_some_and(|s| s.incarnation == incarnation)
    }

    fn alter_isr(&mut self, p: Proposal, _now: Millis, out: &mut Vec<Effect>) {
        Oracle::alter_isr(
            self,
            p.topic,
            p.from,
            p.base,
            &p.isr,
            &p.incarnations,
            p.proposal,
            out,
        );
        if p.topic < self.topics.len() {
            out.push(Effect::Answered {
                to: p.from,
                topic: p.topic,
                proposal: p.proposal,
            });
        }
    }

    fn state(&self, topic: usize) -> TopicState {
        self.topics[topic].state.clone()
    }

    fn elr(&self, topic: usize) -> Vec<BrokerId> {
        self.topics[topic].elr.iter().copied().collect()
    }

    fn incarnation(&self, id: BrokerId) -> Option<u64> {
        self.sessions.get(&id).map(|s| s.incarnation)
    }

    fn registered(&self) -> Vec<(BrokerId, u64)> {
        self.sessions
            .iter()
            .map(|(id, s)| (*id, s.incarnation))
            .collect()
    }
}

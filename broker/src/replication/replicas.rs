//! One replicated topic's replica as its owner shard holds it ([`TopicReplica`]): the
//! `replication` crate's [`Replica`], the log's [`ReplicaStore`] (epoch history, damage), the
//! publishes waiting for the replica's answer, and the in-sync proposal waiting for the
//! controller's. The shard's side (`shard/replicate.rs`) drives it; this module has no I/O but
//! the store's.
//!
//! Invariants: every call into the replica passes the topic's own log as a
//! [`ReplicatedLog`]; a publish waiting here is answered exactly once (by `Output::Acked`,
//! `Output::Failed`, or the topic's deletion); the controller's state is applied only when
//! newer than the one held.

use crate::storage::log::replica::{ReplicaStore, ReplicatedLog};
use crate::storage::log::TopicLog;
use replication::controller::TopicState as ControllerState;
use replication::ids::{BrokerId, Epoch};
use replication::replica::{Millis, Output, PublishId, Replica, ReplicaConfig, TopicState};
use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Milliseconds of the process's monotonic clock (the replicas' time).
pub fn now_ms() -> Millis {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as Millis
}

/// The replica's settings from the broker's flags and the topic's `min_insync`.
pub fn replica_config(min_insync: u32, durable: bool, timeout: Duration) -> ReplicaConfig {
    ReplicaConfig {
        min_insync: min_insync.max(1) as usize,
        durable,
        publish_timeout: timeout.as_millis().max(1) as Millis,
        // A batch is bounded in bytes by the frame (8 MiB): 64 records of at most the
        // message size limit the broker takes.
        ..ReplicaConfig::default()
    }
}

/// The replica protocol's view of the controller's decision.
pub fn replica_state(s: &ControllerState) -> TopicState {
    let mut replicas = s.replicas.clone();
    replicas.sort();
    TopicState {
        epoch: s.epoch,
        leader: s.leader,
        isr: s.isr.clone(),
        isr_version: s.isr_version,
        replicas,
    }
}

/// A replicated topic's replica and what waits on it.
pub struct TopicReplica {
    pub replica: Replica,
    pub store: ReplicaStore,
    /// The controller's decision last applied.
    pub controller: Option<ControllerState>,
    /// Publishes waiting for `Output::Acked` / `Output::Failed`, by the shard's numbering
    /// (who waits for each is the shard's business).
    pub waiting: HashSet<PublishId>,
    /// The in-sync proposal sent to the controller and not answered yet: `(epoch, number)`.
    pub proposal: Option<(Epoch, u64)>,
}

impl TopicReplica {
    pub fn new(
        me: BrokerId,
        incarnation: u64,
        config: ReplicaConfig,
        store: ReplicaStore,
    ) -> TopicReplica {
        let damaged = store.damaged();
        TopicReplica {
            replica: Replica::new(me, incarnation, config, damaged),
            store,
            controller: None,
            waiting: HashSet::new(),
            proposal: None,
        }
    }

    /// Runs `f` on the replica over `log`.
    pub fn with_log<R>(
        &mut self,
        log: &mut TopicLog,
        f: impl FnOnce(&mut Replica, &mut ReplicatedLog<'_>) -> R,
    ) -> R {
        let mut rlog = ReplicatedLog::new(log, &mut self.store);
        f(&mut self.replica, &mut rlog)
    }

    /// Applies the controller's decision `state` (if newer than the one held): as the answer
    /// to the pending in-sync proposal when it answers it, else as a new state.
    pub fn apply_controller(
        &mut self,
        log: &mut TopicLog,
        state: ControllerState,
        out: &mut Vec<Output>,
    ) {
        let now = now_ms();
        let rstate = replica_state(&state);
        let answers = self.proposal.filter(|p| state.answered >= *p);
        self.controller = Some(state);
        match answers {
            Some((_, proposal)) => {
                self.proposal = None;
                self.with_log(log, |r, l| {
                    r.on_alter_isr_answer(l, proposal, rstate, now, out)
                });
            }
            None => self.with_log(log, |r, l| r.on_state(l, rstate, now, out)),
        }
    }

    /// The controller refused the pending proposal before proposing it (this broker does
    /// not lead the topic as it knows it): answered with the state held.
    pub fn proposal_refused(&mut self, log: &mut TopicLog, proposal: u64, out: &mut Vec<Output>) {
        if self.proposal.map(|(_, p)| p) != Some(proposal) {
            return;
        }
        self.proposal = None;
        let Some(state) = self.controller.as_ref().map(replica_state) else {
            return;
        };
        let now = now_ms();
        self.with_log(log, |r, l| {
            r.on_alter_isr_answer(l, proposal, state, now, out)
        });
    }

    /// The seq below which channels may deliver: the leader's high watermark; `None` on a
    /// follower or an idle replica (nothing new is delivered).
    pub fn deliverable(&self) -> Option<u64> {
        self.replica.high_watermark()
    }
}

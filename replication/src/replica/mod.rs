//! One topic's replica on one broker, as its leader or a follower: the data path of
//! docs/design/replication.md, without I/O. The caller (a topic's owner shard, or the
//! simulation) owns the log and passes it into every call; it feeds in the controller's
//! decisions ([`TopicState`]), messages from the other replicas, timer ticks, publishes it
//! appended, and sync completions, and carries out the [`Output`]s.
//!
//! Invariants this module keeps (the submodules state their own):
//! - a replica acts only on the newest controller decision it has seen (by `(epoch,
//!   isr_version)`); it leads only the epoch the controller named it leader of, and a replica
//!   whose recovery cut a damaged suffix never leads until it has refetched it;
//! - a change of epoch ends the previous role: a leader fails its pending publishes, a follower
//!   resolves its log against the new leader's history before acknowledging anything;
//! - time only moves forward: a clock that jumps back is treated as standing still.

mod config;
mod epochs;
mod follower;
mod leader;
mod log;
mod mem_log;
mod messages;
mod mutation;
mod record;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use config::ReplicaConfig;
pub use epochs::{EpochHistory, EpochRegression};
pub use log::{LogError, ReplicaLog};
pub use mem_log::MemLog;
pub use messages::{Millis, Msg, Output, PublishError, PublishId, TopicState};
pub use record::{Batch, Record};

use crate::ids::{BrokerId, Epoch, Seq};
use follower::{Follower, FollowerMemory};
use leader::Leader;

#[derive(Debug)]
enum Role {
    /// No leader named, or this broker is not (or no longer) a replica.
    Idle,
    Leader(Leader),
    Follower(Follower),
}

/// A publish offered to a replica that does not lead its topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotLeader;

/// One topic's replica on one broker.
#[derive(Debug)]
pub struct Replica {
    me: BrokerId,
    config: ReplicaConfig,
    state: Option<TopicState>,
    role: Role,
    memory: FollowerMemory,
    now: Millis,
}

impl Replica {
    /// A replica starting on `me` in its `incarnation` (grows with every start of the broker
    /// process); `damaged` says recovery cut a damaged or missing suffix from the log (it then
    /// counts as in sync only once it has refetched).
    pub fn new(me: BrokerId, incarnation: u64, config: ReplicaConfig, damaged: bool) -> Replica {
        Replica {
            me,
            config,
            state: None,
            role: Role::Idle,
            memory: FollowerMemory {
                incarnation,
                known_hw: 0,
                damaged,
            },
            now: 0,
        }
    }

    fn observe(&mut self, now: Millis) -> Millis {
        self.now = self.now.max(now);
        self.now
    }

    /// The controller's decision as last applied.
    pub fn state(&self) -> Option<&TopicState> {
        self.state.as_ref()
    }

    /// The epoch this replica leads, if it leads: publishes are appended under it.
    pub fn leading(&self) -> Option<Epoch> {
        match &self.role {
            Role::Leader(l) => Some(l.epoch()),
            _ => None,
        }
    }

    /// The leader's high watermark (`None` on a follower).
    pub fn high_watermark(&self) -> Option<Seq> {
        match &self.role {
            Role::Leader(l) => Some(l.hw()),
            _ => None,
        }
    }

    /// The in-sync set the leader counts as confirmed (`None` on a follower).
    pub fn leader_isr(&self) -> Option<&[BrokerId]> {
        match &self.role {
            Role::Leader(l) => Some(l.isr()),
            _ => None,
        }
    }

    /// The leader this replica follows.
    pub fn following(&self) -> Option<BrokerId> {
        match &self.role {
            Role::Follower(f) => Some(f.leader()),
            _ => None,
        }
    }

    /// Whether the log still misses a suffix recovery cut.
    pub fn damaged(&self) -> bool {
        self.memory.damaged
    }

    /// A decision of the controller about this topic (older or equal ones are ignored).
    pub fn on_state(
        &mut self,
        log: &mut dyn ReplicaLog,
        state: TopicState,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        let now = self.observe(now);
        let current = self.state.as_ref().map(TopicState::version);
        if current.is_some_and(|c| state.version() <= c) {
            return;
        }
        let previous_leader = self.state.as_ref().and_then(|s| s.leader);
        let new_epoch =
            current.is_none_or(|c| state.epoch > c.0) || state.leader != previous_leader;
        let member = state.replicas.contains(&self.me);
        if !new_epoch && member {
            if let Role::Leader(l) = &mut self.role {
                l.on_state(&state, log, now);
                l.advance(log, now, &self.config, out);
            }
            self.state = Some(state);
            return;
        }
        if let Role::Leader(l) = &mut self.role {
            l.abandon(out);
        }
        self.role = match state.leader {
            _ if !member => Role::Idle,
            Some(l) if l == self.me && !self.memory.damaged => {
                let mut leader = Leader::new(self.me, &state, log, self.memory.known_hw, now);
                if self.config.durable && log.durable_end() < log.end() {
                    // The high watermark counts the leader's own durable end: a tail it took
                    // as a follower must not wait for the next publish to be synced.
                    log.request_sync();
                    out.push(Output::Sync);
                }
                leader.advance(log, now, &self.config, out);
                Role::Leader(leader)
            }
            Some(l) if l != self.me => Role::Follower(Follower::start(
                state.epoch,
                l,
                log,
                &mut self.memory,
                now,
                out,
            )),
            _ => Role::Idle,
        };
        self.state = Some(state);
    }

    /// The controller's answer to the [`Output::AlterIsr`] named `proposal`: its current
    /// decision about the topic. A newer one is applied as by [`Replica::on_state`]; one still
    /// at the proposal's `isr_version` means it was refused, and the leader may propose again
    /// from what it knows now. Until an answer, a proposal stands (its members count toward the
    /// high watermark) and is sent again.
    pub fn on_alter_isr_answer(
        &mut self,
        log: &mut dyn ReplicaLog,
        proposal: u64,
        state: TopicState,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        let (epoch, isr_version) = state.version();
        self.on_state(log, state, now, out);
        if let Role::Leader(l) = &mut self.role {
            l.on_refused(epoch, isr_version, proposal);
        }
    }

    /// A message from the same topic's replica on `from`.
    pub fn on_message(
        &mut self,
        log: &mut dyn ReplicaLog,
        from: BrokerId,
        msg: Msg,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        let now = self.observe(now);
        match &mut self.role {
            Role::Leader(l) => l.on_message(from, msg, log, now, &self.config, out),
            Role::Follower(f) => {
                f.on_message(from, msg, log, &mut self.memory, now, &self.config, out)
            }
            Role::Idle => {}
        }
    }

    /// The caller appended records up to `end` (under [`Replica::leading`]'s epoch) for a
    /// publish; its answer comes back as [`Output::Acked`] or [`Output::Failed`].
    pub fn published(
        &mut self,
        log: &mut dyn ReplicaLog,
        id: PublishId,
        end: Seq,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), NotLeader> {
        let now = self.observe(now);
        let Role::Leader(l) = &mut self.role else {
            return Err(NotLeader);
        };
        l.published(id, end, now, &self.config);
        if self.config.durable {
            log.request_sync();
            out.push(Output::Sync);
        }
        l.advance(log, now, &self.config, out);
        Ok(())
    }

    /// The log completed a sync.
    pub fn on_synced(&mut self, log: &mut dyn ReplicaLog, now: Millis, out: &mut Vec<Output>) {
        let now = self.observe(now);
        if self.config.durable && log.durable_end() < log.end() {
            log.request_sync();
            out.push(Output::Sync);
        }
        match &mut self.role {
            Role::Leader(l) => l.advance(log, now, &self.config, out),
            Role::Follower(f) => f.on_synced(log, &self.memory, out),
            Role::Idle => {}
        }
    }

    /// The timer (every few tens of milliseconds).
    pub fn tick(&mut self, log: &mut dyn ReplicaLog, now: Millis, out: &mut Vec<Output>) {
        let now = self.observe(now);
        match &mut self.role {
            Role::Leader(l) => l.tick(log, now, &self.config, out),
            Role::Follower(f) => f.tick(log, &self.memory, now, &self.config, out),
            Role::Idle => {}
        }
    }
}

//! One lookup's Raft node for the controller, over raft-rs' `RawNode`, without I/O: the caller
//! ticks it, steps it with the messages it receives, proposes entries, and carries out what
//! [`RaftNode::ready`] returns. It owns the applied [`Metadata`] and the recent deltas.
//!
//! Invariants the interface holds the caller to:
//! - what an [`Output`] asks to persist is written (with an fsync where `must_sync`) before the
//!   messages that depend on it exist: those (votes, append answers) come only out of
//!   [`Output::persisted`], and the `Output` borrows the node, so nothing else can be done to the
//!   node in between (raft-rs forbids stepping a node with a `Ready` outstanding);
//! - committed entries are applied in log order, each once per process life; after a restart the
//!   node replays them from the log the caller persisted, rebuilding the same metadata;
//! - the election timeout is fixed per node (`max_election_tick = min_election_tick + 1`): the
//!   caller draws it (from the simulation's seed, or the OS in production), since raft-rs's own
//!   draw cannot be seeded. Pre-vote and check-quorum are on, so a returning partitioned node
//!   cannot depose a working leader.

use raft::eraftpb::{ConfState, Entry as RaftEntry, EntryType, HardState, Message};
use raft::storage::MemStorage;
use raft::{RawNode, StateRole, Storage};

use super::metadata::{Entry, Metadata, Outcome, Refusal};
use super::view::DeltaLog;

/// A node's identity and timing.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's Raft id (non-zero).
    pub id: u64,
    /// Every voter's id, this one included.
    pub voters: Vec<u64>,
    /// Ticks without a leader before campaigning (fixed for this node).
    pub election_tick: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_tick: usize,
}

/// What the caller persisted: the Raft log and hard state to restart from.
#[derive(Debug, Clone, Default)]
pub struct Durable {
    pub hard_state: HardState,
    pub entries: Vec<RaftEntry>,
}

impl Durable {
    /// Writes what an [`Output`] asks for: entries replace the log from the first one's index.
    pub fn write(&mut self, persist: &Persist) {
        if let Some(first) = persist.entries.first() {
            let keep = self
                .entries
                .iter()
                .take_while(|e| e.index < first.index)
                .count();
            self.entries.truncate(keep);
            self.entries.extend_from_slice(&persist.entries);
        }
        if let Some(hs) = &persist.hard_state {
            self.hard_state = hs.clone();
        }
    }
}

/// Why the node refused an input.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("encoding an entry: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("an output's writes are not done yet: call ready() and persisted() first")]
    Unpersisted,
    #[error("the persisted log is not usable: {0}")]
    BadLog(&'static str),
}

/// A committed entry, applied.
#[derive(Debug, Clone)]
pub struct Applied {
    pub index: u64,
    pub term: u64,
    /// None: an entry of Raft's own (a new leader's empty entry), which the metadata ignores.
    pub entry: Option<Entry>,
    pub outcome: Option<Outcome>,
}

/// What to write before the node may go on.
#[derive(Debug, Clone, Default)]
pub struct Persist {
    /// Log entries to append, replacing any from the first one's index on.
    pub entries: Vec<RaftEntry>,
    /// The hard state to store (term, vote, commit).
    pub hard_state: Option<HardState>,
    /// Whether the write must be fsynced before [`Output::persisted`] (entries, term or vote).
    pub must_sync: bool,
}

/// What the node asks of its caller: send `messages` now, write `persist`, then call
/// [`Output::persisted`] for the rest. `applied` lists what the metadata applied. Dropping it
/// without `persisted()` loses the messages that waited for the writes (as a network may); the
/// node then takes no input until the next `ready()` has offered the writes again and they are
/// declared done.
///
/// The node cannot be used while an `Output` is held:
///
/// ```compile_fail
/// # use replication::controller::RaftNode;
/// # fn f(node: &mut RaftNode) {
/// if let Some(out) = node.ready() {
///     node.tick(); // the output still borrows the node
///     let _ = out.persisted();
/// }
/// # }
/// ```
#[must_use = "persist, then call persisted(): the node is stalled until then"]
pub struct Output<'a> {
    pub messages: Vec<Message>,
    pub persist: Persist,
    pub applied: Vec<Applied>,
    node: &'a mut RaftNode,
    /// Taken by `persisted()`; if still here when dropped, it goes back to the node.
    ready: Option<raft::Ready>,
}

impl Drop for Output<'_> {
    fn drop(&mut self) {
        if let Some(ready) = self.ready.take() {
            self.node.pending = Some((ready, std::mem::take(&mut self.persist)));
        }
    }
}

/// What follows once an [`Output`]'s writes are done: messages to send, and entries that
/// became applicable.
#[derive(Debug, Default)]
pub struct AfterPersist {
    pub messages: Vec<Message>,
    pub applied: Vec<Applied>,
    /// A newer commit index, to store with the hard state; no fsync needed.
    pub commit: Option<u64>,
}

impl Output<'_> {
    /// Declares `persist` written (and fsynced if it said so); returns the messages that had to
    /// wait for it, and what else became ready to send or apply.
    pub fn persisted(mut self) -> AfterPersist {
        let persist = std::mem::take(&mut self.persist);
        let Some(mut ready) = self.ready.take() else {
            return AfterPersist::default();
        };
        let node = &mut *self.node;
        {
            let mut store = node.raw.mut_store().wl();
            if let Err(e) = store.append(&persist.entries) {
                tracing::error!(error = %e, "controller raft: appending to the in-memory log");
            }
            if let Some(hs) = persist.hard_state {
                store.set_hardstate(hs);
            }
        }
        let mut after = AfterPersist {
            messages: ready.take_persisted_messages(),
            ..AfterPersist::default()
        };
        let mut light = node.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            node.raw
                .mut_store()
                .wl()
                .mut_hard_state()
                .set_commit(commit);
            after.commit = Some(commit);
        }
        after.messages.extend(light.take_messages());
        after.applied = node.apply(light.take_committed_entries());
        node.raw.advance_apply();
        after
    }
}

/// One controller node.
pub struct RaftNode {
    raw: RawNode<MemStorage>,
    metadata: Metadata,
    deltas: DeltaLog,
    applied: u64,
    /// An output dropped before its writes were declared done: offered again by `ready()`, and
    /// until then the node takes no input (raft-rs forbids it with a `Ready` outstanding).
    pending: Option<(raft::Ready, Persist)>,
}

impl RaftNode {
    /// Starts (or restarts) from what the caller persisted; a fresh node passes
    /// `Durable::default()`. Every node of a cluster starts with the same voters.
    pub fn new(cfg: &NodeConfig, durable: Durable) -> Result<Self, NodeError> {
        // raft-rs panics on a log with holes or a commit past its end: refuse such a log here.
        if durable
            .entries
            .iter()
            .enumerate()
            .any(|(i, e)| e.index != i as u64 + 1)
        {
            return Err(NodeError::BadLog(
                "entries must run from index 1 without gaps (compaction is not supported yet)",
            ));
        }
        if durable.hard_state.commit > durable.entries.len() as u64 {
            return Err(NodeError::BadLog("the commit index is past the last entry"));
        }
        let store = MemStorage::new_with_conf_state(ConfState::from((cfg.voters.clone(), vec![])));
        {
            let mut core = store.wl();
            core.append(&durable.entries)?;
            core.set_hardstate(durable.hard_state);
        }
        let config = raft::Config {
            id: cfg.id,
            election_tick: cfg.election_tick,
            heartbeat_tick: cfg.heartbeat_tick,
            min_election_tick: cfg.election_tick,
            max_election_tick: cfg.election_tick + 1,
            pre_vote: true,
            check_quorum: true,
            max_inflight_msgs: 64,
            max_size_per_msg: 1 << 20,
            applied: 0,
            ..raft::Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&config, store, &logger)?;
        Ok(Self {
            raw,
            metadata: Metadata::default(),
            deltas: DeltaLog::default(),
            applied: 0,
            pending: None,
        })
    }

    /// One tick of the node's clock.
    pub fn tick(&mut self) {
        if self.pending.is_none() {
            self.raw.tick();
        }
    }

    /// A message from a peer. Messages only a node gives itself are refused.
    pub fn step(&mut self, msg: Message) -> Result<(), NodeError> {
        if self.pending.is_some() {
            return Err(NodeError::Unpersisted);
        }
        Ok(self.raw.step(msg)?)
    }

    /// Proposes an entry; it takes effect only once committed and applied. A node that knows
    /// no leader drops it (the caller retries).
    pub fn propose(&mut self, entry: &Entry) -> Result<(), NodeError> {
        if self.pending.is_some() {
            return Err(NodeError::Unpersisted);
        }
        let data = serde_json::to_vec(entry)?;
        Ok(self.raw.propose(Vec::new(), data)?)
    }

    /// The work pending, if any.
    pub fn ready(&mut self) -> Option<Output<'_>> {
        if let Some((ready, persist)) = self.pending.take() {
            return Some(Output {
                messages: Vec::new(),
                persist,
                applied: Vec::new(),
                node: self,
                ready: Some(ready),
            });
        }
        if !self.raw.has_ready() {
            return None;
        }
        let mut ready = self.raw.ready();
        if !ready.snapshot().is_empty() {
            // Never produced: the log is not compacted, so no peer sends a snapshot.
            tracing::error!("controller raft: a snapshot arrived; snapshots are not supported");
        }
        let messages = ready.take_messages();
        let committed = ready.take_committed_entries();
        let persist = Persist {
            entries: ready.take_entries(),
            hard_state: ready.hs().cloned(),
            must_sync: ready.must_sync(),
        };
        let applied = self.apply(committed);
        Some(Output {
            messages,
            persist,
            applied,
            node: self,
            ready: Some(ready),
        })
    }

    fn apply(&mut self, committed: Vec<RaftEntry>) -> Vec<Applied> {
        let mut out = Vec::with_capacity(committed.len());
        for e in committed {
            if e.index <= self.applied {
                continue;
            }
            self.applied = e.index;
            let mut applied = Applied {
                index: e.index,
                term: e.term,
                entry: None,
                outcome: None,
            };
            if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
                match serde_json::from_slice::<Entry>(&e.data) {
                    Ok(entry) => {
                        let outcome = self.metadata.apply(&entry);
                        if let Outcome::Applied(delta) = &outcome {
                            self.deltas.push(delta.clone());
                        }
                        applied.entry = Some(entry);
                        applied.outcome = Some(outcome);
                    }
                    Err(err) => {
                        tracing::error!(index = e.index, error = %err, "controller raft: undecodable entry");
                        applied.outcome = Some(Outcome::Refused(Refusal::Undecodable));
                    }
                }
            }
            out.push(applied);
        }
        out
    }

    /// The metadata as of the last applied entry.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The recent deltas.
    pub fn deltas(&self) -> &DeltaLog {
        &self.deltas
    }

    /// The index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    pub fn id(&self) -> u64 {
        self.raw.raft.id
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The leader this node knows of (0: none).
    pub fn leader_id(&self) -> u64 {
        self.raw.raft.leader_id
    }

    /// Whether this node leads and has applied its own term's first entry, so that its metadata
    /// holds everything earlier leaders committed.
    pub fn leads_current(&self) -> bool {
        self.is_leader()
            && self
                .raw
                .store()
                .term(self.applied)
                .is_ok_and(|t| t == self.raw.raft.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BrokerId;

    /// Three nodes on a perfect network: each node's writes go to its `Durable`.
    struct Cluster {
        nodes: Vec<RaftNode>,
        disks: Vec<Durable>,
        cfgs: Vec<NodeConfig>,
    }

    impl Cluster {
        fn new() -> Self {
            let cfgs: Vec<NodeConfig> = (1..=3)
                .map(|id| NodeConfig {
                    id,
                    voters: vec![1, 2, 3],
                    election_tick: 10 + id as usize * 3,
                    heartbeat_tick: 2,
                })
                .collect();
            let nodes = cfgs
                .iter()
                .map(|c| RaftNode::new(c, Durable::default()))
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_default();
            assert_eq!(nodes.len(), 3);
            Self {
                nodes,
                disks: vec![Durable::default(); 3],
                cfgs,
            }
        }

        fn round(&mut self) {
            let mut inbox = Vec::new();
            for (node, disk) in self.nodes.iter_mut().zip(self.disks.iter_mut()) {
                node.tick();
                while let Some(mut out) = node.ready() {
                    inbox.append(&mut out.messages);
                    disk.write(&out.persist);
                    let mut after = out.persisted();
                    inbox.append(&mut after.messages);
                    if let Some(c) = after.commit {
                        disk.hard_state.commit = c;
                    }
                }
            }
            for m in inbox {
                let to = m.to as usize - 1;
                let _ = self.nodes[to].step(m);
            }
        }

        fn leader(&self) -> Option<usize> {
            self.nodes.iter().position(|n| n.leads_current())
        }
    }

    #[test]
    fn a_cluster_commits_and_a_restarted_node_replays_the_same_metadata() {
        let mut c = Cluster::new();
        for _ in 0..100 {
            c.round();
        }
        let l = c.leader();
        assert!(l.is_some(), "no leader");
        let l = l.unwrap_or(0);
        for e in [
            Entry::RegisterBroker {
                id: BrokerId(1),
                incarnation: 1,
                addresses: vec!["a".into()],
                damaged: vec![],
            },
            Entry::RegisterBroker {
                id: BrokerId(2),
                incarnation: 1,
                addresses: vec!["b".into()],
                damaged: vec![],
            },
            Entry::CreateTopic {
                name: "t".into(),
                replicas: 2,
                min_insync: 2,
            },
        ] {
            assert!(c.nodes[l].propose(&e).is_ok());
        }
        for _ in 0..20 {
            c.round();
        }
        let md = c.nodes[l].metadata().clone();
        assert_eq!(md.version, 3);
        for n in &c.nodes {
            assert_eq!(*n.metadata(), md);
        }
        // A follower restarts from its disk: it replays the committed log to the same state.
        let f = (l + 1) % 3;
        let restarted = RaftNode::new(&c.cfgs[f], c.disks[f].clone());
        assert!(restarted.is_ok());
        c.nodes[f] = restarted.unwrap_or_else(|_| unreachable!());
        for _ in 0..30 {
            c.round();
        }
        assert_eq!(*c.nodes[f].metadata(), md);
    }

    #[test]
    fn an_output_dropped_unpersisted_is_offered_again() {
        let cfg = NodeConfig {
            id: 1,
            voters: vec![1],
            election_tick: 10,
            heartbeat_tick: 2,
        };
        let mut node = RaftNode::new(&cfg, Durable::default()).unwrap_or_else(|_| unreachable!());
        let mut disk = Durable::default();
        for _ in 0..12 {
            node.tick();
        }
        let first = node.ready().map(|out| out.persist.clone());
        assert!(matches!(
            node.step(Message::default()),
            Err(NodeError::Unpersisted)
        ));
        let again = node.ready().map(|out| {
            disk.write(&out.persist);
            let p = out.persist.clone();
            let _ = out.persisted();
            p
        });
        let (Some(first), Some(again)) = (first, again) else {
            panic!("no ready");
        };
        assert_eq!(first.hard_state, again.hard_state);
        assert_eq!(first.entries, again.entries);
        assert!(!again.entries.is_empty() && again.must_sync);
        while let Some(out) = node.ready() {
            disk.write(&out.persist);
            let _ = out.persisted();
        }
        assert!(node.leads_current());
    }

    #[test]
    fn a_log_with_holes_is_refused() {
        let cfg = NodeConfig {
            id: 1,
            voters: vec![1],
            election_tick: 10,
            heartbeat_tick: 2,
        };
        let e = RaftEntry {
            index: 2,
            term: 1,
            ..RaftEntry::default()
        };
        let durable = Durable {
            hard_state: HardState::default(),
            entries: vec![e],
        };
        assert!(matches!(
            RaftNode::new(&cfg, durable),
            Err(NodeError::BadLog(_))
        ));
    }
}

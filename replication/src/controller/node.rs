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
//!   node starts from the snapshot the caller persisted (if any) and replays the entries after
//!   it, rebuilding the same metadata;
//! - every `snapshot_every` applied entries the node snapshots its state machine (the metadata
//!   and the recent deltas) at the applied index and compacts its log below it, keeping
//!   `snapshot_margin` entries so a slightly lagging follower catches up from the log; a follower
//!   further behind receives the snapshot through raft-rs (`MsgSnapshot`), checked before it is
//!   taken, and replaces its metadata with it;
//! - the election timeout is fixed per node (`max_election_tick = min_election_tick + 1`): the
//!   caller draws it (from the simulation's seed, or the OS in production), since raft-rs's own
//!   draw cannot be seeded. Pre-vote and check-quorum are on, so a returning partitioned node
//!   cannot depose a working leader.

use std::collections::BTreeMap;

use raft::eraftpb::{Entry as RaftEntry, EntryType, HardState, Message, MessageType, Snapshot};
use raft::{ProgressState, RawNode, SnapshotStatus, StateRole, Storage};
use serde::{Deserialize, Serialize};

use super::log::{holds, LogStore};
use super::metadata::mutation::{self, Mutation};
use super::metadata::{Delta, Entry, Metadata, Outcome, Refusal};
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
    /// Applied entries between two snapshots (0: never snapshot, the log grows forever).
    pub snapshot_every: u64,
    /// Entries at or below a snapshot's index kept in the log, so that a follower that far
    /// behind catches up from the log instead of receiving the snapshot.
    pub snapshot_margin: u64,
}

impl Default for NodeConfig {
    /// Node 1 alone, with the production snapshot settings: callers set at least `id` and
    /// `voters`.
    fn default() -> Self {
        Self {
            id: 1,
            voters: vec![1],
            election_tick: 10,
            heartbeat_tick: 2,
            snapshot_every: 10_000,
            snapshot_margin: 1_000,
        }
    }
}

/// What the caller persisted: the Raft log, hard state and latest snapshot to restart from.
///
/// [`Durable::write`] is the reference of how a [`Persist`] changes it; a caller with files
/// applies the same steps in the same order (see [`Persist`] for why a crash between any two
/// of them restarts consistently).
#[derive(Debug, Clone, Default)]
pub struct Durable {
    pub hard_state: HardState,
    /// Contiguous; after a snapshot they may start at any index up to the snapshot's + 1.
    pub entries: Vec<RaftEntry>,
    /// The latest snapshot (None: none yet).
    pub snapshot: Option<Snapshot>,
}

impl Durable {
    /// Writes what an [`Output`] asks for, in this order: the snapshot (if the log does not
    /// hold its index at its term, the log goes: a leader's snapshot replaces a follower's
    /// stale log), then the log entries below `compact_below` go, then the entries (replacing
    /// the log from the first one's index), then the hard state.
    pub fn write(&mut self, persist: &Persist) {
        if let Some(snap) = &persist.snapshot {
            let (index, term) = (snap.get_metadata().index, snap.get_metadata().term);
            let newer = self
                .snapshot
                .as_ref()
                .is_none_or(|s| s.get_metadata().index < index);
            if newer {
                if !holds(&self.entries, index, term) {
                    self.entries.clear();
                }
                self.snapshot = Some(snap.clone());
            }
        }
        if let Some(below) = persist.compact_below {
            self.entries.retain(|e| e.index >= below);
        }
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
    #[error("a snapshot is not usable: {0}")]
    BadSnapshot(String),
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

/// What to write before the node may go on, in the order of the fields (as [`Durable::write`]
/// does):
///
/// 1. `snapshot`, written atomically and durably (a new file fsynced, renamed over the old one,
///    the directory fsynced), replacing the older one; if the log does not hold the snapshot's
///    index at the snapshot's term, the whole log is dropped too;
/// 2. the log entries below `compact_below`, dropped (only once the snapshot is durable);
/// 3. `entries`, appended;
/// 4. `hard_state`.
///
/// A crash between any two steps restarts consistently, because [`RaftNode::new`] applies the
/// same rules to whatever it finds: after 1, a snapshot with the old log (the log is kept only
/// where it holds the snapshot's index at its term, which by Raft's log matching makes every
/// entry up to it the committed one; otherwise the snapshot replaces it, as step 1 would have);
/// after 2, fewer entries below the snapshot (they are in it); after 3, new entries with an
/// older hard state (a commit index below the snapshot's is raised to it, since a snapshot holds
/// committed entries only; a term the entries carry that the hard state lacks is taken without
/// a vote, since the vote of that term was never sent: messages wait for these writes). A
/// snapshot is never needed before the entries it covers are durable: they were, before they
/// were applied.
#[derive(Debug, Clone, Default)]
pub struct Persist {
    /// Log entries to append, replacing any from the first one's index on.
    pub entries: Vec<RaftEntry>,
    /// The hard state to store (term, vote, commit).
    pub hard_state: Option<HardState>,
    /// Whether the write must be fsynced before [`Output::persisted`] (entries, term or vote,
    /// a snapshot).
    pub must_sync: bool,
    /// A snapshot to store, replacing the older one: one this node took of its applied
    /// metadata, or one received from the leader.
    pub snapshot: Option<Snapshot>,
    /// Once `snapshot` is durable, log entries with a lower index may be dropped (the entry at
    /// this index stays: its term anchors the log).
    pub compact_below: Option<u64>,
}

/// What a snapshot's data holds: the state machine as of its index.
#[derive(Serialize, Deserialize)]
struct SnapshotState {
    metadata: Metadata,
    deltas: Vec<Delta>,
}

/// A snapshot's data: the crc32 (little-endian) of the JSON that follows.
fn encode_state(metadata: &Metadata, deltas: &DeltaLog) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(&SnapshotState {
        metadata: metadata.clone(),
        deltas: deltas.iter().cloned().collect(),
    })?;
    let mut data = Vec::with_capacity(json.len() + 4);
    data.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
    data.extend_from_slice(&json);
    Ok(data)
}

pub(crate) fn decode_state(data: &[u8]) -> Result<(Metadata, DeltaLog), NodeError> {
    let bad = |why: String| NodeError::BadSnapshot(why);
    let (crc, json) = data
        .split_first_chunk::<4>()
        .ok_or_else(|| bad("shorter than its checksum".into()))?;
    if u32::from_le_bytes(*crc) != crc32fast::hash(json) {
        return Err(bad("checksum mismatch".into()));
    }
    let state: SnapshotState =
        serde_json::from_slice(json).map_err(|e| bad(format!("undecodable: {e}")))?;
    let deltas =
        DeltaLog::restore(state.deltas, state.metadata.version).map_err(|e| bad(e.into()))?;
    Ok((state.metadata, deltas))
}

/// What the node asks of its caller: send `messages` now, write `persist`, then call
/// [`Output::persisted`] for the rest. `applied` lists what the metadata applied, after the
/// snapshot at `installed` if the node just replaced its metadata with a leader's snapshot.
/// Dropping it without `persisted()` loses the messages that waited for the writes (as a
/// network may); the node then takes no input until the next `ready()` has offered the writes
/// again and they are declared done.
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
    /// The index of a snapshot received from the leader that now is the node's metadata (the
    /// entries up to it are not listed in `applied`).
    pub installed: Option<u64>,
    node: &'a mut RaftNode,
    /// raft-rs' part of the work (None: only a snapshot of this node's to write).
    ready: Option<raft::Ready>,
    /// Set by `persisted()`; if unset when dropped, the writes go back to the node.
    done: bool,
}

impl Drop for Output<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.node.pending = Some((self.ready.take(), std::mem::take(&mut self.persist)));
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
        self.done = true;
        let persist = std::mem::take(&mut self.persist);
        let node = &mut *self.node;
        {
            let store = node.raw.mut_store();
            if let Some(snap) = &persist.snapshot {
                store.put_snapshot(snap, persist.compact_below);
            }
            if let Err(e) = store.append(&persist.entries) {
                tracing::error!(error = %e, "controller raft: appending to the in-memory log");
            }
            if let Some(hs) = persist.hard_state {
                store.set_hard_state(hs);
            }
        }
        let Some(mut ready) = self.ready.take() else {
            return AfterPersist::default();
        };
        let mut after = AfterPersist {
            messages: ready.take_persisted_messages(),
            ..AfterPersist::default()
        };
        let mut light = node.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            node.raw.mut_store().set_commit(commit);
            after.commit = Some(commit);
        }
        after.messages.extend(light.take_messages());
        after.applied = node.apply(light.take_committed_entries());
        node.raw.advance_apply();
        after
    }
}

/// Snapshots taken and received, and log entries held (for metrics and the simulation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Snapshots this node took of its metadata.
    pub taken: u64,
    /// Snapshots received from a leader that replaced this node's metadata.
    pub installed: u64,
    /// Snapshots this node, leading, had raft-rs send to a follower.
    pub sent: u64,
    /// Sends given up as lost (no answer in time, or the caller reported a failure).
    pub failed: u64,
    /// Whether this node started from a persisted snapshot.
    pub restarted_from_snapshot: bool,
}

/// One controller node.
pub struct RaftNode {
    raw: RawNode<LogStore>,
    metadata: Metadata,
    deltas: DeltaLog,
    applied: u64,
    snapshot_every: u64,
    snapshot_margin: u64,
    /// Ticks after which a snapshot sent and not acknowledged counts as lost.
    snapshot_timeout: u64,
    ticks: u64,
    /// Followers being sent a snapshot (leader only), and the tick it was first seen.
    snapshot_since: BTreeMap<u64, u64>,
    stats: SnapshotStats,
    /// An output dropped before its writes were declared done: offered again by `ready()`, and
    /// until then the node takes no input (raft-rs forbids it with a `Ready` outstanding).
    pending: Option<(Option<raft::Ready>, Persist)>,
}

impl RaftNode {
    /// Starts (or restarts) from what the caller persisted; a fresh node passes
    /// `Durable::default()`. Every node of a cluster starts with the same voters.
    pub fn new(cfg: &NodeConfig, durable: Durable) -> Result<Self, NodeError> {
        let Durable {
            hard_state,
            entries,
            snapshot,
        } = durable;
        let snapshot = snapshot.filter(|s| s.get_metadata().index > 0);
        let (mut metadata, mut deltas, mut applied) = (Metadata::default(), DeltaLog::default(), 0);
        if let Some(snap) = &snapshot {
            (metadata, deltas) = decode_state(&snap.data)?;
            applied = snap.get_metadata().index;
            if mutation::active(Mutation::RestartIgnoresSnapshot) {
                (metadata, deltas) = (Metadata::default(), DeltaLog::default());
            }
        }
        let stats = SnapshotStats {
            restarted_from_snapshot: snapshot.is_some(),
            ..SnapshotStats::default()
        };
        // raft-rs panics on a log with holes or a commit past its end: refused here.
        let store = LogStore::recover(
            &cfg.voters,
            hard_state,
            snapshot,
            entries,
            cfg.snapshot_margin,
        )
        .map_err(NodeError::BadLog)?;
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
            applied,
            ..raft::Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&config, store, &logger)?;
        Ok(Self {
            raw,
            metadata,
            deltas,
            applied,
            snapshot_every: cfg.snapshot_every,
            snapshot_margin: cfg.snapshot_margin,
            snapshot_timeout: 2 * cfg.election_tick as u64,
            ticks: 0,
            snapshot_since: BTreeMap::new(),
            stats,
            pending: None,
        })
    }

    /// One tick of the node's clock. A leader also gives up on a snapshot sent to a follower
    /// that has not caught up within two election timeouts (the message or its answer was lost
    /// where the caller could not tell), so raft-rs sends again.
    pub fn tick(&mut self) {
        if self.pending.is_some() {
            return;
        }
        self.raw.tick();
        self.ticks += 1;
        if self.raw.raft.state != StateRole::Leader {
            self.snapshot_since.clear();
            return;
        }
        let now = self.ticks;
        let mut sending = BTreeMap::new();
        for (id, pr) in self.raw.raft.prs().iter() {
            if pr.state == ProgressState::Snapshot {
                let since = self.snapshot_since.get(id).copied().unwrap_or_else(|| {
                    self.stats.sent += 1;
                    now
                });
                sending.insert(*id, since);
            }
        }
        self.snapshot_since = sending;
        let lost: Vec<u64> = self
            .snapshot_since
            .iter()
            .filter(|(_, since)| now - **since > self.snapshot_timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            self.snapshot_since.remove(&id);
            self.stats.failed += 1;
            self.raw.report_snapshot(id, SnapshotStatus::Failure);
        }
    }

    /// The caller's word on a snapshot it carried to `to` (a `MsgSnapshot` of this node's):
    /// delivered, or lost (the connection failed). raft-rs holds a follower's log replication
    /// until it learns either; without a word, [`RaftNode::tick`] counts it lost in time.
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) -> Result<(), NodeError> {
        if self.pending.is_some() {
            return Err(NodeError::Unpersisted);
        }
        if !delivered {
            self.stats.failed += 1;
        }
        self.snapshot_since.remove(&to);
        let status = if delivered {
            SnapshotStatus::Finish
        } else {
            SnapshotStatus::Failure
        };
        self.raw.report_snapshot(to, status);
        Ok(())
    }

    /// A message from a peer. Messages only a node gives itself are refused, and so is a
    /// snapshot whose data does not decode (the leader sends it again).
    pub fn step(&mut self, msg: Message) -> Result<(), NodeError> {
        if self.pending.is_some() {
            return Err(NodeError::Unpersisted);
        }
        if msg.get_msg_type() == MessageType::MsgSnapshot {
            decode_state(&msg.get_snapshot().data)?;
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
                installed: None,
                node: self,
                ready,
                done: false,
            });
        }
        if !self.raw.has_ready() {
            let persist = self.snapshot_if_due()?;
            return Some(Output {
                messages: Vec::new(),
                persist,
                applied: Vec::new(),
                installed: None,
                node: self,
                ready: None,
                done: false,
            });
        }
        let mut ready = self.raw.ready();
        let mut installed = None;
        let mut snapshot = None;
        if !ready.snapshot().is_empty() {
            let snap = ready.snapshot().clone();
            installed = self.install(&snap);
            snapshot = Some(snap);
        }
        let messages = ready.take_messages();
        let committed = ready.take_committed_entries();
        let mut persist = Persist {
            entries: ready.take_entries(),
            hard_state: ready.hs().cloned(),
            must_sync: ready.must_sync(),
            snapshot,
            compact_below: None,
        };
        let applied = self.apply(committed);
        if persist.snapshot.is_none() {
            if let Some(own) = self.snapshot_if_due() {
                persist.snapshot = own.snapshot;
                persist.compact_below = own.compact_below;
                persist.must_sync = true;
            }
        }
        Some(Output {
            messages,
            persist,
            applied,
            installed,
            node: self,
            ready: Some(ready),
            done: false,
        })
    }

    /// A leader's snapshot, which raft-rs has taken in place of this node's log: it becomes the
    /// metadata (its data was checked when the message arrived).
    fn install(&mut self, snap: &Snapshot) -> Option<u64> {
        let index = snap.get_metadata().index;
        match decode_state(&snap.data) {
            Ok((metadata, deltas)) => {
                if !mutation::active(Mutation::InstallKeepsMetadata) {
                    self.metadata = metadata;
                    self.deltas = deltas;
                }
                self.applied = index;
                self.stats.installed += 1;
                tracing::info!(
                    index,
                    "controller raft: installed a snapshot from the leader"
                );
                Some(index)
            }
            Err(e) => {
                // Not reachable: step() refuses a snapshot that does not decode.
                tracing::error!(index, error = %e, "controller raft: a snapshot to install does not decode");
                None
            }
        }
    }

    /// This node's snapshot of its applied state, if `snapshot_every` entries were applied
    /// since the last one, and the compaction that goes with it.
    fn snapshot_if_due(&mut self) -> Option<Persist> {
        let last = self.raw.store().snapshot_index();
        if self.snapshot_every == 0 || self.applied < last + self.snapshot_every {
            return None;
        }
        let index = self.applied;
        let term = match self.raw.store().term(index) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(index, error = %e, "controller raft: no term for the applied index");
                return None;
            }
        };
        let data = match encode_state(&self.metadata, &self.deltas) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(index, error = %e, "controller raft: encoding a snapshot");
                return None;
            }
        };
        let mut snap = Snapshot {
            data: data.into(),
            ..Snapshot::default()
        };
        let meta = snap.mut_metadata();
        meta.index = if mutation::active(Mutation::SnapshotWrongIndex) {
            index.saturating_sub(1)
        } else {
            index
        };
        meta.term = term;
        meta.set_conf_state(self.raw.store().conf_state().clone());
        self.stats.taken += 1;
        tracing::debug!(index, "controller raft: snapshot taken");
        Some(Persist {
            must_sync: true,
            snapshot: Some(snap),
            compact_below: Some(index.saturating_sub(self.snapshot_margin).max(1)),
            ..Persist::default()
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
                            if let Entry::RegisterBroker {
                                id,
                                incarnation,
                                damaged,
                                ..
                            } = &entry
                            {
                                if !damaged.is_empty() {
                                    tracing::info!(
                                        broker = id.0,
                                        incarnation,
                                        topics = ?damaged,
                                        "controller: a broker registered with logs that may miss \
                                         a suffix; it left their in-sync and eligible sets"
                                    );
                                }
                            }
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

    /// Log entries held in memory (those after the compaction point).
    pub fn log_len(&self) -> usize {
        self.raw.store().len()
    }

    /// The index of the latest snapshot taken or installed (0: none).
    pub fn snapshot_index(&self) -> u64 {
        self.raw.store().snapshot_index()
    }

    pub fn snapshot_stats(&self) -> SnapshotStats {
        self.stats
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
        /// A node cut off from the others (its messages, both ways, are lost).
        cut: Option<usize>,
        /// Registrations proposed so far (the next one's incarnation follows).
        registered: u64,
        /// The first writes with a snapshot: the node, its disk before, the write.
        writes: Vec<(usize, Durable, Persist)>,
    }

    impl Cluster {
        fn new() -> Self {
            Self::with_snapshots(0, 0)
        }

        fn with_snapshots(snapshot_every: u64, snapshot_margin: u64) -> Self {
            let cfgs: Vec<NodeConfig> = (1..=3)
                .map(|id| NodeConfig {
                    id,
                    voters: vec![1, 2, 3],
                    election_tick: 10 + id as usize * 3,
                    heartbeat_tick: 2,
                    snapshot_every,
                    snapshot_margin,
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
                cut: None,
                registered: 0,
                writes: Vec::new(),
            }
        }

        fn round(&mut self) {
            let mut inbox = Vec::new();
            for (i, (node, disk)) in self.nodes.iter_mut().zip(self.disks.iter_mut()).enumerate() {
                node.tick();
                while let Some(mut out) = node.ready() {
                    inbox.append(&mut out.messages);
                    if out.persist.snapshot.is_some() && self.writes.len() < 64 {
                        self.writes.push((i, disk.clone(), out.persist.clone()));
                    }
                    disk.write(&out.persist);
                    let mut after = out.persisted();
                    inbox.append(&mut after.messages);
                    if let Some(c) = after.commit {
                        disk.hard_state.commit = c;
                    }
                }
            }
            for m in inbox {
                let (from, to) = (m.from as usize - 1, m.to as usize - 1);
                if self.cut == Some(from) || self.cut == Some(to) {
                    continue;
                }
                let snapshot = m.get_msg_type() == MessageType::MsgSnapshot;
                let _ = self.nodes[to].step(m);
                if snapshot {
                    let _ = self.nodes[from].report_snapshot(to as u64 + 1, true);
                }
            }
        }

        /// Proposes `n` registrations (each a new incarnation of one broker, so each applies)
        /// through the leader, a few per round.
        fn register(&mut self, n: u64, mut each_round: impl FnMut(&Self)) {
            let mut done = 0;
            for _ in 0..20 * n {
                if done >= n {
                    break;
                }
                self.round();
                each_round(self);
                let Some(l) = self.leader() else { continue };
                for _ in 0..5 {
                    done += 1;
                    self.registered += 1;
                    let e = Entry::RegisterBroker {
                        id: BrokerId(9),
                        incarnation: self.registered,
                        addresses: vec!["h9:4150".into()],
                        damaged: vec![],
                    };
                    assert!(self.nodes[l].propose(&e).is_ok());
                }
            }
            for _ in 0..30 {
                self.round();
                each_round(self);
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
            ..NodeConfig::default()
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
            ..NodeConfig::default()
        };
        let e = RaftEntry {
            index: 2,
            term: 1,
            ..RaftEntry::default()
        };
        let durable = Durable {
            hard_state: HardState::default(),
            entries: vec![e],
            snapshot: None,
        };
        assert!(matches!(
            RaftNode::new(&cfg, durable),
            Err(NodeError::BadLog(_))
        ));
    }

    #[test]
    fn the_log_held_stays_bounded_with_snapshots() {
        const EVERY: u64 = 50;
        const MARGIN: u64 = 10;
        // At most: the margin, the entries since the last snapshot, and a round's proposals
        // not yet applied.
        let bound = (EVERY + MARGIN + 20) as usize;
        let mut c = Cluster::with_snapshots(EVERY, MARGIN);
        let mut most = 0;
        c.register(3_000, |c| {
            for (n, d) in c.nodes.iter().zip(&c.disks) {
                most = most.max(n.log_len()).max(d.entries.len());
            }
        });
        assert!(most <= bound, "{most} log entries held, bound {bound}");
        let md = c.nodes[0].metadata().clone();
        assert_eq!(md.version, 3_000);
        for n in &c.nodes {
            assert_eq!(*n.metadata(), md);
            assert!(n.snapshot_stats().taken >= 3_000 / EVERY - 1);
        }
        // Without snapshots the same load keeps every entry.
        let mut c = Cluster::new();
        let mut most = 0;
        c.register(3_000, |c| most = most.max(c.nodes[0].log_len()));
        assert!(most >= 3_000, "{most}");
    }

    #[test]
    fn a_lagging_follower_installs_a_snapshot_and_restarts_from_its_own() {
        let mut c = Cluster::with_snapshots(20, 5);
        c.register(10, |_| {});
        let l = c.leader().unwrap_or(0);
        let f = (l + 1) % 3;
        let before = c.nodes[f].applied_index();
        c.cut = Some(f);
        c.register(200, |_| {});
        c.cut = None;
        for _ in 0..100 {
            c.round();
        }
        let md = c.nodes[l].metadata().clone();
        assert_eq!(md.version, 210);
        assert_eq!(*c.nodes[f].metadata(), md);
        let stats = c.nodes[f].snapshot_stats();
        assert!(stats.installed >= 1, "{stats:?}");
        assert!(c.nodes[f].snapshot_index() > before + 5);
        assert!(c.nodes[l].snapshot_stats().sent >= 1);
        // Its disk holds the leader's snapshot, then its own later ones, and a short log: a
        // restart resumes from there to the same metadata.
        let disk = c.disks[f].clone();
        let snap_index = disk.snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
        assert!(
            snap_index > 0 && disk.entries.len() < 40,
            "{}",
            disk.entries.len()
        );
        let restarted = RaftNode::new(&c.cfgs[f], disk);
        assert!(restarted.is_ok(), "{:?}", restarted.err());
        c.nodes[f] = restarted.unwrap_or_else(|_| unreachable!());
        assert!(c.nodes[f].snapshot_stats().restarted_from_snapshot);
        assert!(c.nodes[f].applied_index() >= snap_index);
        for _ in 0..50 {
            c.round();
        }
        assert_eq!(*c.nodes[f].metadata(), md);
        // The whole cluster restarts from its disks, and goes on.
        for i in 0..3 {
            let n = RaftNode::new(&c.cfgs[i], c.disks[i].clone());
            c.nodes[i] = n.unwrap_or_else(|e| panic!("node {i}: {e}"));
        }
        c.register(30, |_| {});
        let md = c.nodes[0].metadata();
        assert_eq!(md.version, 240);
        assert!(c.nodes.iter().all(|n| n.metadata() == md));
    }

    fn entry(index: u64, term: u64) -> RaftEntry {
        RaftEntry {
            index,
            term,
            ..RaftEntry::default()
        }
    }

    /// A snapshot at index 5, term 2, of metadata at version 3.
    fn snapshot_at_5() -> Snapshot {
        let md = Metadata {
            version: 3,
            ..Metadata::default()
        };
        let mut snap = Snapshot {
            data: encode_state(&md, &DeltaLog::default())
                .unwrap_or_default()
                .into(),
            ..Snapshot::default()
        };
        snap.mut_metadata().index = 5;
        snap.mut_metadata().term = 2;
        snap
    }

    #[test]
    fn a_restart_keeps_the_log_only_where_it_holds_the_snapshot() {
        let cfg = NodeConfig::default();
        let hs = |term, commit| HardState {
            term,
            vote: 1,
            commit,
            ..HardState::default()
        };
        // A crash after the snapshot was written, before the divergent log was dropped: the
        // snapshot replaces the log; the commit and term rise to it (without a vote).
        let divergent = Durable {
            hard_state: hs(1, 3),
            entries: (1..=7).map(|i| entry(i, 1)).collect(),
            snapshot: Some(snapshot_at_5()),
        };
        let n = RaftNode::new(&cfg, divergent);
        let n = n.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (n.applied_index(), n.log_len(), n.metadata().version),
            (5, 0, 3)
        );
        assert_eq!((n.raw.raft.term, n.raw.raft.vote), (2, 0));
        // A log that holds the snapshot's index at its term is kept past it, and below it up
        // to the margin.
        let matching = Durable {
            hard_state: hs(2, 6),
            entries: (1..=7)
                .map(|i| entry(i, if i < 4 { 1 } else { 2 }))
                .collect(),
            snapshot: Some(snapshot_at_5()),
        };
        let cfg1 = NodeConfig {
            snapshot_margin: 1,
            ..NodeConfig::default()
        };
        let n = RaftNode::new(&cfg1, matching.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((n.applied_index(), n.log_len()), (5, 3));
        assert_eq!(n.raw.raft.vote, 1);
        // Durable::write applies the same rule.
        let mut d = matching;
        d.snapshot = None;
        let mut other = snapshot_at_5();
        other.mut_metadata().term = 3;
        d.write(&Persist {
            snapshot: Some(other),
            ..Persist::default()
        });
        assert!(d.entries.is_empty());
        // A gap after the snapshot, or a corrupt snapshot, is refused.
        let gap = Durable {
            hard_state: hs(2, 5),
            entries: vec![entry(7, 2)],
            snapshot: Some(snapshot_at_5()),
        };
        assert!(matches!(
            RaftNode::new(&cfg, gap),
            Err(NodeError::BadLog(_))
        ));
        let mut bad = snapshot_at_5();
        let mut data = bad.data.to_vec();
        data[6] ^= 1;
        bad.data = data.into();
        let corrupt = Durable {
            snapshot: Some(bad.clone()),
            ..Durable::default()
        };
        assert!(matches!(
            RaftNode::new(&cfg, corrupt),
            Err(NodeError::BadSnapshot(_))
        ));
        // The same snapshot from a peer is refused before raft-rs takes it.
        let mut n = RaftNode::new(&cfg, Durable::default()).unwrap_or_else(|e| panic!("{e}"));
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.set_snapshot(bad);
        assert!(matches!(n.step(m), Err(NodeError::BadSnapshot(_))));
    }

    /// `disk` after the first `steps` of `p`'s writes, one at a time as a caller with files
    /// makes them (the snapshot file, then dropping a log it replaces, the compaction, the
    /// entries, the hard state): a crash may stop after any of them.
    fn written(disk: &Durable, p: &Persist, steps: usize) -> Durable {
        let mut d = disk.clone();
        if steps >= 1 {
            d.snapshot.clone_from(&p.snapshot);
        }
        let mut rest = p.clone();
        rest.compact_below = None;
        rest.entries.clear();
        rest.hard_state = None;
        if steps >= 2 {
            d.write(&rest);
        }
        if steps >= 3 {
            rest.compact_below = p.compact_below;
            d.write(&rest);
        }
        if steps >= 4 {
            rest.entries.clone_from(&p.entries);
            d.write(&rest);
        }
        if steps >= 5 {
            d.write(p);
        }
        d
    }

    #[test]
    fn a_crash_between_any_two_writes_restarts_consistently() {
        let mut c = Cluster::with_snapshots(10, 3);
        c.register(40, |_| {});
        let l = c.leader().unwrap_or(0);
        let f = (l + 1) % 3;
        c.cut = Some(f);
        c.register(60, |_| {});
        c.cut = None;
        for _ in 0..60 {
            c.round();
        }
        assert_eq!(c.nodes[l].metadata().version, 100);
        let writes = std::mem::take(&mut c.writes);
        // Both kinds were written: snapshots nodes took, and the one the cut-off node installed.
        assert!(writes
            .iter()
            .any(|(i, _, p)| *i == f && p.compact_below.is_none()));
        assert!(writes.iter().any(|(_, _, p)| p.compact_below.is_some()));
        for (i, before, p) in &writes {
            for steps in 0..=5 {
                let disk = written(before, p, steps);
                let n = RaftNode::new(&c.cfgs[*i], disk.clone());
                let n = n.unwrap_or_else(|e| panic!("node {i}, {steps} steps: {e}"));
                // It resumes at its snapshot with the snapshot's metadata, and the log it holds
                // is the leader's.
                if let Some(snap) = &disk.snapshot {
                    let (snap_md, _) = decode_state(&snap.data).unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(n.applied_index(), snap.get_metadata().index);
                    assert_eq!(*n.metadata(), snap_md);
                }
                let (first, last) = (
                    n.raw.store().first_index().unwrap_or(0),
                    n.raw.store().last_index().unwrap_or(0),
                );
                for idx in first..=last {
                    let leader = c.nodes[l].raw.store().term(idx);
                    if let Ok(t) = leader {
                        assert_eq!(n.raw.store().term(idx).ok(), Some(t), "node {i} at {idx}");
                    }
                }
                // (Catching up from such an old disk is the simulation's part: here the others
                // already count on what this node wrote since, which a real crash never
                // loses.)
            }
        }
    }
}

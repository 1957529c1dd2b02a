//! The Raft log one controller node holds in memory, as raft-rs reads it (`Storage`): the hard
//! state, the voters, the latest snapshot of the metadata, and the entries after a compaction
//! point. It mirrors what the caller persisted in [`Durable`](super::node::Durable), so a restart
//! rebuilds it from there with the same rules.
//!
//! Invariants:
//! - `entries` run without gaps from `base.0 + 1`; `base` is the (index, term) of the entry just
//!   before them (the compaction point), at or below the snapshot's index;
//! - the log is kept past a snapshot only if it holds the snapshot's index at the snapshot's
//!   term (then, by Raft's log matching, every entry up to it is the committed one); otherwise the
//!   snapshot replaces the whole log (a follower's stale or divergent log, replaced by the
//!   leader's snapshot);
//! - nothing here panics on what a caller or a peer hands it: a request out of range is an error.

use raft::eraftpb::{ConfState, Entry as RaftEntry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// The in-memory log behind a [`RaftNode`](super::node::RaftNode).
pub(crate) struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot (index 0: none yet).
    snapshot: Snapshot,
    /// (index, term) of the entry just before `entries`.
    base: (u64, u64),
    entries: Vec<RaftEntry>,
}

/// Whether `entries` hold `(index, term)`.
pub(crate) fn holds(entries: &[RaftEntry], index: u64, term: u64) -> bool {
    let Some(first) = entries.first() else {
        return false;
    };
    index
        .checked_sub(first.index)
        .and_then(|i| entries.get(i as usize))
        .is_some_and(|e| e.index == index && e.term == term)
}

impl LogStore {
    /// The log a node restarts from: its persisted hard state, snapshot (if any) and entries;
    /// keeps at most `margin` entries at or below the snapshot's index.
    pub(crate) fn recover(
        voters: &[u64],
        mut hard_state: HardState,
        snapshot: Option<Snapshot>,
        mut entries: Vec<RaftEntry>,
        margin: u64,
    ) -> Result<Self, &'static str> {
        if entries.windows(2).any(|w| w[1].index != w[0].index + 1) {
            return Err("entries must run without gaps");
        }
        let snapshot = snapshot.unwrap_or_default();
        let (s_index, s_term) = (snapshot.get_metadata().index, snapshot.get_metadata().term);
        let base = if s_index == 0 {
            if entries.first().is_some_and(|e| e.index != 1) {
                return Err("entries must start at index 1 when there is no snapshot");
            }
            (0, 0)
        } else if holds(&entries, s_index, s_term) {
            // The first entry anchors the log (its term is what a follower's append is
            // matched against), so it is the base, not part of the log.
            let first = entries.first().map_or(s_index, |e| e.index);
            let b = first.max(s_index.saturating_sub(margin));
            let term = entries
                .iter()
                .find(|e| e.index == b)
                .map_or(s_term, |e| e.term);
            entries.retain(|e| e.index > b);
            (b, term)
        } else {
            match entries.first() {
                Some(e) if e.index == s_index + 1 => {}
                Some(e) if e.index > s_index + 1 => {
                    return Err("entries start after a gap past the snapshot");
                }
                // Older than the snapshot, or divergent at its index: the snapshot replaces it.
                _ => entries.clear(),
            }
            (s_index, s_term)
        };
        let last = entries.last().map_or(base.0, |e| e.index);
        // The snapshot holds committed entries only: a commit index written before it (and
        // lost in a crash) is raised to it.
        hard_state.commit = hard_state.commit.max(s_index);
        if hard_state.commit > last {
            return Err("the commit index is past the last entry");
        }
        // Entries are written before the hard state: a term they carry that the hard state
        // lacks was never voted in by this node, so taking it without a vote is safe.
        let top = entries.last().map_or(0, |e| e.term).max(s_term);
        if hard_state.term < top {
            hard_state.term = top;
            hard_state.vote = 0;
        }
        Ok(Self {
            hard_state,
            conf_state: ConfState::from((voters.to_vec(), vec![])),
            snapshot,
            base,
            entries,
        })
    }

    /// Appends entries, replacing any from the first one's index on.
    pub(crate) fn append(&mut self, ents: &[RaftEntry]) -> Result<(), &'static str> {
        let Some(first) = ents.first() else {
            return Ok(());
        };
        if first.index <= self.base.0 {
            return Err("appending over compacted entries");
        }
        if first.index > self.last() + 1 {
            return Err("appending after a gap");
        }
        let keep = (first.index - self.base.0 - 1) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(ents);
        Ok(())
    }

    pub(crate) fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    pub(crate) fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    /// Takes `snapshot` as the latest: with the log holding its index at its term (one this
    /// node took), entries below `compact_below` go; otherwise (one received from the leader)
    /// it replaces the whole log.
    pub(crate) fn put_snapshot(&mut self, snapshot: &Snapshot, compact_below: Option<u64>) {
        let (index, term) = (snapshot.get_metadata().index, snapshot.get_metadata().term);
        if index <= self.snapshot.get_metadata().index {
            return;
        }
        if holds(&self.entries, index, term) {
            if let Some(b) = compact_below.filter(|b| *b > self.base.0 && *b <= index) {
                let t = self.term(b).unwrap_or(0);
                self.entries.retain(|e| e.index > b);
                self.base = (b, t);
            }
        } else {
            self.entries.clear();
            self.base = (index, term);
            self.hard_state.commit = self.hard_state.commit.max(index);
            self.hard_state.term = self.hard_state.term.max(term);
        }
        self.snapshot = snapshot.clone();
    }

    fn last(&self) -> u64 {
        self.entries.last().map_or(self.base.0, |e| e.index)
    }

    /// The latest snapshot's index (0: none).
    pub(crate) fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    /// The voters, as a snapshot records them.
    pub(crate) fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<RaftEntry>> {
        if low <= self.base.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let lo = (low - self.base.0 - 1) as usize;
        let hi = (high - self.base.0 - 1) as usize;
        let mut ents = self.entries[lo..hi].to_vec();
        raft::util::limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.base.0 {
            return Ok(self.base.1);
        }
        if idx < self.base.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.entries
            .get((idx - self.base.0 - 1) as usize)
            .map(|e| e.term)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.base.0 + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let index = self.snapshot.get_metadata().index;
        if index == 0 || index < request_index {
            // raft-rs asks again later; a newer one is taken as entries are applied.
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

//! A log's epoch history: for each epoch that wrote records, the seq of its first record.
//!
//! Invariants: epochs strictly increase and first seqs strictly increase (an entry exists only
//! for an epoch with at least one record in the log, so truncation removes entries whose
//! first seq is cut). Two logs with a record of the same epoch at the same seq hold the same
//! records up to it (one leader per epoch, and a follower stores only a leader's prefix), which
//! is what lets a follower find where its log leaves the leader's by comparing histories, never
//! by a position it remembers.

use crate::ids::{Epoch, Seq};

/// `(epoch, first seq)` for every epoch with records in the log, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochHistory {
    entries: Vec<(Epoch, Seq)>,
}

/// An append under an epoch older than the log's last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochRegression {
    /// The log's last epoch.
    pub last: Epoch,
    /// The epoch the append was written under.
    pub appended: Epoch,
}

impl EpochHistory {
    /// The entries, oldest first.
    pub fn entries(&self) -> &[(Epoch, Seq)] {
        &self.entries
    }

    /// The epoch of the log's last record.
    pub fn last_epoch(&self) -> Option<Epoch> {
        self.entries.last().map(|e| e.0)
    }

    /// Notes records written under `epoch` appended from `first`.
    pub fn on_append(&mut self, epoch: Epoch, first: Seq) -> Result<(), EpochRegression> {
        match self.entries.last() {
            Some(&(last, _)) if last > epoch => Err(EpochRegression {
                last,
                appended: epoch,
            }),
            Some(&(last, _)) if last == epoch => Ok(()),
            _ => {
                self.entries.push((epoch, first));
                Ok(())
            }
        }
    }

    /// Forgets the epochs whose records all lie at or after `end`.
    pub fn truncate_to(&mut self, end: Seq) {
        self.entries.retain(|&(_, first)| first < end);
    }

    /// The largest epoch `<= asked` and the seq where it ends in a log ending at `log_end`
    /// (the next epoch's first seq, or the log's end): the leader's answer to a follower
    /// whose last epoch is `asked`. `None` when every epoch here is newer (or none exists).
    pub fn end_of(&self, asked: Epoch, log_end: Seq) -> Option<(Epoch, Seq)> {
        let i = self.entries.iter().rposition(|&(e, _)| e <= asked)?;
        let end = self.entries.get(i + 1).map_or(log_end, |&(_, first)| first);
        Some((self.entries[i].0, end))
    }

    /// The first seq written under an epoch newer than `epoch`.
    pub fn start_after(&self, epoch: Epoch) -> Option<Seq> {
        self.entries
            .iter()
            .find(|&&(e, _)| e > epoch)
            .map(|&(_, first)| first)
    }

    /// The epoch a record at `seq` was written under (if the log holds it).
    pub fn epoch_of(&self, seq: Seq) -> Option<Epoch> {
        self.entries
            .iter()
            .rev()
            .find(|&&(_, first)| first <= seq)
            .map(|&(e, _)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[(u64, u64)]) -> EpochHistory {
        let mut h = EpochHistory::default();
        for &(e, s) in entries {
            assert!(h.on_append(Epoch(e), s).is_ok());
        }
        h
    }

    #[test]
    fn end_of_an_epoch_is_the_next_ones_start_or_the_log_end() {
        let h = history(&[(1, 0), (2, 5), (4, 8)]);
        assert_eq!(h.end_of(Epoch(1), 20), Some((Epoch(1), 5)));
        assert_eq!(h.end_of(Epoch(3), 20), Some((Epoch(2), 8)));
        assert_eq!(h.end_of(Epoch(9), 20), Some((Epoch(4), 20)));
        assert_eq!(history(&[(2, 0)]).end_of(Epoch(1), 3), None);
    }

    #[test]
    fn truncation_drops_epochs_without_records() {
        let mut h = history(&[(1, 0), (2, 5), (4, 8)]);
        h.truncate_to(8);
        assert_eq!(h.last_epoch(), Some(Epoch(2)));
        h.truncate_to(5);
        assert_eq!(h.entries(), &[(Epoch(1), 0)]);
        assert_eq!(h.start_after(Epoch(0)), Some(0));
        assert_eq!(h.epoch_of(3), Some(Epoch(1)));
    }

    #[test]
    fn an_older_epoch_cannot_append() {
        let mut h = history(&[(3, 0)]);
        assert!(h.on_append(Epoch(2), 4).is_err());
    }
}

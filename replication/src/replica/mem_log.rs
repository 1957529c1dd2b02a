//! An in-memory [`ReplicaLog`] for the simulation and tests, modelling what a crash does to a
//! real log: records appended but not yet covered by a completed fsync are lost, and a torn or
//! flipped tail is found by recovery's crc check and cut.
//!
//! Invariants: `durable <= records.len()`; a requested sync covers only what was appended
//! before the request and never what a truncation cut since; `chain[i]` is a hash of the
//! first `i + 1` records' bytes, so two logs hold the same prefix of length `n` exactly when
//! (but for hash collisions) their `chain_at(n)` agree, which is how the simulation compares
//! logs in constant time.

use super::epochs::EpochHistory;
use super::log::{LogError, ReplicaLog};
use super::record::{Batch, Record};
use crate::ids::{Epoch, Seq};

#[derive(Debug, Clone)]
struct Stored {
    epoch: Epoch,
    record: Record,
    chain: u64,
}

/// A log in memory, with a durable end that only a completed sync moves.
#[derive(Debug, Clone, Default)]
pub struct MemLog {
    records: Vec<Stored>,
    epochs: EpochHistory,
    durable: Seq,
    sync_target: Option<Seq>,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn bytes_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl MemLog {
    /// An empty log.
    pub fn new() -> MemLog {
        MemLog::default()
    }

    /// Appends new records with the given bytes under `epoch` (the leader's side: the log
    /// assigns the seqs and computes the crcs). Returns the end after the append.
    pub fn append_new(&mut self, epoch: Epoch, payloads: Vec<Vec<u8>>) -> Result<Seq, LogError> {
        let base = self.end();
        let records: Vec<Record> = payloads
            .into_iter()
            .enumerate()
            .map(|(i, b)| Record::new(base + i as Seq, b))
            .collect();
        self.append(epoch, &records)?;
        Ok(self.end())
    }

    /// A hash of the first `n` records' bytes (0 for none); `None` past the end.
    pub fn chain_at(&self, n: Seq) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        let i = usize::try_from(n - 1).ok()?;
        self.records.get(i).map(|s| s.chain)
    }

    /// The record at `seq`.
    pub fn record(&self, seq: Seq) -> Option<&Record> {
        usize::try_from(seq)
            .ok()
            .and_then(|i| self.records.get(i))
            .map(|s| &s.record)
    }

    /// Whether a sync was requested and has not completed.
    pub fn sync_pending(&self) -> bool {
        self.sync_target.is_some()
    }

    /// Completes the requested sync: what was appended before the request is now durable.
    pub fn complete_sync(&mut self) {
        if let Some(t) = self.sync_target.take() {
            self.durable = self.durable.max(t.min(self.end()));
        }
    }

    /// A crash of the host: everything not yet durable is lost, and so is a pending sync.
    pub fn crash(&mut self) {
        self.sync_target = None;
        let keep = self.durable;
        self.cut(keep);
    }

    /// Flips a byte in each of the last `n` records (a torn or rotten tail found on disk at a
    /// restart), keeping their crcs: recovery finds it.
    pub fn damage_tail(&mut self, n: usize) {
        let upto = self.records.len();
        for s in self.records[upto.saturating_sub(n)..].iter_mut() {
            match s.record.bytes.first_mut() {
                Some(b) => *b ^= 0x5a,
                None => s.record.bytes.push(0x5a),
            }
        }
    }

    /// Recovery after a restart: cuts the log at the first record whose crc fails. Returns
    /// whether something was cut (the replica then does not count as in sync until it has
    /// refetched).
    pub fn recover(&mut self) -> bool {
        match self.records.iter().position(|s| !s.record.intact()) {
            Some(i) => {
                self.cut(i as Seq);
                true
            }
            None => false,
        }
    }

    fn cut(&mut self, end: Seq) {
        let n = usize::try_from(end).unwrap_or(usize::MAX);
        self.records.truncate(n);
        self.epochs.truncate_to(end);
        self.durable = self.durable.min(end);
        self.sync_target = self.sync_target.map(|t| t.min(end));
    }
}

impl ReplicaLog for MemLog {
    fn end(&self) -> Seq {
        self.records.len() as Seq
    }

    fn durable_end(&self) -> Seq {
        self.durable
    }

    fn epochs(&self) -> &EpochHistory {
        &self.epochs
    }

    fn append(&mut self, epoch: Epoch, records: &[Record]) -> Result<(), LogError> {
        let Some(first) = records.first() else {
            return Ok(());
        };
        let end = self.end();
        if first.seq != end
            || records
                .iter()
                .enumerate()
                .any(|(i, r)| r.seq != end + i as Seq)
        {
            return Err(LogError::NotAtEnd {
                end,
                base: first.seq,
            });
        }
        self.epochs
            .on_append(epoch, first.seq)
            .map_err(|e| LogError::EpochRegression {
                last: e.last,
                appended: e.appended,
            })?;
        let mut chain = self.records.last().map_or(0, |s| s.chain);
        for r in records {
            chain = mix(chain ^ bytes_hash(&r.bytes));
            self.records.push(Stored {
                epoch,
                record: r.clone(),
                chain,
            });
        }
        Ok(())
    }

    fn truncate_to(&mut self, end: Seq) -> Result<(), LogError> {
        if end < self.end() {
            self.cut(end);
        }
        Ok(())
    }

    fn read(&self, from: Seq, max_records: usize) -> Result<Batch, LogError> {
        let end = self.end();
        let start = usize::try_from(from)
            .ok()
            .filter(|&i| i < self.records.len())
            .ok_or(LogError::OutOfRange { from, end })?;
        let epoch = self.records[start].epoch;
        let records = self.records[start..]
            .iter()
            .take(max_records.max(1))
            .take_while(|s| s.epoch == epoch)
            .map(|s| s.record.clone())
            .collect();
        Ok(Batch { epoch, records })
    }

    fn request_sync(&mut self) {
        // A request while one is pending is covered by the next one, asked for on completion.
        if self.sync_target.is_none() {
            self.sync_target = Some(self.end());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payloads(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![i as u8; 3]).collect()
    }

    #[test]
    fn a_crash_loses_what_no_sync_covered() {
        let mut log = MemLog::new();
        assert_eq!(log.append_new(Epoch(1), payloads(3)), Ok(3));
        log.request_sync();
        assert_eq!(log.append_new(Epoch(1), payloads(2)), Ok(5));
        log.complete_sync();
        assert_eq!(log.durable_end(), 3);
        log.crash();
        assert_eq!(log.end(), 3);
    }

    #[test]
    fn a_sync_never_covers_what_a_truncation_cut() {
        let mut log = MemLog::new();
        assert!(log.append_new(Epoch(1), payloads(4)).is_ok());
        log.request_sync();
        assert!(log.truncate_to(1).is_ok());
        assert!(log.append_new(Epoch(2), payloads(5)).is_ok());
        log.complete_sync();
        assert_eq!(log.durable_end(), 1);
    }

    #[test]
    fn recovery_cuts_a_damaged_tail_and_reads_stay_in_one_epoch() {
        let mut log = MemLog::new();
        assert!(log.append_new(Epoch(1), payloads(3)).is_ok());
        assert!(log.append_new(Epoch(2), payloads(3)).is_ok());
        log.request_sync();
        log.complete_sync();
        log.damage_tail(2);
        assert!(log.recover());
        assert_eq!(log.end(), 4);
        let b = log.read(1, 10).ok();
        assert_eq!(b.map(|b| (b.epoch, b.records.len())), Some((Epoch(1), 2)));
        assert!(log.read(4, 1).is_err());
    }

    #[test]
    fn equal_prefixes_have_equal_chains() {
        let mut a = MemLog::new();
        let mut b = MemLog::new();
        assert!(a.append_new(Epoch(1), payloads(3)).is_ok());
        assert!(b.append_new(Epoch(2), payloads(2)).is_ok());
        assert_eq!(a.chain_at(2), b.chain_at(2));
        assert!(b.append_new(Epoch(2), vec![vec![9]]).is_ok());
        assert_ne!(a.chain_at(3), b.chain_at(3));
    }
}

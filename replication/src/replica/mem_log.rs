//! An in-memory [`ReplicaLog`] for the simulation and tests, modelling what a crash does to a
//! real log: records appended but not yet covered by a completed fsync are lost, and a torn or
//! flipped tail is found by recovery's crc check and cut. A prefix can be released (what a
//! topic's channels finished), and the log can begin again at a later seq.
//!
//! Invariants: `start <= durable <= start + records.len()`; a requested sync covers only what
//! was appended before the request and never what a truncation cut since; `sum` of a record
//! is `base_sum` plus a hash of every record held up to it, each hashed with its seq, so two
//! logs hold the same records in a range exactly when (but for hash collisions) their
//! [`MemLog::range_hash`] of it agree, whatever their starts: that is how the simulation
//! compares logs in constant time.

use super::epochs::EpochHistory;
use super::log::{LogError, ReplicaLog};
use super::record::{Batch, Record};
use crate::ids::{Epoch, Seq};

#[derive(Debug, Clone)]
struct Stored {
    epoch: Epoch,
    record: Record,
    sum: u64,
}

/// A log in memory, with a durable end that only a completed sync moves.
#[derive(Debug, Clone, Default)]
pub struct MemLog {
    start: Seq,
    /// The running sum before the first record held.
    base_sum: u64,
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

/// A record's hash, bound to its seq (the same bytes at another seq hash differently).
pub(crate) fn record_hash(seq: Seq, bytes: &[u8]) -> u64 {
    mix(bytes_hash(bytes) ^ mix(seq.wrapping_add(0x9e37_79b9_7f4a_7c15)))
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

    fn index(&self, seq: Seq) -> Option<usize> {
        seq.checked_sub(self.start)
            .and_then(|i| usize::try_from(i).ok())
    }

    /// The running sum of the records held below `n` (`base_sum` at the start); `None`
    /// outside `start..=end`.
    fn sum_below(&self, n: Seq) -> Option<u64> {
        match self.index(n)? {
            0 => Some(self.base_sum),
            i => self.records.get(i - 1).map(|s| s.sum),
        }
    }

    /// A hash of the records from `from` to `to` (0 for none), comparable between logs;
    /// `None` when the log does not hold all of them.
    pub fn range_hash(&self, from: Seq, to: Seq) -> Option<u64> {
        if from >= to {
            return (from == to).then_some(0);
        }
        Some(self.sum_below(to)?.wrapping_sub(self.sum_below(from)?))
    }

    /// The record at `seq`.
    pub fn record(&self, seq: Seq) -> Option<&Record> {
        self.index(seq)
            .and_then(|i| self.records.get(i))
            .map(|s| &s.record)
    }

    /// Releases the records below `seq` (at most the end): what every channel finished.
    pub fn release_below(&mut self, seq: Seq) {
        let n = seq.min(self.end()).saturating_sub(self.start);
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n == 0 {
            return;
        }
        self.base_sum = self.records[n - 1].sum;
        self.records.drain(..n);
        self.start += n as Seq;
        self.durable = self.durable.max(self.start);
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
                self.cut(self.start + i as Seq);
                true
            }
            None => false,
        }
    }

    fn cut(&mut self, end: Seq) {
        if end < self.start {
            self.begin_at(end);
            return;
        }
        let n = usize::try_from(end - self.start).unwrap_or(usize::MAX);
        self.records.truncate(n);
        self.epochs.truncate_to(end);
        self.durable = self.durable.min(end);
        self.sync_target = self.sync_target.map(|t| t.min(end));
    }

    fn begin_at(&mut self, start: Seq) {
        self.records.clear();
        self.epochs = EpochHistory::default();
        self.start = start;
        self.base_sum = 0;
        self.durable = start;
        self.sync_target = None;
    }
}

impl ReplicaLog for MemLog {
    fn end(&self) -> Seq {
        self.start + self.records.len() as Seq
    }

    fn start(&self) -> Seq {
        self.start
    }

    fn start_at(&mut self, start: Seq) -> Result<(), LogError> {
        self.begin_at(start);
        Ok(())
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
        let mut sum = self.records.last().map_or(self.base_sum, |s| s.sum);
        for r in records {
            sum = sum.wrapping_add(record_hash(r.seq, &r.bytes));
            self.records.push(Stored {
                epoch,
                record: r.clone(),
                sum,
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
        let start = self
            .index(from)
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
    fn equal_ranges_have_equal_hashes_whatever_the_start() {
        let mut a = MemLog::new();
        let mut b = MemLog::new();
        assert!(a.append_new(Epoch(1), payloads(5)).is_ok());
        assert!(b.append_new(Epoch(2), payloads(4)).is_ok());
        assert_eq!(a.range_hash(0, 4), b.range_hash(0, 4));
        a.release_below(2);
        assert_eq!((a.start(), a.end()), (2, 5));
        assert_eq!(a.range_hash(2, 4), b.range_hash(2, 4));
        assert_eq!(a.range_hash(1, 4), None);
        let mut c = MemLog::new();
        assert!(c.start_at(3).is_ok());
        let r3 = b.record(3).cloned();
        assert!(c
            .append(Epoch(2), &r3.into_iter().collect::<Vec<_>>())
            .is_ok());
        assert_eq!(c.range_hash(3, 4), a.range_hash(3, 4));
        assert!(b.append_new(Epoch(2), vec![vec![9]]).is_ok());
        assert_ne!(a.range_hash(2, 5), b.range_hash(2, 5));
    }

    #[test]
    fn a_log_begun_again_holds_nothing_and_truncating_below_the_start_begins_again() {
        let mut log = MemLog::new();
        assert!(log.append_new(Epoch(1), payloads(6)).is_ok());
        log.release_below(4);
        assert!(log.read(3, 1).is_err());
        assert!(log.truncate_to(2).is_ok());
        assert_eq!((log.start(), log.end(), log.durable_end()), (2, 2, 2));
        assert_eq!(log.epochs().last_epoch(), None);
        assert!(log.start_at(10).is_ok());
        assert_eq!(log.append_new(Epoch(3), payloads(1)), Ok(11));
        assert_eq!(log.epochs().entries(), &[(Epoch(3), 10)]);
    }
}

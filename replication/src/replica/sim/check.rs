//! The invariants, checked by the world after every step and at every election.
//!
//! - every acknowledged record (the log prefix up to the furthest acknowledged publish, which
//!   the in-sync set held when it was acknowledged) is in the log of every running member of
//!   the topic's in-sync and eligible sets, and of every leader elected after it (checked at
//!   the election, and again when the leader takes office), unless it was consumed: a log may
//!   begin past a record only once a leader released it (its channels finished it);
//! - replicas agree below the high watermark: every running member of the current leader's
//!   in-sync set holds the leader's records below it (as far as both logs reach);
//! - at most one leader per topic and epoch;
//! - a leader's high watermark never decreases within its epoch.
//!
//! Logs are compared by [`MemLog::range_hash`], a hash of a range of records, in constant
//! time.

use std::collections::BTreeMap;

use crate::ids::{BrokerId, Epoch, Seq};
use crate::replica::{MemLog, ReplicaLog};

#[derive(Debug, Default)]
pub(crate) struct Checker {
    /// Per topic: the running hash sum of the acknowledged records (`[i]` covers the first
    /// `i + 1`).
    acked: BTreeMap<usize, Vec<u64>>,
    /// Per topic: the furthest any leader released (consumed; at most the acknowledged end).
    released: BTreeMap<usize, Seq>,
    leaders: BTreeMap<(usize, Epoch), BrokerId>,
    hws: BTreeMap<(BrokerId, usize), (Epoch, Seq)>,
}

impl Checker {
    /// The acknowledged prefix's length and its hash.
    pub(crate) fn acked(&self, topic: usize) -> (Seq, u64) {
        self.acked
            .get(&topic)
            .and_then(|v| v.last().map(|c| (v.len() as Seq, *c)))
            .unwrap_or((0, 0))
    }

    /// The furthest released record of `topic` (a log may begin there).
    pub(crate) fn released(&self, topic: usize) -> Seq {
        self.released.get(&topic).copied().unwrap_or(0)
    }

    /// A leader released the records of `topic` below `seq`.
    pub(crate) fn on_release(&mut self, topic: usize, seq: Seq) -> Result<(), String> {
        let (len, _) = self.acked(topic);
        if seq > len {
            return Err(format!(
                "topic {topic}: released up to {seq}, past the acknowledged {len}"
            ));
        }
        let r = self.released.entry(topic).or_default();
        *r = (*r).max(seq);
        Ok(())
    }

    fn sum_below(&self, topic: usize, n: Seq) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        let i = usize::try_from(n - 1).ok()?;
        self.acked.get(&topic).and_then(|v| v.get(i)).copied()
    }

    /// The hash of the acknowledged records from `from` to `to`.
    fn acked_range(&self, topic: usize, from: Seq, to: Seq) -> Option<u64> {
        if from >= to {
            return (from == to).then_some(0);
        }
        Some(
            self.sum_below(topic, to)?
                .wrapping_sub(self.sum_below(topic, from)?),
        )
    }

    /// Whether `log` holds the acknowledged records of `topic` that were not released, and
    /// begins no later than what was released.
    pub(crate) fn holds_acked(&self, topic: usize, log: &MemLog) -> bool {
        let (len, _) = self.acked(topic);
        let from = log.start();
        from <= self.released(topic)
            && log.end() >= len
            && log.range_hash(from, len) == self.acked_range(topic, from, len)
    }

    /// A leader acknowledged a publish ending at `end`: its log up to there must be the
    /// acknowledged history (a deposed leader may still acknowledge an older position, which
    /// must then be where the history has it).
    pub(crate) fn on_ack(&mut self, topic: usize, end: Seq, log: &MemLog) -> Result<(), String> {
        let (len, _) = self.acked(topic);
        let upto = end.min(len);
        let from = log.start().min(upto);
        if log.range_hash(from, upto) != self.acked_range(topic, from, upto) {
            return Err(format!(
                "topic {topic}: a leader acknowledged up to {end} with a log that leaves the \
                 acknowledged records below {upto}"
            ));
        }
        if end > len {
            let base = self.sum_below(topic, len).unwrap_or(0);
            let sums = (len + 1..=end)
                .map(|n| log.range_hash(len, n).map(|h| base.wrapping_add(h)))
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| {
                    format!(
                        "topic {topic}: acknowledged {end} outside the log ({}..{})",
                        log.start(),
                        log.end()
                    )
                })?;
            self.acked.entry(topic).or_default().extend(sums);
        }
        Ok(())
    }

    /// `leader` was elected for `topic`.
    pub(crate) fn at_election(
        &self,
        topic: usize,
        leader: BrokerId,
        log: Option<&MemLog>,
    ) -> Result<(), String> {
        let empty = MemLog::new();
        if self.holds_acked(topic, log.unwrap_or(&empty)) {
            Ok(())
        } else {
            Err(format!(
                "topic {topic}: broker {} elected without the acknowledged prefix {:?} (its log \
                 holds {:?}, released below {})",
                leader.0,
                self.acked(topic),
                log.map(|l| l.start()..l.end()),
                self.released(topic)
            ))
        }
    }

    /// A running holder (in-sync or eligible member) of `topic`.
    pub(crate) fn holder(
        &self,
        topic: usize,
        id: BrokerId,
        log: Option<&MemLog>,
    ) -> Result<(), String> {
        let empty = MemLog::new();
        let log = log.unwrap_or(&empty);
        if self.holds_acked(topic, log) {
            Ok(())
        } else {
            Err(format!(
                "topic {topic}: in-sync broker {} lacks the acknowledged prefix {:?} (its log \
                 holds {:?}, released below {})",
                id.0,
                self.acked(topic),
                log.start()..log.end(),
                self.released(topic)
            ))
        }
    }

    /// A replica that leads `topic` in `epoch` with high watermark `hw`; when it takes office,
    /// its log must hold every acknowledged record.
    pub(crate) fn leader(
        &mut self,
        topic: usize,
        id: BrokerId,
        epoch: Epoch,
        hw: Seq,
        log: Option<&MemLog>,
    ) -> Result<(), String> {
        match self.leaders.get(&(topic, epoch)) {
            Some(l) if *l != id => {
                return Err(format!(
                    "topic {topic}: brokers {} and {} both lead epoch {}",
                    l.0, id.0, epoch.0
                ))
            }
            Some(_) => {}
            None => {
                self.at_election(topic, id, log)
                    .map_err(|e| format!("taking office: {e}"))?;
                self.leaders.insert((topic, epoch), id);
            }
        }
        match self.hws.insert((id, topic), (epoch, hw)) {
            Some((e, h)) if e == epoch && h > hw => Err(format!(
                "topic {topic}: broker {}'s high watermark fell from {h} to {hw} in epoch {}",
                id.0, epoch.0
            )),
            _ => Ok(()),
        }
    }

    /// The current leader's log and a running member of its in-sync set agree below `hw`
    /// (where both hold records).
    pub(crate) fn agree_below(
        topic: usize,
        hw: Seq,
        leader: (BrokerId, &MemLog),
        member: (BrokerId, &MemLog),
    ) -> Result<(), String> {
        let k = hw.min(member.1.end()).min(leader.1.end());
        let from = leader.1.start().max(member.1.start()).min(k);
        if leader.1.range_hash(from, k) == member.1.range_hash(from, k) {
            Ok(())
        } else {
            Err(format!(
                "topic {topic}: in-sync broker {} disagrees with leader {} below the high \
                 watermark {hw}",
                member.0 .0, leader.0 .0
            ))
        }
    }
}

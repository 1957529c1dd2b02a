//! The invariants, checked by the world after every step and at every election.
//!
//! - every acknowledged record (the log prefix up to the furthest acknowledged publish, which
//!   the in-sync set held when it was acknowledged) is in the log of every running member of
//!   the topic's in-sync and eligible sets, and of every leader elected after it (checked at
//!   the election, and again when the leader takes office);
//! - replicas agree below the high watermark: every running member of the current leader's
//!   in-sync set holds the leader's records below it (as far as its log reaches);
//! - at most one leader per topic and epoch;
//! - a leader's high watermark never decreases within its epoch.
//!
//! Logs are compared by [`MemLog::chain_at`], a hash of a prefix, in constant time.

use std::collections::BTreeMap;

use crate::ids::{BrokerId, Epoch, Seq};
use crate::replica::{MemLog, ReplicaLog};

#[derive(Debug, Default)]
pub(crate) struct Checker {
    /// Per topic: the chain hash of every prefix of the acknowledged records (`[i]` covers
    /// the first `i + 1`).
    acked: BTreeMap<usize, Vec<u64>>,
    leaders: BTreeMap<(usize, Epoch), BrokerId>,
    hws: BTreeMap<(BrokerId, usize), (Epoch, Seq)>,
}

impl Checker {
    /// The acknowledged prefix's length and its chain hash.
    pub(crate) fn acked(&self, topic: usize) -> (Seq, u64) {
        self.acked
            .get(&topic)
            .and_then(|v| v.last().map(|c| (v.len() as Seq, *c)))
            .unwrap_or((0, 0))
    }

    fn chain_at(&self, topic: usize, n: Seq) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        let i = usize::try_from(n - 1).ok()?;
        self.acked.get(&topic).and_then(|v| v.get(i)).copied()
    }

    /// Whether `log` holds the acknowledged prefix of `topic`.
    pub(crate) fn holds_acked(&self, topic: usize, log: &MemLog) -> bool {
        let (len, chain) = self.acked(topic);
        log.end() >= len && log.chain_at(len) == Some(chain)
    }

    /// A leader acknowledged a publish ending at `end`: its log up to there must be the
    /// acknowledged history (a deposed leader may still acknowledge an older position, which
    /// must then be where the history has it).
    pub(crate) fn on_ack(&mut self, topic: usize, end: Seq, log: &MemLog) -> Result<(), String> {
        let (len, _) = self.acked(topic);
        let upto = end.min(len);
        if log.chain_at(upto) != self.chain_at(topic, upto) {
            return Err(format!(
                "topic {topic}: a leader acknowledged up to {end} with a log that leaves the \
                 acknowledged records below {upto}"
            ));
        }
        if end > len {
            let chains = (len + 1..=end)
                .map(|n| log.chain_at(n))
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| format!("topic {topic}: acknowledged {end} past the log's end"))?;
            self.acked.entry(topic).or_default().extend(chains);
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
                 ends at {})",
                leader.0,
                self.acked(topic),
                log.map_or(0, |l| l.end())
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
                 ends at {})",
                id.0,
                self.acked(topic),
                log.end()
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

    /// The current leader's log and a running member of its in-sync set agree below `hw`.
    pub(crate) fn agree_below(
        topic: usize,
        hw: Seq,
        leader: (BrokerId, &MemLog),
        member: (BrokerId, &MemLog),
    ) -> Result<(), String> {
        let k = hw.min(member.1.end());
        if leader.1.chain_at(k) == member.1.chain_at(k) {
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

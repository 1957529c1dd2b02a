//! Broker sessions, on the controller leader: which brokers were heard from lately, and the
//! proposals that follow from it (fence an expired session; elect a leader for a topic that has
//! none, from its live in-sync members; re-replicate away from a broker gone for good). Liveness
//! is never voted: a session only leads to a proposal, which takes effect once committed.
//!
//! Invariants:
//! - only a leader that has applied its own term's first entry proposes (its metadata then holds
//!   what earlier leaders committed); every proposal is a compare-and-set against the state it was
//!   computed from, so a stale or repeated one is refused when applied;
//! - a new leader gives every broker a fresh session timeout before fencing anyone (it has not
//!   heard their heartbeats, which went to the old leader), and forgets what it proposed before;
//! - time is this node's ticks; a proposal not applied within `retry` ticks is made again.

use std::collections::BTreeMap;

use super::metadata::{mutation, Entry, Metadata, TopicState};
use crate::ids::BrokerId;

/// Session timing, in the controller's ticks.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// A broker not heard from for longer is fenced.
    pub timeout: u64,
    /// A proposal still not applied after this many ticks is made again.
    pub retry: u64,
    /// A broker fenced this long (as far as this leader has seen) is replaced in its topics'
    /// replicas; None: never.
    pub reassign_after: Option<u64>,
}

/// A heartbeat's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// The session is current; `propose` brings the registration up to date if needed.
    Current { propose: Option<Entry> },
    /// A newer incarnation of this broker is registered: this process is an old one.
    Stale { registered: u64 },
}

/// The leader's view of broker sessions.
#[derive(Debug, Clone)]
pub struct Sessions {
    cfg: SessionConfig,
    now: u64,
    /// The term this node leads (None: not leading).
    term: Option<u64>,
    /// The tick each broker was last heard from.
    seen: BTreeMap<BrokerId, u64>,
    /// The tick each fenced broker was first seen fenced by this leader.
    fenced_at: BTreeMap<BrokerId, u64>,
    /// Proposals made and when.
    inflight: BTreeMap<Entry, u64>,
}

impl Sessions {
    pub fn new(cfg: SessionConfig) -> Self {
        Self {
            cfg,
            now: 0,
            term: None,
            seen: BTreeMap::new(),
            fenced_at: BTreeMap::new(),
            inflight: BTreeMap::new(),
        }
    }

    /// One tick. `leading`: the term this node leads, and whether it has applied its own first
    /// entry of it. Returns the proposals to make.
    pub fn tick(&mut self, leading: Option<(u64, bool)>, md: &Metadata) -> Vec<Entry> {
        self.now += 1;
        let Some((term, current)) = leading else {
            self.term = None;
            return Vec::new();
        };
        if self.term != Some(term) {
            // A new leadership: everyone starts a fresh session.
            self.term = Some(term);
            self.seen.clear();
            self.fenced_at.clear();
            self.inflight.clear();
        }
        let now = self.now;
        for (id, b) in &md.brokers {
            self.seen.entry(*id).or_insert(now);
            if b.fenced {
                self.fenced_at.entry(*id).or_insert(now);
            } else {
                self.fenced_at.remove(id);
            }
        }
        let retry = self.cfg.retry;
        self.inflight.retain(|_, at| now - *at < retry);
        if !current {
            return Vec::new();
        }
        let mut wanted = Vec::new();
        for (id, b) in &md.brokers {
            let last = self.seen.get(id).copied().unwrap_or(now);
            if !b.fenced && now - last > self.cfg.timeout {
                tracing::info!(broker = id.0, "controller: session expired, fencing");
                wanted.push(Entry::FenceBroker {
                    id: *id,
                    incarnation: b.incarnation,
                });
            }
        }
        for (name, t) in &md.topics {
            if t.leader.is_some() {
                continue;
            }
            if let Some(leader) = self.candidate(md, t) {
                wanted.push(Entry::ElectLeader {
                    topic: name.clone(),
                    leader,
                    epoch: t.epoch,
                });
            }
        }
        if let Some(after) = self.cfg.reassign_after {
            for (gone, at) in &self.fenced_at {
                if now - *at < after {
                    continue;
                }
                for (name, t) in &md.topics {
                    if let Some(replicas) = replace(md, &t.replicas, *gone) {
                        if t.isr.iter().any(|b| b != gone) {
                            wanted.push(Entry::Reassign {
                                topic: name.clone(),
                                isr_version: t.isr_version,
                                replicas,
                            });
                        }
                    }
                }
            }
        }
        wanted
            .into_iter()
            .filter(|e| self.should_propose(e))
            .collect()
    }

    /// The leader of a leaderless topic: its first replica (the preferred one first) that is in
    /// sync and live, preferring one heard from lately; when no in-sync member is live, a live
    /// eligible one.
    fn candidate(&self, md: &Metadata, t: &TopicState) -> Option<BrokerId> {
        let (replicas, isr) = (&t.replicas, &t.isr);
        let pool = if isr.iter().any(|b| md.is_live(*b)) {
            isr
        } else {
            &t.elr
        };
        let eligible = |b: &&BrokerId| {
            let in_sync = pool.contains(b) || mutation::active(mutation::Mutation::ElectOutsideIsr);
            let live = md.is_live(**b) || mutation::active(mutation::Mutation::ElectFenced);
            in_sync && live
        };
        let fresh = |b: &&BrokerId| {
            self.seen
                .get(b)
                .is_some_and(|at| self.now - at <= self.cfg.timeout / 2)
        };
        replicas
            .iter()
            .filter(eligible)
            .find(fresh)
            .or_else(|| replicas.iter().find(eligible))
            .copied()
    }

    /// A heartbeat reached this node while it leads.
    pub fn heard(
        &mut self,
        md: &Metadata,
        id: BrokerId,
        incarnation: u64,
        addresses: &[String],
        damaged: &[String],
    ) -> Heard {
        if md.retired.contains(&id) {
            // Its data path was wiped and a new broker took its address.
            return Heard::Stale {
                registered: u64::MAX,
            };
        }
        match md.brokers.get(&id) {
            Some(b) if incarnation < b.incarnation => Heard::Stale {
                registered: b.incarnation,
            },
            Some(b) if incarnation == b.incarnation && !b.fenced && b.addresses == addresses => {
                self.seen.insert(id, self.now);
                Heard::Current { propose: None }
            }
            _ => {
                self.seen.insert(id, self.now);
                let entry = Entry::RegisterBroker {
                    id,
                    incarnation,
                    addresses: addresses.to_vec(),
                    damaged: damaged.to_vec(),
                };
                let propose = self.should_propose(&entry).then_some(entry);
                Heard::Current { propose }
            }
        }
    }

    /// Records a proposal unless the same one is already waiting.
    pub fn should_propose(&mut self, e: &Entry) -> bool {
        if self.inflight.contains_key(e) {
            return false;
        }
        self.inflight.insert(e.clone(), self.now);
        true
    }
}

/// `replicas` with `gone` replaced by the live broker outside them holding the fewest replicas
/// (lowest id first); None if `gone` is not a replica or nobody can take its place.
fn replace(md: &Metadata, replicas: &[BrokerId], gone: BrokerId) -> Option<Vec<BrokerId>> {
    if !replicas.contains(&gone) {
        return None;
    }
    let (_, by) = md
        .brokers
        .iter()
        .filter(|(id, b)| !b.fenced && !replicas.contains(id))
        .map(|(id, _)| (md.replica_count(*id), *id))
        .min()?;
    Some(
        replicas
            .iter()
            .map(|r| if *r == gone { by } else { *r })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::metadata::Outcome;

    fn md_with_topic() -> Metadata {
        let mut md = Metadata::default();
        for id in 1..=4 {
            md.apply(&Entry::RegisterBroker {
                id: BrokerId(id),
                incarnation: 1,
                addresses: vec![],
                damaged: vec![],
            });
        }
        md.apply(&Entry::CreateTopic {
            name: "t".into(),
            replicas: 3,
            min_insync: 2,
        });
        md
    }

    fn cfg() -> SessionConfig {
        SessionConfig {
            timeout: 10,
            retry: 5,
            reassign_after: Some(50),
        }
    }

    #[test]
    fn an_expired_session_is_fenced_then_a_live_in_sync_member_elected() {
        let mut md = md_with_topic();
        let mut s = Sessions::new(cfg());
        let leader = md.topics["t"].leader.unwrap_or(BrokerId(0));
        let mut fenced = false;
        for _ in 0..12 {
            for id in 1..=4 {
                if BrokerId(id) != leader {
                    s.heard(&md, BrokerId(id), 1, &[], &[]);
                }
            }
            for e in s.tick(Some((1, true)), &md) {
                assert_eq!(
                    e,
                    Entry::FenceBroker {
                        id: leader,
                        incarnation: 1
                    }
                );
                assert!(matches!(md.apply(&e), Outcome::Applied(_)));
                fenced = true;
            }
        }
        assert!(fenced);
        let props = s.tick(Some((1, true)), &md);
        assert_eq!(props.len(), 1, "{props:?}");
        let Entry::ElectLeader { leader: new, .. } = &props[0] else {
            panic!("{props:?}");
        };
        assert!(md.topics["t"].isr.contains(new) && *new != leader);
        // Proposed once until the retry interval passes.
        assert!(s.tick(Some((1, true)), &md).is_empty());
    }

    #[test]
    fn a_new_leader_gives_every_broker_a_fresh_session() {
        let md = md_with_topic();
        let mut s = Sessions::new(cfg());
        for _ in 0..100 {
            assert!(s.tick(None, &md).is_empty());
        }
        // Heard at its first tick as leader; fenced once more than `timeout` ticks passed.
        for _ in 0..11 {
            assert!(s.tick(Some((7, true)), &md).is_empty());
        }
        assert_eq!(s.tick(Some((7, true)), &md).len(), 4);
        // Another term: fresh again.
        assert!(s.tick(Some((8, true)), &md).is_empty());
        // Not yet current in its term: nothing proposed.
        let mut s = Sessions::new(cfg());
        for _ in 0..30 {
            assert!(s.tick(Some((9, false)), &md).is_empty());
        }
    }

    #[test]
    fn a_broker_gone_for_good_is_replaced() {
        let mut md = md_with_topic();
        let t = md.topics["t"].clone();
        let gone = t.replicas[1];
        md.apply(&Entry::FenceBroker {
            id: gone,
            incarnation: 1,
        });
        let mut s = Sessions::new(cfg());
        let mut found = None;
        for _ in 0..60 {
            for id in 1..=4 {
                s.heard(&md, BrokerId(id), 1, &[], &[]);
            }
            for e in s.tick(Some((1, true)), &md) {
                if let Entry::Reassign { replicas, .. } = &e {
                    found = Some(replicas.clone());
                }
            }
        }
        let replicas = found.unwrap_or_default();
        assert!(
            !replicas.contains(&gone) && replicas.contains(&BrokerId(4)),
            "{replicas:?}"
        );
        assert_eq!(
            s.heard(&md, gone, 0, &[], &[]),
            Heard::Stale { registered: 1 }
        );
    }
}

//! The controller's metadata and its state machine: brokers (incarnation, addresses, fenced),
//! topics (replicas, leader, epoch, in-sync set and its version), changed only by
//! [`Metadata::apply`] on the entries Raft committed, identically on every lookup.
//!
//! Invariants after every apply (the simulation checks them independently):
//! - a topic's leader is a member of its replicas and of its in-sync set, and is not fenced;
//! - a topic's in-sync set is a non-empty, sorted subset of its replicas;
//! - a topic's epoch only grows, by one each time its leader changes (to nobody included), so a
//!   (topic, epoch) has at most one leader;
//! - an `AlterIsr` or `Reassign` applies only against the current epoch and in-sync version, and
//!   an `ElectLeader` only against the current epoch (compare-and-set: a stale or duplicated
//!   proposal is refused, never applied twice);
//! - a fenced broker leads nothing and is in no in-sync set, except as its last member: a set is
//!   never emptied, so the one replica that has every acknowledged record can lead again when it
//!   comes back, and no replica outside the set ever can (no unclean election).
//!
//! `apply` is pure and deterministic: its result depends only on the state and the entry (ordered
//! maps, no clock, no randomness), and a refused entry changes nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{BrokerId, Epoch};

/// The longest topic name (NSQ's limit).
pub const MAX_TOPIC_NAME: usize = 64;

/// One entry of the controller's Raft log.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Entry {
    /// A broker joins, comes back after a restart (a higher incarnation), or after being fenced
    /// (the same incarnation).
    RegisterBroker {
        id: BrokerId,
        incarnation: u64,
        addresses: Vec<String>,
    },
    /// The session of this incarnation expired.
    FenceBroker { id: BrokerId, incarnation: u64 },
    /// A new topic, placed on the live brokers holding the fewest replicas.
    CreateTopic {
        name: String,
        replicas: u32,
        min_insync: u32,
    },
    /// The topic's leader changes the in-sync set, against the epoch and version it knows.
    AlterIsr {
        topic: String,
        epoch: Epoch,
        isr_version: u64,
        isr: Vec<BrokerId>,
    },
    /// `leader` leads the epoch after `epoch` (which must be the current one).
    ElectLeader {
        topic: String,
        leader: BrokerId,
        epoch: Epoch,
    },
    /// The topic's replicas become `replicas` (re-replication), against the in-sync version.
    Reassign {
        topic: String,
        isr_version: u64,
        replicas: Vec<BrokerId>,
    },
}

/// What the controller knows of a broker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub incarnation: u64,
    pub addresses: Vec<String>,
    pub fenced: bool,
}

/// A topic's placement and leadership.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopicState {
    /// Its replicas, the preferred leader first.
    pub replicas: Vec<BrokerId>,
    pub min_insync: u32,
    pub leader: Option<BrokerId>,
    pub epoch: Epoch,
    /// Sorted.
    pub isr: Vec<BrokerId>,
    /// Grows with every change of `isr` or `replicas`.
    pub isr_version: u64,
}

/// One change a broker learns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    Broker { id: BrokerId, info: BrokerInfo },
    Topic { name: String, state: TopicState },
}

/// What one applied entry changed; `version` is the metadata's version after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub version: u64,
    pub changes: Vec<Change>,
}

/// Why an entry changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("nothing to change")]
    Unchanged,
    #[error("broker {0:?} is not registered")]
    UnknownBroker(BrokerId),
    #[error("broker {id:?}: incarnation {got} is older than the registered {current}")]
    StaleIncarnation {
        id: BrokerId,
        got: u64,
        current: u64,
    },
    #[error("topic {0:?} does not exist")]
    UnknownTopic(String),
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    #[error("invalid topic name {0:?}")]
    InvalidTopicName(String),
    #[error("replicas {replicas} with min_insync {min_insync}: need 1 <= min_insync <= replicas")]
    InvalidReplication { replicas: u32, min_insync: u32 },
    #[error("{wanted} replicas wanted, {live} live brokers")]
    NotEnoughBrokers { wanted: u32, live: usize },
    #[error("epoch {got:?} is not the current {current:?}")]
    StaleEpoch { got: Epoch, current: Epoch },
    #[error("in-sync version {got} is not the current {current}")]
    StaleIsrVersion { got: u64, current: u64 },
    #[error("the topic has no leader")]
    NoLeader,
    #[error("invalid in-sync set: {0}")]
    InvalidIsr(&'static str),
    #[error("broker {0:?} is not in the in-sync set")]
    NotInSync(BrokerId),
    #[error("broker {0:?} is fenced or unknown")]
    Fenced(BrokerId),
    #[error("invalid replicas: {0}")]
    InvalidReplicas(&'static str),
    #[error("the entry could not be decoded")]
    Undecodable,
}

/// The result of applying one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Applied(Delta),
    Refused(Refusal),
}

/// The cluster's metadata as of some applied prefix of the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Metadata {
    /// Grows by one with every entry that changed something.
    pub version: u64,
    pub brokers: BTreeMap<BrokerId, BrokerInfo>,
    pub topics: BTreeMap<String, TopicState>,
}

impl Metadata {
    /// Whether `id` is registered and not fenced.
    pub fn is_live(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// How many topics `id` is a replica of.
    pub fn replica_count(&self, id: BrokerId) -> usize {
        self.topics
            .values()
            .filter(|t| t.replicas.contains(&id))
            .count()
    }

    /// Applies one committed entry; a refusal leaves the state as it was.
    pub fn apply(&mut self, entry: &Entry) -> Outcome {
        let changes = match entry {
            Entry::RegisterBroker {
                id,
                incarnation,
                addresses,
            } => self.register(*id, *incarnation, addresses),
            Entry::FenceBroker { id, incarnation } => self.fence(*id, *incarnation),
            Entry::CreateTopic {
                name,
                replicas,
                min_insync,
            } => self.create_topic(name, *replicas, *min_insync),
            Entry::AlterIsr {
                topic,
                epoch,
                isr_version,
                isr,
            } => self.alter_isr(topic, *epoch, *isr_version, isr),
            Entry::ElectLeader {
                topic,
                leader,
                epoch,
            } => self.elect(topic, *leader, *epoch),
            Entry::Reassign {
                topic,
                isr_version,
                replicas,
            } => self.reassign(topic, *isr_version, replicas),
        };
        match changes {
            Ok(changes) => {
                self.version += 1;
                Outcome::Applied(Delta {
                    version: self.version,
                    changes,
                })
            }
            Err(refusal) => Outcome::Refused(refusal),
        }
    }

    fn register(
        &mut self,
        id: BrokerId,
        incarnation: u64,
        addresses: &[String],
    ) -> Result<Vec<Change>, Refusal> {
        let mut changes = Vec::new();
        match self.brokers.get(&id) {
            Some(b) if incarnation < b.incarnation => {
                return Err(Refusal::StaleIncarnation {
                    id,
                    got: incarnation,
                    current: b.incarnation,
                })
            }
            Some(b) if incarnation == b.incarnation && !b.fenced && b.addresses == addresses => {
                return Err(Refusal::Unchanged)
            }
            Some(b) if incarnation > b.incarnation && !b.fenced => {
                // A restarted process may have lost what it had not synced: the old
                // incarnation's leaderships and in-sync memberships end here, as at a fence.
                self.fence_effects(id, &mut changes);
            }
            _ => {}
        }
        let info = BrokerInfo {
            incarnation,
            addresses: addresses.to_vec(),
            fenced: false,
        };
        self.brokers.insert(id, info.clone());
        changes.insert(0, Change::Broker { id, info });
        Ok(changes)
    }

    fn fence(&mut self, id: BrokerId, incarnation: u64) -> Result<Vec<Change>, Refusal> {
        let info = match self.brokers.get_mut(&id) {
            None => return Err(Refusal::UnknownBroker(id)),
            Some(b) if b.incarnation != incarnation => {
                return Err(Refusal::StaleIncarnation {
                    id,
                    got: incarnation,
                    current: b.incarnation,
                })
            }
            Some(b) if b.fenced => return Err(Refusal::Unchanged),
            Some(b) => {
                b.fenced = true;
                b.clone()
            }
        };
        let mut changes = vec![Change::Broker { id, info }];
        self.fence_effects(id, &mut changes);
        Ok(changes)
    }

    /// Ends `id`'s leaderships (a new, leaderless epoch) and removes it from every in-sync set
    /// it is not the last member of.
    fn fence_effects(&mut self, id: BrokerId, changes: &mut Vec<Change>) {
        for (name, t) in self.topics.iter_mut() {
            let mut changed = false;
            if t.leader == Some(id) && !mutation::active(mutation::Mutation::FenceKeepsLeader) {
                t.leader = None;
                t.epoch = Epoch(t.epoch.0 + 1);
                changed = true;
            }
            if t.isr.len() > 1 && t.isr.contains(&id) {
                t.isr.retain(|b| *b != id);
                t.isr_version += 1;
                changed = true;
            }
            if changed {
                changes.push(Change::Topic {
                    name: name.clone(),
                    state: t.clone(),
                });
            }
        }
    }

    fn create_topic(
        &mut self,
        name: &str,
        replicas: u32,
        min_insync: u32,
    ) -> Result<Vec<Change>, Refusal> {
        if !valid_topic_name(name) {
            return Err(Refusal::InvalidTopicName(name.to_string()));
        }
        if self.topics.contains_key(name) {
            return Err(Refusal::TopicExists(name.to_string()));
        }
        if replicas == 0 || min_insync == 0 || min_insync > replicas {
            return Err(Refusal::InvalidReplication {
                replicas,
                min_insync,
            });
        }
        let mut live: Vec<(usize, BrokerId)> = self
            .brokers
            .iter()
            .filter(|(_, b)| !b.fenced)
            .map(|(id, _)| (self.replica_count(*id), *id))
            .collect();
        if live.len() < replicas as usize {
            return Err(Refusal::NotEnoughBrokers {
                wanted: replicas,
                live: live.len(),
            });
        }
        live.sort();
        let placed: Vec<BrokerId> = live
            .iter()
            .take(replicas as usize)
            .map(|(_, id)| *id)
            .collect();
        let mut isr = placed.clone();
        isr.sort();
        let state = TopicState {
            leader: placed.first().copied(),
            replicas: placed,
            min_insync,
            epoch: Epoch(1),
            isr,
            isr_version: 1,
        };
        self.topics.insert(name.to_string(), state.clone());
        Ok(vec![Change::Topic {
            name: name.to_string(),
            state,
        }])
    }

    fn alter_isr(
        &mut self,
        topic: &str,
        epoch: Epoch,
        isr_version: u64,
        isr: &[BrokerId],
    ) -> Result<Vec<Change>, Refusal> {
        let skip_checks = mutation::active(mutation::Mutation::AlterIsrIgnoresVersion);
        let brokers = &self.brokers;
        let t = self
            .topics
            .get_mut(topic)
            .ok_or_else(|| Refusal::UnknownTopic(topic.to_string()))?;
        if t.epoch != epoch && !skip_checks {
            return Err(Refusal::StaleEpoch {
                got: epoch,
                current: t.epoch,
            });
        }
        if t.isr_version != isr_version && !skip_checks {
            return Err(Refusal::StaleIsrVersion {
                got: isr_version,
                current: t.isr_version,
            });
        }
        let leader = t.leader.ok_or(Refusal::NoLeader)?;
        let mut new: Vec<BrokerId> = isr.to_vec();
        new.sort();
        new.dedup();
        if !new.contains(&leader) {
            return Err(Refusal::InvalidIsr("it must contain the leader"));
        }
        if new.iter().any(|b| !t.replicas.contains(b)) {
            return Err(Refusal::InvalidIsr("every member must be a replica"));
        }
        // Members already in the set may be fenced (the last one stays); new ones may not.
        let live = |b: &BrokerId| brokers.get(b).is_some_and(|i| !i.fenced);
        if new.iter().any(|b| !t.isr.contains(b) && !live(b)) {
            return Err(Refusal::InvalidIsr("a fenced broker cannot join"));
        }
        if new == t.isr {
            return Err(Refusal::Unchanged);
        }
        t.isr = new;
        t.isr_version += 1;
        Ok(vec![Change::Topic {
            name: topic.to_string(),
            state: t.clone(),
        }])
    }

    fn elect(
        &mut self,
        topic: &str,
        leader: BrokerId,
        epoch: Epoch,
    ) -> Result<Vec<Change>, Refusal> {
        let live = self.is_live(leader);
        let t = self
            .topics
            .get_mut(topic)
            .ok_or_else(|| Refusal::UnknownTopic(topic.to_string()))?;
        if t.epoch != epoch {
            return Err(Refusal::StaleEpoch {
                got: epoch,
                current: t.epoch,
            });
        }
        if !t.replicas.contains(&leader) {
            return Err(Refusal::NotInSync(leader));
        }
        if !t.isr.contains(&leader) && !mutation::active(mutation::Mutation::ElectOutsideIsr) {
            return Err(Refusal::NotInSync(leader));
        }
        if !live && !mutation::active(mutation::Mutation::ElectFenced) {
            return Err(Refusal::Fenced(leader));
        }
        t.leader = Some(leader);
        if !mutation::active(mutation::Mutation::ElectKeepsEpoch) {
            t.epoch = Epoch(t.epoch.0 + 1);
        }
        Ok(vec![Change::Topic {
            name: topic.to_string(),
            state: t.clone(),
        }])
    }

    fn reassign(
        &mut self,
        topic: &str,
        isr_version: u64,
        replicas: &[BrokerId],
    ) -> Result<Vec<Change>, Refusal> {
        let brokers = &self.brokers;
        let t = self
            .topics
            .get_mut(topic)
            .ok_or_else(|| Refusal::UnknownTopic(topic.to_string()))?;
        if t.isr_version != isr_version {
            return Err(Refusal::StaleIsrVersion {
                got: isr_version,
                current: t.isr_version,
            });
        }
        let mut distinct = replicas.to_vec();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != replicas.len() || replicas.len() < t.min_insync as usize {
            return Err(Refusal::InvalidReplicas(
                "distinct brokers, at least min_insync of them",
            ));
        }
        let live = |b: &BrokerId| brokers.get(b).is_some_and(|i| !i.fenced);
        if replicas.iter().any(|b| !t.replicas.contains(b) && !live(b)) {
            return Err(Refusal::InvalidReplicas("a new replica must be live"));
        }
        if t.leader.is_some_and(|l| !replicas.contains(&l)) {
            return Err(Refusal::InvalidReplicas("the leader must stay"));
        }
        let isr: Vec<BrokerId> = t
            .isr
            .iter()
            .copied()
            .filter(|b| replicas.contains(b))
            .collect();
        if isr.is_empty() {
            return Err(Refusal::InvalidReplicas("an in-sync replica must stay"));
        }
        if replicas == t.replicas.as_slice() {
            return Err(Refusal::Unchanged);
        }
        t.replicas = replicas.to_vec();
        t.isr = isr;
        t.isr_version += 1;
        Ok(vec![Change::Topic {
            name: topic.to_string(),
            state: t.clone(),
        }])
    }
}

/// NSQ's rule: 1 to 64 characters of `[.a-zA-Z0-9_-]`, optionally ending in `#ephemeral`.
pub fn valid_topic_name(name: &str) -> bool {
    let base = name.strip_suffix("#ephemeral").unwrap_or(name);
    !name.is_empty()
        && name.len() <= MAX_TOPIC_NAME
        && !base.is_empty()
        && base
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// Deliberate bugs the simulation must catch (tests only): each disables one safety rule.
pub(crate) mod mutation {
    /// One disabled rule.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) enum Mutation {
        /// `AlterIsr` applies whatever epoch and version it carries.
        AlterIsrIgnoresVersion,
        /// `ElectLeader` (and the sessions' choice) takes any replica, in sync or not.
        ElectOutsideIsr,
        /// `ElectLeader` (and the sessions' choice) takes a fenced replica.
        ElectFenced,
        /// `ElectLeader` keeps the epoch.
        ElectKeepsEpoch,
        /// Fencing a leader leaves it leading.
        FenceKeepsLeader,
        /// The simulated disk treats every write as unsynced.
        IgnoreSync,
        /// The simulated disk syncs log entries but not the hard state (term and vote).
        ForgetVote,
        /// The simulated network alters log entries in transit.
        CorruptEntries,
        /// A broker's view ignores brokers' changes.
        ViewIgnoresBrokerChanges,
    }

    #[cfg(test)]
    thread_local! {
        static ACTIVE: std::cell::Cell<Option<Mutation>> = const { std::cell::Cell::new(None) };
    }

    /// Whether `m` is switched on (never outside tests).
    #[cfg(test)]
    pub(crate) fn active(m: Mutation) -> bool {
        ACTIVE.with(|a| a.get() == Some(m))
    }

    #[cfg(not(test))]
    #[inline(always)]
    pub(crate) fn active(_m: Mutation) -> bool {
        false
    }

    /// Switches `m` on for this thread (`None`: all off).
    #[cfg(test)]
    pub(crate) fn set(m: Option<Mutation>) {
        ACTIVE.with(|a| a.set(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(n: u64) -> BrokerId {
        BrokerId(n)
    }

    fn reg(md: &mut Metadata, id: u64, inc: u64) -> Outcome {
        md.apply(&Entry::RegisterBroker {
            id: b(id),
            incarnation: inc,
            addresses: vec![format!("10.0.0.{id}:4150")],
        })
    }

    fn three_brokers_one_topic() -> Metadata {
        let mut md = Metadata::default();
        for id in 1..=3 {
            assert!(matches!(reg(&mut md, id, 1), Outcome::Applied(_)));
        }
        let out = md.apply(&Entry::CreateTopic {
            name: "t".into(),
            replicas: 3,
            min_insync: 2,
        });
        assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        md
    }

    #[test]
    fn create_places_on_least_loaded_live_brokers() {
        let mut md = three_brokers_one_topic();
        reg(&mut md, 4, 1);
        md.apply(&Entry::FenceBroker {
            id: b(2),
            incarnation: 1,
        });
        let out = md.apply(&Entry::CreateTopic {
            name: "u".into(),
            replicas: 2,
            min_insync: 1,
        });
        assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        assert_eq!(md.topics["u"].replicas, vec![b(4), b(1)]);
        assert_eq!(md.topics["u"].leader, Some(b(4)));
        let out = md.apply(&Entry::CreateTopic {
            name: "v".into(),
            replicas: 4,
            min_insync: 2,
        });
        assert_eq!(
            out,
            Outcome::Refused(Refusal::NotEnoughBrokers { wanted: 4, live: 3 })
        );
    }

    #[test]
    fn alter_isr_needs_current_epoch_and_version() {
        let mut md = three_brokers_one_topic();
        let t = md.topics["t"].clone();
        let shrink = |epoch, v| Entry::AlterIsr {
            topic: "t".into(),
            epoch,
            isr_version: v,
            isr: vec![b(1), b(2)],
        };
        assert!(matches!(
            md.apply(&shrink(Epoch(t.epoch.0 - 1), t.isr_version)),
            Outcome::Refused(Refusal::StaleEpoch { .. })
        ));
        assert!(matches!(
            md.apply(&shrink(t.epoch, t.isr_version + 1)),
            Outcome::Refused(Refusal::StaleIsrVersion { .. })
        ));
        assert!(matches!(
            md.apply(&shrink(t.epoch, t.isr_version)),
            Outcome::Applied(_)
        ));
        // The same request again is stale now.
        assert!(matches!(
            md.apply(&shrink(t.epoch, t.isr_version)),
            Outcome::Refused(Refusal::StaleIsrVersion { .. })
        ));
        assert_eq!(md.topics["t"].isr, vec![b(1), b(2)]);
    }

    #[test]
    fn fencing_the_leader_ends_its_epoch_and_election_needs_a_live_in_sync_member() {
        let mut md = three_brokers_one_topic();
        let t = md.topics["t"].clone();
        let leader = t.leader.unwrap_or(b(0));
        md.apply(&Entry::AlterIsr {
            topic: "t".into(),
            epoch: t.epoch,
            isr_version: t.isr_version,
            isr: vec![b(1), b(2)],
        });
        md.apply(&Entry::FenceBroker {
            id: leader,
            incarnation: 1,
        });
        let t2 = md.topics["t"].clone();
        assert_eq!(t2.leader, None);
        assert_eq!(t2.epoch, Epoch(t.epoch.0 + 1));
        assert!(!t2.isr.contains(&leader));
        // Broker 3 is not in sync; the fenced leader is not live.
        for cand in [b(3), leader] {
            assert!(matches!(
                md.apply(&Entry::ElectLeader {
                    topic: "t".into(),
                    leader: cand,
                    epoch: t2.epoch
                }),
                Outcome::Refused(_)
            ));
        }
        let other = t2.isr[0];
        assert!(matches!(
            md.apply(&Entry::ElectLeader {
                topic: "t".into(),
                leader: other,
                epoch: t2.epoch
            }),
            Outcome::Applied(_)
        ));
        // The same election again is stale.
        assert!(matches!(
            md.apply(&Entry::ElectLeader {
                topic: "t".into(),
                leader: other,
                epoch: t2.epoch
            }),
            Outcome::Refused(Refusal::StaleEpoch { .. })
        ));
        assert_eq!(md.topics["t"].epoch, Epoch(t2.epoch.0 + 1));
    }

    #[test]
    fn the_last_in_sync_member_stays_and_leads_again_when_back() {
        let mut md = three_brokers_one_topic();
        let t = md.topics["t"].clone();
        let leader = t.leader.unwrap_or(b(0));
        md.apply(&Entry::AlterIsr {
            topic: "t".into(),
            epoch: t.epoch,
            isr_version: t.isr_version,
            isr: vec![leader],
        });
        md.apply(&Entry::FenceBroker {
            id: leader,
            incarnation: 1,
        });
        assert_eq!(md.topics["t"].isr, vec![leader]);
        assert_eq!(md.topics["t"].leader, None);
        // Nobody else may lead: no unclean election.
        let epoch = md.topics["t"].epoch;
        for other in [b(1), b(2), b(3)].into_iter().filter(|x| *x != leader) {
            assert!(matches!(
                md.apply(&Entry::ElectLeader {
                    topic: "t".into(),
                    leader: other,
                    epoch
                }),
                Outcome::Refused(Refusal::NotInSync(_))
            ));
        }
        reg(&mut md, leader.0, 1);
        assert!(matches!(
            md.apply(&Entry::ElectLeader {
                topic: "t".into(),
                leader,
                epoch
            }),
            Outcome::Applied(_)
        ));
    }

    #[test]
    fn a_restarted_broker_loses_its_leadership_and_stale_incarnations_are_refused() {
        let mut md = three_brokers_one_topic();
        let leader = md.topics["t"].leader.unwrap_or(b(0));
        let epoch = md.topics["t"].epoch;
        assert!(matches!(reg(&mut md, leader.0, 2), Outcome::Applied(_)));
        assert_eq!(md.topics["t"].leader, None);
        assert_eq!(md.topics["t"].epoch, Epoch(epoch.0 + 1));
        assert!(!md.topics["t"].isr.contains(&leader));
        assert!(matches!(
            reg(&mut md, leader.0, 1),
            Outcome::Refused(Refusal::StaleIncarnation { .. })
        ));
        assert!(matches!(
            md.apply(&Entry::FenceBroker {
                id: leader,
                incarnation: 1
            }),
            Outcome::Refused(Refusal::StaleIncarnation { .. })
        ));
        assert!(md.is_live(leader));
    }

    #[test]
    fn reassign_keeps_an_in_sync_replica_and_the_leader() {
        let mut md = three_brokers_one_topic();
        reg(&mut md, 4, 1);
        let t = md.topics["t"].clone();
        let leader = t.leader.unwrap_or(b(0));
        let gone = *t.replicas.iter().find(|x| **x != leader).unwrap_or(&b(0));
        md.apply(&Entry::FenceBroker {
            id: gone,
            incarnation: 1,
        });
        let v = md.topics["t"].isr_version;
        let mut new: Vec<BrokerId> = t.replicas.clone();
        for r in new.iter_mut() {
            if *r == gone {
                *r = b(4);
            }
        }
        assert!(matches!(
            md.apply(&Entry::Reassign {
                topic: "t".into(),
                isr_version: v - 1,
                replicas: new.clone()
            }),
            Outcome::Refused(Refusal::StaleIsrVersion { .. })
        ));
        assert!(matches!(
            md.apply(&Entry::Reassign {
                topic: "t".into(),
                isr_version: v,
                replicas: new.clone()
            }),
            Outcome::Applied(_)
        ));
        assert_eq!(md.topics["t"].replicas, new);
        assert!(!md.topics["t"].isr.contains(&b(4)));
        let v = md.topics["t"].isr_version;
        let without_leader: Vec<BrokerId> = new.into_iter().filter(|x| *x != leader).collect();
        assert!(matches!(
            md.apply(&Entry::Reassign {
                topic: "t".into(),
                isr_version: v,
                replicas: without_leader
            }),
            Outcome::Refused(Refusal::InvalidReplicas(_))
        ));
    }

    #[test]
    fn topic_names_follow_nsq() {
        assert!(valid_topic_name("orders.v1_x-y"));
        assert!(valid_topic_name("t#ephemeral"));
        assert!(!valid_topic_name(""));
        assert!(!valid_topic_name("#ephemeral"));
        assert!(!valid_topic_name("a b"));
        assert!(!valid_topic_name(&"x".repeat(65)));
    }
}

//! The controller's metadata and its state machine: brokers (incarnation, addresses, fenced,
//! retired), topics (replicas, leader, epoch, in-sync and eligible sets, their version, the last
//! answered `AlterIsr`), changed only by [`Metadata::apply`] on the entries Raft committed,
//! identically on every lookup.
//!
//! Invariants after every apply (the simulation checks them independently):
//! - a topic's leader is a member of its replicas and of its in-sync set, and is not fenced;
//! - a topic's in-sync and eligible sets are disjoint, sorted subsets of its replicas, never both
//!   empty (their union holds every acknowledged record);
//! - a topic's epoch only grows, by one each time its leader changes (to nobody included), so a
//!   (topic, epoch) has at most one leader, in one incarnation (a broker's new incarnation ends
//!   the epochs it leads);
//! - every entry is a compare-and-set: an `AlterIsr` against the current epoch, the last answered
//!   proposal of the epoch and the in-sync version, adding brokers only in the incarnation the
//!   leader counted (KIP-903); a `Reassign` against the in-sync version; an `ElectLeader` against
//!   the current epoch. A stale or duplicated entry is refused, never applied twice; an
//!   `AlterIsr` refused on its content is still answered (`answered` records it);
//! - a member leaving the in-sync set below `min_insync` with its log intact (a shrink, a fence)
//!   becomes eligible (KIP-966); an eligible one is elected only when no in-sync member is live,
//!   and rejoins the in-sync set; the set empties once the in-sync set is back at `min_insync`;
//! - a broker registering with topics whose log may miss a suffix leaves their in-sync and
//!   eligible sets; a new id at a known one's address retires the old id for good;
//! - the sole holder of what was acknowledged (the last member of both sets) never leaves them:
//!   no replica outside them can ever lead (no unclean election).
//!
//! `apply` is pure and deterministic: its result depends only on the state and the entry (ordered
//! maps, no clock, no randomness), and a refused entry changes nothing.

use std::collections::{BTreeMap, BTreeSet};

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
        /// The topics whose log on this broker may miss a suffix (recovery cut a damaged tail,
        /// or the host rebooted without `--durable`): it leaves their in-sync and eligible sets.
        #[serde(default)]
        damaged: Vec<String>,
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
        /// For each member, the incarnation whose acks the leader counted (KIP-903): a broker
        /// joins only in its current incarnation.
        #[serde(default)]
        incarnations: Vec<(BrokerId, u64)>,
        /// Numbers the leader's proposals within its epoch.
        #[serde(default)]
        proposal: u64,
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
    /// Grows with every change of `isr`, `elr` or `replicas`.
    pub isr_version: u64,
    /// The eligible set (KIP-966; sorted): members that left the in-sync set while it was below
    /// `min_insync` with their log intact. No publish was acknowledged without them since, so
    /// one may lead when no in-sync member is live. Disjoint from `isr`.
    pub elr: Vec<BrokerId>,
    /// The newest `AlterIsr` answered (applied or refused), by epoch and proposal number.
    pub answered: (Epoch, u64),
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
    #[error("proposal {got} is not newer than the answered {answered}")]
    StaleProposal { got: u64, answered: u64 },
    #[error("broker {0:?} was retired (a new broker took its address)")]
    Retired(BrokerId),
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
    /// Ids whose data path was wiped (a new id registered at their address): gone for good.
    pub retired: BTreeSet<BrokerId>,
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

    /// The replicas `topic` gets with `n` of them (`None`: it has `n` already), as a
    /// `Reassign` of its current in-sync version would set them: growing adds the live brokers
    /// holding the fewest replicas; shrinking drops members outside the in-sync set first and
    /// never the leader nor the last in-sync member. Refused (with why) below the topic's
    /// minimum in sync, or above what the live brokers can hold.
    pub fn resized_replicas(&self, topic: &str, n: usize) -> Result<Option<Vec<BrokerId>>, String> {
        let t = self
            .topics
            .get(topic)
            .ok_or_else(|| format!("topic {topic} is not replicated"))?;
        if n < t.min_insync as usize {
            return Err(format!(
                "{n} replicas is fewer than the topic's minimum in sync ({})",
                t.min_insync
            ));
        }
        let mut replicas = t.replicas.clone();
        match n.cmp(&replicas.len()) {
            std::cmp::Ordering::Equal => return Ok(None),
            std::cmp::Ordering::Greater => {
                let mut free: Vec<(usize, BrokerId)> = self
                    .brokers
                    .iter()
                    .filter(|(id, b)| !b.fenced && !self.retired.contains(id))
                    .filter(|(id, _)| !replicas.contains(id))
                    .map(|(id, _)| (self.replica_count(*id), *id))
                    .collect();
                let wanted = n - replicas.len();
                if free.len() < wanted {
                    return Err(format!(
                        "{n} replicas need {wanted} more live brokers; {} hold no replica of it",
                        free.len()
                    ));
                }
                free.sort();
                replicas.extend(free.into_iter().take(wanted).map(|(_, id)| id));
            }
            std::cmp::Ordering::Less => {
                // Out of the in-sync set first (the eligible before the rest), then in-sync
                // members; the newest ids first within each.
                let mut order: Vec<(u8, std::cmp::Reverse<BrokerId>)> = replicas
                    .iter()
                    .filter(|b| t.leader != Some(**b))
                    .map(|b| {
                        let class = if t.isr.contains(b) {
                            2
                        } else if t.elr.contains(b) {
                            1
                        } else {
                            0
                        };
                        (class, std::cmp::Reverse(*b))
                    })
                    .collect();
                order.sort();
                for (_, std::cmp::Reverse(b)) in order {
                    if replicas.len() == n {
                        break;
                    }
                    let in_sync_left = replicas
                        .iter()
                        .filter(|r| **r != b && t.isr.contains(r))
                        .count();
                    if t.isr.contains(&b) && in_sync_left == 0 {
                        continue;
                    }
                    replicas.retain(|r| *r != b);
                }
                if replicas.len() != n {
                    return Err(format!(
                        "{n} replicas would drop the leader or the last in-sync member"
                    ));
                }
            }
        }
        replicas.sort();
        Ok(Some(replicas))
    }

    /// Applies one committed entry; a refusal leaves the state as it was.
    pub fn apply(&mut self, entry: &Entry) -> Outcome {
        let changes = match entry {
            Entry::RegisterBroker {
                id,
                incarnation,
                addresses,
                damaged,
            } => self.register(*id, *incarnation, addresses, damaged),
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
                incarnations,
                proposal,
            } => self.alter_isr(topic, *epoch, *isr_version, isr, incarnations, *proposal),
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
        damaged: &[String],
    ) -> Result<Vec<Change>, Refusal> {
        if self.retired.contains(&id) {
            return Err(Refusal::Retired(id));
        }
        let mut changes = Vec::new();
        let mut olds = Vec::new();
        match self.brokers.get(&id) {
            Some(b) if incarnation < b.incarnation => {
                return Err(Refusal::StaleIncarnation {
                    id,
                    got: incarnation,
                    current: b.incarnation,
                })
            }
            Some(b)
                if incarnation == b.incarnation
                    && !b.fenced
                    && b.addresses == addresses
                    && damaged.is_empty() =>
            {
                return Err(Refusal::Unchanged)
            }
            Some(b) => {
                // A restarted process may lead with a log its crash shortened: every epoch it
                // leads ends, and the topics are elected again (possibly it) in a new epoch.
                if incarnation > b.incarnation
                    && !mutation::active(mutation::Mutation::RestartKeepsLeader)
                {
                    self.end_leaderships(id, &mut changes);
                }
            }
            None => {
                // A new id at the address of a known one: that data path was wiped, the old id
                // is gone for good. Only the first address (the one the operator names; the
                // others follow from it and the shard count) is compared: a retirement cannot
                // be undone, and two brokers whose later ports merely overlap are not one.
                if !mutation::active(mutation::Mutation::KeepWipedId) {
                    olds = self
                        .brokers
                        .iter()
                        .filter(|(_, b)| same_first_address(&b.addresses, addresses))
                        .map(|(old, _)| *old)
                        .collect();
                }
            }
        }
        let info = BrokerInfo {
            incarnation,
            addresses: addresses.to_vec(),
            fenced: false,
        };
        self.brokers.insert(id, info.clone());
        changes.insert(0, Change::Broker { id, info });
        // The topics whose log may miss a suffix: it leaves their in-sync and eligible sets.
        if !mutation::active(mutation::Mutation::IgnoreDamaged) {
            for name in damaged {
                self.drop_member(name, id, false, &mut changes);
            }
        }
        for old in olds {
            self.retire(old, &mut changes);
        }
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
        if !mutation::active(mutation::Mutation::FenceKeepsLeader) {
            self.end_leaderships(id, &mut changes);
        }
        let names: Vec<String> = self.topics.keys().cloned().collect();
        for name in names {
            // A fenced broker keeps its log: it may become eligible.
            self.drop_member(&name, id, true, &mut changes);
        }
        Ok(changes)
    }

    /// Ends every epoch `id` leads: a new, leaderless epoch (the sessions elect the next).
    fn end_leaderships(&mut self, id: BrokerId, changes: &mut Vec<Change>) {
        for (name, t) in self.topics.iter_mut() {
            if t.leader == Some(id) {
                t.leader = None;
                t.epoch = Epoch(t.epoch.0 + 1);
                push_topic(changes, name, t);
            }
        }
    }

    /// Takes `id` out of `topic`'s in-sync set, and, unless `keeps_log`, out of its eligible
    /// set. A member leaving while the set is below `min_insync` with its log intact becomes
    /// eligible. The sole holder of what was acknowledged (the last in-sync member, no eligible
    /// one) stays.
    fn drop_member(
        &mut self,
        topic: &str,
        id: BrokerId,
        keeps_log: bool,
        changes: &mut Vec<Change>,
    ) {
        let Some(t) = self.topics.get_mut(topic) else {
            return;
        };
        let mut changed = false;
        // The only eligible member with an empty in-sync set stays: nobody else holds it all.
        let sole_eligible = t.isr.is_empty() && t.elr == [id];
        if !keeps_log && t.elr.contains(&id) && !sole_eligible {
            t.elr.retain(|b| *b != id);
            changed = true;
        }
        if t.isr.contains(&id) {
            let rest: Vec<BrokerId> = t.isr.iter().copied().filter(|b| *b != id).collect();
            if !rest.is_empty() || !t.elr.is_empty() {
                if keeps_log
                    && rest.len() < t.min_insync as usize
                    && !mutation::active(mutation::Mutation::NoEligible)
                {
                    t.elr.push(id);
                    t.elr.sort();
                }
                t.isr = rest;
                changed = true;
            }
        }
        if changed {
            t.isr_version += 1;
            push_topic(changes, topic, t);
        }
    }

    /// `old`'s data path was wiped: it is fenced for good, leaves every set, and each topic it
    /// held gets the live broker with the fewest replicas in its place (unless it is the last
    /// holder of what was acknowledged: nothing can replace that).
    fn retire(&mut self, old: BrokerId, changes: &mut Vec<Change>) {
        self.retired.insert(old);
        if let Some(b) = self.brokers.get_mut(&old) {
            if !b.fenced {
                b.fenced = true;
                changes.push(Change::Broker {
                    id: old,
                    info: b.clone(),
                });
            }
        }
        self.end_leaderships(old, changes);
        let names: Vec<String> = self
            .topics
            .iter()
            .filter(|(_, t)| t.replicas.contains(&old))
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.drop_member(&name, old, false, changes);
            let Some(t) = self.topics.get(&name) else {
                continue;
            };
            if t.isr.contains(&old) || t.elr.contains(&old) {
                continue;
            }
            let replicas = t.replicas.clone();
            let by = self
                .brokers
                .iter()
                .filter(|(id, b)| !b.fenced && !replicas.contains(id))
                .map(|(id, _)| (self.replica_count(*id), *id))
                .min()
                .map(|(_, id)| id);
            if let (Some(by), Some(t)) = (by, self.topics.get_mut(&name)) {
                for r in t.replicas.iter_mut() {
                    if *r == old {
                        *r = by;
                    }
                }
                t.isr_version += 1;
                push_topic(changes, &name, t);
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
            elr: Vec::new(),
            answered: (Epoch(0), 0),
        };
        self.topics.insert(name.to_string(), state.clone());
        Ok(vec![Change::Topic {
            name: name.to_string(),
            state,
        }])
    }

    /// A leader's proposal: refused unchanged when its epoch is not current or a newer proposal
    /// of the epoch was answered; otherwise answered (recorded in `answered`), and applied if
    /// valid.
    #[allow(clippy::too_many_arguments)]
    fn alter_isr(
        &mut self,
        topic: &str,
        epoch: Epoch,
        isr_version: u64,
        isr: &[BrokerId],
        incarnations: &[(BrokerId, u64)],
        proposal: u64,
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
        // A copy of a proposal already answered (a resend, or one delayed past the leader's
        // next) is ignored: the leader may have dropped it as refused.
        if (epoch, proposal) <= t.answered
            && !mutation::active(mutation::Mutation::ProposalCopiesApply)
        {
            return Err(Refusal::StaleProposal {
                got: proposal,
                answered: t.answered.1,
            });
        }
        let answered = t.answered;
        if !mutation::active(mutation::Mutation::RefusalUnanswered) {
            t.answered = (epoch, proposal);
        }
        match check_isr(t, brokers, isr_version, isr, incarnations, skip_checks) {
            Ok(new) => {
                let removed: Vec<BrokerId> =
                    t.isr.iter().copied().filter(|b| !new.contains(b)).collect();
                if new.len() < t.min_insync as usize {
                    if !mutation::active(mutation::Mutation::NoEligible) {
                        t.elr.extend(removed);
                    }
                } else {
                    t.elr.clear();
                }
                t.elr.retain(|b| !new.contains(b));
                t.elr.sort();
                t.elr.dedup();
                t.isr = new;
                t.isr_version += 1;
            }
            Err(refusal) if t.answered == answered => return Err(refusal),
            // Refused, but answered: the leader learns its proposal was dropped.
            Err(_) => {}
        }
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
        let brokers = &self.brokers;
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
        // An eligible member may lead only when no in-sync member is live (KIP-966).
        let live_in_sync = t
            .isr
            .iter()
            .any(|b| brokers.get(b).is_some_and(|i| !i.fenced));
        let from_elr = !t.isr.contains(&leader) && !live_in_sync && t.elr.contains(&leader);
        if !t.isr.contains(&leader)
            && !from_elr
            && !mutation::active(mutation::Mutation::ElectOutsideIsr)
        {
            return Err(Refusal::NotInSync(leader));
        }
        if !live && !mutation::active(mutation::Mutation::ElectFenced) {
            return Err(Refusal::Fenced(leader));
        }
        t.leader = Some(leader);
        if !mutation::active(mutation::Mutation::ElectKeepsEpoch) {
            t.epoch = Epoch(t.epoch.0 + 1);
        }
        if from_elr {
            t.elr.retain(|b| *b != leader);
            t.isr.push(leader);
            t.isr.sort();
            t.isr_version += 1;
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
        t.elr.retain(|b| replicas.contains(b));
        t.isr = isr;
        t.isr_version += 1;
        Ok(vec![Change::Topic {
            name: topic.to_string(),
            state: t.clone(),
        }])
    }
}

fn push_topic(changes: &mut Vec<Change>, name: &str, t: &TopicState) {
    changes.retain(|c| !matches!(c, Change::Topic { name: n, .. } if n == name));
    changes.push(Change::Topic {
        name: name.to_string(),
        state: t.clone(),
    });
}

/// The in-sync set `isr` (sorted, deduplicated) if the leader may set it now: based on the
/// current version, holding the leader, within the replicas, adding only live brokers in the
/// incarnation the leader counted.
fn check_isr(
    t: &TopicState,
    brokers: &BTreeMap<BrokerId, BrokerInfo>,
    isr_version: u64,
    isr: &[BrokerId],
    incarnations: &[(BrokerId, u64)],
    skip_version: bool,
) -> Result<Vec<BrokerId>, Refusal> {
    if t.isr_version != isr_version && !skip_version {
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
    // Members already in the set may be fenced (the last one stays); new ones may not, and
    // must be in the incarnation whose acks the leader counted.
    let current = |b: &BrokerId| {
        brokers.get(b).is_some_and(|i| {
            !i.fenced
                && (mutation::active(mutation::Mutation::IgnoreIncarnations)
                    || incarnations.contains(&(*b, i.incarnation)))
        })
    };
    if new.iter().any(|b| !t.isr.contains(b) && !current(b)) {
        return Err(Refusal::InvalidIsr(
            "a joining broker must be live, in the incarnation counted",
        ));
    }
    if new == t.isr {
        return Err(Refusal::Unchanged);
    }
    Ok(new)
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
        /// Members leaving a set below `min_insync` never become eligible.
        NoEligible,
        /// `AlterIsr` adds brokers whatever incarnation the leader counted.
        IgnoreIncarnations,
        /// A refused `AlterIsr` is not recorded as answered.
        RefusalUnanswered,
        /// A copy of an answered `AlterIsr` is answered (and applied) again.
        ProposalCopiesApply,
        /// A new incarnation of a leader goes on leading its epochs.
        RestartKeepsLeader,
        /// `RegisterBroker` ignores the damaged topics it names.
        IgnoreDamaged,
        /// A new id at a known address leaves the old id in place.
        KeepWipedId,
        /// A snapshot is labelled with the index before the one whose metadata it holds.
        SnapshotWrongIndex,
        /// A restart from a snapshot takes its index but not its metadata and deltas.
        RestartIgnoresSnapshot,
        /// A follower installing a leader's snapshot keeps its own metadata.
        InstallKeepsMetadata,
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

/// Whether two registrations name the same broker address: their first ones (a broker's
/// `--replication-address`; shard `i` listens on its port + `i`).
pub fn same_first_address(a: &[String], b: &[String]) -> bool {
    matches!((a.first(), b.first()), (Some(x), Some(y)) if x == y)
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
            damaged: vec![],
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
        let shrink = |epoch, v, proposal| Entry::AlterIsr {
            topic: "t".into(),
            epoch,
            isr_version: v,
            isr: vec![b(1), b(2)],
            incarnations: vec![],
            proposal,
        };
        assert!(matches!(
            md.apply(&shrink(Epoch(t.epoch.0 - 1), t.isr_version, 1)),
            Outcome::Refused(Refusal::StaleEpoch { .. })
        ));
        // A stale version is refused, and the refusal answered: only `answered` changes.
        let before = md.topics["t"].clone();
        assert!(matches!(
            md.apply(&shrink(t.epoch, t.isr_version + 1, 1)),
            Outcome::Applied(_)
        ));
        let after = md.topics["t"].clone();
        assert_eq!(after.answered, (t.epoch, 1));
        assert_eq!(
            (after.isr, after.isr_version),
            (before.isr, before.isr_version)
        );
        assert!(matches!(
            md.apply(&shrink(t.epoch, t.isr_version, 2)),
            Outcome::Applied(_)
        ));
        assert_eq!(md.topics["t"].isr_version, t.isr_version + 1);
        // The same request again is a copy of an answered proposal: ignored.
        assert!(matches!(
            md.apply(&shrink(t.epoch, t.isr_version + 1, 2)),
            Outcome::Refused(Refusal::StaleProposal { .. })
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
            incarnations: vec![],
            proposal: 1,
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

    fn alter(md: &mut Metadata, isr: Vec<BrokerId>, proposal: u64) -> Outcome {
        let t = md.topics["t"].clone();
        let incarnations = isr
            .iter()
            .map(|m| (*m, md.brokers.get(m).map_or(0, |i| i.incarnation)))
            .collect();
        md.apply(&Entry::AlterIsr {
            topic: "t".into(),
            epoch: t.epoch,
            isr_version: t.isr_version,
            isr,
            incarnations,
            proposal,
        })
    }

    fn elect(md: &mut Metadata, leader: BrokerId) -> Outcome {
        let epoch = md.topics["t"].epoch;
        md.apply(&Entry::ElectLeader {
            topic: "t".into(),
            leader,
            epoch,
        })
    }

    #[test]
    fn the_last_in_sync_member_stays_and_leads_again_when_back() {
        let mut md = Metadata::default();
        for id in 1..=3 {
            reg(&mut md, id, 1);
        }
        md.apply(&Entry::CreateTopic {
            name: "t".into(),
            replicas: 3,
            min_insync: 1,
        });
        let leader = md.topics["t"].leader.unwrap_or(b(0));
        alter(&mut md, vec![leader], 1);
        assert!(md.topics["t"].elr.is_empty());
        md.apply(&Entry::FenceBroker {
            id: leader,
            incarnation: 1,
        });
        assert_eq!(md.topics["t"].isr, vec![leader]);
        assert_eq!(md.topics["t"].leader, None);
        // Nobody else may lead: no unclean election.
        for other in [b(1), b(2), b(3)].into_iter().filter(|x| *x != leader) {
            assert!(matches!(
                elect(&mut md, other),
                Outcome::Refused(Refusal::NotInSync(_))
            ));
        }
        reg(&mut md, leader.0, 1);
        assert!(matches!(elect(&mut md, leader), Outcome::Applied(_)));
    }

    #[test]
    fn members_leaving_below_min_insync_become_eligible_and_one_leads_when_no_in_sync_member_is_live(
    ) {
        let mut md = three_brokers_one_topic();
        let t = md.topics["t"].clone();
        let leader = t.leader.unwrap_or(b(0));
        let others: Vec<BrokerId> = t
            .replicas
            .iter()
            .copied()
            .filter(|x| *x != leader)
            .collect();
        let (x, y) = (others[0], others[1]);
        // At min_insync: y leaves, not eligible (publishes go on without it).
        alter(&mut md, vec![leader, x], 1);
        assert!(md.topics["t"].elr.is_empty());
        // Below min_insync: a fenced x keeps its log and becomes eligible.
        md.apply(&Entry::FenceBroker {
            id: x,
            incarnation: 1,
        });
        assert_eq!(md.topics["t"].elr, vec![x]);
        // The last in-sync member may leave now: an eligible one holds everything.
        md.apply(&Entry::FenceBroker {
            id: leader,
            incarnation: 1,
        });
        let t = md.topics["t"].clone();
        assert!(t.isr.is_empty());
        let mut elr = vec![x, leader];
        elr.sort();
        assert_eq!(t.elr, elr);
        // y is neither in sync nor eligible; x is fenced.
        assert!(matches!(
            elect(&mut md, y),
            Outcome::Refused(Refusal::NotInSync(_))
        ));
        assert!(matches!(
            elect(&mut md, x),
            Outcome::Refused(Refusal::Fenced(_))
        ));
        // x back with a damaged log: it is no longer eligible.
        md.apply(&Entry::RegisterBroker {
            id: x,
            incarnation: 2,
            addresses: vec![format!("10.0.0.{}:4150", x.0)],
            damaged: vec!["t".into()],
        });
        assert_eq!(md.topics["t"].elr, vec![leader]);
        assert!(matches!(
            elect(&mut md, x),
            Outcome::Refused(Refusal::NotInSync(_))
        ));
        // The old leader back intact: elected from the eligible set, it rejoins the in-sync set.
        reg(&mut md, leader.0, 1);
        assert!(matches!(elect(&mut md, leader), Outcome::Applied(_)));
        let t = md.topics["t"].clone();
        assert_eq!(
            (t.isr, t.elr, t.leader),
            (vec![leader], vec![], Some(leader))
        );
        // Back at min_insync (x joins in its current incarnation), the eligible set empties.
        assert!(matches!(
            alter(&mut md, vec![leader, x], 1),
            Outcome::Applied(_)
        ));
        assert!(md.topics["t"].elr.is_empty());
    }

    #[test]
    fn a_broker_joins_only_in_the_incarnation_the_leader_counted() {
        let mut md = three_brokers_one_topic();
        let t = md.topics["t"].clone();
        let leader = t.leader.unwrap_or(b(0));
        let x = t
            .replicas
            .iter()
            .copied()
            .find(|m| *m != leader)
            .unwrap_or(b(0));
        alter(&mut md, vec![leader], 1);
        reg(&mut md, x.0, 2);
        let t = md.topics["t"].clone();
        let join = |incarnation, proposal| Entry::AlterIsr {
            topic: "t".into(),
            epoch: t.epoch,
            isr_version: t.isr_version,
            isr: vec![leader, x],
            incarnations: vec![(leader, 1), (x, incarnation)],
            proposal,
        };
        md.apply(&join(1, 2));
        assert_eq!(md.topics["t"].isr, vec![leader]);
        assert_eq!(md.topics["t"].answered, (t.epoch, 2));
        assert!(matches!(md.apply(&join(2, 3)), Outcome::Applied(_)));
        assert!(md.topics["t"].isr.contains(&x));
    }

    #[test]
    fn a_registration_naming_damaged_topics_leaves_their_in_sync_sets() {
        let mut md = three_brokers_one_topic();
        let t = md.topics["t"].clone();
        let x = t
            .replicas
            .iter()
            .copied()
            .find(|m| Some(*m) != t.leader)
            .unwrap_or(b(0));
        let out = md.apply(&Entry::RegisterBroker {
            id: x,
            incarnation: 2,
            addresses: vec![format!("10.0.0.{}:4150", x.0)],
            damaged: vec!["t".into(), "unknown".into()],
        });
        assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        let t2 = md.topics["t"].clone();
        assert!(!t2.isr.contains(&x) && !t2.elr.contains(&x));
        assert_eq!((t2.leader, t2.epoch), (t.leader, t.epoch));
        assert!(md.is_live(x));
    }

    #[test]
    fn a_new_id_at_a_known_address_retires_the_old_one() {
        let mut md = three_brokers_one_topic();
        reg(&mut md, 4, 1);
        let t = md.topics["t"].clone();
        let old = t.leader.unwrap_or(b(0));
        let out = md.apply(&Entry::RegisterBroker {
            id: b(9),
            incarnation: 1,
            addresses: vec![format!("10.0.0.{}:4150", old.0)],
            damaged: vec![],
        });
        assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        let t2 = md.topics["t"].clone();
        assert!(md.retired.contains(&old) && !md.is_live(old));
        assert_eq!(t2.leader, None);
        assert!(t2.epoch > t.epoch);
        assert!(!t2.isr.contains(&old) && !t2.replicas.contains(&old));
        assert!(t2.replicas.contains(&b(4)) || t2.replicas.contains(&b(9)));
        assert!(matches!(
            reg(&mut md, old.0, 2),
            Outcome::Refused(Refusal::Retired(_))
        ));
    }

    #[test]
    fn a_wiped_broker_is_recognised_by_its_first_address_whatever_its_shard_count() {
        let addrs = |first: u16, n: u16| -> Vec<String> {
            (first..first + n)
                .map(|p| format!("10.0.0.7:{p}"))
                .collect()
        };
        let mut md = three_brokers_one_topic();
        for (id, addresses) in [(7, addrs(5000, 4)), (8, addrs(5010, 2))] {
            let out = md.apply(&Entry::RegisterBroker {
                id: b(id),
                incarnation: 1,
                addresses,
                damaged: vec![],
            });
            assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        }
        // Restarted with another shard count, same data path: the same broker.
        let out = md.apply(&Entry::RegisterBroker {
            id: b(7),
            incarnation: 2,
            addresses: addrs(5000, 2),
            damaged: vec![],
        });
        assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        assert!(md.is_live(b(7)) && md.retired.is_empty());
        // A new broker whose ports overlap 7's later ones is another broker: 7 stays.
        let out = md.apply(&Entry::RegisterBroker {
            id: b(9),
            incarnation: 1,
            addresses: addrs(5001, 2),
            damaged: vec![],
        });
        assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        assert!(
            md.is_live(b(7)) && md.retired.is_empty(),
            "{:?}",
            md.retired
        );
        // 8 wiped, back with more shards: a new id at its first address retires 8.
        let out = md.apply(&Entry::RegisterBroker {
            id: b(10),
            incarnation: 1,
            addresses: addrs(5010, 4),
            damaged: vec![],
        });
        assert!(matches!(out, Outcome::Applied(_)), "{out:?}");
        assert!(md.retired.contains(&b(8)) && !md.is_live(b(8)));
        assert!(md.is_live(b(7)) && md.is_live(b(9)) && md.is_live(b(10)));
    }

    #[test]
    fn a_restarted_broker_loses_its_leadership_and_stale_incarnations_are_refused() {
        let mut md = three_brokers_one_topic();
        let leader = md.topics["t"].leader.unwrap_or(b(0));
        let epoch = md.topics["t"].epoch;
        assert!(matches!(reg(&mut md, leader.0, 2), Outcome::Applied(_)));
        assert_eq!(md.topics["t"].leader, None);
        assert_eq!(md.topics["t"].epoch, Epoch(epoch.0 + 1));
        // A process restart loses nothing written: it stays in sync, and may lead again.
        assert!(md.topics["t"].isr.contains(&leader));
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
    fn resizing_grows_onto_the_least_loaded_and_shrinks_outside_the_in_sync_set_first() {
        let mut md = three_brokers_one_topic();
        for id in 4..=5 {
            assert!(matches!(reg(&mut md, id, 1), Outcome::Applied(_)));
        }
        let t = md
            .topics
            .get("t")
            .cloned()
            .unwrap_or_else(|| unreachable!());
        assert_eq!(md.resized_replicas("t", t.replicas.len()), Ok(None));
        let grown = md.resized_replicas("t", 5);
        assert_eq!(grown, Ok(Some(vec![b(1), b(2), b(3), b(4), b(5)])));
        assert!(md
            .resized_replicas("t", 6)
            .is_err_and(|e| e.contains("live brokers")));
        assert!(md
            .resized_replicas("t", 1)
            .is_err_and(|e| e.contains("minimum in sync")));
        assert!(md.resized_replicas("nope", 3).is_err());
        // Grown to 5: the two new members are not in sync yet, so a shrink drops them first.
        let Ok(Some(five)) = grown else {
            unreachable!()
        };
        let applied = md.apply(&Entry::Reassign {
            topic: "t".into(),
            isr_version: t.isr_version,
            replicas: five,
        });
        assert!(matches!(applied, Outcome::Applied(_)), "{applied:?}");
        assert_eq!(md.resized_replicas("t", 3), Ok(Some(t.replicas.clone())));
        let two = md.resized_replicas("t", 2);
        let Ok(Some(two)) = two else {
            panic!("{two:?}")
        };
        assert!(
            t.leader.is_some_and(|l| two.contains(&l)),
            "the leader stays"
        );
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

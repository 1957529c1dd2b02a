//! The simulation's invariants, checked after every step. Each is a predicate of its own over
//! what the nodes report (never the code under test's own verdict), so a bug that breaks the
//! rule makes it fail:
//! - at most one Raft leader per term;
//! - every node applies the same entry at the same index (its applied sequence is a prefix of
//!   one global sequence) and reaches the same metadata there;
//! - along that sequence: a refused entry changes nothing; an applied `AlterIsr` or `Reassign`
//!   carried the current epoch and version; an applied `ElectLeader` named a live in-sync member;
//!   epochs never go down, and a leader change always takes a new epoch;
//! - along it too, the data path's rules: a member leaving the in-sync set below `min_insync`
//!   with its log intact (an `AlterIsr`, a fence) becomes eligible; an eligible member is
//!   elected only when no in-sync member is live; an `AlterIsr` adds a broker only in the
//!   incarnation the leader counted; every `AlterIsr` of the current epoch newer than the last
//!   answered is answered, and no other changes anything; a restarted leader's epochs end; the
//!   topics a registration names as damaged lose it from their in-sync and eligible sets; a new
//!   id at a known address retires the old id (fenced, in no set, leading nothing);
//! - in every state any node holds: a topic's leader is a live member of its in-sync set, the
//!   in-sync and eligible sets are disjoint subsets of the replicas, not both empty, and a
//!   (topic, epoch) never had two leaders, nor two incarnations of one;
//! - a broker's view at version v is exactly the metadata at v as that broker needs it;
//! - a snapshot a node writes holds exactly the metadata at its index; a node starting from one
//!   (restarted, or installing a leader's) resumes at its index with that metadata, and goes on
//!   applying the same entries as every other node from there (nothing committed is lost).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use crate::controller::metadata::{Entry, Metadata, Outcome};
use crate::controller::node::Applied;
use crate::controller::view::BrokerView;
use crate::ids::{BrokerId, Epoch};

/// The first broken rule.
pub(crate) type Violation = String;

/// What the checker has seen so far.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    /// Raft term -> its leader.
    term_leaders: BTreeMap<u64, u64>,
    /// The global applied sequence: (term, entry) at index i + 1.
    log: Vec<(u64, Option<Entry>)>,
    /// The metadata's digest after each index of `log`.
    digests: Vec<u64>,
    /// The metadata after `log`.
    reference: Metadata,
    /// The metadata at each version (index = version).
    by_version: Vec<Metadata>,
    /// (topic, epoch) -> its leader and the leader's incarnation.
    topic_leaders: BTreeMap<(String, Epoch), (BrokerId, u64)>,
    /// Per node, the next index it must apply (1 after a restart).
    next_index: BTreeMap<u64, u64>,
    pub(crate) leader_changes: u64,
    /// Per kind of entry: (applied, refused).
    pub(crate) entries: BTreeMap<&'static str, (u64, u64)>,
}

fn kind(e: &Entry) -> &'static str {
    match e {
        Entry::RegisterBroker { .. } => "RegisterBroker",
        Entry::FenceBroker { .. } => "FenceBroker",
        Entry::CreateTopic { .. } => "CreateTopic",
        Entry::AlterIsr { .. } => "AlterIsr",
        Entry::ElectLeader { .. } => "ElectLeader",
        Entry::Reassign { .. } => "Reassign",
    }
}

pub(crate) fn digest(md: &Metadata) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    md.hash(&mut h);
    h.finish()
}

impl Checker {
    pub(crate) fn new() -> Self {
        Self {
            by_version: vec![Metadata::default()],
            ..Self::default()
        }
    }

    /// A node (re)started at `applied` (0, or the index of the snapshot it started from): it
    /// applies from the next index.
    pub(crate) fn restarted(&mut self, node: u64, applied: u64) {
        self.next_index.insert(node, applied + 1);
    }

    /// A node replaced its metadata with a leader's snapshot at `index`: it applies from the
    /// next index. The snapshot must be ahead of what the node applied (it holds committed
    /// entries the node lacked), and what it holds is checked by `node_state` at `index`.
    pub(crate) fn installed(&mut self, node: u64, index: u64) -> Result<(), Violation> {
        let next = self.next_index.entry(node).or_insert(1);
        if index < *next {
            return Err(format!(
                "node {node} installed a snapshot at {index}, having applied up to {}",
                *next - 1
            ));
        }
        if index as usize > self.log.len() {
            return Err(format!(
                "node {node} installed a snapshot at {index}, beyond anything applied"
            ));
        }
        *next = index + 1;
        Ok(())
    }

    /// A snapshot a node wrote: it must hold exactly the metadata every node reached at its
    /// index (what a restart or a lagging follower then starts from).
    pub(crate) fn snapshot(&self, node: u64, index: u64, md: &Metadata) -> Result<(), Violation> {
        let expected = index
            .checked_sub(1)
            .and_then(|i| self.digests.get(i as usize))
            .ok_or_else(|| format!("node {node} wrote a snapshot at {index}, beyond the log"))?;
        if digest(md) != *expected {
            return Err(format!(
                "node {node}'s snapshot at index {index} differs from the metadata there"
            ));
        }
        Ok(())
    }

    pub(crate) fn raft_leader(&mut self, term: u64, node: u64) -> Result<(), Violation> {
        match self.term_leaders.get(&term) {
            Some(other) if *other != node => Err(format!(
                "two Raft leaders in term {term}: nodes {other} and {node}"
            )),
            Some(_) => Ok(()),
            None => {
                self.term_leaders.insert(term, node);
                Ok(())
            }
        }
    }

    /// Entries `node` applied, in order.
    pub(crate) fn applied(&mut self, node: u64, applied: &[Applied]) -> Result<(), Violation> {
        for a in applied {
            let next = self.next_index.entry(node).or_insert(1);
            if a.index != *next {
                return Err(format!(
                    "node {node} applied index {} where {} was next",
                    a.index, next
                ));
            }
            *next += 1;
            let i = a.index as usize;
            if i <= self.log.len() {
                let (term, entry) = &self.log[i - 1];
                if *term != a.term || *entry != a.entry {
                    return Err(format!(
                        "node {node} applied ({}, {:?}) at index {i} where another applied ({term}, {entry:?})",
                        a.term, a.entry
                    ));
                }
                continue;
            }
            let before = self.reference.clone();
            if let Some(entry) = &a.entry {
                let outcome = self.reference.apply(entry);
                let counts = self.entries.entry(kind(entry)).or_default();
                match outcome {
                    Outcome::Applied(_) => counts.0 += 1,
                    Outcome::Refused(_) => counts.1 += 1,
                }
                let reference = self.reference.clone();
                self.state(&reference)
                    .map_err(|e| format!("after index {i}, {entry:?}: {e}"))?;
                transition(&before, entry, &outcome, &self.reference)
                    .map_err(|e| format!("index {i}, {entry:?}: {e}"))?;
                if self.reference.version != before.version {
                    self.by_version.push(self.reference.clone());
                }
                self.leader_changes += before
                    .topics
                    .iter()
                    .filter(|(n, t)| {
                        self.reference
                            .topics
                            .get(*n)
                            .is_some_and(|u| u.leader != t.leader)
                    })
                    .count() as u64;
            }
            self.log.push((a.term, a.entry.clone()));
            self.digests.push(digest(&self.reference));
        }
        Ok(())
    }

    /// A node's metadata after it applied up to `applied_index`.
    pub(crate) fn node_state(
        &mut self,
        node: u64,
        applied_index: u64,
        md: &Metadata,
    ) -> Result<(), Violation> {
        let expected = match applied_index {
            0 => digest(&Metadata::default()),
            i => *self
                .digests
                .get(i as usize - 1)
                .ok_or_else(|| format!("node {node} applied {i}, beyond the checker's log"))?,
        };
        if digest(md) != expected {
            return Err(format!(
                "node {node}'s metadata at index {applied_index} differs from the others'"
            ));
        }
        self.state(md).map_err(|e| format!("node {node}: {e}"))
    }

    /// A broker's view.
    pub(crate) fn view(&self, view: &BrokerView) -> Result<(), Violation> {
        let md = self.by_version.get(view.version as usize).ok_or_else(|| {
            format!(
                "broker {:?} has a view of unknown version {}",
                view.broker, view.version
            )
        })?;
        if md.view_for(view.broker) != *view {
            return Err(format!(
                "broker {:?}'s view at version {} differs from the metadata's",
                view.broker, view.version
            ));
        }
        Ok(())
    }

    /// Rules every applied state keeps.
    fn state(&mut self, md: &Metadata) -> Result<(), Violation> {
        for (name, t) in &md.topics {
            if t.isr.is_empty() && t.elr.is_empty() {
                return Err(format!("topic {name}: empty in-sync and eligible sets"));
            }
            if t.elr.windows(2).any(|w| w[0] >= w[1])
                || t.elr
                    .iter()
                    .any(|b| t.isr.contains(b) || !t.replicas.contains(b))
            {
                return Err(format!(
                    "topic {name}: eligible set {:?} not sorted, or not disjoint from {:?} within {:?}",
                    t.elr, t.isr, t.replicas
                ));
            }
            if t.isr.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("topic {name}: in-sync set {:?} not sorted", t.isr));
            }
            if t.isr.iter().any(|b| !t.replicas.contains(b)) {
                return Err(format!(
                    "topic {name}: in-sync {:?} not within replicas {:?}",
                    t.isr, t.replicas
                ));
            }
            if let Some(l) = t.leader {
                if !t.isr.contains(&l) {
                    return Err(format!(
                        "topic {name}: leader {l:?} outside the in-sync set {:?}",
                        t.isr
                    ));
                }
                if md.brokers.get(&l).is_none_or(|b| b.fenced) {
                    return Err(format!("topic {name}: leader {l:?} is fenced"));
                }
                let inc = md.brokers.get(&l).map_or(0, |b| b.incarnation);
                match self.topic_leaders.get(&(name.clone(), t.epoch)) {
                    Some((other, _)) if *other != l => {
                        return Err(format!(
                            "topic {name}: epoch {:?} led by {other:?} and {l:?}",
                            t.epoch
                        ))
                    }
                    Some((_, i)) if *i != inc => {
                        return Err(format!(
                            "topic {name}: epoch {:?} led by {l:?} in incarnations {i} and {inc}",
                            t.epoch
                        ))
                    }
                    Some(_) => {}
                    None => {
                        self.topic_leaders.insert((name.clone(), t.epoch), (l, inc));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the topic exists in the latest applied metadata.
    pub(crate) fn has_topic(&self, name: &str) -> bool {
        self.reference.topics.contains_key(name)
    }

    pub(crate) fn applied_len(&self) -> usize {
        self.log.len()
    }

    pub(crate) fn terms(&self) -> usize {
        self.term_leaders.len()
    }
}

/// Rules of one step along the applied sequence.
fn transition(
    before: &Metadata,
    entry: &Entry,
    outcome: &Outcome,
    after: &Metadata,
) -> Result<(), String> {
    if let Outcome::Refused(_) = outcome {
        if before != after {
            return Err("refused, yet the metadata changed".into());
        }
        if let Entry::AlterIsr {
            topic,
            epoch,
            proposal,
            ..
        } = entry
        {
            if let Some(t) = before.topics.get(topic) {
                if t.epoch == *epoch && (*epoch, *proposal) > t.answered {
                    return Err(format!(
                        "AlterIsr proposal {proposal} of the current epoch left unanswered"
                    ));
                }
            }
        }
        return Ok(());
    }
    if after.version != before.version + 1 {
        return Err("applied without a new version".into());
    }
    match entry {
        Entry::AlterIsr {
            topic,
            epoch,
            isr_version,
            incarnations,
            proposal,
            ..
        } => {
            let t = before
                .topics
                .get(topic)
                .ok_or("AlterIsr applied to an unknown topic")?;
            let u = after
                .topics
                .get(topic)
                .ok_or("AlterIsr removed its topic")?;
            if (*epoch, *proposal) <= t.answered {
                return Err(format!(
                    "a copy of an answered AlterIsr applied: ({epoch:?}, {proposal}) after {:?}",
                    t.answered
                ));
            }
            if u.answered != (*epoch, *proposal) {
                return Err(format!("AlterIsr proposal {proposal} applied unanswered"));
            }
            let changed = u.isr != t.isr || u.isr_version != t.isr_version;
            if changed && (t.epoch != *epoch || t.isr_version != *isr_version) {
                return Err(format!(
                    "stale AlterIsr applied: it carried ({epoch:?}, {isr_version}), current ({:?}, {})",
                    t.epoch, t.isr_version
                ));
            }
            for m in u.isr.iter().filter(|m| !t.isr.contains(m)) {
                let current = before.brokers.get(m).map(|b| (b.incarnation, b.fenced));
                let counted = incarnations.iter().find(|(b, _)| b == m).map(|x| x.1);
                if current.is_none_or(|(inc, fenced)| fenced || counted != Some(inc)) {
                    return Err(format!(
                        "AlterIsr added {m:?} in incarnation {counted:?}, registered {current:?}"
                    ));
                }
            }
        }
        Entry::Reassign {
            topic, isr_version, ..
        } => {
            let t = before
                .topics
                .get(topic)
                .ok_or("Reassign applied to an unknown topic")?;
            if t.isr_version != *isr_version {
                return Err("stale Reassign applied".into());
            }
        }
        Entry::ElectLeader { topic, leader, .. } => {
            let t = before
                .topics
                .get(topic)
                .ok_or("ElectLeader applied to an unknown topic")?;
            let live_in_sync = t.isr.iter().any(|b| before.is_live(*b));
            if !t.isr.contains(leader) && (live_in_sync || !t.elr.contains(leader)) {
                return Err(format!(
                    "elected {leader:?} outside the in-sync set {:?} (eligible {:?})",
                    t.isr, t.elr
                ));
            }
            if before.brokers.get(leader).is_none_or(|b| b.fenced) {
                return Err(format!("elected {leader:?}, fenced at election"));
            }
        }
        Entry::RegisterBroker {
            id,
            incarnation,
            addresses,
            damaged,
        } => registered(before, after, *id, *incarnation, addresses, damaged)?,
        _ => {}
    }
    if matches!(entry, Entry::AlterIsr { .. } | Entry::FenceBroker { .. }) {
        for (name, t) in &before.topics {
            let Some(u) = after.topics.get(name) else {
                continue;
            };
            for m in t.isr.iter().filter(|m| !u.isr.contains(m)) {
                if u.isr.len() < u.min_insync as usize && !u.elr.contains(m) {
                    return Err(format!(
                        "topic {name}: {m:?} left the in-sync set {:?} below min_insync without becoming eligible",
                        u.isr
                    ));
                }
            }
        }
    }
    for id in &after.retired {
        if after.brokers.get(id).is_some_and(|b| !b.fenced) {
            return Err(format!("retired {id:?} is live"));
        }
    }
    for (name, t) in &before.topics {
        let Some(u) = after.topics.get(name) else {
            return Err(format!("topic {name} vanished"));
        };
        if u.epoch < t.epoch {
            return Err(format!("topic {name}: epoch went down"));
        }
        if u.leader != t.leader && u.epoch == t.epoch {
            return Err(format!(
                "topic {name}: leader changed from {:?} to {:?} within epoch {:?}",
                t.leader, u.leader, t.epoch
            ));
        }
    }
    Ok(())
}

/// Rules of an applied `RegisterBroker`: a new incarnation ends its broker's epochs, the damaged
/// topics lose it from their in-sync and eligible sets (unless it is the sole holder), and a new
/// id at a known address retires the old one.
fn registered(
    before: &Metadata,
    after: &Metadata,
    id: BrokerId,
    incarnation: u64,
    addresses: &[String],
    damaged: &[String],
) -> Result<(), String> {
    let sole = |t: &crate::controller::metadata::TopicState, b: BrokerId| {
        (t.isr == [b] && t.elr.is_empty()) || (t.isr.is_empty() && t.elr == [b])
    };
    match before.brokers.get(&id) {
        Some(b) if incarnation > b.incarnation => {
            for (name, t) in &before.topics {
                if t.leader == Some(id)
                    && after.topics.get(name).is_some_and(|u| u.epoch == t.epoch)
                {
                    return Err(format!(
                        "topic {name}: {id:?} restarted and still leads epoch {:?}",
                        t.epoch
                    ));
                }
            }
        }
        Some(_) => {}
        None => {
            for (old, b) in &before.brokers {
                if !crate::controller::metadata::same_first_address(&b.addresses, addresses) {
                    continue;
                }
                if !after.retired.contains(old) {
                    return Err(format!(
                        "{id:?} took {old:?}'s address, {old:?} not retired"
                    ));
                }
                for (name, u) in &after.topics {
                    if u.leader == Some(*old)
                        || (u.elr.contains(old) && !sole(u, *old))
                        || (u.isr.contains(old) && !sole(u, *old))
                    {
                        return Err(format!("topic {name}: wiped {old:?} still in it: {u:?}"));
                    }
                }
            }
        }
    }
    for name in damaged {
        if let Some(u) = after.topics.get(name) {
            if (u.elr.contains(&id) || u.isr.contains(&id)) && !sole(u, id) {
                return Err(format!(
                    "topic {name}: {id:?} registered with a damaged log, still in {:?} / eligible {:?}",
                    u.isr, u.elr
                ));
            }
        }
    }
    Ok(())
}

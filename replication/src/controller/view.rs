//! What a broker learns of the metadata: its [`BrokerView`] (every broker's registration, and the
//! topics it is a replica of), kept current by the [`Delta`]s the controller leader sends with
//! each heartbeat answer, or replaced whole when the broker is too far behind.
//!
//! Invariants: a view at version `v` equals `Metadata::view_for` of the metadata at version `v`;
//! deltas apply only in order (a gap asks for a whole view, a duplicate is ignored). The
//! controller keeps the latest [`DeltaLog::CAPACITY`] deltas to answer from.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::metadata::mutation::{self, Mutation};
use super::metadata::{BrokerInfo, Change, Delta, Metadata, TopicState};
use crate::ids::BrokerId;

/// One broker's view of the metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerView {
    pub broker: BrokerId,
    /// The metadata version this view is current to.
    pub version: u64,
    /// Every registered broker (the peers' addresses; whether this broker is fenced).
    pub brokers: BTreeMap<BrokerId, BrokerInfo>,
    /// The topics `broker` is a replica of.
    pub topics: BTreeMap<String, TopicState>,
    /// Every replicated topic's leader (`None`: none elected now), so that a broker that holds
    /// no replica of a topic can forward a publish to it.
    #[serde(default)]
    pub leaders: BTreeMap<String, Option<BrokerId>>,
}

/// A delta that does not follow the view's version: the view must be fetched whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata delta {got} does not follow version {have}")]
pub struct ViewGap {
    pub have: u64,
    pub got: u64,
}

impl Metadata {
    /// The view `broker` needs of this metadata.
    pub fn view_for(&self, broker: BrokerId) -> BrokerView {
        BrokerView {
            broker,
            version: self.version,
            brokers: self.brokers.clone(),
            topics: self
                .topics
                .iter()
                .filter(|(_, t)| t.replicas.contains(&broker))
                .map(|(n, t)| (n.clone(), t.clone()))
                .collect(),
            leaders: self
                .topics
                .iter()
                .map(|(n, t)| (n.clone(), t.leader))
                .collect(),
        }
    }
}

impl BrokerView {
    /// Applies the next delta; one at or below the view's version is ignored.
    pub fn apply(&mut self, delta: &Delta) -> Result<(), ViewGap> {
        if delta.version <= self.version {
            return Ok(());
        }
        if delta.version != self.version + 1 {
            return Err(ViewGap {
                have: self.version,
                got: delta.version,
            });
        }
        for change in &delta.changes {
            match change {
                Change::Broker { id, info } => {
                    if !mutation::active(Mutation::ViewIgnoresBrokerChanges) {
                        self.brokers.insert(*id, info.clone());
                    }
                }
                Change::Topic { name, state } => {
                    self.leaders.insert(name.clone(), state.leader);
                    if state.replicas.contains(&self.broker) {
                        self.topics.insert(name.clone(), state.clone());
                    } else {
                        self.topics.remove(name);
                    }
                }
            }
        }
        self.version = delta.version;
        Ok(())
    }

    /// Whether this broker is registered and not fenced, as far as the view knows.
    pub fn is_live(&self) -> bool {
        self.brokers.get(&self.broker).is_some_and(|b| !b.fenced)
    }
}

/// The latest deltas, in version order.
#[derive(Debug, Clone, Default)]
pub struct DeltaLog {
    deltas: VecDeque<Delta>,
}

/// How the controller brings a broker's view up to date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ViewUpdate {
    /// The deltas after the broker's version (none: it is current).
    Deltas(Vec<Delta>),
    /// The whole view (the broker is too far behind, or has none).
    Full(BrokerView),
}

impl DeltaLog {
    /// Deltas kept to answer from.
    pub const CAPACITY: usize = 1024;

    /// Records the delta the metadata just produced.
    pub fn push(&mut self, delta: Delta) {
        if self.deltas.len() == Self::CAPACITY {
            self.deltas.pop_front();
        }
        self.deltas.push_back(delta);
    }

    /// The deltas held, oldest first (what a snapshot carries).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Delta> {
        self.deltas.iter()
    }

    /// A log of `deltas` (from a snapshot): they must run in consecutive versions ending at
    /// `version`, at most [`Self::CAPACITY`] of them.
    pub(crate) fn restore(deltas: Vec<Delta>, version: u64) -> Result<Self, &'static str> {
        if deltas.len() > Self::CAPACITY {
            return Err("more deltas than the log holds");
        }
        if deltas.windows(2).any(|w| w[1].version != w[0].version + 1)
            || deltas.last().is_some_and(|d| d.version != version)
        {
            return Err("deltas not consecutive up to the metadata's version");
        }
        Ok(Self {
            deltas: deltas.into(),
        })
    }

    /// What a broker at `known` (None: no view yet) needs to reach `md`.
    pub fn update_for(&self, md: &Metadata, broker: BrokerId, known: Option<u64>) -> ViewUpdate {
        let Some(known) = known else {
            return ViewUpdate::Full(md.view_for(broker));
        };
        if known >= md.version {
            return ViewUpdate::Deltas(Vec::new());
        }
        match self.deltas.front() {
            Some(first) if first.version <= known + 1 => ViewUpdate::Deltas(
                self.deltas
                    .iter()
                    .filter(|d| d.version > known)
                    .cloned()
                    .collect(),
            ),
            _ => ViewUpdate::Full(md.view_for(broker)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::metadata::{Entry, Outcome};

    #[test]
    fn deltas_bring_a_view_to_the_metadata_and_gaps_are_refused() {
        let mut md = Metadata::default();
        let mut log = DeltaLog::default();
        let me = BrokerId(2);
        let mut view = md.view_for(me);
        let entries = [
            Entry::RegisterBroker {
                id: BrokerId(1),
                incarnation: 1,
                addresses: vec!["a:1".into()],
                damaged: vec![],
            },
            Entry::RegisterBroker {
                id: me,
                incarnation: 1,
                addresses: vec!["b:1".into()],
                damaged: vec![],
            },
            Entry::CreateTopic {
                name: "t".into(),
                replicas: 2,
                min_insync: 1,
            },
            Entry::CreateTopic {
                name: "u".into(),
                replicas: 1,
                min_insync: 1,
            },
            Entry::FenceBroker {
                id: BrokerId(1),
                incarnation: 1,
            },
        ];
        for e in &entries {
            if let Outcome::Applied(d) = md.apply(e) {
                log.push(d);
            }
        }
        let ViewUpdate::Deltas(deltas) = log.update_for(&md, me, Some(0)) else {
            panic!("expected deltas");
        };
        assert_eq!(view.apply(&deltas[2]), Err(ViewGap { have: 0, got: 3 }));
        for d in &deltas {
            view.apply(d).map_err(|e| e.to_string()).unwrap_or(());
        }
        assert_eq!(view, md.view_for(me));
        assert!(matches!(log.update_for(&md, me, None), ViewUpdate::Full(_)));
    }
}

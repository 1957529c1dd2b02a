//! One lookup's controller: its [`RaftNode`] (agreement and the applied metadata) and the broker
//! [`Sessions`] it keeps while it leads, behind one sans-I/O interface. Brokers send it
//! [`BrokerRequest`]s; the leader answers heartbeats with what each broker's view lacks, and
//! turns requests into proposals; other nodes name the leader they know.
//!
//! Invariants: requests change nothing by themselves, only through proposals that the metadata
//! checks once committed; an answer to a heartbeat never runs ahead of the applied metadata.

use serde::{Deserialize, Serialize};

use super::metadata::Entry;
use super::node::{Durable, NodeConfig, NodeError, Output, RaftNode};
use super::session::{Heard, SessionConfig, Sessions};
use super::view::ViewUpdate;
use crate::ids::{BrokerId, Epoch};

/// What a broker (or an operator, for `CreateTopic`) asks of the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerRequest {
    /// I am alive; `known`: the metadata version my view is at (None: I have none).
    Heartbeat {
        broker: BrokerId,
        incarnation: u64,
        addresses: Vec<String>,
        known: Option<u64>,
        /// With a new incarnation: the topics whose log may miss a suffix (see
        /// `Entry::RegisterBroker`); named again until the registration is applied.
        #[serde(default)]
        damaged: Vec<String>,
    },
    /// As the topic's leader at `epoch`, I change its in-sync set: my proposal number
    /// `proposal` of the epoch, counting the acks of each member's incarnation in
    /// `incarnations`. Always answered through the metadata (the topic's `answered`).
    AlterIsr {
        broker: BrokerId,
        topic: String,
        epoch: Epoch,
        isr_version: u64,
        isr: Vec<BrokerId>,
        #[serde(default)]
        incarnations: Vec<(BrokerId, u64)>,
        #[serde(default)]
        proposal: u64,
    },
    CreateTopic {
        name: String,
        replicas: u32,
        min_insync: u32,
    },
    /// A topic's replica count (`POST /topic/config?replicas=`): a known topic's replicas
    /// grow (onto the live brokers with the fewest replicas) or shrink (keeping the leader and
    /// the in-sync members longest); an unknown one is created with `replicas` (when above 1)
    /// and `min_insync`.
    SetReplicas {
        topic: String,
        replicas: u32,
        min_insync: u32,
    },
}

/// The controller's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerReply {
    /// From the leader: what the broker's view lacks.
    Heartbeat { update: ViewUpdate },
    /// This node does not lead; `leader` is the one it knows (0: none).
    NotLeader { leader: u64 },
    /// A newer incarnation of this broker is registered: this process must stop serving.
    Stale { registered: u64 },
    /// Proposed; the outcome arrives with the metadata.
    Proposed,
    /// Refused before proposing (not the topic's leader, a replica count the cluster cannot
    /// have, or Raft dropped the proposal).
    Refused { reason: String },
    /// Nothing to change (the topic has that many replicas already).
    Unchanged,
}

/// One controller node.
pub struct Controller {
    node: RaftNode,
    sessions: Sessions,
}

impl Controller {
    pub fn new(
        cfg: &NodeConfig,
        sessions: SessionConfig,
        durable: Durable,
    ) -> Result<Self, NodeError> {
        Ok(Self {
            node: RaftNode::new(cfg, durable)?,
            sessions: Sessions::new(sessions),
        })
    }

    /// One tick: Raft's clock, then the sessions' proposals if this node leads.
    pub fn tick(&mut self) {
        self.node.tick();
        let leading = self
            .node
            .is_leader()
            .then(|| (self.node.term(), self.node.leads_current()));
        for entry in self.sessions.tick(leading, self.node.metadata()) {
            self.propose(&entry);
        }
    }

    /// A Raft message from a peer.
    pub fn step(&mut self, msg: raft::eraftpb::Message) -> Result<(), NodeError> {
        self.node.step(msg)
    }

    /// The transport's word on a snapshot it carried for this node (see
    /// [`RaftNode::report_snapshot`]).
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) -> Result<(), NodeError> {
        self.node.report_snapshot(to, delivered)
    }

    /// A broker's request.
    pub fn handle(&mut self, req: BrokerRequest) -> BrokerReply {
        if !self.node.leads_current() {
            return BrokerReply::NotLeader {
                leader: if self.node.is_leader() {
                    0
                } else {
                    self.node.leader_id()
                },
            };
        }
        match req {
            BrokerRequest::Heartbeat {
                broker,
                incarnation,
                addresses,
                known,
                damaged,
            } => {
                let md = self.node.metadata();
                match self
                    .sessions
                    .heard(md, broker, incarnation, &addresses, &damaged)
                {
                    Heard::Stale { registered } => BrokerReply::Stale { registered },
                    Heard::Current { propose } => {
                        let update = self.node.deltas().update_for(md, broker, known);
                        if let Some(entry) = propose {
                            self.propose(&entry);
                        }
                        BrokerReply::Heartbeat { update }
                    }
                }
            }
            BrokerRequest::AlterIsr {
                broker,
                topic,
                epoch,
                isr_version,
                isr,
                incarnations,
                proposal,
            } => {
                let leads = self
                    .node
                    .metadata()
                    .topics
                    .get(&topic)
                    .is_some_and(|t| t.leader == Some(broker));
                if !leads {
                    return BrokerReply::Refused {
                        reason: format!("{broker:?} does not lead {topic:?}"),
                    };
                }
                self.propose_reply(&Entry::AlterIsr {
                    topic,
                    epoch,
                    isr_version,
                    isr,
                    incarnations,
                    proposal,
                })
            }
            BrokerRequest::CreateTopic {
                name,
                replicas,
                min_insync,
            } => self.propose_reply(&Entry::CreateTopic {
                name,
                replicas,
                min_insync,
            }),
            BrokerRequest::SetReplicas {
                topic,
                replicas,
                min_insync,
            } => {
                let md = self.node.metadata();
                let Some(t) = md.topics.get(&topic) else {
                    if replicas <= 1 {
                        return BrokerReply::Unchanged;
                    }
                    return self.propose_reply(&Entry::CreateTopic {
                        name: topic,
                        replicas,
                        min_insync,
                    });
                };
                let isr_version = t.isr_version;
                match md.resized_replicas(&topic, replicas as usize) {
                    Ok(None) => BrokerReply::Unchanged,
                    Ok(Some(replicas)) => self.propose_reply(&Entry::Reassign {
                        topic,
                        isr_version,
                        replicas,
                    }),
                    Err(reason) => BrokerReply::Refused { reason },
                }
            }
        }
    }

    fn propose_reply(&mut self, entry: &Entry) -> BrokerReply {
        match self.node.propose(entry) {
            Ok(()) => BrokerReply::Proposed,
            Err(e) => BrokerReply::Refused {
                reason: e.to_string(),
            },
        }
    }

    fn propose(&mut self, entry: &Entry) {
        if let Err(e) = self.node.propose(entry) {
            tracing::debug!(error = %e, ?entry, "controller: proposal dropped");
        }
    }

    /// The work pending (see [`RaftNode::ready`]).
    pub fn ready(&mut self) -> Option<Output<'_>> {
        self.node.ready()
    }

    pub fn node(&self) -> &RaftNode {
        &self.node
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::view::ViewUpdate;

    fn single() -> Controller {
        let cfg = NodeConfig {
            id: 1,
            voters: vec![1],
            election_tick: 10,
            heartbeat_tick: 2,
            ..NodeConfig::default()
        };
        let sessions = SessionConfig {
            timeout: 30,
            retry: 10,
            reassign_after: None,
        };
        Controller::new(&cfg, sessions, Durable::default()).unwrap_or_else(|_| unreachable!())
    }

    fn settle(c: &mut Controller) {
        while let Some(out) = c.ready() {
            let _ = out.persisted();
        }
    }

    fn heartbeat(known: Option<u64>) -> BrokerRequest {
        BrokerRequest::Heartbeat {
            broker: BrokerId(7),
            incarnation: 1,
            addresses: vec!["b7:4150".into()],
            known,
            damaged: vec![],
        }
    }

    #[test]
    fn the_leader_registers_a_broker_and_answers_with_what_its_view_lacks() {
        let mut c = single();
        assert_eq!(
            c.handle(heartbeat(None)),
            BrokerReply::NotLeader { leader: 0 }
        );
        for _ in 0..12 {
            c.tick();
            settle(&mut c);
        }
        assert!(c.node().leads_current());
        // Unknown: the whole (empty) view, and a registration proposed.
        let BrokerReply::Heartbeat {
            update: ViewUpdate::Full(view),
        } = c.handle(heartbeat(None))
        else {
            panic!("expected a whole view");
        };
        assert_eq!(view.version, 0);
        settle(&mut c);
        assert!(c.node().metadata().is_live(BrokerId(7)));
        let BrokerReply::Heartbeat {
            update: ViewUpdate::Deltas(deltas),
        } = c.handle(heartbeat(Some(0)))
        else {
            panic!("expected deltas");
        };
        assert_eq!(deltas.len(), 1);
        assert_eq!(deltas[0].version, 1);
        // Only the topic's leader may change its in-sync set.
        let create = BrokerRequest::CreateTopic {
            name: "t".into(),
            replicas: 1,
            min_insync: 1,
        };
        assert_eq!(c.handle(create), BrokerReply::Proposed);
        settle(&mut c);
        let alter = |broker| BrokerRequest::AlterIsr {
            broker,
            topic: "t".into(),
            epoch: Epoch(1),
            isr_version: 1,
            isr: vec![BrokerId(7)],
            incarnations: vec![],
            proposal: 1,
        };
        assert!(matches!(
            c.handle(alter(BrokerId(8))),
            BrokerReply::Refused { .. }
        ));
        assert_eq!(c.handle(alter(BrokerId(7))), BrokerReply::Proposed);
        // An older incarnation is told it is stale.
        let old = BrokerRequest::Heartbeat {
            broker: BrokerId(7),
            incarnation: 0,
            addresses: vec![],
            known: None,
            damaged: vec![],
        };
        assert_eq!(c.handle(old), BrokerReply::Stale { registered: 1 });
    }
}

//! The controller: the cluster's metadata (brokers, topics, each topic's replicas, leader,
//! epoch and in-sync set), agreed through Raft among the lookups, and the broker sessions whose
//! expiry fences a broker (docs/design/replication.md).
//!
//! - [`metadata`]: the state machine every node applies from the committed log;
//! - [`view`]: what a broker learns of it (its view, kept current by versioned deltas);
//! - [`node`]: the raft-rs node behind a sans-I/O interface (tick, step, propose, ready), with
//!   snapshots of the metadata that bound its log (`log`: the log raft-rs reads);
//! - [`session`]: broker sessions on the leader, and the proposals they lead to;
//! - [`service`]: the node and the sessions together, answering brokers' requests.
//!
//! The seeded simulation that checks all of it lives in `sim` (tests only).

mod log;
pub mod metadata;
pub mod node;
pub mod service;
pub mod session;
pub mod view;

#[cfg(test)]
mod sim;

pub use metadata::{BrokerInfo, Change, Delta, Entry, Metadata, Outcome, Refusal, TopicState};
pub use node::{
    AfterPersist, Applied, Durable, NodeConfig, NodeError, Output, Persist, RaftNode, SnapshotStats,
};
pub use service::{BrokerReply, BrokerRequest, Controller};
pub use session::{Heard, SessionConfig, Sessions};
pub use view::{BrokerView, DeltaLog, ViewGap, ViewUpdate};

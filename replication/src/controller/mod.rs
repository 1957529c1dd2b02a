//! The controller: the cluster's metadata (brokers, topics, each topic's replicas, leader,
//! epoch and in-sync set), agreed through Raft among the lookups, and the broker sessions whose
//! expiry fences a broker. Being built (docs/design/replication.md).

//! Replicated topics' protocol, with no I/O and no async runtime (docs/design/replication.md):
//! the caller feeds in messages, timer ticks and storage completions and carries out what comes
//! back (messages to send, things to persist, answers to give). The lookup drives the
//! controller, the broker drives a replica per topic, and the simulation drives both with a
//! virtual clock, network and disk from one seed.
//!
//! - [`ids`]: the identities every part shares (brokers, epochs, positions in a topic's log);
//! - [`controller`]: the metadata agreed through Raft among the lookups (brokers, topics, the
//!   leader and in-sync set of each), and the broker sessions that drive it;
//! - [`replica`]: one topic's replica on one broker, as leader or follower: appends,
//!   acknowledgements, the high watermark, in-sync changes, truncation to the leader's history;
//! - [`wire`]: the connection between two brokers that carries every topic's replica messages:
//!   its frame format and what each broker keeps per peer.

pub mod controller;
pub mod ids;
pub mod replica;
pub mod wire;

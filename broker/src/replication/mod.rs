//! The broker's side of replicated topics (docs/design/replication.md). The protocol itself is
//! the `replication` crate (no I/O); this module carries it out on the broker's glommio shards.
//!
//! - [`replicas`]: one replicated topic's replica as its owner shard holds it (the shard's
//!   side is `shard/replicate.rs`);
//! - [`transport`]: the broker-to-broker connection, one per pair of brokers, driving the
//!   crate's `wire::Link` on glommio sockets, independent of shards and topics.
//!
//! Nothing here is constructed unless replication is configured: a broker without it runs and
//! performs exactly as before.

pub mod replicas;
pub mod transport;

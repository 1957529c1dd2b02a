//! The broker-to-broker replication connection on glommio sockets (docs/design/replication.md,
//! "The connection between two brokers"): the `replication` crate's `wire::Link` (frames,
//! handshake, bounded queue, heartbeat compression) driven over TCP.
//!
//! - [`config`]: who this broker is and the connections' timings (`TransportConfig`);
//! - [`handshake`]: which side dials (the lower broker id) and which handshakes the accepting
//!   side takes;
//! - [`conn`]: one connection's task: bounded reads into the link, its frames flushed into the
//!   socket, its tick at every heartbeat interval, the ends (idle, stalled, bad input);
//! - [`peers`]: `Peers`, one shard's connections to every peer broker: the peer set, the
//!   dialers with jittered backoff, the listener, `send`, and the inbound handler;
//! - [`backoff`]: the reconnect delays' jitter.
//!
//! The module knows nothing of shards or topics' owners: what arrives goes to the handler given
//! at construction, and whoever owns the replicas sends through `Peers::send`.

pub mod backoff;
pub mod config;
pub mod conn;
pub mod handshake;
pub mod peers;

#[cfg(test)]
mod tests;

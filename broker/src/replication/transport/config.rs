//! What one broker's replication transport is configured with: who it is (cluster, broker id,
//! incarnation), the link's limits, and the timings of its connections.
//!
//! Invariant: every timing is non-zero and the idle timeout spans several heartbeat intervals
//! ([`TransportConfig::check`]), so a live peer, which sends a `Tick` every interval, is never
//! taken for a dead one.

use replication::ids::BrokerId;
use replication::wire::{Hello, LinkConfig, MAX_CLUSTER_ID};
use std::time::Duration;

/// The fewest heartbeat intervals the idle timeout spans.
pub const MIN_IDLE_INTERVALS: u32 = 3;

/// A broker's replication transport settings.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// The cluster every peer must belong to (their handshakes name it).
    pub cluster_id: String,
    /// This broker.
    pub broker: BrokerId,
    /// This broker process's incarnation (grows with every start).
    pub incarnation: u64,
    /// The link's limits: the largest frame, the outgoing queue's bytes, the references.
    pub link: LinkConfig,
    /// How often each connection sends its `Tick` (the replicas' heartbeat interval).
    pub heartbeat_every: Duration,
    /// A connection that reads nothing, or cannot write, for this long is closed.
    pub idle_timeout: Duration,
    /// Bound on opening a connection to a peer.
    pub connect_timeout: Duration,
    /// Bound on receiving the peer's handshake on a new connection.
    pub handshake_timeout: Duration,
    /// First delay before dialing a peer again; it doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest delay before dialing a peer again.
    pub backoff_max: Duration,
    /// Bytes read from a socket at a time (the read buffer's size).
    pub read_buffer: usize,
    /// Bytes of frames handed to a socket at a time (the write buffer holds this much, plus at
    /// most one frame).
    pub write_chunk: usize,
    /// Seeds the reconnect delays' jitter.
    pub seed: u64,
    /// The shard running the transport, named in its logs.
    pub shard: usize,
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("replication cluster id must be 1 to {MAX_CLUSTER_ID} bytes, got {0}")]
    ClusterId(usize),
    #[error("replication {0} must be more than zero")]
    Zero(&'static str),
    #[error(
        "replication idle timeout {idle:?} must be at least {MIN_IDLE_INTERVALS} heartbeat intervals of {heartbeat:?}"
    )]
    IdleTooShort { idle: Duration, heartbeat: Duration },
}

impl TransportConfig {
    /// The defaults for `broker` of `cluster_id` in `incarnation`, the jitter seeded from the
    /// OS.
    pub fn new(cluster_id: &str, broker: BrokerId, incarnation: u64) -> TransportConfig {
        TransportConfig {
            cluster_id: cluster_id.to_owned(),
            broker,
            incarnation,
            link: LinkConfig::default(),
            heartbeat_every: Duration::from_millis(100),
            idle_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(2),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            read_buffer: 64 * 1024,
            write_chunk: 256 * 1024,
            seed: os_seed(),
            shard: 0,
        }
    }

    /// Refuses settings that cannot work.
    pub fn check(&self) -> Result<(), ConfigError> {
        let n = self.cluster_id.len();
        if n == 0 || n > MAX_CLUSTER_ID {
            return Err(ConfigError::ClusterId(n));
        }
        for (name, zero) in [
            ("heartbeat interval", self.heartbeat_every.is_zero()),
            ("connect timeout", self.connect_timeout.is_zero()),
            ("handshake timeout", self.handshake_timeout.is_zero()),
            ("backoff", self.backoff_min.is_zero()),
            ("read buffer", self.read_buffer == 0),
            ("write chunk", self.write_chunk == 0),
        ] {
            if zero {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.idle_timeout < self.heartbeat_every.saturating_mul(MIN_IDLE_INTERVALS) {
            return Err(ConfigError::IdleTooShort {
                idle: self.idle_timeout,
                heartbeat: self.heartbeat_every,
            });
        }
        Ok(())
    }

    /// The handshake this broker sends first on every connection.
    pub fn hello(&self) -> Hello {
        Hello {
            cluster_id: self.cluster_id.clone(),
            broker: self.broker,
            incarnation: self.incarnation,
        }
    }
}

/// A seed from the OS: the standard library's hash keys are drawn from it per process.
pub fn os_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish()
}

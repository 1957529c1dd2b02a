//! A replica's settings: the in-sync minimum, durability, and the timings of shipping,
//! lag detection and publish deadlines (milliseconds of the broker's monotonic clock).

use super::messages::Millis;

/// Settings of one topic's replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// A publish is acknowledged only while the in-sync set has at least this many members.
    pub min_insync: usize,
    /// Count only fsynced records (durable ends) toward the high watermark.
    pub durable: bool,
    /// A follower not caught up for this long leaves the in-sync set.
    pub lag_time: Millis,
    /// A publish not acknowledged within this fails.
    pub publish_timeout: Millis,
    /// Batches in flight per follower.
    pub window: usize,
    /// Records per batch at most.
    pub max_batch: usize,
    /// Batches unanswered this long are sent again.
    pub resend_after: Millis,
    /// An idle follower gets a heartbeat this often.
    pub heartbeat_every: Millis,
    /// An unanswered in-sync change or epoch query is sent again after this.
    pub retry_after: Millis,
}

impl Default for ReplicaConfig {
    fn default() -> ReplicaConfig {
        ReplicaConfig {
            min_insync: 2,
            durable: false,
            lag_time: 2_000,
            publish_timeout: 5_000,
            window: 4,
            max_batch: 64,
            resend_after: 300,
            heartbeat_every: 100,
            retry_after: 500,
        }
    }
}

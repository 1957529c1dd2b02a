//! What a replica exchanges: the controller's view of a topic it is given, the messages between
//! a topic's leader and its followers, and the outputs the caller carries out.
//!
//! Every leader/follower message carries the epoch it belongs to; a message of another epoch
//! than the receiver's current one is ignored, which is what fences a deposed leader.

use super::record::Batch;
use crate::ids::{BrokerId, Epoch, Seq};

/// Milliseconds of the broker's monotonic clock.
pub type Millis = u64;

/// A publish the caller waits on (the caller's own numbering).
pub type PublishId = u64;

/// The controller's decision about one topic, as a broker learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicState {
    /// The leadership number; grows with every leader change (and with a leader's restart).
    pub epoch: Epoch,
    /// The leader of this epoch, if the controller found one.
    pub leader: Option<BrokerId>,
    /// The in-sync set (sorted).
    pub isr: Vec<BrokerId>,
    /// Grows with every change of `isr` or `replicas` within an epoch.
    pub isr_version: u64,
    /// The brokers holding the topic (sorted).
    pub replicas: Vec<BrokerId>,
}

impl TopicState {
    /// Orders decisions: a broker applies only a newer one.
    pub fn version(&self) -> (Epoch, u64) {
        (self.epoch, self.isr_version)
    }
}

/// A message between a topic's leader and a follower.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Leader → follower: records from `base` (none: a heartbeat), and the leader's high
    /// watermark.
    Append {
        /// The shipping leader's epoch.
        epoch: Epoch,
        /// The leader's high watermark.
        hw: Seq,
        /// The seq of the first record (or the follower's expected end, for a heartbeat).
        base: Seq,
        /// The records, all written under `batch.epoch`.
        batch: Batch,
    },
    /// Leader → follower: the leader's log begins at `start` (every record below it was
    /// acknowledged and consumed, and released); a follower whose log ends below it begins
    /// its log there. Sent instead of records the follower needs and the leader released.
    StartAt {
        /// The shipping leader's epoch.
        epoch: Epoch,
        /// The leader's high watermark.
        hw: Seq,
        /// The first seq the leader's log holds.
        start: Seq,
    },
    /// Follower → leader: where the follower's log ends.
    Ack {
        /// The follower's current epoch.
        epoch: Epoch,
        /// The follower broker's incarnation: an ack of an older one describes a log a restart
        /// may have shortened, and is ignored.
        incarnation: u64,
        /// Its log end.
        end: Seq,
        /// Its durable end.
        durable_end: Seq,
        /// False while its log has a damaged or missing suffix not yet refetched.
        clean: bool,
        /// True when the follower did not take what was sent (a gap, a damaged record, a
        /// truncation): the leader resends from `end`.
        resend: bool,
    },
    /// Follower → leader: where does my last epoch end in your log?
    EpochEndQuery {
        /// The follower's current epoch (the leader's).
        epoch: Epoch,
        /// The epoch of the follower's last record.
        last_epoch: Epoch,
    },
    /// Leader → follower: the largest epoch `<= asked` in the leader's log and where it ends.
    EpochEndAnswer {
        /// The leader's epoch.
        epoch: Epoch,
        /// The epoch the follower asked about.
        asked: Epoch,
        /// `None`: the leader holds no record of an epoch that old.
        found: Option<(Epoch, Seq)>,
    },
}

/// Why a publish was not acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishError {
    /// Its deadline passed before the in-sync set held it (or the set was too small).
    Timeout,
    /// This replica stopped leading the topic before it was acknowledged.
    NotLeader,
}

/// What the caller does after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send to the same topic's replica on another broker.
    Send {
        /// The receiving broker.
        to: BrokerId,
        /// The message.
        msg: Msg,
    },
    /// Propose an in-sync set change to the controller; it takes effect only once the
    /// controller's decision comes back as a [`TopicState`] (its answer goes to
    /// `Replica::on_alter_isr_answer`).
    AlterIsr {
        /// The leader's epoch.
        epoch: Epoch,
        /// The `isr_version` the proposal is based on.
        isr_version: u64,
        /// The proposed set (sorted).
        isr: Vec<BrokerId>,
        /// For each member but the leader, the incarnation whose acks the leader counted: the
        /// controller refuses to add a broker that has restarted since (its log may be shorter
        /// than those acks said; Kafka's KIP-903).
        incarnations: Vec<(BrokerId, u64)>,
        /// Names this proposal in the controller's answer (`Replica::on_alter_isr_answer`).
        proposal: u64,
    },
    /// The publish is stored on every in-sync replica: answer OK.
    Acked(PublishId),
    /// The publish failed: answer with an error.
    Failed(PublishId, PublishError),
    /// The log was asked to sync (`ReplicaLog::request_sync`); call `on_synced` when it
    /// completes.
    Sync,
}

//! The broker-to-broker replication connection without I/O (docs/design/replication.md, "The
//! connection between two brokers"): one connection per pair of brokers carries every
//! replicated topic's messages, and one heartbeat per interval stands for all idle topics.
//!
//! - [`codec`]: the versioned, length-prefixed frame format (replica messages, ticks, and the
//!   forwards beside them: publishes a follower forwards to the leader, their answers, channel
//!   operations) and its incremental decoder; every length and count is checked against the
//!   frame's remaining bytes before anything is allocated, and bad input is a typed
//!   [`WireError`], never a panic;
//! - [`link`]: what one broker keeps for one peer broker on one connection: the bounded
//!   outgoing queue coalesced into frames in order, the handshake, and the heartbeat
//!   compression that makes an idle topic cost nothing on the wire.

pub mod codec;
pub mod link;

#[cfg(test)]
mod tests;

pub use codec::{
    digest, encode, ChannelOp, DeadLetter, DeadLetterOp, DeadOrigin, Decoder, Forward, Frame,
    Hello, Id, TopicConfig, TopicMsg, WireError, MAX_ANSWER_TEXT, MAX_CHANNEL_NAME, MAX_CLUSTER_ID,
    MAX_DEAD_LETTERS, MAX_OWED, MAX_TOPIC_NAME, PROTOCOL_VERSION,
};
pub use link::{Delivery, Inbound, Link, LinkConfig, LinkError, SendError};

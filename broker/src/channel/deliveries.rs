//! What a dispatch hands out: [`Deliveries`], one buffer of encoded message frames per
//! consumer, in delivery order. The owner encodes each frame straight from the channel's copy
//! of the message (no clone of the body, whose shared count is an atomic), and the shard sends
//! each consumer's buffer to its connection as it is.
//!
//! Under test, every delivery is also recorded in order ([`Seen`]), and `Deliveries` reads as
//! that list.

use super::ConsumerKey;
use bytes::BytesMut;
use protocol::Message;
#[cfg(test)]
use protocol::MessageId;

/// Bounds of a consumer's new delivery buffer (see [`Deliveries::push`]).
const MIN_BATCH_RESERVE: usize = 4096;
const MAX_BATCH_RESERVE: usize = 256 * 1024;

/// What a dispatch handed out: message frames, encoded straight from the channel's own copy
/// (no clone of the body, whose shared count is an atomic), one buffer per consumer in
/// delivery order.
#[derive(Default)]
pub struct Deliveries {
    pub batches: Vec<(ConsumerKey, BytesMut)>,
    /// Every delivery in order, for the tests.
    #[cfg(test)]
    seen: Vec<Seen>,
}

impl Deliveries {
    /// Adds `msg`'s frame to `to`'s buffer. `credit` is how many more messages `to` may take
    /// (this one included, no more than are waiting): a new buffer is sized for that many
    /// frames like this one, up to `MAX_BATCH_RESERVE`, so a large delivery is not copied over
    /// and over as its buffer grows, and a small one does not take a large buffer.
    pub(super) fn push(&mut self, to: ConsumerKey, msg: &Message, credit: u64) -> u64 {
        let i = match self.batches.iter().position(|(k, _)| *k == to) {
            Some(i) => i,
            None => {
                let frame = 8 + msg.encoded_len();
                let reserve = (credit as usize)
                    .saturating_mul(frame)
                    .clamp(MIN_BATCH_RESERVE, MAX_BATCH_RESERVE.max(frame));
                self.batches.push((to, BytesMut::with_capacity(reserve)));
                self.batches.len() - 1
            }
        };
        let before = self.batches[i].1.len();
        protocol::frame::write_message_frame(&mut self.batches[i].1, msg);
        let frame_len = (self.batches[i].1.len() - before) as u64;
        #[cfg(test)]
        self.seen.push(Seen {
            to,
            msg: SeenMsg {
                id: msg.id,
                attempts: msg.attempts,
            },
        });
        frame_len
    }
}

#[cfg(test)]
#[derive(Debug)]
pub struct Seen {
    pub to: ConsumerKey,
    pub msg: SeenMsg,
}

#[cfg(test)]
#[derive(Debug)]
pub struct SeenMsg {
    pub id: MessageId,
    pub attempts: u16,
}

#[cfg(test)]
impl std::ops::Deref for Deliveries {
    type Target = Vec<Seen>;
    fn deref(&self) -> &Vec<Seen> {
        &self.seen
    }
}

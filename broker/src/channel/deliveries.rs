//! What a dispatch hands out: [`Deliveries`], one buffer of encoded message frames per
//! consumer, in delivery order. The owner encodes each frame straight from the channel's copy
//! of the message (no clone of the body, whose shared count is an atomic), and the shard sends
//! each consumer's buffer to its connection as it is.
//!
//! Each buffer also says whether its consumer can take more after it ([`Batch::full`]): the
//! connection writes a full consumer's frames at once, and may hold a ready one's for its
//! output buffer timeout (see `crate::tcp::writer`).
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

/// One consumer's share of a dispatch.
pub struct Batch {
    pub to: ConsumerKey,
    /// Its message frames, in delivery order.
    pub frames: BytesMut,
    /// The consumer could take no more once these were handed out (its in-flight count
    /// reached its RDY, or its output window is full): nsqd's "not ready for messages", when
    /// a client's buffered output is flushed at once.
    pub full: bool,
}

/// What a dispatch handed out: message frames, encoded straight from the channel's own copy
/// (no clone of the body, whose shared count is an atomic), one buffer per consumer in
/// delivery order.
#[derive(Default)]
pub struct Deliveries {
    pub batches: Vec<Batch>,
    /// The batch the last `push` went to.
    last: usize,
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
        let i = match self.batches.iter().position(|b| b.to == to) {
            Some(i) => i,
            None => {
                let frame = 8 + msg.encoded_len();
                let reserve = (credit as usize)
                    .saturating_mul(frame)
                    .clamp(MIN_BATCH_RESERVE, MAX_BATCH_RESERVE.max(frame));
                self.batches.push(Batch {
                    to,
                    frames: BytesMut::with_capacity(reserve),
                    full: false,
                });
                self.batches.len() - 1
            }
        };
        self.last = i;
        let frames = &mut self.batches[i].frames;
        let before = frames.len();
        protocol::frame::write_message_frame(frames, msg);
        let frame_len = (frames.len() - before) as u64;
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

    /// Records whether the consumer of the last `push` can take more now.
    pub(super) fn set_last_full(&mut self, full: bool) {
        if let Some(b) = self.batches.get_mut(self.last) {
            b.full = full;
        }
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

//! What a delivery still in flight owes when it ends ([`Owes`]), as the admin operations that
//! came after it decided.
//!
//! A delivery ends when its FIN, REQ or timeout, or its consumer's departure, reaches the
//! owner; a FIN or REQ travels between shards and a timeout fires later, so that can be after
//! an admin operation sent later was answered. The operation's effect must not depend on
//! that order, so an operation that changes what the channel owes marks each delivery it
//! concerns, and the delivery's end follows the mark:
//! - [`Channel::empty`] marks every delivery `Dropped`: a FIN or TOUCH of it still works, but
//!   a REQ, a timeout or a departure gives nothing back (nsqd forgets what is in flight at
//!   once);
//! - [`Channel::rewind`] to `p` marks the deliveries of messages at or after `p` `Replayed`:
//!   the message is owed again, and delivered once more after this delivery whichever way it
//!   ends. While the message lies at or after the cursor, the log owes it, so the delivery
//!   ends without giving it back (the cursor hands it out fresh later); once the cursor
//!   passed it while it was in flight (not handed out twice at once: `take_from_log` passes
//!   over it), the delivery's end gives back a fresh copy (attempts start over), FIN included.
//!   Before `p`, a `Replayed` mark goes back to `Message`: a later rewind decides.
//!
//! Invariant: a delivery of a message at or after the cursor is marked `Replayed` (only a
//! rewind moves the cursor back over what is in flight, and it marks them); so every message
//! is owed once: by the log, by `requeued` / `deferred`, or by a delivery.

use super::{Channel, InFlight};
use crate::storage::segment::Stored;

/// What a delivery in flight owes when it ends (see the module's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owes {
    /// Its message: a REQ, a timeout or a departure gives it back, a FIN finishes it.
    Message,
    /// Nothing: an empty dropped the message while it was in flight.
    Dropped,
    /// The message again, fresh: a rewind reached back over it.
    Replayed,
}

impl Channel {
    /// Marks the deliveries in flight for a rewind to `seq`.
    pub(super) fn mark_rewound(&mut self, seq: u64) {
        self.in_flight.retain(|_, f| {
            if f.msg.seq >= seq {
                f.owes = Owes::Replayed;
            } else if f.owes == Owes::Replayed {
                f.owes = Owes::Message;
            }
            true
        });
    }

    /// Marks every delivery in flight for an empty.
    pub(super) fn mark_emptied(&mut self) {
        self.in_flight.retain(|_, f| {
            f.owes = Owes::Dropped;
            true
        });
    }

    /// The fresh copy a replay owes once a delivery of `msg` marked `owes` ends, if the
    /// cursor passed the message meanwhile.
    fn replay_copy(&self, owes: Owes, msg: &Stored) -> Option<Stored> {
        if owes != Owes::Replayed || msg.seq >= self.cursor {
            return None;
        }
        let mut copy = msg.clone();
        copy.msg.attempts = 0;
        Some(copy)
    }

    /// What a delivery of `msg` marked `owes`, ended by FIN, leaves owed: a replay's copy, or
    /// nothing.
    pub(super) fn owed_after_fin(&self, owes: Owes, msg: &Stored) -> Option<Stored> {
        self.replay_copy(owes, msg)
    }

    /// What a delivery of `msg` marked `owes`, ended otherwise (REQ, timeout, departure),
    /// gives back: its message (unless over max attempts: set aside), a replay's copy, or
    /// nothing.
    pub(super) fn given_back(&mut self, owes: Owes, msg: Stored) -> Option<Stored> {
        match owes {
            Owes::Message => self.over_limit(msg),
            Owes::Dropped => None,
            Owes::Replayed => self.replay_copy(owes, &msg),
        }
    }

    /// Whether delivery `f` owes its message itself (for the floor, /stats and a clean
    /// stop), and with which attempts; a replayed message at or after the cursor is the log's.
    pub(super) fn owed_by(&self, f: &InFlight) -> Option<u16> {
        match f.owes {
            Owes::Message => Some(f.msg.msg.attempts),
            Owes::Dropped => None,
            Owes::Replayed => (f.msg.seq < self.cursor).then_some(0),
        }
    }
}

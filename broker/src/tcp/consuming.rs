//! A connection's consumer side: the channel it consumes once SUB succeeded, and the flow
//! control of its deliveries (the bytes its writer got into the socket, reported to the
//! channel's owner).
//!
//! Invariants: a connection subscribes at most once. Written bytes are reported once a
//! quarter of the owner's window has gathered (`Config::output_window`), so the owner's count
//! of unreported bytes stays within its window of what the client has not taken.

use super::{route_channel_op, Subscription};
use crate::mailbox::ChannelOp;
use crate::shard::Shard;
use std::cell::{Cell, RefCell};

/// The consumer side of a connection, shared by its reader (SUB) and writer (reports).
pub(super) struct Consuming {
    /// After SUB: the channel's owner, topic and channel, where written bytes are reported.
    sub: RefCell<Option<Subscription>>,
    /// Set once SUB succeeded: the connection is then listed under its channel, not producers.
    subscribed: Cell<bool>,
    /// Bytes of message frames written and not yet reported to the owner.
    written_unreported: Cell<u64>,
    /// Report written bytes once this many have gathered (a quarter of the owner's window).
    report_every: u64,
}

impl Consuming {
    pub(super) fn new(output_window: u64) -> Consuming {
        Consuming {
            sub: RefCell::new(None),
            subscribed: Cell::new(false),
            written_unreported: Cell::new(0),
            report_every: (output_window / 4).max(1),
        }
    }

    /// SUB succeeded: the connection consumes `sub`.
    pub(super) fn subscribe(&self, sub: Subscription) {
        *self.sub.borrow_mut() = Some(sub);
        self.subscribed.set(true);
    }

    pub(super) fn is_subscribed(&self) -> bool {
        self.subscribed.get()
    }

    /// The writer got `bytes` of message frames of connection `conn` into the socket: tell
    /// the channel's owner once enough have gathered (it counts them against the window).
    pub(super) fn report_written(&self, shard: &Shard, conn: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let total = self.written_unreported.get() + bytes;
        if total < self.report_every {
            self.written_unreported.set(total);
            return;
        }
        self.written_unreported.set(0);
        route_channel_op(
            shard,
            conn,
            self.sub.borrow().as_ref(),
            ChannelOp::Written(total),
        );
    }
}

//! Bodies held in flight for a while get their own allocation.
//!
//! A message body is a slice of the buffer it arrived in: a publisher's read buffer (an MPUB
//! of a hundred messages is one buffer) or a block read back from disk (256 KiB). That costs
//! nothing while messages are finished within moments, as nearly all are. But a consumer that
//! holds its messages (slow, stuck, or one of many sharing a channel, so that it holds one
//! message of each buffer) would keep a whole buffer alive for each message it holds: 2,500
//! messages from as many 200 KB MPUBs, 500 MB. nsqd gives each message its own allocation.
//!
//! So a message still in flight [`DETACH_AFTER`] (250 ms) after its delivery has its body
//! copied out, once (`InFlight::detached`): what a consumer holds costs about its bodies,
//! whatever it holds them for, and consumers that finish sooner never cause a copy. The
//! channel keeps one entry in the shard's timer heap for this (`TimerKind::Detach`,
//! `armed_detach`), armed by a delivery when none is; when it fires it walks the in-flight
//! table once and re-arms for the oldest message not copied yet.
//!
//! Invariant: while a message not detached is in flight, a detach timer is armed at or before
//! its delivery + [`DETACH_AFTER`].

use super::{Channel, TimerQueue};
use crate::timer::TimerKind;
use std::time::{Duration, Instant};

/// How long a message is in flight before its body gets its own allocation.
pub const DETACH_AFTER: Duration = Duration::from_millis(250);

impl Channel {
    /// Arms the detach timer for a message delivered at `now`, unless one is armed already (it
    /// fires no later than this one would).
    pub(super) fn arm_detach(&mut self, now: Instant, timers: &TimerQueue) {
        if self.armed_detach.is_none() {
            let at = now + DETACH_AFTER;
            self.armed_detach = Some(at);
            timers.schedule(at, self.me.clone(), TimerKind::Detach);
        }
    }

    /// The detach timer fired: copies out the bodies of the messages in flight since
    /// [`DETACH_AFTER`] or more, and re-arms for the oldest one left.
    pub(super) fn detach_held(&mut self, now: Instant, timers: &TimerQueue) {
        self.armed_detach = None;
        let mut next: Option<Instant> = None;
        let mut detached = 0u64;
        self.in_flight.retain(|_, f| {
            if !f.detached {
                let due = f.delivered_at + DETACH_AFTER;
                if due <= now {
                    f.msg.detach_body();
                    f.detached = true;
                    detached += 1;
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
            true
        });
        if detached > 0 {
            tracing::debug!(topic = %self.topic, channel = %self.name, detached, "bodies held in flight copied out");
        }
        if let Some(at) = next {
            self.armed_detach = Some(at);
            timers.schedule(at, self.me.clone(), TimerKind::Detach);
        }
    }
}

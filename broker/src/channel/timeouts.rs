//! A channel's deadlines and deferrals, and the shard's timer that fires them.
//!
//! In-flight deadlines sit in `in_flight_order` ([`crate::deadlines::DeadlineQueue`]),
//! deferred due times in `deferred_order`; the shard's timer heap holds one entry per channel
//! and kind for the earliest of each (`armed_*`), set by `arm`.
//!
//! **Where a timeout requeues:** [`Channel::on_timer`] with `TimerKind::InFlight` (called by
//! `Shard::on_timers` when the heap's entry for this channel comes up): every in-flight
//! message past its deadline leaves `in_flight`, its consumer's in-flight count drops, and
//! `requeue_now` puts it at the tail of the queue (as nsqd does). With `TimerKind::Deferred`
//! the same function makes deferred messages whose time came ready the same way. An entry that
//! comes up after its deadline moved (TOUCH) or its message left (FIN, REQ) finds nothing due
//! and costs a look; `arm` keeps an entry in the heap for the channel's current earliest.
//!
//! TOUCH ([`Channel::touch`]) moves a deadline to now + the consumer's timeout, never past
//! delivery + max-msg-timeout.

use super::{Channel, ConsumerKey, Deferred, OpError, TimerQueue};
use crate::storage::segment::Stored;
use crate::timer::TimerKind;
use protocol::MessageId;
use std::time::{Duration, Instant};

impl Channel {
    /// Keeps `msg` until `at`. It may wait for hours, so its body must not be a slice of a
    /// long-lived buffer: the log hands out DPUB bodies with their own allocation, and REQ
    /// detaches the body of a message it delays.
    pub(super) fn defer(&mut self, msg: Stored, at: Instant, timers: &TimerQueue) {
        let id = msg.msg.id;
        if let Some(old) = self.deferred.insert(id, Deferred { msg, at }) {
            self.deferred_order.remove(&(old.at, id));
        }
        self.deferred_order.insert((at, id));
        self.arm(TimerKind::Deferred, timers);
    }

    /// Makes sure the shard's timer heap fires at this channel's earliest deadline of `kind`.
    pub(super) fn arm(&mut self, kind: TimerKind, timers: &TimerQueue) {
        let (first, armed) = match kind {
            TimerKind::InFlight => (self.in_flight_order.first(), &mut self.armed_in_flight),
            TimerKind::Deferred => (
                self.deferred_order.first().map(|e| e.0),
                &mut self.armed_deferred,
            ),
            // Armed by deliveries and by itself (`detach.rs`), at its own times.
            TimerKind::Detach => return,
        };
        if let Some(at) = first {
            if armed.is_none_or(|a| at < a) {
                *armed = Some(at);
                timers.schedule(at, self.me.clone(), kind);
            }
        }
    }

    /// TOUCH: the deadline moves to now + the consumer's timeout, but never past delivery +
    /// max-msg-timeout.
    pub fn touch(
        &mut self,
        key: ConsumerKey,
        id: MessageId,
        max_msg_timeout: Duration,
        now: Instant,
        timers: &TimerQueue,
    ) -> Result<(), OpError> {
        let timeout = self
            .consumers
            .iter()
            .find(|c| c.spec.key == key)
            .map(|c| c.spec.msg_timeout);
        let f = match self.in_flight.get_mut(&id) {
            None => return Err(OpError::NotInFlight),
            Some(f) if f.consumer != key => return Err(OpError::NotOwner),
            Some(f) => f,
        };
        let timeout = timeout.unwrap_or(max_msg_timeout);
        let deadline = (now + timeout).min(f.delivered_at + max_msg_timeout);
        self.in_flight_order.remove(f.slot, f.deadline, id);
        f.deadline = deadline;
        f.slot = self.in_flight_order.push(deadline, id);
        self.compact_deadlines();
        self.arm(TimerKind::InFlight, timers);
        Ok(())
    }

    /// The shard's timer for this channel's `kind` fired (it was armed for `at`): times out
    /// every in-flight message past its deadline, makes every due deferred message ready, or
    /// copies out the bodies held in flight too long (`detach`), then re-arms for the next
    /// earliest. Returns true when something became deliverable.
    pub fn on_timer(
        &mut self,
        kind: TimerKind,
        at: Instant,
        now: Instant,
        timers: &TimerQueue,
    ) -> bool {
        // An entry left from before its timer was re-armed finds it armed for another time:
        // it disarms nothing (and a stale detach entry does nothing).
        let changed = match kind {
            TimerKind::InFlight => {
                self.armed_in_flight.take_if(|armed| *armed == at);
                self.time_out_due(now)
            }
            TimerKind::Deferred => {
                self.armed_deferred.take_if(|armed| *armed == at);
                self.release_due_deferred(now)
            }
            TimerKind::Detach => {
                if self.armed_detach == Some(at) {
                    self.detach_held(now, timers);
                }
                return false;
            }
        };
        self.arm(kind, timers);
        changed
    }

    /// Times out every in-flight message past its deadline; true when any went back to the
    /// queue.
    fn time_out_due(&mut self, now: Instant) -> bool {
        let mut changed = false;
        while let Some((_, id)) = self.in_flight_order.pop_due(now) {
            let Some(f) = self.in_flight.remove(&id) else {
                continue;
            };
            if let Some(c) = self.consumer_mut(f.consumer) {
                c.in_flight = c.in_flight.saturating_sub(1);
            }
            self.timeout_count += 1;
            if let Some(msg) = self.given_back(f.owes, f.msg) {
                self.requeue_now(msg);
            }
            changed = true;
        }
        changed
    }

    /// Makes every deferred message that is due ready; true when any was.
    fn release_due_deferred(&mut self, now: Instant) -> bool {
        let mut changed = false;
        while let Some(&(due, id)) = self.deferred_order.first() {
            if due > now {
                break;
            }
            self.deferred_order.pop_first();
            if let Some(d) = self.deferred.remove(&id) {
                self.requeue_now(d.msg);
                changed = true;
            }
        }
        changed
    }

    /// Squeezes cleared entries out of the in-flight order when they outnumber live ones
    /// (cheap to call: a comparison unless there is something to do). Called after deliveries
    /// and after TOUCH, which also runs while the channel is paused.
    pub(super) fn compact_deadlines(&mut self) {
        let in_flight = &mut self.in_flight;
        self.in_flight_order.compact(|id, slot| {
            if let Some(f) = in_flight.get_mut(&id) {
                f.slot = slot;
            }
        });
    }
}

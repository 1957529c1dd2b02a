//! The order of a channel's in-flight deadlines, cheap for the common case.
//!
//! Every delivery adds `now + msg_timeout`, and nearly every consumer of a channel uses the same
//! timeout, so deadlines almost always arrive in order: they go to the back of a FIFO, O(1). A
//! deadline earlier than the FIFO's last (a consumer with a shorter timeout, a TOUCH clamped by
//! max-msg-timeout) goes to an ordered set instead. Nothing is removed on FIN, REQ or TOUCH:
//! an entry is *live* only while the caller's map still holds that message with that deadline
//! (`live(at, id)`), dead entries are skipped when they come up, and the FIFO is compacted
//! when dead entries outnumber live ones, so memory stays proportional to what is in flight.

use protocol::MessageId;
use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

#[derive(Default)]
pub struct DeadlineQueue {
    fifo: VecDeque<(Instant, MessageId)>,
    out_of_order: BTreeSet<(Instant, MessageId)>,
}

impl DeadlineQueue {
    pub fn push(&mut self, at: Instant, id: MessageId) {
        match self.fifo.back() {
            Some(&(last, _)) if at < last => {
                self.out_of_order.insert((at, id));
            }
            _ => self.fifo.push_back((at, id)),
        }
    }

    /// The earliest live deadline; dead entries met at the front are dropped.
    pub fn first(&mut self, live: impl Fn(Instant, MessageId) -> bool) -> Option<Instant> {
        while let Some(&(at, id)) = self.fifo.front() {
            if live(at, id) {
                break;
            }
            self.fifo.pop_front();
        }
        while let Some(&(at, id)) = self.out_of_order.first() {
            if live(at, id) {
                break;
            }
            self.out_of_order.pop_first();
        }
        match (self.fifo.front(), self.out_of_order.first()) {
            (Some(a), Some(b)) => Some(a.0.min(b.0)),
            (a, b) => a.or(b).map(|e| e.0),
        }
    }

    /// Removes and returns the earliest live entry due at or before `now`.
    pub fn pop_due(
        &mut self,
        now: Instant,
        live: impl Fn(Instant, MessageId) -> bool,
    ) -> Option<(Instant, MessageId)> {
        let earliest = self.first(&live)?;
        if earliest > now {
            return None;
        }
        let from_fifo = self.fifo.front().is_some_and(|e| e.0 == earliest);
        if from_fifo {
            self.fifo.pop_front()
        } else {
            self.out_of_order.pop_first()
        }
    }

    /// Drops dead entries once they are more than half of the queue (`live_count`: how many
    /// live ones there are), so a channel whose messages are finished long before their
    /// deadline does not keep a deadline per finished message until then.
    pub fn compact(&mut self, live_count: usize, live: impl Fn(Instant, MessageId) -> bool) {
        if self.fifo.len() + self.out_of_order.len() > 2 * live_count + 64 {
            self.fifo.retain(|&(at, id)| live(at, id));
            self.out_of_order.retain(|&(at, id)| live(at, id));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.fifo.len() + self.out_of_order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn id(n: u8) -> MessageId {
        let mut b = [b'0'; 16];
        b[15] = b'a' + n;
        MessageId(b)
    }

    #[test]
    fn due_entries_come_out_in_deadline_order_skipping_dead_ones() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut live: HashMap<MessageId, Instant> = HashMap::new();
        let mut q = DeadlineQueue::default();
        for (n, ms) in [(0, 10), (1, 20), (2, 5), (3, 30), (4, 15)] {
            q.push(at(ms), id(n));
            live.insert(id(n), at(ms));
        }
        // FIN of 1, TOUCH of 0 to 40.
        live.remove(&id(1));
        live.insert(id(0), at(40));
        q.push(at(40), id(0));
        let is_live = |a: Instant, i: MessageId| live.get(&i) == Some(&a);
        assert_eq!(q.first(is_live), Some(at(5)));
        let mut got = Vec::new();
        while let Some((a, i)) = q.pop_due(at(100), is_live) {
            got.push((a, i));
        }
        assert_eq!(
            got,
            vec![
                (at(5), id(2)),
                (at(15), id(4)),
                (at(30), id(3)),
                (at(40), id(0))
            ]
        );
        assert_eq!(q.first(is_live), None);
    }

    #[test]
    fn nothing_before_its_time() {
        let t0 = Instant::now();
        let mut q = DeadlineQueue::default();
        q.push(t0 + Duration::from_secs(1), id(0));
        assert_eq!(q.pop_due(t0, |_, _| true), None);
        assert!(q
            .pop_due(t0 + Duration::from_secs(1), |_, _| true)
            .is_some());
    }

    #[test]
    fn compaction_keeps_only_live_entries() {
        let t0 = Instant::now();
        let mut q = DeadlineQueue::default();
        for n in 0..200u32 {
            q.push(t0 + Duration::from_millis(n as u64), id((n % 20) as u8));
        }
        // Only deadline 199 (id 19) is live.
        let live = |a: Instant, i: MessageId| i == id(19) && a == t0 + Duration::from_millis(199);
        q.compact(1, live);
        assert_eq!(q.len(), 1);
        assert_eq!(q.first(live), Some(t0 + Duration::from_millis(199)));
    }
}

//! The order of a channel's in-flight deadlines, cheap for the common case.
//!
//! Every delivery adds `now + msg_timeout`, and nearly every consumer of a channel uses the same
//! timeout, so deadlines almost always arrive in order: they go to the back of a FIFO, O(1),
//! and the caller keeps the returned [`Slot`] with the message. FIN, REQ and TOUCH clear that
//! slot in place (no search, no hashing); cleared slots are dropped when they reach the front.
//! A deadline earlier than the FIFO's last (a consumer with a shorter timeout, a TOUCH clamped
//! by max-msg-timeout) goes to an ordered set instead.
//!
//! A message that stays in flight long pins the FIFO's front while newer entries are cleared
//! behind it; when cleared entries outnumber live ones [`DeadlineQueue::compact`] squeezes
//! them out and reports the live entries' new slots, so memory stays proportional to what is
//! in flight.

use protocol::MessageId;
use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

/// Where a deadline sits: its position in the FIFO, or the ordered set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Fifo(u64),
    Ordered,
}

#[derive(Default)]
pub struct DeadlineQueue {
    /// `fifo[i]` is position `base + i`; `None` once cleared.
    fifo: VecDeque<Option<(Instant, MessageId)>>,
    base: u64,
    live_in_fifo: usize,
    /// The deadline last pushed to the FIFO (cleared or not): the FIFO stays in order.
    back_at: Option<Instant>,
    ordered: BTreeSet<(Instant, MessageId)>,
}

impl DeadlineQueue {
    pub fn push(&mut self, at: Instant, id: MessageId) -> Slot {
        if self.back_at.is_some_and(|last| at < last) {
            self.ordered.insert((at, id));
            return Slot::Ordered;
        }
        self.fifo.push_back(Some((at, id)));
        self.back_at = Some(at);
        self.live_in_fifo += 1;
        Slot::Fifo(self.base + self.fifo.len() as u64 - 1)
    }

    /// Clears the entry `push` put at `slot` (FIN, REQ, TOUCH's old deadline, a timeout).
    pub fn remove(&mut self, slot: Slot, at: Instant, id: MessageId) {
        match slot {
            Slot::Ordered => {
                self.ordered.remove(&(at, id));
            }
            Slot::Fifo(pos) => {
                let Some(i) = pos.checked_sub(self.base) else {
                    return;
                };
                if let Some(e) = self.fifo.get_mut(i as usize) {
                    if e.is_some_and(|(a, d)| a == at && d == id) {
                        *e = None;
                        self.live_in_fifo -= 1;
                    }
                }
                self.trim_front();
            }
        }
    }

    fn trim_front(&mut self) {
        while let Some(None) = self.fifo.front() {
            self.fifo.pop_front();
            self.base += 1;
        }
    }

    /// The earliest deadline.
    pub fn first(&self) -> Option<Instant> {
        let fifo = self.fifo.front().copied().flatten().map(|e| e.0);
        let ordered = self.ordered.first().map(|e| e.0);
        match (fifo, ordered) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Removes and returns the earliest entry due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, MessageId)> {
        let earliest = self.first()?;
        if earliest > now {
            return None;
        }
        let fifo_first = self.fifo.front().copied().flatten();
        match fifo_first {
            Some(e) if e.0 == earliest => {
                self.fifo.pop_front();
                self.base += 1;
                self.live_in_fifo -= 1;
                self.trim_front();
                Some(e)
            }
            _ => self.ordered.pop_first(),
        }
    }

    /// When cleared entries outnumber live ones, squeezes them out of the FIFO and calls
    /// `moved(id, new_slot)` for every live entry (the caller updates the slot it keeps).
    pub fn compact(&mut self, mut moved: impl FnMut(MessageId, Slot)) {
        if self.fifo.len() <= 2 * self.live_in_fifo + 64 {
            return;
        }
        let live: VecDeque<_> = self.fifo.drain(..).flatten().map(Some).collect();
        self.fifo = live;
        for (i, e) in self.fifo.iter().enumerate() {
            if let Some((_, id)) = e {
                moved(*id, Slot::Fifo(self.base + i as u64));
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.live_in_fifo + self.ordered.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn id(n: u32) -> MessageId {
        let mut b = [b'0'; 16];
        b[12..].copy_from_slice(&n.to_be_bytes());
        MessageId(b)
    }

    #[test]
    fn due_entries_come_out_in_deadline_order_without_removed_ones() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut q = DeadlineQueue::default();
        let mut slots = HashMap::new();
        for (n, ms) in [(0, 10), (1, 20), (2, 5), (3, 30), (4, 15)] {
            slots.insert(n, (q.push(at(ms), id(n)), at(ms)));
        }
        assert_eq!(slots[&0].0, Slot::Fifo(0));
        assert_eq!(slots[&2].0, Slot::Ordered);
        // FIN of 1; TOUCH of 0 to 40.
        let (s, a) = slots[&1];
        q.remove(s, a, id(1));
        let (s, a) = slots[&0];
        q.remove(s, a, id(0));
        q.push(at(40), id(0));
        assert_eq!(q.len(), 4);
        assert_eq!(q.first(), Some(at(5)));
        assert_eq!(q.pop_due(at(4)), None);
        let mut got = Vec::new();
        while let Some(e) = q.pop_due(at(100)) {
            got.push(e);
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
        assert_eq!(q.first(), None);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn removing_with_a_stale_deadline_or_slot_does_nothing() {
        let t0 = Instant::now();
        let mut q = DeadlineQueue::default();
        let s = q.push(t0, id(1));
        q.remove(s, t0 + Duration::from_millis(1), id(1));
        q.remove(Slot::Fifo(99), t0, id(1));
        assert_eq!(q.len(), 1);
        q.remove(s, t0, id(1));
        assert_eq!(q.len(), 0);
        q.remove(s, t0, id(1));
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_long_lived_entry_does_not_pin_cleared_ones() {
        let t0 = Instant::now();
        let mut q = DeadlineQueue::default();
        let mut slots: HashMap<MessageId, (Slot, Instant)> = HashMap::new();
        let pinned = q.push(t0, id(0));
        slots.insert(id(0), (pinned, t0));
        for n in 1..10_000u32 {
            let at = t0 + Duration::from_micros(n as u64);
            let s = q.push(at, id(n));
            q.remove(s, at, id(n));
            q.compact(|i, s| slots.get_mut(&i).expect("live").0 = s);
        }
        assert!(q.fifo.len() < 200, "fifo kept {} entries", q.fifo.len());
        let (s, at) = slots[&id(0)];
        q.remove(s, at, id(0));
        assert_eq!(q.len(), 0);
        assert_eq!(q.first(), None);
    }
}

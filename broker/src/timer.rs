//! The shard's one timer queue, for every channel the shard owns.
//!
//! One binary heap and one task per shard, instead of a ticker per topic or channel: with
//! nothing scheduled the task sleeps on a [`Notify`] and costs nothing; otherwise it sleeps until
//! the earliest deadline. The heap holds one entry per channel and kind for the channel's
//! *earliest* in-flight deadline or deferred message, not one per message: each channel keeps
//! its own ordered deadlines (which FIN and REQ remove from), fires everything due when its
//! entry comes up, and re-arms for its next earliest. So the heap stays small whatever the
//! message rate, and a stale entry (its deadline moved) only costs a look.

use crate::channel::Channel;
use nsq_common::local_sync::Notify;
use std::cell::{Cell, RefCell};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::rc::Weak;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// A delivered message whose consumer has not answered in time.
    InFlight,
    /// A message held back by DPUB or REQ with a delay.
    Deferred,
}

pub struct TimerEntry {
    pub at: Instant,
    seq: u64,
    pub channel: Weak<RefCell<Channel>>,
    pub kind: TimerKind,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
pub struct TimerQueue {
    heap: RefCell<BinaryHeap<Reverse<TimerEntry>>>,
    seq: Cell<u64>,
    /// Woken when a new entry becomes the earliest.
    changed: Notify,
}

/// Most entries handled in one wake-up, so one burst cannot hog the shard.
const MAX_FIRED_PER_TURN: usize = 4096;

impl TimerQueue {
    pub fn schedule(&self, at: Instant, channel: Weak<RefCell<Channel>>, kind: TimerKind) {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut heap = self.heap.borrow_mut();
        let becomes_earliest = heap.peek().is_none_or(|Reverse(e)| at < e.at);
        heap.push(Reverse(TimerEntry {
            at,
            seq,
            channel,
            kind,
        }));
        drop(heap);
        if becomes_earliest {
            self.changed.notify();
        }
    }

    pub fn len(&self) -> usize {
        self.heap.borrow().len()
    }

    /// Entries due at `now`, earliest first (at most a bounded batch).
    pub(crate) fn take_due(&self, now: Instant) -> Vec<TimerEntry> {
        let mut heap = self.heap.borrow_mut();
        let mut due = Vec::new();
        while due.len() < MAX_FIRED_PER_TURN {
            match heap.peek() {
                Some(Reverse(e)) if e.at <= now => {
                    if let Some(Reverse(e)) = heap.pop() {
                        due.push(e);
                    }
                }
                _ => break,
            }
        }
        due
    }

    fn earliest(&self) -> Option<Instant> {
        self.heap.borrow().peek().map(|Reverse(e)| e.at)
    }

    /// Runs forever, handing due entries to `fire`.
    pub async fn run(&self, fire: impl Fn(Vec<TimerEntry>)) {
        loop {
            match self.earliest() {
                None => self.changed.notified().await,
                Some(at) => {
                    let now = Instant::now();
                    if at <= now {
                        let due = self.take_due(now);
                        fire(due);
                        glommio::yield_if_needed().await;
                    } else {
                        futures_lite::future::or(
                            glommio::timer::sleep(at - now),
                            self.changed.notified(),
                        )
                        .await;
                    }
                }
            }
        }
    }
}

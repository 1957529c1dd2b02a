//! The shard's one timer queue, for every channel the shard owns.
//!
//! One binary heap and one task per shard, instead of a ticker per topic or channel: with
//! nothing scheduled the task sleeps on a [`Notify`] and costs nothing; otherwise it sleeps until
//! the earliest deadline. The heap holds one entry per channel and kind for the channel's
//! *earliest* in-flight deadline or deferred message, not one per message: each channel keeps
//! its own ordered deadlines (which FIN and REQ remove from), fires everything due when its
//! entry comes up, and re-arms for its next earliest. So the heap stays small whatever the
//! message rate, and a stale entry (its deadline moved) only costs a look.
//!
//! The queue is generic over what an entry points at (`T`, a channel in the broker:
//! `crate::channel::TimerQueue` is this queue for channels), so this module sits below the
//! channel and names no domain type (generic, so no dynamic dispatch). Entries hold a
//! `Weak<T>`: whoever fires them skips an entry whose channel was dropped while it waited.

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
    /// Messages in flight long enough to get their own copy of their body
    /// (`channel/detach.rs`).
    Detach,
}

pub struct TimerEntry<T> {
    pub at: Instant,
    seq: u64,
    /// The channel to fire (whatever the queue is for).
    pub channel: Weak<T>,
    pub kind: TimerKind,
}

impl<T> PartialEq for TimerEntry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl<T> Eq for TimerEntry<T> {}
impl<T> PartialOrd for TimerEntry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for TimerEntry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub struct TimerQueue<T> {
    heap: RefCell<BinaryHeap<Reverse<TimerEntry<T>>>>,
    seq: Cell<u64>,
    /// Woken when a new entry becomes the earliest.
    changed: Notify,
}

// Not derived: a derived `Default` would ask `T: Default`, which no channel is.
impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        TimerQueue {
            heap: RefCell::default(),
            seq: Cell::default(),
            changed: Notify::default(),
        }
    }
}

/// Most entries handled in one wake-up, so one burst cannot hog the shard.
const MAX_FIRED_PER_TURN: usize = 4096;

impl<T> TimerQueue<T> {
    pub fn schedule(&self, at: Instant, channel: Weak<T>, kind: TimerKind) {
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
    pub(crate) fn take_due(&self, now: Instant) -> Vec<TimerEntry<T>> {
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
    pub async fn run(&self, fire: impl Fn(Vec<TimerEntry<T>>)) {
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

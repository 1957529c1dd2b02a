//! What a run measures while it runs.
//!
//! Counters are shared by every executor and by the main thread (atomics: the main thread
//! samples them each second for the progress line and the time series). Latency goes into HDR
//! histograms owned by each executor (no sharing on the hot path) and merged at the end.
//!
//! A run moves through [`Phase`]s: executors connect, then warm up (counted, not recorded),
//! then measure, then stop. Only the main thread moves the phase forward.

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Latency is recorded in nanoseconds, up to a minute, with 3 significant digits.
const MAX_LATENCY_NS: u64 = 60_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    Connecting = 0,
    WarmingUp = 1,
    Measuring = 2,
    Stopping = 3,
}

/// State shared by all executors and the main thread.
#[derive(Default)]
pub struct Shared {
    phase: AtomicU8,
    pub published: AtomicU64,
    pub published_bytes: AtomicU64,
    /// Counted per message, so split per executor (see [`SplitCounter`]).
    pub consumed: SplitCounter,
    pub consumed_bytes: SplitCounter,
    pub errors: AtomicU64,
    /// Messages claimed by publishers so far (for --count).
    pub claimed: AtomicU64,
    /// Executors that finished connecting (successfully or not).
    pub ready: AtomicUsize,
    /// Executors whose publishers have all ended (or that have none).
    pub idle: AtomicUsize,
    /// The first error that makes the run pointless.
    pub fatal: Mutex<Option<String>>,
}

impl Shared {
    /// Shared state for a run with `executors` executors.
    pub fn new(executors: usize) -> Shared {
        Shared {
            consumed: SplitCounter::new(executors),
            consumed_bytes: SplitCounter::new(executors),
            ..Shared::default()
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Relaxed) {
            0 => Phase::Connecting,
            1 => Phase::WarmingUp,
            2 => Phase::Measuring,
            _ => Phase::Stopping,
        }
    }

    pub fn set_phase(&self, p: Phase) {
        self.phase.fetch_max(p as u8, Relaxed);
    }

    pub fn stopping(&self) -> bool {
        self.phase() == Phase::Stopping
    }

    pub fn measuring(&self) -> bool {
        self.phase() == Phase::Measuring
    }

    pub fn fail(&self, why: String) {
        self.fatal.lock().unwrap().get_or_insert(why);
        self.set_phase(Phase::Stopping);
    }

    /// Claims up to `want` messages to publish under `limit`; 0 means the limit is reached.
    pub fn claim(&self, want: usize, limit: Option<u64>) -> usize {
        let Some(limit) = limit else { return want };
        let before = self.claimed.fetch_add(want as u64, Relaxed);
        limit.saturating_sub(before).min(want as u64) as usize
    }

    pub fn snapshot(&self) -> Counts {
        Counts {
            published: self.published.load(Relaxed),
            published_bytes: self.published_bytes.load(Relaxed),
            consumed: self.consumed.sum(),
            consumed_bytes: self.consumed_bytes.sum(),
            errors: self.errors.load(Relaxed),
        }
    }
}

/// A counter every executor adds to in a cache line of its own, summed by readers. One
/// executor's consumers count every message they get: a single atomic shared by all
/// executors made each of those a cache line travelling between cores (and a locked
/// instruction); an executor's own slot has one writer, so adding is a plain load and store.
pub struct SplitCounter {
    slots: Box<[Slot]>,
}

#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

impl SplitCounter {
    pub fn new(executors: usize) -> SplitCounter {
        SplitCounter {
            slots: (0..executors.max(1)).map(|_| Slot::default()).collect(),
        }
    }

    /// Adds `n` to executor `executor`'s slot. Only that executor's thread may call this.
    pub fn add(&self, executor: usize, n: u64) {
        let slot = &self.slots[executor % self.slots.len()].0;
        slot.store(slot.load(Relaxed) + n, Relaxed);
    }

    pub fn sum(&self) -> u64 {
        self.slots.iter().map(|s| s.0.load(Relaxed)).sum()
    }
}

impl Default for SplitCounter {
    fn default() -> SplitCounter {
        SplitCounter::new(1)
    }
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub published: u64,
    pub published_bytes: u64,
    pub consumed: u64,
    pub consumed_bytes: u64,
    pub errors: u64,
}

impl Counts {
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            published: self.published - earlier.published,
            published_bytes: self.published_bytes - earlier.published_bytes,
            consumed: self.consumed - earlier.consumed,
            consumed_bytes: self.consumed_bytes - earlier.consumed_bytes,
            errors: self.errors - earlier.errors,
        }
    }
}

/// One executor's latency histograms.
pub struct Latencies {
    /// Publish command sent (or scheduled, open loop) → its OK.
    pub ack: Histogram<u64>,
    /// Body stamped → consumer handler.
    pub e2e: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            ack: new_histogram(),
            e2e: new_histogram(),
        }
    }
}

impl Latencies {
    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.ack.add(&other.ack);
        let _ = self.e2e.add(&other.e2e);
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// Records `ns` into `h`, clamped into the histogram's range.
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, MAX_LATENCY_NS));
}

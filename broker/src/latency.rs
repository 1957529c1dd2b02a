//! End-to-end latency (`--e2e-processing-latency-percentile`): the samples a channel keeps of
//! how long each finished message took since it was published, and the quantiles `/stats`
//! reports over one channel or every channel of a topic ([`Latency`], serialised as nsqd's
//! `e2e_processing_latency`).
//!
//! Like nsqd, the window (`--e2e-processing-latency-window-time`) is two buckets of half a
//! window each; the older one is dropped when a new half starts. Each bucket counts every
//! sample but keeps at most [`RESERVOIR`] of them (reservoir sampling), so memory per channel
//! is bounded whatever the rate, and quantiles weigh each kept sample by how many it stands
//! for. Beside the window, each channel counts every message and sums their latencies since
//! it was made ([`E2eTotals`], for `/metrics`). The settings are process-wide and fixed at
//! start-up ([`configure_e2e`]); without percentiles, recording is a no-op and the figures
//! are `{count: 0, percentiles: null}`.
//!
//! This module is part of the domain layer: channels own their [`E2eSamples`]; `crate::stats`
//! re-exports what the `/stats` documents need.

use crate::ids::now_nanos;
use serde::Serialize;
use std::sync::OnceLock;
use std::time::Duration;

/// `e2e_processing_latency`: `{count, percentiles: null}` when no percentile is configured.
/// `count` and the percentiles cover the window; `totals` (not in `/stats`) every message
/// since the channel was made.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub percentiles: Option<Vec<Percentile>>,
    #[serde(skip)]
    pub totals: E2eTotals,
}

/// Every finished message recorded since the channel was made: how many, and the sum of their
/// latencies. `/metrics` gives them as a summary's `_count` and `_sum`, which Prometheus reads
/// as counters (an average is the ratio of their rates), so they only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct E2eTotals {
    pub count: u64,
    /// Nanoseconds; a u128, as a backlog drained hours late adds hours per message.
    pub sum_ns: u128,
}

impl E2eTotals {
    pub fn add(&mut self, other: E2eTotals) {
        self.count = self.count.saturating_add(other.count);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// The sum in seconds, the unit of the `_seconds` families.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns as f64 / 1e9
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Percentile {
    #[serde(serialize_with = "go_float")]
    pub quantile: f64,
    #[serde(serialize_with = "go_float")]
    pub value: f64,
}

/// A float as Go's encoding/json writes one: a whole number without a fraction (`52978752`,
/// `1`, not `52978752.0`), so a reader that types numbers by their text (Python's json) gets
/// what nsqd gives it.
fn go_float<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// Samples kept per half-window bucket.
pub const RESERVOIR: usize = 512;

/// The process-wide e2e settings, fixed at start-up.
#[derive(Debug, Clone)]
struct E2eSettings {
    percentiles: Vec<f64>,
    half_window_ns: i64,
}

static E2E: OnceLock<E2eSettings> = OnceLock::new();

/// Fixes the e2e settings from the configuration (first call wins; every shard calls it).
pub fn configure_e2e(percentiles: &[f64], window: Duration) {
    let half = (window.as_nanos() / 2).clamp(1, i64::MAX as u128) as i64;
    let _ = E2E.set(E2eSettings {
        percentiles: percentiles.to_vec(),
        half_window_ns: half,
    });
}

fn e2e_settings() -> Option<&'static E2eSettings> {
    E2E.get().filter(|s| !s.percentiles.is_empty())
}

#[derive(Debug, Clone, Default)]
struct Bucket {
    started_ns: i64,
    count: u64,
    samples: Vec<u64>,
}

/// One channel's e2e latency samples over the window, and its totals since it was made.
#[derive(Debug, Default)]
pub struct E2eSamples {
    buckets: [Bucket; 2],
    current: usize,
    rng: u64,
    totals: E2eTotals,
}

impl E2eSamples {
    /// Records a finished message published at `published_ns`. A no-op unless percentiles are
    /// configured.
    pub fn record(&mut self, published_ns: i64) {
        let Some(cfg) = e2e_settings() else {
            return;
        };
        let now = now_nanos();
        self.rotate(now, cfg.half_window_ns);
        let latency = now.saturating_sub(published_ns).max(0) as u64;
        self.totals.add(E2eTotals {
            count: 1,
            sum_ns: u128::from(latency),
        });
        let seen = {
            let b = &mut self.buckets[self.current];
            b.count += 1;
            b.count
        };
        let slot = if self.buckets[self.current].samples.len() < RESERVOIR {
            None
        } else {
            Some(self.next_random() % seen)
        };
        let b = &mut self.buckets[self.current];
        match slot {
            None => b.samples.push(latency),
            Some(j) if (j as usize) < RESERVOIR => b.samples[j as usize] = latency,
            Some(_) => {}
        }
    }

    fn rotate(&mut self, now: i64, half: i64) {
        let started = self.buckets[self.current].started_ns;
        if started == 0 {
            self.buckets[self.current].started_ns = now;
            return;
        }
        let age = now.saturating_sub(started);
        if age < half {
            return;
        }
        if age >= 2 * half {
            self.buckets = Default::default();
        } else {
            self.current ^= 1;
            self.buckets[self.current] = Bucket::default();
        }
        self.buckets[self.current].started_ns = now;
    }

    /// Every message recorded since the channel was made.
    pub fn totals(&self) -> E2eTotals {
        self.totals
    }

    fn next_random(&mut self) -> u64 {
        if self.rng == 0 {
            self.rng = 0x2545_F491_4F6C_DD1D ^ (now_nanos() as u64);
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// The live buckets (younger than a whole window) as (count, samples).
    fn live(&self, now: i64, half: i64) -> impl Iterator<Item = (u64, &[u64])> {
        self.buckets
            .iter()
            .filter(move |b| b.count > 0 && now.saturating_sub(b.started_ns) < 2 * half)
            .map(|b| (b.count, b.samples.as_slice()))
    }
}

/// The latency figures over `sources` (one channel, or every channel of a topic).
pub fn latency_of<'a>(sources: impl IntoIterator<Item = &'a E2eSamples>) -> Latency {
    let Some(cfg) = e2e_settings() else {
        return Latency::default();
    };
    let now = now_nanos();
    let mut weighted: Vec<(u64, f64)> = Vec::new();
    let mut count = 0u64;
    let mut totals = E2eTotals::default();
    for s in sources {
        totals.add(s.totals);
        for (n, samples) in s.live(now, cfg.half_window_ns) {
            count += n;
            if samples.is_empty() {
                continue;
            }
            let weight = n as f64 / samples.len() as f64;
            weighted.extend(samples.iter().map(|&v| (v, weight)));
        }
    }
    Latency {
        count,
        percentiles: Some(
            cfg.percentiles
                .iter()
                .map(|&q| Percentile {
                    quantile: q,
                    value: weighted_quantile(&mut weighted, q),
                })
                .collect(),
        ),
        totals,
    }
}

/// The smallest value whose cumulative weight reaches `q` of the total; 0 without samples.
fn weighted_quantile(samples: &mut [(u64, f64)], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable_by_key(|s| s.0);
    let total: f64 = samples.iter().map(|s| s.1).sum();
    let target = q * total;
    let mut acc = 0.0;
    for &(v, w) in samples.iter() {
        acc += w;
        if acc >= target {
            return v as f64;
        }
    }
    samples.last().map_or(0.0, |s| s.0 as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_quantiles() {
        let mut s: Vec<(u64, f64)> = (1..=100).map(|v| (v, 1.0)).collect();
        assert_eq!(weighted_quantile(&mut s, 0.5), 50.0);
        assert_eq!(weighted_quantile(&mut s, 0.99), 99.0);
        assert_eq!(weighted_quantile(&mut s, 1.0), 100.0);
        assert_eq!(weighted_quantile(&mut [], 0.5), 0.0);
        // A sample standing for many others pulls the quantile towards it.
        let mut w = vec![(10, 1.0), (20, 9.0)];
        assert_eq!(weighted_quantile(&mut w, 0.5), 20.0);
    }

    #[test]
    fn reservoir_is_bounded_and_counts_everything() {
        let mut e = E2eSamples::default();
        let mut b = Bucket {
            started_ns: 1,
            ..Bucket::default()
        };
        for i in 0..(RESERVOIR as u64 * 3) {
            b.count += 1;
            if b.samples.len() < RESERVOIR {
                b.samples.push(i);
            }
        }
        e.buckets[0] = b;
        let live: Vec<_> = e.live(2, i64::MAX / 4).collect();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].0, RESERVOIR as u64 * 3);
        assert_eq!(live[0].1.len(), RESERVOIR);
        // Too old: gone.
        assert_eq!(e.live(100, 10).count(), 0);
    }
}

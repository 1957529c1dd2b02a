//! Reconnect delays with jitter: the broker-wide doubling schedule
//! (`nsq_common::backoff::Backoff`), each delay drawn uniformly from its upper half, so that
//! brokers that lost each other at the same instant do not dial again in lockstep.
//!
//! Invariant: a delay is never more than the cap, nor less than half the minimum.

use nsq_common::backoff::Backoff;
use std::time::Duration;

/// A small generator (splitmix64): jitter needs spread, not secrecy.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Delays between attempts to reach one peer.
#[derive(Debug, Clone)]
pub struct JitteredBackoff {
    schedule: Backoff,
    rng: Rng,
}

impl JitteredBackoff {
    pub fn new(min: Duration, max: Duration, seed: u64) -> JitteredBackoff {
        JitteredBackoff {
            schedule: Backoff::new(min, max.max(min)),
            rng: Rng::new(seed),
        }
    }

    /// The delay to wait now: between half of and the whole scheduled one.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.schedule.next_delay();
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let half = nanos / 2;
        let extra = if half == 0 {
            0
        } else {
            self.rng.next_u64() % (half + 1)
        };
        Duration::from_nanos(nanos - half + extra)
    }

    /// After a connection that worked: the next delay is the minimum again.
    pub fn reset(&mut self) {
        self.schedule.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_between_half_and_the_schedule_and_spread() {
        let ms = Duration::from_millis;
        let mut b = JitteredBackoff::new(ms(100), ms(1000), 7);
        let schedule = [100, 200, 400, 800, 1000, 1000, 1000, 1000];
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            for s in schedule {
                let d = b.next_delay();
                assert!(d >= ms(s) / 2 && d <= ms(s), "{d:?} for {s} ms");
                seen.insert(d);
            }
            b.reset();
        }
        assert!(seen.len() > 100, "jittered: {} distinct delays", seen.len());
        let mut a = JitteredBackoff::new(ms(100), ms(1000), 1);
        let mut c = JitteredBackoff::new(ms(100), ms(1000), 2);
        let da: Vec<_> = (0..8).map(|_| a.next_delay()).collect();
        let dc: Vec<_> = (0..8).map(|_| c.next_delay()).collect();
        assert_ne!(da, dc, "two seeds, two schedules");
    }
}

//! Delays that double after each failure up to a cap: the broker's reconnections to lookups,
//! the client's reconnections and its consumer backoff all follow this one schedule.

use std::time::Duration;

/// `base` doubled `steps` times, capped at `cap` (saturating: never overflows).
pub fn doubled(base: Duration, steps: u32, cap: Duration) -> Duration {
    let factor = 1u32.checked_shl(steps).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(cap)
}

/// Reconnect delays: `min`, doubling up to `max`; [`Backoff::reset`] after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            next: min,
            min,
            max,
        }
    }

    /// The delay to wait now; the next one is twice as long, up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = d.saturating_mul(2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(ms(100), ms(5000));
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000].map(ms));
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
    }

    #[test]
    fn doubled_saturates_and_caps() {
        assert_eq!(doubled(ms(100), 0, ms(5000)), ms(100));
        assert_eq!(doubled(ms(100), 3, ms(5000)), ms(800));
        assert_eq!(doubled(ms(100), 6, ms(5000)), ms(5000));
        assert_eq!(doubled(ms(100), 40, Duration::MAX), ms(100) * u32::MAX);
        assert_eq!(doubled(Duration::MAX, 1, Duration::MAX), Duration::MAX);
    }
}

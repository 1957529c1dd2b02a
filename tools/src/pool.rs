//! Choosing the destination of each message, as NSQ's nsq_to_nsq and nsq_to_http do with
//! `--mode` ([`Mode`]), and NSQ's status lines every `--status-every` requests
//! ([`TimerMetrics`]).
//!
//! - `round-robin`: the next address in turn, whatever happened before;
//! - `hostpool` (go-hostpool's standard pool): the next *live* address in turn; an address
//!   whose request failed is left out for 30 s, doubling per further failure up to 15 min,
//!   and when every address is out they all come back at once;
//! - `epsilon-greedy`: as `hostpool`, but most picks go to the live address with the lowest
//!   mean response time of its recent requests, and a share (30 %) explores a random live
//!   address (go-hostpool's idea; the weighting here is a moving average, not its buckets);
//! - anything else: nsq_to_nsq reads it as `round-robin`, nsq_to_http as "every address"
//!   ([`Mode::All`]), each as NSQ does.
//!
//! Invariants: [`Pool::pick`] always returns an index of an address (the pool is never
//! empty); marking never panics, whatever the index.

use std::time::{Duration, Instant};

/// How each message's destination is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every address gets every message (nsq_to_http with a mode it does not know).
    All,
    RoundRobin,
    HostPool,
    EpsilonGreedy,
}

impl Mode {
    /// `--mode` as NSQ reads it; `unknown` is what a mode it does not list means.
    pub fn parse(s: &str, unknown: Mode) -> Mode {
        match s {
            "round-robin" => Mode::RoundRobin,
            "hostpool" => Mode::HostPool,
            "epsilon-greedy" => Mode::EpsilonGreedy,
            _ => unknown,
        }
    }
}

const FIRST_RETRY: Duration = Duration::from_secs(30);
const MAX_RETRY: Duration = Duration::from_secs(900);
const EPSILON: f64 = 0.3;

#[derive(Debug, Clone)]
struct Host {
    dead_until: Option<Instant>,
    retry_delay: Duration,
    /// Mean response time in ms (moving average), `None` before the first answer.
    mean_ms: Option<f64>,
}

/// The destinations and what is known of them.
#[derive(Debug)]
pub struct Pool {
    mode: Mode,
    hosts: Vec<Host>,
    next: usize,
    rng: u64,
}

impl Pool {
    /// A pool of `n` addresses (at least one).
    pub fn new(mode: Mode, n: usize) -> Pool {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let host = Host {
            dead_until: None,
            retry_delay: FIRST_RETRY,
            mean_ms: None,
        };
        Pool {
            mode,
            hosts: vec![host; n.max(1)],
            next: 0,
            rng: h.finish() | 1,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// A number in `[0, 1)` (xorshift; good enough to spread picks).
    fn random(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The address for the next message (for [`Mode::All`], the first; the caller sends to
    /// every one).
    pub fn pick(&mut self, now: Instant) -> usize {
        let n = self.hosts.len();
        if self.mode == Mode::RoundRobin || self.mode == Mode::All {
            let i = self.next % n;
            self.next = (i + 1) % n;
            return i;
        }
        for h in &mut self.hosts {
            if h.dead_until.is_some_and(|t| t <= now) {
                h.dead_until = None;
            }
        }
        if self.hosts.iter().all(|h| h.dead_until.is_some()) {
            for h in &mut self.hosts {
                h.dead_until = None;
            }
        }
        let live: Vec<usize> = (0..n)
            .filter(|&i| self.hosts[i].dead_until.is_none())
            .collect();
        if self.mode == Mode::EpsilonGreedy && self.random() >= EPSILON {
            let best = live
                .iter()
                .copied()
                .min_by(|&a, &b| {
                    let m = |i: usize| self.hosts[i].mean_ms.unwrap_or(0.0);
                    m(a).total_cmp(&m(b))
                })
                .unwrap_or(0);
            return best;
        }
        if self.mode == Mode::EpsilonGreedy {
            let r = (self.random() * live.len() as f64) as usize;
            return live.get(r).copied().unwrap_or(0);
        }
        // hostpool: the next live one in turn
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.hosts[i].dead_until.is_none() {
                self.next = (i + 1) % n;
                return i;
            }
        }
        0
    }

    /// What came of a request to address `i`, which took `took`.
    pub fn mark(&mut self, i: usize, ok: bool, took: Duration, now: Instant) {
        let Some(h) = self.hosts.get_mut(i) else {
            return;
        };
        if ok {
            h.retry_delay = FIRST_RETRY;
            let ms = took.as_secs_f64() * 1000.0;
            h.mean_ms = Some(h.mean_ms.map_or(ms, |m| m * 0.9 + ms * 0.1));
        } else if matches!(self.mode, Mode::HostPool | Mode::EpsilonGreedy)
            && h.dead_until.is_none()
        {
            h.dead_until = Some(now + h.retry_delay);
            h.retry_delay = (h.retry_delay * 2).min(MAX_RETRY);
        }
    }
}

/// bitly/timer_metrics' status line: every `every` requests (0: never), the 99th and 95th
/// percentiles and the mean of their durations, logged with `prefix`.
#[derive(Debug)]
pub struct TimerMetrics {
    every: usize,
    prefix: String,
    durations: Vec<Duration>,
}

impl TimerMetrics {
    pub fn new(every: usize, prefix: impl Into<String>) -> TimerMetrics {
        TimerMetrics {
            every,
            prefix: prefix.into(),
            durations: Vec::with_capacity(every),
        }
    }

    /// Counts one request that took `took`; every `every` requests, the status line (also
    /// returned, for tests).
    pub fn status(&mut self, took: Duration) -> Option<String> {
        if self.every == 0 {
            return None;
        }
        self.durations.push(took);
        if self.durations.len() < self.every {
            return None;
        }
        let mut d = std::mem::take(&mut self.durations);
        d.sort_unstable();
        let ms = |x: Duration| x.as_secs_f64() * 1000.0;
        let at = |p: f64| ms(d[((d.len() as f64 * p) as usize).min(d.len() - 1)]);
        let mean = d.iter().map(|&x| ms(x)).sum::<f64>() / d.len() as f64;
        let line = format!(
            "{} finished {} requests - 99th: {:.02}ms - 95th: {:.02}ms - avg: {:.02}ms",
            self.prefix,
            d.len(),
            at(0.99),
            at(0.95),
            mean
        );
        eprintln!("{line}");
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_ignores_failures_hostpool_skips_them_a_while() {
        let now = Instant::now();
        let mut rr = Pool::new(Mode::RoundRobin, 3);
        rr.mark(1, false, Duration::ZERO, now);
        let picks: Vec<usize> = (0..6).map(|_| rr.pick(now)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);

        let mut hp = Pool::new(Mode::HostPool, 3);
        hp.mark(1, false, Duration::ZERO, now);
        let picks: Vec<usize> = (0..4).map(|_| hp.pick(now)).collect();
        assert_eq!(picks, [0, 2, 0, 2]);
        let later = now + FIRST_RETRY;
        let picks: Vec<usize> = (0..3).map(|_| hp.pick(later)).collect();
        assert!(picks.contains(&1), "back after its retry delay: {picks:?}");
        // all out: all back
        let mut one = Pool::new(Mode::HostPool, 1);
        one.mark(0, false, Duration::ZERO, now);
        assert_eq!(one.pick(now), 0);
    }

    #[test]
    fn epsilon_greedy_prefers_the_fastest() {
        let now = Instant::now();
        let mut p = Pool::new(Mode::EpsilonGreedy, 2);
        p.mark(0, true, Duration::from_millis(50), now);
        p.mark(1, true, Duration::from_millis(1), now);
        let fast = (0..1000).filter(|_| p.pick(now) == 1).count();
        assert!(fast > 700, "{fast}");
        assert_eq!(Mode::parse("nope", Mode::All), Mode::All);
    }

    #[test]
    fn status_every_n() {
        let mut m = TimerMetrics::new(4, "[aggregate]:");
        for ms in [1, 2, 3] {
            assert_eq!(m.status(Duration::from_millis(ms)), None);
        }
        let line = m.status(Duration::from_millis(10)).expect("a line");
        assert_eq!(
            line,
            "[aggregate]: finished 4 requests - 99th: 10.00ms - 95th: 10.00ms - avg: 4.00ms"
        );
        assert_eq!(TimerMetrics::new(0, "").status(Duration::ZERO), None);
    }
}

//! Consumer backoff as a pure state machine: results go in, actions come out, no clock.
//!
//! The guide's rules, and how they map here:
//!
//! - a failure starts (or deepens) backoff: [`Action::Pause`] tells the consumer to send RDY 0
//!   everywhere and to come back via [`Backoff::on_timer`] after the duration, which is
//!   `multiplier * 2^(level-1)` capped at the maximum;
//! - when the pause ends, [`Action::Probe`]: RDY 1 on one connection only, to test the waters;
//! - exactly one result counts per window: results that arrive while paused (messages that were
//!   in flight before RDY 0) are ignored; the first result while probing decides — a success
//!   shrinks the level (and at level 0 [`Action::Resume`] restores full RDY), a failure grows
//!   it, a neutral result (requeue without backoff, give-up) pauses again at the same level.
//!
//! ```text
//!            failure                  timer                 success, level 0
//!  Normal ──────────▶ Paused ───────────────────▶ Probing ──────────────────▶ Normal
//!                       ▲                            │
//!                       └────────────────────────────┘
//!                     failure (level+1), success (level-1 > 0), neutral
//! ```

use std::time::Duration;

/// What a handled message amounted to, for backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    /// Counts neither way (a requeue without backoff, a message given up).
    Neutral,
}

/// What the consumer must do after feeding the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// RDY 0 on every connection; call [`Backoff::on_timer`] with `window` after `duration`.
    Pause {
        duration: Duration,
        window: u64,
    },
    /// RDY 1 on a single connection, then wait for one result.
    Probe,
    /// Backoff is over: give every connection its normal RDY again.
    Resume,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Normal,
    Paused,
    Probing,
}

/// The backoff state of one consumer.
#[derive(Debug, Clone)]
pub struct Backoff {
    multiplier: Duration,
    max: Duration,
    max_level: u32,
    level: u32,
    phase: Phase,
    window: u64,
}

impl Backoff {
    /// Backoff with durations `multiplier * 2^(level-1)` capped at `max`. A zero multiplier
    /// disables backoff: every result then yields [`Action::Nothing`].
    pub fn new(multiplier: Duration, max: Duration) -> Backoff {
        let mut max_level = 1;
        while max_level < 32 && duration_at(multiplier, max, max_level) < max {
            max_level += 1;
        }
        Backoff {
            multiplier,
            max,
            max_level,
            level: 0,
            phase: Phase::Normal,
            window: 0,
        }
    }

    /// Feeds one handled message's outcome.
    pub fn on_result(&mut self, outcome: Outcome) -> Action {
        if self.multiplier.is_zero() || self.phase == Phase::Paused {
            return Action::Nothing;
        }
        match outcome {
            Outcome::Success if self.level == 0 => Action::Nothing,
            Outcome::Success => {
                self.level -= 1;
                if self.level == 0 {
                    self.phase = Phase::Normal;
                    Action::Resume
                } else {
                    self.pause()
                }
            }
            Outcome::Failure => {
                self.level = (self.level + 1).min(self.max_level);
                self.pause()
            }
            Outcome::Neutral if self.phase == Phase::Probing => self.pause(),
            Outcome::Neutral => Action::Nothing,
        }
    }

    /// The pause of `window` is over. Stale windows (superseded by a later pause) are ignored.
    pub fn on_timer(&mut self, window: u64) -> Action {
        if self.phase != Phase::Paused || window != self.window {
            return Action::Nothing;
        }
        self.phase = Phase::Probing;
        Action::Probe
    }

    /// True while paused or probing.
    pub fn in_backoff(&self) -> bool {
        self.phase != Phase::Normal
    }

    /// True while paused (RDY 0 everywhere, waiting for the timer).
    pub fn is_paused(&self) -> bool {
        self.phase == Phase::Paused
    }

    /// Consecutive-failure level; 0 outside backoff.
    pub fn level(&self) -> u32 {
        self.level
    }

    /// The pause length at the current level.
    pub fn current_duration(&self) -> Duration {
        duration_at(self.multiplier, self.max, self.level)
    }

    fn pause(&mut self) -> Action {
        self.phase = Phase::Paused;
        self.window += 1;
        Action::Pause {
            duration: self.current_duration(),
            window: self.window,
        }
    }
}

fn duration_at(multiplier: Duration, max: Duration, level: u32) -> Duration {
    if level == 0 {
        return Duration::ZERO;
    }
    nsq_common::backoff::doubled(multiplier, level - 1, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn pause_of(a: Action) -> (Duration, u64) {
        match a {
            Action::Pause { duration, window } => (duration, window),
            other => panic!("expected a pause, got {other:?}"),
        }
    }

    #[test]
    fn success_outside_backoff_does_nothing() {
        let mut b = Backoff::new(secs(1), secs(60));
        assert_eq!(b.on_result(Outcome::Success), Action::Nothing);
        assert_eq!(b.on_result(Outcome::Neutral), Action::Nothing);
        assert!(!b.in_backoff());
    }

    #[test]
    fn failures_double_the_pause_up_to_the_cap() {
        let mut b = Backoff::new(secs(1), secs(10));
        let mut seen = vec![];
        for _ in 0..6 {
            let (d, w) = pause_of(b.on_result(Outcome::Failure));
            seen.push(d);
            assert_eq!(b.on_timer(w), Action::Probe);
        }
        assert_eq!(
            seen,
            [secs(1), secs(2), secs(4), secs(8), secs(10), secs(10)]
        );
        // The level stops growing at the cap, so recovery takes as many successes as levels.
        assert_eq!(b.level(), 5);
    }

    #[test]
    fn only_one_result_counts_per_window() {
        let mut b = Backoff::new(secs(1), secs(60));
        let (_, w) = pause_of(b.on_result(Outcome::Failure));
        // Results of messages already in flight while paused are ignored.
        assert_eq!(b.on_result(Outcome::Failure), Action::Nothing);
        assert_eq!(b.on_result(Outcome::Success), Action::Nothing);
        assert_eq!(b.level(), 1);
        assert!(b.is_paused());
        assert_eq!(b.on_timer(w), Action::Probe);
        assert!(b.in_backoff() && !b.is_paused());
        // The probe's result decides.
        assert_eq!(b.on_result(Outcome::Success), Action::Resume);
        assert!(!b.in_backoff());
        assert_eq!(b.level(), 0);
    }

    #[test]
    fn success_while_probing_shrinks_the_level() {
        let mut b = Backoff::new(secs(1), secs(60));
        let (_, w) = pause_of(b.on_result(Outcome::Failure));
        b.on_timer(w);
        let (d, w) = pause_of(b.on_result(Outcome::Failure));
        assert_eq!(d, secs(2));
        b.on_timer(w);
        let (d, w) = pause_of(b.on_result(Outcome::Success));
        assert_eq!(d, secs(1));
        assert_eq!(b.level(), 1);
        b.on_timer(w);
        assert_eq!(b.on_result(Outcome::Success), Action::Resume);
    }

    #[test]
    fn neutral_probe_pauses_again_at_same_level() {
        let mut b = Backoff::new(secs(1), secs(60));
        let (_, w) = pause_of(b.on_result(Outcome::Failure));
        b.on_timer(w);
        let (d, _) = pause_of(b.on_result(Outcome::Neutral));
        assert_eq!(d, secs(1));
        assert_eq!(b.level(), 1);
    }

    #[test]
    fn stale_timer_is_ignored() {
        let mut b = Backoff::new(secs(1), secs(60));
        let (_, w1) = pause_of(b.on_result(Outcome::Failure));
        assert_eq!(b.on_timer(w1 + 7), Action::Nothing);
        assert_eq!(b.on_timer(w1), Action::Probe);
        assert_eq!(b.on_timer(w1), Action::Nothing);
    }

    #[test]
    fn zero_multiplier_disables_backoff() {
        let mut b = Backoff::new(Duration::ZERO, secs(60));
        assert_eq!(b.on_result(Outcome::Failure), Action::Nothing);
        assert!(!b.in_backoff());
    }
}

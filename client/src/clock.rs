//! The clock as message handling reads it: once per socket read, not once per message.
//!
//! A consumer's bookkeeping (RDY timing, backoff) and a handler measuring latency want "now"
//! for every message; at a million messages a second three clock reads per message were a
//! tenth of a consumer's CPU (perf: `__vdso_clock_gettime`). While the frames of one read are
//! handled, [`now`] and [`wall_ns`] return the time that read returned, which is also when
//! those messages arrived. Outside that (a handler that waited, a timer) they read the clock.

use std::cell::Cell;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

thread_local! {
    static READ_AT: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
}

/// The monotonic time: of the current read while its frames are handled, else now.
pub fn now() -> Instant {
    READ_AT
        .with(Cell::get)
        .map_or_else(Instant::now, |(t, _)| t)
}

/// Nanoseconds since the Unix epoch: of the current read while its frames are handled, else
/// now.
pub fn wall_ns() -> u64 {
    READ_AT.with(Cell::get).map_or_else(system_ns, |(_, w)| w)
}

fn system_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs `f` (the handling of one read's frames) with the clock read once, up front.
pub(crate) fn for_one_read<R>(f: impl FnOnce() -> R) -> R {
    let outer = READ_AT.with(|c| c.replace(Some((Instant::now(), system_ns()))));
    let r = f();
    READ_AT.with(|c| c.set(outer));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reading_per_read_then_the_clock_again() {
        let (a, b) = for_one_read(|| {
            let a = (now(), wall_ns());
            std::thread::sleep(std::time::Duration::from_millis(2));
            (a, (now(), wall_ns()))
        });
        assert_eq!(a, b, "inside one read the time stands still");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(now() > a.0 && wall_ns() > a.1, "outside, the clock runs");
    }
}

//! Giving the memory of closed connections back to the system.
//!
//! glibc's malloc keeps freed memory in the arena of the thread that used it. Connections
//! come and go by the thousand and land on whichever shard their client's CPU names, so the
//! memory one shard's closed connections freed is often not where the next ones are
//! allocated, and the process's RSS grows with every wave. So each shard counts the
//! connections that closed on it and, once [`TRIM_AFTER`] have, asks glibc (on one of
//! glommio's blocking threads, never the shard's own) to return the free pages of every arena
//! (`malloc_trim`) once [`TRIM_DELAY`] has passed with no more closings, so that a wave of
//! closings is trimmed once, after it. Nothing runs while connections stay open.

use std::cell::Cell;
use std::time::Duration;

/// Closed connections that make a trim worth it.
const TRIM_AFTER: u32 = 1000;
/// Wait after the count is reached, so that one trim covers the whole wave.
const TRIM_DELAY: Duration = Duration::from_secs(1);

thread_local! {
    static CLOSED: Cell<u32> = const { Cell::new(0) };
    static PENDING: Cell<bool> = const { Cell::new(false) };
}

/// Counts a connection closed on this shard; schedules a trim when enough have.
pub fn connection_closed() {
    let closed = CLOSED.get() + 1;
    CLOSED.set(closed);
    if closed < TRIM_AFTER || PENDING.get() {
        return;
    }
    PENDING.set(true);
    glommio::spawn_local(async {
        // Until a whole delay passes with no more closings.
        loop {
            let seen = CLOSED.get();
            glommio::timer::sleep(TRIM_DELAY).await;
            if CLOSED.get() == seen {
                break;
            }
        }
        CLOSED.set(0);
        glommio::executor().spawn_blocking(trim).await;
        PENDING.set(false);
    })
    .detach();
}

#[cfg(target_env = "gnu")]
fn trim() {
    // SAFETY: malloc_trim only walks and releases malloc's own free memory; it takes the
    // arenas' locks itself.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(target_env = "gnu"))]
fn trim() {}

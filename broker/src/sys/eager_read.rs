//! Reading a connection's next request straight from the socket, when its peer has probably
//! sent it already.
//!
//! A request/response client (one PUB, wait for its OK, the next PUB; an HTTP client on a
//! keep-alive connection) that shares a CPU with its shard runs the moment the answer's `send`
//! wakes it, and by the time that `send` returns to the shard the next request is usually in
//! the socket. Waiting for it through glommio costs more than the request's own work: a poll
//! armed on the ring, then a turn of the executor, which cancels and re-arms its preemption
//! timers each time (several `io_uring_enter` calls per round trip).
//! So once a connection's answer is on its way out, its reader tries one non-blocking `recv`
//! itself and falls back to the reactor's wait only when nothing is there.
//!
//! A miss costs a syscall, so the guess is scored per connection ([`EagerRead`]): one whose
//! peer rarely answers that fast (on another CPU, or pipelining) stops guessing after a few
//! misses and tries again now and then.
//!
//! A connection served this way never waits, and glommio looks at its rings (other sockets,
//! the mailboxes, timers, disk completions) only when no task is runnable or its preempt
//! timer (100 ms) fires. So a shard counts its eager reads, and after [`RUN_LIMIT`] of them
//! the next reader waits for one turn of the reactor before it reads. (A shorter preempt timer
//! is not the remedy: it can make the mailbox mesh hang at start-up.)

use std::cell::Cell;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Credit a connection starts with and the most it keeps; a hit adds one, a miss takes two.
const START_CREDIT: u8 = 4;
const MAX_CREDIT: u8 = 8;
const MISS_COST: u8 = 2;
/// Without credit, one guess in this many is still made, so a peer that became fast is noticed.
const PROBE_EVERY: u8 = 64;

/// Eager reads a shard makes before it gives its reactor a turn.
pub const RUN_LIMIT: u32 = 16;

thread_local! {
    /// Eager reads on this shard since its reactor last had a turn forced.
    static RUN: Cell<u32> = const { Cell::new(0) };
    /// This shard's totals, for /metrics.
    static HITS: Cell<u64> = const { Cell::new(0) };
    static MISSES: Cell<u64> = const { Cell::new(0) };
}

/// How this shard's eager reads went since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub hits: u64,
    pub misses: u64,
}

/// This shard's (this thread's) totals.
pub fn counts() -> Counts {
    Counts {
        hits: HITS.get(),
        misses: MISSES.get(),
    }
}

/// One connection's record of how its guesses went.
#[derive(Debug)]
pub struct EagerRead {
    credit: u8,
    skipped: u8,
}

impl Default for EagerRead {
    fn default() -> Self {
        EagerRead {
            credit: START_CREDIT,
            skipped: 0,
        }
    }
}

impl EagerRead {
    /// Whether to guess this time.
    pub fn wanted(&mut self) -> bool {
        if self.credit > 0 {
            return true;
        }
        self.skipped += 1;
        if self.skipped >= PROBE_EVERY {
            self.skipped = 0;
            return true;
        }
        false
    }

    /// [`Self::try_read`], after a turn of the reactor when this shard is due one.
    pub async fn read(&mut self, fd: RawFd, buf: &mut [u8]) -> Option<io::Result<usize>> {
        if RUN.get() >= RUN_LIMIT {
            // A timer fires only in the reactor's pass over its rings: waiting for one that is
            // already due is waiting for that pass.
            glommio::timer::sleep(Duration::from_micros(1)).await;
            RUN.set(0);
        }
        self.try_read(fd, buf)
    }

    /// One non-blocking read of `fd` into `buf`: `Some` with what it gave (bytes, 0 at end of
    /// stream, or an error), `None` when nothing was there yet (the caller then waits through
    /// the reactor). Scores the guess.
    pub fn try_read(&mut self, fd: RawFd, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let got = recv_now(fd, buf);
        if got.is_some() {
            self.credit = (self.credit + 1).min(MAX_CREDIT);
            RUN.set(RUN.get() + 1);
            HITS.set(HITS.get() + 1);
        } else {
            MISSES.set(MISSES.get() + 1);
            self.credit = self.credit.saturating_sub(MISS_COST);
        }
        got
    }
}

/// `recv(fd, MSG_DONTWAIT)`: `None` when it would block or was interrupted.
fn recv_now(fd: RawFd, buf: &mut [u8]) -> Option<io::Result<usize>> {
    // SAFETY: buf is a valid, writable region of buf.len() bytes for the whole call; fd is a
    // socket the caller owns and keeps open across the call.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n >= 0 {
        return Some(Ok(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
        _ => Some(Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_what_is_there_and_reports_nothing_otherwise() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let mut eager = EagerRead::default();
        let mut buf = [0u8; 16];
        assert!(eager.try_read(b.as_raw_fd(), &mut buf).is_none());
        a.write_all(b"PUB").expect("write");
        match eager.try_read(b.as_raw_fd(), &mut buf) {
            Some(Ok(3)) => assert_eq!(&buf[..3], b"PUB"),
            other => panic!("expected 3 bytes, got {other:?}"),
        }
        drop(a);
        assert!(matches!(
            eager.try_read(b.as_raw_fd(), &mut buf),
            Some(Ok(0))
        ));
    }

    #[test]
    fn misses_stop_the_guessing_and_a_probe_resumes_it() {
        let (_a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let mut eager = EagerRead::default();
        let mut buf = [0u8; 4];
        let mut guesses = 0;
        for _ in 0..10 {
            if eager.wanted() {
                guesses += 1;
                assert!(eager.try_read(b.as_raw_fd(), &mut buf).is_none());
            }
        }
        assert_eq!(guesses, 2, "two misses spend the starting credit");
        let probes = (0..PROBE_EVERY as usize * 3)
            .filter(|_| eager.wanted())
            .count();
        assert_eq!(probes, 3, "one probe per {PROBE_EVERY} chances");
    }

    #[test]
    fn hits_earn_credit_up_to_a_bound() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let mut eager = EagerRead::default();
        let mut buf = [0u8; 4];
        for _ in 0..20 {
            a.write_all(b"x").expect("write");
            assert!(eager.wanted());
            assert!(eager.try_read(b.as_raw_fd(), &mut buf).is_some());
        }
        assert_eq!(eager.credit, MAX_CREDIT);
        let misses = (0..10)
            .take_while(|_| eager.wanted() && eager.try_read(b.as_raw_fd(), &mut buf).is_none())
            .count();
        assert_eq!(misses, (MAX_CREDIT / MISS_COST) as usize);
    }
}

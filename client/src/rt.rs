//! The runtime glue: the only module that names glommio. TCP connect, sleeping, timeouts and
//! spawning go through here, plus a small random source for jitter and redistribution.
//!
//! Everything else in the crate is written against futures-lite's traits; a port to another
//! single-threaded executor replaces this file.

use crate::error::{Error, Result};
use std::cell::Cell;
use std::future::Future;
use std::net::ToSocketAddrs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) type TcpStream = glommio::net::TcpStream;

/// Opens a TCP connection to `addr` (`host:port`), bounded by `timeout`.
///
/// Names are resolved here, with the blocking system resolver (glommio has no async one),
/// because glommio's own connect panics on a name that resolves to nothing.
pub(crate) async fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let sock_addr = addr.to_socket_addrs()?.next().ok_or_else(|| {
        Error::from(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{addr} resolves to no address"),
        ))
    })?;
    let stream = with_timeout(timeout, async {
        glommio::net::TcpStream::connect(sock_addr)
            .await
            .map_err(|e| Error::from(std::io::Error::from(e)))
    })
    .await?;
    // Commands are small and latency matters more than packet count.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

pub(crate) async fn sleep(d: Duration) {
    glommio::timer::sleep(d).await
}

/// Runs `fut`, giving up with [`Error::Timeout`] after `d`.
pub(crate) async fn with_timeout<T>(
    d: Duration,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    nsq_common::timeout::with_timeout(d, fut)
        .await
        .unwrap_or_else(|| Err(Error::Timeout))
}

/// Polls `fut` once right here; only if it is not done then does it become a task (whose
/// first poll registers the real waker). A handler that answers at once (most do) then costs no
/// task: no allocation, no trip through the run queue.
pub(crate) fn run_or_spawn(fut: impl Future<Output = ()> + 'static) {
    let mut fut = Box::pin(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if fut.as_mut().poll(&mut cx).is_pending() {
        spawn(fut);
    }
}

/// Spawns `fut` on the current executor and lets it run on its own.
pub(crate) fn spawn(fut: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(fut).detach();
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Mix in an address so two threads started in the same nanosecond differ.
    let local = 0u8;
    (nanos ^ (&local as *const u8 as u64).rotate_left(32)) | 1
}

/// A pseudo-random number below `n` (xorshift; good enough for jitter and picking).
pub(crate) fn random_below(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        (x % n as u64) as usize
    })
}

/// `base` plus a random part of `base * fraction`.
pub(crate) fn jittered(base: Duration, fraction: f64) -> Duration {
    let extra = base.mul_f64(fraction.clamp(0.0, 1.0));
    let permille = random_below(1001) as f64 / 1000.0;
    base + extra.mul_f64(permille)
}

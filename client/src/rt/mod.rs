//! The runtime glue: the only module that names a runtime. TCP connect, sleeping, timeouts
//! and spawning go through here, plus a small random source for jitter and redistribution.
//!
//! Two runtimes, each a cargo feature (both on by default): glommio ([`glommio_rt`]) and tokio
//! ([`tokio_rt`], inside a `tokio::task::LocalSet`: the client's state is `Rc`, so its tasks
//! are `spawn_local` ones). Each call asks which one runs the current thread: tokio when a
//! tokio runtime is entered (`Handle::try_current`), glommio otherwise. Everything else in the
//! crate is written against futures-lite's traits and never learns which.
//!
//! Invariant: nothing here blocks the thread but the resolver on glommio (which has no async
//! one), bounded by the system's own resolver timeout.

#[cfg(not(any(feature = "glommio", feature = "tokio")))]
compile_error!("the client needs a runtime: enable the `glommio` or the `tokio` feature");

#[cfg(feature = "glommio")]
mod glommio_rt;
#[cfg(feature = "tokio")]
mod tokio_rt;

use crate::error::{Error, Result};
use futures_lite::io::{AsyncRead, AsyncWrite};
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Which runtime runs the current thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runtime {
    #[cfg(feature = "glommio")]
    Glommio,
    #[cfg(feature = "tokio")]
    Tokio,
}

fn current() -> Runtime {
    #[cfg(all(feature = "tokio", feature = "glommio"))]
    {
        if tokio_rt::entered() {
            Runtime::Tokio
        } else {
            Runtime::Glommio
        }
    }
    #[cfg(all(feature = "tokio", not(feature = "glommio")))]
    {
        Runtime::Tokio
    }
    #[cfg(all(feature = "glommio", not(feature = "tokio")))]
    {
        Runtime::Glommio
    }
}

/// A connected TCP socket of whichever runtime opened it.
pub(crate) enum TcpStream {
    #[cfg(feature = "glommio")]
    Glommio(glommio::net::TcpStream),
    #[cfg(feature = "tokio")]
    Tokio(tokio_util::compat::Compat<tokio::net::TcpStream>),
}

/// Opens a TCP connection to `addr` (`host:port`), bounded by `timeout`, with Nagle off
/// (commands are small and latency matters more than packet count).
pub(crate) async fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream> {
    match current() {
        #[cfg(feature = "glommio")]
        Runtime::Glommio => glommio_rt::connect_tcp(addr, timeout).await,
        #[cfg(feature = "tokio")]
        Runtime::Tokio => tokio_rt::connect_tcp(addr, timeout).await,
    }
}

pub(crate) async fn sleep(d: Duration) {
    match current() {
        #[cfg(feature = "glommio")]
        Runtime::Glommio => glommio::timer::sleep(d).await,
        #[cfg(feature = "tokio")]
        Runtime::Tokio => tokio::time::sleep(d).await,
    }
}

/// Runs `fut`, giving up with [`Error::Timeout`] after `d`. The work is polled first.
pub(crate) async fn with_timeout<T>(
    d: Duration,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    futures_lite::future::or(fut, async {
        sleep(d).await;
        Err(Error::Timeout)
    })
    .await
}

/// Polls `fut` once right here; only if it is not done then does it become a task (whose
/// first poll registers the real waker). A handler that answers at once (most do) then costs no
/// task: no allocation, no trip through the run queue.
pub(crate) fn run_or_spawn(fut: impl Future<Output = ()> + 'static) {
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    if fut.as_mut().poll(&mut cx).is_pending() {
        spawn(fut);
    }
}

/// Spawns `fut` on the current executor and lets it run on its own.
pub(crate) fn spawn(fut: impl Future<Output = ()> + 'static) {
    match current() {
        #[cfg(feature = "glommio")]
        Runtime::Glommio => {
            glommio::spawn_local(fut).detach();
        }
        #[cfg(feature = "tokio")]
        Runtime::Tokio => tokio_rt::spawn(fut),
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            #[cfg(feature = "glommio")]
            TcpStream::Glommio(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "tokio")]
            TcpStream::Tokio(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            #[cfg(feature = "glommio")]
            TcpStream::Glommio(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "tokio")]
            TcpStream::Tokio(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            #[cfg(feature = "glommio")]
            TcpStream::Glommio(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tokio")]
            TcpStream::Tokio(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            #[cfg(feature = "glommio")]
            TcpStream::Glommio(s) => Pin::new(s).poll_close(cx),
            #[cfg(feature = "tokio")]
            TcpStream::Tokio(s) => Pin::new(s).poll_close(cx),
        }
    }
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

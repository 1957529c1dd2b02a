//! One connected TCP socket shared by the tasks of a connection: the reader reads it, the
//! writer writes it, through one descriptor.
//!
//! glommio's `TcpStream` keeps its read side (readiness poll, read timeout) apart from its
//! write side (readiness poll, write timeout), but its `AsyncRead` and `AsyncWrite` both
//! take `&mut self`, so two tasks cannot hold it at once. [`SharedSocket`] keeps the stream in
//! a `RefCell` that each `poll_read` / `poll_write` borrows for the length of that call alone
//! (a shard runs one task at a time and these calls do not nest), and hands out a
//! [`ReadHalf`] and a [`WriteHalf`]. The descriptor closes when both halves are dropped.

use futures_lite::io::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

pub struct SharedSocket {
    stream: RefCell<TcpStream>,
    fd: RawFd,
}

/// Splits `stream` into the reader's and the writer's handles on it.
pub fn split(stream: TcpStream) -> (ReadHalf, WriteHalf) {
    let fd = stream.as_raw_fd();
    let shared = Rc::new(SharedSocket {
        stream: RefCell::new(stream),
        fd,
    });
    (ReadHalf(shared.clone()), WriteHalf(shared))
}

impl SharedSocket {
    fn poll_with<T>(
        &self,
        f: impl FnOnce(Pin<&mut TcpStream>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match self.stream.try_borrow_mut() {
            Ok(mut s) => f(Pin::new(&mut *s)),
            // Cannot happen (the calls do not nest); an error closes the connection.
            Err(_) => Poll::Ready(Err(io::Error::other("socket in use by another task"))),
        }
    }

    fn set_timeout(&self, read: bool, dur: Option<Duration>) {
        if let Ok(s) = self.stream.try_borrow() {
            let _ = if read {
                s.set_read_timeout(dur)
            } else {
                s.set_write_timeout(dur)
            };
        }
    }

    /// Shuts down one or both directions (a plain system call: it does not wait).
    pub fn shutdown(&self, how: std::net::Shutdown) {
        let how = match how {
            std::net::Shutdown::Read => libc::SHUT_RD,
            std::net::Shutdown::Write => libc::SHUT_WR,
            std::net::Shutdown::Both => libc::SHUT_RDWR,
        };
        // SAFETY: the descriptor is open while `self` (which owns the stream) lives.
        unsafe { libc::shutdown(self.fd, how) };
    }
}

/// The reader's handle.
pub struct ReadHalf(Rc<SharedSocket>);
/// The writer's handle.
pub struct WriteHalf(Rc<SharedSocket>);

impl ReadHalf {
    /// A read that waits longer than `dur` for bytes fails with `TimedOut`.
    pub fn set_read_timeout(&self, dur: Option<Duration>) {
        self.0.set_timeout(true, dur);
    }

    /// One non-blocking `send` of `bytes` by the reader, for an answer it gives itself while
    /// the writer has nothing under way (`tcp::output::Output::send_now`): the bytes that
    /// went, `None` when none could (the writer then sends them, and meets any error).
    pub fn send_now(&self, bytes: &[u8]) -> Option<usize> {
        send_now(self.0.fd, bytes)
    }
}

/// `send(fd, MSG_DONTWAIT | MSG_NOSIGNAL)`: the bytes sent, `None` if it would block or failed.
fn send_now(fd: RawFd, bytes: &[u8]) -> Option<usize> {
    // SAFETY: `bytes` is valid for `bytes.len()` bytes for the whole call; `fd` is a socket
    // the caller keeps open across the call.
    let sent = unsafe {
        libc::send(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(sent).ok()
}

impl WriteHalf {
    /// A write that makes no progress for `dur` fails with `TimedOut`.
    pub fn set_write_timeout(&self, dur: Option<Duration>) {
        self.0.set_timeout(false, dur);
    }

    pub fn shutdown(&self, how: std::net::Shutdown) {
        self.0.shutdown(how);
    }
}

impl AsRawFd for ReadHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd
    }
}

impl AsRawFd for WriteHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_with(|s| s.poll_read(cx, buf))
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_with(|s| s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.poll_with(|s| s.poll_flush(cx))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.poll_with(|s| s.poll_close(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::send_now;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn send_now_sends_what_the_socket_takes_and_never_waits() {
        let (ours, mut peer) = UnixStream::pair().expect("socket pair");
        assert_eq!(send_now(ours.as_raw_fd(), b"OK"), Some(2));
        let mut got = [0u8; 2];
        peer.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"OK");
        // Filled until it takes nothing more: then `None` at once, not a wait.
        let chunk = vec![7u8; 64 * 1024];
        while send_now(ours.as_raw_fd(), &chunk).is_some() {}
        assert_eq!(send_now(ours.as_raw_fd(), b"OK"), None);
        // A closed peer: `None` (and no SIGPIPE to kill the process).
        drop(peer);
        assert_eq!(send_now(ours.as_raw_fd(), b"OK"), None);
    }
}

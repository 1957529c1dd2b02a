//! Sending the answers of many connections with one system call.
//!
//! Every `send` wakes its client, and a client on the shard's CPU preempts the shard as that
//! `send` returns to user space. A shard answering sixteen keep-alive HTTP connections one
//! `send` at a time is therefore switched out once per answer, and its client handles one
//! answer per wake-up: two context switches a request, which on a virtual machine cost more
//! than the request itself. Queued here instead, the answers of one turn of the shard leave in one
//! io_uring submission, a SEND per connection: the client is woken by the first and runs once
//! all of them are sent, and finds all its answers.
//!
//! Each shard has its own small ring for this beside glommio's (whose submissions are not
//! reachable from outside it). Sends carry `MSG_DONTWAIT`, so each completes within the
//! submission: a socket that cannot take all of an answer returns what it took (or EAGAIN),
//! and the connection writes the rest through its glommio stream. Each queued send holds its
//! buffer until it completes, so it cannot be freed while the kernel may still look at it. It
//! names the connection's own descriptor (no duplicate: one descriptor per connection): the
//! connection waits for the send's completion, and a connection task dropped while its send is
//! queued takes the send out of the queue before its socket closes, so a queued send never
//! names a descriptor that was closed (and perhaps reused). The submission and its completions
//! happen within one call of the sender, never across an await. A shard whose ring cannot be
//! set up (an old kernel, a locked-memory limit) sends one answer at a time.
//!
//! Only HTTP uses it. The TCP writers send directly: streams of deliveries gain nothing from
//! it, and a one-at-a-time PUB, where there is nothing to batch, would pay the extra turn.

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use glommio::net::TcpStream;
use io_uring::{opcode, types, IoUring};
use nsq_common::local_sync::{oneshot, Notify, Sender};
use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use tracing::warn;

/// Submission slots of a shard's send ring; a larger batch goes in several submissions.
const RING_ENTRIES: u32 = 64;

/// What became of one queued send: the buffer back, and the bytes sent or the error.
pub struct Sent {
    pub buf: BytesMut,
    pub result: io::Result<usize>,
}

struct Queued {
    fd: RawFd,
    /// Names this send for [`Unqueue`].
    token: u64,
    buf: BytesMut,
    done: Sender<Sent>,
}

/// Takes a send out of the queue if its connection stops waiting for it (its task dropped)
/// before the sender took it.
struct Unqueue<'a> {
    batch: &'a SendBatch,
    token: u64,
    armed: bool,
}

impl Drop for Unqueue<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut queue) = self.batch.queue.try_borrow_mut() {
                queue.retain(|q| q.token != self.token);
            }
        }
    }
}

/// One shard's send ring and the sends waiting for the next submission.
pub struct SendBatch {
    ring: RefCell<Option<IoUring>>,
    queue: RefCell<Vec<Queued>>,
    wake: Notify,
    /// Submissions made (one per turn with sends, more for batches over [`RING_ENTRIES`]).
    submissions: Cell<u64>,
    next_token: Cell<u64>,
}

impl SendBatch {
    pub fn new() -> SendBatch {
        let ring = match IoUring::new(RING_ENTRIES) {
            Ok(r) => Some(r),
            Err(e) => {
                warn!("send ring unavailable ({e}); answers are sent one at a time");
                None
            }
        };
        SendBatch {
            ring: RefCell::new(ring),
            queue: RefCell::new(Vec::new()),
            wake: Notify::new(),
            submissions: Cell::new(0),
            next_token: Cell::new(0),
        }
    }

    /// Whether sends go through the ring ([`Self::send`] is then worth calling).
    pub fn available(&self) -> bool {
        self.ring.borrow().is_some()
    }

    /// Queues `buf` for the socket `fd` and waits for the submission that sends it. The
    /// caller keeps `fd` open until this returns (or drops this future, which unqueues the
    /// send if it was not taken yet). `None` when the shard's sender is gone (the shard is
    /// ending); the buffer is then lost with it.
    pub async fn send(&self, fd: RawFd, buf: BytesMut) -> Option<Sent> {
        let (done, sent) = oneshot();
        let token = self.next_token.get();
        self.next_token.set(token.wrapping_add(1));
        self.queue.borrow_mut().push(Queued {
            fd,
            token,
            buf,
            done,
        });
        let mut unqueue = Unqueue {
            batch: self,
            token,
            armed: true,
        };
        self.wake.notify();
        let sent = sent.await;
        unqueue.armed = false;
        sent
    }

    /// The shard's sender: once per turn in which sends were queued, submits them all.
    pub async fn run(&self) {
        loop {
            self.wake.notified().await;
            let batch = std::mem::take(&mut *self.queue.borrow_mut());
            self.submit(batch);
        }
    }

    fn submit(&self, batch: Vec<Queued>) {
        let mut guard = self.ring.borrow_mut();
        let Some(ring) = guard.as_mut() else {
            for q in batch {
                q.done.send(Sent {
                    buf: q.buf,
                    result: Err(io::ErrorKind::Unsupported.into()),
                });
            }
            return;
        };
        let mut rest = batch.into_iter().peekable();
        while rest.peek().is_some() {
            let group: Vec<Queued> = rest.by_ref().take(RING_ENTRIES as usize).collect();
            self.submissions.set(self.submissions.get() + 1);
            match send_group(ring, &group) {
                Ok(results) => {
                    for (q, result) in group.into_iter().zip(results) {
                        q.done.send(Sent { buf: q.buf, result });
                    }
                }
                Err(e) => {
                    // The kernel may still hold some of these buffers and sockets: keep them
                    // for good, stop using the ring, and fail the connections (they close).
                    warn!("send ring failed ({e}); answers are sent one at a time from now on");
                    for q in group {
                        std::mem::forget(q.buf);
                        drop(q.done);
                    }
                    for q in rest {
                        q.done.send(Sent {
                            buf: q.buf,
                            result: Err(io::ErrorKind::Unsupported.into()),
                        });
                    }
                    std::mem::forget(guard.take());
                    return;
                }
            }
        }
    }
}

/// Writes `out` whole: through `sends` when its ring is available, what a full socket did not
/// take through `stream`; else all through `stream`. Returns the buffer for reuse.
pub async fn send_all(
    sends: &SendBatch,
    stream: &mut TcpStream,
    out: BytesMut,
) -> io::Result<BytesMut> {
    if !sends.available() {
        stream.write_all(&out).await?;
        return Ok(out);
    }
    let Some(Sent { buf, result }) = sends.send(stream.as_raw_fd(), out).await else {
        return Err(io::Error::other("the shard's sender is gone"));
    };
    match result {
        Ok(n) if n >= buf.len() => {}
        Ok(n) => stream.write_all(&buf[n..]).await?,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.write_all(&buf).await?,
        Err(e) => return Err(e),
    }
    Ok(buf)
}

impl Default for SendBatch {
    fn default() -> Self {
        SendBatch::new()
    }
}

/// Submits one SEND per queued answer and waits for all their completions (immediate: they
/// do not wait for socket space). Returns each one's result, in order.
fn send_group(ring: &mut IoUring, group: &[Queued]) -> io::Result<Vec<io::Result<usize>>> {
    {
        let mut sq = ring.submission();
        for (i, q) in group.iter().enumerate() {
            let len = u32::try_from(q.buf.len()).unwrap_or(u32::MAX);
            let entry = opcode::Send::new(types::Fd(q.fd), q.buf.as_ptr(), len)
                .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                .build()
                .user_data(i as u64);
            // SAFETY: the buffer stays alive and unmoved until this function has collected the
            // entry's completion (or, on error, forever); the descriptor is open: its
            // connection waits for this send (see `Unqueue`).
            if unsafe { sq.push(&entry) }.is_err() {
                return Err(io::Error::other("send ring full"));
            }
        }
    }
    let mut results: Vec<Option<io::Result<usize>>> = (0..group.len()).map(|_| None).collect();
    let mut seen = 0;
    while seen < group.len() {
        match ring.submit_and_wait(group.len() - seen) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        for cqe in ring.completion() {
            let Some(slot) = results.get_mut(cqe.user_data() as usize) else {
                continue;
            };
            if slot.is_none() {
                seen += 1;
            }
            let res = cqe.result();
            *slot = Some(if res >= 0 {
                Ok(res as usize)
            } else {
                Err(io::Error::from_raw_os_error(-res))
            });
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(io::Error::other("no completion"))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::rc::Rc;

    fn run<F, Fut>(f: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        glommio::LocalExecutorBuilder::default()
            .spawn(f)
            .expect("executor")
            .join()
            .expect("join");
    }

    /// A send batch with its sender running on this executor.
    fn started() -> (Rc<SendBatch>, glommio::Task<()>) {
        let batch = Rc::new(SendBatch::new());
        assert!(batch.available(), "io_uring is there: glommio runs on it");
        let b = batch.clone();
        let runner = glommio::spawn_local(async move { b.run().await });
        (batch, runner)
    }

    #[test]
    fn answers_of_several_sockets_leave_in_one_submission_in_full() {
        run(|| async {
            let (batch, runner) = started();
            let mut peers = Vec::new();
            let mut sends = Vec::new();
            for i in 0..5u8 {
                let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
                let mut buf = BytesMut::new();
                buf.extend_from_slice(&[b'a' + i; 100]);
                let batch = batch.clone();
                sends.push(glommio::spawn_local(async move {
                    let sent = batch.send(a.as_raw_fd(), buf).await;
                    drop(a);
                    sent
                }));
                peers.push(b);
            }
            for (i, (s, mut peer)) in sends.into_iter().zip(peers).enumerate() {
                let sent = s.await.expect("sent");
                assert_eq!(sent.result.expect("ok"), 100);
                assert_eq!(sent.buf.len(), 100, "the buffer comes back");
                let mut got = [0u8; 100];
                peer.read_exact(&mut got).expect("read");
                assert!(got.iter().all(|&c| c == b'a' + i as u8));
            }
            assert_eq!(
                batch.submissions.get(),
                1,
                "five answers of one turn, one submission"
            );
            runner.cancel().await;
        });
    }

    #[test]
    fn a_send_dropped_before_its_submission_leaves_the_queue() {
        run(|| async {
            let batch = SendBatch::new();
            let (a, mut peer) = std::os::unix::net::UnixStream::pair().expect("pair");
            let mut send = Box::pin(batch.send(a.as_raw_fd(), BytesMut::from(&b"late"[..])));
            assert!(futures_lite::future::poll_once(&mut send).await.is_none());
            assert_eq!(batch.queue.borrow().len(), 1);
            // The connection's task ends (and its socket closes) before the sender ran.
            drop(send);
            drop(a);
            assert!(
                batch.queue.borrow().is_empty(),
                "nothing names the closed socket"
            );
            let mut rest = Vec::new();
            peer.read_to_end(&mut rest).expect("read");
            assert!(rest.is_empty());
        });
    }

    #[test]
    fn a_full_socket_takes_part_and_says_so() {
        run(|| async {
            let (batch, runner) = started();
            let (a, _peer) = std::os::unix::net::UnixStream::pair().expect("pair");
            let fd = a.as_raw_fd();
            let big = BytesMut::from(&vec![7u8; 8 << 20][..]);
            let sent = batch.send(fd, big).await.expect("sent");
            let n = sent.result.expect("part of it");
            assert!(n > 0 && n < 8 << 20, "sent {n}");
            // Nothing more fits: EAGAIN, not a wait.
            let again = batch.send(fd, sent.buf).await.expect("sent");
            let e = again.result.expect_err("full");
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            runner.cancel().await;
        });
    }
}

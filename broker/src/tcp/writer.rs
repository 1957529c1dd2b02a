//! The output side of a connection: the writer task that writes its output buffer
//! ([`super::output`]: responses, error frames, the message frames delivered to it) out, and
//! the heartbeat ticker.
//!
//! When the buffer is written (nsqd's output buffering, IDENTIFY's `output_buffer_size` and
//! `output_buffer_timeout`, [`super::output::OutputBuffer`]): a response, error frame or
//! heartbeat is written at once, and takes every frame buffered before it along, in order. Message frames may be
//! held: they are written once the buffer holds `output_buffer_size` bytes, once the consumer
//! can take no more (the owner's batch says so: its in-flight count reached its RDY, or its
//! output window is full; or the client sent RDY 0), or `output_buffer_timeout` after the
//! first of them was buffered, whichever comes first. So a consumer with RDY 1 sees no added
//! latency, and one with a large RDY on a quiet channel waits at most the timeout. A timeout
//! of -1 (or a size of -1) turns holding off: every delivery is written on the shard's next
//! turn. The timer is the writer's own glommio timer, created only while message frames are
//! held: a connection with nothing held waits on its notification alone and costs nothing.
//!
//! Invariants: nothing is added to the buffer once the connection is closed. The writer takes
//! the whole buffer at each write (at most one write per turn of the shard) and reports the
//! bytes of message frames it got into the socket to the channel's owner, once a quarter of
//! the window has gathered. Frames leave in the order they were buffered. A write that makes
//! no progress for the write deadline (a heartbeat interval, or [`WRITE_TIMEOUT`] with
//! heartbeats off) closes the connection; on close the writer writes what is buffered, held
//! or not, then shuts the socket down. With TLS or compression on ([`super::layers`]),
//! each write goes through the layers first; without, the buffer is written as it is.

use super::Conn;
use crate::shard::Shard;
use crate::sys::conn_socket::{ReadHalf, WriteHalf};
use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use glommio::timer::Timer;
use protocol::{FrameType, ProtocolError};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// With heartbeats off, a client that does not take its bytes for this long is closed (with
/// heartbeats on, one heartbeat interval).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest write buffer a connection keeps between writes.
const KEEP_WRITE_BUF: usize = 256 * 1024;

impl Conn {
    /// How long a write may make no progress before the client is dropped.
    fn write_deadline(&self) -> Duration {
        self.heartbeat().unwrap_or(WRITE_TIMEOUT)
    }

    /// Buffers a frame that is not a message (a response, an error, a heartbeat): written at
    /// once, with whatever was held before it.
    pub(super) fn push_frame(&self, kind: FrameType, data: &[u8]) {
        if self.is_closed() {
            return;
        }
        self.out.push_frame(kind, data);
    }

    /// Writes held message frames at once (the client sent RDY 0: it takes no more).
    pub(super) fn flush_held(&self) {
        self.out.flush_held();
    }

    /// Whether the writer should write the buffer now (or, closed, finish).
    fn write_due(&self, now: Instant) -> bool {
        if self.is_closed() {
            return true;
        }
        self.out.due(now, || {
            self.layers
                .borrow()
                .as_deref()
                .is_some_and(|layers| layers.has_output())
        })
    }

    /// Sends what is due straight from the reader, with one non-blocking `send` on its half
    /// of the socket (see [`super::output::Output::send_now`]); not once closed or with TLS or
    /// compression on. Whether the client has every answer buffered so far.
    pub(super) fn send_now(&self, socket: &ReadHalf) -> bool {
        if self.is_closed() || self.layers.borrow().is_some() {
            return false;
        }
        self.out.send_now(|bytes| socket.send_now(bytes))
    }

    pub fn push_response(&self, data: &[u8]) {
        self.push_frame(FrameType::Response, data);
    }

    pub fn push_error(&self, e: &ProtocolError) {
        self.push_frame(FrameType::Error, e.frame_text().as_bytes());
    }

    /// Buffers message frames the channel's owner encoded (see `Mail::Deliver`): written at
    /// once when `full` (the consumer can take no more), when holding is off or the buffer
    /// reached its size; else held, the writer's timer armed for the first of them.
    pub fn deliver_frames(&self, frames: BytesMut, full: bool) {
        if self.is_closed() {
            return;
        }
        self.out.deliver(frames, full);
    }
}

/// What the writer made of the output buffer.
enum Drained {
    /// Nothing to write.
    Nothing,
    /// The plaintext buffer, swapped into the writer's spare one.
    Plain,
    /// What the layers made of it, in the writer's layered buffer.
    Layered,
    /// The layers failed: the connection closes.
    Failed(super::layers::LayerError),
}

/// Waits until the buffer is due to be written (see the module doc): on the writer's
/// notification alone while nothing is held, and on a timer for the held frames' deadline too.
async fn wait_due(conn: &Conn) {
    let mut timer: Option<(Instant, Timer)> = None;
    loop {
        let now = Instant::now();
        if conn.write_due(now) {
            return;
        }
        match conn.out.hold_deadline() {
            None => conn.out.writer_woken().await,
            Some(deadline) => {
                if timer.as_ref().is_none_or(|(at, _)| *at != deadline) {
                    timer = Some((
                        deadline,
                        Timer::new(deadline.saturating_duration_since(now)),
                    ));
                }
                if let Some((_, t)) = timer.as_mut() {
                    futures_lite::future::or(
                        async {
                            conn.out.writer_woken().await;
                        },
                        async {
                            t.await;
                        },
                    )
                    .await;
                }
            }
        }
    }
}

/// Writes the output buffer whenever it is due (see the module doc); on close, writes what is
/// left and shuts the socket down (not when the connection moved to another shard). A write that makes no progress for the write deadline
/// closes the connection.
pub(super) async fn write_loop(shard: Rc<Shard>, conn: Rc<Conn>, mut stream: WriteHalf) {
    let mut spare = BytesMut::new();
    // With TLS or compression on: what the layers made of the output buffer.
    let mut layered = Vec::new();
    loop {
        wait_due(&conn).await;
        loop {
            let drained = conn.out.drain(|out| {
                let mut layers = conn.layers.borrow_mut();
                match layers.as_deref_mut() {
                    None if out.is_empty() => Drained::Nothing,
                    None => {
                        std::mem::swap(out, &mut spare);
                        Drained::Plain
                    }
                    Some(l) if out.is_empty() && !l.has_output() => Drained::Nothing,
                    Some(l) => {
                        let encoded = if out.is_empty() {
                            Ok(())
                        } else {
                            l.output(out)
                        };
                        out.clear();
                        match encoded.and_then(|()| l.take_output(&mut layered)) {
                            Ok(()) => Drained::Layered,
                            Err(e) => Drained::Failed(e),
                        }
                    }
                }
            });
            let bytes: &[u8] = match drained {
                Drained::Nothing => break,
                Drained::Plain => &spare,
                Drained::Layered => &layered,
                Drained::Failed(e) => {
                    debug!("output layers failed: {e}");
                    conn.close();
                    stream.shutdown(std::net::Shutdown::Both);
                    return;
                }
            };
            let deliveries = conn.out.take_unsent_deliveries();
            stream.set_write_timeout(Some(conn.write_deadline()));
            conn.out.set_writing(true);
            let written = stream.write_all(bytes).await;
            conn.out.set_writing(false);
            if let Err(e) = written {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    info!(
                        shard = shard.id,
                        conn = conn.id,
                        unsent = bytes.len(),
                        "client took nothing for {:?}; closing",
                        conn.write_deadline()
                    );
                } else {
                    debug!("write failed: {e}");
                }
                conn.close();
                stream.shutdown(std::net::Shutdown::Both);
                return;
            }
            conn.consuming.report_written(&shard, conn.id, deliveries);
            spare.clear();
            layered.clear();
            // A buffer grown by a burst is not kept by an idle connection.
            if spare.capacity() > KEEP_WRITE_BUF {
                spare = BytesMut::new();
            }
            if layered.capacity() > KEEP_WRITE_BUF {
                layered = Vec::new();
            }
            // What came in meanwhile goes on only if due (held frames wait for theirs).
            if !conn.write_due(Instant::now()) {
                break;
            }
        }
        if conn.is_closed() {
            // TLS ends with close_notify, so the client sees a clean end, not a cut.
            let goodbye = conn.layers.borrow_mut().as_deref_mut().and_then(|l| {
                l.close();
                let mut last = Vec::new();
                l.take_output(&mut last).ok().map(|()| last)
            });
            if let Some(last) = goodbye.filter(|b| !b.is_empty()) {
                let _ = stream.write_all(&last).await;
            }
            let _ = stream.flush().await;
            if !conn.has_moved() {
                stream.shutdown(std::net::Shutdown::Both);
            }
            return;
        }
    }
}

/// Sends `_heartbeat_` every interval while heartbeats are on. A client that sends nothing for
/// two intervals is closed by the reader's read timeout.
pub(super) async fn heartbeat_loop(conn: Rc<Conn>) {
    loop {
        if conn.is_closed() {
            return;
        }
        match conn.heartbeat() {
            None => conn.heartbeat_changed().await,
            Some(every) => {
                let ticked = futures_lite::future::or(
                    async {
                        glommio::timer::sleep(every).await;
                        true
                    },
                    async {
                        conn.heartbeat_changed().await;
                        false
                    },
                )
                .await;
                if ticked {
                    conn.push_response(protocol::HEARTBEAT);
                }
            }
        }
    }
}

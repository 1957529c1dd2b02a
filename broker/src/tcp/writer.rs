//! The output side of a connection: its output buffer (responses, error frames, the message
//! frames delivered to it), the writer task that writes it out, and the heartbeat ticker.
//!
//! When the buffer is written (nsqd's output buffering, IDENTIFY's `output_buffer_size` and
//! `output_buffer_timeout`, [`OutputBuffer`]): a response, error frame or heartbeat is written
//! at once, and takes every frame buffered before it along, in order. Message frames may be
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

use super::{route_channel_op, Conn};
use crate::mailbox::ChannelOp;
use crate::shard::Shard;
use crate::sys::conn_socket::WriteHalf;
use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use glommio::timer::Timer;
use protocol::frame::write_frame;
use protocol::{FrameType, ProtocolError};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// With heartbeats off, a client that does not take its bytes for this long is closed (with
/// heartbeats on, one heartbeat interval).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest write buffer a connection keeps between writes.
const KEEP_WRITE_BUF: usize = 256 * 1024;

/// How a connection holds message frames (IDENTIFY's negotiated `output_buffer_size` and
/// `output_buffer_timeout`, or the broker's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OutputBuffer {
    /// Write once this many bytes are buffered.
    pub size: usize,
    /// Longest a message frame is held; `None`: never held (timeout -1, size -1, or 0).
    pub timeout: Option<Duration>,
}

impl OutputBuffer {
    /// From negotiated values: a timeout of 0 ms (IDENTIFY's -1) or a size of 1 (its -1)
    /// hold nothing.
    pub fn new(size: u64, timeout_ms: u64) -> OutputBuffer {
        let holds = timeout_ms > 0 && size > 1;
        OutputBuffer {
            size: usize::try_from(size).unwrap_or(usize::MAX),
            timeout: holds.then(|| Duration::from_millis(timeout_ms)),
        }
    }
}

impl Conn {
    /// How long a write may make no progress before the client is dropped.
    fn write_deadline(&self) -> Duration {
        self.heartbeat.get().unwrap_or(WRITE_TIMEOUT)
    }

    /// The writer got `bytes` of message frames into the socket: tell the channel's owner
    /// once enough have gathered (it counts them against the consumer's window).
    fn report_written(&self, shard: &Shard, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let total = self.written_unreported.get() + bytes;
        if total < self.report_every {
            self.written_unreported.set(total);
            return;
        }
        self.written_unreported.set(0);
        route_channel_op(
            shard,
            self.id,
            self.consumes.borrow().as_ref(),
            ChannelOp::Written(total),
        );
    }

    /// Buffers a frame that is not a message (a response, an error, a heartbeat): written at
    /// once, with whatever was held before it.
    pub(super) fn push_frame(&self, kind: FrameType, data: &[u8]) {
        if self.closed.get() {
            return;
        }
        write_frame(&mut self.out.borrow_mut(), kind, data);
        self.flush_now.set(true);
        self.wake_writer.notify();
    }

    /// Writes held message frames at once (the client sent RDY 0: it takes no more).
    pub(super) fn flush_held(&self) {
        if self.held_since.get().is_some() && !self.flush_now.get() {
            self.flush_now.set(true);
            self.wake_writer.notify();
        }
    }

    /// Whether the writer should write the buffer now (or, closed, finish).
    fn write_due(&self, now: Instant) -> bool {
        if self.closed.get() || self.flush_now.get() {
            return true;
        }
        if let Some(layers) = self.layers.borrow().as_deref() {
            if layers.has_output() {
                return true;
            }
        }
        match (self.held_since.get(), self.out_buffer.get().timeout) {
            (Some(since), Some(timeout)) => now >= since + timeout,
            // Frames nobody holds (cannot happen: every push sets one or the other).
            _ => !self.out.borrow().is_empty(),
        }
    }

    /// When the held message frames must be written, if any are held.
    fn hold_deadline(&self) -> Option<Instant> {
        let since = self.held_since.get()?;
        Some(since + self.out_buffer.get().timeout?)
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
    /// An empty output buffer is replaced by the frames' buffer instead of copied into.
    pub fn deliver_frames(&self, frames: BytesMut, full: bool) {
        if self.closed.get() {
            return;
        }
        self.unsent_deliveries
            .set(self.unsent_deliveries.get() + frames.len() as u64);
        let buffered = {
            let mut out = self.out.borrow_mut();
            if out.is_empty() {
                *out = frames;
            } else {
                out.extend_from_slice(&frames);
            }
            out.len()
        };
        let ob = self.out_buffer.get();
        if full || ob.timeout.is_none() || buffered >= ob.size {
            if !self.flush_now.replace(true) {
                self.wake_writer.notify();
            }
        } else if self.held_since.get().is_none() {
            // The first frame held: the writer arms its timer. (Held already: it waits for
            // that deadline and needs no wake-up.)
            self.held_since.set(Some(Instant::now()));
            self.wake_writer.notify();
        }
    }

    /// The writer takes the buffer: nothing is held or due any more.
    fn taken(&self) {
        self.flush_now.set(false);
        self.held_since.set(None);
    }
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
        match conn.hold_deadline() {
            None => conn.wake_writer.notified().await,
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
                            conn.wake_writer.notified().await;
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
            let (deliveries, through_layers) = {
                let mut out = conn.out.borrow_mut();
                let mut layers = conn.layers.borrow_mut();
                match layers.as_deref_mut() {
                    None => {
                        if out.is_empty() {
                            conn.taken();
                            break;
                        }
                        std::mem::swap(&mut *out, &mut spare);
                        conn.taken();
                    }
                    Some(l) => {
                        if out.is_empty() && !l.has_output() {
                            conn.taken();
                            break;
                        }
                        let encoded = if out.is_empty() {
                            Ok(())
                        } else {
                            l.output(&out)
                        };
                        out.clear();
                        conn.taken();
                        if let Err(e) = encoded.and_then(|()| l.take_output(&mut layered)) {
                            debug!("output layers failed: {e}");
                            drop(layers);
                            drop(out);
                            conn.close();
                            stream.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                    }
                }
                (conn.unsent_deliveries.replace(0), layers.is_some())
            };
            let bytes: &[u8] = if through_layers { &layered } else { &spare };
            stream.set_write_timeout(Some(conn.write_deadline()));
            if let Err(e) = stream.write_all(bytes).await {
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
            conn.report_written(&shard, deliveries);
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
        if conn.closed.get() {
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
            if !conn.moved.get() {
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
        if conn.closed.get() {
            return;
        }
        match conn.heartbeat.get() {
            None => conn.heartbeat_changed.notified().await,
            Some(every) => {
                let ticked = futures_lite::future::or(
                    async {
                        glommio::timer::sleep(every).await;
                        true
                    },
                    async {
                        conn.heartbeat_changed.notified().await;
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

//! The output side of a connection: its output buffer (responses, error frames, the message
//! frames delivered to it), the writer task that flushes it, and the heartbeat ticker.
//!
//! Invariants: nothing is added to the buffer once the connection is closed. The writer takes
//! the whole buffer at each flush (one write per turn of the shard) and reports the bytes of
//! message frames it got into the socket to the channel's owner, once a quarter of the window
//! has gathered. A write that makes no progress for the write deadline (a heartbeat interval,
//! or [`WRITE_TIMEOUT`] with heartbeats off) closes the connection; on close the writer
//! flushes what is buffered, then shuts the socket down. With TLS or compression on
//! ([`super::transport`]), each flush goes through the layers first; without, the buffer is
//! written as it is.

use super::{route_channel_op, Conn};
use crate::mailbox::ChannelOp;
use crate::shard::Shard;
use crate::sys::conn_socket::WriteHalf;
use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use protocol::frame::write_frame;
use protocol::{FrameType, ProtocolError};
use std::rc::Rc;
use std::time::Duration;
use tracing::{debug, info};

/// With heartbeats off, a client that does not take its bytes for this long is closed (with
/// heartbeats on, one heartbeat interval).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest write buffer a connection keeps between writes.
const KEEP_WRITE_BUF: usize = 256 * 1024;

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

    pub(super) fn push_frame(&self, kind: FrameType, data: &[u8]) {
        if self.closed.get() {
            return;
        }
        write_frame(&mut self.out.borrow_mut(), kind, data);
        self.wake_writer.notify();
    }

    pub fn push_response(&self, data: &[u8]) {
        self.push_frame(FrameType::Response, data);
    }

    pub fn push_error(&self, e: &ProtocolError) {
        self.push_frame(FrameType::Error, e.frame_text().as_bytes());
    }

    /// Writes message frames the channel's owner encoded (see `Mail::Deliver`).
    /// An empty output buffer is replaced by the frames' buffer instead of copied into.
    pub fn deliver_frames(&self, frames: BytesMut) {
        if self.closed.get() {
            return;
        }
        self.unsent_deliveries
            .set(self.unsent_deliveries.get() + frames.len() as u64);
        {
            let mut out = self.out.borrow_mut();
            if out.is_empty() {
                *out = frames;
            } else {
                out.extend_from_slice(&frames);
            }
        }
        self.wake_writer.notify();
    }
}

/// Flushes the output buffer whenever something is in it; on close, flushes what is left and
/// shuts the socket down. A write that makes no progress for the write deadline closes the
/// connection.
pub(super) async fn write_loop(shard: Rc<Shard>, conn: Rc<Conn>, mut stream: WriteHalf) {
    let mut spare = BytesMut::new();
    // With TLS or compression on: what the layers made of the output buffer.
    let mut layered = Vec::new();
    loop {
        conn.wake_writer.notified().await;
        loop {
            let (deliveries, through_layers) = {
                let mut out = conn.out.borrow_mut();
                let mut layers = conn.layers.borrow_mut();
                match layers.as_deref_mut() {
                    None => {
                        if out.is_empty() {
                            break;
                        }
                        std::mem::swap(&mut *out, &mut spare);
                    }
                    Some(l) => {
                        if out.is_empty() && !l.has_output() {
                            break;
                        }
                        let encoded = if out.is_empty() {
                            Ok(())
                        } else {
                            l.output(&out)
                        };
                        out.clear();
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
            stream.shutdown(std::net::Shutdown::Both);
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

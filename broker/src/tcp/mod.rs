//! The TCP front-end: a shard's TCP accept loop and the client connections it accepts, each
//! served by the shard the kernel gave it until its SUB or first publish moves it, once, to
//! the owner of that topic ([`handover`], `--move-to-owner`).
//!
//! Three tasks share a [`Conn`]: the reader (decodes and executes commands in order), the writer
//! (writes the output buffer when it is due: responses at once, at most once per turn of the
//! shard, so pipelined responses and deliveries go out in one write; message frames possibly
//! held up to the client's output buffer timeout, see [`writer`]), and the heartbeat ticker. Reader
//! and writer share the socket's one descriptor ([`crate::sys::conn_socket`]).
//!
//! Flow control of deliveries: the connection counts the bytes of message frames it was
//! handed and, as its writer gets them into the socket, reports them written to the channel's
//! owner (`ChannelOp::Written`, once a quarter of the window has gathered). The owner stops
//! delivering to a consumer with a window's worth unreported (`Config::output_window`), so a
//! client that does not read holds at most about a window of frames here. A write that makes
//! no progress for a heartbeat interval (nsqd's write deadline; [`writer::WRITE_TIMEOUT`] with
//! heartbeats off) closes the connection, and its in-flight messages go back to the channel.
//!
//! Responses keep the order of commands. Publishes pipeline: the reader sends PUB/MPUB/DPUB to
//! the topic's owner and goes on decoding (up to [`pub_pipeline::MAX_PIPELINED`] outstanding), while
//! a fourth task, the replier, writes their answers in command order as they come back. A
//! command that answers anything else (IDENTIFY, SUB, CLS, ...) first waits until every
//! outstanding publish has been answered, so the client sees responses exactly in the order of
//! its commands. A fatal protocol error sends its error frame, then closes; a non-fatal one
//! (FIN of an unknown ID, ...) only sends the frame.
//!
//! Here: [`accept_loop`], [`serve`] (a connection's tasks, from accept to close) and [`Conn`]
//! (what those tasks share: its owned parts, each with private fields, and the signals
//! between the tasks). The jobs of a connection:
//! - [`reader`]: the V2 magic and the command loop (SUB, RDY, FIN, REQ, TOUCH, CLS);
//! - [`session`]: what the reader knows of its connection, changed only through its methods;
//! - [`handover`]: when a connection moves to its topic's owner, and what it takes along;
//! - [`identify`]: IDENTIFY and its negotiation;
//! - [`auth`]: AUTH, and the authorization gate of PUB, MPUB, DPUB and SUB;
//! - [`pub_pipeline`]: PUB, MPUB and DPUB, early answers, the replier ([`Conn`]'s part
//!   `Pipeline`);
//! - [`output`]: the output buffer and when it is due ([`Conn`]'s part `Output`);
//! - [`identity`]: the client as /stats and AUTH see it ([`Conn`]'s part `Identity`);
//! - [`consuming`]: the subscription and the flow control of deliveries ([`Conn`]'s part
//!   `Consuming`);
//! - [`writer`]: the writer task, heartbeats;
//! - [`layers`]: TLS and compression between the socket and the codec, once IDENTIFY
//!   switched them on.
//!
//! Sibling modules depend on each other without a cycle: the command modules (`identify`,
//! `handover`) use [`session`], which uses `auth`; the reader uses them all; the parts use
//! none.

mod auth;
mod consuming;
mod handover;
mod identify;
mod identity;
mod layers;
mod output;
mod pub_pipeline;
mod reader;
mod session;
mod writer;

use crate::channel::ConsumerKey;
use crate::mailbox::{ChannelOp, Handover, Mail};
use crate::shard::Shard;
use bytes::BytesMut;
use consuming::Consuming;
use glommio::net::{TcpListener, TcpStream};
use identity::Identity;
use nsq_common::local_sync::{Notified, Notify};
use output::{Output, OutputBuffer};
use pub_pipeline::{reply_loop, Pipeline};
use reader::{flush_fins, read_loop};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn, Instrument};
use writer::{heartbeat_loop, write_loop};

/// How long a stopping connection waits for its outstanding publishes to be answered.
const REPLY_GRACE: Duration = Duration::from_secs(5);

/// The owner shard, topic and channel of a subscription.
type Subscription = (usize, Arc<str>, Arc<str>);

/// The part of a connection that other tasks of the shard can reach: its owned parts, and
/// the signals between its tasks.
pub struct Conn {
    pub id: u64,
    /// The frames the writer is to write.
    out: Output,
    /// The publishes in flight, and what was published.
    pipeline: Pipeline,
    /// Who the client is, for /stats and AUTH.
    identity: Identity,
    /// The channel consumed, and the flow control of its deliveries.
    consuming: Consuming,
    wake_reader: Notify,
    heartbeat_changed: Notify,
    heartbeat: Cell<Option<Duration>>,
    closed: Cell<bool>,
    /// The connection moved to another shard ([`handover`]): its socket stays open.
    moved: Cell<bool>,
    stop_requested: Cell<bool>,
    /// TLS and compression, once IDENTIFY switched any on (`None`: plaintext, no layer).
    layers: RefCell<Option<Box<layers::Layers>>>,
}

impl Conn {
    fn new(id: u64, heartbeat: Duration, output_window: u64, out_buffer: OutputBuffer) -> Conn {
        Conn {
            id,
            out: Output::new(out_buffer),
            pipeline: Pipeline::new(),
            identity: Identity::default(),
            consuming: Consuming::new(output_window),
            wake_reader: Notify::new(),
            heartbeat_changed: Notify::new(),
            heartbeat: Cell::new(Some(heartbeat)),
            closed: Cell::new(false),
            moved: Cell::new(false),
            stop_requested: Cell::new(false),
            layers: RefCell::new(None),
        }
    }

    /// Whether the client waits for an answer from us: a publish not answered yet, or a
    /// response not written. Not asked of a consumer: what it sends (FIN, RDY) answers no
    /// request of ours, and reading it as it trickles in would only cut its batches small.
    fn answer_pending(&self) -> bool {
        !self.consuming.is_subscribed() && (self.pipeline.has_unanswered() || !self.out.is_empty())
    }

    /// Waits until at most `limit` publishes are outstanding (0: all answered).
    async fn wait_outstanding(&self, limit: usize) {
        while self.pipeline.outstanding() > limit && !self.closed.get() {
            self.pipeline.answered().await;
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.get()
    }

    fn stop_requested(&self) -> bool {
        self.stop_requested.get()
    }

    fn has_moved(&self) -> bool {
        self.moved.get()
    }

    /// Wakes on a stop or a close.
    fn reader_woken(&self) -> Notified<'_> {
        self.wake_reader.notified()
    }

    /// The heartbeat interval (`None`: heartbeats off).
    fn heartbeat(&self) -> Option<Duration> {
        self.heartbeat.get()
    }

    /// Sets the heartbeat interval; the ticker and the write deadline follow at once.
    fn set_heartbeat(&self, every: Option<Duration>) {
        self.heartbeat.set(every);
        self.heartbeat_changed.notify();
    }

    /// Fires when the heartbeat interval changed, or the connection closed.
    fn heartbeat_changed(&self) -> Notified<'_> {
        self.heartbeat_changed.notified()
    }

    /// IDENTIFY put TLS or a compression on: socket bytes go through `layers` from now on.
    fn put_layers(&self, layers: Box<layers::Layers>) {
        *self.layers.borrow_mut() = Some(layers);
    }

    /// Shutdown: finish the command in progress, answer it, then close.
    pub fn request_stop(&self) {
        self.stop_requested.set(true);
        self.wake_reader.notify();
    }

    /// Close now; the writer flushes what is already buffered, then shuts the socket.
    pub fn close(&self) {
        self.closed.set(true);
        self.wake_reader.notify();
        self.out.wake_writer();
        self.heartbeat_changed.notify();
        self.pipeline.wake_replier();
    }
}

/// Accepts connections on this shard's TCP listener until the shard stops accepting, and
/// serves each on this shard. On a unix socket (shard 0's alone) the connections are dealt to
/// the shards in turn (`Mail::TcpConn`); a shard without a listener serves those it is given
/// and waits for the stop.
pub async fn accept_loop(shard: Rc<Shard>, listener: Option<TcpListener>) {
    glommio::spawn_local(adopter(shard.clone())).detach();
    let Some(listener) = listener else {
        shard.stop_accepting.notified().await;
        shard.stopped_accepting();
        return;
    };
    let deal = matches!(
        shard.config.tcp_address,
        crate::sys::listen::ListenAddr::Unix(_)
    );
    let mut turn = 0usize;
    let mut limit = crate::sys::accept_limit::AcceptLimit::new(shard.id, "TCP");
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.stop_accepting.notified().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                let Some(stream) = limit.admit(stream) else {
                    continue;
                };
                let to = if deal {
                    turn = turn.wrapping_add(1);
                    turn % shard.config.shards
                } else {
                    shard.id
                };
                if to == shard.id {
                    glommio::spawn_local(serve(shard.clone(), stream, None)).detach();
                } else {
                    give(&shard, stream, to);
                }
            }
            Some(Err(e)) => limit.on_error(&listener, e).await,
        }
    }
    info!(shard = shard.id, "stopped accepting");
    shard.stopped_accepting();
}

/// Gives a connection accepted here to shard `to` (a duplicate of its socket in the mail; this
/// shard's stream is dropped). On failure the connection closes: its client sees it refused.
fn give(shard: &Shard, stream: TcpStream, to: usize) {
    let fd = crate::sys::listen::dup_socket(std::os::fd::AsRawFd::as_raw_fd(&stream));
    drop(stream);
    match fd {
        Ok(fd) => shard.route(to, Mail::TcpConn { fd, moved: None }),
        Err(e) => warn!("TCP connection dropped: dup failed ({e})"),
    }
}

/// Serves the connections other shards give or move to this one.
async fn adopter(shard: Rc<Shard>) {
    loop {
        shard.wake_tcp_adopter.notified().await;
        let adopted = std::mem::take(&mut *shard.tcp_adopted.borrow_mut());
        for (fd, moved) in adopted {
            // SAFETY: the descriptor is a connected socket this shard now owns alone.
            let stream = unsafe {
                <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(
                    std::os::fd::IntoRawFd::into_raw_fd(fd),
                )
            };
            glommio::spawn_local(serve(shard.clone(), stream, moved)).detach();
        }
    }
}

/// Serves one accepted connection until it closes or moves to another shard (`moved`: it
/// was moved here, with what its reader knew).
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, moved: Option<Box<Handover>>) {
    let id = shard.next_conn_id();
    // A unix socket's client has no address: nsqd (Go) writes it `@`.
    let remote = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| {
            // SAFETY: the stream's descriptor is open for as long as `stream` lives.
            let fd = unsafe {
                std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&stream))
            };
            let unix = socket2::SockRef::from(&fd)
                .local_addr()
                .is_ok_and(|a| a.is_unix());
            if unix { "@" } else { "unknown" }.into()
        });
    // A debug span: at the default level it is disabled and costs nothing, where an enabled
    // one is recorded by the subscriber for every connection. The few events above debug
    // name the connection themselves.
    let span = tracing::debug_span!("client", shard = shard.id, conn = id, remote = %remote);
    async move {
        debug!("connected");
        let _ = stream.set_nodelay(true);
        let (stream, writer_stream) = crate::sys::conn_socket::split(stream);
        let limits = shard.config.identify_limits();
        let conn = Rc::new(Conn::new(
            id,
            Duration::from_millis(limits.default_heartbeat_ms),
            shard.config.output_window(),
            OutputBuffer::new(
                limits.default_output_buffer_size,
                limits.default_output_buffer_timeout_ms,
            ),
        ));
        if let Some(m) = &moved {
            conn.heartbeat.set(m.heartbeat);
            conn.out.set_holding(OutputBuffer {
                size: m.output_buffer_size,
                timeout: m.output_buffer_timeout,
            });
            conn.identity.show(&m.info);
        }
        shard.register_conn(conn.id, conn.clone());
        let writer = glommio::spawn_local(write_loop(shard.clone(), conn.clone(), writer_stream));
        let ticker = glommio::spawn_local(heartbeat_loop(conn.clone()));
        let replier = glommio::spawn_local(reply_loop(shard.clone(), conn.clone()));

        let mut session = read_loop(&shard, &conn, stream, remote, moved).await;
        if let Some(s) = session.as_mut() {
            flush_fins(&shard, &conn, s);
        }
        let handover = session.as_mut().and_then(|s| s.take_move());
        conn.moved.set(handover.is_some());
        // Answer what is in progress (a stop, or EOF after pipelined publishes), bounded.
        let _ = glommio::timer::timeout(REPLY_GRACE, async {
            conn.wait_outstanding(0).await;
            Ok(())
        })
        .await;
        if conn.pipeline.outstanding() > 0 {
            warn!(
                shard = shard.id,
                conn = id,
                outstanding = conn.pipeline.outstanding(),
                "publishes still unconfirmed by their owner when the connection closed"
            );
        }

        if let Some((owner, topic, channel)) = session.and_then(|s| s.into_sub()) {
            shard.route(
                owner,
                Mail::Channel {
                    topic,
                    channel,
                    key: ConsumerKey {
                        shard: shard.id,
                        conn: id,
                    },
                    op: ChannelOp::Leave,
                },
            );
        }
        shard.unregister_conn(id);
        conn.close();
        writer.await;
        // close() woke them: they see the connection closed and end by themselves (a task ended
        // with glommio's `cancel` keeps its allocation: docs/design/connections.md, "What an
        // idle connection holds").
        ticker.await;
        if conn.pipeline.outstanding() == 0 {
            replier.await;
        } else {
            // Answers that did not come within the grace: never waited for again.
            replier.cancel().await;
        }
        if let Some((owner, fd, moved)) = handover {
            // Everything this shard had for the client is written: the owner takes over.
            debug!(owner, "moved to the topic's owner");
            let moved_count = &shard.admin.tcp_handovers;
            moved_count.set(moved_count.get() + 1);
            shard.route(
                owner,
                Mail::TcpConn {
                    fd,
                    moved: Some(moved),
                },
            );
            return;
        }
        debug!("closed");
    }
    .instrument(span)
    .await
}

/// Sends `op` of connection `conn` to the owner of the channel it consumes (nothing before SUB).
fn route_channel_op(shard: &Shard, conn: u64, sub: Option<&Subscription>, op: ChannelOp) {
    if let Some((owner, topic, channel)) = sub {
        shard.route(
            *owner,
            Mail::Channel {
                topic: topic.clone(),
                channel: channel.clone(),
                key: ConsumerKey {
                    shard: shard.id,
                    conn,
                },
                op,
            },
        );
    }
}

impl crate::shard::ConnHandle for Conn {
    fn deliver_frames(&self, frames: BytesMut, full: bool) {
        Conn::deliver_frames(self, frames, full);
    }

    fn push_error(&self, error: &protocol::ProtocolError) {
        Conn::push_error(self, error);
    }

    fn close(&self) {
        Conn::close(self);
    }

    fn request_stop(&self) {
        Conn::request_stop(self);
    }

    fn producer_stats(&self, topic: Option<&str>) -> Option<crate::stats::ClientStats> {
        let pub_counts = self.pipeline.pub_counts(topic)?;
        let state = if self.consuming.is_subscribed() {
            crate::stats::STATE_SUBSCRIBED
        } else {
            crate::stats::STATE_INIT
        };
        let mut s = crate::stats::ClientStats::new(&self.identity.info(), state);
        s.pub_counts = pub_counts;
        Some(s)
    }
}

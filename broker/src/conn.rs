//! One client connection on the shard the kernel gave it: the V2 handshake, the command loop,
//! the output buffer and its writer, heartbeats.
//!
//! Three tasks share a [`Conn`]: the reader (decodes and executes commands in order), the writer
//! (flushes the output buffer whenever there is something in it: once per turn of the shard,
//! so pipelined responses and deliveries go out in one write), and the heartbeat ticker. Reader
//! and writer share the socket's one descriptor ([`crate::conn_socket`]).
//!
//! Flow control of deliveries: the connection counts the bytes of message frames it was
//! handed and, as its writer gets them into the socket, reports them written to the channel's
//! owner (`ChannelOp::Written`, once a quarter of the window has gathered). The owner stops
//! delivering to a consumer with a window's worth unreported (`Config::output_window`), so a
//! client that does not read holds at most about a window of frames here. A write that makes
//! no progress for a heartbeat interval (nsqd's write deadline; [`WRITE_TIMEOUT`] with
//! heartbeats off) closes the connection, and its in-flight messages go back to the channel.
//!
//! Responses keep the order of commands. Publishes pipeline: the reader sends PUB/MPUB/DPUB to
//! the topic's owner and goes on decoding (up to [`MAX_PIPELINED`] outstanding), while a fourth
//! task, the replier, writes their answers in command order as they come back. A command that
//! answers anything else (IDENTIFY, SUB, CLS, ...) first waits until every outstanding publish
//! has been answered, so the client sees responses exactly in the order of its commands. A fatal protocol error sends its error frame, then
//! closes; a non-fatal one (FIN of an unknown ID, ...) only sends the frame.

use crate::channel::{ClientInfo, ConsumerKey, ConsumerSpec};
use crate::conn_socket::{ReadHalf, WriteHalf};
use crate::eager_read::EagerRead;
use crate::mailbox::{ChannelOp, Mail, Reply};
use crate::shard::Shard;
use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use nsq_common::local_sync::Notify;
use protocol::command::ConnPhase;
use protocol::frame::write_frame;
use protocol::identify::{IdentifyRequest, IdentifyResponse};
use protocol::{
    decode_command_resuming, Command, DecodeContext, DecodeProgress, ErrorCode, FrameType,
    ProtocolError,
};
use std::cell::{Cell, RefCell};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn, Instrument};

/// Smallest and largest read buffer; it doubles while reads fill it and halves after
/// [`SHRINK_AFTER`] reads in a row that filled less than an eighth of it, so a connection that
/// quietens down holds a small one (and one that alternates does not reallocate every read).
const READ_MIN: usize = 1024;
const SHRINK_AFTER: u8 = 4;
const READ_MAX: usize = 256 * 1024;
/// With heartbeats off, a client that does not take its bytes for this long is closed (with
/// heartbeats on, one heartbeat interval).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest write buffer a connection keeps between writes.
const KEEP_WRITE_BUF: usize = 256 * 1024;
/// Publishes one connection may have outstanding before its reader waits.
pub const MAX_PIPELINED: usize = 64;
/// How long a stopping connection waits for its outstanding publishes to be answered.
const REPLY_GRACE: Duration = Duration::from_secs(5);
/// Turns of the shard a reader gives its answer to go out before it reads eagerly
/// ([`crate::eager_read`]): the replier, then the writer.
const EAGER_YIELDS: usize = 3;

/// A publish sent to its owner, waiting for the answer.
struct PendingPublish {
    reply: nsq_common::local_sync::Receiver<Reply>,
    owner: usize,
    /// Its OK is already written (see [`Shard::can_ack_early`]); the answer only confirms it.
    acked: bool,
    topic: String,
    count: u64,
    fail: ErrorCode,
    verb: &'static str,
}

/// The owner shard, topic and channel of a subscription.
type Subscription = (usize, Arc<str>, Arc<str>);

/// The part of a connection that other tasks of the shard can reach.
pub struct Conn {
    pub id: u64,
    out: RefCell<BytesMut>,
    wake_writer: Notify,
    wake_reader: Notify,
    heartbeat_changed: Notify,
    heartbeat: Cell<Option<Duration>>,
    closed: Cell<bool>,
    stop_requested: Cell<bool>,
    /// Who the client says it is (after IDENTIFY), for /stats.
    pub(crate) info: RefCell<ClientInfo>,
    /// Messages published per topic on this connection, for /stats `pub_counts`.
    pub(crate) pub_counts: RefCell<Vec<(String, u64)>>,
    /// Set once SUB succeeded: the connection is then listed under its channel, not producers.
    pub(crate) subscribed: Cell<bool>,
    /// Publishes sent to their owners, in command order, and how many are not answered yet.
    pending: RefCell<std::collections::VecDeque<PendingPublish>>,
    outstanding: Cell<usize>,
    /// Pending publishes whose answer the client still waits for (not acknowledged early).
    unanswered: Cell<usize>,
    wake_replier: Notify,
    replies_done: Notify,
    /// After SUB: the channel's owner, topic and channel, where written bytes are reported.
    consumes: RefCell<Option<Subscription>>,
    /// Bytes of message frames in `out`, not yet taken by the writer.
    unsent_deliveries: Cell<u64>,
    /// Bytes of message frames written and not yet reported to the owner.
    written_unreported: Cell<u64>,
    /// Report written bytes once this many have gathered (a quarter of the owner's window).
    report_every: u64,
}

impl Conn {
    fn new(id: u64, heartbeat: Duration, output_window: u64) -> Conn {
        Conn {
            id,
            out: RefCell::new(BytesMut::new()),
            wake_writer: Notify::new(),
            wake_reader: Notify::new(),
            heartbeat_changed: Notify::new(),
            heartbeat: Cell::new(Some(heartbeat)),
            closed: Cell::new(false),
            stop_requested: Cell::new(false),
            info: RefCell::new(ClientInfo::default()),
            pub_counts: RefCell::new(Vec::new()),
            subscribed: Cell::new(false),
            pending: RefCell::new(std::collections::VecDeque::new()),
            outstanding: Cell::new(0),
            unanswered: Cell::new(0),
            wake_replier: Notify::new(),
            replies_done: Notify::new(),
            consumes: RefCell::new(None),
            unsent_deliveries: Cell::new(0),
            written_unreported: Cell::new(0),
            report_every: (output_window / 4).max(1),
        }
    }

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

    /// Whether the client waits for an answer from us: a publish not answered yet, or a
    /// response not written. Not asked of a consumer: what it sends (FIN, RDY) answers no
    /// request of ours, and reading it as it trickles in would only cut its batches small.
    fn answer_pending(&self) -> bool {
        !self.subscribed.get() && (self.unanswered.get() > 0 || !self.out.borrow().is_empty())
    }

    /// Waits until at most `limit` publishes are outstanding (0: all answered).
    async fn wait_outstanding(&self, limit: usize) {
        while self.outstanding.get() > limit && !self.closed.get() {
            self.replies_done.notified().await;
        }
    }

    fn count_published(&self, topic: &str, n: u64) {
        let mut counts = self.pub_counts.borrow_mut();
        match counts.iter_mut().find(|(t, _)| t == topic) {
            Some((_, c)) => *c += n,
            None => counts.push((topic.to_string(), n)),
        }
    }

    fn push_frame(&self, kind: FrameType, data: &[u8]) {
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

    /// Shutdown: finish the command in progress, answer it, then close.
    pub fn request_stop(&self) {
        self.stop_requested.set(true);
        self.wake_reader.notify();
    }

    /// Close now; the writer flushes what is already buffered, then shuts the socket.
    pub fn close(&self) {
        self.closed.set(true);
        self.wake_reader.notify();
        self.wake_writer.notify();
        self.heartbeat_changed.notify();
        self.wake_replier.notify();
    }
}

/// What the reader knows of its connection.
struct Session {
    phase: ConnPhase,
    heartbeats: bool,
    msg_timeout: Duration,
    info: ClientInfo,
    /// The owner shard and the channel this connection consumes, after SUB.
    sub: Option<Subscription>,
    /// FINs decoded from the current read, sent together (see [`flush_fins`]).
    fins: Vec<protocol::MessageId>,
}

/// Most FINs gathered into one mail.
const FIN_BATCH: usize = 512;

/// Sends the gathered FINs to the channel's owner as one operation. Called before any other
/// command runs (so operations keep their order) and when the read buffer is used up.
fn flush_fins(shard: &Shard, conn: &Conn, session: &mut Session) {
    if session.fins.is_empty() {
        return;
    }
    let op = ChannelOp::Fin(std::mem::take(&mut session.fins));
    channel_op(shard, conn, session, op);
}

/// Serves one accepted connection until it closes.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream) {
    let id = shard.next_conn_id();
    let remote = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "unknown".into());
    // A debug span: at the default level it is disabled and costs nothing, where an enabled
    // one is recorded by the subscriber for every connection. The few events above debug
    // name the connection themselves.
    let span = tracing::debug_span!("client", shard = shard.id, conn = id, remote = %remote);
    async move {
        debug!("connected");
        let _ = stream.set_nodelay(true);
        let (stream, writer_stream) = crate::conn_socket::split(stream);
        let heartbeat = shard.config.identify_limits().default_heartbeat_ms;
        let conn = Rc::new(Conn::new(
            id,
            Duration::from_millis(heartbeat),
            shard.config.output_window(),
        ));
        shard.register_conn(conn.id, conn.clone());
        let writer = glommio::spawn_local(write_loop(shard.clone(), conn.clone(), writer_stream));
        let ticker = glommio::spawn_local(heartbeat_loop(conn.clone()));
        let replier = glommio::spawn_local(reply_loop(shard.clone(), conn.clone()));

        let mut session = read_loop(&shard, &conn, stream, remote).await;
        if let Some(s) = session.as_mut() {
            flush_fins(&shard, &conn, s);
        }
        // Answer what is in progress (a stop, or EOF after pipelined publishes), bounded.
        let _ = glommio::timer::timeout(REPLY_GRACE, async {
            conn.wait_outstanding(0).await;
            Ok(())
        })
        .await;
        if conn.outstanding.get() > 0 {
            warn!(
                shard = shard.id,
                conn = id,
                outstanding = conn.outstanding.get(),
                "publishes still unconfirmed by their owner when the connection closed"
            );
        }

        if let Some((owner, topic, channel)) = session.and_then(|s| s.sub) {
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
        // close() woke them: they see the connection closed and end by themselves. (A task
        // ended with glommio's `cancel` kept its allocation for good: 240 bytes a connection.)
        ticker.await;
        if conn.outstanding.get() == 0 {
            replier.await;
        } else {
            // Answers that did not come within the grace: never waited for again.
            replier.cancel().await;
        }
        debug!("closed");
    }
    .instrument(span)
    .await
}

/// Reads and executes commands until the connection ends; returns the session (for cleanup).
async fn read_loop(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    mut stream: ReadHalf,
    remote: String,
) -> Option<Session> {
    let heartbeat = conn.heartbeat.get().unwrap_or(Duration::from_secs(30));
    stream.set_read_timeout(Some(heartbeat * 2));
    let mut magic = [0u8; 4];
    let got =
        futures_lite::future::or(async { Some(stream.read_exact(&mut magic).await) }, async {
            conn.wake_reader.notified().await;
            None
        })
        .await;
    match got {
        Some(Ok(())) if &magic == protocol::MAGIC_V2 => {}
        Some(Ok(())) => {
            conn.push_frame(FrameType::Error, b"E_BAD_PROTOCOL");
            debug!("bad protocol magic {:?}", magic);
            return None;
        }
        _ => return None,
    }

    let mut session = Session {
        phase: ConnPhase::Init,
        heartbeats: true,
        msg_timeout: shard.config.msg_timeout,
        info: ClientInfo {
            remote_address: remote,
            connect_ts: crate::ids::now_nanos() / 1_000_000_000,
            ..ClientInfo::default()
        },
        sub: None,
        fins: Vec::new(),
    };
    *conn.info.borrow_mut() = session.info.clone();
    let limits = shard.decode_limits();
    let mut rbuf = BytesMut::new();
    let mut progress = DecodeProgress::default();
    let mut scratch = vec![0u8; READ_MIN];
    let mut small_reads = 0u8;
    let mut eager = EagerRead::default();
    loop {
        loop {
            if conn.closed.get() {
                return Some(session);
            }
            let ctx = DecodeContext {
                phase: session.phase,
                heartbeats_enabled: session.heartbeats,
                limits,
            };
            match decode_command_resuming(&mut rbuf, &ctx, &mut progress) {
                Ok(Some(Command::Fin(id))) if session.sub.is_some() => {
                    session.fins.push(id);
                    if session.fins.len() >= FIN_BATCH {
                        flush_fins(shard, conn, &mut session);
                    }
                }
                Ok(Some(cmd)) => {
                    flush_fins(shard, conn, &mut session);
                    let publishes = matches!(
                        cmd,
                        Command::Pub { .. } | Command::Mpub { .. } | Command::Dpub { .. }
                    );
                    let limit = if publishes { MAX_PIPELINED - 1 } else { 0 };
                    conn.wait_outstanding(limit).await;
                    if conn.closed.get() {
                        return Some(session);
                    }
                    if let Err(e) = execute(shard, conn, &mut stream, &mut session, cmd).await {
                        debug!(error = %e, "command failed");
                        conn.push_error(&e);
                        if e.fatal {
                            return Some(session);
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    flush_fins(shard, conn, &mut session);
                    debug!(error = %e, "protocol error");
                    // After the answers of the publishes before it, as on the wire.
                    conn.wait_outstanding(0).await;
                    conn.push_error(&e);
                    return Some(session);
                }
            }
        }
        if conn.stop_requested.get() {
            return Some(session);
        }
        flush_fins(shard, conn, &mut session);
        // FINs/RDYs of this read for this shard's own channels: dispatch once, now.
        shard.flush_dispatches();
        if let Some((owner, _, _)) = &session.sub {
            wait_while_congested(shard, *owner).await;
        }
        let mut read = None;
        if conn.answer_pending() && eager.wanted() {
            // Let the replier and the writer send the answer; a client on this CPU runs as
            // that send wakes it, and its next command is then already here.
            for _ in 0..EAGER_YIELDS {
                futures_lite::future::yield_now().await;
                if !conn.answer_pending() {
                    read = eager.read(stream.as_raw_fd(), &mut scratch).await;
                    break;
                }
            }
        }
        if read.is_none() {
            read =
                futures_lite::future::or(async { Some(stream.read(&mut scratch).await) }, async {
                    conn.wake_reader.notified().await;
                    None
                })
                .await;
        }
        match read {
            None => {
                if conn.stop_requested.get() || conn.closed.get() {
                    return Some(session);
                }
            }
            Some(Ok(0)) => return Some(session),
            Some(Ok(n)) => {
                rbuf.extend_from_slice(&scratch[..n]);
                if n < scratch.len() / 8 {
                    small_reads = small_reads.saturating_add(1);
                } else {
                    small_reads = 0;
                }
                if n == scratch.len() && scratch.len() < READ_MAX {
                    scratch.resize(scratch.len() * 2, 0);
                } else if small_reads >= SHRINK_AFTER && scratch.len() > READ_MIN {
                    scratch.truncate(scratch.len() / 2);
                    scratch.shrink_to_fit();
                    small_reads = 0;
                }
            }
            Some(Err(e)) => {
                debug!("read ended: {e}");
                return Some(session);
            }
        }
    }
}

async fn wait_while_congested(shard: &Shard, peer: usize) {
    while shard.is_congested(peer) {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

/// Executes one decoded command.
async fn execute(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    stream: &mut ReadHalf,
    session: &mut Session,
    cmd: Command,
) -> Result<(), ProtocolError> {
    match cmd {
        Command::Identify(body) => identify(shard, conn, stream, session, &body),
        Command::Auth(_) => Err(ProtocolError::fatal(
            ErrorCode::AuthDisabled,
            "AUTH disabled",
        )),
        Command::Sub { topic, channel } => subscribe(shard, conn, session, topic, channel).await,
        Command::Pub { topic, body } => {
            publish(
                shard,
                conn,
                topic,
                vec![body],
                Duration::ZERO,
                ErrorCode::PubFailed,
                "PUB",
            )
            .await
        }
        Command::Mpub { topic, bodies } => {
            publish(
                shard,
                conn,
                topic,
                bodies,
                Duration::ZERO,
                ErrorCode::MpubFailed,
                "MPUB",
            )
            .await
        }
        Command::Dpub {
            topic,
            defer_ms,
            body,
        } => {
            let defer = Duration::from_millis(defer_ms);
            publish(
                shard,
                conn,
                topic,
                vec![body],
                defer,
                ErrorCode::DpubFailed,
                "DPUB",
            )
            .await
        }
        Command::Rdy(n) => {
            channel_op(shard, conn, session, ChannelOp::Rdy(n));
            Ok(())
        }
        Command::Fin(id) => {
            channel_op(shard, conn, session, ChannelOp::Fin(vec![id]));
            Ok(())
        }
        Command::Req { id, delay_ms } => {
            let max = shard.config.max_req_timeout;
            let delay = Duration::from_millis(delay_ms).min(max);
            channel_op(shard, conn, session, ChannelOp::Req(id, delay));
            Ok(())
        }
        Command::Touch(id) => {
            channel_op(shard, conn, session, ChannelOp::Touch(id));
            Ok(())
        }
        Command::Cls => {
            channel_op(shard, conn, session, ChannelOp::Close);
            session.phase = ConnPhase::Closing;
            conn.push_response(protocol::CLOSE_WAIT);
            Ok(())
        }
        Command::Nop => Ok(()),
    }
}

fn identify(
    shard: &Shard,
    conn: &Conn,
    stream: &mut ReadHalf,
    session: &mut Session,
    body: &Bytes,
) -> Result<(), ProtocolError> {
    let req = IdentifyRequest::parse(body)?;
    let limits = shard.config.identify_limits();
    let n = req.negotiate(&limits)?;
    session.info.client_id = req.client_id.clone();
    session.info.hostname = req.hostname.clone();
    session.info.user_agent = req.user_agent.clone();
    session.info.sample_rate = n.sample_rate;
    session.msg_timeout = Duration::from_millis(n.msg_timeout_ms);
    *conn.info.borrow_mut() = session.info.clone();
    session.heartbeats = n.heartbeat_ms.is_some();
    let hb = n.heartbeat_ms.map(Duration::from_millis);
    conn.heartbeat.set(hb);
    conn.heartbeat_changed.notify();
    stream.set_read_timeout(hb.map(|d| d * 2));
    debug!(client_id = %req.client_id, user_agent = %req.user_agent, "identified");
    if req.feature_negotiation {
        let resp = IdentifyResponse::new(&n, &limits, shard.config.max_rdy_count, false);
        conn.push_response(&resp.to_json());
    } else {
        conn.push_response(protocol::OK);
    }
    Ok(())
}

async fn subscribe(
    shard: &Rc<Shard>,
    conn: &Conn,
    session: &mut Session,
    topic: String,
    channel: String,
) -> Result<(), ProtocolError> {
    let owner = shard.config.owner_of(&topic);
    let spec = ConsumerSpec {
        key: ConsumerKey {
            shard: shard.id,
            conn: conn.id,
        },
        msg_timeout: session.msg_timeout,
        info: Arc::new(session.info.clone()),
        output_window: shard.config.output_window(),
    };
    let (t, c): (Arc<str>, Arc<str>) = (Arc::from(topic.as_str()), Arc::from(channel.as_str()));
    let reply = shard
        .request(owner, |reply| Mail::Subscribe {
            topic,
            channel,
            consumer: spec,
            reply,
        })
        .await;
    match reply {
        Some(Reply::Subscribe(Ok(()))) => {
            session.phase = ConnPhase::Subscribed;
            session.sub = Some((owner, t.clone(), c.clone()));
            *conn.consumes.borrow_mut() = Some((owner, t.clone(), c.clone()));
            conn.subscribed.set(true);
            debug!(topic = %t, channel = %c, owner, "subscribed");
            conn.push_response(protocol::OK);
            Ok(())
        }
        Some(Reply::Subscribe(Err(e))) => Err(e),
        _ => Err(ProtocolError::fatal(
            ErrorCode::SubFailed,
            "SUB failed broker shutting down",
        )),
    }
}

/// Sends a publish to the topic's owner; its answer is written by the replier, in order.
async fn publish(
    shard: &Rc<Shard>,
    conn: &Conn,
    topic: String,
    bodies: Vec<Bytes>,
    defer: Duration,
    fail: ErrorCode,
    verb: &'static str,
) -> Result<(), ProtocolError> {
    let owner = shard.config.owner_of(&topic);
    let count = bodies.len() as u64;
    let counted_topic = topic.clone();
    // OK now, if every earlier answer is written and the owner is another, healthy shard.
    let acked = conn.unanswered.get() == 0 && shard.can_ack_early(owner, &counted_topic);
    if acked {
        conn.count_published(&counted_topic, count);
        conn.push_response(protocol::OK);
    } else {
        conn.unanswered.set(conn.unanswered.get() + 1);
    }
    let reply = shard.send_publish(owner, topic, bodies, defer, acked);
    conn.outstanding.set(conn.outstanding.get() + 1);
    conn.pending.borrow_mut().push_back(PendingPublish {
        reply,
        owner,
        acked,
        topic: counted_topic,
        count,
        fail,
        verb,
    });
    conn.wake_replier.notify();
    Ok(())
}

/// Writes the answers of pipelined publishes in command order. A failed publish sends its
/// (fatal) error frame and closes the connection, as nsqd does.
async fn reply_loop(shard: Rc<Shard>, conn: Rc<Conn>) {
    loop {
        let next = conn.pending.borrow_mut().pop_front();
        let Some(p) = next else {
            if conn.closed.get() {
                return;
            }
            conn.wake_replier.notified().await;
            continue;
        };
        let answer = p.reply.await;
        shard.note_publish_answer(p.owner, &answer, p.acked, &p.topic);
        if p.acked {
            conn.outstanding
                .set(conn.outstanding.get().saturating_sub(1));
            conn.replies_done.notify();
            continue;
        }
        conn.unanswered.set(conn.unanswered.get().saturating_sub(1));
        match answer {
            Some(Reply::Publish(Ok(()))) => {
                conn.count_published(&p.topic, p.count);
                conn.push_response(protocol::OK);
            }
            other => {
                let why = match other {
                    Some(Reply::Publish(Err(e))) => e.description,
                    _ => "broker shutting down".to_string(),
                };
                let e = ProtocolError::fatal(p.fail, format!("{} failed {why}", p.verb));
                debug!(error = %e, "publish failed");
                conn.push_error(&e);
                conn.close();
            }
        }
        conn.outstanding
            .set(conn.outstanding.get().saturating_sub(1));
        conn.replies_done.notify();
    }
}

fn channel_op(shard: &Shard, conn: &Conn, session: &Session, op: ChannelOp) {
    route_channel_op(shard, conn.id, session.sub.as_ref(), op);
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

/// Flushes the output buffer whenever something is in it; on close, flushes what is left and
/// shuts the socket down. A write that makes no progress for the write deadline closes the
/// connection.
async fn write_loop(shard: Rc<Shard>, conn: Rc<Conn>, mut stream: WriteHalf) {
    let mut spare = BytesMut::new();
    loop {
        conn.wake_writer.notified().await;
        loop {
            let deliveries = {
                let mut out = conn.out.borrow_mut();
                if out.is_empty() {
                    break;
                }
                std::mem::swap(&mut *out, &mut spare);
                conn.unsent_deliveries.replace(0)
            };
            stream.set_write_timeout(Some(conn.write_deadline()));
            if let Err(e) = stream.write_all(&spare).await {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    info!(
                        shard = shard.id,
                        conn = conn.id,
                        unsent = spare.len(),
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
            // A buffer grown by a burst is not kept by an idle connection.
            if spare.capacity() > KEEP_WRITE_BUF {
                spare = BytesMut::new();
            }
        }
        if conn.closed.get() {
            let _ = stream.flush().await;
            stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}

/// Sends `_heartbeat_` every interval while heartbeats are on. A client that sends nothing for
/// two intervals is closed by the reader's read timeout.
async fn heartbeat_loop(conn: Rc<Conn>) {
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

impl crate::shard::ConnHandle for Conn {
    fn deliver_frames(&self, frames: BytesMut) {
        Conn::deliver_frames(self, frames);
    }

    fn push_error(&self, error: &ProtocolError) {
        Conn::push_error(self, error);
    }

    fn close(&self) {
        Conn::close(self);
    }

    fn request_stop(&self) {
        Conn::request_stop(self);
    }

    fn producer_stats(&self, topic: Option<&str>) -> Option<crate::stats::ClientStats> {
        let counts = self.pub_counts.borrow();
        if counts.is_empty() {
            return None;
        }
        let state = if self.subscribed.get() {
            crate::stats::STATE_SUBSCRIBED
        } else {
            crate::stats::STATE_INIT
        };
        let mut s = crate::stats::ClientStats::new(&self.info.borrow(), state);
        s.pub_counts = counts
            .iter()
            .filter(|(name, _)| topic.is_none_or(|t| t == name))
            .map(|(topic, count)| crate::stats::PubCount {
                topic: topic.clone(),
                count: *count,
            })
            .collect();
        Some(s)
    }
}

/// Accepts TCP connections until the shard stops accepting, serving each in its own task;
/// then lets the shard report once its connections are done.
pub async fn accept_loop(shard: Rc<Shard>, listener: glommio::net::TcpListener) {
    let mut limit = crate::accept_limit::AcceptLimit::new(shard.id, "TCP");
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.stop_accepting.notified().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                glommio::spawn_local(serve(shard.clone(), stream)).detach();
            }
            Some(Err(e)) => limit.on_error(&listener, e).await,
        }
    }
    info!(shard = shard.id, "stopped accepting");
    shard.stopped_accepting();
}

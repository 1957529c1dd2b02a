//! The reader of a connection: the V2 magic, then decoding and executing its commands in
//! order until the connection ends ([`read_loop`]); SUB and the channel operations (RDY, FIN,
//! REQ, TOUCH, CLS) are executed here.
//!
//! Invariants: the FINs of one read travel together, and before any other command runs
//! ([`flush_fins`]), so a connection's channel operations reach the owner in command order. A
//! command other than a publish first waits until every outstanding publish is answered; a
//! publish waits while [`MAX_PIPELINED`] are outstanding. After each read the shard's marked
//! channels are dispatched once, and a consumer whose outbox to the channel's owner is
//! congested reads no more until it drains. Once an answer is on its way out, the next read
//! may be an eager one ([`crate::sys::eager_read`]). Once IDENTIFY put TLS or a compression
//! on, socket bytes go through [`super::layers`] and the buffer is refilled from it by at
//! most [`PULL_BUDGET`] at a time before the socket is read again; with `--tls-required`,
//! every command but IDENTIFY before TLS is refused with nsqd's error.

use super::handover;
use super::identify::identify;
use super::pub_pipeline::{publish, Publish, MAX_PIPELINED};
use super::session::Session;
use super::{route_channel_op, Conn};
use crate::channel::ClientInfo;
use crate::mailbox::Handover;
use crate::mailbox::{ChannelOp, Mail, Reply};
use crate::shard::Shard;
use crate::sys::conn_socket::ReadHalf;
use crate::sys::eager_read::EagerRead;
use bytes::BytesMut;
use futures_lite::AsyncReadExt;
use protocol::{
    decode_command_resuming, Command, DecodeProgress, ErrorCode, FrameType, ProtocolError,
};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

/// Smallest and largest read buffer; it doubles while reads fill it and halves after
/// [`SHRINK_AFTER`] reads in a row that filled less than an eighth of it, so a connection that
/// quietens down holds a small one (and one that alternates does not reallocate every read).
const READ_MIN: usize = 1024;
const SHRINK_AFTER: u8 = 4;
const READ_MAX: usize = 256 * 1024;
/// Turns of the shard a reader gives its answer to go out before it reads eagerly
/// ([`crate::sys::eager_read`]): the replier, then the writer.
const EAGER_YIELDS: usize = 3;

/// Most bytes the layers decode onto the read buffer before the commands in it are run: a
/// decompression bomb grows the buffer by no more than this past the command limits.
const PULL_BUDGET: usize = 64 * 1024;

/// Sends the gathered FINs to the channel's owner as one operation. Called before any other
/// command runs (so operations keep their order) and when the read buffer is used up.
pub(super) fn flush_fins(shard: &Shard, conn: &Conn, session: &mut Session) {
    if let Some(fins) = session.take_fins() {
        channel_op(shard, conn, session, ChannelOp::Fin(fins));
    }
}

/// Reads and executes commands until the connection ends; returns the session (for cleanup).
pub(super) async fn read_loop(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    mut stream: ReadHalf,
    remote: String,
    moved: Option<Box<Handover>>,
) -> Option<Session> {
    if let Some(moved) = moved {
        return resume_loop(shard, conn, stream, *moved).await;
    }
    let heartbeat = conn.heartbeat().unwrap_or(Duration::from_secs(30));
    stream.set_read_timeout(Some(heartbeat * 2));
    let mut magic = [0u8; 4];
    let got =
        futures_lite::future::or(async { Some(stream.read_exact(&mut magic).await) }, async {
            conn.reader_woken().await;
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

    let info = ClientInfo {
        remote_address: remote,
        connect_ts: crate::ids::now_nanos() / 1_000_000_000,
        ..ClientInfo::default()
    };
    let tls_required = shard.config.tls_required != crate::tls::TlsRequired::No;
    let session = Session::new(info, true, shard.config.msg_timeout, tls_required, false);
    conn.identity.show(session.info());
    command_loop(shard, conn, stream, session, BytesMut::new()).await
}

/// A connection another shard moved here ([`super::handover`]): runs the publish that moved
/// it, then its commands as [`read_loop`] would have.
async fn resume_loop(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    mut stream: ReadHalf,
    moved: Handover,
) -> Option<Session> {
    stream.set_read_timeout(moved.heartbeat.map(|d| d * 2));
    // A connection that moved had TLS off and not required (see `handover::destination`).
    let mut session = Session::new(moved.info, moved.heartbeats, moved.msg_timeout, false, true);
    if let Err(e) = execute(shard, conn, &mut stream, &mut session, moved.first).await {
        debug!(error = %e, "command failed");
        conn.push_error(&e);
        if e.fatal {
            return Some(session);
        }
    }
    command_loop(shard, conn, stream, session, moved.rest).await
}

/// Whether the reader goes on with the connection, or its commands end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Go,
    End,
}

/// What the reader reads from: the socket, the bytes read and not yet decoded, and the
/// buffer the socket is read into (sized to the reads, see [`READ_MIN`]).
struct Input {
    stream: ReadHalf,
    rbuf: BytesMut,
    progress: DecodeProgress,
    scratch: Vec<u8>,
    small_reads: u8,
    eager: EagerRead,
    /// The reader itself sent the answer the client waits for ([`Conn::send_now`]).
    answer_sent: bool,
}

impl Input {
    fn new(stream: ReadHalf, rbuf: BytesMut) -> Input {
        Input {
            stream,
            rbuf,
            progress: DecodeProgress::default(),
            scratch: vec![0u8; READ_MIN],
            small_reads: 0,
            eager: EagerRead::default(),
            answer_sent: false,
        }
    }

    /// Reads the socket into `scratch`: eagerly once the answer the client waits for is out
    /// ([`crate::sys::eager_read`]), else when it is readable. `None`: woken by a stop or a
    /// close.
    async fn read(&mut self, conn: &Conn) -> Option<std::io::Result<usize>> {
        // Sent by the reader itself, or still to be sent by the replier and the writer.
        let sent = std::mem::take(&mut self.answer_sent);
        let pending = conn.answer_pending();
        if (sent || pending) && self.eager.wanted() && (!pending || answer_goes_out(conn).await) {
            let read = self
                .eager
                .read(self.stream.as_raw_fd(), &mut self.scratch)
                .await;
            if read.is_some() {
                return read;
            }
        }
        let (stream, scratch) = (&mut self.stream, &mut self.scratch);
        futures_lite::future::or(async { Some(stream.read(scratch).await) }, async {
            conn.reader_woken().await;
            None
        })
        .await
    }

    /// `n` bytes were read into `scratch`: onto the read buffer (through the layers when they
    /// are on), then `scratch` grows after a full read and shrinks after small ones.
    fn take_read(&mut self, conn: &Conn, session: &mut Session, n: usize) -> Step {
        if session.is_layered() {
            let data = &self.scratch[..n];
            match layers_input(conn, session, &self.stream, data, &mut self.rbuf) {
                Ok(false) => {}
                Ok(true) | Err(()) => return Step::End,
            }
        } else {
            self.rbuf.extend_from_slice(&self.scratch[..n]);
        }
        let scratch = &mut self.scratch;
        if n < scratch.len() / 8 {
            self.small_reads = self.small_reads.saturating_add(1);
        } else {
            self.small_reads = 0;
        }
        if n == scratch.len() && scratch.len() < READ_MAX {
            scratch.resize(scratch.len() * 2, 0);
        } else if self.small_reads >= SHRINK_AFTER && scratch.len() > READ_MIN {
            scratch.truncate(scratch.len() / 2);
            scratch.shrink_to_fit();
            self.small_reads = 0;
        }
        Step::Go
    }

    /// IDENTIFY has just put layers on: what the client sent after it is theirs.
    fn hand_rest_to_layers(&mut self, conn: &Conn, session: &mut Session) -> Step {
        let rest = self.rbuf.split();
        self.progress = DecodeProgress::default();
        match layers_input(conn, session, &self.stream, &rest, &mut self.rbuf) {
            Ok(false) => Step::Go,
            Ok(true) | Err(()) => Step::End,
        }
    }
}

/// Gives the replier and the writer up to [`EAGER_YIELDS`] turns of the shard to send the
/// answer the client waits for; whether it went. A client on this CPU runs as that send wakes
/// it, and its next command is then already here.
async fn answer_goes_out(conn: &Conn) -> bool {
    for _ in 0..EAGER_YIELDS {
        futures_lite::future::yield_now().await;
        if !conn.answer_pending() {
            return true;
        }
    }
    false
}

/// Decodes and executes the commands of a connection past its magic, reading as it needs.
async fn command_loop(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    stream: ReadHalf,
    mut session: Session,
    rbuf: BytesMut,
) -> Option<Session> {
    let limits = shard.decode_limits();
    let mut input = Input::new(stream, rbuf);
    loop {
        if run_buffered(shard, conn, &mut input, &mut session, limits).await == Step::End
            || conn.stop_requested()
        {
            return Some(session);
        }
        read_done(shard, conn, &mut session).await;
        match pull_layers(conn, &session, &mut input.rbuf) {
            Pulled::More => continue,
            Pulled::Nothing => {}
            Pulled::Failed => return Some(session),
        }
        if read_more(conn, &mut session, &mut input).await == Step::End {
            return Some(session);
        }
    }
}

/// Decodes and runs the commands in the read buffer until it holds no whole command.
async fn run_buffered(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    input: &mut Input,
    session: &mut Session,
    limits: protocol::Limits,
) -> Step {
    loop {
        if conn.is_closed() {
            return Step::End;
        }
        if session.tls_required() {
            if let Some(e) = refuse_before_tls(&input.rbuf) {
                refuse(shard, conn, session, &e).await;
                return Step::End;
            }
        }
        let ctx = session.decode_context(limits);
        match decode_command_resuming(&mut input.rbuf, &ctx, &mut input.progress) {
            Ok(Some(Command::Fin(id))) if session.sub().is_some() => {
                if session.push_fin(id) {
                    flush_fins(shard, conn, session);
                }
            }
            Ok(Some(cmd)) => {
                if run_command(shard, conn, input, session, cmd).await == Step::End {
                    return Step::End;
                }
            }
            Ok(None) => return Step::Go,
            Err(e) => {
                debug!(error = %e, "protocol error");
                refuse(shard, conn, session, &e).await;
                return Step::End;
            }
        }
    }
}

/// A fatal error in the input: its frame goes out after the answers of the publishes before
/// it, as on the wire.
async fn refuse(shard: &Shard, conn: &Conn, session: &mut Session, e: &ProtocolError) {
    flush_fins(shard, conn, session);
    conn.wait_outstanding(0).await;
    conn.push_error(e);
}

/// Runs one command (a FIN gathered aside): the connection moves first if the command ties it
/// to another shard's topic, and the command waits its turn behind the publishes before it.
async fn run_command(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    input: &mut Input,
    session: &mut Session,
    cmd: Command,
) -> Step {
    flush_fins(shard, conn, session);
    let Some(cmd) = move_or_keep(shard, conn, input, session, cmd) else {
        return Step::End;
    };
    let publishes = matches!(
        cmd,
        Command::Pub { .. } | Command::Mpub { .. } | Command::Dpub { .. }
    );
    let limit = if publishes { MAX_PIPELINED - 1 } else { 0 };
    conn.wait_outstanding(limit).await;
    if conn.is_closed() {
        return Step::End;
    }
    if let Err(e) = execute(shard, conn, &mut input.stream, session, cmd).await {
        debug!(error = %e, "command failed");
        conn.push_error(&e);
        if e.fatal {
            return Step::End;
        }
    }
    if publishes && conn.send_now(&input.stream) {
        input.answer_sent = true;
    }
    if session.take_upgraded() {
        return input.hand_rest_to_layers(conn, session);
    }
    Step::Go
}

/// Moves the connection to its topic's owner when `cmd` ties it there ([`handover`]): `None`
/// then (the reader stops, `cmd` and the unread bytes travel along), else `cmd` back.
fn move_or_keep(
    shard: &Shard,
    conn: &Conn,
    input: &mut Input,
    session: &mut Session,
    cmd: Command,
) -> Option<Command> {
    let Some(owner) = handover::destination(shard, conn, session, &cmd) else {
        return Some(cmd);
    };
    match crate::sys::listen::dup_socket(input.stream.as_raw_fd()) {
        Ok(fd) => {
            let rest = input.rbuf.split();
            let h = handover::handover(conn, session, cmd, rest);
            session.move_to((owner, fd, Box::new(h)));
            None
        }
        Err(e) => {
            debug!("connection stays: dup failed ({e})");
            Some(cmd)
        }
    }
}

/// The read buffer is used up: its FINs go, this shard's marked channels are dispatched once,
/// and a consumer waits while its outbox to the channel's owner is congested.
async fn read_done(shard: &Shard, conn: &Conn, session: &mut Session) {
    flush_fins(shard, conn, session);
    // FINs/RDYs of this read for this shard's own channels: dispatch once, now.
    shard.flush_dispatches();
    if let Some((owner, _, _)) = session.sub() {
        wait_while_congested(shard, *owner).await;
    }
}

/// What the layers gave the read buffer.
enum Pulled {
    /// Nothing (or no layers): read the socket.
    Nothing,
    /// More input: decode it before reading the socket again.
    More,
    /// The layers failed: the connection ends.
    Failed,
}

/// Decodes more of what the layers hold, at most [`PULL_BUDGET`].
fn pull_layers(conn: &Conn, session: &Session, rbuf: &mut BytesMut) -> Pulled {
    if !session.is_layered() {
        return Pulled::Nothing;
    }
    let pulled = match conn.layers.borrow_mut().as_deref_mut() {
        Some(l) => l.pull(rbuf, PULL_BUDGET),
        None => Ok(0),
    };
    match pulled {
        Ok(0) => Pulled::Nothing,
        Ok(_) => Pulled::More,
        Err(e) => {
            debug!("input layers failed: {e}");
            Pulled::Failed
        }
    }
}

/// Reads more of the connection's input; `End` at its end, on a read error, or when the
/// connection is stopped or closed.
async fn read_more(conn: &Conn, session: &mut Session, input: &mut Input) -> Step {
    match input.read(conn).await {
        None if conn.stop_requested() || conn.is_closed() => Step::End,
        None => Step::Go,
        Some(Ok(0)) => Step::End,
        Some(Ok(n)) => input.take_read(conn, session, n),
        Some(Err(e)) => {
            debug!("read ended: {e}");
            Step::End
        }
    }
}

/// Bytes read from the socket into the layers (see [`super::layers`]); `Ok(true)` when
/// TLS ended cleanly, `Err` when the input is bad (the connection then closes, after the
/// writer sent any TLS alert).
fn layers_input(
    conn: &Conn,
    session: &mut Session,
    stream: &ReadHalf,
    data: &[u8],
    rbuf: &mut BytesMut,
) -> Result<bool, ()> {
    let mut layers = conn.layers.borrow_mut();
    let Some(l) = layers.as_deref_mut() else {
        rbuf.extend_from_slice(data);
        return Ok(false);
    };
    match l.input(data, rbuf) {
        Err(e) => {
            debug!("input layers failed: {e}");
            conn.out.wake_writer();
            Err(())
        }
        Ok(events) => {
            if events.wants_write {
                conn.out.wake_writer();
            }
            if events.handshake_done {
                // AUTH tells the auth servers (`tls=true`, the certificate's common name).
                session.tls_done(conn, l.tls_info(), l.peer_common_name());
                stream.set_read_timeout(conn.heartbeat().map(|d| d * 2));
                debug!(tls = ?session.info().tls, common_name = %conn.identity.common_name(), "TLS handshake done");
            }
            Ok(events.closed)
        }
    }
}

/// nsqd's `--tls-required`: before TLS is on, a command other than IDENTIFY is refused as
/// soon as its line is in, before any body (nsqd judges the line alone).
fn refuse_before_tls(rbuf: &[u8]) -> Option<ProtocolError> {
    let window = &rbuf[..rbuf.len().min(protocol::command::MAX_LINE_LEN + 1)];
    let nl = window.iter().position(|&b| b == b'\n')?;
    let mut line = &rbuf[..nl];
    if let [rest @ .., b'\r'] = line {
        line = rest;
    }
    let name = line.split(|&b| b == b' ').next().unwrap_or_default();
    if name == b"IDENTIFY" {
        return None;
    }
    Some(ProtocolError::fatal(
        ErrorCode::Invalid,
        format!(
            "cannot {} in current state (TLS required)",
            String::from_utf8_lossy(name)
        ),
    ))
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
    session.authorize(shard, conn, &cmd).await?;
    match cmd {
        Command::Identify(body) => identify(shard, conn, stream, session, &body),
        Command::Auth(secret) => session.auth(shard, conn, secret).await,
        Command::Sub { topic, channel } => subscribe(shard, conn, session, topic, channel).await,
        Command::Pub { topic, body } => publish(shard, conn, Publish::Pub { topic, body }).await,
        Command::Mpub { topic, bodies } => {
            publish(shard, conn, Publish::Mpub { topic, bodies }).await
        }
        Command::Dpub {
            topic,
            defer_ms,
            body,
        } => {
            let defer = Duration::from_millis(defer_ms);
            publish(shard, conn, Publish::Dpub { topic, defer, body }).await
        }
        Command::Rdy(n) => {
            if n == 0 {
                // It takes no more: what is held goes now, as nsqd flushes a client not ready.
                conn.flush_held();
            }
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
            session.closing();
            conn.push_response(protocol::CLOSE_WAIT);
            Ok(())
        }
        Command::Nop => Ok(()),
    }
}

async fn subscribe(
    shard: &Rc<Shard>,
    conn: &Conn,
    session: &mut Session,
    topic: String,
    channel: String,
) -> Result<(), ProtocolError> {
    let owner = shard.config.owner_of(&topic);
    let spec = session.consumer_spec(shard, conn);
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
            session.subscribed(conn, (owner, t.clone(), c.clone()));
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

fn channel_op(shard: &Shard, conn: &Conn, session: &Session, op: ChannelOp) {
    route_channel_op(shard, conn.id, session.sub(), op);
}

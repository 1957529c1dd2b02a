//! One replication connection to one peer broker: its socket, its `wire::Link`, and the task
//! that drives both ([`run`]).
//!
//! The task races three parts and ends when the first does: the reader (a bounded buffer read
//! from the socket into the link, what the link decodes handed to the host), the writer (the
//! link's `poll_transmit` flushed into the socket, the link's `tick` at each heartbeat
//! interval), and the stop signal ([`Conn::close`]). Ending drops the socket, and with it
//! whatever the link still queued: the replicas resend what matters.
//!
//! Invariants:
//! - the link is borrowed only inside a synchronous call, never across an `.await`, and the
//!   host is called with no borrow held (it may send on this very connection);
//! - the connection counts as established, and is handed to the host, only once the link has
//!   taken the peer's handshake (cluster and broker as expected); before that nothing is
//!   delivered;
//! - a connection that reads nothing for the idle timeout (a live peer ticks every interval),
//!   cannot write for as long, or has no handshake within the handshake timeout, ends;
//! - a decode error ends the connection with a warning naming the peer; no other connection
//!   is touched.

use super::config::TransportConfig;
use crate::sys::conn_socket::{split, ReadHalf, WriteHalf};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use nsq_common::local_sync::Notify;
use replication::ids::BrokerId;
use replication::wire::{Forward, Inbound, Link, LinkError};
use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Figures of one peer, over all its connections.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes written to the peer's sockets.
    pub bytes_out: Cell<u64>,
    /// Bytes read from them.
    pub bytes_in: Cell<u64>,
    /// Connections that completed their handshake.
    pub established: Cell<u64>,
    /// Connections closed for bad input (a decode error, a refused handshake).
    pub refused: Cell<u64>,
}

impl Counters {
    fn add(cell: &Cell<u64>, n: usize) {
        cell.set(cell.get().saturating_add(n as u64));
    }
}

/// What a connection reports to whoever owns it.
pub trait ConnHost {
    /// The link took the peer's handshake: whether the connection may serve (false closes it).
    fn established(&self, conn: &Rc<Conn>) -> bool;
    /// A message for one of this broker's replicas, or a forward, in the order received.
    fn deliver(&self, from: BrokerId, inbound: Inbound);
    /// The connection ended (after `established`, or without it).
    fn ended(&self, conn: &Rc<Conn>);
}

/// One connection's state, shared by its task and its owner.
pub struct Conn {
    /// Tells this connection from the peer's earlier and later ones.
    pub id: u64,
    /// The broker at the other end.
    pub peer: BrokerId,
    link: RefCell<Link>,
    /// The peer's incarnation, once its handshake is taken.
    incarnation: Cell<Option<u64>>,
    /// Wakes the writer: something was queued.
    wake: Notify,
    closing: Cell<bool>,
    closed: Notify,
    counters: Rc<Counters>,
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum End {
    #[error("closed by the peer")]
    Eof,
    #[error("{0}")]
    Io(io::Error),
    #[error("nothing received for {0:?}")]
    Idle(Duration),
    #[error("no progress writing for {0:?}")]
    WriteStalled(Duration),
    #[error("no handshake within {0:?}")]
    NoHandshake(Duration),
    #[error("{0}")]
    Link(LinkError),
    #[error("not taken: the peer is gone from the peer set or an older incarnation")]
    NotTaken,
    #[error("closed by this broker")]
    Closed,
}

impl Conn {
    pub fn new(id: u64, peer: BrokerId, link: Link, counters: Rc<Counters>) -> Rc<Conn> {
        Rc::new(Conn {
            id,
            peer,
            link: RefCell::new(link),
            incarnation: Cell::new(None),
            wake: Notify::new(),
            closing: Cell::new(false),
            closed: Notify::new(),
            counters,
        })
    }

    /// The peer's incarnation, once the connection is established.
    pub fn incarnation(&self) -> Option<u64> {
        self.incarnation.get()
    }

    /// Queues a message for the peer's replica of `topic` and wakes the writer.
    pub fn send(
        &self,
        topic: &str,
        msg: replication::replica::Msg,
    ) -> Result<(), replication::wire::SendError> {
        let r = match self.link.try_borrow_mut() {
            Ok(mut link) => link.send(topic, msg),
            // The link is borrowed only inside this module's synchronous calls, which do not
            // call out; were it busy, the message is lost like one dropped by the network.
            Err(_) => Err(replication::wire::SendError::Full),
        };
        if r.is_ok() {
            self.wake.notify();
        }
        r
    }

    /// Queues a forwarded publish, an answer or a channel operation after everything queued
    /// before it, and wakes the writer.
    pub fn send_forward(&self, f: Forward) -> Result<(), replication::wire::SendError> {
        let r = match self.link.try_borrow_mut() {
            Ok(mut link) => link.send_forward(f),
            // As in `send`: never busy in practice; refused rather than waited for.
            Err(_) => Err(replication::wire::SendError::Full),
        };
        if r.is_ok() {
            self.wake.notify();
        }
        r
    }

    /// Bytes of messages queued for the socket.
    pub fn queued_bytes(&self) -> usize {
        self.link.try_borrow().map_or(0, |l| l.queued_bytes())
    }

    /// Ends the connection (its task drops the socket).
    pub fn close(&self) {
        self.closing.set(true);
        self.closed.notify();
        self.wake.notify();
    }

    async fn stopped(&self) {
        while !self.closing.get() {
            self.closed.changed().await;
        }
    }
}

/// Runs `conn` on `stream` until it ends: `received` are bytes already read from the socket
/// (the acceptor's handshake and whatever followed it).
pub async fn run(
    conn: Rc<Conn>,
    stream: TcpStream,
    received: Vec<u8>,
    cfg: &TransportConfig,
    host: &dyn ConnHost,
) -> End {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = split(stream);
    rd.set_read_timeout(Some(cfg.handshake_timeout));
    wr.set_write_timeout(Some(cfg.idle_timeout));
    let end = futures_lite::future::or(
        futures_lite::future::or(
            read_loop(&conn, rd, received, cfg, host),
            write_loop(&conn, wr, cfg),
        ),
        async {
            conn.stopped().await;
            End::Closed
        },
    )
    .await;
    if matches!(end, End::Link(_) | End::NotTaken) {
        Counters::add(&conn.counters.refused, 1);
    }
    host.ended(&conn);
    end
}

async fn read_loop(
    conn: &Rc<Conn>,
    mut rd: ReadHalf,
    received: Vec<u8>,
    cfg: &TransportConfig,
    host: &dyn ConnHost,
) -> End {
    let mut out = Vec::new();
    if !received.is_empty() {
        if let Err(end) = take(conn, &rd, &received, &mut out, cfg, host) {
            return end;
        }
    }
    let mut buf = vec![0u8; cfg.read_buffer];
    loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) => return End::Eof,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return match conn.incarnation.get() {
                    Some(_) => End::Idle(cfg.idle_timeout),
                    None => End::NoHandshake(cfg.handshake_timeout),
                };
            }
            Err(e) => return End::Io(e),
        };
        Counters::add(&conn.counters.bytes_in, n);
        if let Err(end) = take(conn, &rd, &buf[..n], &mut out, cfg, host) {
            return end;
        }
    }
}

/// Feeds bytes read to the link and hands out what they carry; an error ends the connection.
fn take(
    conn: &Rc<Conn>,
    rd: &ReadHalf,
    bytes: &[u8],
    out: &mut Vec<Inbound>,
    cfg: &TransportConfig,
    host: &dyn ConnHost,
) -> Result<(), End> {
    let received = match conn.link.try_borrow_mut() {
        Ok(mut link) => link.receive(bytes, out),
        Err(_) => return Err(End::Io(io::Error::other("link in use"))),
    };
    if conn.incarnation.get().is_none() {
        let peer = conn
            .link
            .try_borrow()
            .ok()
            .and_then(|l| l.peer_hello().map(|h| h.incarnation));
        if let Some(incarnation) = peer {
            conn.incarnation.set(Some(incarnation));
            if !host.established(conn) {
                return Err(End::NotTaken);
            }
            Counters::add(&conn.counters.established, 1);
            rd.set_read_timeout(Some(cfg.idle_timeout));
        }
    }
    // Frames decoded before an error are whole and valid: they are delivered.
    for d in out.drain(..) {
        host.deliver(conn.peer, d);
    }
    received.map_err(End::Link)
}

async fn write_loop(conn: &Rc<Conn>, mut wr: WriteHalf, cfg: &TransportConfig) -> End {
    let started = Instant::now();
    let every = cfg.heartbeat_every;
    let mut next_tick = started + every;
    let mut buf = Vec::new();
    loop {
        let now = Instant::now();
        if conn.incarnation.get().is_none() && now >= started + cfg.handshake_timeout {
            return End::NoHandshake(cfg.handshake_timeout);
        }
        if now >= next_tick {
            if let Ok(mut link) = conn.link.try_borrow_mut() {
                link.tick();
            }
            next_tick += every;
            // After a stall, one tick, not a burst of them.
            if next_tick <= now {
                next_tick = now + every;
            }
        }
        buf.clear();
        if let Ok(mut link) = conn.link.try_borrow_mut() {
            link.poll_transmit(&mut buf, cfg.write_chunk);
        }
        if !buf.is_empty() {
            if let Err(e) = wr.write_all(&buf).await {
                return match e.kind() {
                    io::ErrorKind::TimedOut => End::WriteStalled(cfg.idle_timeout),
                    _ => End::Io(e),
                };
            }
            Counters::add(&conn.counters.bytes_out, buf.len());
            // A large frame's buffer is not kept for the connection's lifetime.
            if buf.capacity() > 2 * cfg.write_chunk {
                buf = Vec::new();
            }
            continue;
        }
        let mut wait = next_tick.saturating_duration_since(Instant::now());
        if conn.incarnation.get().is_none() {
            wait = wait.min((started + cfg.handshake_timeout).saturating_duration_since(now));
        }
        futures_lite::future::or(conn.wake.notified(), glommio::timer::sleep(wait)).await;
    }
}

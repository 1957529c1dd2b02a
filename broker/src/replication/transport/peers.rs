//! [`Peers`]: one shard's replication connections to every peer broker, the owner object the
//! replicas send through (and the forwards beside them: publishes forwarded to a leader, their
//! answers, channel operations) and whose handler receives what peers send.
//!
//! For each peer of the set ([`Peers::set_peers`]) it keeps at most one established connection.
//! For a peer with a higher id it runs a dialer (connect, run the connection until it ends,
//! wait a jittered, doubling delay, again); a peer with a lower id dials this broker, through
//! the listener ([`Peers::listen`]), whose handshakes `handshake::admit` judges. A peer's
//! connection from a newer (or the same) incarnation replaces the one held.
//!
//! Invariants:
//! - [`Peers::send`] and [`Peers::send_forward`] never wait: they queue in the peer's link,
//!   whose byte bound refuses what does not fit, or fail at once when there is no established
//!   connection; a forward queued on a connection that then ends is dropped with it (its
//!   sender's caller times out);
//! - a peer removed from the set, or the whole transport closed ([`Peers::close`], or the
//!   handle dropped), ends its dialer and its connection; tasks hold the state only while they
//!   run;
//! - nothing is delivered from a connection before its handshake was taken, nor from one no
//!   longer in the set.

use super::backoff::{JitteredBackoff, Rng};
use super::config::{ConfigError, TransportConfig};
use super::conn::{run, Conn, ConnHost, Counters, End};
use super::handshake::{admit, dials, read_hello};
use futures_lite::io::AsyncReadExt;
use glommio::net::{TcpListener, TcpStream};
use nsq_common::local_sync::Notify;
use nsq_common::timeout::with_timeout;
use replication::ids::BrokerId;
use replication::replica::Msg;
use replication::wire::{Forward, Hello, Inbound, Link};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::rc::Rc;
use std::time::Instant;
use tracing::{debug, info, warn};

/// Why a message was not queued for a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("broker {0} is not a peer")]
    UnknownPeer(u64),
    #[error("no connection to broker {0}")]
    NotConnected(u64),
    #[error("{0}")]
    Link(#[from] replication::wire::SendError),
}

/// A peer's state as the transport sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStats {
    /// The incarnation of its established connection, if one is.
    pub connected: Option<u64>,
    /// Bytes written to it and read from it, over all its connections.
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Its connections that completed the handshake.
    pub established: u64,
    /// Its connections closed for bad input or refused.
    pub refused: u64,
    /// Bytes of messages queued for it.
    pub queued: usize,
}

/// What one shard keeps of the transport; the handle to it is [`Peers`].
struct Inner {
    cfg: TransportConfig,
    hello: Hello,
    inbound: Box<dyn Fn(BrokerId, Inbound)>,
    state: RefCell<State>,
    closing: Cell<bool>,
    closed: Notify,
}

struct State {
    peers: BTreeMap<BrokerId, Entry>,
    next_conn: u64,
    rng: Rng,
}

struct Entry {
    addr: SocketAddr,
    conn: Option<Rc<Conn>>,
    dialer: Option<Rc<Stop>>,
    counters: Rc<Counters>,
}

/// Ends one dialer.
#[derive(Default)]
struct Stop {
    stopped: Cell<bool>,
    notify: Notify,
}

impl Stop {
    fn stop(&self) {
        self.stopped.set(true);
        self.notify.notify();
    }

    async fn wait(&self) {
        while !self.stopped.get() {
            self.notify.changed().await;
        }
    }
}

/// One shard's replication transport (see the module doc). Dropping it closes everything.
pub struct Peers {
    inner: Rc<Inner>,
}

impl Peers {
    /// A transport with no peers yet; `inbound` takes every message peers' replicas send and
    /// every forward, in the order each connection carries them.
    pub fn new(
        cfg: TransportConfig,
        inbound: impl Fn(BrokerId, Inbound) + 'static,
    ) -> Result<Peers, ConfigError> {
        cfg.check()?;
        let rng = Rng::new(cfg.seed);
        Ok(Peers {
            inner: Rc::new(Inner {
                hello: cfg.hello(),
                cfg,
                inbound: Box::new(inbound),
                state: RefCell::new(State {
                    peers: BTreeMap::new(),
                    next_conn: 0,
                    rng,
                }),
                closing: Cell::new(false),
                closed: Notify::new(),
            }),
        })
    }

    /// Accepts peers' connections on `addr` (port 0: an ephemeral one); returns the address
    /// bound. Must run on a glommio executor.
    pub fn listen(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let domain = socket2::Domain::for_address(addr);
        let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
        sock.set_reuse_address(true)?;
        sock.bind(&addr.into())?;
        sock.listen(128)?;
        let fd = std::os::fd::OwnedFd::from(sock).into_raw_fd();
        // SAFETY: the descriptor is a bound, listening TCP socket that nothing else owns.
        let listener = unsafe { TcpListener::from_raw_fd(fd) };
        let local = listener.local_addr()?;
        info!(
            shard = self.inner.cfg.shard,
            %local, "replication listening"
        );
        glommio::spawn_local(accept_loop(self.inner.clone(), listener, fd)).detach();
        Ok(local)
    }

    /// The peer brokers and their replication addresses (this broker's own id is skipped):
    /// dialers start for new peers with a higher id, and restart for a changed address;
    /// removed peers' connections end.
    pub fn set_peers(&self, peers: BTreeMap<BrokerId, SocketAddr>) {
        let inner = &self.inner;
        if inner.closing.get() {
            return;
        }
        let me = inner.cfg.broker;
        let mut start = Vec::new();
        {
            let mut state = inner.state.borrow_mut();
            state.peers.retain(|id, e| {
                let keep = peers.contains_key(id);
                if !keep {
                    e.shut();
                }
                keep
            });
            for (&id, &addr) in peers.iter().filter(|(id, _)| **id != me) {
                let seed = state.rng.next_u64();
                let e = state.peers.entry(id).or_insert_with(|| Entry {
                    addr,
                    conn: None,
                    dialer: None,
                    counters: Rc::new(Counters::default()),
                });
                if e.addr != addr {
                    e.addr = addr;
                    if e.dialer.is_some() {
                        e.shut();
                    }
                }
                if dials(me, id) && e.dialer.is_none() {
                    let stop = Rc::new(Stop::default());
                    e.dialer = Some(stop.clone());
                    start.push((id, addr, stop, seed));
                }
            }
        }
        for (id, addr, stop, seed) in start {
            debug!(peer = id.0, %addr, "replication dialer started");
            glommio::spawn_local(dial_loop(inner.clone(), id, addr, stop, seed)).detach();
        }
    }

    /// Queues `msg` for `peer`'s replica of `topic`; never waits.
    pub fn send(&self, peer: BrokerId, topic: &str, msg: Msg) -> Result<(), SendError> {
        let conn = {
            let state = self.inner.state.borrow();
            let e = state
                .peers
                .get(&peer)
                .ok_or(SendError::UnknownPeer(peer.0))?;
            e.conn.clone().ok_or(SendError::NotConnected(peer.0))?
        };
        conn.send(topic, msg)?;
        Ok(())
    }

    /// Queues a forwarded publish, an answer or a channel operation for `peer`, ordered after
    /// every message and forward queued for it before; never waits.
    pub fn send_forward(&self, peer: BrokerId, f: Forward) -> Result<(), SendError> {
        let conn = {
            let state = self.inner.state.borrow();
            let e = state
                .peers
                .get(&peer)
                .ok_or(SendError::UnknownPeer(peer.0))?;
            e.conn.clone().ok_or(SendError::NotConnected(peer.0))?
        };
        conn.send_forward(f)?;
        Ok(())
    }

    /// The peer's figures, if it is in the set.
    pub fn stats(&self, peer: BrokerId) -> Option<PeerStats> {
        let state = self.inner.state.borrow();
        let e = state.peers.get(&peer)?;
        let c = &e.counters;
        Some(PeerStats {
            connected: e.conn.as_ref().and_then(|c| c.incarnation()),
            bytes_out: c.bytes_out.get(),
            bytes_in: c.bytes_in.get(),
            established: c.established.get(),
            refused: c.refused.get(),
            queued: e.conn.as_ref().map_or(0, |c| c.queued_bytes()),
        })
    }

    /// Ends the listener, every dialer and every connection.
    pub fn close(&self) {
        self.inner.close();
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        self.inner.close();
    }
}

impl Entry {
    /// Ends the dialer and the connection.
    fn shut(&mut self) {
        if let Some(d) = self.dialer.take() {
            d.stop();
        }
        if let Some(c) = self.conn.take() {
            c.close();
        }
    }
}

impl Inner {
    fn close(&self) {
        if self.closing.replace(true) {
            return;
        }
        self.closed.notify();
        let mut state = self.state.borrow_mut();
        for e in state.peers.values_mut() {
            e.shut();
        }
        state.peers.clear();
    }

    async fn stopped(&self) {
        while !self.closing.get() {
            self.closed.changed().await;
        }
    }

    /// A connection to `peer` not yet established, or `None` when the peer left the set.
    fn new_conn(&self, peer: BrokerId) -> Option<Rc<Conn>> {
        let mut state = self.state.borrow_mut();
        state.next_conn += 1;
        let id = state.next_conn;
        let counters = state.peers.get(&peer)?.counters.clone();
        let link = Link::new(self.hello.clone(), peer, self.cfg.link.clone());
        Some(Conn::new(id, peer, link, counters))
    }
}

impl ConnHost for Inner {
    fn established(&self, conn: &Rc<Conn>) -> bool {
        if self.closing.get() {
            return false;
        }
        let Some(incarnation) = conn.incarnation() else {
            return false;
        };
        let mut state = self.state.borrow_mut();
        let Some(e) = state.peers.get_mut(&conn.peer) else {
            return false;
        };
        if let Some(old) = &e.conn {
            if old.incarnation().is_some_and(|i| i > incarnation) {
                return false;
            }
            info!(
                peer = conn.peer.0,
                old = old.incarnation(),
                new = incarnation,
                "replication connection replaced by the peer's newer one"
            );
            old.close();
        }
        e.conn = Some(conn.clone());
        info!(
            shard = self.cfg.shard,
            peer = conn.peer.0,
            incarnation,
            "replication connection established"
        );
        true
    }

    fn deliver(&self, from: BrokerId, inbound: Inbound) {
        (self.inbound)(from, inbound);
    }

    fn ended(&self, conn: &Rc<Conn>) {
        let mut state = self.state.borrow_mut();
        if let Some(e) = state.peers.get_mut(&conn.peer) {
            if e.conn.as_ref().is_some_and(|c| c.id == conn.id) {
                e.conn = None;
            }
        }
    }
}

/// Logs a connection's end: bad input and lost connections loudly, the expected ones quietly.
fn log_end(shard: usize, peer: BrokerId, remote: Option<SocketAddr>, end: &End, was_up: bool) {
    match end {
        End::Link(e) => warn!(
            shard,
            peer = peer.0,
            ?remote,
            "replication connection closed: bad input from the peer: {e}"
        ),
        End::Closed => debug!(shard, peer = peer.0, "replication connection closed"),
        _ if was_up => warn!(shard, peer = peer.0, "replication connection lost: {end}"),
        _ => debug!(shard, peer = peer.0, "replication connection failed: {end}"),
    }
}

async fn dial_loop(inner: Rc<Inner>, peer: BrokerId, addr: SocketAddr, stop: Rc<Stop>, seed: u64) {
    let cfg = &inner.cfg;
    let mut backoff = JitteredBackoff::new(cfg.backoff_min, cfg.backoff_max, seed);
    let mut failures = 0u64;
    while !stop.stopped.get() {
        let connect = futures_lite::future::or(
            async { Some(TcpStream::connect_timeout(addr, cfg.connect_timeout).await) },
            async {
                stop.wait().await;
                None
            },
        );
        match connect.await {
            None => return,
            Some(Err(e)) => {
                failures += 1;
                // The first failure in a row is worth a line; the retries are not.
                if failures == 1 {
                    warn!(shard = cfg.shard, peer = peer.0, %addr, "replication connect failed: {e}");
                } else {
                    debug!(shard = cfg.shard, peer = peer.0, %addr, failures, "replication connect failed: {e}");
                }
            }
            Some(Ok(stream)) => {
                let Some(conn) = inner.new_conn(peer) else {
                    return;
                };
                let end = run(conn.clone(), stream, Vec::new(), cfg, &*inner).await;
                let was_up = conn.incarnation().is_some() && !matches!(end, End::NotTaken);
                log_end(cfg.shard, peer, Some(addr), &end, was_up);
                if was_up {
                    backoff.reset();
                    failures = 0;
                } else {
                    failures += 1;
                }
            }
        }
        if stop.stopped.get() {
            return;
        }
        let delay = backoff.next_delay();
        futures_lite::future::or(glommio::timer::sleep(delay), stop.wait()).await;
    }
}

/// Accepts until the transport closes; `fd` is the listener's descriptor.
async fn accept_loop(inner: Rc<Inner>, listener: TcpListener, fd: RawFd) {
    let mut limit = crate::sys::accept_limit::AcceptLimit::new(inner.cfg.shard, "replication");
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            inner.stopped().await;
            None
        })
        .await;
        match accepted {
            None => {
                // The abandoned accept still holds the socket in the ring: shutting it down
                // frees the port now, for a transport started again on the same address.
                // SAFETY: the descriptor is open while `listener`, which owns it, lives.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                return;
            }
            Some(Ok(stream)) => {
                if let Some(stream) = limit.admit(stream) {
                    glommio::spawn_local(serve_accepted(inner.clone(), stream)).detach();
                }
            }
            Some(Err(e)) => limit.on_error(&listener, e).await,
        }
    }
}

/// Reads the dialer's handshake (at most one handshake frame plus one read), judges it, and
/// runs the connection it opens.
async fn serve_accepted(inner: Rc<Inner>, mut stream: TcpStream) {
    let cfg = &inner.cfg;
    let remote = stream.peer_addr().ok();
    let deadline = Instant::now() + cfg.handshake_timeout;
    let mut received = Vec::new();
    let mut chunk = vec![0u8; cfg.read_buffer.min(4096)];
    let hello = loop {
        match read_hello(&received) {
            Ok(Some((hello, _))) => break hello,
            Ok(None) => {}
            Err(refusal) => {
                warn!(
                    shard = cfg.shard,
                    ?remote,
                    "replication connection refused: {refusal}"
                );
                return;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let read = futures_lite::future::or(
            async { with_timeout(left, stream.read(&mut chunk)).await },
            async {
                inner.stopped().await;
                None
            },
        );
        match read.await {
            Some(Ok(n)) if n > 0 => received.extend_from_slice(&chunk[..n]),
            Some(Ok(_)) => {
                debug!(
                    ?remote,
                    "replication connection closed before its handshake"
                );
                return;
            }
            Some(Err(e)) => {
                debug!(
                    ?remote,
                    "replication connection failed before its handshake: {e}"
                );
                return;
            }
            None => {
                if !inner.closing.get() {
                    warn!(
                        shard = cfg.shard,
                        ?remote,
                        "replication connection refused: no handshake within {:?}",
                        cfg.handshake_timeout
                    );
                }
                return;
            }
        }
    };
    let judged = {
        let state = inner.state.borrow();
        let entry = state.peers.get(&hello.broker);
        let current = entry
            .and_then(|e| e.conn.as_ref())
            .and_then(|c| c.incarnation());
        admit(&inner.hello, &hello, entry.is_some(), current)
            .map(|()| entry.map(|e| e.counters.clone()))
    };
    match judged {
        Err(refusal) => {
            warn!(
                shard = cfg.shard,
                ?remote,
                "replication connection refused: {refusal}"
            );
            if let Ok(state) = inner.state.try_borrow() {
                if let Some(e) = state.peers.get(&hello.broker) {
                    e.counters.refused.set(e.counters.refused.get() + 1);
                }
            }
        }
        Ok(_) => {
            let Some(conn) = inner.new_conn(hello.broker) else {
                return;
            };
            let end = run(conn.clone(), stream, received, cfg, &*inner).await;
            let was_up = conn.incarnation().is_some() && !matches!(end, End::NotTaken);
            log_end(cfg.shard, hello.broker, remote, &end, was_up);
        }
    }
}

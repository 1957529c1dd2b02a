//! Registration with the lookups (nsqlookupd's TCP protocol V1), run on the control thread: one
//! connection per lookup for the whole broker process, not one per shard.
//!
//! Shards report every topic and channel they create or delete with `Mail::Registry` (sent by
//! the topic's owner, so the changes of one topic arrive in order). The [`Registrar`] keeps the
//! full set ([`Registrations`]) and one [`Peer`] per lookup address. Each peer's task:
//!
//! ```text
//! connect ─► "  V1" ─► IDENTIFY {broadcast_address, hostname, tcp_port, http_port, version}
//!         ─► REGISTER every topic and channel of the set (in batches, each reply checked)
//!         ─► loop: (UN)REGISTER each change as it comes, PING every 15 s, notice the lookup
//!                  closing at once (an idle read races the wait)
//! error / disconnect ─► backoff 100 ms, doubling to 5 s ─► connect again, register everything
//! ```
//!
//! `PUT /config/nsqlookupd_tcp_addresses` reaches [`Registrar::set_addresses`] through
//! `Mail::LookupAddresses`: removed lookups are disconnected (they then drop our registrations),
//! new ones connected.
//!
//! A new topic's channels: the owner shard asks with `Mail::TopicChannels`;
//! [`Registrar::topic_channels`] sends `GET /channels?topic=` to every lookup whose HTTP address
//! it knows (the host of the lookup's TCP address and the `http_port` of its IDENTIFY answer),
//! all at once, each bounded by `--http-client-connect-timeout` (connecting) and
//! `--http-client-request-timeout` (the whole query), and by at most [`QUERY_TIMEOUT`] whatever
//! the flags say (a publisher waits on it); the answer is the union of the lookups that
//! answered in time. Each request is sent and its answer read by `http1::client::exchange`
//! (`Content-Length`, chunked, or up to the close), done as soon as it is whole.

use crate::config::Config;
use bytes::{BufMut, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use http1::client::{exchange, request_bytes, ACCEPT_NSQ_V1};
use http1::{Limits, ReceivedResponse};
use nsq_common::backoff::Backoff;
use nsq_common::host_of;
use nsq_common::local_sync::Notify;
use nsq_common::timeout::with_timeout;
use protocol::lookup::{decode_reply, LookupCommand, LookupReply, PeerInfo};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn, Instrument};

/// How often an idle registration connection PINGs (nsqd: 15 s).
pub const PING_EVERY: Duration = Duration::from_secs(15);
/// First reconnect delay; it doubles after each failure up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest reconnect delay: a lookup that restarts is re-registered within seconds.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Bound on connecting to a lookup.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on each write and on each reply awaited.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Most the whole `GET /channels` of one lookup may take (they run side by side), however long
/// `--http-client-request-timeout` is.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(1);
/// Commands written before their replies are read: small enough that neither side's socket
/// buffer fills while the other is not reading.
const BATCH: usize = 256;
/// Largest reply accepted from a lookup (IDENTIFY's JSON is ~150 bytes).
const MAX_REPLY: u32 = 64 * 1024;
/// Largest HTTP answer read from a lookup.
const MAX_HTTP_ANSWER: usize = 4 * 1024 * 1024;
/// Bounds on a lookup's HTTP answer: its body may take all of [`MAX_HTTP_ANSWER`].
const HTTP_ANSWER_LIMITS: Limits = Limits {
    max_header_bytes: 64 * 1024,
    max_headers: 64,
    max_body: MAX_HTTP_ANSWER,
};

/// Why a lookup session or query ended: logged, then the connection is made again after a
/// backoff (a session) or the lookup is left out of the answer (a query).
#[derive(Debug, thiserror::Error)]
enum LookupError {
    #[error("{addr} resolves to no address")]
    NoAddress { addr: String },
    #[error("cannot resolve {addr}: {source}")]
    Resolve {
        addr: String,
        source: std::io::Error,
    },
    #[error("connect {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: glommio::GlommioError<()>,
    },
    #[error("write: {0}")]
    Write(std::io::Error),
    #[error("write timed out")]
    WriteTimeout,
    #[error("read: {0}")]
    Read(std::io::Error),
    #[error("no reply in time")]
    NoReply,
    #[error("connection closed by the lookup")]
    Closed,
    #[error("{0} unexpected bytes from the lookup")]
    UnexpectedBytes(usize),
    #[error("{0}")]
    BadReply(protocol::lookup::ReplyError),
    #[error("IDENTIFY refused: {0}")]
    IdentifyRefused(String),
    /// A command of the session answered with an error.
    #[error("{command} refused: {reason}")]
    Refused { command: String, reason: String },
    #[error("{command}: unexpected answer of {bytes} bytes")]
    UnexpectedAnswer { command: String, bytes: usize },
    /// `GET /channels` got no whole answer.
    #[error("{0}")]
    Exchange(http1::client::ExchangeError),
    #[error("status {0}")]
    Status(u16),
    #[error("bad JSON: {0}")]
    BadJson(serde_json::Error),
    #[error("no channels list in the answer")]
    NoChannelsList,
}

pub use crate::mailbox::RegistryOp;

/// Every topic and channel this broker has, as the lookups should know it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Registrations {
    topics: BTreeMap<String, BTreeSet<String>>,
}

impl Registrations {
    /// Applies one change and returns the commands that tell a registered lookup about it
    /// (none when it changes nothing). Unregistering a topic unregisters its channels first,
    /// as nsqd does when it deletes a topic.
    pub fn apply(
        &mut self,
        op: RegistryOp,
        topic: &str,
        channel: Option<&str>,
    ) -> Vec<LookupCommand> {
        let reg = |channel: Option<&str>| LookupCommand::Register {
            topic: topic.to_owned(),
            channel: channel.map(str::to_owned),
        };
        let unreg = |channel: Option<&str>| LookupCommand::Unregister {
            topic: topic.to_owned(),
            channel: channel.map(str::to_owned),
        };
        match (op, channel) {
            (RegistryOp::Register, None) => {
                if self.topics.contains_key(topic) {
                    return Vec::new();
                }
                self.topics.insert(topic.to_owned(), BTreeSet::new());
                vec![reg(None)]
            }
            (RegistryOp::Register, Some(ch)) => {
                let mut out = Vec::new();
                let channels = match self.topics.get_mut(topic) {
                    Some(c) => c,
                    None => {
                        out.push(reg(None));
                        self.topics.entry(topic.to_owned()).or_default()
                    }
                };
                if channels.insert(ch.to_owned()) {
                    out.push(reg(Some(ch)));
                }
                out
            }
            (RegistryOp::Unregister, Some(ch)) => {
                let removed = self.topics.get_mut(topic).is_some_and(|c| c.remove(ch));
                if removed {
                    vec![unreg(Some(ch))]
                } else {
                    Vec::new()
                }
            }
            (RegistryOp::Unregister, None) => match self.topics.remove(topic) {
                Some(channels) => channels
                    .iter()
                    .map(|c| unreg(Some(c)))
                    .chain(std::iter::once(unreg(None)))
                    .collect(),
                None => Vec::new(),
            },
        }
    }

    /// REGISTER for every topic, then each of its channels: what a lookup that just met us
    /// must hear.
    pub fn all_commands(&self) -> Vec<LookupCommand> {
        let mut out = Vec::new();
        for (topic, channels) in &self.topics {
            out.push(LookupCommand::Register {
                topic: topic.clone(),
                channel: None,
            });
            for c in channels {
                out.push(LookupCommand::Register {
                    topic: topic.clone(),
                    channel: Some(c.clone()),
                });
            }
        }
        out
    }

    pub fn topic_count(&self) -> usize {
        self.topics.len()
    }
}

/// One lookup we register with.
pub struct Peer {
    addr: String,
    /// Changes waiting to be sent; filled only while `live`.
    queue: RefCell<Vec<LookupCommand>>,
    /// Wakes the peer's task: a change queued, or stop.
    wake: Notify,
    /// Identified and everything registered: changes are sent one by one from now on.
    live: Cell<bool>,
    stopped: Cell<bool>,
    /// `host:port` of the lookup's HTTP API, once its IDENTIFY answer told the port.
    http_addr: RefCell<Option<String>>,
}

/// The registration side of the control thread: the full set, and the lookups.
pub struct Registrar {
    identity: PeerInfo,
    set: RefCell<Registrations>,
    peers: RefCell<Vec<Rc<Peer>>>,
    /// `GET /channels` bounds: connecting, and the whole query.
    query_connect: Duration,
    query_total: Duration,
}

impl Registrar {
    pub fn new(config: &Config) -> Rc<Registrar> {
        let port_or = |p: u16, listen: u16| if p == 0 { listen } else { p };
        Rc::new(Registrar {
            identity: PeerInfo {
                broadcast_address: config.broadcast_address.clone(),
                hostname: nsq_common::hostname(),
                http_port: port_or(config.broadcast_http_port, config.http_address.port()),
                tcp_port: port_or(config.broadcast_tcp_port, config.tcp_address.port()),
                version: protocol::NSQD_COMPAT_VERSION.into(),
            },
            set: RefCell::new(Registrations::default()),
            peers: RefCell::new(Vec::new()),
            query_connect: config.auth.connect_timeout.min(QUERY_TIMEOUT),
            query_total: config.auth.request_timeout.min(QUERY_TIMEOUT),
        })
    }

    /// A shard's report of a created or deleted topic or channel.
    pub fn change(&self, op: RegistryOp, topic: &str, channel: Option<&str>) {
        let cmds = self.set.borrow_mut().apply(op, topic, channel);
        if cmds.is_empty() {
            return;
        }
        debug!(?op, topic, channel, "registration change");
        for p in self.peers.borrow().iter() {
            if p.live.get() {
                p.queue.borrow_mut().extend(cmds.iter().cloned());
                p.wake.notify();
            }
        }
    }

    /// Connects to the lookups in `addrs` not connected yet, disconnects from those not in it.
    pub fn set_addresses(self: &Rc<Self>, addrs: Vec<String>) {
        let mut wanted: Vec<String> = Vec::new();
        for a in addrs {
            let a = a.trim().to_owned();
            if !a.is_empty() && !wanted.contains(&a) {
                wanted.push(a);
            }
        }
        let mut peers = self.peers.borrow_mut();
        peers.retain(|p| {
            let keep = wanted.contains(&p.addr);
            if !keep {
                info!(lookup = %p.addr, "lookup removed; disconnecting");
                p.stopped.set(true);
                p.wake.notify();
            }
            keep
        });
        for a in wanted {
            if peers.iter().any(|p| p.addr == a) {
                continue;
            }
            info!(lookup = %a, "lookup added");
            let peer = Rc::new(Peer {
                addr: a.clone(),
                queue: RefCell::new(Vec::new()),
                wake: Notify::new(),
                live: Cell::new(false),
                stopped: Cell::new(false),
                http_addr: RefCell::new(None),
            });
            peers.push(peer.clone());
            let me = self.clone();
            let span = tracing::info_span!("lookupd", addr = %a);
            glommio::spawn_local(async move { me.run_peer(peer).await }.instrument(span)).detach();
        }
    }

    /// The channels the lookups know for `topic` (union, sorted; ephemeral and invalid names
    /// left out). Lookups that do not answer in time (see the module doc) are skipped.
    pub async fn topic_channels(&self, topic: String) -> Vec<String> {
        let mut addrs: Vec<String> = self
            .peers
            .borrow()
            .iter()
            .filter_map(|p| p.http_addr.borrow().clone())
            .collect();
        addrs.sort();
        addrs.dedup();
        let tasks: Vec<_> = addrs
            .into_iter()
            .map(|addr| {
                let topic = topic.clone();
                let (connect, total) = (self.query_connect, self.query_total);
                glommio::spawn_local(async move {
                    let got = with_timeout(total, fetch_channels(&addr, &topic, connect)).await;
                    (addr, got)
                })
            })
            .collect();
        let mut all = BTreeSet::new();
        for task in tasks {
            let (addr, got) = task.await;
            match got {
                Some(Ok(channels)) => all.extend(channels),
                Some(Err(e)) => warn!(lookup_http = %addr, topic, "GET /channels failed: {e}"),
                None => warn!(lookup_http = %addr, topic, "GET /channels timed out; skipped"),
            }
        }
        all.into_iter()
            .filter(|c| {
                protocol::names::is_valid_channel_name(c) && !protocol::names::is_ephemeral(c)
            })
            .collect()
    }

    /// One lookup's task: sessions, with backoff between them, until the lookup is removed.
    async fn run_peer(self: Rc<Self>, peer: Rc<Peer>) {
        let mut backoff = Backoff::new(BACKOFF_MIN, BACKOFF_MAX);
        // Failed attempts in a row: the first is worth a warning, the retries are not.
        let mut failures = 0u32;
        while !peer.stopped.get() {
            let result = self.session(&peer, &mut backoff).await;
            if peer.live.replace(false) {
                // It had registered: this is a new run of failures.
                failures = 0;
            }
            peer.queue.borrow_mut().clear();
            if peer.stopped.get() {
                break;
            }
            if let Err(e) = result {
                failures += 1;
                if failures == 1 {
                    warn!("lookup connection failed: {e}; reconnecting with backoff");
                } else {
                    debug!(failures, "lookup connection failed again: {e}");
                }
            }
            let delay = backoff.next_delay();
            futures_lite::future::or(peer.wake.notified(), glommio::timer::sleep(delay)).await;
        }
        info!("lookup connection closed (lookup removed)");
    }

    /// Connects, identifies, registers everything, then sends changes and PINGs until an
    /// error or stop. `Ok` only when stopped.
    async fn session(&self, peer: &Peer, backoff: &mut Backoff) -> Result<(), LookupError> {
        let addr = resolve(&peer.addr).await?;
        let mut stream = TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
            .await
            .map_err(|source| LookupError::Connect { addr, source })?;
        let mut out = BytesMut::new();
        out.put_slice(protocol::MAGIC_V1);
        LookupCommand::Identify(self.identity.clone()).encode(&mut out);
        write_all(&mut stream, &out).await?;
        let mut inbuf = BytesMut::new();
        match read_reply(&mut stream, &mut inbuf).await? {
            LookupReply::Data(body) => match PeerInfo::from_json(&body) {
                Ok(info) if info.http_port != 0 => {
                    let http = join_host_port(host_of(&peer.addr), info.http_port);
                    debug!(lookup_http = %http, version = %info.version, "identified");
                    *peer.http_addr.borrow_mut() = Some(http);
                }
                _ => warn!("IDENTIFY answer without an HTTP port; channels of new topics will not be asked here"),
            },
            LookupReply::Ok => {}
            LookupReply::Error(e) => return Err(LookupError::IdentifyRefused(e)),
        }
        if peer.stopped.get() {
            return Ok(());
        }
        // From here on changes queue up behind the full set, which is taken at this instant.
        let (all, topics) = {
            peer.queue.borrow_mut().clear();
            peer.live.set(true);
            let set = self.set.borrow();
            (set.all_commands(), set.topic_count())
        };
        let count = all.len();
        send(&mut stream, &mut inbuf, all).await?;
        info!(
            topics,
            registrations = count,
            "connected to lookup; everything registered"
        );
        backoff.reset();
        let mut last_ping = Instant::now();
        let mut scratch = vec![0u8; 512];
        loop {
            if peer.stopped.get() {
                return Ok(());
            }
            let queued = std::mem::take(&mut *peer.queue.borrow_mut());
            if !queued.is_empty() {
                send(&mut stream, &mut inbuf, queued).await?;
                continue;
            }
            let since = last_ping.elapsed();
            if since >= PING_EVERY {
                send(&mut stream, &mut inbuf, vec![LookupCommand::Ping]).await?;
                last_ping = Instant::now();
                continue;
            }
            // Idle: wait for a change, the next PING, or the lookup closing on us.
            let idle = futures_lite::future::or(
                async {
                    futures_lite::future::or(
                        peer.wake.notified(),
                        glommio::timer::sleep(PING_EVERY - since),
                    )
                    .await;
                    None
                },
                async { Some(stream.read(&mut scratch).await) },
            )
            .await;
            match idle {
                None => {}
                Some(Ok(0)) => return Err(LookupError::Closed),
                Some(Ok(n)) => {
                    return Err(LookupError::UnexpectedBytes(n));
                }
                Some(Err(e)) => return Err(LookupError::Read(e)),
            }
        }
    }
}

/// Sends `cmds` in batches and checks that each one is answered `OK`.
async fn send(
    stream: &mut TcpStream,
    inbuf: &mut BytesMut,
    cmds: Vec<LookupCommand>,
) -> Result<(), LookupError> {
    for batch in cmds.chunks(BATCH) {
        let mut out = BytesMut::new();
        for c in batch {
            c.encode(&mut out);
        }
        write_all(stream, &out).await?;
        for c in batch {
            match read_reply(stream, inbuf).await? {
                LookupReply::Ok => {}
                LookupReply::Error(reason) => {
                    return Err(LookupError::Refused {
                        command: describe(c),
                        reason,
                    })
                }
                LookupReply::Data(d) => {
                    return Err(LookupError::UnexpectedAnswer {
                        command: describe(c),
                        bytes: d.len(),
                    })
                }
            }
        }
    }
    Ok(())
}

fn describe(c: &LookupCommand) -> String {
    match c {
        LookupCommand::Identify(_) => "IDENTIFY".into(),
        LookupCommand::Register { topic, channel } => {
            format!("REGISTER {topic} {}", channel.as_deref().unwrap_or(""))
        }
        LookupCommand::Unregister { topic, channel } => {
            format!("UNREGISTER {topic} {}", channel.as_deref().unwrap_or(""))
        }
        LookupCommand::Ping => "PING".into(),
        LookupCommand::Controller(_) => "CONTROLLER".into(),
    }
}

async fn write_all(stream: &mut TcpStream, data: &[u8]) -> Result<(), LookupError> {
    match with_timeout(IO_TIMEOUT, stream.write_all(data)).await {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(LookupError::Write(e)),
        None => Err(LookupError::WriteTimeout),
    }
}

async fn read_reply(
    stream: &mut TcpStream,
    inbuf: &mut BytesMut,
) -> Result<LookupReply, LookupError> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut scratch = [0u8; 4096];
    loop {
        if let Some(r) = decode_reply(inbuf, MAX_REPLY).map_err(LookupError::BadReply)? {
            return Ok(r);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match with_timeout(left, stream.read(&mut scratch)).await {
            Some(Ok(0)) => return Err(LookupError::Closed),
            Some(Ok(n)) => inbuf.extend_from_slice(&scratch[..n]),
            Some(Err(e)) => return Err(LookupError::Read(e)),
            None => return Err(LookupError::NoReply),
        }
    }
}

/// Resolves `host:port` off the executor's thread (DNS may block).
async fn resolve(addr: &str) -> Result<SocketAddr, LookupError> {
    match resolve_host(addr).await {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(LookupError::NoAddress {
            addr: addr.to_owned(),
        }),
        Err(source) => Err(LookupError::Resolve {
            addr: addr.to_owned(),
            source,
        }),
    }
}

/// `host:port` to its first address, off the executor's thread (DNS may block); `Ok(None)`
/// when the name has no address. Shared by the registrations and the controller session.
pub(crate) async fn resolve_host(addr: &str) -> std::io::Result<Option<SocketAddr>> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(Some(a));
    }
    let owned = addr.to_owned();
    glommio::executor()
        .spawn_blocking(move || {
            use std::net::ToSocketAddrs;
            owned.to_socket_addrs().map(|mut i| i.next())
        })
        .await
}

/// `host:port`, bracketing an IPv6 host.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `GET /channels?topic=` on one lookup's HTTP API.
async fn fetch_channels(
    http_addr: &str,
    topic: &str,
    connect: Duration,
) -> Result<Vec<String>, LookupError> {
    let addr = resolve(http_addr).await?;
    let mut stream = TcpStream::connect_timeout(addr, connect)
        .await
        .map_err(|source| LookupError::Connect { addr, source })?;
    let target = format!("/channels?topic={}", http1::percent_encode(topic));
    let user_agent = format!("nsqd/{}", protocol::NSQD_COMPAT_VERSION);
    let request = request_bytes(
        "GET",
        http_addr,
        &target,
        &[("Accept", ACCEPT_NSQ_V1), ("User-Agent", &user_agent)],
        b"",
    );
    let response = exchange(&mut stream, &request, &HTTP_ANSWER_LIMITS)
        .await
        .map_err(LookupError::Exchange)?;
    channels_of(&response)
}

/// The channel names in an answer to `GET /channels`: status 200 and `{"channels":[..]}` (or
/// nsqlookupd's old `{"data":{"channels":[..]}}`).
fn channels_of(response: &ReceivedResponse) -> Result<Vec<String>, LookupError> {
    if response.status != 200 {
        return Err(LookupError::Status(response.status));
    }
    let value: serde_json::Value =
        serde_json::from_slice(&response.body).map_err(LookupError::BadJson)?;
    let channels = value
        .get("channels")
        .or_else(|| value.get("data").and_then(|d| d.get("channels")));
    match channels {
        Some(serde_json::Value::Array(list)) => Ok(list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()),
        Some(serde_json::Value::Null) => Ok(Vec::new()),
        _ => Err(LookupError::NoChannelsList),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(t: &str, c: Option<&str>) -> LookupCommand {
        LookupCommand::Register {
            topic: t.into(),
            channel: c.map(Into::into),
        }
    }

    fn unreg(t: &str, c: Option<&str>) -> LookupCommand {
        LookupCommand::Unregister {
            topic: t.into(),
            channel: c.map(Into::into),
        }
    }

    #[test]
    fn registering_twice_sends_once() {
        let mut r = Registrations::default();
        assert_eq!(
            r.apply(RegistryOp::Register, "t", None),
            vec![reg("t", None)]
        );
        assert!(r.apply(RegistryOp::Register, "t", None).is_empty());
        assert_eq!(
            r.apply(RegistryOp::Register, "t", Some("c")),
            vec![reg("t", Some("c"))]
        );
        assert!(r.apply(RegistryOp::Register, "t", Some("c")).is_empty());
    }

    #[test]
    fn a_channel_of_an_unknown_topic_registers_the_topic_too() {
        let mut r = Registrations::default();
        assert_eq!(
            r.apply(RegistryOp::Register, "t", Some("c")),
            vec![reg("t", None), reg("t", Some("c"))]
        );
        assert_eq!(r.topic_count(), 1);
    }

    #[test]
    fn unregistering_a_topic_takes_its_channels_first() {
        let mut r = Registrations::default();
        r.apply(RegistryOp::Register, "t", Some("a"));
        r.apply(RegistryOp::Register, "t", Some("b"));
        assert_eq!(
            r.apply(RegistryOp::Unregister, "t", None),
            vec![
                unreg("t", Some("a")),
                unreg("t", Some("b")),
                unreg("t", None)
            ]
        );
        assert!(r.apply(RegistryOp::Unregister, "t", None).is_empty());
        assert!(r.all_commands().is_empty());
    }

    #[test]
    fn unregistering_unknown_things_sends_nothing() {
        let mut r = Registrations::default();
        assert!(r.apply(RegistryOp::Unregister, "t", Some("c")).is_empty());
        r.apply(RegistryOp::Register, "t", None);
        assert!(r.apply(RegistryOp::Unregister, "t", Some("c")).is_empty());
        r.apply(RegistryOp::Register, "t", Some("c"));
        assert_eq!(
            r.apply(RegistryOp::Unregister, "t", Some("c")),
            vec![unreg("t", Some("c"))]
        );
        // The topic stays.
        assert_eq!(r.all_commands(), vec![reg("t", None)]);
    }

    #[test]
    fn all_commands_register_every_topic_and_channel() {
        let mut r = Registrations::default();
        r.apply(RegistryOp::Register, "b", None);
        r.apply(RegistryOp::Register, "a", Some("x"));
        r.apply(RegistryOp::Register, "a", Some("w"));
        assert_eq!(
            r.all_commands(),
            vec![
                reg("a", None),
                reg("a", Some("w")),
                reg("a", Some("x")),
                reg("b", None)
            ]
        );
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(BACKOFF_MIN, BACKOFF_MAX);
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_delay(), BACKOFF_MIN);
        // After a restart the lookup is retried at most BACKOFF_MAX apart: well within 20 s.
        assert!(BACKOFF_MAX + CONNECT_TIMEOUT < Duration::from_secs(20));
    }

    #[test]
    fn host_and_port_helpers() {
        assert_eq!(host_of("127.0.0.1:4160"), "127.0.0.1");
        assert_eq!(host_of("[::1]:4160"), "::1");
        assert_eq!(host_of("lookup"), "lookup");
        assert_eq!(join_host_port("::1", 4161), "[::1]:4161");
        assert_eq!(join_host_port("h", 4161), "h:4161");
        assert_eq!(http1::percent_encode("t#ephemeral"), "t%23ephemeral");
    }

    /// The response in `raw` if it is whole (with `closed`, `raw` is all the lookup sent).
    fn decode_answer(raw: &[u8], closed: bool) -> Result<Option<ReceivedResponse>, String> {
        http1::decode_response(raw, closed, &HTTP_ANSWER_LIMITS)
            .map(|r| r.map(|(response, _)| response))
            .map_err(|e| e.to_string())
    }

    /// The channel names in a whole answer, as received up to the lookup's close.
    fn parse_channels_answer(raw: &[u8]) -> Result<Vec<String>, String> {
        let response = decode_answer(raw, true)?.ok_or("incomplete answer")?;
        channels_of(&response).map_err(|e| e.to_string())
    }

    #[test]
    fn channels_answer_is_parsed() {
        let body = r#"{"channels":["a","b"]}"#;
        let raw = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        // whole before the lookup closes
        assert!(matches!(decode_answer(raw.as_bytes(), false), Ok(Some(_))));
        let huge = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", usize::MAX);
        assert!(decode_answer(huge.as_bytes(), false).is_err());
        assert_eq!(
            parse_channels_answer(raw.as_bytes()).unwrap(),
            vec!["a".to_string(), "b".to_string()]
        );
        let wrapped =
            "HTTP/1.0 200 OK\r\n\r\n{\"status_code\":200,\"data\":{\"channels\":[\"c\"]}}";
        assert_eq!(
            parse_channels_answer(wrapped.as_bytes()).unwrap(),
            vec!["c".to_string()]
        );
        // without a length, only whole once the lookup closes
        assert!(matches!(decode_answer(wrapped.as_bytes(), false), Ok(None)));
        let null = "HTTP/1.0 200 OK\r\n\r\n{\"channels\":null}";
        assert!(parse_channels_answer(null.as_bytes()).unwrap().is_empty());
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n{\"chann\r\nA\r\nels\":[\"d\"]\r\n1\r\n}\r\n0\r\n\r\n";
        assert_eq!(
            parse_channels_answer(chunked).unwrap(),
            vec!["d".to_string()]
        );
    }

    #[test]
    fn bad_channels_answers_are_errors_not_panics() {
        for raw in [
            &b""[..],
            b"HTTP/1.1 200 OK\r\n",
            b"garbage\r\n\r\n",
            b"HTTP/1.1 500 Internal\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\n\r\nnot json",
            b"HTTP/1.1 200 OK\r\n\r\n{\"channels\":7}",
            b"HTTP/1.1 \xff\xfe\r\n\r\n",
        ] {
            assert!(parse_channels_answer(raw).is_err(), "{raw:?}");
        }
    }
}

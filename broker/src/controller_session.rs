//! The broker's session with the replication controller (`--replication-address` only), run on
//! the control thread (docs/design/replication.md, "The broker's session"):
//!
//! ```text
//! once every shard has loaded its topics, every 500 ms: Heartbeat {id, incarnation, [address
//!               of shard 0, 1, ...], known view version, damaged: [replicated topics whose
//!               log may miss a suffix, until the view shows this incarnation registered]}
//!               ─► the lookup that last answered as controller leader
//!   Heartbeat {update}  ─► apply it to the one BrokerView; changed topics ─► their owner shards;
//!                          changed brokers ─► each shard's peers, resolved (own task)
//!   NotLeader {leader}  ─► ask the lookup whose controller id is `leader` (learnt from answers)
//!   no answer in time, an error, no controller there ─► the next lookup, at once
//!   Stale               ─► a newer incarnation of this broker serves: log, stop the process
//! a shard's request (CreateTopic, AlterIsr) ─► queued (bounded), carried at once between
//!               heartbeats the same way, each lookup at most once ─► the leader's answer, or
//!               why none answered, back to the shard
//! ```
//!
//! Its own connection per lookup (V1, `CONTROLLER` requests only), separate from the
//! registration ([`crate::lookup_reg`]): registration and control then fail and recover
//! independently, and each request here is bounded on its own (one in flight per connection,
//! [`CONNECT_TIMEOUT`], [`ANSWER_TIMEOUT`], [`MAX_ANSWER`]); a connection that fails in any way
//! is dropped and made again when that lookup is next asked.
//!
//! Invariants: one request in flight at a time (heartbeats and the shards' requests take turns
//! in one task, a heartbeat first whenever it is due); every shard's request is answered once;
//! the view only moves forward (a delta that does not follow asks for the whole view next);
//! every topic state and peer map a shard holds was sent to it in the order the view changed
//! (one outbox per shard, FIFO; one task sends the peer maps), so each shard sees the latest.

use crate::cluster::peers;
use crate::cluster::requests::{self, Queue};
use crate::cluster::steering::Steering;
use crate::cluster::Status;
use crate::config::Config;
use crate::mailbox::{Mail, Outbox, Reply, ReplyTo};
use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use nsq_common::local_sync::Notify;
use nsq_common::timeout::with_timeout;
use protocol::lookup::{decode_reply, LookupCommand, LookupReply};
use replication::controller::{
    BrokerInfo, BrokerReply, BrokerRequest, BrokerView, Change, TopicState, ViewUpdate,
};
use replication::ids::BrokerId;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// Between two heartbeats (the controller fences a session silent for 3 s).
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);
/// Bound on connecting to a lookup.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Bound on writing a request and reading its answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest answer accepted (a whole view names every broker and this broker's topics).
const MAX_ANSWER: u32 = 16 * 1024 * 1024;
/// Without a leader's answer for this long, the session says so (once) at warn level.
const SILENCE_WARNING: Duration = Duration::from_secs(3);
/// Bound on resolving one peer's address.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(1);
/// The answer to a shard's request when this broker has no session.
pub const NOT_CONFIGURED: &str = "replication is not configured (no --replication-address)";

/// What a lookup answers to `CONTROLLER`.
#[derive(Debug, serde::Deserialize)]
struct Answer {
    controller: u64,
    reply: BrokerReply,
}

/// Why one request got no usable answer (the next lookup is asked).
#[derive(Debug, thiserror::Error)]
enum AskError {
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, String),
    #[error("connect {0}: {1}")]
    Connect(SocketAddr, String),
    #[error("connect {0}: timed out")]
    ConnectTimeout(SocketAddr),
    #[error("write: {0}")]
    Write(std::io::Error),
    #[error("read: {0}")]
    Read(std::io::Error),
    #[error("no answer within {ANSWER_TIMEOUT:?}")]
    Timeout,
    #[error("connection closed by the lookup")]
    Closed,
    #[error("{0}")]
    BadReply(protocol::lookup::ReplyError),
    #[error("refused: {0}")]
    Refused(String),
    #[error("unexpected OK")]
    UnexpectedOk,
    #[error("answer is not the controller's JSON: {0}")]
    BadJson(serde_json::Error),
}

/// One open connection to a lookup.
struct Conn {
    stream: TcpStream,
    inbuf: BytesMut,
}

/// The session's state (control thread only).
pub struct Session {
    status: Arc<Status>,
    address: String,
    /// What the heartbeat registers: shard i's address, the replication port + i.
    addresses: Vec<String>,
    shards: usize,
    outboxes: Rc<Vec<Outbox>>,
    steering: RefCell<Steering>,
    conns: RefCell<HashMap<String, Conn>>,
    view: RefCell<Option<BrokerView>>,
    /// The next heartbeat asks for the whole view (none yet, or a delta did not follow).
    need_full: Cell<bool>,
    /// The controller node that last answered as leader.
    leader_id: Cell<u64>,
    /// When a leader last answered.
    last_leader_answer: Cell<Instant>,
    warned_silent: Cell<bool>,
    /// The shards' requests waiting for the session's task, and its wake-up.
    requests: RefCell<Queue<ReplyTo>>,
    wake: Notify,
    /// The view's brokers, when they changed and the peers task has not taken them yet.
    peers_pending: RefCell<Option<BTreeMap<BrokerId, BrokerInfo>>>,
    wake_peers: Notify,
    /// The peer map last sent to each shard (each starts empty, as the shard's own).
    peers_sent: RefCell<Vec<BTreeMap<u64, SocketAddr>>>,
    /// Peer addresses already warned about (no address, or not resolved), so each is said once.
    peers_warned: RefCell<BTreeSet<(u64, String)>>,
    /// The replicated topics whose log here may miss a suffix, named in every heartbeat until
    /// the view shows this incarnation registered (then emptied).
    damaged: RefCell<Vec<String>>,
}

/// Starts the session's task; the returned handle takes new lookup addresses.
pub fn start(config: &Config, status: Arc<Status>, outboxes: Rc<Vec<Outbox>>) -> Rc<Session> {
    let addresses = peers::shard_addresses(&status.address, config.shards).unwrap_or_else(|e| {
        // The configuration checked it; a single address still lets the session run.
        error!("replication: {e}; registering the replication address alone");
        vec![status.address.clone()]
    });
    let session = Rc::new(Session {
        address: status.address.clone(),
        addresses,
        status,
        shards: config.shards,
        outboxes,
        steering: RefCell::new(Steering::new(config.lookupd_tcp_addresses.clone())),
        conns: RefCell::new(HashMap::new()),
        view: RefCell::new(None),
        need_full: Cell::new(true),
        leader_id: Cell::new(0),
        last_leader_answer: Cell::new(Instant::now()),
        warned_silent: Cell::new(false),
        requests: RefCell::new(Queue::new(requests::QUEUE_LIMIT)),
        wake: Notify::new(),
        peers_pending: RefCell::new(None),
        wake_peers: Notify::new(),
        peers_sent: RefCell::new(vec![BTreeMap::new(); config.shards]),
        peers_warned: RefCell::new(BTreeSet::new()),
        damaged: RefCell::new(Vec::new()),
    });
    let task = session.clone();
    glommio::spawn_local(async move { task.run().await }).detach();
    let task = session.clone();
    glommio::spawn_local(async move { task.peers_loop().await }).detach();
    session
}

/// What a round ends with.
enum Round {
    Continue,
    /// This process is an old incarnation: stop it.
    Stale,
}

impl Session {
    /// The lookups to talk to changed (`PUT /config/nsqlookupd_tcp_addresses`).
    pub fn set_addresses(&self, addrs: Vec<String>) {
        self.conns.borrow_mut().retain(|a, _| addrs.contains(a));
        self.steering.borrow_mut().set_addrs(addrs);
    }

    /// A shard's request for the controller leader: queued and carried at once, or answered
    /// `Err` at once when the queue is full.
    pub fn request(&self, request: BrokerRequest, reply: ReplyTo) {
        let refused = self.requests.borrow_mut().push(request, reply);
        match refused {
            Ok(()) => self.wake.notify(),
            Err((request, reply)) => {
                warn!(
                    shard = reply.shard,
                    ?request,
                    "replication: too many requests waiting for the controller; refused"
                );
                answer(
                    &self.outboxes,
                    reply,
                    Err(format!(
                        "too many requests waiting for the controller (at most {})",
                        requests::QUEUE_LIMIT
                    )),
                );
            }
        }
    }

    async fn run(self: Rc<Self>) {
        info!(
            broker_id = self.status.identity.broker_id,
            incarnation = self.status.identity.incarnation,
            address = %self.address,
            addresses = ?self.addresses,
            "replication: session with the controller starting"
        );
        self.await_damage_report().await;
        let mut next_heartbeat = Instant::now();
        loop {
            let started = Instant::now();
            if started >= next_heartbeat {
                if let Round::Stale = self.round().await {
                    stop_process();
                    return;
                }
                self.note_silence();
                next_heartbeat = started + HEARTBEAT_EVERY;
                continue;
            }
            let next = self.requests.borrow_mut().pop();
            if let Some((request, reply)) = next {
                self.carry(request, reply).await;
                continue;
            }
            let wait = next_heartbeat.saturating_duration_since(Instant::now());
            futures_lite::future::or(glommio::timer::sleep(wait), self.wake.notified()).await;
        }
    }

    /// Waits until every shard has loaded its topics: the first heartbeat registers this
    /// incarnation, and must name the replicated topics whose log may miss a suffix (a
    /// controller that took this broker as whole could elect it and lose what it misses).
    async fn await_damage_report(&self) {
        let damaged = loop {
            if let Some(d) = self.status.damaged_topics(self.shards) {
                break d;
            }
            glommio::timer::sleep(Duration::from_millis(20)).await;
        };
        if !damaged.is_empty() {
            warn!(
                topics = ?damaged,
                "replication: registering with topics whose log here may miss a suffix; they \
                 leave their in-sync sets until this broker has caught up"
            );
        }
        *self.damaged.borrow_mut() = damaged;
    }

    /// Carries one shard's request to the controller leader and answers the shard.
    async fn carry(&self, request: BrokerRequest, reply: ReplyTo) {
        // A request of plain data always serialises; an empty body would be refused, not panic.
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        let asked = requests::carry(&self.steering, |addr| {
            let body = body.clone();
            async move {
                match self.ask(&addr, body).await {
                    Ok(Answer { controller, reply }) => {
                        if !matches!(reply, BrokerReply::NotLeader { .. }) {
                            self.leader_answered(controller, &addr);
                        }
                        Ok((controller, reply))
                    }
                    Err(e) => {
                        self.conns.borrow_mut().remove(&addr);
                        Err(e.to_string())
                    }
                }
            }
        })
        .await;
        let result = match asked {
            Ok((controller, answer)) => {
                debug!(
                    controller,
                    ?request,
                    ?answer,
                    "replication: the controller answered a request"
                );
                Ok(answer)
            }
            Err(e) => {
                debug!(?request, "replication: request not carried: {e}");
                Err(e)
            }
        };
        answer(&self.outboxes, reply, result);
    }

    /// One heartbeat: asks lookups in turn until the leader answers, each at most once.
    async fn round(&self) -> Round {
        let attempts = self.steering.borrow().lookups();
        for _ in 0..attempts {
            let Some(addr) = self.steering.borrow().target().map(str::to_owned) else {
                return Round::Continue;
            };
            let body = self.heartbeat();
            match self.ask(&addr, body).await {
                Ok(Answer { controller, reply }) => match reply {
                    BrokerReply::Heartbeat { update } => {
                        self.steering.borrow_mut().answered(controller);
                        self.leader_answered(controller, &addr);
                        self.apply(update);
                        return Round::Continue;
                    }
                    BrokerReply::NotLeader { leader } => {
                        debug!(lookup = %addr, controller, leader, "replication: not the controller leader");
                        self.steering.borrow_mut().not_leader(controller, leader);
                    }
                    BrokerReply::Stale { registered } => {
                        error!(
                            broker_id = self.status.identity.broker_id,
                            incarnation = self.status.identity.incarnation,
                            registered,
                            "replication: the controller has a newer incarnation of this broker \
                             (or retired its id): another process serves as this broker; stopping"
                        );
                        return Round::Stale;
                    }
                    other => {
                        warn!(lookup = %addr, ?other, "replication: unexpected answer to a heartbeat");
                        self.steering.borrow_mut().failed();
                    }
                },
                Err(e) => {
                    debug!(lookup = %addr, "replication: controller request failed: {e}");
                    self.conns.borrow_mut().remove(&addr);
                    self.steering.borrow_mut().failed();
                }
            }
        }
        Round::Continue
    }

    fn heartbeat(&self) -> Bytes {
        let known = if self.need_full.get() {
            None
        } else {
            self.view.borrow().as_ref().map(|v| v.version)
        };
        let req = BrokerRequest::Heartbeat {
            broker: BrokerId(self.status.identity.broker_id),
            incarnation: self.status.identity.incarnation,
            addresses: self.addresses.clone(),
            known,
            damaged: self.damaged.borrow().clone(),
        };
        // A request of plain data always serialises; an empty body would be refused, not panic.
        Bytes::from(serde_json::to_vec(&req).unwrap_or_default())
    }

    fn leader_answered(&self, controller: u64, addr: &str) {
        if self.leader_id.replace(controller) != controller {
            info!(controller, lookup = %addr, "replication: following the controller leader");
        }
        self.last_leader_answer.set(Instant::now());
        self.warned_silent.set(false);
    }

    fn note_silence(&self) {
        let silent = self.last_leader_answer.get().elapsed();
        if silent >= SILENCE_WARNING && !self.warned_silent.get() {
            self.warned_silent.set(true);
            warn!(
                silent_ms = silent.as_millis() as u64,
                "replication: no controller leader has answered; the controller fences this \
                 broker after its session timeout"
            );
        }
    }

    /// Applies a leader's update to the view and tells the owners of the topics that changed.
    fn apply(&self, update: ViewUpdate) {
        let me = self.status.identity.broker_id;
        let mut changed: BTreeMap<String, Option<TopicState>> = BTreeMap::new();
        // Leaders of topics this broker holds no replica of (publishes are forwarded there).
        let mut routes: BTreeMap<String, Option<u64>> = BTreeMap::new();
        let mut brokers_changed = false;
        {
            let mut view = self.view.borrow_mut();
            match update {
                ViewUpdate::Full(new) => {
                    if new.broker.0 != me {
                        warn!(
                            view_of = new.broker.0,
                            "replication: a view of another broker; ignored"
                        );
                        return;
                    }
                    let (old, old_leaders) = view
                        .take()
                        .map(|v| (v.topics, v.leaders))
                        .unwrap_or_default();
                    for (name, leader) in &new.leaders {
                        if !new.topics.contains_key(name) && old_leaders.get(name) != Some(leader) {
                            routes.insert(name.clone(), leader.map(|l| l.0));
                        }
                    }
                    for (name, state) in &new.topics {
                        if old.get(name) != Some(state) {
                            changed.insert(name.clone(), Some(state.clone()));
                        }
                    }
                    for name in old.keys() {
                        if !new.topics.contains_key(name) {
                            changed.insert(name.clone(), None);
                        }
                    }
                    self.need_full.set(false);
                    brokers_changed = true;
                    *view = Some(new);
                }
                ViewUpdate::Deltas(deltas) => {
                    let Some(v) = view.as_mut() else {
                        self.need_full.set(true);
                        return;
                    };
                    for delta in &deltas {
                        if let Err(gap) = v.apply(delta) {
                            debug!("replication: {gap}; asking for the whole view");
                            self.need_full.set(true);
                            break;
                        }
                        for change in &delta.changes {
                            match change {
                                Change::Topic { name, state } => {
                                    changed.insert(name.clone(), v.topics.get(name).cloned());
                                    let leader = (!v.topics.contains_key(name))
                                        .then_some(state.leader)
                                        .flatten()
                                        .map(|l| l.0);
                                    routes.insert(name.clone(), leader);
                                }
                                Change::Broker { .. } => brokers_changed = true,
                            }
                        }
                    }
                }
            }
            let (version, live) = match view.as_ref() {
                Some(v) => (Some(v.version), v.is_live()),
                None => (None, false),
            };
            let incarnation = self.status.identity.incarnation;
            let registered = view.as_ref().is_some_and(|v| {
                v.brokers
                    .get(&v.broker)
                    .is_some_and(|b| b.incarnation == incarnation && !b.fenced)
            });
            if registered {
                // Applied: named again, they would leave their in-sync sets at every
                // re-registration after a fence, however far this broker has caught up.
                self.damaged.borrow_mut().clear();
            }
            self.status.heard(self.leader_id.get(), version, live);
            if brokers_changed {
                if let Some(v) = view.as_ref() {
                    *self.peers_pending.borrow_mut() = Some(v.brokers.clone());
                    self.wake_peers.notify();
                }
            }
        }
        self.tell_owners(changed);
        self.tell_routes(routes);
    }

    /// Tells each topic's owner where publishes to the replicated topics this broker holds no
    /// replica of go (`None`: nowhere now, or this broker holds a replica).
    fn tell_routes(&self, routes: BTreeMap<String, Option<u64>>) {
        let mut by_owner: BTreeMap<usize, Vec<(String, Option<u64>)>> = BTreeMap::new();
        for (name, leader) in routes {
            let owner = crate::placement::owner_of(&name, self.shards);
            by_owner.entry(owner).or_default().push((name, leader));
        }
        for (owner, routes) in by_owner {
            if let Some(o) = self.outboxes.get(owner) {
                o.push(Mail::ReplicaRoutes(routes));
            }
        }
    }

    /// Sends each shard its peers whenever the view's brokers change: one task, so the maps
    /// reach each shard in the order the view changed; resolving (bounded per address) never
    /// holds up a heartbeat.
    async fn peers_loop(self: Rc<Self>) {
        loop {
            self.wake_peers.notified().await;
            let pending = self.peers_pending.borrow_mut().take();
            if let Some(brokers) = pending {
                self.update_peers(&brokers).await;
            }
        }
    }

    async fn update_peers(&self, brokers: &BTreeMap<BrokerId, BrokerInfo>) {
        let me = BrokerId(self.status.identity.broker_id);
        let (by_shard, without) = peers::by_shard(brokers, me, self.shards);
        for id in without {
            if self.peers_warned.borrow_mut().insert((id, String::new())) {
                warn!(
                    broker_id = id,
                    "replication: a peer registered no address; left out of the peers"
                );
            }
        }
        let wanted: BTreeSet<&String> = by_shard.iter().flat_map(|m| m.values()).collect();
        let mut resolved: HashMap<&str, SocketAddr> = HashMap::new();
        for addr in wanted {
            let outcome = with_timeout(RESOLVE_TIMEOUT, crate::lookup_reg::resolve_host(addr))
                .await
                .unwrap_or_else(|| Err(std::io::ErrorKind::TimedOut.into()));
            match outcome {
                Ok(Some(sock)) => {
                    resolved.insert(addr, sock);
                }
                Ok(None) => self.warn_unresolved(brokers, addr, "no address"),
                Err(e) => self.warn_unresolved(brokers, addr, &e.to_string()),
            }
        }
        // Forget warnings of brokers gone, and of addresses that resolve now.
        self.peers_warned.borrow_mut().retain(|(id, addr)| {
            brokers.contains_key(&BrokerId(*id))
                && (addr.is_empty() || !resolved.contains_key(addr.as_str()))
        });
        let mut sent = self.peers_sent.borrow_mut();
        for (shard, names) in by_shard.iter().enumerate() {
            let map: BTreeMap<u64, SocketAddr> = names
                .iter()
                .filter_map(|(id, addr)| resolved.get(addr.as_str()).map(|s| (*id, *s)))
                .collect();
            let (Some(last), Some(outbox)) = (sent.get_mut(shard), self.outboxes.get(shard)) else {
                continue;
            };
            if *last != map {
                debug!(shard, peers = ?map, "replication: the shard's peers changed");
                *last = map.clone();
                outbox.push(Mail::ReplicaPeers(map));
            }
        }
    }

    fn warn_unresolved(&self, brokers: &BTreeMap<BrokerId, BrokerInfo>, addr: &str, why: &str) {
        for (id, info) in brokers {
            if info.addresses.iter().any(|a| a == addr)
                && self
                    .peers_warned
                    .borrow_mut()
                    .insert((id.0, addr.to_owned()))
            {
                warn!(
                    broker_id = id.0,
                    address = addr,
                    "replication: cannot resolve a peer's address ({why}); left out of the \
                     peers until it resolves"
                );
            }
        }
    }

    fn tell_owners(&self, changed: BTreeMap<String, Option<TopicState>>) {
        if changed.is_empty() {
            return;
        }
        let mut by_owner: BTreeMap<usize, Vec<(String, Option<TopicState>)>> = BTreeMap::new();
        for (name, state) in changed {
            let owner = crate::placement::owner_of(&name, self.shards);
            by_owner.entry(owner).or_default().push((name, state));
        }
        for (owner, topics) in by_owner {
            if let Some(o) = self.outboxes.get(owner) {
                o.push(Mail::ReplicaTopics(topics));
            }
        }
    }

    /// One request to `addr` and its answer, on that lookup's connection (made if needed).
    async fn ask(&self, addr: &str, body: Bytes) -> Result<Answer, AskError> {
        let existing = self.conns.borrow_mut().remove(addr);
        let mut conn = match existing {
            Some(c) => c,
            None => connect(addr).await?,
        };
        let mut out = BytesMut::new();
        LookupCommand::Controller(body).encode(&mut out);
        let answer = with_timeout(ANSWER_TIMEOUT, async {
            conn.stream.write_all(&out).await.map_err(AskError::Write)?;
            read_answer(&mut conn).await
        })
        .await
        .unwrap_or(Err(AskError::Timeout))?;
        // Kept only after a whole answer: a timed-out request may still be answered later.
        self.conns.borrow_mut().insert(addr.to_owned(), conn);
        Ok(answer)
    }
}

async fn connect(addr: &str) -> Result<Conn, AskError> {
    let sock = resolve(addr).await?;
    let mut stream = TcpStream::connect_timeout(sock, CONNECT_TIMEOUT)
        .await
        .map_err(|e| match e {
            glommio::GlommioError::TimedOut(_) => AskError::ConnectTimeout(sock),
            other => AskError::Connect(sock, other.to_string()),
        })?;
    with_timeout(ANSWER_TIMEOUT, stream.write_all(protocol::MAGIC_V1))
        .await
        .unwrap_or_else(|| Err(std::io::ErrorKind::TimedOut.into()))
        .map_err(AskError::Write)?;
    Ok(Conn {
        stream,
        inbuf: BytesMut::new(),
    })
}

async fn read_answer(conn: &mut Conn) -> Result<Answer, AskError> {
    let mut scratch = [0u8; 8192];
    loop {
        if let Some(reply) =
            decode_reply(&mut conn.inbuf, MAX_ANSWER).map_err(AskError::BadReply)?
        {
            return match reply {
                LookupReply::Data(json) => serde_json::from_slice(&json).map_err(AskError::BadJson),
                LookupReply::Error(e) => Err(AskError::Refused(e)),
                LookupReply::Ok => Err(AskError::UnexpectedOk),
            };
        }
        match conn.stream.read(&mut scratch).await {
            Ok(0) => return Err(AskError::Closed),
            Ok(n) => conn.inbuf.extend_from_slice(&scratch[..n]),
            Err(e) => return Err(AskError::Read(e)),
        }
    }
}

/// `host:port` to an address (see [`crate::lookup_reg::resolve_host`]).
async fn resolve(addr: &str) -> Result<SocketAddr, AskError> {
    match crate::lookup_reg::resolve_host(addr).await {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(AskError::Resolve(addr.to_owned(), "no address".into())),
        Err(e) => Err(AskError::Resolve(addr.to_owned(), e.to_string())),
    }
}

/// Answers a shard's controller request through the control thread's outbox to it.
pub fn answer(outboxes: &[Outbox], to: ReplyTo, result: Result<BrokerReply, String>) {
    if let Some(o) = outboxes.get(to.shard) {
        o.push(Mail::Reply {
            token: to.token,
            reply: Reply::Controller(result),
        });
    }
}

/// Stops the process the clean way, as SIGTERM does (the control thread's shutdown).
fn stop_process() {
    // SAFETY: kill(2) on our own pid with a signal whose handler signal-hook installed.
    unsafe {
        libc::kill(std::process::id() as libc::pid_t, libc::SIGTERM);
    }
}

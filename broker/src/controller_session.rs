//! The broker's session with the replication controller (`--replication-address` only), run on
//! the control thread (docs/design/replication.md, "The broker's session"):
//!
//! ```text
//! every 500 ms: Heartbeat {id, incarnation, [replication address], known view version,
//!               damaged: []} ─► the lookup that last answered as controller leader
//!   Heartbeat {update}  ─► apply it to the one BrokerView; changed topics ─► their owner shards
//!   NotLeader {leader}  ─► ask the lookup whose controller id is `leader` (learnt from answers)
//!   no answer in time, an error, no controller there ─► the next lookup, at once
//!   Stale               ─► a newer incarnation of this broker serves: log, stop the process
//! ```
//!
//! Its own connection per lookup (V1, `CONTROLLER` requests only), separate from the
//! registration ([`crate::lookup_reg`]): registration and control then fail and recover
//! independently, and each request here is bounded on its own (one in flight per connection,
//! [`CONNECT_TIMEOUT`], [`ANSWER_TIMEOUT`], [`MAX_ANSWER`]); a connection that fails in any way
//! is dropped and made again when that lookup is next asked.
//!
//! Invariants: one request in flight at a time; the view only moves forward (a delta that does
//! not follow asks for the whole view next); every topic state a shard holds was sent to it in
//! the order the view changed (one outbox per shard, FIFO), so each owner sees the latest.

use crate::cluster::steering::Steering;
use crate::cluster::Status;
use crate::config::Config;
use crate::mailbox::{Mail, Outbox};
use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use nsq_common::timeout::with_timeout;
use protocol::lookup::{decode_reply, LookupCommand, LookupReply};
use replication::controller::{BrokerReply, BrokerRequest, BrokerView, TopicState, ViewUpdate};
use replication::ids::BrokerId;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
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
}

/// Starts the session's task; the returned handle takes new lookup addresses.
pub fn start(config: &Config, status: Arc<Status>, outboxes: Rc<Vec<Outbox>>) -> Rc<Session> {
    let session = Rc::new(Session {
        address: status.address.clone(),
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
    });
    let task = session.clone();
    glommio::spawn_local(async move { task.run().await }).detach();
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

    async fn run(self: Rc<Self>) {
        info!(
            broker_id = self.status.identity.broker_id,
            incarnation = self.status.identity.incarnation,
            address = %self.address,
            "replication: session with the controller starting"
        );
        loop {
            let started = Instant::now();
            if let Round::Stale = self.round().await {
                stop_process();
                return;
            }
            self.note_silence();
            glommio::timer::sleep(HEARTBEAT_EVERY.saturating_sub(started.elapsed())).await;
        }
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
            addresses: vec![self.address.clone()],
            known,
            damaged: Vec::new(),
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
                    let old = view.take().map(|v| v.topics).unwrap_or_default();
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
                            if let replication::controller::Change::Topic { name, .. } = change {
                                changed.insert(name.clone(), v.topics.get(name).cloned());
                            }
                        }
                    }
                }
            }
            let (version, live) = match view.as_ref() {
                Some(v) => (Some(v.version), v.is_live()),
                None => (None, false),
            };
            self.status.heard(self.leader_id.get(), version, live);
        }
        self.tell_owners(changed);
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

/// Stops the process the clean way, as SIGTERM does (the control thread's shutdown).
fn stop_process() {
    // SAFETY: kill(2) on our own pid with a signal whose handler signal-hook installed.
    unsafe {
        libc::kill(std::process::id() as libc::pid_t, libc::SIGTERM);
    }
}

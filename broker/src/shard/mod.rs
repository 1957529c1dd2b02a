//! One shard: a glommio executor pinned to a CPU, the topics it owns, the connections the kernel
//! gave it, its timers and its mailboxes.
//!
//! Every piece of state here is touched only by this shard's thread (`Rc`, `RefCell`, no
//! locks). Work for another shard leaves through [`Shard::route`]: mail for this shard is
//! handled on the spot, mail for a peer goes to that peer's outbox. Owner-side operations
//! ([`Shard::handle`]) are synchronous: they never wait, so handling mail cannot deadlock.
//!
//! The path of a PUB: a connection on any shard decodes it and sends `Mail::Publish` to the
//! topic's owner (`Config::owner_of`), then waits for `Mail::Reply`. The owner stamps IDs,
//! gives every channel a reference, dispatches to ready consumers and routes each delivery to
//! the consumer's shard (`Mail::Deliver`), where the connection writes the frame. FIN, REQ,
//! TOUCH and RDY travel back as `Mail::Channel`.
//!
//! Lookups: the owner reports every topic and channel it creates or deletes to the control
//! thread (`Mail::Registry`), which keeps the lookups told ([`crate::lookup_reg`]). When
//! lookups are configured, a new (non-ephemeral) topic first asks the control thread for the
//! channels the lookups know (`Mail::TopicChannels`); until the answer (at most about a
//! second) publishes to it wait in [`PendingTopic`], then its channels are created and the
//! waiting messages stored, so a channel that exists on another broker gets them too.
//!
//! The shard's jobs, one module each:
//! - this module: the [`Shard`] state, routing mail ([`Shard::route`], [`Shard::request`]) and
//!   handling it ([`Shard::handle`]), the registry of this shard's connections;
//! - [`topics`]: topic creation (lookup-gated), loading, metadata changes;
//! - [`ingest`]: storing published messages and answering them (at once, or once on disk);
//! - [`dispatch`]: SUB, the consumers' channel operations, dispatch and delivery routing,
//!   timers;
//! - [`early_ack`]: publishes answered before their owner has them, and their confirmation;
//! - [`flush_host`], [`fetch_host`]: the shard's side of the write path and the read path,
//!   whose tasks live in [`crate::storage::flusher`] and [`crate::storage::fetcher`];
//! - [`dead_letter_routing`]: messages over max attempts sent to their dead-letter topic, origin
//!   records, channel settings and redrive;
//! - [`admin_exec`], [`durable`]: the HTTP API's topic and channel actions, answered once durable;
//!   [`rewind`]: a channel rewound (or created) to a past position of its topic's log;
//!   [`stats_collect`]: the shard's part of /stats and /metrics; [`statsd_push`]: pushing
//!   them to statsd;
//! - [`lifecycle`]: start-up, the shard's tasks, shutdown;
//! - [`replicate`]: replicated topics (`--replication-address`): the transport to peer
//!   brokers, each topic's replica, publishes answered once replicated.

mod admin_exec;
mod channel_sync;
mod controller;
mod dead_letter_replicas;
mod dead_letter_routing;
mod dispatch;
mod durable;
mod early_ack;
mod fetch_host;
mod flush_host;
mod ingest;
mod lifecycle;
mod replicate;
mod rewind;
mod stats_collect;
mod statsd_push;
mod topic_replicas;
mod topics;

pub use early_ack::MAX_UNCONFIRMED;
use ingest::{Answer, DiskAck};
pub use lifecycle::{run, FrontEnds};
use topics::PendingTopic;

use crate::channel::TimerQueue;
use crate::config::Config;
use crate::mailbox::{Mail, Outbox, RegistryOp, Reply, ReplyTo};
use crate::storage::fetcher::Fetcher;
use crate::storage::flusher::Flusher;
use crate::topic::{ChannelRef, Topic};
use crate::work_set::WorkSet;
use bytes::{Bytes, BytesMut};
use nsq_common::local_sync::{oneshot, Notify, Receiver, Sender};
use replication::controller::TopicState;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info};

/// What a shard needs of a client connection it serves (a TCP connection, see `crate::conn`):
/// the owner side hands it frames and errors and closes it through this, so the shard does not
/// depend on the connection code above it.
pub trait ConnHandle {
    /// Appends delivered message frames (encoded by the channel's owner) to its output;
    /// `full`: the consumer can take no more for now, so they are written at once.
    fn deliver_frames(&self, frames: BytesMut, full: bool);
    /// Writes an error frame (and closes the connection if the error is fatal).
    fn push_error(&self, error: &protocol::ProtocolError);
    /// Closes it now (its topic or channel was deleted, or a stop ran out of time).
    fn close(&self);
    /// Asks it to finish cleanly: a consumer gets no more messages, a producer's last
    /// publishes are answered, then it closes (a clean stop).
    fn request_stop(&self);
    /// Its /stats entry as a producer (`topic`: only that topic's counts), `None` when it
    /// never published.
    fn producer_stats(&self, topic: Option<&str>) -> Option<crate::stats::ClientStats>;
}

pub struct Shard {
    pub id: usize,
    pub config: Arc<Config>,
    /// Mesh index of the control thread (signals, shutdown).
    pub(crate) control: usize,
    pub(crate) topics: RefCell<HashMap<String, Rc<RefCell<Topic>>>>,
    pub(crate) conns: RefCell<HashMap<u64, Rc<dyn ConnHandle>>>,
    pub(crate) outboxes: Vec<Outbox>,
    pub(crate) timers: TimerQueue,
    pub(crate) waiters: RefCell<HashMap<u64, Sender<Reply>>>,
    /// Dead letters sent to their topic's owner and not answered yet, by reply token.
    pub(crate) dead_sends: RefCell<HashMap<u64, dead_letter_routing::DeadSend>>,
    pub(crate) next_token: Cell<u64>,
    pub(crate) next_conn: Cell<u64>,
    pub(crate) stopping: Cell<bool>,
    pub(crate) stop_accepting: Notify,
    /// Wakes the HTTP server's acceptor watcher at shutdown.
    pub(crate) http_stop: Notify,
    /// HTTP connections handed over by other shards, for the adopter task.
    pub(crate) http_adopted: RefCell<Vec<std::os::fd::OwnedFd>>,
    pub(crate) wake_adopter: Notify,
    /// TCP connections given by shard 0 (accepted on a unix socket), for the TCP adopter task.
    pub(crate) tcp_adopted: RefCell<Vec<crate::mailbox::AdoptedConn>>,
    pub(crate) wake_tcp_adopter: Notify,
    /// The HTTP connections' answers, sent in one submission per turn ([`crate::sys::send_batch`]).
    pub(crate) sends: crate::sys::send_batch::SendBatch,
    pub(crate) exit: Notify,
    pub(crate) conns_changed: Notify,
    /// Health and runtime options for the HTTP API (see [`crate::admin_ops`]).
    pub(crate) admin: crate::admin_ops::AdminState,
    /// Admin actions waiting for the disk.
    durable: durable::DurableAnswers,
    /// The write path: topics with writes, the next checkpoint's topics, the flusher's
    /// wake-ups and its hand-over handshake ([`crate::storage::flusher`]).
    flusher: Flusher<Topic>,
    /// The read path: topics whose readers wait for segment blocks, topics with cached blocks
    /// ([`crate::storage::fetcher`]).
    fetcher: Fetcher<Topic>,
    /// Publishes whose answer waits for the disk: for the fsync (--durable), or for the write
    /// (when a topic's unwritten records passed [`WRITE_BACKLOG_LIMIT`]).
    disk_acks: RefCell<Vec<DiskAck>>,
    /// New topics waiting for the lookups' channel list, by name.
    pending_topics: RefCell<HashMap<String, PendingTopic>>,
    /// Channels whose consumers freed room (FIN, REQ, RDY...): dispatched once per batch of
    /// mail or commands rather than once per operation ([`Shard::dispatch_soon`]).
    pending_dispatch: WorkSet<ChannelRef>,
    wake_dispatcher: Notify,
    /// Early answers: which owners and topics allow them, HTTP ones awaiting confirmation.
    early: early_ack::EarlyAcks,
    /// HTTP publish requests being handled (a clean stop waits for them).
    pub(crate) http_publishing: Cell<usize>,
    /// This shard, for work it hands to a task of its own (a replay's seek by time).
    pub(crate) me: std::rc::Weak<Shard>,
    /// The controller's state of each replicated topic this shard owns, as the control
    /// thread's session last sent it (`Mail::ReplicaTopics`; empty without
    /// `--replication-address`): what the topic's replica follows.
    pub(crate) replica_topics: RefCell<std::collections::BTreeMap<String, TopicState>>,
    /// Replicated topics' transport, replicas and waiting publishes (`replicate.rs`; unused
    /// without `--replication-address`).
    repl: replicate::ShardReplication,
    /// Every other broker of the cluster and the address of its shard that this shard dials
    /// (`Mail::ReplicaPeers`; empty without `--replication-address`).
    pub(crate) replica_peers: RefCell<std::collections::BTreeMap<u64, std::net::SocketAddr>>,
}

impl Shard {
    fn new(
        id: usize,
        config: Arc<Config>,
        peers: usize,
        control: usize,
        me: std::rc::Weak<Shard>,
    ) -> Shard {
        let flusher = Flusher::new(flush_host::sync_policy(&config));
        Shard {
            id,
            config,
            control,
            topics: RefCell::new(HashMap::new()),
            conns: RefCell::new(HashMap::new()),
            outboxes: (0..peers).map(|_| Outbox::default()).collect(),
            timers: TimerQueue::default(),
            waiters: RefCell::new(HashMap::new()),
            dead_sends: RefCell::new(HashMap::new()),
            next_token: Cell::new(0),
            next_conn: Cell::new(0),
            stopping: Cell::new(false),
            stop_accepting: Notify::new(),
            http_stop: Notify::new(),
            http_adopted: RefCell::new(Vec::new()),
            wake_adopter: Notify::new(),
            tcp_adopted: RefCell::new(Vec::new()),
            wake_tcp_adopter: Notify::new(),
            sends: crate::sys::send_batch::SendBatch::new(),
            exit: Notify::new(),
            conns_changed: Notify::new(),
            admin: crate::admin_ops::AdminState::default(),
            durable: durable::DurableAnswers::default(),
            flusher,
            fetcher: Fetcher::default(),
            disk_acks: RefCell::new(Vec::new()),
            pending_topics: RefCell::new(HashMap::new()),
            pending_dispatch: WorkSet::default(),
            wake_dispatcher: Notify::new(),
            early: early_ack::EarlyAcks::new(peers),
            http_publishing: Cell::new(0),
            me,
            replica_topics: RefCell::new(std::collections::BTreeMap::new()),
            repl: replicate::ShardReplication::default(),
            replica_peers: RefCell::new(std::collections::BTreeMap::new()),
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Sends `mail` to shard `to`: handled now if that is us, else queued for its pump.
    pub fn route(&self, to: usize, mail: Mail) {
        if to == self.id {
            self.handle(mail);
        } else if let Some(outbox) = self.outboxes.get(to) {
            outbox.push(mail);
        }
    }

    /// Sends a request built by `make` to shard `to` and returns the future of its reply.
    pub fn request(&self, to: usize, make: impl FnOnce(ReplyTo) -> Mail) -> Receiver<Reply> {
        let token = self.next_token.get().wrapping_add(1);
        self.next_token.set(token);
        let (tx, rx) = oneshot();
        self.waiters.borrow_mut().insert(token, tx);
        self.route(
            to,
            make(ReplyTo {
                shard: self.id,
                token,
            }),
        );
        rx
    }

    /// Sends published messages to `topic`'s owner; the answer comes back on the receiver.
    pub fn send_publish(
        &self,
        owner: usize,
        topic: String,
        bodies: Vec<Bytes>,
        defer: Duration,
        acked: bool,
    ) -> Receiver<Reply> {
        self.request(owner, |reply| Mail::Publish {
            topic,
            bodies,
            defer,
            acked,
            reply,
            origins: Vec::new(),
        })
    }

    /// True while the outbox towards `peer` is too full to take more from a reader.
    pub fn is_congested(&self, peer: usize) -> bool {
        peer != self.id && self.outboxes.get(peer).is_some_and(Outbox::is_congested)
    }

    pub fn register_conn(&self, id: u64, conn: Rc<dyn ConnHandle>) {
        self.conns.borrow_mut().insert(id, conn);
    }

    pub fn unregister_conn(&self, id: u64) {
        self.conns.borrow_mut().remove(&id);
        self.conns_changed.notify();
        crate::sys::mem_trim::connection_closed();
    }

    /// Takes an HTTP connection another shard handed over (`Mail::HttpConn`) for the HTTP
    /// server's adopter task; while stopping, it is closed instead.
    fn adopt_http_conn(&self, fd: std::os::fd::OwnedFd) {
        if self.is_stopping() {
            return;
        }
        self.http_adopted.borrow_mut().push(fd);
        self.wake_adopter.notify();
    }

    /// Takes a TCP connection another shard gave or moved (`Mail::TcpConn`) for the TCP
    /// adopter task; while stopping, it is closed instead.
    fn adopt_tcp_conn(&self, conn: crate::mailbox::AdoptedConn) {
        if self.is_stopping() {
            return;
        }
        self.tcp_adopted.borrow_mut().push(conn);
        self.wake_tcp_adopter.notify();
    }

    pub fn next_conn_id(&self) -> u64 {
        let id = self.next_conn.get() + 1;
        self.next_conn.set(id);
        id
    }

    /// Handles one piece of mail addressed to this shard.
    pub fn handle(&self, mail: Mail) {
        match mail {
            Mail::Publish {
                topic,
                bodies,
                defer,
                acked,
                reply,
                origins,
            } => {
                let answer = self.publish_here(&topic, bodies, defer, acked, reply, origins);
                if let Answer::Now(result) = answer {
                    self.reply(reply, Reply::Publish(result));
                }
            }
            Mail::Subscribe {
                topic,
                channel,
                consumer,
                reply,
            } => {
                let result = self.subscribe_here(&topic, &channel, consumer);
                self.reply(reply, Reply::Subscribe(result));
            }
            Mail::Channel {
                topic,
                channel,
                key,
                op,
            } => self.channel_op_here(&topic, &channel, key, op),
            Mail::Deliver { conn, frames, full } => {
                let c = self.conns.borrow().get(&conn).cloned();
                // A connection that is gone has already sent Leave; its owner requeues these.
                if let Some(c) = c {
                    // The owner's buffer, unshared once it arrives: taken over, not copied.
                    let frames = frames
                        .try_into_mut()
                        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
                    c.deliver_frames(frames, full);
                }
            }
            Mail::ConnError { conn, error } => {
                let c = self.conns.borrow().get(&conn).cloned();
                if let Some(c) = c {
                    c.push_error(&error);
                }
            }
            Mail::Reply {
                token,
                reply: Reply::TopicChannels(channels),
            } => self.topic_channels_known(token, channels),
            Mail::Reply { token, reply } => {
                let waiter = self.waiters.borrow_mut().remove(&token);
                match waiter {
                    Some(w) => w.send(reply),
                    // Not a waiter's: the answer to dead letters, or to no one.
                    None => self.dead_letters_answered(token, reply),
                }
            }
            Mail::Admin { op, reply } => {
                if let Some(result) = self.handle_admin(op, reply) {
                    self.reply(reply, Reply::Admin(result));
                }
            }
            Mail::CloseConn { conn } => self.close_conn_here(conn),
            Mail::HttpConn { fd } => self.adopt_http_conn(fd),
            Mail::TcpConn { fd, moved } => self.adopt_tcp_conn((fd, moved)),
            Mail::Shutdown => self.begin_shutdown(),
            Mail::Exit => self.exit.notify(),
            Mail::ReplicaTopics(changed) => self.replica_topics_changed(changed),
            Mail::ReplicaPeers(peers) => self.replica_peers_changed(peers),
            Mail::ReplicaRoutes(routes) => self.replica_routes_changed(routes),
            Mail::ReplicaForward { from, forward } => {
                self.forward_inbound(replication::ids::BrokerId(from), forward)
            }
            Mail::ReplicaInbound { from, delivery } => {
                self.replica_inbound(replication::ids::BrokerId(from), delivery)
            }
            // For the control thread only.
            Mail::ControllerRequest { .. }
            | Mail::ShutdownDone { .. }
            | Mail::Registry { .. }
            | Mail::LookupAddresses(_)
            | Mail::TopicChannels { .. } => {}
        }
    }

    pub(crate) fn reply(&self, to: ReplyTo, reply: Reply) {
        self.route(
            to.shard,
            Mail::Reply {
                token: to.token,
                reply,
            },
        );
    }

    /// Tells the control thread (and so the lookups) that a topic or channel was created or
    /// deleted.
    pub(crate) fn report(&self, op: RegistryOp, topic: &str, channel: Option<&str>) {
        self.route(
            self.control,
            Mail::Registry {
                op,
                topic: topic.to_owned(),
                channel: channel.map(str::to_owned),
            },
        );
    }

    pub(crate) fn set_unhealthy(&self, reason: String) {
        if self.admin.health().is_none() {
            error!(shard = self.id, "storage failing: {reason}");
        }
        self.admin.set_unhealthy(reason);
    }

    fn set_healthy(&self) {
        if self.admin.health().is_some() {
            info!(shard = self.id, "storage recovered");
            self.admin.set_healthy();
        }
    }

    pub fn decode_limits(&self) -> protocol::Limits {
        self.config.limits()
    }
}

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

use crate::channel::{ConsumerKey, ConsumerSpec, Deliveries};
use crate::config::Config;
use crate::ids::now_nanos;
use crate::lookup_reg::RegistryOp;
use crate::mailbox::{Batch, ChannelOp, Mail, Outbox, Reply, ReplyTo};
use crate::startup::{with_wake_ticks, StartError, StartProgress, Step};
use crate::storage::{self, log::TopicLog};
use crate::tcp::Conn;
use crate::timer::{TimerEntry, TimerQueue};
use crate::topic::{ChannelRef, Topic};
use crate::work_set::WorkSet;
use bytes::{Bytes, BytesMut};
use glommio::channels::channel_mesh::{Full, MeshBuilder, Senders};
use glommio::net::TcpListener;
use nsq_common::local_sync::{oneshot, Notify, Receiver, Sender};
use protocol::{ErrorCode, Message, ProtocolError};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// A publish answered once the log reached `end` on disk (written, or fsynced if `synced`).
pub(crate) struct DiskAck {
    topic: Rc<RefCell<Topic>>,
    end: u64,
    synced: bool,
    reply: ReplyTo,
}

/// Unwritten bytes a topic may hold before publishes wait for the disk (backpressure for
/// publishers faster than the disk without --durable; memory stays bounded).
const WRITE_BACKLOG_LIMIT: usize = 4 << 20;

/// How often channel floors are persisted and passed segments deleted.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);
/// Cached segment blocks nobody read for about this long are dropped (see `Shard::trimmer`).
const BLOCK_IDLE: Duration = Duration::from_secs(5);
/// Without --durable nobody waits for the disk: the flusher lets writes gather up to this long,
/// so a stream of single PUBs becomes one write per 10 ms instead of one per message. Each write
/// costs the shard's CPU far more than its bytes (a direct write is a device notification, on
/// a VM an exit to the host, plus an io-wq worker's wake-up when it extends the file): at 1 ms,
/// one-at-a-time PUBs on one core spent ~9% of it there. What a kill -9 can lose is what is
/// not written yet, at most this long's worth (nsqd loses its whole in-memory queue).
const WRITE_COALESCE: Duration = Duration::from_millis(10);
/// A topic with this much unwritten cuts the coalescing short, so fast publishers get large
/// writes at once and never come near [`WRITE_BACKLOG_LIMIT`]. Not less: the later the flusher
/// plans, the more records every channel has finished, which it need not write (pub + sub here:
/// 51% of the records left out at 512 KiB, 87% at 2 MiB).
const WRITE_EARLY: usize = 2 << 20;

pub struct Shard {
    pub id: usize,
    pub config: Arc<Config>,
    /// Mesh index of the control thread (signals, shutdown).
    pub(crate) control: usize,
    pub(crate) topics: RefCell<HashMap<String, Rc<RefCell<Topic>>>>,
    pub(crate) conns: RefCell<HashMap<u64, Rc<Conn>>>,
    pub(crate) outboxes: Vec<Outbox>,
    pub(crate) timers: TimerQueue,
    pub(crate) waiters: RefCell<HashMap<u64, Sender<Reply>>>,
    pub(crate) next_token: Cell<u64>,
    pub(crate) next_conn: Cell<u64>,
    pub(crate) stopping: Cell<bool>,
    pub(crate) stop_accepting: Notify,
    /// Wakes the HTTP server's acceptor watcher at shutdown.
    pub(crate) http_stop: Notify,
    /// HTTP connections handed over by other shards, for the adopter task.
    pub(crate) http_adopted: RefCell<Vec<std::os::fd::OwnedFd>>,
    pub(crate) wake_adopter: Notify,
    /// The HTTP connections' answers, sent in one submission per turn ([`crate::sys::send_batch`]).
    pub(crate) sends: crate::sys::send_batch::SendBatch,
    pub(crate) exit: Notify,
    pub(crate) conns_changed: Notify,
    /// Health and runtime options for the HTTP API (see [`crate::admin`]).
    pub(crate) admin: crate::admin::AdminState,
    /// Topics with writes for the flusher, and its wake-up.
    pub(crate) flush_queue: WorkSet<Rc<RefCell<Topic>>>,
    pub(crate) wake_flusher: Notify,
    /// Ends the flusher's coalescing wait: a topic has [`WRITE_EARLY`] bytes unwritten.
    write_now: Notify,
    /// Topics whose readers wait for segment blocks, and the fetcher's wake-up.
    fetch_queue: WorkSet<Rc<RefCell<Topic>>>,
    wake_fetcher: Notify,
    /// Topics whose logs hold cached blocks, aged by the trimmer while it runs.
    cached_topics: WorkSet<Rc<RefCell<Topic>>>,
    /// Topics the next checkpoint looks at; untouched topics cost it nothing.
    checkpoint_list: WorkSet<Rc<RefCell<Topic>>>,
    /// True while the flusher is inside a round (it holds chunks taken from logs).
    flusher_busy: Cell<bool>,
    flusher_idle: Notify,
    /// Set by the hand-over: the flusher stops before its next round.
    flusher_stop: Cell<bool>,
    /// Publishes whose answer waits for the disk: for the fsync (--durable), or for the write
    /// (when a topic's unwritten records passed [`WRITE_BACKLOG_LIMIT`]).
    pub(crate) disk_acks: RefCell<Vec<DiskAck>>,
    /// New topics waiting for the lookups' channel list, by name.
    pub(crate) pending_topics: RefCell<HashMap<String, PendingTopic>>,
    /// Channels whose consumers freed room (FIN, REQ, RDY...): dispatched once per batch of
    /// mail or commands rather than once per operation ([`Shard::dispatch_soon`]).
    pending_dispatch: WorkSet<ChannelRef>,
    wake_dispatcher: Notify,
    /// Per peer: its last publish answer said its storage is failing (no early OKs for it).
    owner_failing: RefCell<Vec<bool>>,
    /// Topics whose publishes from this shard the owner has answered (see `can_ack_early`).
    known_topics: RefCell<std::collections::HashSet<String>>,
    /// HTTP publish requests being handled (a clean stop waits for them).
    pub(crate) http_publishing: Cell<usize>,
    /// HTTP publishes answered early and not yet confirmed (bounded by [`MAX_UNCONFIRMED`]):
    /// their answers, oldest first, for the one confirmer task (not a task per request).
    http_unconfirmed: RefCell<VecDeque<Unconfirmed>>,
    /// The answer the confirmer is waiting for right now (still unconfirmed).
    http_confirming: Cell<bool>,
    wake_confirmer: Notify,
}

/// An HTTP publish answered OK early; its owner's answer confirms it.
struct Unconfirmed {
    owner: usize,
    topic: String,
    reply: Receiver<Reply>,
}

/// How long a clean stop retries (100 ms apart) writing what is pending when writes fail (time
/// for an operator to free space) before it gives up and reports the loss. One deadline for
/// all of a shard's topics: past it each failing topic gets one more attempt, so a stop with
/// a thousand topics on a full disk still ends well within systemd's TimeoutStopSec (60 s in
/// deploy/broker.service), which would otherwise SIGKILL it.
const FINAL_WRITE_PATIENCE: Duration = Duration::from_secs(10);

/// Topics a shard remembers as answered for (see `Shard::can_ack_early`).
const MAX_KNOWN_TOPICS: usize = 100_000;

/// Early-answered HTTP publishes a shard lets travel unconfirmed before it waits for answers.
pub const MAX_UNCONFIRMED: usize = 1024;

/// A new topic whose channels were asked from the lookups: publishes wait here, in order,
/// until the answer (`Reply::TopicChannels` for `token`).
pub(crate) struct PendingTopic {
    token: u64,
    publishes: Vec<ParkedPublish>,
}

struct ParkedPublish {
    bodies: Vec<Bytes>,
    defer: Duration,
    /// Already answered OK (early): stored even if storage fails meanwhile.
    acked: bool,
    reply: ReplyTo,
}

/// The answer to a publish whose topic cannot be created (`reason`); one that was already
/// answered OK early is lost, and the log says so.
fn publish_refused(topic: &str, messages: usize, acked: bool, reason: String) -> ProtocolError {
    if acked {
        error!(topic, messages, "acknowledged messages lost: {reason}");
    }
    ProtocolError::fatal(ErrorCode::PubFailed, reason)
}

impl Shard {
    fn new(id: usize, config: Arc<Config>, peers: usize, control: usize) -> Shard {
        Shard {
            id,
            config,
            control,
            topics: RefCell::new(HashMap::new()),
            conns: RefCell::new(HashMap::new()),
            outboxes: (0..peers).map(|_| Outbox::default()).collect(),
            timers: TimerQueue::default(),
            waiters: RefCell::new(HashMap::new()),
            next_token: Cell::new(0),
            next_conn: Cell::new(0),
            stopping: Cell::new(false),
            stop_accepting: Notify::new(),
            http_stop: Notify::new(),
            http_adopted: RefCell::new(Vec::new()),
            wake_adopter: Notify::new(),
            sends: crate::sys::send_batch::SendBatch::new(),
            exit: Notify::new(),
            conns_changed: Notify::new(),
            admin: crate::admin::AdminState::default(),
            flush_queue: WorkSet::default(),
            wake_flusher: Notify::new(),
            write_now: Notify::new(),
            fetch_queue: WorkSet::default(),
            wake_fetcher: Notify::new(),
            cached_topics: WorkSet::default(),
            checkpoint_list: WorkSet::default(),
            flusher_busy: Cell::new(false),
            flusher_idle: Notify::new(),
            flusher_stop: Cell::new(false),
            disk_acks: RefCell::new(Vec::new()),
            pending_topics: RefCell::new(HashMap::new()),
            pending_dispatch: WorkSet::default(),
            wake_dispatcher: Notify::new(),
            owner_failing: RefCell::new(vec![false; peers]),
            known_topics: RefCell::new(std::collections::HashSet::new()),
            http_publishing: Cell::new(0),
            http_unconfirmed: RefCell::new(VecDeque::new()),
            http_confirming: Cell::new(false),
            wake_confirmer: Notify::new(),
        }
    }

    /// Loads the topics this shard owns from `--data-path` (blocking: before serving).
    fn load_topics(&self) -> Result<(), String> {
        let data = &self.config.data_path;
        std::fs::create_dir_all(data)
            .map_err(|e| format!("cannot create --data-path {}: {e}", data.display()))?;
        for name in storage::stored_topics(data) {
            if self.config.owner_of(&name) != self.id {
                continue;
            }
            let dir = storage::topic_dir(data, &name);
            let log = TopicLog::open(
                &name,
                dir.clone(),
                self.config.mem_queue_size,
                self.config.max_bytes_per_file,
            )
            .map_err(|e| {
                format!(
                    "topic {name}: cannot open its log in {}: {e}",
                    dir.display()
                )
            })?;
            let mut topic = Topic::new(&name, log, self.config.mem_queue_size, self.id);
            let meta = match storage::meta::read(&dir) {
                Ok(m) => m,
                Err(e) => {
                    warn!(topic = %name, "unreadable metadata ({e}); channels will be recreated by their consumers");
                    None
                }
            };
            let owed = meta
                .as_ref()
                .map(|m| topic.restore(m, Instant::now(), &self.timers))
                .unwrap_or(0);
            let head = topic.log.borrow().head();
            info!(
                topic = %name,
                shard = self.id,
                messages = head - topic.log.borrow().start(),
                channels = topic.channel_count(),
                owed,
                clean = meta.as_ref().is_some_and(|m| m.clean),
                "topic restored"
            );
            self.report(RegistryOp::Register, &name, None);
            for ch in topic.channels() {
                let ch = ch.borrow().name.clone();
                self.report(RegistryOp::Register, &name, Some(&ch));
            }
            let topic = Rc::new(RefCell::new(topic));
            self.topics.borrow_mut().insert(name, topic.clone());
        }
        Ok(())
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
        })
    }

    /// True while the outbox towards `peer` is too full to take more from a reader.
    pub fn is_congested(&self, peer: usize) -> bool {
        peer != self.id && self.outboxes.get(peer).is_some_and(Outbox::is_congested)
    }

    pub fn register_conn(&self, conn: Rc<Conn>) {
        self.conns.borrow_mut().insert(conn.id, conn);
    }

    pub fn unregister_conn(&self, id: u64) {
        self.conns.borrow_mut().remove(&id);
        self.conns_changed.notify();
        crate::sys::mem_trim::connection_closed();
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
            } => {
                if let Some(result) = self.publish_here(&topic, bodies, defer, acked, reply) {
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
            Mail::Deliver { conn, frames } => {
                let c = self.conns.borrow().get(&conn).cloned();
                // A connection that is gone has already sent Leave; its owner requeues these.
                if let Some(c) = c {
                    // The owner's buffer, unshared once it arrives: taken over, not copied.
                    let frames = frames
                        .try_into_mut()
                        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
                    c.deliver_frames(frames);
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
                if let Some(w) = waiter {
                    w.send(reply);
                }
            }
            Mail::Admin { op, reply } => {
                if let Some(result) = self.handle_admin(op, reply) {
                    self.reply(reply, Reply::Admin(result));
                }
            }
            Mail::CloseConn { conn } => self.close_conn_here(conn),
            Mail::HttpConn { fd } => crate::http::server::adopt(self, fd),
            Mail::Shutdown => self.begin_shutdown(),
            Mail::Exit => self.exit.notify(),
            // For the control thread only.
            Mail::ShutdownDone { .. }
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

    /// The topic `name`, created if missing. A topic created while lookups are configured
    /// asks them for its channels: publishes wait in `pending_topics` until the answer.
    /// Fails (the reason) when the topic's directory cannot be made; the next call tries again.
    pub(crate) fn topic_or_create(&self, name: &str) -> Result<Rc<RefCell<Topic>>, String> {
        if let Some(t) = self.topics.borrow().get(name) {
            return Ok(t.clone());
        }
        let t = self.create_topic(name)?;
        let ask = !protocol::names::is_ephemeral(name)
            && !self.lookupd_tcp_addresses().is_empty()
            && !self.pending_topics.borrow().contains_key(name);
        if ask {
            let token = self.next_token.get().wrapping_add(1);
            self.next_token.set(token);
            self.pending_topics.borrow_mut().insert(
                name.to_owned(),
                PendingTopic {
                    token,
                    publishes: Vec::new(),
                },
            );
            debug!(
                topic = name,
                "asking the lookups for the new topic's channels"
            );
            self.route(
                self.control,
                Mail::TopicChannels {
                    topic: name.to_owned(),
                    reply: ReplyTo {
                        shard: self.id,
                        token,
                    },
                },
            );
        }
        Ok(t)
    }

    /// Creates topic `name` (which must not exist) and reports it. A durable topic whose
    /// directory cannot be made (permissions, no inodes left) is not created: serving it from
    /// memory would acknowledge messages that a stop then drops without a word. The caller
    /// refuses what asked for it, and the next publish or SUB tries again, so the topic comes
    /// once the directory can be made.
    fn create_topic(&self, name: &str) -> Result<Rc<RefCell<Topic>>, String> {
        let log = if protocol::names::is_ephemeral(name) {
            TopicLog::in_memory(name, self.config.mem_queue_size)
        } else {
            let dir = storage::topic_dir(&self.config.data_path, name);
            match TopicLog::open(
                name,
                dir.clone(),
                self.config.mem_queue_size,
                self.config.max_bytes_per_file,
            ) {
                Ok(log) => log,
                Err(e) => {
                    let reason = format!("topic {name}: cannot create {}: {e}", dir.display());
                    warn!("{reason}");
                    return Err(reason);
                }
            }
        };
        let t = Rc::new(RefCell::new(Topic::new(
            name,
            log,
            self.config.mem_queue_size,
            self.id,
        )));
        self.topics.borrow_mut().insert(name.to_string(), t.clone());
        info!(topic = name, shard = self.id, "topic created");
        self.report(RegistryOp::Register, name, None);
        Ok(t)
    }

    /// The lookups' answer for a pending new topic: create its channels, then store what was
    /// published meanwhile, in order, and answer the publishers.
    fn topic_channels_known(&self, token: u64, channels: Vec<String>) {
        let name = self
            .pending_topics
            .borrow()
            .iter()
            .find(|(_, p)| p.token == token)
            .map(|(n, _)| n.clone());
        let Some(name) = name else {
            return;
        };
        let Some(pending) = self.pending_topics.borrow_mut().remove(&name) else {
            return;
        };
        let existing = self.topics.borrow().get(&name).cloned();
        let t = match existing {
            Some(t) => t,
            // Deleted meanwhile, but publishes are waiting: they create it again.
            None if !pending.publishes.is_empty() => match self.create_topic(&name) {
                Ok(t) => t,
                Err(reason) => {
                    for p in pending.publishes {
                        let e = publish_refused(&name, p.bodies.len(), p.acked, reason.clone());
                        self.reply(p.reply, Reply::Publish(Err(e)));
                    }
                    return;
                }
            },
            None => return,
        };
        let mut created_any = false;
        for ch in &channels {
            if !protocol::names::is_valid_channel_name(ch) || protocol::names::is_ephemeral(ch) {
                continue;
            }
            let (_, created) = t.borrow_mut().channel_or_create(ch);
            if created {
                created_any = true;
                info!(topic = %name, channel = %ch, shard = self.id, "channel created (known to the lookups)");
                self.report(RegistryOp::Register, &name, Some(ch));
            }
        }
        if created_any {
            self.note_meta_change(&t);
            let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
            for c in touched {
                self.dispatch(&c);
            }
        }
        debug!(topic = %name, channels = channels.len(), waiting = pending.publishes.len(), "lookups answered");
        for p in pending.publishes {
            let result = match (self.admin.health(), p.acked) {
                (Some(reason), false) => {
                    Some(Err(ProtocolError::fatal(ErrorCode::PubFailed, reason)))
                }
                (Some(reason), true) => {
                    match self.store_published(&t, p.bodies, p.defer, p.reply) {
                        Some(Ok(())) => {
                            Some(Err(ProtocolError::fatal(ErrorCode::PubFailed, reason)))
                        }
                        other => other,
                    }
                }
                (None, _) => self.store_published(&t, p.bodies, p.defer, p.reply),
            };
            if let Some(result) = result {
                self.reply(p.reply, Reply::Publish(result));
            }
        }
    }

    /// Stores published messages. When answers wait for the disk the reply waits for the write
    /// or fsync covering them (`None` here means: answered later by the flusher).
    fn publish_here(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
        defer: Duration,
        acked: bool,
        reply: ReplyTo,
    ) -> Option<Result<(), ProtocolError>> {
        let unhealthy = self.admin.health();
        if let (Some(reason), false) = (&unhealthy, acked) {
            return Some(Err(ProtocolError::fatal(
                ErrorCode::PubFailed,
                reason.clone(),
            )));
        }
        let t = match self.topic_or_create(topic) {
            Ok(t) => t,
            Err(reason) => return Some(Err(publish_refused(topic, bodies.len(), acked, reason))),
        };
        if let Some(p) = self.pending_topics.borrow_mut().get_mut(topic) {
            p.publishes.push(ParkedPublish {
                bodies,
                defer,
                acked,
                reply,
            });
            return None;
        }
        let stored = self.store_published(&t, bodies, defer, reply);
        match (stored, unhealthy) {
            // Kept (the client has its OK), but the sender must stop acknowledging early.
            (Some(Ok(())), Some(reason)) => {
                Some(Err(ProtocolError::fatal(ErrorCode::PubFailed, reason)))
            }
            (stored, _) => stored,
        }
    }

    /// Whether a publish for `owner` may be answered OK before the owner has stored it: not
    /// when answers wait for the disk (--durable, --mem-queue-size 0), not for this shard's own topics (answered at once
    /// anyway), and not while the owner's last answer said its storage is failing (so such
    /// publishes get their E_PUB_FAILED). The message then travels in this process's memory,
    /// in order behind this connection's earlier mail, as a message nsqd has put in its
    /// in-memory queue does; a clean stop waits for its confirmation.
    ///
    /// Also not for a topic this shard has not yet seen a publish answered for: the first
    /// publish creates the topic (and, with lookups, first learns its channels), and a client
    /// that reads /stats after its OK expects to see them, as with nsqd.
    pub fn can_ack_early(&self, owner: usize, topic: &str) -> bool {
        !self.config.acks_wait_for_disk()
            && !self.stopping.get()
            && owner != self.id
            && !self
                .owner_failing
                .borrow()
                .get(owner)
                .copied()
                .unwrap_or(true)
            && self.known_topics.borrow().contains(topic)
    }

    /// HTTP publishes answered OK early and not yet confirmed by their owner.
    pub fn http_unconfirmed(&self) -> usize {
        self.http_unconfirmed.borrow().len() + usize::from(self.http_confirming.get())
    }

    /// Hands the answer of an HTTP publish answered OK early to the confirmer.
    pub fn confirm_later(&self, owner: usize, topic: String, reply: Receiver<Reply>) {
        self.http_unconfirmed.borrow_mut().push_back(Unconfirmed {
            owner,
            topic,
            reply,
        });
        self.wake_confirmer.notify();
    }

    /// Takes the answers of early-answered HTTP publishes in order, learning the owners'
    /// health from them (as a TCP connection's replier does for its own).
    async fn confirm_http_publishes(self: Rc<Self>) {
        loop {
            let next = self.http_unconfirmed.borrow_mut().pop_front();
            let Some(u) = next else {
                self.wake_confirmer.notified().await;
                continue;
            };
            self.http_confirming.set(true);
            let answer = u.reply.await;
            self.http_confirming.set(false);
            self.note_publish_answer(u.owner, &answer, true, &u.topic);
        }
    }

    /// Learns the owner's health from a publish answer; `acked`: the client already has its OK.
    pub fn note_publish_answer(
        &self,
        owner: usize,
        answer: &Option<Reply>,
        acked: bool,
        topic: &str,
    ) {
        let failing = match answer {
            Some(Reply::Publish(Ok(()))) => {
                if !acked && !self.known_topics.borrow().contains(topic) {
                    let mut known = self.known_topics.borrow_mut();
                    // Bounded: forgetting only costs each topic one waited-for publish.
                    if known.len() >= MAX_KNOWN_TOPICS {
                        known.clear();
                    }
                    known.insert(topic.to_string());
                }
                false
            }
            Some(Reply::Publish(Err(e))) if e.code == ErrorCode::PubFailed => true,
            _ => {
                if acked {
                    error!(
                        shard = self.id,
                        owner,
                        topic,
                        "a publish answered OK early was not confirmed by its owner (stopping?)"
                    );
                }
                return;
            }
        };
        if let Some(f) = self.owner_failing.borrow_mut().get_mut(owner) {
            *f = failing;
        }
    }

    /// Stamps and stores published messages in `t`; `None` when the answer waits for an fsync.
    fn store_published(
        &self,
        t: &Rc<RefCell<Topic>>,
        bodies: Vec<Bytes>,
        defer: Duration,
        reply: ReplyTo,
    ) -> Option<Result<(), ProtocolError>> {
        let timestamp = now_nanos();
        let msgs: Vec<Message> = {
            let ids = &mut t.borrow_mut().ids;
            bodies
                .into_iter()
                .map(|body| Message {
                    id: ids.next_id(),
                    timestamp,
                    attempts: 0,
                    body,
                })
                .collect()
        };
        let defer_until = if defer.is_zero() {
            0
        } else {
            timestamp + defer.as_nanos() as i64
        };
        let (end, touched) = t.borrow_mut().publish(msgs, defer_until);
        let persistent = t.borrow().log.borrow().is_persistent();
        if persistent {
            self.queue_flush(t);
        }
        for ch in touched {
            self.dispatch(&ch);
        }
        if persistent {
            let unwritten = t.borrow().log.borrow().unwritten_bytes();
            if unwritten >= WRITE_EARLY {
                self.write_now.notify();
            }
            if self.config.acks_wait_for_disk() || unwritten > WRITE_BACKLOG_LIMIT {
                self.disk_acks.borrow_mut().push(DiskAck {
                    topic: t.clone(),
                    end,
                    synced: self.config.durable,
                    reply,
                });
                return None;
            }
        }
        Some(Ok(()))
    }

    /// Records a structural change of `t` (channels, pause) for a prompt checkpoint.
    pub(crate) fn note_meta_change(&self, t: &Rc<RefCell<Topic>>) {
        if !t.borrow().log.borrow().is_persistent() {
            return;
        }
        {
            let mut tb = t.borrow_mut();
            tb.meta_dirty = true;
            tb.meta_gen += 1;
        }
        self.queue_flush(t);
    }

    /// Lists `t` for the next checkpoint (its channels' floors or structure may have moved).
    fn queue_checkpoint(&self, t: &Rc<RefCell<Topic>>) {
        let added = self
            .checkpoint_list
            .add(t, &mut t.borrow_mut().checkpoint_queued);
        if added == Some(true) {
            // A flusher asleep with nothing to write must still checkpoint within
            // CHECKPOINT_EVERY: FINs alone move floors, and passed segments must go.
            self.wake_flusher.notify();
        }
    }

    /// Encodes what `t` appended since its last write for the flusher, leaving out what every
    /// channel has finished meanwhile (see `TopicLog::plan`), and counts both for /metrics.
    fn plan_writes(&self, t: &Rc<RefCell<Topic>>) {
        let t = t.borrow();
        // Only a floor above what is planned already can leave anything out.
        let floor = t.floor_above(t.log.borrow().planned_end());
        let planned = t.log.borrow_mut().plan(floor);
        let c = &self.admin.records;
        c.written.set(c.written.get() + planned.encoded);
        c.skipped.set(c.skipped.get() + planned.skipped);
    }

    fn queue_flush(&self, t: &Rc<RefCell<Topic>>) {
        self.queue_checkpoint(t);
        self.flush_queue.add(t, &mut t.borrow_mut().flush_queued);
        self.wake_flusher.notify();
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

    fn subscribe_here(
        &self,
        topic: &str,
        channel: &str,
        consumer: ConsumerSpec,
    ) -> Result<(), ProtocolError> {
        let t = self.topic_or_create(topic).map_err(|reason| {
            ProtocolError::fatal(ErrorCode::SubFailed, format!("SUB failed {reason}"))
        })?;
        let (ch, created) = t.borrow_mut().channel_or_create(channel);
        if created {
            self.note_meta_change(&t);
            info!(topic, channel, shard = self.id, "channel created");
            self.report(RegistryOp::Register, topic, Some(channel));
        }
        let added = ch
            .borrow_mut()
            .add_consumer(consumer, self.config.max_channel_consumers);
        if let Err(e) = added {
            return Err(ProtocolError::fatal(
                ErrorCode::SubFailed,
                format!("SUB failed {e}"),
            ));
        }
        if created {
            let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
            for c in touched {
                self.dispatch(&c);
            }
        }
        Ok(())
    }

    fn channel_op_here(&self, topic: &str, channel: &str, key: ConsumerKey, op: ChannelOp) {
        let t = self.topics.borrow().get(topic).cloned();
        if let Some(t) = &t {
            if !matches!(op, ChannelOp::Written(_)) {
                self.queue_checkpoint(t);
            }
        }
        let ch = t.as_ref().and_then(|t| t.borrow().channel(channel));
        let Some(ch) = ch else {
            // The channel was deleted under the consumer; only FIN/REQ/TOUCH deserve an answer.
            if let Some((code, verb, ids)) = op_ids(&op) {
                for id in ids {
                    let text = format!("{verb} {id} failed ID not in flight");
                    self.send_conn_error(key, code, text);
                }
            }
            return;
        };
        let mut failures = Vec::new();
        let max = self.config.max_msg_timeout;
        {
            let mut c = ch.borrow_mut();
            match &op {
                ChannelOp::Rdy(n) => c.set_rdy(key, *n),
                ChannelOp::Fin(ids) => {
                    for id in ids {
                        if let Err(e) = c.finish(key, *id) {
                            failures.push((*id, e));
                        }
                    }
                }
                ChannelOp::Req(id, delay) => {
                    if let Err(e) = c.requeue(key, *id, *delay, Instant::now(), &self.timers) {
                        failures.push((*id, e));
                    }
                }
                ChannelOp::Touch(id) => {
                    if let Err(e) = c.touch(key, *id, max, Instant::now(), &self.timers) {
                        failures.push((*id, e));
                    }
                }
                ChannelOp::Close => c.close_consumer(key),
                ChannelOp::Leave => c.remove_consumer(key),
                ChannelOp::Written(bytes) => c.written(key, *bytes),
            }
        }
        if let Some((code, verb, _)) = op_ids(&op) {
            for (id, e) in failures {
                self.send_conn_error(key, code, format!("{verb} {id} failed {}", e.text()));
            }
        }
        if matches!(op, ChannelOp::Leave) {
            if let Some(t) = &t {
                self.drop_if_ephemeral_and_unused(t, &ch);
            }
        }
        self.dispatch_soon(&ch);
    }

    /// Lists `ch` for dispatch at the end of the current batch: a burst of FINs from one read
    /// or one mailbox batch then frees room many times but dispatches (and sends one delivery
    /// batch per consumer) once. The inbox loop and connection readers call
    /// [`Shard::flush_dispatches`] when they finish a batch; the dispatcher task covers every
    /// other path as soon as the current task yields.
    pub(crate) fn dispatch_soon(&self, ch: &ChannelRef) {
        let added = self
            .pending_dispatch
            .add(ch, &mut ch.borrow_mut().dispatch_queued);
        if added == Some(true) {
            self.wake_dispatcher.notify();
        }
    }

    /// Dispatches every channel [`Shard::dispatch_soon`] listed.
    pub(crate) fn flush_dispatches(&self) {
        loop {
            let list = self.pending_dispatch.take();
            if list.is_empty() {
                return;
            }
            for ch in list {
                ch.borrow_mut().dispatch_queued = false;
                self.dispatch(&ch);
            }
        }
    }

    fn send_conn_error(&self, key: ConsumerKey, code: ErrorCode, text: String) {
        self.route(
            key.shard,
            Mail::ConnError {
                conn: key.conn,
                error: ProtocolError::non_fatal(code, text),
            },
        );
    }

    /// `#ephemeral` channels go with their last consumer, `#ephemeral` topics with their last
    /// channel.
    fn drop_if_ephemeral_and_unused(&self, t: &Rc<RefCell<Topic>>, ch: &ChannelRef) {
        let (ephemeral, empty, name) = {
            let c = ch.borrow();
            (c.ephemeral, c.consumer_count() == 0, c.name.clone())
        };
        if !(ephemeral && empty) {
            return;
        }
        let topic_gone = {
            let mut tb = t.borrow_mut();
            tb.remove_channel(&name);
            info!(topic = %tb.name, channel = %name, "ephemeral channel removed");
            tb.ephemeral && tb.channel_count() == 0
        };
        let topic_name = t.borrow().name.clone();
        self.report(RegistryOp::Unregister, &topic_name, Some(&name));
        if topic_gone {
            self.topics.borrow_mut().remove(&*topic_name);
            info!(topic = %topic_name, "ephemeral topic removed");
            self.report(RegistryOp::Unregister, &topic_name, None);
        }
    }

    /// Lets a channel deliver what it can, and routes the deliveries.
    pub(crate) fn dispatch(&self, ch: &ChannelRef) {
        if self.stopping.get() {
            return;
        }
        let topic_name = ch.borrow().topic.clone();
        let Some(t) = self.topics.borrow().get(&*topic_name).cloned() else {
            return;
        };
        let log = t.borrow().log.clone();
        let mut out = Deliveries::default();
        ch.borrow_mut().dispatch(
            &log.borrow(),
            Instant::now(),
            self.config.max_msg_timeout,
            &self.timers,
            &mut out,
        );
        self.route_deliveries(out);
        if log.borrow().has_wanted_blocks() {
            self.queue_fetch(&t);
        }
    }

    /// Bytes of segment blocks the shard's logs hold (for /metrics).
    pub(crate) fn read_cache_bytes(&self) -> u64 {
        self.cached_topics.with_items(|topics| {
            topics
                .iter()
                .map(|t| t.borrow().log.borrow().cached_bytes())
                .sum()
        })
    }

    /// Lists a topic whose log now holds cached blocks, and starts the trimmer if it sleeps.
    fn list_cached(self: &Rc<Self>, t: &Rc<RefCell<Topic>>) {
        // The trimmer runs exactly while the list is not empty (only it removes entries).
        let added = self.cached_topics.add(t, &mut t.borrow_mut().blocks_listed);
        if added == Some(true) {
            glommio::spawn_local(self.clone().trimmer()).detach();
        }
    }

    /// Every few seconds, drops the cached blocks nobody read meanwhile; ends when no log has
    /// any (so an idle broker has no timer ticking).
    async fn trimmer(self: Rc<Self>) {
        loop {
            glommio::timer::sleep(BLOCK_IDLE).await;
            self.cached_topics.retain(|t| {
                let left = t.borrow().log.borrow().age_blocks();
                if !left {
                    t.borrow_mut().blocks_listed = false;
                }
                left
            });
            if self.cached_topics.is_empty() {
                return;
            }
        }
    }

    fn queue_fetch(&self, t: &Rc<RefCell<Topic>>) {
        if self
            .fetch_queue
            .add(t, &mut t.borrow_mut().fetch_queued)
            .is_some()
        {
            self.wake_fetcher.notify();
        }
    }

    /// Reads the segment blocks channels wait for (see `storage::blocks`), then lets the
    /// topics' channels deliver again. Sleeps while nobody waits.
    async fn fetcher(self: Rc<Self>) {
        loop {
            let queued = self.fetch_queue.take();
            if queued.is_empty() {
                self.wake_fetcher.notified().await;
                continue;
            }
            for t in &queued {
                t.borrow_mut().fetch_queued = false;
                let log = t.borrow().log.clone();
                let (arrived, failed) = storage::log::fetch(&log).await;
                if arrived > 0 {
                    self.list_cached(t);
                }
                let channels: Vec<ChannelRef> = t.borrow().channels().cloned().collect();
                if failed > 0 {
                    // A read failed: this topic's readers try again in a while (after a few
                    // failures they skip the block), without holding up other topics.
                    let shard = self.clone();
                    glommio::spawn_local(async move {
                        glommio::timer::sleep(storage::blocks::RETRY_AFTER).await;
                        for ch in &channels {
                            shard.dispatch_soon(ch);
                        }
                        shard.flush_dispatches();
                    })
                    .detach();
                    continue;
                }
                for ch in &channels {
                    self.dispatch_soon(ch);
                }
            }
            self.flush_dispatches();
        }
    }

    /// Hands each consumer's frames to its connection: here, or through the mailbox of the
    /// connection's shard.
    fn route_deliveries(&self, out: Deliveries) {
        for (key, frames) in out.batches {
            if key.shard == self.id {
                let c = self.conns.borrow().get(&key.conn).cloned();
                // A connection that is gone has already sent Leave; that requeues these.
                if let Some(c) = c {
                    c.deliver_frames(frames);
                }
                continue;
            }
            self.route(
                key.shard,
                Mail::Deliver {
                    conn: key.conn,
                    frames: frames.freeze(),
                },
            );
        }
    }

    fn on_timers(&self, due: Vec<TimerEntry>) {
        let mut changed: Vec<ChannelRef> = Vec::new();
        let now = Instant::now();
        for e in due {
            let Some(ch) = e.channel.upgrade() else {
                continue;
            };
            if ch.borrow_mut().on_timer(e.kind, e.at, now, &self.timers)
                && !changed.iter().any(|c| Rc::ptr_eq(c, &ch))
            {
                changed.push(ch);
            }
        }
        for ch in changed {
            self.dispatch(&ch);
        }
    }

    fn begin_shutdown(&self) {
        if self.stopping.replace(true) {
            return;
        }
        info!(
            shard = self.id,
            "shutting down: no new connections, no new deliveries"
        );
        self.stop_accepting.notify();
        self.http_stop.notify();
        let conns: Vec<Rc<Conn>> = self.conns.borrow().values().cloned().collect();
        for c in conns {
            c.request_stop();
        }
        self.conns_changed.notify();
    }

    /// Waits (bounded) until every connection of this shard has finished, then tells control.
    pub(crate) async fn report_when_quiet(self: Rc<Self>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.conns.borrow().is_empty() && Instant::now() < deadline {
            futures_lite::future::or(
                self.conns_changed.notified(),
                glommio::timer::sleep(Duration::from_millis(100)),
            )
            .await;
        }
        // HTTP publishes in progress, and those answered early: their owners must have them
        // before this shard says done.
        let http_deadline = Instant::now() + Duration::from_secs(5);
        while (self.http_unconfirmed() > 0 || self.http_publishing.get() > 0)
            && Instant::now() < http_deadline
        {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        if self.http_unconfirmed() > 0 {
            error!(
                shard = self.id,
                unconfirmed = self.http_unconfirmed(),
                "HTTP publishes answered OK were not confirmed by their owners at shutdown"
            );
        }
        let left = self.conns.borrow().len();
        if left > 0 {
            warn!(
                shard = self.id,
                left, "connections still open at shutdown; closing them"
            );
            let conns: Vec<Rc<Conn>> = self.conns.borrow().values().cloned().collect();
            for c in conns {
                c.close();
            }
        }
        self.route(self.control, Mail::ShutdownDone { shard: self.id });
    }

    /// The hand-over to storage at a clean stop: every topic's pending writes are written and
    /// fsynced, and its metadata records each channel's cursor and every message it still owed
    /// (in flight ones as requeued, deferred ones with the delay left).
    ///
    /// A write that fails (disk full, say) is retried for a while; returns how many bytes were
    /// still unwritten after that (lost: the process then exits with an error).
    async fn hand_over_to_storage(&self) -> usize {
        // The flusher may be writing chunks it took from a log: let that round finish first.
        self.flusher_stop.set(true);
        self.wake_flusher.notify();
        self.write_now.notify();
        while self.flusher_busy.get() {
            self.flusher_idle.notified().await;
        }
        let topics: Vec<Rc<RefCell<Topic>>> = self.topics.borrow().values().cloned().collect();
        let mut owed = 0usize;
        let mut lost = 0usize;
        let mut failed_meta = Vec::new();
        let give_up_at = Instant::now() + FINAL_WRITE_PATIENCE;
        for t in topics {
            let log = t.borrow().log.clone();
            if !log.borrow().is_persistent() {
                continue;
            }
            self.plan_writes(&t);
            let mut tries = 0;
            while let Err(e) = storage::log::flush(&log).await {
                tries += 1;
                let now = Instant::now();
                if now >= give_up_at {
                    let left = log.borrow().unwritten_bytes();
                    error!(topic = %t.borrow().name, unwritten_bytes = left, "final write failed, giving up: {e}");
                    lost += left;
                    break;
                }
                if tries == 1 {
                    let left = give_up_at.saturating_duration_since(now);
                    error!(topic = %t.borrow().name, "final write failed, retrying for {left:.1?}: {e}");
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
            if let Err(e) = storage::log::trim_padding(&log).await {
                warn!(topic = %t.borrow().name, "cannot trim the newest segment's padding: {e}");
            }
            if let Err(e) = storage::log::sync(&log).await {
                error!(topic = %t.borrow().name, "final fsync failed: {e}");
            }
            let (meta, gen) = {
                let tb = t.borrow();
                (tb.to_meta(true, Instant::now()), tb.meta_gen)
            };
            owed += meta.channels.iter().map(|c| c.pending.len()).sum::<usize>();
            let dir = log.borrow().dir().map(|d| d.to_path_buf());
            if let Some(dir) = dir {
                let written = storage::meta::open_dir(&dir)
                    .and_then(|handle| storage::meta::write(&handle, &meta));
                match written {
                    Ok(()) => t.borrow_mut().meta_saved_gen = gen,
                    Err(e) => {
                        error!(topic = %t.borrow().name, "cannot write metadata: {e}");
                        failed_meta.push((t.clone(), e.to_string()));
                    }
                }
            }
        }
        // Deletions that came in after the flusher's last round.
        self.answer_meta_waiters(&failed_meta);
        self.sync_data_path_for_deletions().await;
        info!(shard = self.id, owed, "storage hand-over done");
        lost
    }

    /// Writes, fsyncs by the sync policy (or always, durable), answers durable publishes,
    /// checkpoints metadata and deletes passed segments. Sleeps when there is nothing to do.
    async fn flusher(self: Rc<Self>) {
        let mut last_checkpoint = Instant::now();
        loop {
            let unsynced_wait = self.next_wake(last_checkpoint);
            match unsynced_wait {
                None => self.wake_flusher.notified().await,
                Some(d) if !d.is_zero() => {
                    futures_lite::future::or(
                        self.wake_flusher.notified(),
                        glommio::timer::sleep(d),
                    )
                    .await;
                }
                Some(_) => {}
            }
            if self.flusher_stop.get() {
                return;
            }
            // Busy from here, the coalescing wait included: a hand-over that starts meanwhile
            // must wait for this round, or both would write the same logs, and its padding
            // trim could cut a write of this round still in flight (acknowledged messages
            // lost at a clean stop).
            self.flusher_busy.set(true);
            // Publishers waiting for the disk get no coalescing delay: the writes of everything
            // published while the previous round ran are one round (group commit).
            if !self.config.acks_wait_for_disk() && !self.flush_queue.is_empty() {
                futures_lite::future::or(
                    self.write_now.notified(),
                    glommio::timer::sleep(WRITE_COALESCE),
                )
                .await;
                if self.flusher_stop.get() {
                    // The hand-over writes everything itself.
                    self.flusher_busy.set(false);
                    self.flusher_idle.notify();
                    return;
                }
            }
            // This round writes everything appended so far.
            self.write_now.reset();
            let queued: Vec<Rc<RefCell<Topic>>> = self.flush_queue.take();
            let mut failed = false;
            for t in &queued {
                t.borrow_mut().flush_queued = false;
                let log = t.borrow().log.clone();
                // Records every channel has finished since they were published are not
                // written at all (see `TopicLog::plan`).
                self.plan_writes(t);
                if let Err(e) = storage::log::flush(&log).await {
                    failed = true;
                    self.set_unhealthy(format!("write failed: {e}"));
                    self.queue_flush(t);
                }
            }
            // fsync: always in durable mode, else every --sync-every messages or --sync-timeout.
            let topics: Vec<Rc<RefCell<Topic>>> = self.topics.borrow().values().cloned().collect();
            for t in &topics {
                let log = t.borrow().log.clone();
                let due = {
                    let l = log.borrow();
                    l.unsynced > 0
                        && (self.config.durable
                            || l.head() - l.synced_end >= self.config.sync_every
                            || l.last_sync.elapsed() >= self.config.sync_timeout)
                };
                if due {
                    if let Err(e) = storage::log::sync(&log).await {
                        failed = true;
                        self.set_unhealthy(format!("fsync failed: {e}"));
                    }
                }
            }
            self.answer_disk_acks();
            if !failed {
                self.set_healthy();
            }
            let structural = queued.iter().any(|t| t.borrow().meta_dirty) || self.waits_for_meta();
            if structural || last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
                last_checkpoint = Instant::now();
                self.checkpoint().await;
            }
            self.sync_data_path_for_deletions().await;
            self.flusher_busy.set(false);
            self.flusher_idle.notify();
            if failed {
                glommio::timer::sleep(Duration::from_secs(1)).await;
            }
            glommio::yield_if_needed().await;
        }
    }

    /// How long the flusher may sleep before a sync or a checkpoint is due; `None` when
    /// nothing is unsynced and no topic waits for a checkpoint.
    fn next_wake(&self, last_checkpoint: Instant) -> Option<Duration> {
        let sync = self.next_sync_wait();
        if self.checkpoint_list.is_empty() {
            return sync;
        }
        let checkpoint = CHECKPOINT_EVERY.saturating_sub(last_checkpoint.elapsed());
        Some(sync.map_or(checkpoint, |d| d.min(checkpoint)))
    }

    /// How long the flusher may sleep before a sync is due; `None` when nothing is unsynced.
    fn next_sync_wait(&self) -> Option<Duration> {
        if !self.flush_queue.is_empty() {
            return Some(Duration::ZERO);
        }
        let topics = self.topics.borrow();
        topics
            .values()
            .filter_map(|t| {
                let t = t.borrow();
                let l = t.log.borrow();
                (l.unsynced > 0).then(|| {
                    self.config
                        .sync_timeout
                        .saturating_sub(l.last_sync.elapsed())
                })
            })
            .min()
            .map(|d| d.min(CHECKPOINT_EVERY))
    }

    /// Answers the publishes whose records the disk now holds (written, or fsynced for
    /// `--durable`). A publish whose records are stored but not yet on disk is never answered
    /// with an error, even while writes fail: its records stay in the log and are written when
    /// the disk takes them again (the flusher retries every second), so an error would make
    /// the client's retry a duplicate. It waits for that write instead, and only publishes
    /// that arrive while storage is failing are refused (before anything is stored). A
    /// publish to a topic deleted meanwhile is answered OK: it was taken, and the delete
    /// dropped it with the rest of the topic.
    fn answer_disk_acks(&self) {
        let waiting = std::mem::take(&mut *self.disk_acks.borrow_mut());
        let mut still = Vec::new();
        for ack in waiting {
            let done = {
                let t = ack.topic.borrow();
                let log = t.log.borrow();
                log.is_destroyed()
                    || if ack.synced {
                        log.synced_end >= ack.end
                    } else {
                        log.written_end() >= ack.end
                    }
            };
            if done {
                self.reply(ack.reply, Reply::Publish(Ok(())));
            } else {
                still.push(ack);
            }
        }
        self.disk_acks.borrow_mut().extend(still);
    }

    /// Persists each changed topic's metadata (channels, pauses, floors: so a crash redelivers
    /// little) and deletes the segments every channel has passed. Unchanged topics cost a
    /// comparison; metadata is written off the shard's thread, into the directory opened here
    /// (see `storage::meta`), never for a deleted topic. Then answers the actions that waited
    /// for it.
    async fn checkpoint(&self) {
        let topics: Vec<Rc<RefCell<Topic>>> = self.checkpoint_list.take();
        let mut failed = Vec::new();
        for t in topics {
            t.borrow_mut().checkpoint_queued = false;
            let (dir, meta, floor, gen) = {
                let tb = t.borrow();
                let log = tb.log.borrow();
                if log.is_destroyed() {
                    // Deleted: writing its metadata would bring it back at the next start.
                    continue;
                }
                let Some(dir) = log.dir().map(|d| d.to_path_buf()) else {
                    continue;
                };
                (
                    dir,
                    tb.to_meta(false, Instant::now()),
                    tb.floor(),
                    tb.meta_gen,
                )
            };
            let unchanged = t.borrow().last_meta.as_ref() == Some(&meta);
            if !unchanged {
                let written = meta.clone();
                let write = match storage::meta::open_dir(&dir) {
                    Ok(handle) => {
                        glommio::executor()
                            .spawn_blocking(move || storage::meta::write(&handle, &written))
                            .await
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = write {
                    warn!(topic = %t.borrow().name, "checkpoint failed: {e}");
                    failed.push((t.clone(), e.to_string()));
                    // Tried again at the next checkpoint.
                    self.queue_checkpoint(&t);
                    continue;
                }
                let mut tb = t.borrow_mut();
                tb.last_meta = Some(meta);
                // A change made while the write ran is not in it.
                tb.meta_dirty = tb.meta_gen != gen;
            }
            {
                let mut tb = t.borrow_mut();
                tb.meta_saved_gen = tb.meta_saved_gen.max(gen);
            }
            let trash = {
                let tb = t.borrow();
                let mut log = tb.log.borrow_mut();
                log.release_below(floor);
                log.take_trash()
            };
            storage::delete_in_background(trash);
        }
        self.answer_meta_waiters(&failed);
    }

    pub fn decode_limits(&self) -> protocol::Limits {
        self.config.limits()
    }
}

/// The error code, verb and IDs of a FIN, REQ or TOUCH (what a failure answer names).
fn op_ids(op: &ChannelOp) -> Option<(ErrorCode, &'static str, &[protocol::MessageId])> {
    match op {
        ChannelOp::Fin(ids) => Some((ErrorCode::FinFailed, "FIN", ids)),
        ChannelOp::Req(id, _) => Some((ErrorCode::ReqFailed, "REQ", std::slice::from_ref(id))),
        ChannelOp::Touch(id) => Some((ErrorCode::TouchFailed, "TOUCH", std::slice::from_ref(id))),
        _ => None,
    }
}

/// Runs shard `id` until the control thread says exit.
pub async fn run(
    id: usize,
    config: Arc<Config>,
    mesh: MeshBuilder<Batch, Full>,
    control: usize,
    listeners: Option<crate::sys::listen::ShardListeners>,
    ready: &std::sync::mpsc::Sender<bool>,
    progress: &StartProgress,
) -> Result<(), StartError> {
    // Joins before anything can fail: a shard that left without joining would keep every
    // other participant waiting in its join.
    progress.set(id, Step::JoiningMesh);
    let (senders, mut receivers) = with_wake_ticks(mesh.join())
        .await
        .map_err(|_| StartError::JoinMesh { shard: id })?;
    let listeners = listeners.ok_or(StartError::NoListeners { shard: id })?;
    let peers = senders.nr_consumers();
    let shard = Rc::new(Shard::new(id, config.clone(), peers, control));
    progress.set(id, Step::LoadingTopics);
    shard.load_topics()?;
    progress.set(id, Step::ProbingDataPath);
    crate::startup::stall_if_asked(id, Step::ProbingDataPath).await;
    storage::file::probe(&config.data_path, id).await;
    progress.set(id, Step::StartingServers);
    // Blocks read at start-up (messages owed at the last stop) age like any others.
    let loaded: Vec<Rc<RefCell<Topic>>> = shard.topics.borrow().values().cloned().collect();
    for t in &loaded {
        if t.borrow().log.borrow().cached_bytes() > 0 {
            shard.list_cached(t);
        }
    }
    glommio::spawn_local(shard.clone().flusher()).detach();
    glommio::spawn_local(shard.clone().fetcher()).detach();
    if shard.sends.available() {
        let sender = shard.clone();
        glommio::spawn_local(async move { sender.sends.run().await }).detach();
    }
    let senders = Rc::new(senders);

    for (peer, rx) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(batch) = rx.recv().await {
                for mail in batch {
                    shard.handle(mail);
                }
                shard.flush_dispatches();
                glommio::yield_if_needed().await;
            }
            debug!(shard = shard.id, peer, "inbox closed");
        })
        .detach();
    }
    spawn_pumps(&shard, &senders, peers);
    glommio::spawn_local(shard.clone().confirm_http_publishes()).detach();
    let dispatcher = shard.clone();
    glommio::spawn_local(async move {
        loop {
            dispatcher.wake_dispatcher.notified().await;
            dispatcher.flush_dispatches();
        }
    })
    .detach();

    let timers_shard = shard.clone();
    glommio::spawn_local(async move {
        let s = timers_shard.clone();
        timers_shard.timers.run(move |due| s.on_timers(due)).await;
    })
    .detach();

    // SAFETY: the fd is a bound, listening TCP socket this shard now owns alone.
    let listener = unsafe { TcpListener::from_raw_fd(listeners.tcp.into_raw_fd()) };
    crate::http::start(&shard, listeners.http)?;
    let accept_shard = shard.clone();
    let acceptor =
        glommio::spawn_local(async move { crate::tcp::accept_loop(accept_shard, listener).await });
    // Its topics are loaded and it accepts: main logs "listening" once every shard has said so.
    progress.set(id, Step::Serving);
    let _ = ready.send(true);

    // Wait for shutdown, then for the connections to finish, then for the word to exit.
    shard.exit.notified().await;
    drop(acceptor);
    let lost = shard.hand_over_to_storage().await;
    debug!(shard = id, "exited");
    if lost > 0 {
        return Err(StartError::LostAtStop {
            shard: id,
            bytes: lost,
        });
    }
    Ok(())
}

fn spawn_pumps(shard: &Rc<Shard>, senders: &Rc<Senders<Batch>>, peers: usize) {
    for peer in 0..peers {
        if peer == shard.id {
            continue;
        }
        let shard = shard.clone();
        let senders = senders.clone();
        glommio::spawn_local(async move {
            shard.outboxes[peer].pump(&senders, peer).await;
        })
        .detach();
    }
}

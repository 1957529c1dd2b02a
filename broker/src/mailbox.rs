//! Cross-shard mailboxes: what shards say to each other, and the outboxes that batch it.
//!
//! Shards share nothing; they talk only through a glommio channel mesh (bounded SPSC rings
//! between every pair). Each shard keeps one [`Outbox`] per peer: during a turn, anything bound
//! for that peer is appended to it, and one pump task per peer sends the whole vector as one
//! mesh message. Under load the pump is still busy sending the previous batch, so batches grow;
//! when idle, a lone message leaves at once.
//!
//! Ordering: mail from shard A to shard B arrives in the order A queued it (one outbox, one
//! FIFO ring). That is what keeps a consumer's FIN behind its RDY, and a disconnect behind both.
//!
//! Backpressure: a full ring makes the pump wait; connection readers check
//! [`Outbox::is_congested`] after each read and wait until the outbox drains, so a fast
//! publisher slows down instead of growing memory. Owner-side work (deliveries, replies) never
//! waits on a mailbox, so two shards can never deadlock on each other.

use crate::channel::{ConsumerKey, ConsumerSpec};
use bytes::Bytes;
use glommio::channels::channel_mesh::Senders;
use nsq_common::local_sync::Notify;
use protocol::{MessageId, ProtocolError};
use std::cell::RefCell;
use std::time::Duration;

/// One batch on the wire between two shards.
pub type Batch = Vec<Mail>;

/// Where a request's answer must go: the asking shard and its waiting token.
#[derive(Debug, Clone, Copy)]
pub struct ReplyTo {
    pub shard: usize,
    pub token: u64,
}

/// A consumer's command, carried to the channel's owner.
#[derive(Debug, Clone)]
pub enum ChannelOp {
    Rdy(u64),
    /// The FINs of one read, in order: one mail, one lookup, one dispatch.
    Fin(Vec<MessageId>),
    Req(MessageId, Duration),
    Touch(MessageId),
    /// CLS: stop delivering to this consumer.
    Close,
    /// The connection is gone: remove the consumer, return its in-flight messages.
    Leave,
    /// The connection wrote this many more bytes of the frames delivered to it (flow control,
    /// see `Channel::written`).
    Written(u64),
}

/// Register or unregister, as a shard reports a change of its topics and channels to the
/// control thread (`Mail::Registry`), which keeps the lookups told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryOp {
    Register,
    Unregister,
}

/// The answer to a request.
#[derive(Debug)]
pub enum Reply {
    Publish(Result<(), ProtocolError>),
    Subscribe(Result<(), ProtocolError>),
    Admin(crate::admin_ops::AdminResult),
    /// From the control thread: the channels the lookups know for a topic being created.
    TopicChannels(Vec<String>),
    /// From the control thread: the controller leader's answer to a `Mail::ControllerRequest`,
    /// or why no leader answered (also: replication is not configured, the queue is full).
    Controller(Result<replication::controller::BrokerReply, String>),
}

/// What a TCP connection's reader knew when the connection moved to the owner of its topic
/// (`tcp::handover`): the owner carries on from here.
#[derive(Debug)]
pub struct Handover {
    /// The command that moved it (SUB or a publish), decoded, not yet executed.
    pub first: protocol::Command,
    /// Bytes the client sent after that command, not decoded yet.
    pub rest: bytes::BytesMut,
    pub info: crate::channel::ClientInfo,
    /// Heartbeats on, and their interval (IDENTIFY's, or the default).
    pub heartbeats: bool,
    pub heartbeat: Option<Duration>,
    pub msg_timeout: Duration,
    /// How message frames are held (IDENTIFY's output buffer size, and timeout if any).
    pub output_buffer_size: usize,
    pub output_buffer_timeout: Option<Duration>,
}

/// A TCP connection another shard hands over: its socket, and what its reader knew when it
/// moved (`None`: a connection given before its first byte was read).
pub type AdoptedConn = (std::os::fd::OwnedFd, Option<Box<Handover>>);

#[derive(Debug)]
pub enum Mail {
    /// To a topic's owner: store these messages (PUB, MPUB, DPUB). `acked`: the client was
    /// already told OK (see [`crate::shard::Shard::can_ack_early`]), so the owner stores them
    /// even while its storage is failing, and answers `Err` only to say it is unhealthy.
    Publish {
        topic: String,
        bodies: Vec<Bytes>,
        defer: Duration,
        acked: bool,
        reply: ReplyTo,
        /// Empty for a producer's publish; for dead letters (sent by the owner of the topic
        /// whose channel gave up on them) where each body came from, in the same order: the
        /// owner records them with the topic (`topic/dead_letters.rs`).
        origins: Vec<crate::topic::DeadOrigin>,
    },
    /// To a topic's owner: add a consumer to a channel (creating both if needed).
    Subscribe {
        topic: String,
        channel: String,
        consumer: ConsumerSpec,
        reply: ReplyTo,
    },
    /// To a topic's owner: a consumer's RDY/FIN/REQ/TOUCH/CLS or departure.
    Channel {
        topic: std::sync::Arc<str>,
        channel: std::sync::Arc<str>,
        key: ConsumerKey,
        op: ChannelOp,
    },
    /// From an owner to a consumer's shard: messages for connection `conn`.
    /// The frames are encoded by the owner, so the consumer's shard only copies bytes and never
    /// touches the bodies' reference counts (shared with the owner's log: a cache line bouncing
    /// between cores for every message otherwise).
    /// `full`: the consumer can take no more after these (see `channel::Batch::full`), so
    /// the connection writes them at once instead of holding them in its output buffer.
    Deliver {
        conn: u64,
        frames: Bytes,
        full: bool,
    },
    /// From an owner to a consumer's shard: a non-fatal error frame for connection `conn`.
    ConnError { conn: u64, error: ProtocolError },
    /// The answer to a request, for the waiting `token` on this shard.
    Reply { token: u64, reply: Reply },
    /// An HTTP request's work for a topic's owner (create, delete, pause, ...) or for every
    /// shard (stats); see [`crate::admin_ops`].
    Admin {
        op: crate::admin_ops::AdminOp,
        reply: ReplyTo,
    },
    /// From a topic's owner to a consumer's shard: close connection `conn` (its topic or
    /// channel was deleted).
    CloseConn { conn: u64 },
    /// An HTTP connection whose client now sends from this shard's CPU, handed over between
    /// two requests, or accepted on shard 0's unix socket and given to this shard in turn
    /// (see `http::server`): this shard serves it from now on.
    HttpConn { fd: std::os::fd::OwnedFd },
    /// A TCP (V2) connection accepted on shard 0's unix socket and given to this shard in
    /// turn (see `tcp::accept_loop`), or a producer's connection moved to the owner of its
    /// topic with what its reader knew (`moved`, see `tcp::handover`): this shard serves it.
    TcpConn {
        fd: std::os::fd::OwnedFd,
        moved: Option<Box<Handover>>,
    },
    /// From a topic's owner to the control thread: a topic (`channel: None`) or a channel was
    /// created (`Register`) or deleted (`Unregister`); the lookups are told.
    Registry {
        op: RegistryOp,
        topic: String,
        channel: Option<String>,
    },
    /// From shard 0 to the control thread: `PUT /config/nsqlookupd_tcp_addresses` set the
    /// lookups to register with.
    LookupAddresses(Vec<String>),
    /// From a topic's owner to the control thread: which channels do the lookups know for this
    /// new topic? Answered with `Reply::TopicChannels` (bounded: lookups that do not answer
    /// in time are left out).
    TopicChannels { topic: String, reply: ReplyTo },
    /// From the control thread (`--replication-address` only) to a topic's owner: the
    /// controller's view of topics this shard owns changed: each one's new state, or `None`
    /// when this broker is no longer one of its replicas. Sent in the order the view changed.
    ReplicaTopics(Vec<(String, Option<replication::controller::TopicState>)>),
    /// From the control thread to a topic's owner: the leaders of replicated topics this
    /// broker holds no replica of (where a publish to them is forwarded), as they changed.
    ReplicaRoutes(Vec<(String, Option<u64>)>),
    /// From the control thread (`--replication-address` only) to every shard, when the view's
    /// brokers changed what this shard dials: every other registered broker (fenced ones
    /// included) and the address of its shard of this shard's index (modulo its shard count),
    /// resolved. Sent only when this shard's map changed, in the order it changed.
    ReplicaPeers(std::collections::BTreeMap<u64, std::net::SocketAddr>),
    /// From a shard to the control thread: carry this request to the controller leader
    /// (`CreateTopic`, `AlterIsr`); answered with `Reply::Controller`.
    ControllerRequest {
        request: replication::controller::BrokerRequest,
        reply: ReplyTo,
    },
    /// Between shards: a publish a peer broker forwarded for a topic this shard owns.
    ReplicaForward {
        from: u64,
        forward: replication::wire::Forward,
    },
    /// Between shards: a message from a peer broker's replica for a topic this shard owns
    /// (it arrived on another shard's connection).
    ReplicaInbound {
        from: u64,
        delivery: replication::wire::Delivery,
    },
    /// From the control thread: stop accepting and delivering, let connections finish.
    Shutdown,
    /// To the control thread: this shard has no connections left.
    ShutdownDone { shard: usize },
    /// From the control thread: every shard is quiet; hand over to storage and exit.
    Exit,
}

/// Outgoing mail for one peer, sent in batches by that peer's pump.
#[derive(Default)]
pub struct Outbox {
    pending: RefCell<Vec<Mail>>,
    wake_pump: Notify,
}

/// How many queued mails make an outbox congested (readers pause above it).
const CONGESTED: usize = 64 * 1024;

impl Outbox {
    pub fn push(&self, mail: Mail) {
        self.pending.borrow_mut().push(mail);
        self.wake_pump.notify();
    }

    /// Mail queued and not yet handed to the pump (for /metrics).
    pub fn len(&self) -> usize {
        self.pending.borrow().len()
    }

    pub fn is_congested(&self) -> bool {
        self.pending.borrow().len() >= CONGESTED
    }

    /// Sends everything queued for `peer`, batch by batch, forever.
    pub async fn pump(&self, senders: &Senders<Batch>, peer: usize) {
        loop {
            self.wake_pump.notified().await;
            loop {
                let batch = std::mem::take(&mut *self.pending.borrow_mut());
                if batch.is_empty() {
                    break;
                }
                if senders.send_to(peer, batch).await.is_err() {
                    // The peer has exited (only at the very end of shutdown): nothing to do.
                    tracing::debug!(peer, "mailbox closed; mail dropped");
                }
            }
        }
    }
}

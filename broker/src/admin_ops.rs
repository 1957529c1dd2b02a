//! What the HTTP API asks of shards, as data: topic and channel actions ([`AdminOp`]) for a
//! topic's owner, stats, health and runtime options for every shard, their answers
//! ([`AdminResult`], [`ShardStats`]), and the admin state each shard keeps ([`AdminState`]:
//! health, options changed at runtime, HTTP and record counters).
//!
//! The HTTP side sends an [`AdminOp`] with `Shard::request(owner, |reply| Mail::Admin{..})`
//! and awaits `Reply::Admin(AdminResult)`; the owner's handling is in `shard::admin_exec`.

use crate::stats::{ClientStats, TopicStats};
use std::cell::{Cell, RefCell};

/// What to do to a topic or a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Delete,
    Empty,
    Pause,
    Unpause,
}

/// Where a rewind (or a channel created from the past) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindTo {
    /// The oldest message the log keeps.
    Earliest,
    /// A position (seq) of the log.
    Offset(u64),
    /// The first message published at or after this time (ns since the epoch).
    Timestamp(i64),
}

/// Which part of the stats to gather.
#[derive(Debug, Clone, Default)]
pub struct StatsQuery {
    pub topic: Option<String>,
    pub channel: Option<String>,
    pub include_clients: bool,
    /// Each channel's position (`offset`, `oldest_owed_timestamp`) even where no retention
    /// is in force (ours; `include_positions=true`).
    pub include_positions: bool,
}

/// A runtime option changed through `PUT /config/:opt`, applied on every shard.
#[derive(Debug, Clone)]
pub enum OptionChange {
    LookupdTcpAddresses(Vec<String>),
    LogLevel(String),
}

/// A request from the HTTP API to a shard.
#[derive(Debug)]
pub enum AdminOp {
    /// To the topic's owner.
    Topic { topic: String, action: Action },
    /// To the topic's owner.
    Channel {
        topic: String,
        channel: String,
        action: Action,
    },
    /// To the topic's owner: its own retention limits. `None`: unchanged; `Some(None)`: back
    /// to the flag's; `Some(Some(n))`: n (ns, bytes; 0 for none).
    TopicConfig {
        topic: String,
        retention_time_ns: Option<Option<u64>>,
        retention_bytes: Option<Option<u64>>,
    },
    /// To the topic's owner: the topic's replica count, through the replication controller
    /// (`POST /topic/config?replicas=`).
    TopicReplicas { topic: String, replicas: u32 },
    /// To the topic's owner: move a channel to `to` of the topic's log (replay), or create
    /// it there (`create`: a new channel starting from the past; refused if it exists).
    /// `dry_run`: only resolve the position and say what the rewind would deliver again
    /// ([`AdminResult::RewindPlan`]), moving nothing.
    Rewind {
        topic: String,
        channel: String,
        to: RewindTo,
        create: bool,
        dry_run: bool,
    },
    /// To the topic's owner: a channel's own max attempts and dead-letter topic (`None`:
    /// unchanged; `Some(None)`: back to the flag's, or no dead-letter topic).
    ChannelConfig {
        topic: String,
        channel: String,
        max_attempts: Option<Option<u16>>,
        dead_letter_topic: Option<Option<String>>,
    },
    /// To a dead-letter topic's owner: its origin records (only `id`'s when given).
    DeadLetters { topic: String, id: Option<String> },
    /// To a dead-letter topic's owner: the bodies of its recorded dead letters after seq
    /// `after` (only `id`'s when given), for a redrive.
    RedriveRead {
        topic: String,
        id: Option<String>,
        after: Option<u64>,
    },
    /// To a dead-letter topic's owner: these dead letters were published back; forget their
    /// origin records (answered once saved).
    RedriveDone { topic: String, ids: Vec<String> },
    /// To every shard: its topics and producers.
    Stats(StatsQuery),
    /// To every shard: `None` when healthy, else the reason.
    Health,
    /// To every shard.
    SetOption(OptionChange),
}

/// A shard's answer to an [`AdminOp`].
#[derive(Debug)]
pub enum AdminResult {
    Done,
    TopicNotFound,
    ChannelNotFound,
    Stats(Box<ShardStats>),
    Health(Option<String>),
    /// The action could not be carried out (HTTP 500 INTERNAL_ERROR; the reason is logged).
    Failed(Failure),
    /// The request cannot be done to this topic or channel (HTTP 400 saying why).
    Refused(Refusal),
    /// A dead-letter topic's origin records.
    DeadLetters(Vec<crate::storage::meta::DeadLetterMeta>),
    /// Dead letters read for a redrive.
    Redrive(Box<RedriveBatch>),
    /// A rewind's dry run: the position it resolves to, and how many messages from there up
    /// to the channel's cursor it would deliver again.
    RewindPlan {
        offset: u64,
        redelivered: u64,
    },
}

/// Why an action could not be carried out: the broker's fault, not the request's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The topic could not be created (the storage's reason).
    #[error("{0}")]
    CreateTopic(String),
    /// The deleted topic's files could not be destroyed (the storage's reason).
    #[error("{0}")]
    DestroyTopic(String),
    /// The topic's metadata could not be written, so the change is not durable yet.
    #[error("cannot write metadata: {0}")]
    WriteMeta(String),
    /// The data path could not be fsynced after a topic's directory was renamed away.
    #[error("cannot fsync the data path: {0}")]
    SyncDataPath(String),
    /// The replication controller did not answer a request (why).
    #[error("replication controller: {0}")]
    Controller(String),
    /// The shard is stopping.
    #[error("shard stopping")]
    Stopping,
}

/// Why a request cannot be done to this topic or channel: the request's fault. The HTTP
/// side words each one (`http::api_error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Retention settings asked of an #ephemeral topic.
    EphemeralTopicRetention,
    /// Replay asked of an #ephemeral (or memory-only) topic.
    EphemeralTopicReplay,
    /// Replay asked of an #ephemeral channel.
    EphemeralChannelReplay,
    /// A channel created from the past that exists already.
    ChannelExists,
    /// A rewind position older than the log keeps; how far back it goes.
    BeforeHistory {
        oldest_offset: u64,
        oldest_timestamp: i64,
    },
    /// A rewind position past the log's end (`head`).
    PastEnd { head: u64 },
    /// A replica count the broker or the cluster cannot give the topic (why).
    Replicas(String),
}

/// Dead letters read for a redrive: each origin record with its body (`None`: no longer in
/// the dead-letter topic's log); `waiting`: the next one is on disk and being fetched, ask
/// again; `more`: the batch is full, ask again after the last seq.
#[derive(Debug, Default)]
pub struct RedriveBatch {
    pub letters: Vec<(crate::storage::meta::DeadLetterMeta, Option<bytes::Bytes>)>,
    pub waiting: bool,
    pub more: bool,
}

/// One shard's part of /stats and /metrics.
#[derive(Debug, Default)]
pub struct ShardStats {
    pub shard: usize,
    /// The controller's state of the replicated topics this shard owns (empty without
    /// `--replication-address`).
    pub replica_topics: Vec<(String, replication::controller::TopicState)>,
    /// The peers this shard dials (empty without `--replication-address`).
    pub replica_peers: std::collections::BTreeMap<u64, std::net::SocketAddr>,
    pub health: Option<String>,
    /// The topics this shard owns (filtered by the query), sorted by name.
    pub topics: Vec<TopicStats>,
    /// Connections on this shard that published.
    pub producers: Vec<ClientStats>,
    /// The `topic` of the query is one of this shard's (whatever the channel filter left).
    pub has_topic: bool,
    /// Messages held in memory by this shard's topics and channels.
    pub messages_held: u64,
    pub tcp_connections: usize,
    pub http_connections: u64,
    pub http_requests: u64,
    /// HTTP connections this shard handed to the shard of their client's CPU.
    pub http_handovers: u64,
    /// TCP connections this shard moved to the owner of their topic (`tcp::handover`).
    pub tcp_handovers: u64,
    /// Records written to segment files, and records every channel finished before they were
    /// written (so never written).
    pub records_written: u64,
    pub records_skipped: u64,
    /// Mail queued for each peer shard (index = peer), not yet sent.
    pub outbox_depth: Vec<usize>,
    /// Requests of this shard still waiting for another shard's reply.
    pub waiting_replies: usize,
    /// Timers pending (in-flight timeouts, deferred messages).
    pub timers: usize,
    /// Bytes of segment blocks cached for readers behind the in-memory window.
    pub read_cache_bytes: u64,
    /// Eager reads ([`crate::sys::eager_read`]) that found the next request, and that found none.
    pub eager_reads: u64,
    pub eager_read_misses: u64,
}

/// Admin state kept by each shard: health and the options `PUT /config` changes.
#[derive(Debug, Default)]
pub struct AdminState {
    /// `Some(reason)` once something (a failed disk write, ...) made this shard unhealthy.
    health: RefCell<Option<String>>,
    pub(crate) lookupd_tcp_addresses: RefCell<Option<Vec<String>>>,
    pub(crate) log_level: RefCell<Option<String>>,
    pub(crate) http_connections: Cell<u64>,
    pub(crate) http_requests: Cell<u64>,
    pub(crate) http_handovers: Cell<u64>,
    pub(crate) tcp_handovers: Cell<u64>,
    pub(crate) records: RecordCounts,
}

/// Records of the shard's topics that the flusher wrote to segment files, and those it left
/// out because every channel had finished them before it came to write them.
#[derive(Debug, Default)]
pub struct RecordCounts {
    pub(crate) written: Cell<u64>,
    pub(crate) skipped: Cell<u64>,
}

impl AdminState {
    /// Marks the shard unhealthy: /ping answers `500 NOK - <reason>`.
    pub fn set_unhealthy(&self, reason: impl Into<String>) {
        *self.health.borrow_mut() = Some(reason.into());
    }

    pub fn set_healthy(&self) {
        *self.health.borrow_mut() = None;
    }

    pub fn health(&self) -> Option<String> {
        self.health.borrow().clone()
    }
}

/// The process-wide hook that changes the log filter (set by main at start-up).
pub type LogLevelSetter = Box<dyn Fn(&str) -> Result<(), LogLevelError> + Send + Sync>;

/// A log level the running logger refused (the logger's reason).
#[derive(Debug, thiserror::Error)]
#[error("cannot set the log level: {0}")]
pub struct LogLevelError(pub String);
static LOG_LEVEL_SETTER: std::sync::OnceLock<LogLevelSetter> = std::sync::OnceLock::new();

/// Installs how `PUT /config/log_level` changes the running log filter.
pub fn set_log_level_setter(f: LogLevelSetter) {
    let _ = LOG_LEVEL_SETTER.set(f);
}

/// Changes the running log filter, if a setter was installed.
pub fn set_log_level(level: &str) -> Result<(), LogLevelError> {
    LOG_LEVEL_SETTER.get().map_or(Ok(()), |set| set(level))
}

//! Topic and channel administration and statistics, as the HTTP API asks for them: the
//! requests that travel to a topic's owner shard (create, delete, empty, pause) or to every
//! shard (stats, health, runtime options), and how a shard answers them.
//!
//! The HTTP side sends an [`AdminOp`] with `Shard::request(owner, |reply| Mail::Admin{..})`
//! and awaits `Reply::Admin(AdminResult)`. Like every owner-side operation,
//! [`Shard::handle_admin`] is synchronous: it never waits, so it cannot deadlock two shards.
//!
//! Deleting a topic or a channel closes its consumers' connections wherever they are: the
//! owner sends `Mail::CloseConn` to each consumer's shard (handled on the spot for its own).
//! The closed connection then sends its usual `Leave`, which finds no channel and is ignored.
//!
//! A delete is answered once it is durable, so a crash right after the answer cannot bring the
//! topic or channel back: a topic's directory is renamed into the trash at once, and the
//! answer waits for the shard's flusher to fsync the data path (which makes the rename
//! durable); a channel's answer waits for the flusher's checkpoint to write the topic's
//! `meta.json` without it. The flusher is the one writer of metadata while the shard runs, so
//! these answers never race a checkpoint; each topic counts its structural changes
//! (`Topic::meta_gen`) and the generation its written metadata covers (`meta_saved_gen`).

use crate::channel::ConsumerKey;
use crate::lookup_reg::RegistryOp;
use crate::mailbox::{Mail, Reply, ReplyTo};
use crate::shard::Shard;
use crate::stats::{self, ChannelStats, ClientStats, PubCount, TopicStats};
use crate::topic::{ChannelRef, Topic};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;
use tracing::{info, warn};

/// What to do to a topic or a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Delete,
    Empty,
    Pause,
    Unpause,
}

/// Which part of the stats to gather.
#[derive(Debug, Clone, Default)]
pub struct StatsQuery {
    pub topic: Option<String>,
    pub channel: Option<String>,
    pub include_clients: bool,
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
    /// The action could not be carried out (the reason; HTTP 500 INTERNAL_ERROR).
    Failed(String),
}

/// One shard's part of /stats and /metrics.
#[derive(Debug, Default)]
pub struct ShardStats {
    pub shard: usize,
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
    /// Eager reads ([`crate::eager_read`]) that found the next request, and that found none.
    pub eager_reads: u64,
    pub eager_read_misses: u64,
}

/// Admin state kept by each shard: health and the options `PUT /config` changes.
#[derive(Debug, Default)]
pub struct AdminState {
    /// `Some(reason)` once something (a failed disk write, ...) made this shard unhealthy.
    health: RefCell<Option<String>>,
    lookupd_tcp_addresses: RefCell<Option<Vec<String>>>,
    log_level: RefCell<Option<String>>,
    pub(crate) http_connections: Cell<u64>,
    pub(crate) http_requests: Cell<u64>,
    pub(crate) http_handovers: Cell<u64>,
    pub(crate) records: RecordCounts,
    /// Topic deletions answered once the data path is fsynced.
    data_path_waiters: RefCell<Vec<ReplyTo>>,
    /// Channel deletions answered once their topic's metadata is written.
    meta_waiters: RefCell<Vec<MetaWaiter>>,
}

/// An action answered once `topic`'s metadata of generation `gen` or later is written.
struct MetaWaiter {
    topic: Rc<RefCell<Topic>>,
    gen: u64,
    reply: ReplyTo,
}

impl std::fmt::Debug for MetaWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaWaiter")
            .field("gen", &self.gen)
            .field("reply", &self.reply)
            .finish()
    }
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
pub type LogLevelSetter = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;
static LOG_LEVEL_SETTER: std::sync::OnceLock<LogLevelSetter> = std::sync::OnceLock::new();

/// Installs how `PUT /config/log_level` changes the running log filter.
pub fn set_log_level_setter(f: LogLevelSetter) {
    let _ = LOG_LEVEL_SETTER.set(f);
}

impl Shard {
    /// Carries out `op`; `None` when the answer to `reply` comes later (once durable).
    pub(crate) fn handle_admin(&self, op: AdminOp, reply: ReplyTo) -> Option<AdminResult> {
        match op {
            AdminOp::Topic { topic, action } => self.topic_action(&topic, action, reply),
            AdminOp::Channel {
                topic,
                channel,
                action,
            } => self.channel_action(&topic, &channel, action, reply),
            AdminOp::Stats(q) => Some(AdminResult::Stats(Box::new(self.shard_stats(&q)))),
            AdminOp::Health => Some(AdminResult::Health(self.admin.health())),
            AdminOp::SetOption(change) => {
                self.set_option(change);
                Some(AdminResult::Done)
            }
        }
    }

    /// Whether any action waits for metadata to be written.
    pub(crate) fn waits_for_meta(&self) -> bool {
        !self.admin.meta_waiters.borrow().is_empty()
    }

    /// Answers the actions waiting for metadata that is now written, or that could not be
    /// (`failed`: the topics and why; retried by a later checkpoint, but the answer says so).
    pub(crate) fn answer_meta_waiters(&self, failed: &[(Rc<RefCell<Topic>>, String)]) {
        let waiting = std::mem::take(&mut *self.admin.meta_waiters.borrow_mut());
        let mut still = Vec::new();
        for w in waiting {
            let saved = {
                let t = w.topic.borrow();
                // A topic deleted since: its own deletion is what is made durable.
                t.meta_saved_gen >= w.gen || t.log.borrow().is_destroyed()
            };
            let failure = failed.iter().find(|(t, _)| Rc::ptr_eq(t, &w.topic));
            let answer = match (saved, failure) {
                (true, _) => AdminResult::Done,
                (false, Some((_, reason))) => {
                    AdminResult::Failed(format!("cannot write metadata: {reason}"))
                }
                (false, None) => {
                    still.push(w);
                    continue;
                }
            };
            self.reply(w.reply, Reply::Admin(answer));
        }
        self.admin.meta_waiters.borrow_mut().extend(still);
    }

    /// fsyncs the data path for the topic deletions waiting for it (their directories'
    /// renames), off the shard's thread, and answers them.
    pub(crate) async fn sync_data_path_for_deletions(&self) {
        let waiting = std::mem::take(&mut *self.admin.data_path_waiters.borrow_mut());
        if waiting.is_empty() {
            return;
        }
        let path = self.config.data_path.clone();
        let synced = glommio::executor()
            .spawn_blocking(move || std::fs::File::open(&path).and_then(|d| d.sync_all()))
            .await;
        if let Err(e) = &synced {
            warn!(
                shard = self.id,
                "cannot fsync the data path after deleting a topic: {e}"
            );
        }
        for reply in waiting {
            let answer = match &synced {
                Ok(()) => AdminResult::Done,
                Err(e) => AdminResult::Failed(format!("cannot fsync the data path: {e}")),
            };
            self.reply(reply, Reply::Admin(answer));
        }
    }

    /// Answer `reply` once `t`'s metadata as it is now is written (at once for a topic
    /// without files).
    fn answer_when_meta_saved(
        &self,
        t: &Rc<RefCell<Topic>>,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        if !t.borrow().log.borrow().is_persistent() {
            return Some(AdminResult::Done);
        }
        let gen = t.borrow().meta_gen;
        self.admin.meta_waiters.borrow_mut().push(MetaWaiter {
            topic: t.clone(),
            gen,
            reply,
        });
        self.wake_flusher.notify();
        None
    }

    /// The `nsqlookupd_tcp_addresses` in force (the flag, or the last `PUT /config`).
    pub fn lookupd_tcp_addresses(&self) -> Vec<String> {
        self.admin
            .lookupd_tcp_addresses
            .borrow()
            .clone()
            .unwrap_or_else(|| self.config.lookupd_tcp_addresses.clone())
    }

    /// The `log_level` in force.
    pub fn log_level(&self) -> String {
        self.admin
            .log_level
            .borrow()
            .clone()
            .unwrap_or_else(|| self.config.log_level.clone())
    }

    fn set_option(&self, change: OptionChange) {
        match change {
            OptionChange::LookupdTcpAddresses(a) => {
                // Every shard remembers it (GET /config, new topics ask lookups or not); one
                // tells the control thread, which holds the registration connections.
                if self.id == 0 {
                    self.route(self.control, Mail::LookupAddresses(a.clone()));
                }
                *self.admin.lookupd_tcp_addresses.borrow_mut() = Some(a);
            }
            OptionChange::LogLevel(l) => {
                // One shard applies it to the (process-wide) logger; all remember it.
                if self.id == 0 {
                    if let Some(set) = LOG_LEVEL_SETTER.get() {
                        if let Err(e) = set(&l) {
                            tracing::warn!("log level {l}: {e}");
                        }
                    }
                }
                *self.admin.log_level.borrow_mut() = Some(l);
            }
        }
    }

    fn topic_action(&self, name: &str, action: Action, reply: ReplyTo) -> Option<AdminResult> {
        if action == Action::Create {
            return Some(match self.topic_or_create(name) {
                Ok(_) => AdminResult::Done,
                Err(reason) => AdminResult::Failed(reason),
            });
        }
        let Some(t) = self.topics.borrow().get(name).cloned() else {
            return Some(AdminResult::TopicNotFound);
        };
        match action {
            Action::Create => {}
            Action::Delete => {
                self.topics.borrow_mut().remove(name);
                let channels: Vec<ChannelRef> = t.borrow().channels().cloned().collect();
                for ch in &channels {
                    self.close_consumers(ch);
                }
                // Its segments and metadata go with it: the directory is renamed into the
                // trash now; nothing writes to it by its name afterwards.
                let (destroyed, trash, persistent) = {
                    let tb = t.borrow();
                    let mut log = tb.log.borrow_mut();
                    (log.destroy(), log.take_trash(), log.is_persistent())
                };
                crate::storage::delete_in_background(trash);
                info!(topic = name, shard = self.id, "topic deleted");
                // The control thread unregisters its channels, then the topic.
                self.report(RegistryOp::Unregister, name, None);
                if let Err(reason) = destroyed {
                    return Some(AdminResult::Failed(reason.to_string()));
                }
                if persistent {
                    self.admin.data_path_waiters.borrow_mut().push(reply);
                    self.wake_flusher.notify();
                    return None;
                }
            }
            Action::Empty => {
                t.borrow_mut().empty();
                self.note_meta_change(&t);
            }
            Action::Pause => {
                t.borrow_mut().paused = true;
                self.note_meta_change(&t);
                info!(topic = name, "topic paused");
            }
            Action::Unpause => {
                let touched = {
                    let mut tb = t.borrow_mut();
                    tb.paused = false;
                    tb.release_held(Instant::now(), &self.timers)
                };
                for ch in &touched {
                    self.dispatch(ch);
                }
                self.note_meta_change(&t);
                info!(topic = name, "topic unpaused");
            }
        }
        Some(AdminResult::Done)
    }

    fn channel_action(
        &self,
        topic: &str,
        name: &str,
        action: Action,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        let Some(t) = self.topics.borrow().get(topic).cloned() else {
            return Some(AdminResult::TopicNotFound);
        };
        if action == Action::Create {
            let (_, created) = t.borrow_mut().channel_or_create(name);
            if created {
                self.note_meta_change(&t);
                info!(topic, channel = name, shard = self.id, "channel created");
                self.report(RegistryOp::Register, topic, Some(name));
                // As on SUB: what the topic held waits no longer.
                let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
                for ch in &touched {
                    self.dispatch(ch);
                }
            }
            return Some(AdminResult::Done);
        }
        let Some(ch) = t.borrow().channel(name) else {
            return Some(AdminResult::ChannelNotFound);
        };
        match action {
            Action::Create => {}
            Action::Delete => {
                t.borrow_mut().remove_channel(name);
                self.close_consumers(&ch);
                info!(topic, channel = name, "channel deleted");
                self.report(RegistryOp::Unregister, topic, Some(name));
                // Answered once meta.json no longer lists it; the checkpoint that writes it
                // also frees the segments only this channel still held.
                self.note_meta_change(&t);
                return self.answer_when_meta_saved(&t, reply);
            }
            Action::Empty => ch.borrow_mut().empty(),
            Action::Pause => {
                ch.borrow_mut().paused = true;
                info!(topic, channel = name, "channel paused");
            }
            Action::Unpause => {
                ch.borrow_mut().paused = false;
                self.dispatch(&ch);
                info!(topic, channel = name, "channel unpaused");
            }
        }
        // Emptying lets the next checkpoint free the segments no channel needs.
        self.note_meta_change(&t);
        Some(AdminResult::Done)
    }

    /// Closes the connection of every consumer of `ch`, on whichever shard it is.
    fn close_consumers(&self, ch: &ChannelRef) {
        let keys: Vec<ConsumerKey> = ch.borrow().consumers().iter().map(|c| c.spec.key).collect();
        for key in keys {
            self.route(key.shard, Mail::CloseConn { conn: key.conn });
        }
    }

    /// Closes connection `conn` of this shard, if it is still there.
    pub(crate) fn close_conn_here(&self, conn: u64) {
        let c = self.conns.borrow().get(&conn).cloned();
        if let Some(c) = c {
            c.close();
        }
    }

    fn shard_stats(&self, q: &StatsQuery) -> ShardStats {
        let mut topics: Vec<Rc<RefCell<Topic>>> = match &q.topic {
            Some(name) => self
                .topics
                .borrow()
                .get(name)
                .cloned()
                .into_iter()
                .collect(),
            None => self.topics.borrow().values().cloned().collect(),
        };
        topics.sort_by(|a, b| a.borrow().name.cmp(&b.borrow().name));
        let has_topic = q.topic.is_some() && !topics.is_empty();
        let mut held = 0u64;
        let topics = topics
            .iter()
            .filter_map(|t| {
                let t = t.borrow();
                held += t.depth() as u64;
                topic_stats(&t, q, &mut held)
            })
            .collect();
        let eager = crate::eager_read::counts();
        ShardStats {
            shard: self.id,
            health: self.admin.health(),
            topics,
            producers: self.producer_stats(q.topic.as_deref()),
            has_topic,
            messages_held: held,
            tcp_connections: self.conns.borrow().len(),
            http_connections: self.admin.http_connections.get(),
            http_requests: self.admin.http_requests.get(),
            http_handovers: self.admin.http_handovers.get(),
            records_written: self.admin.records.written.get(),
            records_skipped: self.admin.records.skipped.get(),
            outbox_depth: self.outboxes.iter().map(|o| o.len()).collect(),
            waiting_replies: self.waiters.borrow().len(),
            timers: self.timers.len(),
            read_cache_bytes: self.read_cache_bytes(),
            eager_reads: eager.hits,
            eager_read_misses: eager.misses,
        }
    }

    /// The connections that published, with their counts for `topic` only when one is given
    /// (nsqd lists every producer, without `pub_counts` when it has none for the topic).
    fn producer_stats(&self, topic: Option<&str>) -> Vec<ClientStats> {
        let conns = self.conns.borrow();
        let mut out = Vec::new();
        for c in conns.values() {
            let counts = c.pub_counts.borrow();
            if counts.is_empty() {
                continue;
            }
            let state = if c.subscribed.get() {
                stats::STATE_SUBSCRIBED
            } else {
                stats::STATE_INIT
            };
            let mut s = ClientStats::new(&c.info.borrow(), state);
            s.pub_counts = counts
                .iter()
                .filter(|(name, _)| topic.is_none_or(|t| t == name))
                .map(|(topic, count)| PubCount {
                    topic: topic.clone(),
                    count: *count,
                })
                .collect();
            out.push(s);
        }
        out
    }
}

/// A topic's stats; with a channel filter (as nsqd, with or without a topic filter) only that
/// channel, and `None` for a topic that does not have it.
fn topic_stats(t: &Topic, q: &StatsQuery, held: &mut u64) -> Option<TopicStats> {
    let channels: Vec<ChannelRef> = match &q.channel {
        Some(name) => vec![t.channel(name)?],
        None => t.channels().cloned().collect(),
    };
    let all: Vec<std::cell::Ref<'_, crate::channel::Channel>> =
        t.channels().map(|c| c.borrow()).collect();
    // nsqd aggregates over the channels: a topic without any has no percentiles (null).
    let latency = if all.is_empty() {
        stats::Latency::default()
    } else {
        stats::latency_of(all.iter().map(|c| c.e2e_samples()))
    };
    drop(all);
    let now_ns = crate::ids::now_nanos();
    let channels = channels
        .iter()
        .map(|c| {
            let c = c.borrow();
            let figures = c.figures(&t.log.borrow(), now_ns);
            *held += figures.depth + figures.in_flight + figures.deferred;
            channel_stats(&c, figures, q.include_clients)
        })
        .collect();
    Some(TopicStats {
        topic_name: t.name.to_string(),
        channels,
        depth: t.depth() as i64,
        backend_depth: t.backend_depth() as i64,
        message_count: t.message_count,
        message_bytes: t.message_bytes,
        paused: t.paused,
        e2e_processing_latency: latency,
    })
}

fn channel_stats(
    c: &crate::channel::Channel,
    figures: crate::channel::Figures,
    include_clients: bool,
) -> ChannelStats {
    let clients = include_clients.then(|| {
        c.consumers()
            .iter()
            .map(|k| {
                let state = if k.closing {
                    stats::STATE_CLOSING
                } else {
                    stats::STATE_SUBSCRIBED
                };
                let mut s = ClientStats::new(&k.spec.info, state);
                s.ready_count = k.rdy as i64;
                s.in_flight_count = k.in_flight as i64;
                s.message_count = k.message_count;
                s.finish_count = k.finish_count;
                s.requeue_count = k.requeue_count;
                s
            })
            .collect()
    });
    ChannelStats {
        channel_name: c.name.to_string(),
        depth: figures.depth as i64,
        backend_depth: figures.backend_depth as i64,
        in_flight_count: figures.in_flight as i64,
        deferred_count: figures.deferred as i64,
        message_count: c.message_count,
        requeue_count: c.requeue_count,
        timeout_count: c.timeout_count,
        client_count: c.consumer_count() as i64,
        clients,
        paused: c.paused,
        e2e_processing_latency: stats::latency_of([c.e2e_samples()]),
    }
}

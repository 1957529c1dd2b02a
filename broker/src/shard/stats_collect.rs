//! A shard's part of /stats and /metrics: its topics, channels, clients and producers with
//! nsqd's figures, and the shard's own counters. Read-only.

use super::Shard;
use crate::admin_ops::{ShardStats, StatsQuery};
use crate::stats::{self, ChannelStats, ClientStats, TopicStats};
use crate::topic::{ChannelRef, Topic};
use std::cell::RefCell;
use std::rc::Rc;

impl Shard {
    pub(super) fn shard_stats(&self, q: &StatsQuery) -> ShardStats {
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
        let eager = crate::sys::eager_read::counts();
        ShardStats {
            shard: self.id,
            replica_topics: self
                .replica_topics
                .borrow()
                .iter()
                .map(|(n, t)| (n.clone(), t.clone()))
                .collect(),
            replica_peers: self.replica_peers.borrow().clone(),
            health: self.admin.health(),
            topics,
            producers: self.producer_stats(q.topic.as_deref()),
            has_topic,
            messages_held: held,
            tcp_connections: self.conns.borrow().len(),
            http_connections: self.admin.http_connections.get(),
            http_requests: self.admin.http_requests.get(),
            http_handovers: self.admin.http_handovers.get(),
            tcp_handovers: self.admin.tcp_handovers.get(),
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
        conns
            .values()
            .filter_map(|c| c.producer_stats(topic))
            .collect()
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
    let mut latency = if all.is_empty() {
        stats::Latency::default()
    } else {
        stats::latency_of(all.iter().map(|c| c.e2e_samples()))
    };
    latency.totals.add(t.e2e_retired);
    drop(all);
    let now_ns = crate::ids::now_nanos();
    // Positions where replay matters (a retention limit keeps history) or where asked.
    let positions = q.include_positions || t.log.borrow().retention().is_set();
    let channels = channels
        .iter()
        .map(|c| {
            let c = c.borrow();
            let figures = c.figures(&t.log.borrow(), now_ns);
            *held += figures.depth + figures.in_flight + figures.deferred;
            let mut stats = channel_stats(&c, figures, q.include_clients);
            if positions {
                let p = c.position(&t.log.borrow());
                stats.position = Some(stats::PositionStats {
                    offset: p.offset,
                    oldest_owed_timestamp: p.oldest_owed_timestamp,
                });
            }
            stats
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
        retention: retention_stats(t),
        file_bytes: t.log.borrow().retained().bytes,
        replication: replication_stats(t),
    })
}

/// The topic's replica, if it is replicated.
fn replication_stats(t: &Topic) -> Option<stats::ReplicationStats> {
    let r = t.replica.as_ref()?;
    let state = r.controller.as_ref();
    let replica = &r.replica;
    let role = if replica.leading().is_some() {
        "leader"
    } else if replica.following().is_some() {
        "follower"
    } else {
        "idle"
    };
    Some(stats::ReplicationStats {
        replicas: state.map_or(0, |s| s.replicas.len()),
        brokers: state.map_or_else(Vec::new, |s| s.replicas.iter().map(|b| b.0).collect()),
        role,
        leader: state.and_then(|s| s.leader).map_or(0, |l| l.0),
        epoch: state.map_or(0, |s| s.epoch.0),
        isr: state.map_or_else(Vec::new, |s| s.isr.iter().map(|b| b.0).collect()),
        log_start: t.log.borrow().start(),
        log_end: t.log.borrow().head(),
        high_watermark: replica.high_watermark(),
        waiting_publishes: r.waiting.len(),
    })
}

/// The topic's retention block, while a limit is in force for it.
fn retention_stats(t: &Topic) -> Option<stats::RetentionStats> {
    let log = t.log.borrow();
    let (r, held) = (log.retention(), log.retained());
    if !r.is_set() {
        return None;
    }
    Some(stats::RetentionStats {
        time_ns: r.time_ns,
        bytes: r.bytes,
        time_is_topics: t.retention_time_ns.is_some(),
        bytes_is_topics: t.retention_bytes.is_some(),
        oldest_offset: held.oldest_offset,
        oldest_timestamp: held.oldest_timestamp,
        retained_bytes: held.bytes,
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
        position: None,
        dead_letters: dead_letter_stats(c),
    }
}

/// The channel's max attempts, while a limit is in force (or it has dead-lettered).
fn dead_letter_stats(c: &crate::channel::Channel) -> Option<stats::DeadLetterStats> {
    let d = c.dead_letters();
    if !d.in_force() && d.count == 0 {
        return None;
    }
    Some(stats::DeadLetterStats {
        dead_lettered_count: d.count,
        max_attempts: d.max,
        dead_letter_topic: d.topic.as_deref().unwrap_or_default().to_string(),
    })
}

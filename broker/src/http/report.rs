//! `GET /stats` (nsqd's JSON and text) and `GET /metrics` (Prometheus text, which nsqd lacks).
//!
//! Both ask every shard for its part ([`crate::admin_ops::ShardStats`]) at once and merge: topics
//! are owned by one shard each, so merging is concatenating and sorting by name; producers
//! are the connections of every shard that published.

use super::api_error::ApiError;
use super::ask;
use super::routes::{query, Handled};
use crate::admin_ops::{AdminOp, AdminResult, ShardStats, StatsQuery};
use crate::shard::Shard;
use crate::stats::{self, ClusterStats, DiskSpace, Latency, MemStats, StatsDoc};
use http1::{Request, Response};
use std::fmt::Write as _;
use std::rc::Rc;

/// nsqd's boolean query values; anything else means the default.
fn bool_arg(v: Option<&str>, default: bool) -> bool {
    match v {
        Some("true") | Some("1") => true,
        Some("false") | Some("0") => false,
        _ => default,
    }
}

async fn gather(shard: &Rc<Shard>, q: StatsQuery) -> Vec<ShardStats> {
    ask::every_shard(shard, || AdminOp::Stats(q.clone()))
        .await
        .into_iter()
        .filter_map(|r| match r {
            AdminResult::Stats(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// `GET /stats?format=json&topic=&channel=&include_clients=&include_mem=&include_positions=`.
pub async fn stats(shard: &Rc<Shard>, req: &Request) -> Handled {
    let q = query(&req.head)?;
    let non_empty = |k: &str| q.get(k).filter(|v| !v.is_empty()).map(str::to_string);
    let query = StatsQuery {
        topic: non_empty("topic"),
        channel: non_empty("channel"),
        include_clients: bool_arg(q.get("include_clients"), true),
        include_positions: bool_arg(q.get("include_positions"), false),
    };
    let include_mem = bool_arg(q.get("include_mem"), true);
    let json = q.get("format") == Some("json");
    let filtered = query.topic.is_some();
    let include_clients = query.include_clients;
    let mut parts = gather(shard, query).await;
    let cluster = shard
        .config
        .cluster
        .as_deref()
        .map(|status| cluster_stats(status, &mut parts));
    let mut doc = merge(parts, include_mem, filtered, include_clients);
    doc.cluster = cluster;
    if json {
        match serde_json::to_vec(&doc) {
            Ok(body) => Ok(Response::json(200, body).nsq_v1().into()),
            Err(_) => Err(ApiError::InternalError),
        }
    } else {
        let uptime = stats::start_time().1.elapsed();
        Ok(Response::text(200, stats::render_text(&doc, uptime))
            .nsq_v1()
            .into())
    }
}

/// The `cluster` object (`--replication-address` only): the session's status and the topic
/// states the shards hold (taken out of `parts`).
fn cluster_stats(status: &crate::cluster::Status, parts: &mut [ShardStats]) -> ClusterStats {
    let mut peers = Vec::new();
    for p in parts.iter_mut() {
        if peers.len() <= p.shard {
            peers.resize(p.shard + 1, Default::default());
        }
        peers[p.shard] = std::mem::take(&mut p.replica_peers);
    }
    ClusterStats {
        broker_id: status.identity.broker_id,
        incarnation: status.identity.incarnation,
        address: status.address.clone(),
        controller_leader: status.controller_leader(),
        view_version: status.view_version(),
        live: status.live(),
        boot_changed: status.identity.boot_changed,
        topics: parts
            .iter_mut()
            .flat_map(|p| std::mem::take(&mut p.replica_topics))
            .collect(),
        peers,
    }
}

/// One document from the shards' answers. As nsqd's `GetStats`: a `topic` filter that names
/// no topic gives `null` topics and producers; producers are `null` when none published or
/// clients were not asked for.
fn merge(
    parts: Vec<ShardStats>,
    include_mem: bool,
    topic_filter: bool,
    include_clients: bool,
) -> StatsDoc {
    let health = parts
        .iter()
        .find_map(|p| p.health.as_ref())
        .map_or_else(|| "OK".to_string(), |r| format!("NOK - {r}"));
    let held = parts.iter().map(|p| p.messages_held).sum();
    let no_such_topic = topic_filter && !parts.iter().any(|p| p.has_topic);
    let mut topics = Vec::new();
    let mut producers = Vec::new();
    for p in parts {
        topics.extend(p.topics);
        producers.extend(p.producers);
    }
    topics.sort_by(|a, b| a.topic_name.cmp(&b.topic_name));
    StatsDoc {
        version: protocol::NSQD_COMPAT_VERSION,
        health,
        start_time: stats::start_unix(),
        topics: (!no_such_topic).then_some(topics),
        memory: include_mem.then(|| MemStats::of_process(held)),
        producers: (include_clients && !no_such_topic && !producers.is_empty())
            .then_some(producers),
        cluster: None,
    }
}

/// `GET /metrics`: topics, channels, clients, shards, in Prometheus' text format 0.0.4.
pub async fn metrics(shard: &Rc<Shard>) -> Handled {
    let parts = gather(
        shard,
        StatsQuery {
            include_clients: false,
            ..StatsQuery::default()
        },
    )
    .await;
    let body = render_metrics(&parts, DiskSpace::of(&shard.config.data_path));
    Ok(Response::empty(200)
        .with_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        .with_body(body)
        .into())
}

/// Writes one metric family: HELP, TYPE, then each sample.
struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render_metrics(parts: &[ShardStats], disk: Option<DiskSpace>) -> String {
    let mut out = String::with_capacity(4096);
    let mut f = Family { out: &mut out };
    let topics: Vec<&stats::TopicStats> = parts.iter().flat_map(|p| &p.topics).collect();

    type TopicGauge = fn(&stats::TopicStats) -> u64;
    let topic_families: [(&str, &str, &str, TopicGauge); 7] = [
        (
            "nsq_topic_depth",
            "gauge",
            "Messages held by the topic itself (no channel yet, or paused).",
            |t| t.depth as u64,
        ),
        (
            "nsq_topic_backend_depth",
            "gauge",
            "The part of nsq_topic_depth beyond --mem-queue-size (on disk only).",
            |t| t.backend_depth as u64,
        ),
        (
            "nsq_topic_messages_total",
            "counter",
            "Messages published to the topic.",
            |t| t.message_count,
        ),
        (
            "nsq_topic_message_bytes_total",
            "counter",
            "Message body bytes published to the topic.",
            |t| t.message_bytes,
        ),
        (
            "nsq_topic_paused",
            "gauge",
            "1 while the topic is paused.",
            |t| u64::from(t.paused),
        ),
        (
            "nsq_topic_channels",
            "gauge",
            "Channels of the topic.",
            |t| t.channels.len() as u64,
        ),
        (
            "nsq_topic_retained_bytes",
            "gauge",
            "Bytes of the topic's segment files (what channels need and what retention keeps).",
            |t| t.file_bytes,
        ),
    ];
    for (name, kind, help, get) in topic_families {
        f.head(name, kind, help);
        for t in &topics {
            f.sample(name, &[("topic", &t.topic_name)], get(t));
        }
    }
    type ReplicaGauge = fn(&stats::ReplicationStats) -> u64;
    let replica_families: [(&str, &str, ReplicaGauge); 4] = [
        (
            "nsq_topic_replicas",
            "The replicated topic's replica count (only replicated topics are listed).",
            |r| r.replicas as u64,
        ),
        (
            "nsq_topic_replica_leader",
            "1 while this broker leads the replicated topic.",
            |r| u64::from(r.role == "leader"),
        ),
        (
            "nsq_topic_replica_in_sync",
            "Members of the replicated topic's in-sync set.",
            |r| r.isr.len() as u64,
        ),
        (
            "nsq_topic_replica_waiting_publishes",
            "Publishes waiting for the in-sync replicas to hold them.",
            |r| r.waiting_publishes as u64,
        ),
    ];
    if topics.iter().any(|t| t.replication.is_some()) {
        for (name, help, get) in replica_families {
            f.head(name, "gauge", help);
            for t in &topics {
                if let Some(r) = &t.replication {
                    f.sample(name, &[("topic", &t.topic_name)], get(r));
                }
            }
        }
    }
    f.head(
        "nsq_topic_shard",
        "gauge",
        "The shard that owns the topic (its CPU, the broker pins shard i to the i-th CPU it may use).",
    );
    for p in parts {
        for t in &p.topics {
            f.sample("nsq_topic_shard", &[("topic", &t.topic_name)], p.shard);
        }
    }

    type ChannelGauge = fn(&stats::ChannelStats) -> u64;
    let channel_families: [(&str, &str, &str, ChannelGauge); 9] = [
        (
            "nsq_channel_depth",
            "gauge",
            "Messages ready for delivery (not in flight, not deferred).",
            |c| c.depth as u64,
        ),
        (
            "nsq_channel_backend_depth",
            "gauge",
            "The part of nsq_channel_depth beyond --mem-queue-size (on disk only).",
            |c| c.backend_depth as u64,
        ),
        (
            "nsq_channel_in_flight",
            "gauge",
            "Messages delivered and not yet finished.",
            |c| c.in_flight_count as u64,
        ),
        (
            "nsq_channel_deferred",
            "gauge",
            "Messages deferred (DPUB, REQ with a delay).",
            |c| c.deferred_count as u64,
        ),
        (
            "nsq_channel_messages_total",
            "counter",
            "Messages the channel received.",
            |c| c.message_count,
        ),
        (
            "nsq_channel_requeued_total",
            "counter",
            "Messages requeued.",
            |c| c.requeue_count,
        ),
        (
            "nsq_channel_timed_out_total",
            "counter",
            "Messages whose in-flight timeout expired.",
            |c| c.timeout_count,
        ),
        (
            "nsq_channel_clients",
            "gauge",
            "Consumers connected to the channel.",
            |c| c.client_count as u64,
        ),
        (
            "nsq_channel_paused",
            "gauge",
            "1 while the channel is paused.",
            |c| u64::from(c.paused),
        ),
    ];
    for (name, kind, help, get) in channel_families {
        f.head(name, kind, help);
        for t in &topics {
            for c in &t.channels {
                f.sample(
                    name,
                    &[("topic", &t.topic_name), ("channel", &c.channel_name)],
                    get(c),
                );
            }
        }
    }

    let name = "nsq_channel_dead_lettered_total";
    f.head(
        name,
        "counter",
        "Messages that reached max attempts (sent to the dead-letter topic, or dropped); only channels with max attempts in force.",
    );
    for t in &topics {
        for c in &t.channels {
            if let Some(d) = &c.dead_letters {
                f.sample(
                    name,
                    &[("topic", &t.topic_name), ("channel", &c.channel_name)],
                    d.dead_lettered_count,
                );
            }
        }
    }

    let name = "nsq_channel_e2e_processing_latency_seconds";
    f.head(
        name,
        "summary",
        "Time from publish to FIN: quantiles over --e2e-processing-latency-window-time, _sum and _count since the channel was made (with --e2e-processing-latency-percentile).",
    );
    for t in &topics {
        for c in &t.channels {
            let labels = [
                ("topic", t.topic_name.as_str()),
                ("channel", &c.channel_name),
            ];
            latency_samples(&mut f, name, &labels, &c.e2e_processing_latency);
        }
    }
    let name = "nsq_topic_e2e_processing_latency_seconds";
    f.head(
        name,
        "summary",
        "Time from publish to FIN over all channels of the topic: quantiles over --e2e-processing-latency-window-time, _sum and _count since start (with --e2e-processing-latency-percentile).",
    );
    for t in &topics {
        let labels = [("topic", t.topic_name.as_str())];
        latency_samples(&mut f, name, &labels, &t.e2e_processing_latency);
    }

    let producers: usize = parts.iter().map(|p| p.producers.len()).sum();
    f.head("nsq_producers", "gauge", "TCP connections that published.");
    f.sample("nsq_producers", &[], producers);
    let healthy = parts.iter().all(|p| p.health.is_none());
    f.head("nsq_healthy", "gauge", "1 while every shard is healthy.");
    f.sample("nsq_healthy", &[], u8::from(healthy));

    type ShardGauge = fn(&ShardStats) -> u64;
    let shard_families: [(&str, &str, &str, ShardGauge); 14] = [
        (
            "nsq_shard_timers",
            "gauge",
            "Timers pending on the shard (in-flight timeouts, deferred messages).",
            |s| s.timers as u64,
        ),
        (
            "nsq_shard_topics",
            "gauge",
            "Topics owned by the shard.",
            |s| s.topics.len() as u64,
        ),
        (
            "nsq_shard_messages_held",
            "gauge",
            "Messages held in memory by the shard's topics and channels.",
            |s| s.messages_held,
        ),
        (
            "nsq_shard_read_cache_bytes",
            "gauge",
            "Bytes of segment blocks the shard holds for channels reading behind memory.",
            |s| s.read_cache_bytes,
        ),
        (
            "nsq_shard_tcp_connections",
            "gauge",
            "TCP client connections on the shard.",
            |s| s.tcp_connections as u64,
        ),
        (
            "nsq_shard_http_connections",
            "gauge",
            "HTTP connections on the shard.",
            |s| s.http_connections,
        ),
        (
            "nsq_shard_http_requests_total",
            "counter",
            "HTTP requests served by the shard.",
            |s| s.http_requests,
        ),
        (
            "nsq_shard_http_handovers_total",
            "counter",
            "HTTP connections handed to the shard of their client's CPU.",
            |s| s.http_handovers,
        ),
        (
            "nsq_shard_tcp_handovers_total",
            "counter",
            "TCP connections the shard moved to the owner of their topic (--move-to-owner).",
            |s| s.tcp_handovers,
        ),
        (
            "nsq_shard_records_written_total",
            "counter",
            "Messages the shard planned into its topics' segment files (written, or being written).",
            |s| s.records_written,
        ),
        (
            "nsq_shard_records_skipped_total",
            "counter",
            "Messages every channel finished before the shard came to write them: never written.",
            |s| s.records_skipped,
        ),
        (
            "nsq_shard_waiting_replies",
            "gauge",
            "Requests of the shard waiting for another shard's reply.",
            |s| s.waiting_replies as u64,
        ),
        (
            "nsq_shard_eager_reads_total",
            "counter",
            "Reads that took a client's next request straight from its socket after an answer.",
            |s| s.eager_reads,
        ),
        (
            "nsq_shard_eager_read_misses_total",
            "counter",
            "Eager reads that found nothing yet (the connection then waited on the reactor).",
            |s| s.eager_read_misses,
        ),
    ];
    for (name, kind, help, get) in shard_families {
        f.head(name, kind, help);
        for s in parts {
            f.sample(name, &[("shard", &s.shard.to_string())], get(s));
        }
    }
    let name = "nsq_shard_outbox_depth";
    f.head(
        name,
        "gauge",
        "Mail queued by a shard for a peer and not yet sent.",
    );
    for s in parts {
        for (peer, depth) in s.outbox_depth.iter().enumerate() {
            if peer == s.shard {
                continue;
            }
            let (from, to) = (s.shard.to_string(), peer.to_string());
            f.sample(name, &[("shard", &from), ("peer", &to)], depth);
        }
    }

    // Omitted when statvfs fails, so that an alert on a ratio sees no series rather than 0.
    if let Some(d) = disk {
        let disk_families = [
            (
                "nsq_data_path_size_bytes",
                "Size of the file system holding --data-path.",
                d.size_bytes,
            ),
            (
                "nsq_data_path_available_bytes",
                "Bytes of that file system the broker's user may still write.",
                d.available_bytes,
            ),
        ];
        for (name, help, value) in disk_families {
            f.head(name, "gauge", help);
            f.sample(name, &[], value);
        }
    }

    let mem = MemStats::of_process(0);
    f.head(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
    );
    f.sample("process_resident_memory_bytes", &[], mem.heap_in_use_bytes);
    f.head(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch in seconds.",
    );
    f.sample("process_start_time_seconds", &[], stats::start_unix());
    out
}

fn latency_samples(f: &mut Family<'_>, name: &str, labels: &[(&str, &str)], l: &Latency) {
    for p in l.percentiles.iter().flatten() {
        let q = p.quantile.to_string();
        let mut with_q: Vec<(&str, &str)> = labels.to_vec();
        with_q.push(("quantile", &q));
        f.sample(name, &with_q, p.value / 1e9);
    }
    // Counters, as Prometheus reads a summary's: dashboards divide their rates.
    f.sample(&format!("{name}_sum"), labels, l.totals.sum_seconds());
    f.sample(&format!("{name}_count"), labels, l.totals.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_is_prometheus_shaped() {
        let part = ShardStats {
            shard: 1,
            outbox_depth: vec![3, 0],
            ..ShardStats::default()
        };
        let text = render_metrics(&[part], None);
        assert!(text.contains("# TYPE nsq_topic_depth gauge\n"));
        assert!(!text.contains("nsq_data_path_"), "{text}");
        assert!(text.contains("nsq_shard_outbox_depth{shard=\"1\",peer=\"0\"} 3\n"));
        assert!(text.contains("nsq_healthy 1\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(line.split(' ').count(), 2, "{line}");
        }
        assert_eq!(escape_label("a\"b\\c"), "a\\\"b\\\\c");
    }

    fn topic_with_channel(latency: Latency) -> stats::TopicStats {
        let channel = stats::ChannelStats {
            channel_name: "c".into(),
            depth: 0,
            backend_depth: 0,
            in_flight_count: 0,
            deferred_count: 0,
            message_count: 0,
            requeue_count: 0,
            timeout_count: 0,
            client_count: 0,
            clients: None,
            paused: false,
            e2e_processing_latency: latency.clone(),
            position: None,
            dead_letters: None,
        };
        stats::TopicStats {
            topic_name: "t".into(),
            channels: vec![channel],
            depth: 0,
            backend_depth: 0,
            message_count: 0,
            message_bytes: 0,
            paused: false,
            e2e_processing_latency: latency,
            retention: None,
            file_bytes: 0,
            replication: None,
        }
    }

    #[test]
    fn summaries_have_sum_in_seconds_and_count() {
        let latency = Latency {
            count: 2,
            percentiles: Some(vec![crate::latency::Percentile {
                quantile: 0.99,
                value: 2_000_000_000.0,
            }]),
            totals: crate::latency::E2eTotals {
                count: 3,
                sum_ns: 4_500_000_000,
            },
        };
        let part = ShardStats {
            topics: vec![topic_with_channel(latency)],
            ..ShardStats::default()
        };
        let text = render_metrics(&[part], None);
        let c = "nsq_channel_e2e_processing_latency_seconds";
        let t = "nsq_topic_e2e_processing_latency_seconds";
        for want in [
            format!("# TYPE {c} summary\n"),
            format!("{c}{{topic=\"t\",channel=\"c\",quantile=\"0.99\"}} 2\n"),
            format!("{c}_sum{{topic=\"t\",channel=\"c\"}} 4.5\n"),
            format!("{c}_count{{topic=\"t\",channel=\"c\"}} 3\n"),
            format!("# TYPE {t} summary\n"),
            format!("{t}{{topic=\"t\",quantile=\"0.99\"}} 2\n"),
            format!("{t}_sum{{topic=\"t\"}} 4.5\n"),
            format!("{t}_count{{topic=\"t\"}} 3\n"),
        ] {
            assert!(text.contains(&want), "no {want:?} in\n{text}");
        }
        // One _sum and one _count per series, whether or not quantiles are configured.
        let without = ShardStats {
            topics: vec![topic_with_channel(Latency::default())],
            ..ShardStats::default()
        };
        let text = render_metrics(&[without], None);
        assert!(text.contains(&format!("{c}_sum{{topic=\"t\",channel=\"c\"}} 0\n")));
        assert!(text.contains(&format!("{t}_count{{topic=\"t\"}} 0\n")));
        assert!(!text.contains("quantile="), "{text}");
        assert_eq!(text.matches("_sum{").count(), 2, "{text}");
        assert_eq!(text.matches("_count{").count(), 2, "{text}");
    }

    #[test]
    fn data_path_space_when_known() {
        let disk = DiskSpace {
            size_bytes: 1000,
            available_bytes: 250,
        };
        let text = render_metrics(&[ShardStats::default()], Some(disk));
        assert!(
            text.contains("# TYPE nsq_data_path_size_bytes gauge\nnsq_data_path_size_bytes 1000\n")
        );
        assert!(text.contains(
            "# TYPE nsq_data_path_available_bytes gauge\nnsq_data_path_available_bytes 250\n"
        ));
    }

    #[test]
    fn bool_args_like_nsqd() {
        assert!(bool_arg(None, true));
        assert!(!bool_arg(Some("false"), true));
        assert!(!bool_arg(Some("0"), true));
        assert!(bool_arg(Some("yes"), true));
    }
}

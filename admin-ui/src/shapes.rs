//! nsqadmin's JSON shapes (its `clusterinfo` types) built from the brokers' `/stats` and the
//! lookups' answers: a topic or channel on one node (`TopicStats` / `ChannelStats` with
//! `node` = `host:http_port`), their totals over the nodes (`node` = `"*"`, the per-node rows
//! in `nodes`), a client (`ClientStats`), a producer (`Producer`), e2e latency aggregates.
//!
//! Invariants: every field nsqadmin writes is present with its JSON type (a missing broker
//! field reads as 0, `""` or false); totals are the sums of the rows in their `nodes`, and
//! `paused` is true when any node has it paused; admin-ui's own additions (a topic row's
//! `channel_count`) only add fields. A node's rows are built from its typed `/stats`
//! ([`crate::wire`]); totals are added up from those rows, as they are what the answer holds.

use crate::wire::{ChannelStats, ClientStats, Latency, TopicStats};
use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// A figure of a row, 0 when it has none.
fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A name of a row, `""` when it has none.
fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A flag of a row, false when it has none.
fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// A list of a row, empty when it has none.
fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The figures a topic total adds up.
const TOPIC_SUMS: &[&str] = &[
    "depth",
    "memory_depth",
    "backend_depth",
    "message_count",
    "delivery_msg_count",
];
/// The figures a channel total adds up.
const CHANNEL_SUMS: &[&str] = &[
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
];

/// A client of a channel on `node` (nsqadmin's `ClientStats`): nsqd's `/stats` fields, its
/// TLS, compression and auth state included, and `connected` (nanoseconds since
/// `connect_ts`).
pub fn client(node: &str, c: &ClientStats) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let connected = now.saturating_sub(c.connect_ts) * 1_000_000_000;
    json!({
        "node": node,
        "remote_address": c.remote_address,
        "version": c.version,
        "client_id": c.client_id,
        "hostname": c.hostname,
        "user_agent": c.user_agent,
        "connect_ts": c.connect_ts,
        "connected": connected,
        "in_flight_count": c.in_flight_count,
        "ready_count": c.ready_count,
        "finish_count": c.finish_count,
        "requeue_count": c.requeue_count,
        "message_count": c.message_count,
        "sample_rate": c.sample_rate,
        "deflate": c.deflate,
        "snappy": c.snappy,
        "authed": c.authed,
        "auth_identity": c.auth_identity,
        "auth_identity_url": c.auth_identity_url,
        "tls": c.tls,
        "tls_cipher_suite": c.tls_cipher_suite,
        "tls_version": c.tls_version,
        "tls_negotiated_protocol": c.tls_negotiated_protocol,
        "tls_negotiated_protocol_is_mutual": c.tls_negotiated_protocol_is_mutual,
    })
}

/// A node's e2e latency as nsqadmin reads it: each percentile's `min`, `max` and `average`
/// are its `value`, its `count` the node's.
fn e2e_of(e: &Latency, node: &str, topic: &str, channel: &str) -> Value {
    let count = e.count;
    let percentiles: Vec<Value> = e
        .percentiles
        .iter()
        .map(|p| {
            let mut row = Map::new();
            if let Some(q) = &p.quantile {
                row.insert("quantile".into(), q.clone().into());
            }
            if let Some(v) = &p.value {
                row.insert("value".into(), v.clone().into());
            }
            let value = p.value.as_ref().and_then(|v| v.as_f64()).unwrap_or(0.0);
            for k in ["min", "max", "average"] {
                row.insert(k.into(), value.into());
            }
            row.insert("count".into(), (count as f64).into());
            Value::Object(row)
        })
        .collect();
    json!({"count": count, "percentiles": percentiles, "topic": topic, "channel": channel,
           "host": node})
}

/// Merges the e2e latency `from` into the total `into` (per quantile: the largest max, the
/// smallest min, the average weighted by count).
fn e2e_add(into: &mut Value, from: &Value) {
    let count = num(into, "count") + num(from, "count");
    let mut merged: Vec<Value> = list(into, "percentiles").to_vec();
    for p in list(from, "percentiles") {
        let q = p.get("quantile").and_then(Value::as_f64).unwrap_or(0.0);
        let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        match merged
            .iter_mut()
            .find(|m| m.get("quantile").and_then(Value::as_f64) == Some(q))
        {
            Some(m) => {
                let (n1, n2) = (f(m, "count"), f(p, "count"));
                let average = if n1 + n2 > 0.0 {
                    (f(m, "average") * n1 + f(p, "average") * n2) / (n1 + n2)
                } else {
                    0.0
                };
                let updated = json!({
                    "quantile": q,
                    "max": f(m, "max").max(f(p, "max")),
                    "min": f(m, "min").min(f(p, "min")),
                    "average": average,
                    "count": n1 + n2,
                });
                *m = updated;
            }
            None => merged.push(json!({
                "quantile": q, "max": f(p, "max"), "min": f(p, "min"),
                "average": f(p, "average"), "count": f(p, "count"),
            })),
        }
    }
    if let Some(o) = into.as_object_mut() {
        o.insert("count".into(), count.into());
        o.insert("percentiles".into(), merged.into());
        o.insert("host".into(), "*".into());
    }
}

/// `row` with the broker's `fields` that it reported (beyond nsqd: present on the broker's
/// topic or channel only while the feature is in force, and so on admin-ui's rows and totals).
fn carry<'a>(
    mut row: Value,
    fields: impl IntoIterator<Item = (&'static str, Option<&'a Value>)>,
) -> Value {
    if let Some(o) = row.as_object_mut() {
        for (k, v) in fields {
            if let Some(v) = v {
                o.insert(k.into(), v.clone());
            }
        }
    }
    row
}

/// A channel of `topic` on one node (nsqadmin's `ChannelStats`), with the broker's
/// dead-letter fields when it has them; its clients when asked.
pub fn channel(node: &str, hostname: &str, topic: &str, ch: &ChannelStats, clients: bool) -> Value {
    let name = ch.channel_name.as_str();
    let clients: Value = if clients {
        ch.clients
            .iter()
            .map(|c| client(node, c))
            .collect::<Vec<_>>()
            .into()
    } else {
        // nsqadmin asks nsqd without clients here: its `clients` is null.
        Value::Null
    };
    let row = json!({
        "node": node,
        "hostname": hostname,
        "topic_name": topic,
        "channel_name": name,
        "depth": ch.depth,
        "memory_depth": ch.depth.saturating_sub(ch.backend_depth),
        "backend_depth": ch.backend_depth,
        "in_flight_count": ch.in_flight_count,
        "deferred_count": ch.deferred_count,
        "requeue_count": ch.requeue_count,
        "timeout_count": ch.timeout_count,
        "message_count": ch.message_count,
        "client_count": ch.client_count.max(ch.clients.len() as u64),
        "nodes": null,
        "clients": clients,
        "paused": ch.paused,
        "e2e_processing_latency": e2e_of(&ch.e2e_processing_latency, node, topic, name),
    });
    carry(row, ch.dead_letter_fields())
}

/// A topic on one node (nsqadmin's `TopicStats`), its channels in `channels`, plus
/// admin-ui's `channel_count` and the broker's `retention` and `replication` blocks when it has
/// them.
pub fn topic(node: &str, hostname: &str, t: &TopicStats, clients: bool) -> Value {
    let name = t.topic_name.as_str();
    let channels: Vec<Value> = t
        .channels
        .iter()
        .map(|c| channel(node, hostname, name, c, clients))
        .collect();
    let row = json!({
        "node": node,
        "hostname": hostname,
        "topic_name": name,
        "depth": t.depth,
        "memory_depth": t.depth.saturating_sub(t.backend_depth),
        "backend_depth": t.backend_depth,
        "message_count": t.message_count,
        "delivery_msg_count": 0,
        "nodes": null,
        "channel_count": channels.len(),
        "channels": channels,
        "paused": t.paused,
        "e2e_processing_latency": e2e_of(&t.e2e_processing_latency, node, name, ""),
    });
    carry(
        row,
        [
            ("retention", t.retention.as_ref()),
            ("replication", t.replication.as_ref()),
        ],
    )
}

/// The retention of a topic over its nodes' `rows` that report one (beyond nsqd): the limits
/// of the first such node (`time_ns`, `bytes`), the bytes kept summed (`retained_bytes`),
/// the oldest message's time over them (`oldest_timestamp`, 0 when none has one), and how
/// many nodes report it (`nodes`); `None` when none does.
fn retention_total(rows: &[Value]) -> Option<Value> {
    let blocks: Vec<&Value> = rows.iter().filter_map(|r| r.get("retention")).collect();
    let first = blocks.first()?;
    let oldest = blocks
        .iter()
        .filter_map(|b| b.get("oldest_timestamp").and_then(Value::as_i64))
        .filter(|t| *t > 0)
        .min()
        .unwrap_or(0);
    Some(json!({
        "time_ns": num(first, "time_ns"),
        "bytes": num(first, "bytes"),
        "retained_bytes": blocks.iter().map(|b| num(b, "retained_bytes")).sum::<u64>(),
        "oldest_timestamp": oldest,
        "nodes": blocks.len(),
    }))
}

/// Adds `row`'s figures (`keys`) into `total`, its pause and its e2e latency.
fn add(total: &mut Map<String, Value>, row: &Value, keys: &[&str]) {
    for k in keys {
        let sum = total.get(*k).and_then(Value::as_u64).unwrap_or(0) + num(row, k);
        total.insert((*k).into(), sum.into());
    }
    if flag(row, "paused") {
        total.insert("paused".into(), true.into());
    }
    if let Some(e) = total.get_mut("e2e_processing_latency") {
        e2e_add(e, row.get("e2e_processing_latency").unwrap_or(&Value::Null));
    }
    total.insert("node".into(), "*".into());
}

/// A fresh total: every figure 0, not paused, no e2e samples.
fn zero(topic: &str, channel: Option<&str>, keys: &[&str]) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("node".into(), "".into());
    m.insert("hostname".into(), "".into());
    m.insert("topic_name".into(), topic.into());
    if let Some(c) = channel {
        m.insert("channel_name".into(), c.into());
    }
    for k in keys {
        m.insert((*k).into(), 0.into());
    }
    m.insert("paused".into(), false.into());
    m.insert(
        "e2e_processing_latency".into(),
        json!({"count": 0, "percentiles": [], "topic": topic,
               "channel": channel.unwrap_or_default(), "host": ""}),
    );
    m
}

/// The sort key nsqadmin orders node rows and clients by.
fn by_hostname(a: &Value, b: &Value) -> std::cmp::Ordering {
    (text(a, "hostname"), text(a, "node")).cmp(&(text(b, "hostname"), text(b, "node")))
}

/// A channel over the nodes that have it: `rows` (from [`channel`]) added up, in `nodes`,
/// their clients together in `clients`.
pub fn channel_total(topic: &str, name: &str, mut rows: Vec<Value>) -> Map<String, Value> {
    let mut total = zero(topic, Some(name), CHANNEL_SUMS);
    let mut clients = Vec::new();
    rows.sort_by(by_hostname);
    for r in &rows {
        add(&mut total, r, CHANNEL_SUMS);
        clients.extend(list(r, "clients").iter().cloned());
    }
    clients.sort_by(by_hostname);
    if let Some(first) = rows.iter().find(|r| r.get("max_attempts").is_some()) {
        let dead: u64 = rows.iter().map(|r| num(r, "dead_lettered_count")).sum();
        total.insert("dead_lettered_count".into(), dead.into());
        for k in ["max_attempts", "dead_letter_topic"] {
            total.insert(k.into(), first.get(k).cloned().unwrap_or(Value::Null));
        }
    }
    total.insert("nodes".into(), rows.into());
    total.insert("clients".into(), clients.into());
    total
}

/// A topic over its nodes: `rows` (from [`topic`]) added up, in `nodes`, and its channels
/// each added up over the nodes that have it (sorted by name).
pub fn topic_total(topic: &str, mut rows: Vec<Value>) -> Map<String, Value> {
    let mut total = zero(topic, None, TOPIC_SUMS);
    let mut channels: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    rows.sort_by(by_hostname);
    for r in &rows {
        add(&mut total, r, TOPIC_SUMS);
        for c in list(r, "channels") {
            channels
                .entry(text(c, "channel_name").to_owned())
                .or_default()
                .push(c.clone());
        }
    }
    let channels: Vec<Value> = channels
        .into_iter()
        .map(|(name, rows)| Value::Object(channel_total(topic, &name, rows)))
        .collect();
    if let Some(r) = retention_total(&rows) {
        total.insert("retention".into(), r);
    }
    total.insert("nodes".into(), rows.into());
    total.insert("channels".into(), channels.into());
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `v` read as a broker's `/stats` part.
    fn parsed<T: serde::de::DeserializeOwned>(v: &Value) -> T {
        serde_json::from_value(v.clone()).unwrap()
    }

    #[test]
    fn beyond_nsqd_fields_only_where_the_brokers_report_them() {
        let plain = json!({"topic_name": "t", "channels": [{"channel_name": "c"}]});
        let kept = json!({"topic_name": "t", "retention": {"time_ns": 5, "bytes": 0,
            "retained_bytes": 100, "oldest_timestamp": 40},
            "channels": [{"channel_name": "c", "max_attempts": 3, "dead_letter_topic": "d",
                          "dead_lettered_count": 2}]});
        let t = topic_total(
            "t",
            vec![
                topic("a:1", "a", &parsed(&plain), false),
                topic("b:1", "b", &parsed(&kept), false),
            ],
        );
        assert_eq!(
            t["retention"],
            json!({"time_ns": 5, "bytes": 0, "retained_bytes": 100, "oldest_timestamp": 40,
                   "nodes": 1})
        );
        assert!(t["nodes"][0].get("retention").is_none());
        let c = &t["channels"][0];
        assert_eq!(
            (
                c["max_attempts"].as_u64(),
                c["dead_lettered_count"].as_u64()
            ),
            (Some(3), Some(2))
        );
        let only_plain = topic_total("t", vec![topic("a:1", "a", &parsed(&plain), false)]);
        assert!(only_plain.get("retention").is_none());
        assert!(only_plain["channels"][0].get("max_attempts").is_none());
    }

    #[test]
    fn totals_add_up_and_pause_spreads() {
        let t1 = json!({"topic_name": "t", "depth": 5, "backend_depth": 2, "message_count": 7,
            "paused": false, "channels": [{"channel_name": "c", "depth": 1, "client_count": 1,
            "clients": [{"client_id": "x", "hostname": "h"}]}]});
        let t2 = json!({"topic_name": "t", "depth": 1, "backend_depth": 0, "message_count": 1,
            "paused": true, "channels": [{"channel_name": "c", "depth": 2, "paused": true}]});
        let rows = vec![
            topic("b:2", "hb", &parsed(&t2), true),
            topic("a:1", "ha", &parsed(&t1), true),
        ];
        let total = Value::Object(topic_total("t", rows));
        assert_eq!(total["node"], "*");
        assert_eq!(
            (total["depth"].clone(), total["memory_depth"].clone()),
            (json!(6), json!(4))
        );
        assert_eq!(total["message_count"], 8);
        assert_eq!(total["paused"], true);
        assert_eq!(total["nodes"][0]["node"], "a:1", "sorted by hostname");
        assert_eq!(total["nodes"][0]["channel_count"], 1);
        let c = &total["channels"][0];
        assert_eq!(
            (c["node"].clone(), c["depth"].clone()),
            (json!("*"), json!(3))
        );
        assert_eq!(
            (c["paused"].clone(), c["client_count"].clone()),
            (json!(true), json!(1))
        );
        assert_eq!(c["clients"][0]["node"], "a:1");
        let empty = Value::Object(topic_total("t", Vec::new()));
        assert_eq!(
            (empty["node"].clone(), empty["depth"].clone()),
            (json!(""), json!(0))
        );
    }

    #[test]
    fn e2e_percentiles_merge() {
        let a = json!({"e2e_processing_latency": {"count": 1,
            "percentiles": [{"quantile": 0.99, "value": 10.0}]}});
        let b = json!({"e2e_processing_latency": {"count": 3,
            "percentiles": [{"quantile": 0.99, "value": 2.0}]}});
        let mut total = json!({"count": 0, "percentiles": []});
        let (a, b): (TopicStats, TopicStats) = (parsed(&a), parsed(&b));
        e2e_add(&mut total, &e2e_of(&a.e2e_processing_latency, "a", "t", ""));
        e2e_add(&mut total, &e2e_of(&b.e2e_processing_latency, "b", "t", ""));
        let p = &total["percentiles"][0];
        assert_eq!(total["count"], 4);
        assert_eq!(
            (p["max"].clone(), p["min"].clone()),
            (json!(10.0), json!(2.0))
        );
        assert_eq!(p["average"], 4.0);
        assert_eq!(total["host"], "*");
    }

    #[test]
    fn client_rows_carry_tls_compression_and_auth_state() {
        let from_stats = json!({
            "client_id": "c", "hostname": "h", "remote_address": "127.0.0.1:5", "version": "V2",
            "user_agent": "pynsq/0.9.1", "ready_count": 3, "sample_rate": 0,
            "tls": true, "tls_version": "TLS1.3", "tls_cipher_suite": "TLS_AES_128_GCM_SHA256",
            "snappy": false, "deflate": true,
            "authed": true, "auth_identity": "alice", "auth_identity_url": "https://id/alice",
        });
        let row = client("n:1", &parsed(&from_stats));
        assert_eq!(row["node"], "n:1");
        assert_eq!(row["ready_count"], 3);
        assert_eq!(row["tls"], true);
        assert_eq!(row["tls_cipher_suite"], "TLS_AES_128_GCM_SHA256");
        assert_eq!(row["deflate"], true);
        assert_eq!(row["auth_identity_url"], "https://id/alice");
        // nsqd leaves authed and the identity out when the client has none
        let plain = client("n:1", &parsed(&json!({"client_id": "p", "tls": false})));
        assert_eq!(plain["authed"], false);
        assert_eq!(plain["auth_identity"], "");
        assert_eq!(plain["tls_version"], "");
    }
}

//! The cluster as admin-ui sees it: gathered, on every request, from the lookups' and the
//! brokers' HTTP APIs (nothing is cached, so a page is never stale), and the actions an
//! operator takes, fanned out to every broker (and lookup) concerned.
//!
//! Nodes are named `host:http_port`: a lookup producer's `broadcast_address:http_port`, or a
//! `--nsqd-http-address` as given. A lookup or broker that does not answer is left out of the
//! figures and named in the answer's warnings; an action that fails anywhere is an error that
//! says where.

use crate::upstream::Upstream;
use http1::percent_encode;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Answers gathered from several lookups or brokers at once.
pub struct Gathered<T> {
    /// Each address that answered, with its answer, in the order asked.
    pub answers: Vec<(String, T)>,
    /// One line for each that did not.
    pub warnings: Vec<String>,
}

/// Runs `ask` on every address at once, a thread each (there are few, and each waits on the
/// network).
pub fn gather<T: Send>(
    addrs: &[String],
    ask: impl Fn(&str) -> Result<T, String> + Sync,
) -> Gathered<T> {
    let results: Vec<(String, Result<T, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = addrs.iter().map(|a| (a, s.spawn(|| ask(a)))).collect();
        handles
            .into_iter()
            .map(|(a, h)| {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err(format!("{a}: the request panicked")));
                (a.clone(), r)
            })
            .collect()
    });
    let mut g = Gathered {
        answers: Vec::new(),
        warnings: Vec::new(),
    };
    for (a, r) in results {
        match r {
            Ok(v) => g.answers.push((a, v)),
            Err(e) => g.warnings.push(e),
        }
    }
    g
}

/// Why a read or an action could not be answered as asked.
#[derive(Debug)]
pub enum Failure {
    /// Nothing by that name (the code to answer with, e.g. `TOPIC_NOT_FOUND`).
    NotFound(&'static str),
    /// The request cannot be carried out as configured (the code to answer with).
    Refused(&'static str),
    /// An action failed on some node or lookup: what each said.
    Upstream(String),
}

/// A broker as the nodes page shows it.
#[derive(Debug, Clone)]
struct Node {
    node: String,
    hostname: String,
    broadcast_address: String,
    tcp_port: u64,
    http_port: u64,
    version: String,
    topics: BTreeSet<String>,
}

impl Node {
    fn to_json(&self) -> Value {
        json!({
            "node": self.node,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "topics": self.topics,
        })
    }
}

/// The lookups and brokers admin-ui was given, and how to ask them.
pub struct Cluster {
    /// Changed at run time by `PUT /config/nsqlookupd_http_addresses`.
    lookups: std::sync::RwLock<Vec<String>>,
    pub brokers: Vec<String>,
    pub upstream: std::sync::Arc<Upstream>,
}

/// Counters a topic, a channel or a node row adds up.
const TOPIC_COUNTS: &[&str] = &["depth", "backend_depth", "message_count"];
const CHANNEL_COUNTS: &[&str] = &[
    "depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
];

fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// A client of a channel on `node`, as the channel and node pages show it: nsqd's `/stats`
/// fields, its TLS, compression and auth state included (absent fields read as empty/false,
/// as nsqd leaves `authed` and the identity out when there is none).
fn client_row(node: &str, c: &Value) -> Value {
    json!({
        "node": node,
        "client_id": text(c, "client_id"),
        "hostname": text(c, "hostname"),
        "remote_address": text(c, "remote_address"),
        "user_agent": text(c, "user_agent"),
        "version": text(c, "version"),
        "ready_count": num(c, "ready_count"),
        "in_flight_count": num(c, "in_flight_count"),
        "message_count": num(c, "message_count"),
        "finish_count": num(c, "finish_count"),
        "requeue_count": num(c, "requeue_count"),
        "connect_ts": num(c, "connect_ts"),
        "sample_rate": num(c, "sample_rate"),
        "tls": flag(c, "tls"),
        "tls_version": text(c, "tls_version"),
        "tls_cipher_suite": text(c, "tls_cipher_suite"),
        "tls_negotiated_protocol": text(c, "tls_negotiated_protocol"),
        "tls_negotiated_protocol_is_mutual": flag(c, "tls_negotiated_protocol_is_mutual"),
        "snappy": flag(c, "snappy"),
        "deflate": flag(c, "deflate"),
        "authed": flag(c, "authed"),
        "auth_identity": text(c, "auth_identity"),
        "auth_identity_url": text(c, "auth_identity_url"),
    })
}

/// The listed counters of `from`, with `memory_depth` (depth not on disk) and `paused`.
fn counts(from: &Value, keys: &[&str]) -> Map<String, Value> {
    let mut m = Map::new();
    for k in keys {
        m.insert((*k).into(), num(from, k).into());
    }
    m.insert(
        "memory_depth".into(),
        num(from, "depth")
            .saturating_sub(num(from, "backend_depth"))
            .into(),
    );
    m.insert(
        "paused".into(),
        from.get("paused")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .into(),
    );
    m
}

/// Adds the counters of `from` into `into` (paused when either is).
fn add(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        let merged = match (into.get(k), v) {
            (Some(Value::Bool(a)), Value::Bool(b)) => Value::Bool(*a || *b),
            (Some(a), b) => (a.as_u64().unwrap_or(0) + b.as_u64().unwrap_or(0)).into(),
            (None, b) => b.clone(),
        };
        into.insert(k.clone(), merged);
    }
}

impl Cluster {
    pub fn new(lookups: Vec<String>, brokers: Vec<String>, upstream: std::sync::Arc<Upstream>) -> Cluster {
        Cluster {
            lookups: std::sync::RwLock::new(lookups),
            brokers,
            upstream,
        }
    }

    /// The lookups now.
    pub fn lookup_addrs(&self) -> Vec<String> {
        self.lookups.read().map(|l| l.clone()).unwrap_or_default()
    }

    /// Replaces the lookups (for the requests that start from now on).
    pub fn set_lookups(&self, lookups: Vec<String>) {
        if let Ok(mut l) = self.lookups.write() {
            *l = lookups;
        }
    }

    /// Every node's name: the lookups' producers and the configured brokers.
    fn node_names(&self) -> (Vec<String>, Vec<String>) {
        let (producers, warnings) = self.producers();
        let mut names: BTreeSet<String> = producers.into_iter().map(|n| n.node).collect();
        names.extend(self.brokers.iter().cloned());
        (names.into_iter().collect(), warnings)
    }

    /// The producers every lookup lists (their topics as the lookups know them).
    fn producers(&self) -> (Vec<Node>, Vec<String>) {
        let g = gather(&self.lookup_addrs(), |l| self.upstream.get_json(l, "/nodes"));
        let mut nodes = Vec::new();
        for (_, answer) in &g.answers {
            for p in list(answer, "producers") {
                let node = format!("{}:{}", text(p, "broadcast_address"), num(p, "http_port"));
                nodes.push(Node {
                    node,
                    hostname: text(p, "hostname").into(),
                    broadcast_address: text(p, "broadcast_address").into(),
                    tcp_port: num(p, "tcp_port"),
                    http_port: num(p, "http_port"),
                    version: text(p, "version").into(),
                    topics: list(p, "topics")
                        .iter()
                        .filter_map(|t| t.as_str().map(String::from))
                        .collect(),
                });
            }
        }
        (nodes, g.warnings)
    }

    /// Every node's `/stats` (for one topic when given).
    fn stats(&self, topic: Option<&str>) -> Gathered<Value> {
        let (names, warnings) = self.node_names();
        let path = match topic {
            Some(t) => format!("/stats?format=json&topic={}", percent_encode(t)),
            None => "/stats?format=json".to_owned(),
        };
        let mut g = gather(&names, |n| self.upstream.get_json(n, &path));
        g.warnings.splice(0..0, warnings);
        g
    }

    /// Nodes with `topic`, and that topic's figures on each.
    fn topic_on_nodes(&self, topic: &str) -> (Vec<(String, Value)>, Vec<String>) {
        let g = self.stats(Some(topic));
        let found = g
            .answers
            .into_iter()
            .filter_map(|(node, stats)| {
                list(&stats, "topics")
                    .iter()
                    .find(|t| text(t, "topic_name") == topic)
                    .map(|t| (node, t.clone()))
            })
            .collect();
        (found, g.warnings)
    }

    /// `GET /api/topics`.
    pub fn topics(&self) -> Value {
        let from_lookups = gather(&self.lookup_addrs(), |l| self.upstream.get_json(l, "/topics"));
        let mut topics = BTreeSet::new();
        for (_, answer) in &from_lookups.answers {
            for t in list(answer, "topics") {
                if let Some(t) = t.as_str() {
                    topics.insert(t.to_owned());
                }
            }
        }
        let (nodes, mut warnings) = self.nodes_list();
        for n in nodes {
            topics.extend(n.topics);
        }
        warnings.splice(0..0, from_lookups.warnings);
        json!({"topics": topics, "warnings": dedup(warnings)})
    }

    /// `GET /api/topics/{topic}`.
    pub fn topic(&self, topic: &str) -> Result<Value, Failure> {
        let (on_nodes, warnings) = self.topic_on_nodes(topic);
        if on_nodes.is_empty() {
            return Err(Failure::NotFound("TOPIC_NOT_FOUND"));
        }
        let mut totals = Map::new();
        let mut nodes = Vec::new();
        let mut channels: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
        for (node, t) in &on_nodes {
            let c = counts(t, TOPIC_COUNTS);
            add(&mut totals, &c);
            let mut row = c;
            row.insert("node".into(), node.clone().into());
            row.insert("channel_count".into(), list(t, "channels").len().into());
            nodes.push(Value::Object(row));
            for ch in list(t, "channels") {
                let entry = channels
                    .entry(text(ch, "channel_name").to_owned())
                    .or_default();
                add(entry, &counts(ch, CHANNEL_COUNTS));
            }
        }
        let channels: Vec<Value> = channels
            .into_iter()
            .map(|(name, mut c)| {
                c.insert("channel_name".into(), name.into());
                Value::Object(c)
            })
            .collect();
        let mut answer = totals;
        answer.insert("topic_name".into(), topic.into());
        answer.insert("nodes".into(), nodes.into());
        answer.insert("channels".into(), channels.into());
        answer.insert("warnings".into(), dedup(warnings).into());
        Ok(Value::Object(answer))
    }

    /// `GET /api/topics/{topic}/{channel}`.
    pub fn channel(&self, topic: &str, channel: &str) -> Result<Value, Failure> {
        let (on_nodes, warnings) = self.topic_on_nodes(topic);
        let mut totals = Map::new();
        let mut nodes = Vec::new();
        let mut clients = Vec::new();
        for (node, t) in &on_nodes {
            let Some(ch) = list(t, "channels")
                .iter()
                .find(|c| text(c, "channel_name") == channel)
            else {
                continue;
            };
            let c = counts(ch, CHANNEL_COUNTS);
            add(&mut totals, &c);
            let mut row = c;
            row.insert("node".into(), node.clone().into());
            nodes.push(Value::Object(row));
            clients.extend(list(ch, "clients").iter().map(|c| client_row(node, c)));
        }
        if nodes.is_empty() {
            return Err(Failure::NotFound("CHANNEL_NOT_FOUND"));
        }
        let mut answer = totals;
        answer.insert("topic_name".into(), topic.into());
        answer.insert("channel_name".into(), channel.into());
        answer.insert("nodes".into(), nodes.into());
        answer.insert("clients".into(), clients.into());
        answer.insert("warnings".into(), dedup(warnings).into());
        Ok(Value::Object(answer))
    }

    /// Every node, with its topics: the lookups' producers, and the configured brokers read
    /// through their own `/info` and `/stats`.
    fn nodes_list(&self) -> (Vec<Node>, Vec<String>) {
        let (producers, mut warnings) = self.producers();
        let configured = gather(&self.brokers, |b| {
            let info = self.upstream.get_json(b, "/info")?;
            let stats = self.upstream.get_json(b, "/stats?format=json")?;
            Ok(Node {
                node: b.to_owned(),
                hostname: text(&info, "hostname").into(),
                broadcast_address: text(&info, "broadcast_address").into(),
                tcp_port: num(&info, "tcp_port"),
                http_port: num(&info, "http_port"),
                version: text(&info, "version").into(),
                topics: list(&stats, "topics")
                    .iter()
                    .map(|t| text(t, "topic_name").to_owned())
                    .collect(),
            })
        });
        warnings.extend(configured.warnings);
        let mut by_name: BTreeMap<String, Node> = BTreeMap::new();
        for n in producers
            .into_iter()
            .chain(configured.answers.into_iter().map(|(_, n)| n))
        {
            match by_name.get_mut(&n.node) {
                Some(known) => known.topics.extend(n.topics),
                None => {
                    by_name.insert(n.node.clone(), n);
                }
            }
        }
        (by_name.into_values().collect(), warnings)
    }

    /// `GET /api/nodes`.
    pub fn nodes(&self) -> Value {
        let (nodes, warnings) = self.nodes_list();
        let nodes: Vec<Value> = nodes.iter().map(Node::to_json).collect();
        json!({"nodes": nodes, "warnings": dedup(warnings)})
    }

    /// `GET /api/nodes/{node}`.
    pub fn node(&self, node: &str) -> Result<Value, Failure> {
        let (names, mut warnings) = self.node_names();
        if !names.iter().any(|n| n == node) {
            return Err(Failure::NotFound("NODE_NOT_FOUND"));
        }
        let stats = match self.upstream.get_json(node, "/stats?format=json") {
            Ok(s) => s,
            Err(e) => {
                warnings.push(e);
                Value::Null
            }
        };
        let mut total_messages = 0;
        let mut total_clients = 0;
        let topics: Vec<Value> = list(&stats, "topics")
            .iter()
            .map(|t| {
                total_messages += num(t, "message_count");
                let channels: Vec<Value> = list(t, "channels")
                    .iter()
                    .map(|c| {
                        total_clients += num(c, "client_count");
                        let mut row = counts(c, CHANNEL_COUNTS);
                        row.insert("channel_name".into(), text(c, "channel_name").into());
                        let clients: Vec<Value> = list(c, "clients")
                            .iter()
                            .map(|cl| client_row(node, cl))
                            .collect();
                        row.insert("clients".into(), clients.into());
                        Value::Object(row)
                    })
                    .collect();
                let mut row = counts(t, TOPIC_COUNTS);
                row.insert("topic_name".into(), text(t, "topic_name").into());
                row.insert("channels".into(), channels.into());
                Value::Object(row)
            })
            .collect();
        Ok(json!({
            "node": node,
            "version": text(&stats, "version"),
            "health": text(&stats, "health"),
            "start_time": num(&stats, "start_time"),
            "total_messages": total_messages,
            "total_clients": total_clients,
            "topics": topics,
            "warnings": dedup(warnings),
        }))
    }

    /// `GET /api/counter`.
    pub fn counter(&self) -> Value {
        let g = self.stats(None);
        let mut per_topic: BTreeMap<String, u64> = BTreeMap::new();
        for (_, stats) in &g.answers {
            for t in list(stats, "topics") {
                *per_topic
                    .entry(text(t, "topic_name").to_owned())
                    .or_default() += num(t, "message_count");
            }
        }
        let total: u64 = per_topic.values().sum();
        let topics: Vec<Value> = per_topic
            .into_iter()
            .map(|(t, n)| json!({"topic_name": t, "message_count": n}))
            .collect();
        json!({"message_count": total, "topics": topics, "warnings": dedup(g.warnings)})
    }

    /// `GET /api/lookups`.
    pub fn lookups(&self) -> Value {
        let addrs = self.lookup_addrs();
        let g = gather(&addrs, |l| {
            let topics = self.upstream.get_json(l, "/topics")?;
            let mut out = Vec::new();
            for t in list(&topics, "topics").iter().filter_map(Value::as_str) {
                let channels = self
                    .upstream
                    .get_json(l, &format!("/channels?topic={}", percent_encode(t)))?;
                out.push(json!({"topic_name": t, "channels": list(&channels, "channels")}));
            }
            Ok(out)
        });
        let mut answered: BTreeMap<&str, &Vec<Value>> = BTreeMap::new();
        for (l, topics) in &g.answers {
            answered.insert(l, topics);
        }
        let lookups: Vec<Value> = addrs
            .iter()
            .map(|l| match answered.get(l.as_str()) {
                Some(topics) => json!({"address": l, "reachable": true, "topics": topics}),
                None => json!({"address": l, "reachable": false, "topics": []}),
            })
            .collect();
        json!({"lookups": lookups, "warnings": g.warnings})
    }

    /// `POST /api/topics`: the topic (and channel) created at every lookup, or at every
    /// configured broker when there are no lookups; a channel also on every broker that has
    /// the topic (as nsqadmin).
    pub fn create(&self, topic: &str, channel: Option<&str>) -> Result<Vec<String>, Failure> {
        let lookups = self.lookup_addrs();
        let targets = if lookups.is_empty() {
            &self.brokers
        } else {
            &lookups
        };
        let mut failed = everywhere(
            &self.upstream,
            targets,
            &format!("/topic/create?topic={}", percent_encode(topic)),
        );
        if let Some(c) = channel {
            let path = format!(
                "/channel/create?topic={}&channel={}",
                percent_encode(topic),
                percent_encode(c)
            );
            failed.extend(everywhere(&self.upstream, targets, &path));
            if !lookups.is_empty() {
                let (on_nodes, warnings) = self.topic_on_nodes(topic);
                failed.extend(warnings);
                let nodes: Vec<String> = on_nodes.into_iter().map(|(n, _)| n).collect();
                failed.extend(everywhere(&self.upstream, &nodes, &path));
            }
        }
        Ok(dedup(failed))
    }

    /// The brokers that have `topic` (and `channel`), with what did not answer; an error when
    /// none has it: not found, or nothing answered at all.
    fn holders(
        &self,
        topic: &str,
        channel: Option<&str>,
    ) -> Result<(Vec<String>, Vec<String>), Failure> {
        let (on_nodes, warnings) = self.topic_on_nodes(topic);
        let nodes: Vec<String> = on_nodes
            .into_iter()
            .filter(|(_, t)| match channel {
                None => true,
                Some(channel) => list(t, "channels")
                    .iter()
                    .any(|c| text(c, "channel_name") == channel),
            })
            .map(|(n, _)| n)
            .collect();
        match (nodes.is_empty(), warnings.is_empty(), channel) {
            (true, false, _) => Err(Failure::Upstream(warnings.join("; "))),
            (true, true, None) => Err(Failure::NotFound("TOPIC_NOT_FOUND")),
            (true, true, Some(_)) => Err(Failure::NotFound("CHANNEL_NOT_FOUND")),
            (false, _, _) => Ok((nodes, warnings)),
        }
    }

    /// `POST /api/topics/{topic}` (pause, unpause, empty) on every broker that has it.
    pub fn topic_action(&self, topic: &str, action: &str) -> Result<Vec<String>, Failure> {
        let (nodes, mut failed) = self.holders(topic, None)?;
        let path = format!("/topic/{action}?topic={}", percent_encode(topic));
        failed.extend(everywhere(&self.upstream, &nodes, &path));
        Ok(failed)
    }

    /// `DELETE /api/topics/{topic}`: at every lookup, then on every broker that has it.
    pub fn delete_topic(&self, topic: &str) -> Result<Vec<String>, Failure> {
        let (on_nodes, mut failed) = self.topic_on_nodes(topic);
        let path = format!("/topic/delete?topic={}", percent_encode(topic));
        failed.extend(everywhere(&self.upstream, &self.lookup_addrs(), &path));
        let nodes: Vec<String> = on_nodes.into_iter().map(|(n, _)| n).collect();
        failed.extend(everywhere(&self.upstream, &nodes, &path));
        Ok(failed)
    }

    /// `POST /api/topics/{topic}/{channel}` (pause, unpause, empty) on every broker that has it.
    pub fn channel_action(
        &self,
        topic: &str,
        channel: &str,
        action: &str,
    ) -> Result<Vec<String>, Failure> {
        let (nodes, mut failed) = self.holders(topic, Some(channel))?;
        let path = format!(
            "/channel/{action}?topic={}&channel={}",
            percent_encode(topic),
            percent_encode(channel)
        );
        failed.extend(everywhere(&self.upstream, &nodes, &path));
        Ok(failed)
    }

    /// `DELETE /api/topics/{topic}/{channel}`: at every lookup, then on every broker that has
    /// it.
    pub fn delete_channel(&self, topic: &str, channel: &str) -> Result<Vec<String>, Failure> {
        let (nodes, mut failed) = match self.holders(topic, Some(channel)) {
            Ok(found) => found,
            Err(Failure::Upstream(why)) => (Vec::new(), vec![why]),
            Err(_) => (Vec::new(), Vec::new()),
        };
        let path = format!(
            "/channel/delete?topic={}&channel={}",
            percent_encode(topic),
            percent_encode(channel)
        );
        failed.extend(everywhere(&self.upstream, &self.lookup_addrs(), &path));
        failed.extend(everywhere(&self.upstream, &nodes, &path));
        Ok(failed)
    }

    /// `DELETE /api/nodes/{node}`: the node's registration of `topic` tombstoned at every
    /// lookup, then the topic deleted on that node, as nsqadmin 1.3 does.
    pub fn tombstone(&self, node: &str, topic: &str) -> Result<Vec<String>, Failure> {
        let lookups = self.lookup_addrs();
        if lookups.is_empty() {
            // Registrations live in lookups: without any there is nothing to tombstone.
            return Err(Failure::Refused("NO_LOOKUPS"));
        }
        let (names, _) = self.node_names();
        if !names.iter().any(|n| n == node) {
            return Err(Failure::NotFound("NODE_NOT_FOUND"));
        }
        let mut failed = everywhere(
            &self.upstream,
            &lookups,
            &format!(
                "/topic/tombstone?topic={}&node={}",
                percent_encode(topic),
                percent_encode(node)
            ),
        );
        let delete = format!("/topic/delete?topic={}", percent_encode(topic));
        failed.extend(everywhere(&self.upstream, &[node.to_owned()], &delete));
        Ok(failed)
    }
}

/// POSTs `path` to every address; what each that failed said (nsqadmin answers these as a
/// warning, the action done elsewhere).
fn everywhere(upstream: &Upstream, addrs: &[String], path: &str) -> Vec<String> {
    gather(addrs, |a| upstream.post(a, path)).warnings
}

/// `v` without repeats, first occurrences kept in order.
pub(crate) fn dedup(mut v: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    v.retain(|w| seen.insert(w.clone()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_and_pause_spreads() {
        let a = counts(
            &json!({"depth": 5, "backend_depth": 2, "paused": false}),
            &["depth", "backend_depth"],
        );
        let b = counts(
            &json!({"depth": 1, "backend_depth": 0, "paused": true}),
            &["depth", "backend_depth"],
        );
        let mut total = Map::new();
        add(&mut total, &a);
        add(&mut total, &b);
        assert_eq!(
            Value::Object(total),
            json!({"depth": 6, "backend_depth": 2, "memory_depth": 4, "paused": true})
        );
    }

    #[test]
    fn gather_keeps_answers_in_order_and_failures_as_warnings() {
        let addrs: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let g = gather(&addrs, |a| {
            if a == "b" {
                Err(format!("{a} down"))
            } else {
                Ok(a.len())
            }
        });
        assert_eq!(g.answers, vec![("a".to_string(), 1), ("c".to_string(), 1)]);
        assert_eq!(g.warnings, ["b down"]);
    }

    #[test]
    fn client_rows_carry_tls_compression_and_auth_state() {
        let from_stats = json!({
            "client_id": "c", "hostname": "h", "remote_address": "127.0.0.1:5", "version": "V2",
            "user_agent": "pynsq/0.9.1", "ready_count": 3, "sample_rate": 0,
            "tls": true, "tls_version": "TLS1.3", "tls_cipher_suite": "TLS_AES_128_GCM_SHA256",
            "tls_negotiated_protocol": "", "tls_negotiated_protocol_is_mutual": false,
            "snappy": false, "deflate": true,
            "authed": true, "auth_identity": "alice", "auth_identity_url": "https://id/alice",
        });
        let row = client_row("n:1", &from_stats);
        assert_eq!(row["node"], "n:1");
        assert_eq!(row["ready_count"], 3);
        assert_eq!(row["tls"], true);
        assert_eq!(row["tls_version"], "TLS1.3");
        assert_eq!(row["tls_cipher_suite"], "TLS_AES_128_GCM_SHA256");
        assert_eq!(
            (row["snappy"].clone(), row["deflate"].clone()),
            (json!(false), json!(true))
        );
        assert_eq!(row["authed"], true);
        assert_eq!(row["auth_identity"], "alice");
        assert_eq!(row["auth_identity_url"], "https://id/alice");
        // nsqd leaves authed and the identity out when the client has none
        let plain = client_row("n:1", &json!({"client_id": "p", "tls": false}));
        assert_eq!(plain["authed"], false);
        assert_eq!(plain["auth_identity"], "");
        assert_eq!(plain["auth_identity_url"], "");
        assert_eq!(plain["tls_version"], "");
    }
}

//! The cluster as admin-ui sees it: gathered, on every request, from the lookups' and the
//! brokers' HTTP APIs (nothing is cached, so a page is never stale), and the actions an
//! operator takes, fanned out to every broker (and lookup) concerned.
//!
//! Nodes are named `host:http_port`: a lookup producer's `broadcast_address:http_port`, or a
//! `--nsqd-http-address` as given. A lookup or broker that does not answer is left out of the
//! figures and named in the answer's warnings; an action that fails anywhere is an error that
//! says where.

use crate::shapes;
use crate::upstream::Upstream;
use crate::warnings::{dedup, with_warnings};
use crate::wire::{Channels, Info, Lookup, Nodes, Stats, TopicStats, Topics};
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
/// network); each failure becomes its text.
pub fn gather<T: Send, E: std::fmt::Display + Send>(
    addrs: &[String],
    ask: impl Fn(&str) -> Result<T, E> + Sync,
) -> Gathered<T> {
    // The asking thread's logging of upstream requests holds on the threads asking for it.
    let quiet = crate::upstream::quiet_here();
    let results: Vec<(String, Result<T, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = addrs
            .iter()
            .map(|a| {
                let ask = &ask;
                let h = s.spawn(move || {
                    crate::upstream::set_quiet_here(quiet);
                    ask(a)
                });
                (a, h)
            })
            .collect();
        handles
            .into_iter()
            .map(|(a, h)| {
                let r = match h.join() {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("{a}: the request panicked")),
                };
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

/// A broker as the nodes page shows it (nsqadmin's `Producer`).
#[derive(Debug, Clone)]
struct Node {
    node: String,
    /// `lookup/remote_address` for each lookup that lists it.
    remote_addresses: Vec<String>,
    remote_address: String,
    hostname: String,
    broadcast_address: String,
    tcp_port: u64,
    http_port: u64,
    version: String,
    /// Its topics, each with whether a lookup has it tombstoned.
    topics: BTreeMap<String, bool>,
}

/// A version's numbers (`1.3.0` → [1, 3, 0]), for comparing.
fn version_key(v: &str) -> Vec<u64> {
    v.split(['.', '-', '+'])
        .take(3)
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

impl Node {
    fn to_json(&self, newest: &[u64]) -> Value {
        let topics: Vec<Value> = self
            .topics
            .iter()
            .map(|(t, tombstoned)| json!({"topic": t, "tombstoned": tombstoned}))
            .collect();
        json!({
            "node": self.node,
            "remote_addresses": self.remote_addresses,
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "topics": topics,
            "out_of_date": version_key(&self.version).as_slice() < newest,
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

/// A node and its figures for one topic.
struct OnNode {
    node: String,
    hostname: String,
    topic: TopicStats,
}

impl Cluster {
    pub fn new(
        lookups: Vec<String>,
        brokers: Vec<String>,
        upstream: std::sync::Arc<Upstream>,
    ) -> Cluster {
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

    /// Every node with its host name: the lookups' producers and the configured brokers.
    pub fn node_hosts(&self) -> (BTreeMap<String, String>, Vec<String>) {
        let (producers, warnings) = self.producers();
        let mut names: BTreeMap<String, String> = producers
            .into_iter()
            .map(|n| (n.node, n.hostname))
            .collect();
        for b in &self.brokers {
            // Its host when nothing better is known (nsqadmin's fallback).
            names
                .entry(b.clone())
                .or_insert_with(|| nsq_common::host_of(b).to_owned());
        }
        (names, warnings)
    }

    /// The producers every lookup lists (their topics as the lookups know them), one per
    /// node, with every lookup that lists it.
    fn producers(&self) -> (Vec<Node>, Vec<String>) {
        let g = gather(&self.lookup_addrs(), |l| {
            self.upstream.get_json::<Nodes>(l, "/nodes")
        });
        let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
        for (lookup, answer) in &g.answers {
            for p in &answer.producers {
                let node = format!("{}:{}", p.broadcast_address, p.http_port);
                let remote = format!("{lookup}/{}", p.remote_address);
                let topics = p.topics().map(|(t, tombstoned)| (t.to_owned(), tombstoned));
                match nodes.get_mut(&node) {
                    Some(known) => {
                        known.remote_addresses.push(remote);
                        for (t, tombstoned) in topics {
                            *known.topics.entry(t).or_default() |= tombstoned;
                        }
                    }
                    None => {
                        let n = Node {
                            node: node.clone(),
                            remote_addresses: vec![remote],
                            remote_address: p.remote_address.clone(),
                            hostname: p.hostname.clone(),
                            broadcast_address: p.broadcast_address.clone(),
                            tcp_port: p.tcp_port,
                            http_port: p.http_port,
                            version: p.version.clone(),
                            topics: topics.collect(),
                        };
                        nodes.insert(node, n);
                    }
                }
            }
        }
        (nodes.into_values().collect(), g.warnings)
    }

    /// Every node's `/stats` (for one topic when given), and every node's host name.
    fn stats(&self, topic: Option<&str>) -> (Gathered<Stats>, BTreeMap<String, String>) {
        let (hosts, warnings) = self.node_hosts();
        let names: Vec<String> = hosts.keys().cloned().collect();
        let path = match topic {
            Some(t) => format!("/stats?format=json&topic={}", percent_encode(t)),
            None => "/stats?format=json".to_owned(),
        };
        let mut g = gather(&names, |n| self.upstream.get_json::<Stats>(n, &path));
        g.warnings.splice(0..0, warnings);
        (g, hosts)
    }

    /// Nodes with `topic`, and that topic's figures on each.
    fn topic_on_nodes(&self, topic: &str) -> (Vec<OnNode>, Vec<String>) {
        let (g, hosts) = self.stats(Some(topic));
        let found = g
            .answers
            .into_iter()
            .filter_map(|(node, stats)| {
                let t = stats.topics.into_iter().find(|t| t.topic_name == topic)?;
                let hostname = hosts.get(&node).cloned().unwrap_or_default();
                Some(OnNode {
                    node,
                    hostname,
                    topic: t,
                })
            })
            .collect();
        (found, g.warnings)
    }

    /// `Err` when every lookup and broker given failed (each named in `warnings`): nothing
    /// answered, nsqadmin's 502 `UPSTREAM_ERROR: failed to query any ...`.
    fn nothing_answered(&self, warnings: &[String]) -> Result<(), Failure> {
        let lookups = self.lookup_addrs();
        let all: Vec<&String> = lookups.iter().chain(&self.brokers).collect();
        let failed = |a: &String| warnings.iter().any(|w| w.contains(&format!("://{a}/")));
        if all.is_empty() || !all.iter().all(|a| failed(a)) {
            return Ok(());
        }
        let what = if lookups.is_empty() {
            "nsqd"
        } else {
            "nsqlookupd"
        };
        Err(Failure::Upstream(format!(
            "failed to query any {what}: {}",
            dedup(warnings.to_vec()).join("; ")
        )))
    }

    /// `GET /api/topics`.
    pub fn topics(&self) -> Result<Value, Failure> {
        let from_lookups = gather(&self.lookup_addrs(), |l| {
            self.upstream.get_json::<Topics>(l, "/topics")
        });
        let mut topics = BTreeSet::new();
        for (_, answer) in from_lookups.answers {
            topics.extend(answer.topics);
        }
        let (nodes, mut warnings) = self.nodes_list();
        for n in nodes {
            topics.extend(n.topics.into_keys());
        }
        warnings.splice(0..0, from_lookups.warnings);
        self.nothing_answered(&warnings)?;
        Ok(with_warnings(json!({ "topics": topics }), warnings))
    }

    /// `GET /api/topics?inactive=true`: the lookups' topics no producer has, each with the
    /// channels the lookups know.
    pub fn inactive_topics(&self) -> Value {
        let lookups = self.lookup_addrs();
        let g = gather(&lookups, |l| self.upstream.get_json::<Topics>(l, "/topics"));
        let mut warnings = g.warnings;
        let mut names = BTreeSet::new();
        for (_, answer) in g.answers {
            names.extend(answer.topics);
        }
        let mut inactive = Map::new();
        for t in names {
            let q = percent_encode(&t);
            let producers = gather(&lookups, |l| {
                self.upstream
                    .get_json::<Lookup>(l, &format!("/lookup?topic={q}"))
            });
            if producers
                .answers
                .iter()
                .any(|(_, a)| !a.producers.is_empty())
            {
                continue;
            }
            let channels = gather(&lookups, |l| {
                self.upstream
                    .get_json::<Channels>(l, &format!("/channels?topic={q}"))
            });
            warnings.extend(channels.warnings);
            let mut names = BTreeSet::new();
            for (_, a) in channels.answers {
                names.extend(a.channels);
            }
            // As nsqadmin: a topic without channels has `null` (Go's nil slice), not `[]`.
            let channels = if names.is_empty() {
                Value::Null
            } else {
                names.into_iter().collect::<Vec<_>>().into()
            };
            inactive.insert(t, channels);
        }
        with_warnings(json!({ "topics": inactive }), warnings)
    }

    /// `GET /api/topics/{topic}`: nsqadmin's `TopicStats` over the nodes that have it.
    pub fn topic(&self, topic: &str) -> Result<Value, Failure> {
        let (on_nodes, warnings) = self.topic_on_nodes(topic);
        if on_nodes.is_empty() {
            return Err(Failure::NotFound("TOPIC_NOT_FOUND"));
        }
        let rows = on_nodes
            .iter()
            .map(|n| shapes::topic(&n.node, &n.hostname, &n.topic, false))
            .collect();
        Ok(with_warnings(
            Value::Object(shapes::topic_total(topic, rows)),
            warnings,
        ))
    }

    /// `GET /api/topics/{topic}/{channel}`: nsqadmin's `ChannelStats` over the nodes that
    /// have it, with every client.
    pub fn channel(&self, topic: &str, channel: &str) -> Result<Value, Failure> {
        let (on_nodes, warnings) = self.topic_on_nodes(topic);
        let rows: Vec<Value> = on_nodes
            .iter()
            .filter_map(|n| {
                n.topic
                    .channels
                    .iter()
                    .find(|c| c.channel_name == channel)
                    .map(|c| shapes::channel(&n.node, &n.hostname, topic, c, true))
            })
            .collect();
        if rows.is_empty() {
            return Err(Failure::NotFound("CHANNEL_NOT_FOUND"));
        }
        Ok(with_warnings(
            Value::Object(shapes::channel_total(topic, channel, rows)),
            warnings,
        ))
    }

    /// Every node, with its topics: the lookups' producers, and the configured brokers read
    /// through their own `/info` and `/stats`.
    fn nodes_list(&self) -> (Vec<Node>, Vec<String>) {
        let (producers, mut warnings) = self.producers();
        let configured = gather(&self.brokers, |b| {
            let info: Info = self.upstream.get_json(b, "/info")?;
            let stats: Stats = self
                .upstream
                .get_json(b, "/stats?format=json&include_clients=false")?;
            Ok::<_, crate::upstream::UpstreamError>(Node {
                node: b.to_owned(),
                remote_addresses: Vec::new(),
                remote_address: String::new(),
                hostname: info.hostname,
                broadcast_address: info.broadcast_address,
                tcp_port: info.tcp_port,
                http_port: info.http_port,
                version: info.version,
                topics: stats
                    .topics
                    .into_iter()
                    .map(|t| (t.topic_name, false))
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
                Some(known) => {
                    for (t, tombstoned) in n.topics {
                        *known.topics.entry(t).or_default() |= tombstoned;
                    }
                }
                None => {
                    by_name.insert(n.node.clone(), n);
                }
            }
        }
        (by_name.into_values().collect(), warnings)
    }

    /// `GET /api/nodes`: nsqadmin's `Producer` for each node, plus its `node` name, and the
    /// lookups asked (`lookups`).
    pub fn nodes(&self) -> Result<Value, Failure> {
        let (nodes, warnings) = self.nodes_list();
        self.nothing_answered(&warnings)?;
        let newest = nodes
            .iter()
            .map(|n| version_key(&n.version))
            .max()
            .unwrap_or_default();
        let nodes: Vec<Value> = nodes.iter().map(|n| n.to_json(&newest)).collect();
        // Beside nsqadmin's answer: the lookups asked, for the page's "Lookup conns" column.
        let lookups = self.lookup_addrs();
        Ok(with_warnings(
            json!({ "nodes": nodes, "lookups": lookups }),
            warnings,
        ))
    }

    /// `GET /api/nodes/{node}`: its topics (nsqadmin's `TopicStats`, channels and clients
    /// included) and totals, plus its version, health, start time and memory (the broker's
    /// `memory` object, `null` when it reports none).
    pub fn node(&self, node: &str) -> Result<Value, Failure> {
        let (hosts, mut warnings) = self.node_hosts();
        let Some(hostname) = hosts.get(node) else {
            return Err(Failure::NotFound("NODE_NOT_FOUND"));
        };
        let stats: Stats = self
            .upstream
            .get_json(node, "/stats?format=json")
            .map_err(|e| Failure::Upstream(e.to_string()))?;
        let mut total_messages = 0;
        let mut total_clients = 0;
        let topics: Vec<Value> = stats
            .topics
            .iter()
            .map(|t| {
                total_messages += t.message_count;
                total_clients += t.channels.iter().map(|c| c.clients.len()).sum::<usize>();
                shapes::topic(node, hostname, t, true)
            })
            .collect();
        warnings = dedup(warnings);
        Ok(with_warnings(
            json!({
                "node": node,
                "topics": topics,
                "total_messages": total_messages,
                "total_clients": total_clients,
                "version": stats.version,
                "health": stats.health,
                "start_time": stats.start_time,
                "memory": stats.memory.unwrap_or(Value::Null),
            }),
            warnings,
        ))
    }

    /// `GET /api/counter`: nsqadmin's `stats` (each channel's message count on each node,
    /// keyed `topic:channel:node`), plus the messages published per topic and in all.
    pub fn counter(&self) -> Result<Value, Failure> {
        let (g, _) = self.stats(None);
        self.nothing_answered(&g.warnings)?;
        let mut per_topic: BTreeMap<String, u64> = BTreeMap::new();
        let mut per_channel = Map::new();
        for (node, stats) in &g.answers {
            for t in &stats.topics {
                let topic = &t.topic_name;
                *per_topic.entry(topic.clone()).or_default() += t.message_count;
                for c in &t.channels {
                    let channel = &c.channel_name;
                    per_channel.insert(
                        format!("{topic}:{channel}:{node}"),
                        json!({"node": node, "topic_name": topic, "channel_name": channel,
                               "message_count": c.message_count}),
                    );
                }
            }
        }
        let total: u64 = per_topic.values().sum();
        let topics: Vec<Value> = per_topic
            .into_iter()
            .map(|(t, n)| json!({"topic_name": t, "message_count": n}))
            .collect();
        Ok(with_warnings(
            json!({"stats": per_channel, "message_count": total, "topics": topics}),
            g.warnings,
        ))
    }

    /// `GET /api/lookups`.
    pub fn lookups(&self) -> Value {
        let addrs = self.lookup_addrs();
        let g = gather(&addrs, |l| {
            let topics: Topics = self.upstream.get_json(l, "/topics")?;
            let mut out = Vec::new();
            for t in &topics.topics {
                let channels: Channels = self
                    .upstream
                    .get_json(l, &format!("/channels?topic={}", percent_encode(t)))?;
                out.push(json!({"topic_name": t, "channels": channels.channels}));
            }
            Ok::<_, crate::upstream::UpstreamError>(out)
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
        with_warnings(json!({ "lookups": lookups }), g.warnings)
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
                let nodes: Vec<String> = on_nodes.into_iter().map(|n| n.node).collect();
                failed.extend(everywhere(&self.upstream, &nodes, &path));
            }
        }
        Ok(dedup(failed))
    }

    /// The brokers that have `topic` (and `channel`), with what did not answer; an error when
    /// none has it: not found, or nothing answered at all.
    pub(crate) fn holders(
        &self,
        topic: &str,
        channel: Option<&str>,
    ) -> Result<(Vec<String>, Vec<String>), Failure> {
        let (on_nodes, warnings) = self.topic_on_nodes(topic);
        let nodes: Vec<String> = on_nodes
            .into_iter()
            .filter(|n| match channel {
                None => true,
                Some(channel) => n.topic.channels.iter().any(|c| c.channel_name == channel),
            })
            .map(|n| n.node)
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
        let nodes: Vec<String> = on_nodes.into_iter().map(|n| n.node).collect();
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
        let (hosts, _) = self.node_hosts();
        if !hosts.contains_key(node) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_number() {
        assert!(version_key("1.2.1") < version_key("1.3.0"));
        assert!(version_key("1.10.0") > version_key("1.9.9"));
        assert_eq!(version_key("1.3.0-compat"), vec![1, 3, 0]);
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
}

//! What admin-ui does with the brokers' features beyond nsqd (no nsqadmin counterpart): a
//! dead-letter topic's origin records and the redrive that publishes them back, a channel's
//! max attempts and dead-letter topic, a channel's rewind (and its dry run, which counts what
//! would be delivered again), and a topic's retention. Each is asked of every broker that has
//! the topic (and channel), as nsqadmin fans out its topic and channel actions.
//!
//! Invariants: a broker that has not the feature (nsqd answers 404 to `/dead_letters`) is read
//! as having nothing, not as a failure; a setting's value is passed to the brokers as given
//! (they check it and say what is wrong); counts over several brokers are sums, each broker's
//! own in `nodes`.

use crate::cluster::{Cluster, Failure};
use crate::upstream::{body_text, UpstreamError};
use crate::wire::{self, DeadLetters, ErrorBody, Redriven, Rewound};
use http1::percent_encode;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{json, Map, Value};

/// What an action answers besides nsqadmin's `message`: each failure on the way (a warning)
/// and the fields to add to the answer.
pub type Done = (Vec<String>, Map<String, Value>);

/// The `k=v` pairs of a query, each value encoded.
fn query(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A broker's answer to a POST: its JSON body (the default when it has none), or the error
/// with the broker's `message`.
fn post_json<T: DeserializeOwned + Default>(
    cluster: &Cluster,
    node: &str,
    path: &str,
) -> Result<T, UpstreamError> {
    let answer = cluster.upstream.request(node, "POST", path)?;
    if !(200..300).contains(&answer.status) {
        let why = wire::parse::<ErrorBody>(&answer.body)
            .ok()
            .and_then(|b| b.message)
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| body_text(&answer.body));
        return Err(answer.failed("POST", path, why));
    }
    Ok(wire::parse(&answer.body).unwrap_or_default())
}

/// Each node's answer, in the order asked.
type Answers<T> = Vec<(String, T)>;

/// POSTs `path` to every one of `nodes`: each answer, and the warnings (`failed`, what went
/// before, and each node that failed); `Err` when every node failed (nothing was done).
fn fan_out<T: DeserializeOwned + Default + Send>(
    cluster: &Cluster,
    nodes: &[String],
    mut failed: Vec<String>,
    path: &str,
) -> Result<(Vec<String>, Answers<T>), Failure> {
    let g = crate::cluster::gather(nodes, |n| post_json(cluster, n, path));
    if g.answers.is_empty() {
        failed.extend(g.warnings);
        return Err(Failure::Upstream(failed.join("; ")));
    }
    failed.extend(g.warnings);
    Ok((failed, g.answers))
}

impl Cluster {
    /// `GET /api/dead_letters/{topic}`: the origin records of every broker that has the topic,
    /// each with its `node`, oldest first per broker.
    pub fn dead_letters(&self, topic: &str) -> Result<Value, Failure> {
        let (nodes, mut warnings) = self.holders(topic, None)?;
        let path = format!("/dead_letters?topic={}", percent_encode(topic));
        let g = crate::cluster::gather(&nodes, |n| {
            let answer = self.upstream.request(n, "GET", &path)?;
            match answer.status {
                200 => answer.json::<DeadLetters>("GET", &path),
                // nsqd (no dead letters), or the topic gone meanwhile: nothing recorded.
                404 => Ok(DeadLetters::default()),
                _ => Err(answer.failed("GET", &path, body_text(&answer.body))),
            }
        });
        warnings.extend(g.warnings);
        let mut records = Vec::new();
        for (node, answer) in g.answers {
            for mut r in answer.dead_letters {
                if let Some(o) = r.as_object_mut() {
                    o.insert("node".into(), node.clone().into());
                }
                records.push(r);
            }
        }
        Ok(crate::warnings::with_warnings(
            json!({ "topic_name": topic, "dead_letters": records }),
            warnings,
        ))
    }

    /// `POST /api/dead_letters/{topic}` `{"action": "redrive"}`: `/topic/redrive` on every
    /// broker that has the topic (only the record `id` when given); the counts summed.
    pub fn redrive(&self, topic: &str, id: Option<&str>) -> Result<Done, Failure> {
        let (nodes, failed) = self.holders(topic, None)?;
        let mut pairs = vec![("topic", topic)];
        if let Some(id) = id {
            pairs.push(("id", id));
        }
        let path = format!("/topic/redrive?{}", query(&pairs));
        let (failed, answers) = fan_out::<Redriven>(self, &nodes, failed, &path)?;
        let (mut redriven, mut missing) = (0, 0);
        let mut per_node = Vec::new();
        for (node, a) in &answers {
            redriven += a.redriven;
            missing += a.missing;
            per_node.push(json!({"node": node, "redriven": a.redriven, "missing": a.missing}));
        }
        let mut extra = Map::new();
        extra.insert("redriven".into(), redriven.into());
        extra.insert("missing".into(), missing.into());
        extra.insert("nodes".into(), per_node.into());
        Ok((failed, extra))
    }

    /// `POST /api/topics/{topic}/{channel}` `{"action": "config", ...}`: `/channel/config`
    /// with `settings` on every broker that has the channel.
    pub fn channel_config(
        &self,
        topic: &str,
        channel: &str,
        settings: &[(&str, String)],
    ) -> Result<Done, Failure> {
        let (nodes, failed) = self.holders(topic, Some(channel))?;
        let mut pairs = vec![("topic", topic), ("channel", channel)];
        pairs.extend(settings.iter().map(|(k, v)| (*k, v.as_str())));
        let path = format!("/channel/config?{}", query(&pairs));
        let (failed, _) = fan_out::<IgnoredAny>(self, &nodes, failed, &path)?;
        Ok((failed, Map::new()))
    }

    /// `POST /api/topics/{topic}` `{"action": "config", ...}`: `/topic/config` with
    /// `settings` (its retention) on every broker that has the topic.
    pub fn topic_config(&self, topic: &str, settings: &[(&str, String)]) -> Result<Done, Failure> {
        let (nodes, failed) = self.holders(topic, None)?;
        let mut pairs = vec![("topic", topic)];
        pairs.extend(settings.iter().map(|(k, v)| (*k, v.as_str())));
        let path = format!("/topic/config?{}", query(&pairs));
        let (failed, _) = fan_out::<IgnoredAny>(self, &nodes, failed, &path)?;
        Ok((failed, Map::new()))
    }

    /// `POST /api/topics/{topic}/{channel}` `{"action": "rewind", ...}`: `/channel/rewind`
    /// at `position` (`("timestamp", t)` or `("earliest", "true")`) on every broker that has
    /// the channel; a dry run answers each broker's position and what it would deliver again,
    /// and their sum, moving nothing.
    pub fn rewind(
        &self,
        topic: &str,
        channel: &str,
        position: &(&str, String),
        dry_run: bool,
    ) -> Result<Done, Failure> {
        let (nodes, failed) = self.holders(topic, Some(channel))?;
        let mut pairs = vec![
            ("topic", topic),
            ("channel", channel),
            (position.0, position.1.as_str()),
        ];
        if dry_run {
            pairs.push(("dry_run", "true"));
        }
        let path = format!("/channel/rewind?{}", query(&pairs));
        let (failed, answers) = fan_out::<Rewound>(self, &nodes, failed, &path)?;
        let mut extra = Map::new();
        if dry_run {
            let redelivered: u64 = answers.iter().map(|(_, a)| a.redelivered).sum();
            let per_node: Vec<Value> = answers
                .iter()
                .map(|(node, a)| {
                    json!({"node": node, "offset": a.offset, "redelivered": a.redelivered})
                })
                .collect();
            extra.insert("redelivered".into(), redelivered.into());
            extra.insert("nodes".into(), per_node.into());
        }
        Ok((failed, extra))
    }
}

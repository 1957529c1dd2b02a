//! Live rates without Graphite: the series admin-ui keeps from the brokers' `/stats`, sampled
//! by the sampler thread (`sampler.rs`) every `--sample-interval`, and their JSON (`GET /api/rates`, see
//! `admin-ui/API.md`).
//!
//! What it owns: one series per topic, per channel (each summed over the nodes that have it)
//! and per node, each a ring of the last [`WINDOW_SECS`] of points; and each node's last
//! counter readings (the baselines rates are computed from). A point holds messages/s in
//! (topic and channel: `message_count` increase; node: its topics'), messages/s out (FIN'd:
//! the increase of the channel's clients' `finish_count`; a topic's or node's is its
//! channels' sum, so a message leaving two channels counts twice), depth, in-flight, deferred,
//! clients, the node's memory (`memory.heap_in_use_bytes`) and up to [`QUANTILES`] e2e
//! latency percentiles (nanoseconds; over nodes, the largest).
//!
//! Invariants and bounds:
//! - A ring never holds more than `ceil(WINDOW / interval) + 1` points, nor a point older than
//!   the window; at most [`MAX_POINTS`] points are kept in all, so the number of series is
//!   capped at `MAX_POINTS / ring length` (10 s: 5 792; 1 s: 582). Past the cap a new series
//!   is not kept (counted in `refused_series`, logged once); the ones kept go on.
//! - A series is dropped at the first round in which every node answered and none has its
//!   topic, channel or node any more, or once it has had no point for a whole window.
//! - A rate is never negative nor made of counts from before a reset: a counter that goes down
//!   or a node whose `start_time` changed (a broker restart), a topic or channel seen for the
//!   first time, or a node's first answer gives no rate for that point (`null`), and the
//!   reading becomes the new baseline. A node that did not answer for some rounds gives, when
//!   it answers again, the average over the whole gap. A client that disconnects between two
//!   samples takes its FINs of that last interval with it (they are not counted).

use crate::wire::{ChannelStats, Latency, Stats};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How far back a series goes.
pub const WINDOW_SECS: u64 = 30 * 60;
/// Points kept over all series (a point is 48 bytes: about 50 MB at most).
pub const MAX_POINTS: usize = 1 << 20;
/// E2e latency percentiles kept per point (the first ones the broker reports).
pub const QUANTILES: usize = 3;

/// Field indexes of a point's values.
pub const IN: usize = 0;
pub const OUT: usize = 1;
pub const DEPTH: usize = 2;
pub const IN_FLIGHT: usize = 3;
pub const DEFERRED: usize = 4;
pub const CLIENTS: usize = 5;
pub const MEMORY: usize = 6;
pub const E2E: usize = 7;
const FIELDS: usize = E2E + QUANTILES;
/// The JSON names of the fields before [`E2E`].
const NAMES: [&str; E2E] = [
    "in",
    "out",
    "depth",
    "in_flight",
    "deferred",
    "clients",
    "memory",
];

/// What a series is of.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Topic(String),
    Channel(String, String),
    Node(String),
}

/// One sample: when (Unix milliseconds) and its values (NaN: not known).
#[derive(Clone, Copy, Debug)]
pub struct Point {
    pub t_ms: u64,
    pub v: [f32; FIELDS],
}

/// A fixed-size ring of points, oldest first.
#[derive(Debug)]
pub struct Ring {
    points: VecDeque<Point>,
    cap: usize,
}

impl Ring {
    pub fn new(cap: usize) -> Ring {
        Ring {
            points: VecDeque::with_capacity(cap),
            cap: cap.max(1),
        }
    }

    /// Adds `p`, dropping the oldest point when full and any older than the window.
    pub fn push(&mut self, p: Point) {
        while self.points.len() >= self.cap {
            self.points.pop_front();
        }
        let oldest = p.t_ms.saturating_sub(WINDOW_SECS * 1000);
        while self.points.front().is_some_and(|f| f.t_ms < oldest) {
            self.points.pop_front();
        }
        self.points.push_back(p);
    }

    pub fn last(&self) -> Option<&Point> {
        self.points.back()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Point> {
        self.points.iter()
    }
}

/// Messages per second between two readings of a counter `secs` apart; `None` when the
/// counter went down (a reset) or no time passed.
pub fn rate(prev: u64, now: u64, secs: f64) -> Option<f64> {
    if now < prev || secs.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    Some((now - prev) as f64 / secs)
}

/// A channel's last reading on a node.
#[derive(Debug, Default)]
struct ChannelBase {
    count: u64,
    /// Each client's (remote address, connect time) and its `finish_count`.
    finished: HashMap<(String, u64), u64>,
}

/// A node's last reading: its start time, when it was read, its counters.
#[derive(Debug, Default)]
struct NodeBase {
    start_time: u64,
    at_secs: f64,
    topics: HashMap<String, (u64, HashMap<String, ChannelBase>)>,
}

/// A round's sums for one series: per field, NaN until something is added.
struct Acc([f64; FIELDS], Vec<f64>);

impl Acc {
    fn new() -> Acc {
        Acc([f64::NAN; FIELDS], Vec::new())
    }

    fn add(&mut self, field: usize, v: Option<f64>) {
        if let Some(v) = v {
            let s = &mut self.0[field];
            *s = if s.is_nan() { v } else { *s + v };
        }
    }

    /// The node's e2e percentiles, the largest kept.
    fn e2e(&mut self, e: &Latency) {
        for (i, p) in e.percentiles.iter().take(QUANTILES).enumerate() {
            let (Some(q), Some(v)) = (
                p.quantile.as_ref().and_then(|q| q.as_f64()),
                p.value.as_ref().and_then(|v| v.as_f64()),
            ) else {
                continue;
            };
            if self.1.len() == i {
                self.1.push(q);
            }
            let s = &mut self.0[E2E + i];
            *s = if s.is_nan() { v } else { s.max(v) };
        }
    }
}

/// A series: its ring and the quantiles its e2e values are of.
#[derive(Debug)]
struct Series {
    ring: Ring,
    quantiles: Vec<f64>,
}

/// Every series and the baselines, as of the last round.
pub struct Store {
    interval: Duration,
    ring_len: usize,
    cap: usize,
    series: BTreeMap<Key, Series>,
    bases: HashMap<String, NodeBase>,
    /// New series not kept in the last round for the cap.
    refused: usize,
    warned_cap: bool,
    rounds: u64,
}

impl Store {
    /// An empty store for samples every `interval` (more than zero).
    pub fn new(interval: Duration) -> Store {
        let secs = interval.as_secs_f64().max(0.001);
        let ring_len = (WINDOW_SECS as f64 / secs).ceil() as usize + 1;
        Store {
            interval,
            ring_len,
            cap: (MAX_POINTS / ring_len).max(1),
            series: BTreeMap::new(),
            bases: HashMap::new(),
            refused: 0,
            warned_cap: false,
            rounds: 0,
        }
    }

    /// Records one round, stamped `now_ms` (Unix): `answers` are the `/stats?format=json` of
    /// the nodes that answered, each with when it was read (seconds on a monotonic clock);
    /// `known` every node asked; `complete` whether all of them (and the lookups) answered.
    pub fn record(
        &mut self,
        now_ms: u64,
        known: &[String],
        answers: &[(String, Stats, f64)],
        complete: bool,
    ) {
        let mut round: BTreeMap<Key, Acc> = BTreeMap::new();
        for (node, stats, at_secs) in answers {
            let mono_secs = *at_secs;
            let base = self
                .bases
                .remove(node)
                .filter(|b| b.start_time == stats.start_time && mono_secs > b.at_secs);
            let next = read_node(node, stats, base.as_ref(), mono_secs, &mut round);
            self.bases.insert(node.clone(), next);
        }
        self.bases.retain(|n, _| known.contains(n));
        self.refused = 0;
        for (key, acc) in &round {
            let mut v = [f32::NAN; FIELDS];
            for (slot, x) in v.iter_mut().zip(acc.0) {
                *slot = x as f32;
            }
            let point = Point { t_ms: now_ms, v };
            if !self.series.contains_key(key) && self.series.len() >= self.cap {
                self.refused += 1;
                continue;
            }
            let s = self.series.entry(key.clone()).or_insert_with(|| Series {
                ring: Ring::new(self.ring_len),
                quantiles: Vec::new(),
            });
            if !acc.1.is_empty() {
                s.quantiles.clone_from(&acc.1);
            }
            s.ring.push(point);
        }
        if self.refused > 0 && !self.warned_cap {
            self.warned_cap = true;
            tracing::warn!(
                cap = self.cap,
                "rates: the series cap is reached; new topics, channels and nodes get no series"
            );
        }
        let stale = now_ms.saturating_sub(WINDOW_SECS * 1000);
        self.series.retain(|k, s| {
            let fresh = s.ring.last().is_some_and(|p| p.t_ms >= stale);
            fresh && (!complete || round.contains_key(k))
        });
        self.rounds += 1;
    }

    /// `GET /api/rates`: the settings, and for every topic, channel and node its latest
    /// values with its messages/s in over the window.
    pub fn summary(&self) -> Value {
        let mut topics = Map::new();
        let mut channels: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
        let mut nodes = Map::new();
        for (key, s) in &self.series {
            let mut latest = latest_json(s);
            latest.insert("in_series".into(), column(&s.ring, IN));
            match key {
                Key::Topic(t) => {
                    topics.insert(t.clone(), latest.into());
                }
                Key::Channel(t, c) => {
                    channels
                        .entry(t)
                        .or_default()
                        .insert(c.clone(), latest.into());
                }
                Key::Node(n) => {
                    nodes.insert(n.clone(), latest.into());
                }
            }
        }
        let mut answer = self.settings();
        answer.insert("topics".into(), topics.into());
        answer.insert("channels".into(), json!(channels));
        answer.insert("nodes".into(), nodes.into());
        answer.into()
    }

    /// `GET /api/rates?topic=..[&channel=..]` or `?node=..`: the series' every point, as
    /// columns (`t` in Unix milliseconds, one array per field, `null` where not known), and
    /// its latest values; empty columns when there is no such series (yet).
    pub fn series_json(&self, key: &Key) -> Value {
        let mut answer = self.settings();
        let (k, name) = match key {
            Key::Topic(t) => ("topic", json!({ "topic": t })),
            Key::Channel(t, c) => ("channel", json!({ "topic": t, "channel": c })),
            Key::Node(n) => ("node", json!({ "node": n })),
        };
        answer.insert("of".into(), json!({ k: name }));
        let empty = Series {
            ring: Ring::new(1),
            quantiles: Vec::new(),
        };
        let s = self.series.get(key).unwrap_or(&empty);
        let t: Vec<u64> = s.ring.iter().map(|p| p.t_ms).collect();
        answer.insert("t".into(), t.into());
        for (i, name) in NAMES.iter().enumerate() {
            answer.insert((*name).into(), column(&s.ring, i));
        }
        let e2e: Vec<Value> = s
            .quantiles
            .iter()
            .enumerate()
            .map(|(i, q)| json!({ "quantile": q, "values": column(&s.ring, E2E + i) }))
            .collect();
        answer.insert("e2e".into(), e2e.into());
        answer.insert("latest".into(), latest_json(s).into());
        answer.into()
    }

    fn settings(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("enabled".into(), true.into());
        m.insert("interval".into(), self.interval.as_secs_f64().into());
        m.insert("window".into(), WINDOW_SECS.into());
        m.insert("rounds".into(), self.rounds.into());
        m.insert("series_count".into(), self.series.len().into());
        m.insert("series_cap".into(), self.cap.into());
        m.insert("refused_series".into(), self.refused.into());
        m
    }
}

/// `GET /api/rates` when `--sample-interval 0` turned the sampler off.
pub fn disabled() -> Value {
    json!({ "enabled": false, "interval": 0, "window": WINDOW_SECS })
}

/// A value fit for JSON: `null` when not known, else rounded to 3 decimals.
fn value(x: f32) -> Value {
    if x.is_finite() {
        json!((f64::from(x) * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

fn column(ring: &Ring, field: usize) -> Value {
    ring.iter()
        .map(|p| value(p.v[field]))
        .collect::<Vec<_>>()
        .into()
}

/// The latest point's values by name (e2e as `{quantile, value}`), and its time.
fn latest_json(s: &Series) -> Map<String, Value> {
    let mut m = Map::new();
    let last = s.ring.last();
    m.insert("t".into(), last.map_or(Value::Null, |p| p.t_ms.into()));
    for (i, name) in NAMES.iter().enumerate() {
        m.insert((*name).into(), last.map_or(Value::Null, |p| value(p.v[i])));
    }
    let e2e: Vec<Value> = s
        .quantiles
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let v = last.map_or(Value::Null, |p| value(p.v[E2E + i]));
            json!({ "quantile": q, "value": v })
        })
        .collect();
    m.insert("e2e".into(), e2e.into());
    m
}

/// Adds a node's reading to the round's sums and returns it as the node's new baseline;
/// rates only where `base` (the node's previous reading, same start time) has the counter.
fn read_node(
    node: &str,
    stats: &Stats,
    base: Option<&NodeBase>,
    mono_secs: f64,
    round: &mut BTreeMap<Key, Acc>,
) -> NodeBase {
    let secs = base.map_or(0.0, |b| mono_secs - b.at_secs);
    let mut next = NodeBase {
        start_time: stats.start_time,
        at_secs: mono_secs,
        topics: HashMap::new(),
    };
    let mut node_acc = Acc::new();
    node_acc.add(CLIENTS, Some(0.0));
    node_acc.add(DEPTH, Some(0.0));
    if let Some(heap) = stats.heap_in_use() {
        node_acc.add(MEMORY, Some(heap as f64));
    }
    for t in &stats.topics {
        let topic = t.topic_name.as_str();
        let count = t.message_count;
        let prev = base.and_then(|b| b.topics.get(topic));
        let in_rate = prev.and_then(|(c, _)| rate(*c, count, secs));
        let mut channel_bases = HashMap::new();
        let mut topic_acc = Acc::new();
        topic_acc.add(IN, in_rate);
        topic_acc.add(DEPTH, Some(t.depth as f64));
        topic_acc.e2e(&t.e2e_processing_latency);
        node_acc.add(IN, in_rate);
        node_acc.add(DEPTH, Some(t.depth as f64));
        for c in &t.channels {
            let channel = c.channel_name.as_str();
            let prev_c = prev.and_then(|(_, chans)| chans.get(channel));
            let (next_c, in_c, out_c) = read_channel(c, prev_c, secs);
            let mut acc = Acc::new();
            acc.add(IN, in_c);
            acc.add(OUT, out_c);
            let figures = [
                (DEPTH, c.depth),
                (IN_FLIGHT, c.in_flight_count),
                (DEFERRED, c.deferred_count),
                (CLIENTS, c.client_count),
            ];
            for (field, figure) in figures {
                let v = Some(figure as f64);
                acc.add(field, v);
                node_acc.add(field, v);
                if field != DEPTH {
                    // A topic's depth is its own, as nsqd's (its channels have theirs).
                    topic_acc.add(field, v);
                }
            }
            acc.e2e(&c.e2e_processing_latency);
            topic_acc.add(OUT, out_c);
            node_acc.add(OUT, out_c);
            merge(round, Key::Channel(topic.into(), channel.into()), acc);
            channel_bases.insert(channel.to_owned(), next_c);
        }
        merge(round, Key::Topic(topic.into()), topic_acc);
        next.topics.insert(topic.to_owned(), (count, channel_bases));
    }
    merge(round, Key::Node(node.into()), node_acc);
    next
}

/// A channel's new baseline, its messages/s in and its FIN'd/s.
fn read_channel(
    c: &ChannelStats,
    prev: Option<&ChannelBase>,
    secs: f64,
) -> (ChannelBase, Option<f64>, Option<f64>) {
    let count = c.message_count;
    let mut next = ChannelBase {
        count,
        finished: HashMap::new(),
    };
    let mut finished = 0u64;
    for cl in &c.clients {
        let id = (cl.remote_address.clone(), cl.connect_ts);
        let fin = cl.finish_count;
        // A client not seen before connected since the last reading: all its FINs are new.
        let before = prev.and_then(|p| p.finished.get(&id)).copied().unwrap_or(0);
        finished += fin.saturating_sub(before);
        next.finished.insert(id, fin);
    }
    let in_rate = prev.and_then(|p| rate(p.count, count, secs));
    let out_rate = prev.and_then(|_| rate(0, finished, secs));
    (next, in_rate, out_rate)
}

/// Adds `acc` into the round's sums for `key` (e2e: the largest of each quantile).
fn merge(round: &mut BTreeMap<Key, Acc>, key: Key, acc: Acc) {
    match round.get_mut(&key) {
        None => {
            round.insert(key, acc);
        }
        Some(into) => {
            for i in 0..FIELDS {
                let v = acc.0[i];
                if v.is_nan() {
                    continue;
                }
                if i >= E2E {
                    let s = &mut into.0[i];
                    *s = if s.is_nan() { v } else { s.max(v) };
                } else {
                    into.add(i, Some(v));
                }
            }
            if into.1.len() < acc.1.len() {
                into.1 = acc.1;
            }
        }
    }
}

#[cfg(test)]
#[path = "rates_tests.rs"]
mod tests;

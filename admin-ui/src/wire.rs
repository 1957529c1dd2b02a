//! The lookups' and brokers' HTTP answers as admin-ui reads them: a broker's `/stats` and
//! `/info` (nsqd's or ours), a lookup's `/nodes`, `/lookup`, `/topics` and `/channels`, the
//! broker-only answers (`/dead_letters`, `/topic/redrive`, a rewind's dry run) and an error
//! answer's body. The bottom of the module graph: it names no other module of the crate.
//!
//! Invariants: a field a node leaves out, sends as `null` or with another JSON type reads as
//! 0, `""`, false or empty, as nsqd's omitted fields do (nsqd writes a nil slice as `null`);
//! unknown fields are ignored; a list element that is not what is expected reads as the
//! element's default (a name that is not a string is skipped), so positions in parallel
//! lists (a producer's topics and tombstones) stay aligned. What admin-ui passes through to its own answers (a broker's `memory`, a
//! topic's `retention`, a channel's dead-letter fields, an e2e percentile's numbers) is kept
//! as the node wrote it, so the JSON it is written back into is unchanged.

use serde::de::{DeserializeOwned, Deserializer, IgnoredAny};
use serde::Deserialize;
use serde_json::{Number, Value};

/// A non-negative integer, 0 for anything else.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Value::deserialize(d)?.as_u64().unwrap_or(0))
}

/// A string, `""` for anything else.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        _ => String::new(),
    })
}

/// A boolean, false for anything else.
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Value::deserialize(d)?.as_bool().unwrap_or(false))
}

/// A string when it is one.
fn maybe_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// A non-negative integer when it is one.
fn maybe_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

/// A number as written (an integer stays one), when it is one.
fn maybe_json_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Number>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Number(n) => Some(n),
        _ => None,
    })
}

/// A nested object, its default when it is anything else (nsqd may write `null`).
fn object<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).unwrap_or_default())
}

/// Whatever the node wrote, `null` included; a field left out stays `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A list, empty for anything else; an element that does not read as `T` is `T`'s default.
fn seq<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => a
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap_or_default())
            .collect(),
        _ => Vec::new(),
    })
}

/// The strings of a list of names, anything else in it skipped.
fn names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => a
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    })
}

/// A list of booleans, false for anything that is not one.
fn flags<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<bool>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => a.iter().map(|v| v.as_bool().unwrap_or(false)).collect(),
        _ => Vec::new(),
    })
}

/// Reads `body` as `T`: `Err` only when it is not JSON at all; JSON of another shape (an
/// array, a string) reads as `T`'s default, as every field would then be absent.
pub fn parse<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, serde_json::Error> {
    match serde_json::from_slice(body) {
        Ok(t) => Ok(t),
        // The error said is the JSON's own, not the shape's.
        Err(_) => serde_json::from_slice::<IgnoredAny>(body).map(|_| T::default()),
    }
}

/// A broker's `GET /stats?format=json`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Stats {
    #[serde(deserialize_with = "text")]
    pub version: String,
    #[serde(deserialize_with = "text")]
    pub health: String,
    #[serde(deserialize_with = "number")]
    pub start_time: u64,
    /// The process's memory figures (nsqd's Go runtime ones, or ours), passed through.
    #[serde(deserialize_with = "present")]
    pub memory: Option<Value>,
    #[serde(deserialize_with = "seq")]
    pub topics: Vec<TopicStats>,
}

impl Stats {
    /// `memory.heap_in_use_bytes` when the broker reports its memory (0 when that figure is
    /// missing from it).
    pub fn heap_in_use(&self) -> Option<u64> {
        let memory = self.memory.as_ref()?;
        Some(
            memory
                .get("heap_in_use_bytes")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        )
    }
}

/// A topic in `/stats`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TopicStats {
    #[serde(deserialize_with = "text")]
    pub topic_name: String,
    #[serde(deserialize_with = "number")]
    pub depth: u64,
    #[serde(deserialize_with = "number")]
    pub backend_depth: u64,
    #[serde(deserialize_with = "number")]
    pub message_count: u64,
    #[serde(deserialize_with = "flag")]
    pub paused: bool,
    #[serde(deserialize_with = "seq")]
    pub channels: Vec<ChannelStats>,
    #[serde(deserialize_with = "object")]
    pub e2e_processing_latency: Latency,
    /// The broker's retention block (beyond nsqd), passed through.
    #[serde(deserialize_with = "present")]
    pub retention: Option<Value>,
    /// The broker's replica of a replicated topic (beyond nsqd), passed through.
    #[serde(deserialize_with = "present")]
    pub replication: Option<Value>,
}

/// A channel in `/stats`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChannelStats {
    #[serde(deserialize_with = "text")]
    pub channel_name: String,
    #[serde(deserialize_with = "number")]
    pub depth: u64,
    #[serde(deserialize_with = "number")]
    pub backend_depth: u64,
    #[serde(deserialize_with = "number")]
    pub in_flight_count: u64,
    #[serde(deserialize_with = "number")]
    pub deferred_count: u64,
    #[serde(deserialize_with = "number")]
    pub requeue_count: u64,
    #[serde(deserialize_with = "number")]
    pub timeout_count: u64,
    #[serde(deserialize_with = "number")]
    pub message_count: u64,
    #[serde(deserialize_with = "number")]
    pub client_count: u64,
    /// Empty when asked without clients (`null` then).
    #[serde(deserialize_with = "seq")]
    pub clients: Vec<ClientStats>,
    #[serde(deserialize_with = "flag")]
    pub paused: bool,
    #[serde(deserialize_with = "object")]
    pub e2e_processing_latency: Latency,
    /// The broker's max-attempts fields (beyond nsqd), each passed through; present only
    /// while a limit is in force for the channel.
    #[serde(deserialize_with = "present")]
    pub dead_lettered_count: Option<Value>,
    #[serde(deserialize_with = "present")]
    pub max_attempts: Option<Value>,
    #[serde(deserialize_with = "present")]
    pub dead_letter_topic: Option<Value>,
}

impl ChannelStats {
    /// The max-attempts fields the broker reported, by name.
    pub fn dead_letter_fields(&self) -> [(&'static str, Option<&Value>); 3] {
        [
            ("dead_lettered_count", self.dead_lettered_count.as_ref()),
            ("max_attempts", self.max_attempts.as_ref()),
            ("dead_letter_topic", self.dead_letter_topic.as_ref()),
        ]
    }
}

/// A client of a channel in `/stats` (nsqd's fields, TLS, compression and auth state
/// included; nsqd leaves the auth fields out for a client without any).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ClientStats {
    #[serde(deserialize_with = "text")]
    pub remote_address: String,
    #[serde(deserialize_with = "text")]
    pub version: String,
    #[serde(deserialize_with = "text")]
    pub client_id: String,
    #[serde(deserialize_with = "text")]
    pub hostname: String,
    #[serde(deserialize_with = "text")]
    pub user_agent: String,
    #[serde(deserialize_with = "number")]
    pub connect_ts: u64,
    #[serde(deserialize_with = "number")]
    pub in_flight_count: u64,
    #[serde(deserialize_with = "number")]
    pub ready_count: u64,
    #[serde(deserialize_with = "number")]
    pub finish_count: u64,
    #[serde(deserialize_with = "number")]
    pub requeue_count: u64,
    #[serde(deserialize_with = "number")]
    pub message_count: u64,
    #[serde(deserialize_with = "number")]
    pub sample_rate: u64,
    #[serde(deserialize_with = "flag")]
    pub deflate: bool,
    #[serde(deserialize_with = "flag")]
    pub snappy: bool,
    #[serde(deserialize_with = "flag")]
    pub authed: bool,
    #[serde(deserialize_with = "text")]
    pub auth_identity: String,
    #[serde(deserialize_with = "text")]
    pub auth_identity_url: String,
    #[serde(deserialize_with = "flag")]
    pub tls: bool,
    #[serde(deserialize_with = "text")]
    pub tls_cipher_suite: String,
    #[serde(deserialize_with = "text")]
    pub tls_version: String,
    #[serde(deserialize_with = "text")]
    pub tls_negotiated_protocol: String,
    #[serde(deserialize_with = "flag")]
    pub tls_negotiated_protocol_is_mutual: bool,
}

/// A topic's or channel's `e2e_processing_latency` (`percentiles` is `null` when the broker
/// tracks none).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Latency {
    #[serde(deserialize_with = "number")]
    pub count: u64,
    #[serde(deserialize_with = "seq")]
    pub percentiles: Vec<Percentile>,
}

/// One e2e percentile: its quantile and value as the broker wrote them (Go writes `1.0` as
/// `1`, and admin-ui writes them back the same way).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Percentile {
    #[serde(deserialize_with = "maybe_json_number")]
    pub quantile: Option<Number>,
    #[serde(deserialize_with = "maybe_json_number")]
    pub value: Option<Number>,
}

/// A broker's `GET /info`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Info {
    #[serde(deserialize_with = "text")]
    pub hostname: String,
    #[serde(deserialize_with = "text")]
    pub broadcast_address: String,
    #[serde(deserialize_with = "number")]
    pub tcp_port: u64,
    #[serde(deserialize_with = "number")]
    pub http_port: u64,
    #[serde(deserialize_with = "text")]
    pub version: String,
}

/// A lookup's `GET /nodes`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Nodes {
    #[serde(deserialize_with = "seq")]
    pub producers: Vec<Producer>,
}

/// A broker registered with a lookup (`/nodes` gives its topics, `/lookup` does not).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Producer {
    #[serde(deserialize_with = "text")]
    pub remote_address: String,
    #[serde(deserialize_with = "text")]
    pub hostname: String,
    #[serde(deserialize_with = "text")]
    pub broadcast_address: String,
    #[serde(deserialize_with = "number")]
    pub tcp_port: u64,
    #[serde(deserialize_with = "number")]
    pub http_port: u64,
    #[serde(deserialize_with = "text")]
    pub version: String,
    /// Its topics (`None`: an entry that is not a string), each tombstoned or not at the
    /// same position of `tombstones`.
    #[serde(deserialize_with = "seq")]
    topics: Vec<Option<String>>,
    #[serde(deserialize_with = "flags")]
    tombstones: Vec<bool>,
}

impl Producer {
    /// Its topics, each with whether a lookup has it tombstoned.
    pub fn topics(&self) -> impl Iterator<Item = (&str, bool)> + '_ {
        self.topics.iter().enumerate().filter_map(|(i, t)| {
            let tombstoned = self.tombstones.get(i).copied().unwrap_or(false);
            t.as_deref().map(|t| (t, tombstoned))
        })
    }
}

/// A lookup's `GET /lookup?topic=`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Lookup {
    #[serde(deserialize_with = "names")]
    pub channels: Vec<String>,
    #[serde(deserialize_with = "seq")]
    pub producers: Vec<Producer>,
}

/// A lookup's `GET /topics`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Topics {
    #[serde(deserialize_with = "names")]
    pub topics: Vec<String>,
}

/// A lookup's `GET /channels?topic=`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Channels {
    #[serde(deserialize_with = "names")]
    pub channels: Vec<String>,
}

/// A broker's `GET /dead_letters?topic=` (beyond nsqd): the origin records, each passed
/// through.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DeadLetters {
    #[serde(deserialize_with = "seq")]
    pub dead_letters: Vec<Value>,
}

/// A broker's answer to `POST /topic/redrive`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Redriven {
    #[serde(deserialize_with = "number")]
    pub redriven: u64,
    #[serde(deserialize_with = "number")]
    pub missing: u64,
}

/// A broker's answer to `POST /channel/rewind?dry_run=true`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Rewound {
    #[serde(deserialize_with = "number")]
    pub offset: u64,
    #[serde(deserialize_with = "number")]
    pub redelivered: u64,
}

/// The body of an error answer: nsqd's `{"message": ...}`, and with `TLS_REQUIRED` the
/// port to ask again over HTTPS.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    #[serde(deserialize_with = "maybe_text")]
    pub message: Option<String>,
    #[serde(deserialize_with = "maybe_number")]
    pub https_port: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded nsqd / nsqlookupd answer (tests/fixtures/nsq, see its README).
    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/nsq")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn nsqds_stats_parse() {
        let s: Stats = parse(&fixture("nsqd_stats.json")).unwrap();
        assert_eq!((s.version.as_str(), s.health.as_str()), ("1.3.0", "OK"));
        assert!(s.start_time > 0);
        assert_eq!(s.heap_in_use(), Some(1490944));
        let t = &s.topics[0];
        assert!(t.topic_name.starts_with("http_stats_json_shape"));
        assert!(t.retention.is_none());
        let c = &t.channels[0];
        assert_eq!(
            (c.channel_name.as_str(), c.depth, c.client_count),
            ("c", 2, 1)
        );
        assert!(
            c.e2e_processing_latency.percentiles.is_empty(),
            "null reads as none"
        );
        assert!(c.dead_letter_fields().iter().all(|(_, v)| v.is_none()));
        let cl = &c.clients[0];
        assert_eq!(
            (
                cl.client_id.as_str(),
                cl.user_agent.as_str(),
                cl.ready_count
            ),
            ("kitcons", "kit/1.0", 1)
        );
        assert!(!cl.authed && cl.auth_identity.is_empty());
    }

    #[test]
    fn nsqds_info_parses() {
        let i: Info = parse(&fixture("nsqd_info.json")).unwrap();
        assert_eq!((i.hostname.as_str(), i.version.as_str()), ("vm", "1.3.0"));
        assert_eq!(i.broadcast_address, "127.0.0.1");
        assert!(i.tcp_port > 0 && i.http_port > 0);
    }

    #[test]
    fn nsqlookupds_answers_parse() {
        let n: Nodes = parse(&fixture("nsqlookupd_nodes.json")).unwrap();
        let p = &n.producers[0];
        assert_eq!((p.hostname.as_str(), p.version.as_str()), ("vm", "1.3.0"));
        assert!(p.http_port > 0 && p.tcp_port > 0 && !p.remote_address.is_empty());
        let topics: Vec<(&str, bool)> = p.topics().collect();
        assert_eq!(topics, [("lookup_topics_channels_nodes_hkge1", false)]);
        let l: Lookup = parse(&fixture("nsqlookupd_lookup.json")).unwrap();
        assert_eq!(l.channels, ["c"]);
        assert_eq!(l.producers.len(), 1);
        assert_eq!(l.producers[0].topics().count(), 0);
        let t: Topics = parse(&fixture("nsqlookupd_topics.json")).unwrap();
        assert_eq!(t.topics.len(), 1);
        let c: Channels = parse(&fixture("nsqlookupd_channels.json")).unwrap();
        assert_eq!(c.channels, ["c1", "c2"]);
        // `/info` has nothing admin-ui reads but must still be JSON it accepts.
        let _: ErrorBody = parse(&fixture("nsqlookupd_info.json")).unwrap();
    }

    /// Every recorded HTTP error answer of nsqd and nsqlookupd reads as an error body.
    #[test]
    fn recorded_error_answers_parse() {
        for name in ["nsqd_http_responses.json", "nsqlookupd_http_responses.json"] {
            let all: Value = serde_json::from_slice(&fixture(name)).unwrap();
            let mut seen = 0;
            walk(&all, &mut |body| {
                if let Ok(e) = parse::<ErrorBody>(body.as_bytes()) {
                    if e.message.is_some() {
                        seen += 1;
                    }
                }
            });
            assert!(seen > 0, "{name}: no error answer read");
        }
    }

    /// Calls `f` with every string under a `body` key.
    fn walk(v: &Value, f: &mut dyn FnMut(&str)) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    match (k.as_str(), v) {
                        ("body", Value::String(s)) => f(s),
                        _ => walk(v, f),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, f)),
            _ => {}
        }
    }

    #[test]
    fn missing_null_and_mistyped_fields_read_as_defaults() {
        let s: Stats = parse(
            br#"{"topics": [{"topic_name": 5, "depth": -1, "paused": "yes",
                  "channels": null, "retention": null,
                  "e2e_processing_latency": {"count": 2, "percentiles": [7,
                      {"quantile": 1, "value": 2.5}]}}, 3]}"#,
        )
        .unwrap();
        assert!(s.memory.is_none() && s.heap_in_use().is_none());
        let t = &s.topics[0];
        assert_eq!((t.topic_name.as_str(), t.depth, t.paused), ("", 0, false));
        assert!(t.channels.is_empty());
        assert_eq!(t.retention, Some(Value::Null), "passed through as written");
        let p = &t.e2e_processing_latency.percentiles;
        assert!(p[0].quantile.is_none());
        assert_eq!(
            p[1].quantile.as_ref().map(Number::to_string).as_deref(),
            Some("1")
        );
        assert_eq!(
            s.topics.len(),
            2,
            "an element of another type reads as the default"
        );
        assert_eq!(parse::<Stats>(b"[1]").unwrap().topics.len(), 0);
        let s: Stats = parse(
            br#"{"topics": [{"topic_name": "t", "e2e_processing_latency": null,
                  "channels": [{"channel_name": "c", "e2e_processing_latency": 3}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            s.topics[0].topic_name, "t",
            "a null latency leaves the rest read"
        );
        assert_eq!(s.topics[0].channels[0].channel_name, "c");
        assert!(parse::<Stats>(b"{").is_err());
        let p: Producer =
            parse(br#"{"topics": ["a", 1, "b", "c"], "tombstones": [true, 0, true]}"#).unwrap();
        let topics: Vec<(&str, bool)> = p.topics().collect();
        assert_eq!(topics, [("a", true), ("b", true), ("c", false)]);
    }
}

//! The HTTP API, nsqlookupd's paths, parameters, status codes and JSON shapes:
//!
//! | method | path | answer |
//! | --- | --- | --- |
//! | GET | /ping | `OK` (plain text) |
//! | GET | /info | `{"version":..}` |
//! | GET | /lookup?topic= | `{"channels":[..],"producers":[..]}`, 404 `TOPIC_NOT_FOUND` |
//! | GET | /topics | `{"topics":[..]}` |
//! | GET | /channels?topic= | `{"channels":[..]}` |
//! | GET | /nodes | `{"producers":[{.., "tombstones":[..], "topics":[..]}]}` |
//! | GET | /debug | every registration with its producers |
//! | POST | /topic/create, /topic/delete | empty |
//! | POST | /channel/create, /channel/delete | empty, 404 `CHANNEL_NOT_FOUND` |
//! | POST | /topic/tombstone?topic=&node= | empty |
//! | GET | /controller | the replication controller's node and metadata; 404 `NO_CONTROLLER` without one (ours) |
//!
//! Errors are `{"message":"CODE"}`; an unknown path is 404 `NOT_FOUND`, a known path with
//! another method 405 `METHOD_NOT_ALLOWED` (with `Allow`), as nsqlookupd's router answers.
//! Every answer but /ping carries `X-NSQ-Content-Type: nsq; version=1.0`.
//!
//! [`route`] is a plain function of the request and the database; [`serve`] drives
//! [`http1`] over each connection.

use crate::db::{is_active, Peer, Registration, Stamp};
use crate::server::Lookup;
use bytes::BytesMut;
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use http1::{Decoded, Limits, Query, RequestDecoder, RequestHead, Response, CONTINUE_RESPONSE};
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::rc::Rc;
use tracing::{debug, info, warn};

/// Size of each socket read.
const READ_CHUNK: usize = 16 * 1024;
/// Largest request body taken (nsqlookupd's handlers read none).
const MAX_BODY: usize = 1024 * 1024;
/// What Go's zero `time.Time` gives for `UnixNano()`: /debug's `tombstoned_at` of a producer
/// never tombstoned.
const GO_ZERO_TIME_UNIX_NANOS: i64 = -6_795_364_578_871_345_152;

/// The routes, for 404-versus-405 and the `Allow` header.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/ping"),
    ("GET", "/info"),
    ("GET", "/debug"),
    ("GET", "/lookup"),
    ("GET", "/topics"),
    ("GET", "/channels"),
    ("GET", "/nodes"),
    ("POST", "/topic/create"),
    ("POST", "/topic/delete"),
    ("POST", "/channel/create"),
    ("POST", "/channel/delete"),
    ("POST", "/topic/tombstone"),
    ("GET", "/controller"),
];

/// Accepts HTTP clients until the listener fails for good.
pub async fn serve(listener: TcpListener, lookup: Rc<Lookup>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                glommio::spawn_local(handle_connection(stream, lookup.clone())).detach();
            }
            Err(e) => {
                warn!("HTTP: accept failed: {e}");
                glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle_connection(mut stream: TcpStream, lookup: Rc<Lookup>) {
    if let Err(e) = serve_connection(&mut stream, &lookup).await {
        debug!("HTTP: connection ended: {e}");
    }
}

async fn serve_connection(stream: &mut TcpStream, lookup: &Lookup) -> std::io::Result<()> {
    let mut decoder = RequestDecoder::new(Limits {
        max_body: MAX_BODY,
        ..Limits::default()
    });
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut scratch = vec![0u8; READ_CHUNK];
    let mut out = BytesMut::new();
    loop {
        let mut close = false;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Request(req)) => {
                    let response = route(lookup, &req.head, Stamp::now());
                    debug!(
                        "{} {} {}",
                        response.status,
                        req.head.method(),
                        req.head.path()
                    );
                    response.write_for(&req.head, &mut out);
                    if !req.head.keep_alive {
                        close = true;
                        break;
                    }
                }
                Ok(Decoded::SendContinue) => out.extend_from_slice(CONTINUE_RESPONSE),
                Ok(Decoded::Incomplete) => break,
                Err(e) => {
                    info!("HTTP: refused request: {e}");
                    e.to_response().write_to(&mut out, false, false);
                    close = true;
                    break;
                }
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if close {
            return Ok(());
        }
        let n = stream.read(&mut scratch).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&scratch[..n]);
    }
}

/// Answers one request.
pub fn route(lookup: &Lookup, head: &RequestHead, now: Stamp) -> Response {
    let allowed: Vec<&str> = ROUTES
        .iter()
        .filter(|(_, path)| *path == head.path())
        .map(|(method, _)| *method)
        .collect();
    if allowed.is_empty() {
        return Response::error(404, "NOT_FOUND");
    }
    if !allowed.contains(&head.method()) {
        let allow = format!("{}, OPTIONS", allowed.join(", "));
        if head.method() == "OPTIONS" {
            return Response::empty(200).with_header("Allow", allow);
        }
        return Response::error(405, "METHOD_NOT_ALLOWED").with_header("Allow", allow);
    }
    let result = match head.path() {
        "/ping" => return Response::text(200, "OK"),
        "/info" => Ok(ok_json(
            &json!({ "version": protocol::NSQD_COMPAT_VERSION }),
        )),
        "/debug" => Ok(ok_json(&debug_dump(lookup))),
        "/lookup" => do_lookup(lookup, head, now),
        "/topics" => Ok(ok_json(&json!({ "topics": lookup.db.borrow().topics() }))),
        "/channels" => do_channels(lookup, head),
        "/nodes" => Ok(nodes(lookup, now)),
        "/topic/create" => do_create_topic(lookup, head),
        "/topic/delete" => do_delete_topic(lookup, head),
        "/channel/create" => do_create_channel(lookup, head),
        "/channel/delete" => do_delete_channel(lookup, head),
        "/topic/tombstone" => do_tombstone(lookup, head, now),
        "/controller" => match &lookup.controller {
            Some(c) => Ok(ok_json(&c.borrow().status())),
            None => Err(Response::error(404, "NO_CONTROLLER")),
        },
        _ => Err(Response::error(404, "NOT_FOUND")),
    };
    result.unwrap_or_else(|err| err)
}

/// An error answer, the `Err` side of every handler.
type Answer = Result<Response, Response>;

fn ok_json<T: Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response::json(200, body).nsq_v1(),
        Err(e) => Response::error(500, &e.to_string()),
    }
}

fn ok_empty() -> Response {
    Response::empty(200).nsq_v1()
}

fn bad(message: &str) -> Response {
    Response::error(400, message)
}

fn params(head: &RequestHead) -> Result<Query<'_>, Response> {
    head.query().map_err(|_| bad("INVALID_REQUEST"))
}

fn topic_param<'a>(query: &'a Query<'_>) -> Result<&'a str, Response> {
    query.get("topic").ok_or_else(|| bad("MISSING_ARG_TOPIC"))
}

/// The topic and channel of the channel endpoints, checked as nsqd's `GetTopicChannelArgs`.
fn topic_channel_params<'a>(query: &'a Query<'_>) -> Result<(&'a str, &'a str), Response> {
    let topic = topic_param(query)?;
    if !is_valid_topic_name(topic) {
        return Err(bad("INVALID_ARG_TOPIC"));
    }
    let channel = query
        .get("channel")
        .ok_or_else(|| bad("MISSING_ARG_CHANNEL"))?;
    if !is_valid_channel_name(channel) {
        return Err(bad("INVALID_ARG_CHANNEL"));
    }
    Ok((topic, channel))
}

/// A producer as /lookup lists it (field order as nsqlookupd's `PeerInfo`).
#[derive(Serialize)]
struct ProducerJson<'a> {
    remote_address: &'a str,
    hostname: &'a str,
    broadcast_address: &'a str,
    tcp_port: u16,
    http_port: u16,
    version: &'a str,
}

impl<'a> ProducerJson<'a> {
    fn of(peer: &'a Peer) -> Self {
        ProducerJson {
            remote_address: &peer.remote_address,
            hostname: &peer.info.hostname,
            broadcast_address: &peer.info.broadcast_address,
            tcp_port: peer.info.tcp_port,
            http_port: peer.info.http_port,
            version: &peer.info.version,
        }
    }
}

/// A node as /nodes lists it.
#[derive(Serialize)]
struct NodeJson<'a> {
    #[serde(flatten)]
    producer: ProducerJson<'a>,
    tombstones: Vec<bool>,
    topics: Vec<String>,
}

/// /lookup's answer (Go encodes its map with sorted keys).
#[derive(Serialize)]
struct LookupJson<'a> {
    channels: Vec<String>,
    producers: Vec<ProducerJson<'a>>,
}

/// /nodes' answer.
#[derive(Serialize)]
struct NodesJson<'a> {
    producers: Vec<NodeJson<'a>>,
}

fn do_lookup(lookup: &Lookup, head: &RequestHead, now: Stamp) -> Answer {
    let query = params(head)?;
    let topic = topic_param(&query)?;
    let db = lookup.db.borrow();
    let key = Registration::topic(topic);
    if !db.has_registration(&key) {
        return Err(Response::error(404, "TOPIC_NOT_FOUND"));
    }
    let config = &lookup.config;
    let producers: Vec<ProducerJson> = db
        .producers(&key)
        .into_iter()
        .filter(|(peer, state)| {
            is_active(peer, config.inactive_producer_timeout, now.at)
                && !state.is_tombstoned(config.tombstone_lifetime, now.at)
        })
        .map(|(peer, _)| ProducerJson::of(peer))
        .collect();
    Ok(ok_json(&LookupJson {
        channels: db.channels(topic),
        producers,
    }))
}

fn do_channels(lookup: &Lookup, head: &RequestHead) -> Answer {
    let query = params(head)?;
    let topic = topic_param(&query)?;
    Ok(ok_json(
        &json!({ "channels": lookup.db.borrow().channels(topic) }),
    ))
}

fn nodes(lookup: &Lookup, now: Stamp) -> Response {
    let db = lookup.db.borrow();
    let config = &lookup.config;
    // Tombstoned producers are listed, with their tombstones shown per topic.
    let nodes: Vec<NodeJson> = db
        .producers(&Registration::client())
        .into_iter()
        .filter(|(peer, _)| is_active(peer, config.inactive_producer_timeout, now.at))
        .map(|(peer, _)| {
            let (topics, tombstones) = db
                .topics_of_peer(peer.id)
                .into_iter()
                .map(|(topic, state)| {
                    (
                        topic,
                        state.is_tombstoned(config.tombstone_lifetime, now.at),
                    )
                })
                .unzip();
            NodeJson {
                producer: ProducerJson::of(peer),
                tombstones,
                topics,
            }
        })
        .collect();
    ok_json(&NodesJson { producers: nodes })
}

fn debug_dump(lookup: &Lookup) -> BTreeMap<String, Vec<Value>> {
    let db = lookup.db.borrow();
    // Sorted keys, as Go encodes a map.
    let mut data = BTreeMap::new();
    for (registration, producers) in db.all() {
        if producers.is_empty() {
            continue;
        }
        let key = format!(
            "{}:{}:{}",
            registration.category.as_str(),
            registration.key,
            registration.sub_key
        );
        let entries: Vec<Value> = producers
            .into_iter()
            .map(|(peer, state)| {
                json!({
                    "broadcast_address": peer.info.broadcast_address,
                    "hostname": peer.info.hostname,
                    "http_port": peer.info.http_port,
                    "id": peer.remote_address,
                    "last_update": peer.last_update.unix_nanos(),
                    "tcp_port": peer.info.tcp_port,
                    "tombstoned": state.tombstoned_at.is_some(),
                    "tombstoned_at": state
                        .tombstoned_at
                        .map_or(GO_ZERO_TIME_UNIX_NANOS, |t| t.unix_nanos()),
                    "version": peer.info.version,
                })
            })
            .collect();
        data.insert(key, entries);
    }
    data
}

fn do_create_topic(lookup: &Lookup, head: &RequestHead) -> Answer {
    let query = params(head)?;
    let topic = topic_param(&query)?;
    if !is_valid_topic_name(topic) {
        return Err(bad("INVALID_ARG_TOPIC"));
    }
    info!("DB: adding topic({topic})");
    lookup
        .db
        .borrow_mut()
        .add_registration(Registration::topic(topic));
    Ok(ok_empty())
}

fn do_delete_topic(lookup: &Lookup, head: &RequestHead) -> Answer {
    let query = params(head)?;
    let topic = topic_param(&query)?;
    let mut db = lookup.db.borrow_mut();
    for key in db.channel_registrations(topic) {
        info!("DB: removing channel({}) from topic({topic})", key.sub_key);
        db.remove_registration(&key);
    }
    if db.remove_registration(&Registration::topic(topic)) {
        info!("DB: removing topic({topic})");
    }
    Ok(ok_empty())
}

fn do_create_channel(lookup: &Lookup, head: &RequestHead) -> Answer {
    let query = params(head)?;
    let (topic, channel) = topic_channel_params(&query)?;
    let mut db = lookup.db.borrow_mut();
    info!("DB: adding channel({channel}) in topic({topic})");
    db.add_registration(Registration::channel(topic, channel));
    info!("DB: adding topic({topic})");
    db.add_registration(Registration::topic(topic));
    Ok(ok_empty())
}

fn do_delete_channel(lookup: &Lookup, head: &RequestHead) -> Answer {
    let query = params(head)?;
    let (topic, channel) = topic_channel_params(&query)?;
    let mut db = lookup.db.borrow_mut();
    if !db.remove_registration(&Registration::channel(topic, channel)) {
        return Err(Response::error(404, "CHANNEL_NOT_FOUND"));
    }
    info!("DB: removing channel({channel}) from topic({topic})");
    Ok(ok_empty())
}

fn do_tombstone(lookup: &Lookup, head: &RequestHead, now: Stamp) -> Answer {
    let query = params(head)?;
    let topic = topic_param(&query)?;
    let node = query.get("node").ok_or_else(|| bad("MISSING_ARG_NODE"))?;
    info!("DB: setting tombstone for producer@{node} of topic({topic})");
    lookup.db.borrow_mut().tombstone(topic, node, now);
    Ok(ok_empty())
}

//! Routes, as nsqadmin's router lays them out under `--base-path`: the JSON API (see
//! `admin-ui/API.md`), `/ping`, `/config/:opt` ([`crate::live_config`]), Graphite's `/render`
//! proxy and `/api/graphite` ([`crate::graphite`]), the page at its path-style URLs and its
//! static files ([`crate::pages`]). Every JSON answer is written as nsqadmin's
//! `http_api.RespondV1` writes it (`X-NSQ-Content-Type: nsq; version=1.0`; an error is
//! `{"message": "..."}`; an action done is `{"message": ""}`, or `"WARNING: ..."` naming what
//! failed). A bad request is refused before anything is asked of the cluster.

use crate::action::{Action, Settings};
use crate::audit::Audit;
use crate::cluster::{Cluster, Failure};
use crate::graphite::GraphiteSettings;
use crate::history::Done;
use crate::live_config::LiveConfig;
use crate::pages::{is_page, Pages};
use crate::rates::{Key, Store};
use http1::{Request, Response};
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};

/// Everything a request may need.
pub struct App {
    /// The live rates' series, when `--sample-interval` is not 0.
    pub rates: Option<Arc<Mutex<Store>>>,
    pub cluster: Arc<Cluster>,
    pub audit: Audit,
    pub pages: Pages,
    pub graphite: GraphiteSettings,
    pub live: LiveConfig,
    /// `""` or `/a/b`.
    pub base_path: String,
}

/// A JSON answer, as nsqadmin's `RespondV1`.
fn v1(status: u16, body: String) -> Response {
    Response::json(status, body).with_header("X-NSQ-Content-Type", "nsq; version=1.0")
}

/// A JSON answer.
fn ok(body: Value) -> Response {
    v1(200, body.to_string())
}

/// An error answer, `{"message": ...}`.
fn fail(status: u16, message: &str) -> Response {
    v1(status, json!({ "message": message }).to_string())
}

fn not_allowed(allow: &str) -> Response {
    fail(405, "METHOD_NOT_ALLOWED").with_header("Allow", allow)
}

fn answer(result: Result<Value, Failure>) -> Response {
    match result {
        Ok(v) => ok(v),
        Err(f) => failure(f),
    }
}

fn failure(f: Failure) -> Response {
    match f {
        Failure::NotFound(code) => fail(404, code),
        Failure::Refused(code) => fail(400, code),
        Failure::Upstream(why) => fail(502, &format!("UPSTREAM_ERROR: {why}")),
    }
}

/// The path under `base` (`""` or `/a/b`): `/...`, or `None` when outside it.
fn under_base<'p>(path: &'p str, base: &str) -> Option<&'p str> {
    if base.is_empty() {
        return Some(path);
    }
    match path.strip_prefix(base) {
        Some("") => Some("/"),
        Some(rest) if rest.starts_with('/') => Some(rest),
        _ => None,
    }
}

/// Does `action`: `Ok` with what failed on the way (nsqadmin's partial errors, answered as a
/// warning) and what to add to the answer, or why it could not be done at all.
fn perform(action: &Action, cluster: &Cluster) -> Result<Done, Failure> {
    let plain = match action {
        Action::TopicConfig(t, s) => return cluster.topic_config(t, s),
        Action::ChannelConfig(t, c, s) => return cluster.channel_config(t, c, s),
        Action::Redrive(t, id) => return cluster.redrive(t, id.as_deref()),
        Action::Rewind {
            topic,
            channel,
            position,
            dry_run,
        } => return cluster.rewind(topic, channel, position, *dry_run),
        Action::Create(t, c) => cluster.create(t, c.as_deref()),
        Action::Topic(t, op) => cluster.topic_action(t, op),
        Action::DeleteTopic(t) => cluster.delete_topic(t),
        Action::Channel(t, c, op) => cluster.channel_action(t, c, op),
        Action::DeleteChannel(t, c) => cluster.delete_channel(t, c),
        Action::Tombstone(n, t) => cluster.tombstone(n, t),
    };
    plain.map(|w| (w, Map::new()))
}

/// The answer to one request from `peer`.
pub fn handle(app: &App, req: &Request, peer: &str) -> Response {
    let head = &req.head;
    let method = head.method();
    let Some(path) = under_base(head.path(), &app.base_path) else {
        return fail(404, "NOT_FOUND");
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let get = method == "GET" || method == "HEAD";
    match parts.as_slice() {
        ["api", api @ ..] => return handle_api(app, req, api, peer),
        ["config", opt] => {
            return match method {
                "GET" | "PUT" => app.live.handle(method, opt, &req.body, peer),
                _ => not_allowed("GET, PUT"),
            }
        }
        ["render"] if app.graphite.proxy => {
            return match get {
                true => app.graphite.proxy(&app.cluster.upstream, head.raw_query()),
                false => not_allowed("GET"),
            }
        }
        _ => {}
    }
    let known = matches!(parts.as_slice(), ["ping"] | ["static" | "fonts", _]) || is_page(&parts);
    if !known {
        return fail(404, "NOT_FOUND");
    }
    if !get {
        return not_allowed("GET");
    }
    match parts.as_slice() {
        ["ping"] => Response::text(200, "OK"),
        ["static" | "fonts", name] => app.pages.asset(name),
        _ => app.pages.index(),
    }
}

/// A request under `<base>/api/`.
fn handle_api(app: &App, req: &Request, parts: &[&str], peer: &str) -> Response {
    let head = &req.head;
    let method = head.method();
    let cluster = &app.cluster;
    if method == "GET" || method == "HEAD" {
        if parts == ["graphite"] {
            return app
                .graphite
                .rate(&cluster.upstream, head.query().ok().as_ref());
        }
        if parts == ["rates"] {
            return rates(app, head.query().ok().as_ref());
        }
        let inactive = head
            .query()
            .ok()
            .is_some_and(|q| q.get("inactive") == Some("true"));
        return read(cluster, parts, inactive);
    }
    // As nsqadmin: who may act is checked before the request's body is read.
    if !matches!(action_route(parts, method), Ok(true)) {
        return match action_route(parts, method) {
            Err(r) => r,
            _ => fail(404, "NOT_FOUND"),
        };
    }
    if !same_origin(head) {
        return fail(403, "FORBIDDEN_ORIGIN");
    }
    let user = match app.audit.user(head) {
        Ok(u) => u,
        Err(()) => return fail(403, "FORBIDDEN"),
    };
    let action = match action_of(parts, method, &req.body) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let (topic, channel, node) = action.subject();
    let who = user.clone().unwrap_or_else(|| "-".to_owned());
    match perform(&action, cluster) {
        Ok((warnings, extra)) => {
            tracing::info!(action = %action.name(), topic, channel, node, user = who, client = peer,
                warnings = warnings.len(), "action done");
            for w in &warnings {
                tracing::warn!("{}: {w}", action.name());
            }
            // A dry run changes nothing: not notified.
            if !matches!(action, Action::Rewind { dry_run: true, .. }) {
                app.audit.notify(&action, user, head, peer);
            }
            let mut answer = Map::new();
            answer.insert(
                "message".into(),
                crate::warnings::warn_message(&warnings).into(),
            );
            answer.extend(extra);
            ok(Value::Object(answer))
        }
        Err(f) => {
            tracing::warn!(action = %action.name(), topic, channel, node, user = who, client = peer,
                "action failed: {f:?}");
            failure(f)
        }
    }
}

/// Whether `parts` and `method` name an action (`Ok(true)`), or the answer refusing them.
fn action_route(parts: &[&str], method: &str) -> Result<bool, Response> {
    match (parts, method) {
        (["topics"], "POST")
        | (["topics", _] | ["topics", _, _], "POST" | "DELETE")
        | (["nodes", _], "DELETE")
        | (["dead_letters", _], "POST") => Ok(true),
        (["dead_letters", _], _) => Err(not_allowed("GET, POST")),
        (["topics"], _) => Err(not_allowed("GET, POST")),
        (["topics", _] | ["topics", _, _], _) => Err(not_allowed("GET, POST, DELETE")),
        (["nodes", _], _) => Err(not_allowed("GET, DELETE")),
        (["nodes"] | ["counter"] | ["lookups"] | ["graphite"] | ["rates"], _) => {
            Err(not_allowed("GET"))
        }
        _ => Ok(false),
    }
}

/// A GET under `/api/`.
fn read(cluster: &Cluster, parts: &[&str], inactive: bool) -> Response {
    match parts {
        ["topics"] if inactive => ok(cluster.inactive_topics()),
        ["topics"] => answer(cluster.topics()),
        ["topics", topic] => match check_names(topic, None) {
            Ok(()) => answer(cluster.topic(topic)),
            Err(r) => r,
        },
        ["topics", topic, channel] => match check_names(topic, Some(channel)) {
            Ok(()) => answer(cluster.channel(topic, channel)),
            Err(r) => r,
        },
        ["dead_letters", topic] => match check_names(topic, None) {
            Ok(()) => answer(cluster.dead_letters(topic)),
            Err(r) => r,
        },
        ["nodes"] => answer(cluster.nodes()),
        ["nodes", node] => answer(cluster.node(node)),
        ["counter"] => answer(cluster.counter()),
        ["lookups"] => ok(cluster.lookups()),
        _ => fail(404, "NOT_FOUND"),
    }
}

/// `GET /api/rates`: every series' latest values, or with `topic` (and `channel`) or `node`
/// one series' points (see [`crate::rates`]).
fn rates(app: &App, query: Option<&http1::Query<'_>>) -> Response {
    let Some(store) = &app.rates else {
        return ok(crate::rates::disabled());
    };
    let get = |k: &str| query.and_then(|q| q.get(k));
    let key = match (get("topic"), get("channel"), get("node")) {
        (None, None, None) => None,
        (Some(t), c, None) => {
            if let Err(r) = check_names(t, c) {
                return r;
            }
            Some(match c {
                Some(c) => Key::Channel(t.to_owned(), c.to_owned()),
                None => Key::Topic(t.to_owned()),
            })
        }
        (None, None, Some(n)) if !n.is_empty() => Some(Key::Node(n.to_owned())),
        _ => return fail(400, "INVALID_ARGS"),
    };
    let Ok(store) = store.lock() else {
        return fail(500, "INTERNAL_ERROR");
    };
    ok(match key {
        None => store.summary(),
        Some(k) => store.series_json(&k),
    })
}

/// The action a POST or DELETE under `/api/` asks for, or the answer refusing it.
fn action_of<'a>(parts: &[&'a str], method: &str, body: &'a [u8]) -> Result<Action<'a>, Response> {
    match (parts, method) {
        (["topics"], "POST") => create(body),
        (["topics", topic], "POST") => {
            check_names(topic, None)?;
            let b = body_json(body)?;
            if b.get("action").and_then(Value::as_str) == Some("config") {
                let s = settings(&b, &["retention_time", "retention_bytes"])?;
                return Ok(Action::TopicConfig(topic, s));
            }
            Ok(Action::Topic(topic, op(body)?))
        }
        (["topics", topic], "DELETE") => {
            check_names(topic, None)?;
            Ok(Action::DeleteTopic(topic))
        }
        (["topics", topic, channel], "POST") => {
            check_names(topic, Some(channel))?;
            let b = body_json(body)?;
            match b.get("action").and_then(Value::as_str) {
                Some("config") => {
                    let s = settings(&b, &["max_attempts", "dead_letter_topic"])?;
                    return Ok(Action::ChannelConfig(topic, channel, s));
                }
                Some("rewind") => return rewind(&b, topic, channel),
                _ => {}
            }
            Ok(Action::Channel(topic, channel, op(body)?))
        }
        (["dead_letters", topic], "POST") => {
            check_names(topic, None)?;
            let b = body_json(body)?;
            if b.get("action").and_then(Value::as_str) != Some("redrive") {
                return Err(fail(400, "INVALID_ACTION"));
            }
            match b.get("id") {
                None | Some(Value::Null) => Ok(Action::Redrive(topic, None)),
                Some(Value::String(id)) if !id.is_empty() => {
                    Ok(Action::Redrive(topic, Some(id.clone())))
                }
                Some(_) => Err(fail(400, "INVALID_ID")),
            }
        }
        (["topics", topic, channel], "DELETE") => {
            check_names(topic, Some(channel))?;
            Ok(Action::DeleteChannel(topic, channel))
        }
        (["nodes", node], "DELETE") => {
            let b = body_json(body)?;
            match b.get("topic").and_then(Value::as_str) {
                Some(t) if is_valid_topic_name(t) => Ok(Action::Tombstone(node, t.to_owned())),
                _ => Err(fail(400, "INVALID_TOPIC")),
            }
        }
        _ => Err(fail(404, "NOT_FOUND")),
    }
}

fn check_names(topic: &str, channel: Option<&str>) -> Result<(), Response> {
    if !is_valid_topic_name(topic) {
        return Err(fail(400, "INVALID_TOPIC"));
    }
    match channel {
        Some(c) if !is_valid_channel_name(c) => Err(fail(400, "INVALID_CHANNEL")),
        _ => Ok(()),
    }
}

/// Whether a request that changes something comes from admin-ui's own page. A browser names
/// the page that sent a POST or DELETE in `Origin`; one from another site (a forged form or
/// fetch: a plain-text POST needs no CORS preflight) is refused, so a page elsewhere cannot
/// delete topics through an operator's browser. Tools (curl, scripts) send no `Origin`.
fn same_origin(head: &http1::RequestHead) -> bool {
    let Some(origin) = head.header("Origin") else {
        return true;
    };
    let origin = origin.trim_end_matches('/');
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match (origin_host, head.header("Host")) {
        (Some(o), Some(host)) => o.eq_ignore_ascii_case(host.trim()),
        _ => false,
    }
}

/// A request body as a JSON object.
fn body_json(body: &[u8]) -> Result<serde_json::Map<String, Value>, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(fail(400, "INVALID_BODY")),
    }
}

/// The `action` of a pause / unpause / empty request.
fn op(body: &[u8]) -> Result<&'static str, Response> {
    let b = body_json(body)?;
    match b.get("action").and_then(Value::as_str) {
        Some("pause") => Ok("pause"),
        Some("unpause") => Ok("unpause"),
        Some("empty") => Ok("empty"),
        _ => Err(fail(400, "INVALID_ACTION")),
    }
}

/// The settings among `keys` that the body gives (a string, or a number), at least one;
/// their values are the brokers' to check.
fn settings(
    b: &serde_json::Map<String, Value>,
    keys: &[&'static str],
) -> Result<Settings, Response> {
    let mut out = Vec::new();
    for k in keys {
        match b.get(*k) {
            None | Some(Value::Null) => {}
            Some(Value::String(v)) => out.push((*k, v.trim().to_owned())),
            Some(Value::Number(n)) => out.push((*k, n.to_string())),
            Some(_) => return Err(fail(400, &format!("INVALID_{}", k.to_uppercase()))),
        }
    }
    if out.is_empty() {
        return Err(fail(
            400,
            &format!("MISSING_SETTINGS: give {}", keys.join(" or ")),
        ));
    }
    Ok(out)
}

/// `{"action": "rewind", "timestamp": <RFC 3339 or ns> | "earliest": true, "dry_run": bool}`.
fn rewind<'a>(
    b: &serde_json::Map<String, Value>,
    topic: &'a str,
    channel: &'a str,
) -> Result<Action<'a>, Response> {
    let position = match (b.get("timestamp"), b.get("earliest")) {
        (Some(Value::String(t)), None) if !t.trim().is_empty() => ("timestamp", t.trim().into()),
        (Some(Value::Number(n)), None) => ("timestamp", n.to_string()),
        (None, Some(Value::Bool(true))) => ("earliest", "true".into()),
        _ => {
            return Err(fail(
                400,
                "INVALID_POSITION: give timestamp (RFC 3339 or unix ns) or earliest: true",
            ))
        }
    };
    let dry_run = match b.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(d)) => *d,
        Some(_) => return Err(fail(400, "INVALID_DRY_RUN")),
    };
    Ok(Action::Rewind {
        topic,
        channel,
        position,
        dry_run,
    })
}

/// `POST /api/topics` with `{"topic": ..., "channel": ...}`.
fn create(body: &[u8]) -> Result<Action<'static>, Response> {
    let b = body_json(body)?;
    let topic = match b.get("topic").and_then(Value::as_str) {
        Some(t) if is_valid_topic_name(t) => t.to_owned(),
        _ => return Err(fail(400, "INVALID_TOPIC")),
    };
    let channel = match b.get("channel") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if c.is_empty() => None,
        Some(Value::String(c)) if is_valid_channel_name(c) => Some(c.clone()),
        Some(_) => return Err(fail(400, "INVALID_CHANNEL")),
    };
    Ok(Action::Create(topic, channel))
}

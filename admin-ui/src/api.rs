//! Routes: the JSON API (see `admin-ui/API.md`), the page and its static files. Every answer is
//! built here from what [`Cluster`] gathers; a bad request is refused before anything is asked
//! of the cluster.

use crate::audit::Audit;
use crate::cluster::{Cluster, Failure};
use http1::{Request, Response};
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use serde_json::{json, Value};

const INDEX_HTML: &str = include_str!("../static/index.html");
const APP_JS: &str = include_str!("../static/app.js");
const STYLE_CSS: &str = include_str!("../static/style.css");

/// A JSON answer.
fn ok(body: Value) -> Response {
    Response::json(200, body.to_string())
}

/// An error answer, `{"message": ...}`.
fn fail(status: u16, message: &str) -> Response {
    Response::json(status, json!({ "message": message }).to_string())
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
        Failure::Upstream(why) => fail(502, &why),
    }
}

fn static_file(content_type: &'static str, body: &'static str) -> Response {
    Response::empty(200)
        .with_header("Content-Type", content_type)
        .with_header("Cache-Control", "no-cache")
        .with_body(body)
}

/// What a POST or DELETE asks for.
pub enum Action<'a> {
    Create(String, Option<String>),
    Topic(&'a str, &'static str),
    DeleteTopic(&'a str),
    Channel(&'a str, &'a str, &'static str),
    DeleteChannel(&'a str, &'a str),
    Tombstone(&'a str, String),
}

impl Action<'_> {
    /// nsqadmin's name for it in notifications.
    pub fn name(&self) -> String {
        match self {
            Action::Create(_, None) => "create_topic".into(),
            Action::Create(_, Some(_)) => "create_channel".into(),
            Action::Topic(_, op) => format!("{op}_topic"),
            Action::DeleteTopic(_) => "delete_topic".into(),
            Action::Channel(_, _, op) => format!("{op}_channel"),
            Action::DeleteChannel(..) => "delete_channel".into(),
            Action::Tombstone(..) => "tombstone_topic_producer".into(),
        }
    }

    /// Its topic, channel and node.
    pub fn subject(&self) -> (&str, Option<&str>, Option<&str>) {
        match self {
            Action::Create(t, c) => (t, c.as_deref(), None),
            Action::Topic(t, _) | Action::DeleteTopic(t) => (t, None, None),
            Action::Channel(t, c, _) | Action::DeleteChannel(t, c) => (t, Some(c), None),
            Action::Tombstone(n, t) => (t, None, Some(n)),
        }
    }

    fn perform(&self, cluster: &Cluster) -> Result<(), Failure> {
        match self {
            Action::Create(t, c) => cluster.create(t, c.as_deref()),
            Action::Topic(t, op) => cluster.topic_action(t, op),
            Action::DeleteTopic(t) => cluster.delete_topic(t),
            Action::Channel(t, c, op) => cluster.channel_action(t, c, op),
            Action::DeleteChannel(t, c) => cluster.delete_channel(t, c),
            Action::Tombstone(n, t) => cluster.tombstone(n, t),
        }
    }
}

/// The answer to one request from `peer`.
pub fn handle(cluster: &Cluster, audit: &Audit, req: &Request, peer: &str) -> Response {
    let head = &req.head;
    let method = head.method();
    let path = head.path();
    let Some(api) = path.strip_prefix("/api/") else {
        let get = method == "GET" || method == "HEAD";
        return match path {
            _ if !get => not_allowed("GET, HEAD"),
            "/ping" => Response::text(200, "OK"),
            "/static/app.js" => static_file("text/javascript; charset=utf-8", APP_JS),
            "/static/style.css" => static_file("text/css; charset=utf-8", STYLE_CSS),
            p if p.starts_with("/static/") => fail(404, "NOT_FOUND"),
            _ => static_file("text/html; charset=utf-8", INDEX_HTML),
        };
    };
    let parts: Vec<&str> = api.split('/').collect();
    if method == "GET" || method == "HEAD" {
        return read(cluster, &parts);
    }
    let action = match action_of(&parts, method, &req.body) {
        Ok(a) => a,
        Err(r) => return r,
    };
    if !same_origin(head) {
        return fail(403, "FORBIDDEN_ORIGIN");
    }
    let user = match audit.user(head) {
        Ok(u) => u,
        Err(()) => return fail(403, "FORBIDDEN"),
    };
    let result = action.perform(cluster);
    if result.is_ok() {
        audit.notify(&action, user, head, peer);
    }
    answer(result.map(|()| json!({"message": "OK"})))
}

/// A GET under `/api/`.
fn read(cluster: &Cluster, parts: &[&str]) -> Response {
    match parts {
        ["topics"] => ok(cluster.topics()),
        ["topics", topic] => match check_names(topic, None) {
            Ok(()) => answer(cluster.topic(topic)),
            Err(r) => r,
        },
        ["topics", topic, channel] => match check_names(topic, Some(channel)) {
            Ok(()) => answer(cluster.channel(topic, channel)),
            Err(r) => r,
        },
        ["nodes"] => ok(cluster.nodes()),
        ["nodes", node] => answer(cluster.node(node)),
        ["counter"] => ok(cluster.counter()),
        ["lookups"] => ok(cluster.lookups()),
        _ => fail(404, "NOT_FOUND"),
    }
}

/// The action a POST or DELETE under `/api/` asks for, or the answer refusing it.
fn action_of<'a>(parts: &[&'a str], method: &str, body: &'a [u8]) -> Result<Action<'a>, Response> {
    match (parts, method) {
        (["topics"], "POST") => create(body),
        (["topics", topic], "POST") => {
            check_names(topic, None)?;
            Ok(Action::Topic(topic, op(body)?))
        }
        (["topics", topic], "DELETE") => {
            check_names(topic, None)?;
            Ok(Action::DeleteTopic(topic))
        }
        (["topics", topic, channel], "POST") => {
            check_names(topic, Some(channel))?;
            Ok(Action::Channel(topic, channel, op(body)?))
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
        (["topics"], _) => Err(not_allowed("GET, POST")),
        (["topics", _] | ["topics", _, _], _) => Err(not_allowed("GET, POST, DELETE")),
        (["nodes", _], _) => Err(not_allowed("GET, DELETE")),
        (["nodes"] | ["counter"] | ["lookups"], _) => Err(not_allowed("GET")),
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

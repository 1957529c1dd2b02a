//! Routes: the JSON API (see `admin-ui/API.md`), the page and its static files. Every answer is
//! built here from what [`Cluster`] gathers; a bad request is refused before anything is asked
//! of the cluster.

use crate::cluster::{Cluster, Failure};
use protocol::http::{Request, Response};
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

fn done(result: Result<(), Failure>) -> Response {
    answer(result.map(|()| json!({"message": "OK"})))
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

/// The answer to one request.
pub fn handle(cluster: &Cluster, req: &Request) -> Response {
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
    if method != "GET" && method != "HEAD" && !same_origin(head) {
        return fail(403, "FORBIDDEN_ORIGIN");
    }
    let parts: Vec<&str> = api.split('/').collect();
    match (parts.as_slice(), method) {
        (["topics"], "GET") => ok(cluster.topics()),
        (["topics"], "POST") => create(cluster, &req.body),
        (["topics"], _) => not_allowed("GET, POST"),
        (["topics", topic], m) => {
            if !is_valid_topic_name(topic) {
                return fail(400, "INVALID_TOPIC");
            }
            match m {
                "GET" => answer(cluster.topic(topic)),
                "POST" => match action(&req.body) {
                    Ok(a) => done(cluster.topic_action(topic, a)),
                    Err(r) => r,
                },
                "DELETE" => done(cluster.delete_topic(topic)),
                _ => not_allowed("GET, POST, DELETE"),
            }
        }
        (["topics", topic, channel], m) => {
            if !is_valid_topic_name(topic) {
                return fail(400, "INVALID_TOPIC");
            }
            if !is_valid_channel_name(channel) {
                return fail(400, "INVALID_CHANNEL");
            }
            match m {
                "GET" => answer(cluster.channel(topic, channel)),
                "POST" => match action(&req.body) {
                    Ok(a) => done(cluster.channel_action(topic, channel, a)),
                    Err(r) => r,
                },
                "DELETE" => done(cluster.delete_channel(topic, channel)),
                _ => not_allowed("GET, POST, DELETE"),
            }
        }
        (["nodes"], "GET") => ok(cluster.nodes()),
        (["nodes"], _) => not_allowed("GET"),
        (["nodes", node], "GET") => answer(cluster.node(node)),
        (["nodes", node], "DELETE") => match body_json(&req.body) {
            Ok(b) => match b.get("topic").and_then(Value::as_str) {
                Some(t) if is_valid_topic_name(t) => done(cluster.tombstone(node, t)),
                _ => fail(400, "INVALID_TOPIC"),
            },
            Err(r) => r,
        },
        (["nodes", _], _) => not_allowed("GET, DELETE"),
        (["counter"], "GET") => ok(cluster.counter()),
        (["counter"], _) => not_allowed("GET"),
        (["lookups"], "GET") => ok(cluster.lookups()),
        (["lookups"], _) => not_allowed("GET"),
        _ => fail(404, "NOT_FOUND"),
    }
}

/// Whether a request that changes something comes from admin-ui's own page. A browser names
/// the page that sent a POST or DELETE in `Origin`; one from another site (a forged form or
/// fetch: a plain-text POST needs no CORS preflight) is refused, so a page elsewhere cannot
/// delete topics through an operator's browser. Tools (curl, scripts) send no `Origin`.
fn same_origin(head: &protocol::http::RequestHead) -> bool {
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
fn action(body: &[u8]) -> Result<&'static str, Response> {
    let b = body_json(body)?;
    match b.get("action").and_then(Value::as_str) {
        Some("pause") => Ok("pause"),
        Some("unpause") => Ok("unpause"),
        Some("empty") => Ok("empty"),
        _ => Err(fail(400, "INVALID_ACTION")),
    }
}

/// `POST /api/topics` with `{"topic": ..., "channel": ...}`.
fn create(cluster: &Cluster, body: &[u8]) -> Response {
    let b = match body_json(body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(topic) = b.get("topic").and_then(Value::as_str) else {
        return fail(400, "INVALID_TOPIC");
    };
    if !is_valid_topic_name(topic) {
        return fail(400, "INVALID_TOPIC");
    }
    let channel = match b.get("channel") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if c.is_empty() => None,
        Some(Value::String(c)) if is_valid_channel_name(c) => Some(c.as_str()),
        Some(_) => return fail(400, "INVALID_CHANNEL"),
    };
    done(cluster.create(topic, channel))
}

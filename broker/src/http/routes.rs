//! From path and method to handler, as nsqd's router (httprouter) does it: 404 `NOT_FOUND`
//! for an unknown path, 405 `METHOD_NOT_ALLOWED` (with `Allow`) for a known path asked with
//! another method, 200 with `Allow` for OPTIONS, and httprouter's redirects of a path with a
//! stray trailing slash, `//`, `.`/`..` or capitals to the route it means. A handler's error
//! becomes its answer here, in [`handle`].

use super::api_error::{allow, ApiError};
use super::{dead_letter_routes, info, manage, pub_routes, replay_routes, report};
use crate::admin_ops::Action;
use crate::shard::Shard;
use http1::{escape_html, escape_path, Query, Request, RequestHead, Response};
use std::rc::Rc;

/// A handler's answer.
pub enum Answer {
    /// `200 OK` with body `OK` and nsqd's V1 headers (the hot path of /pub, pre-encoded).
    PubOk,
    Response(Response),
}

impl From<Response> for Answer {
    fn from(r: Response) -> Answer {
        Answer::Response(r)
    }
}

/// What a handler returns: its answer, or the error [`handle`] turns into one.
pub type Handled = Result<Answer, ApiError>;

/// The uncompressed form of [`Answer::PubOk`].
pub fn pub_ok() -> Response {
    Response::text(200, "OK").nsq_v1()
}

/// A V1 success without a body (topic and channel actions).
pub fn done() -> Answer {
    Answer::Response(Response::empty(200).nsq_v1())
}

/// The query string, or nsqd's 400 `INVALID_REQUEST`.
pub fn query(head: &RequestHead) -> Result<Query<'_>, ApiError> {
    head.query().map_err(|_| ApiError::InvalidRequest)
}

/// The `topic` argument, checked as nsqd's channel and config endpoints check it:
/// 400 `MISSING_ARG_TOPIC` or `INVALID_ARG_TOPIC`.
pub fn topic_arg<'a>(q: &'a Query<'a>) -> Result<&'a str, ApiError> {
    let topic = q.get("topic").ok_or(ApiError::MissingArgTopic)?;
    if !protocol::names::is_valid_topic_name(topic) {
        return Err(ApiError::InvalidArgTopic);
    }
    Ok(topic)
}

/// The `topic` and `channel` arguments, checked as nsqd's channel endpoints check them:
/// [`topic_arg`], then 400 `MISSING_ARG_CHANNEL` or `INVALID_ARG_CHANNEL`.
pub fn topic_and_channel_args<'a>(q: &'a Query<'a>) -> Result<(&'a str, &'a str), ApiError> {
    let topic = topic_arg(q)?;
    let channel = q.get("channel").ok_or(ApiError::MissingArgChannel)?;
    if !protocol::names::is_valid_channel_name(channel) {
        return Err(ApiError::InvalidArgChannel);
    }
    Ok((topic, channel))
}

/// The answer to a body over `--max-body-size`, in the words of the endpoint it was sent to.
pub fn body_too_large(head: &RequestHead) -> Response {
    match head.path() {
        "/pub" => ApiError::MsgTooBig,
        "/mpub" => ApiError::BodyTooBig,
        _ => ApiError::RequestTooLarge,
    }
    .response()
}

enum Route {
    Ping,
    Info,
    Pub,
    Mpub,
    Stats,
    Metrics,
    Topic(Action),
    TopicConfig,
    Channel(Action),
    Rewind,
    ChannelConfig,
    DeadLetters,
    Redrive,
    Config,
}

fn action(verb: &str) -> Option<Action> {
    Some(match verb {
        "create" => Action::Create,
        "delete" => Action::Delete,
        "empty" => Action::Empty,
        "pause" => Action::Pause,
        "unpause" => Action::Unpause,
        _ => return None,
    })
}

/// The route of `path` and the methods it takes.
fn route(path: &str) -> Option<(Route, &'static [&'static str])> {
    const GET: &[&str] = &["GET"];
    const POST: &[&str] = &["POST"];
    Some(match path {
        "/ping" => (Route::Ping, GET),
        "/info" => (Route::Info, GET),
        "/pub" => (Route::Pub, POST),
        "/mpub" => (Route::Mpub, POST),
        "/stats" => (Route::Stats, GET),
        "/metrics" => (Route::Metrics, GET),
        "/topic/config" => (Route::TopicConfig, POST),
        "/channel/rewind" => (Route::Rewind, POST),
        "/channel/config" => (Route::ChannelConfig, POST),
        "/dead_letters" => (Route::DeadLetters, GET),
        "/topic/redrive" => (Route::Redrive, POST),
        _ => {
            if let Some(verb) = path.strip_prefix("/topic/") {
                (Route::Topic(action(verb)?), POST)
            } else if let Some(verb) = path.strip_prefix("/channel/") {
                (Route::Channel(action(verb)?), POST)
            } else {
                let opt = path.strip_prefix("/config/")?;
                if opt.is_empty() || opt.contains('/') {
                    return None;
                }
                (Route::Config, &["GET", "PUT"])
            }
        }
    })
}

/// httprouter's redirects, which nsqd's router keeps on: a GET, POST or PUT path that is no
/// route, but is one for that method with its trailing slash toggled, or cleaned (`//`, `.`,
/// `..`) and matched case-insensitively, is sent there with the query kept: 301 for GET, 307
/// for the others (same method, same body).
fn redirect(head: &RequestHead) -> Option<Answer> {
    let (method, path) = (head.method(), head.path());
    if !matches!(method, "GET" | "POST" | "PUT") || path == "/" {
        return None;
    }
    let takes = |p: &str| route(p).is_some_and(|(_, methods)| methods.contains(&method));
    let toggled = match path.strip_suffix('/') {
        Some(p) => p.to_string(),
        None => format!("{path}/"),
    };
    let target = if takes(&toggled) {
        toggled
    } else {
        let fixed = case_fixed(&clean_path(path));
        let fixed_toggled = fixed.strip_suffix('/').unwrap_or(&fixed).to_string();
        [fixed, fixed_toggled].into_iter().find(|p| takes(p))?
    };
    // The path goes back escaped (it was decoded); the query as it came.
    let location = match head.raw_query() {
        "" => escape_path(&target),
        q => format!("{}?{q}", escape_path(&target)),
    };
    let response = if method == "GET" {
        let href = escape_html(&location);
        let body = format!("<a href=\"{href}\">Moved Permanently</a>.\n\n");
        Response::empty(301)
            .with_header("Content-Type", "text/html; charset=utf-8")
            .with_body(body)
    } else {
        Response::empty(307)
    };
    Some(Answer::Response(response.with_header("Location", location)))
}

/// `path` as Go's `path.Clean` makes it (no `//`, `.` or `..`), its trailing slash kept.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = format!("/{}", parts.join("/"));
    let trailing = path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..");
    if trailing && out.len() > 1 {
        out.push('/');
    }
    out
}

/// The routes' fixed parts in lower case; a `/config/` option name keeps its case (it is a
/// parameter, matched exactly).
fn case_fixed(path: &str) -> String {
    const CONFIG: &str = "/config/";
    let lower = path.to_ascii_lowercase();
    if lower.starts_with(CONFIG) && path.is_char_boundary(CONFIG.len()) {
        format!("{CONFIG}{}", &path[CONFIG.len()..])
    } else {
        lower
    }
}

/// Answers one request.
pub async fn handle(shard: &Rc<Shard>, req: &Request) -> Answer {
    route_and_serve(shard, req)
        .await
        .unwrap_or_else(|e| Answer::Response(e.response()))
}

async fn route_and_serve(shard: &Rc<Shard>, req: &Request) -> Handled {
    let method = req.head.method();
    if method == "OPTIONS" && req.head.path() == "*" {
        // Go's server answers `OPTIONS *` itself, before the router: 200, nothing else.
        return Ok(Answer::Response(Response::empty(200)));
    }
    let Some((route, methods)) = route(req.head.path()) else {
        return redirect(&req.head).ok_or(ApiError::NotFound);
    };
    if method == "OPTIONS" {
        return Ok(Answer::Response(
            Response::empty(200).with_header("Allow", allow(methods)),
        ));
    }
    if !methods.contains(&method) {
        return Err(ApiError::MethodNotAllowed { allow: methods });
    }
    match route {
        Route::Ping => info::ping(shard).await,
        Route::Info => info::info(shard),
        Route::Pub => pub_routes::pub_one(shard, req).await,
        Route::Mpub => pub_routes::pub_many(shard, req).await,
        Route::Stats => report::stats(shard, req).await,
        Route::Metrics => report::metrics(shard).await,
        Route::Topic(a) => manage::topic(shard, req, a).await,
        Route::TopicConfig => manage::topic_config(shard, req).await,
        Route::Channel(Action::Create) => replay_routes::create(shard, req).await,
        Route::Channel(a) => manage::channel(shard, req, a).await,
        Route::Rewind => replay_routes::rewind(shard, req).await,
        Route::ChannelConfig => dead_letter_routes::channel_config(shard, req).await,
        Route::DeadLetters => dead_letter_routes::list(shard, req).await,
        Route::Redrive => dead_letter_routes::redrive(shard, req).await,
        Route::Config => info::config(shard, req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_methods() {
        assert!(matches!(route("/pub"), Some((Route::Pub, m)) if m == ["POST"]));
        assert!(matches!(
            route("/channel/unpause"),
            Some((Route::Channel(Action::Unpause), _))
        ));
        assert!(matches!(route("/config/log_level"), Some((Route::Config, m)) if m.len() == 2));
        assert!(
            matches!(route("/channel/config"), Some((Route::ChannelConfig, m)) if m == ["POST"])
        );
        assert!(matches!(route("/dead_letters"), Some((Route::DeadLetters, m)) if m == ["GET"]));
        assert!(matches!(route("/topic/redrive"), Some((Route::Redrive, m)) if m == ["POST"]));
        for (path, clean) in [
            ("//pub", "/pub"),
            ("/a/../pub/./", "/pub/"),
            ("/..", "/"),
            ("/x/", "/x/"),
            ("/", "/"),
        ] {
            assert_eq!(clean_path(path), clean, "{path}");
        }
        assert_eq!(case_fixed("/CONFIG/Log_Level"), "/config/Log_Level");
        assert_eq!(case_fixed("/Topic/CREATE"), "/topic/create");
        for unknown in [
            "/",
            "/topic/nope",
            "/config/",
            "/config/a/b",
            "/no/such/endpoint",
        ] {
            assert!(route(unknown).is_none(), "{unknown}");
        }
    }
}

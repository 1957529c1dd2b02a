//! Who may act, and who is told: nsqadmin's `--admin-user` / `--acl-http-header` (when admin
//! users are given, a POST or DELETE must carry one of their names in that header, set by the
//! authenticating proxy in front) and `--notification-http-endpoint` (every action that
//! succeeded is POSTed there as JSON, in nsqadmin's shape, from a thread of its own so that a
//! slow endpoint never holds up the operator).

use crate::action::Action;
use crate::upstream::Upstream;
use http1::RequestHead;
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::warn;

/// Where notifications go: `host:port`, the path (with its query), and whether over HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: String,
    pub path: String,
    /// `https://`: sent over TLS with the `--http-client-tls-*` settings.
    pub tls: bool,
    /// As given.
    pub url: String,
}

impl Endpoint {
    /// Reads `http://host:port/path` or `https://host:port/path`.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => return Err(format!("{url:?}: an http:// or https:// URL is needed")),
        };
        let (addr, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        match addr.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => return Err(format!("{url:?}: the address must be host:port")),
        }
        Ok(Endpoint {
            addr: addr.to_owned(),
            path: path.to_owned(),
            tls,
            url: url.to_owned(),
        })
    }
}

/// The access and notification settings.
pub struct Audit {
    /// Users allowed to act; empty: anyone.
    pub admin_users: Vec<String>,
    /// The header naming the user (set by a proxy).
    pub acl_http_header: String,
    pub notify: Option<Endpoint>,
    /// This machine's name, sent as `via`.
    pub hostname: String,
    pub upstream: std::sync::Arc<Upstream>,
}

impl Audit {
    /// The user a request acts as; `Err` when admin users are set and it is none of them.
    pub fn user(&self, head: &RequestHead) -> Result<Option<String>, ()> {
        let user = head
            .header(&self.acl_http_header)
            .map(|u| u.into_owned())
            .filter(|u| !u.is_empty());
        if self.admin_users.is_empty() {
            return Ok(user);
        }
        match user {
            Some(u) if self.admin_users.contains(&u) => Ok(Some(u)),
            _ => Err(()),
        }
    }

    /// Tells the notification endpoint (if any) that `action` was done, as nsqadmin does:
    /// one notification per nsqadmin action (a create with a channel is `create_topic` then
    /// `create_channel`), the user from the request's basic auth (else, admin-ui's addition,
    /// the `--acl-http-header` user), `remote_ip` the peer's `ip:port`, and `channel`, `node`
    /// and `user` left out when empty.
    pub fn notify(&self, action: &Action, user: Option<String>, head: &RequestHead, peer: &str) {
        let Some(endpoint) = &self.notify else {
            return;
        };
        let (topic, channel, node) = action.subject();
        let user = basic_auth_user(head).or(user);
        let mut names = vec![(action.name(), channel)];
        if let (Action::Create(..), Some(_)) = (action, channel) {
            names.insert(0, ("create_topic".to_owned(), None));
        }
        for (name, channel) in names {
            let mut body = json!({
                "action": name,
                "topic": topic,
                "timestamp": SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                "remote_ip": peer,
                "user_agent": head.header("User-Agent").unwrap_or_default(),
                "url": request_url(head),
                "via": self.hostname,
            });
            for (key, value) in [
                ("channel", channel),
                ("node", node),
                ("user", user.as_deref()),
            ] {
                if let Some(v) = value.filter(|v| !v.is_empty()) {
                    body[key] = v.into();
                }
            }
            self.send(endpoint.clone(), body.to_string());
        }
    }

    /// POSTs one notification from a thread of its own.
    fn send(&self, endpoint: Endpoint, body: String) {
        let upstream = self.upstream.clone();
        let spawned = std::thread::Builder::new()
            .name("admin-notify".into())
            .spawn(move || {
                let sent = upstream.post_body(
                    endpoint.tls,
                    &endpoint.addr,
                    &endpoint.path,
                    "application/json",
                    body.as_bytes(),
                );
                if let Err(e) = sent {
                    warn!("notification not delivered: {e}");
                }
            });
        if let Err(e) = spawned {
            warn!("cannot start a notification thread: {e}");
        }
    }
}

/// The URL an action was asked at, as nsqadmin writes it: `https` when a TLS-terminating
/// proxy in front says so in `X-Scheme`.
fn request_url(head: &RequestHead) -> String {
    let host = head.header("Host").unwrap_or_default().into_owned();
    let scheme = match head.header("X-Scheme") {
        Some(s) if s.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    match head.raw_query() {
        "" => format!("{scheme}://{host}{}", head.path()),
        q => format!("{scheme}://{host}{}?{q}", head.path()),
    }
}

/// The user of a request's `Authorization: Basic` header (nsqadmin's `basicAuthUser`).
fn basic_auth_user(head: &RequestHead) -> Option<String> {
    let value = head.header("Authorization")?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = String::from_utf8(base64_decode(encoded.trim())?).ok()?;
    let (user, _) = decoded.split_once(':')?;
    Some(user.to_owned())
}

/// Standard base64 (with padding), `None` when malformed.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    if !s.len().is_multiple_of(4) || s.len() - bytes.len() > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let take = chunk.len() - 1;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn basic_auth_base64() {
        assert_eq!(
            super::base64_decode("YWxpY2U6c2VjcmV0").as_deref(),
            Some(&b"alice:secret"[..])
        );
        assert_eq!(super::base64_decode("YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(super::base64_decode("YWI=").as_deref(), Some(&b"ab"[..]));
        assert!(super::base64_decode("YQ=").is_none());
        assert!(super::base64_decode("Y$==").is_none());
    }

    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            Endpoint::parse("http://h:80/hook?x=1").unwrap(),
            Endpoint {
                addr: "h:80".into(),
                path: "/hook?x=1".into(),
                tls: false,
                url: "http://h:80/hook?x=1".into(),
            }
        );
        assert_eq!(Endpoint::parse("http://h:80").unwrap().path, "/");
        let secure = Endpoint::parse("https://h:443/hook").unwrap();
        assert!(secure.tls && secure.addr == "h:443" && secure.path == "/hook");
        assert!(Endpoint::parse("ftp://h:21/").is_err());
        assert!(Endpoint::parse("http://h/").is_err());
    }
}

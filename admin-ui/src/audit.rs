//! Who may act, and who is told: nsqadmin's `--admin-user` / `--acl-http-header` (when admin
//! users are given, a POST or DELETE must carry one of their names in that header, set by the
//! authenticating proxy in front) and `--notification-http-endpoint` (every action that
//! succeeded is POSTed there as JSON, in nsqadmin's shape, from a thread of its own so that a
//! slow endpoint never holds up the operator).

use crate::api::Action;
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

    /// Tells the notification endpoint (if any) that `action` was done.
    pub fn notify(&self, action: &Action, user: Option<String>, head: &RequestHead, peer: &str) {
        let Some(endpoint) = self.notify.clone() else {
            return;
        };
        let (topic, channel, node) = action.subject();
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let host = head.header("Host").unwrap_or_default().into_owned();
        // As nsqadmin: a TLS-terminating proxy in front says so in X-Scheme.
        let scheme = match head.header("X-Scheme") {
            Some(s) if s.eq_ignore_ascii_case("https") => "https",
            _ => "http",
        };
        let body = json!({
            "action": action.name(),
            "topic": topic,
            "channel": channel.unwrap_or_default(),
            "node": node.unwrap_or_default(),
            "timestamp": timestamp,
            "user": user.unwrap_or_default(),
            "remote_ip": peer.rsplit_once(':').map_or(peer, |(ip, _)| ip),
            "user_agent": head.header("User-Agent").unwrap_or_default(),
            "url": format!("{scheme}://{host}{}", head.path()),
            "via": self.hostname,
        })
        .to_string();
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

#[cfg(test)]
mod tests {
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

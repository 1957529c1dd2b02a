//! An auth server's address and the request sent to it, as nsqd forms them.
//!
//! `--auth-http-address host:port` means `http://host:port/auth`; an address containing
//! `://` is a full URL used as given. Only `http://` is served (an `https://` server, or a URL
//! with user info, is refused at start-up with a clear message rather than failing every AUTH).
//! The request carries `common_name`, `remote_ip`, `secret` and `tls` (`true`/`false`): for
//! `GET` as a query string (keys sorted, values escaped as Go's `url.Values.Encode`), for
//! `POST` as the JSON of Go's `url.Values` (`{"common_name":[".."],...}`, keys sorted), with
//! `Accept: application/vnd.nsq; version=1.0`.
//!
//! Invariants: a parsed [`AuthServer`] always has a non-empty host and a port; the request
//! bytes never contain a raw CR or LF from the client's secret (it is escaped).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `--auth-http-request-method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    Get,
    Post,
}

impl AuthMethod {
    /// nsqd's values, exactly (`get` or `post`).
    pub fn parse(s: &str) -> Result<AuthMethod, String> {
        match s {
            "get" => Ok(AuthMethod::Get),
            "post" => Ok(AuthMethod::Post),
            _ => Err("--auth-http-request-method must be post or get".into()),
        }
    }
}

/// One auth server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthServer {
    /// As given on the command line (for logs).
    pub address: String,
    /// The URL's host and port as written (the `Host` header).
    pub authority: String,
    /// The host, without IPv6 brackets (what is resolved).
    pub host: String,
    pub port: u16,
    /// The path and query of the URL (`/auth` for a `host:port` address).
    pub path: String,
}

/// What one AUTH asks: nsqd's four values.
#[derive(Debug, Clone, Copy)]
pub struct AuthRequest<'a> {
    /// The client's IP address, without the port ("" when unknown).
    pub remote_ip: &'a str,
    /// Whether the client's connection is over TLS.
    pub tls: bool,
    /// The body of the client's AUTH command.
    pub secret: &'a [u8],
    /// The common name of the client's certificate ("" without one).
    pub common_name: &'a str,
}

impl AuthServer {
    /// Parses an `--auth-http-address` value; `Err` is the text for the operator.
    pub fn parse(address: &str) -> Result<AuthServer, String> {
        let url = if address.contains("://") {
            address.to_string()
        } else {
            format!("http://{address}/auth")
        };
        let refuse = |why: &str| format!("--auth-http-address {address:?}: {why}");
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(refuse("not a URL"));
        };
        if scheme.eq_ignore_ascii_case("https") {
            return Err(refuse(
                "https auth servers are not supported by this broker yet; use http://",
            ));
        }
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(refuse("the scheme must be http"));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err(refuse("user info in the URL is not supported"));
        }
        let (host, port) = split_authority(authority).ok_or_else(|| refuse("bad host:port"))?;
        let tail = tail.split('#').next().unwrap_or("");
        let path = if tail.is_empty() {
            "/".to_string()
        } else if tail.starts_with('?') {
            format!("/{tail}")
        } else {
            tail.to_string()
        };
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(refuse("the URL has spaces or control characters"));
        }
        Ok(AuthServer {
            address: address.to_string(),
            authority: authority.to_string(),
            host,
            port,
            path,
        })
    }

    /// `host:port` to connect to (IPv6 bracketed).
    pub fn connect_address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The whole HTTP request for `req` by `method`.
    pub fn request(&self, method: AuthMethod, req: &AuthRequest<'_>) -> Vec<u8> {
        let user_agent = format!("nsqd/{}", protocol::NSQD_COMPAT_VERSION);
        let accept = http1::client::ACCEPT_NSQ_V1;
        match method {
            AuthMethod::Get => {
                let sep = if self.path.contains('?') { '&' } else { '?' };
                let target = format!("{}{sep}{}", self.path, query_string(req));
                http1::client::request_bytes(
                    "GET",
                    &self.authority,
                    &target,
                    &[("Accept", accept), ("User-Agent", &user_agent)],
                    b"",
                )
            }
            AuthMethod::Post => http1::client::request_bytes(
                "POST",
                &self.authority,
                &self.path,
                &[
                    ("Accept", accept),
                    ("Content-Type", "application/json"),
                    ("User-Agent", &user_agent),
                ],
                post_body(req).as_bytes(),
            ),
        }
    }
}

/// `host[:port]` or `[v6][:port]`; port 80 when absent.
fn split_authority(authority: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (authority, None),
        }
    };
    if host.is_empty() || host.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return None;
    }
    let port = match port {
        None => 80,
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0)?,
    };
    Some((host.to_string(), port))
}

/// The four values in Go's `url.Values` form: keys sorted, each with its one value.
fn values<'a>(req: &AuthRequest<'a>) -> [(&'static str, std::borrow::Cow<'a, str>); 4] {
    [
        ("common_name", req.common_name.into()),
        ("remote_ip", req.remote_ip.into()),
        ("secret", String::from_utf8_lossy(req.secret)),
        ("tls", if req.tls { "true" } else { "false" }.into()),
    ]
}

/// `common_name=..&remote_ip=..&secret=..&tls=..` as Go's `url.Values.Encode` (the secret's
/// raw bytes: it need not be UTF-8).
pub fn query_string(req: &AuthRequest<'_>) -> String {
    let tls: &[u8] = if req.tls { b"true" } else { b"false" };
    let pairs: [(&str, &[u8]); 4] = [
        ("common_name", req.common_name.as_bytes()),
        ("remote_ip", req.remote_ip.as_bytes()),
        ("secret", req.secret),
        ("tls", tls),
    ];
    let mut out = String::with_capacity(64 + 3 * req.secret.len());
    for (i, (key, raw)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(key);
        out.push('=');
        query_escape(raw, &mut out);
    }
    out
}

/// Go's `url.QueryEscape`: letters, digits and `-_.~` kept, space as `+`, the rest `%XX`.
fn query_escape(raw: &[u8], out: &mut String) {
    for &b in raw {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else if b == b' ' {
            out.push('+');
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The JSON of Go's `url.Values` holding the four values (what nsqd POSTs).
pub fn post_body(req: &AuthRequest<'_>) -> String {
    let map: BTreeMap<&str, [std::borrow::Cow<'_, str>; 1]> =
        values(req).into_iter().map(|(k, v)| (k, [v])).collect();
    let json = serde_json::to_string(&map).unwrap_or_default();
    super::go_json_escape_html(&json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(secret: &'a [u8]) -> AuthRequest<'a> {
        AuthRequest {
            remote_ip: "127.0.0.1",
            tls: false,
            secret,
            common_name: "",
        }
    }

    #[test]
    fn host_port_means_the_auth_path() {
        let s = AuthServer::parse("127.0.0.1:4181").unwrap();
        assert_eq!(s.host, "127.0.0.1");
        assert_eq!(s.port, 4181);
        assert_eq!(s.path, "/auth");
        assert_eq!(s.authority, "127.0.0.1:4181");
        assert_eq!(s.connect_address(), "127.0.0.1:4181");
    }

    #[test]
    fn full_urls_are_used_as_given() {
        let s = AuthServer::parse("http://auth.example:8080/v1/check?x=1#frag").unwrap();
        assert_eq!((s.host.as_str(), s.port), ("auth.example", 8080));
        assert_eq!(s.path, "/v1/check?x=1");
        let s = AuthServer::parse("http://[::1]/").unwrap();
        assert_eq!((s.host.as_str(), s.port), ("::1", 80));
        assert_eq!(s.connect_address(), "[::1]:80");
        let s = AuthServer::parse("HTTP://h").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.path.as_str()), ("h", 80, "/"));
    }

    #[test]
    fn unsupported_addresses_are_refused_clearly() {
        assert!(AuthServer::parse("https://h/auth")
            .unwrap_err()
            .contains("https"));
        assert!(AuthServer::parse("ftp://h/auth").is_err());
        assert!(AuthServer::parse("http://u:p@h/auth")
            .unwrap_err()
            .contains("user info"));
        assert!(AuthServer::parse(":4181").is_err());
        assert!(AuthServer::parse("h:0").is_err());
        assert!(AuthServer::parse("h:99999").is_err());
        assert!(AuthServer::parse("a:b:c").is_err());
        assert!(AuthServer::parse("http://h/a b").is_err());
        assert!(AuthServer::parse("http://[::1/").is_err());
    }

    #[test]
    fn the_query_is_gos_url_values_encode() {
        let q = query_string(&AuthRequest {
            remote_ip: "10.0.0.1",
            tls: true,
            secret: b"a b&c=d\r\n\xff",
            common_name: "CN x",
        });
        assert_eq!(
            q,
            "common_name=CN+x&remote_ip=10.0.0.1&secret=a+b%26c%3Dd%0D%0A%FF&tls=true"
        );
    }

    #[test]
    fn get_and_post_requests() {
        let s = AuthServer::parse("127.0.0.1:4181").unwrap();
        let get = String::from_utf8(s.request(AuthMethod::Get, &req(b"s3"))).unwrap();
        assert!(
            get.starts_with(
                "GET /auth?common_name=&remote_ip=127.0.0.1&secret=s3&tls=false HTTP/1.1\r\n"
            ),
            "{get}"
        );
        assert!(get.contains("\r\nHost: 127.0.0.1:4181\r\n"));
        assert!(get.contains("\r\nAccept: application/vnd.nsq; version=1.0\r\n"));
        let post = String::from_utf8(s.request(AuthMethod::Post, &req(b"<s>"))).unwrap();
        assert!(post.starts_with("POST /auth HTTP/1.1\r\n"), "{post}");
        assert!(post.contains("\r\nContent-Type: application/json\r\n"));
        assert!(post.ends_with(
            "\r\n\r\n{\"common_name\":[\"\"],\"remote_ip\":[\"127.0.0.1\"],\
             \"secret\":[\"\\u003cs\\u003e\"],\"tls\":[\"false\"]}"
        ));
        let s = AuthServer::parse("http://h:1/check?x=1").unwrap();
        let get = String::from_utf8(s.request(AuthMethod::Get, &req(b"s"))).unwrap();
        assert!(get.starts_with("GET /check?x=1&common_name="), "{get}");
    }

    #[test]
    fn methods_are_nsqds_words() {
        assert_eq!(AuthMethod::parse("get"), Ok(AuthMethod::Get));
        assert_eq!(AuthMethod::parse("post"), Ok(AuthMethod::Post));
        assert!(AuthMethod::parse("GET").is_err());
        assert!(AuthMethod::parse("put").is_err());
    }
}

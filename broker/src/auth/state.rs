//! An auth server's answer, as nsqd reads, validates and applies it.
//!
//! The answer is `{"ttl":N,"identity":"..","identity_url":"..","authorizations":[{"topic":
//! "<regex>","channels":["<regex>",..],"permissions":["publish"|"subscribe",..]},..]}`. It is
//! refused (an [`AuthError`]) when it is not that JSON, names another permission, has a regex
//! that does not compile, or a `ttl` that is not positive. A publish is allowed by an
//! authorization with `publish` whose topic regex matches the topic and one of whose channel
//! regexes matches the empty channel name; a subscription by one with `subscribe` whose topic
//! and channel regexes match. Regexes match anywhere in the name (as Go's `MatchString`; anchor
//! them with `^...$` to match whole names).
//!
//! Invariants: a state exists only if the whole answer was valid; it expires `ttl` seconds
//! after the answer arrived; each regex's compiled size is bounded ([`REGEX_SIZE_LIMIT`]).

use super::AuthError;
use regex::{Regex, RegexBuilder};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Bound on the compiled size of one regex of an answer (the regex crate's own limit is
/// 10 MiB; an answer may hold many).
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// One authorization of an answer, its regexes compiled.
#[derive(Debug, Clone)]
pub struct Authorization {
    pub topic: Regex,
    pub channels: Vec<Regex>,
    pub publish: bool,
    pub subscribe: bool,
}

/// What a client may do, until it expires.
#[derive(Debug, Clone)]
pub struct AuthState {
    pub identity: String,
    pub identity_url: String,
    pub authorizations: Vec<Authorization>,
    /// `None`: a `ttl` too large to add to the clock, i.e. never.
    pub expires: Option<Instant>,
}

/// A field of a JSON object as Go's `encoding/json` finds it: the exact key, else a key equal
/// but for ASCII case.
fn field<'a>(object: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        object
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn bad(what: &str, v: &Value) -> AuthError {
    AuthError(format!("bad JSON answer: {what} is {v}"))
}

/// A string field (`null` or absent: "").
fn string_of(object: &serde_json::Map<String, Value>, name: &str) -> Result<String, AuthError> {
    match field(object, name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(bad(name, v)),
    }
}

/// A list of strings (`null` or absent: empty; a `null` item: "").
fn strings_of(
    object: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<Vec<String>, AuthError> {
    match field(object, name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::Null => Ok(String::new()),
                Value::String(s) => Ok(s.clone()),
                v => Err(bad(name, v)),
            })
            .collect(),
        Some(v) => Err(bad(name, v)),
    }
}

fn compile(what: &str, pattern: &str) -> Result<Regex, AuthError> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| AuthError(format!("unable to compile {what} {pattern:?} {e}")))
}

impl AuthState {
    /// Reads and validates the body of a `200` answer that arrived at `now`.
    pub fn from_answer(body: &[u8], now: Instant) -> Result<AuthState, AuthError> {
        // Read as Go reads it into nsqd's struct: an object (keys matched as Go matches them,
        // others ignored), each field of its type or null.
        let answer: Value =
            serde_json::from_slice(body).map_err(|e| AuthError(format!("bad JSON answer: {e}")))?;
        let Value::Object(answer) = answer else {
            return Err(bad("the answer", &answer));
        };
        let ttl = match field(&answer, "ttl") {
            None | Some(Value::Null) => 0,
            Some(Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| bad("ttl", &Value::Number(n.clone())))?,
            Some(v) => return Err(bad("ttl", v)),
        };
        let listed = match field(&answer, "authorizations") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(v) => return Err(bad("authorizations", v)),
        };
        let empty = serde_json::Map::new();
        let mut authorizations = Vec::with_capacity(listed.len());
        for item in listed {
            let a = match item {
                Value::Object(a) => a,
                Value::Null => &empty,
                v => return Err(bad("an authorization", v)),
            };
            let mut publish = false;
            let mut subscribe = false;
            for p in strings_of(a, "permissions")? {
                match p.as_str() {
                    "publish" => publish = true,
                    "subscribe" => subscribe = true,
                    other => return Err(AuthError(format!("unknown permission {other}"))),
                }
            }
            let topic = compile("topic", &string_of(a, "topic")?)?;
            let channels = strings_of(a, "channels")?
                .iter()
                .map(|c| compile("channel", c))
                .collect::<Result<Vec<_>, _>>()?;
            authorizations.push(Authorization {
                topic,
                channels,
                publish,
                subscribe,
            });
        }
        if ttl <= 0 {
            return Err(AuthError(format!("invalid TTL {ttl} (must be >0)")));
        }
        Ok(AuthState {
            identity: string_of(&answer, "identity")?,
            identity_url: string_of(&answer, "identity_url")?,
            authorizations,
            expires: now.checked_add(Duration::from_secs(ttl as u64)),
        })
    }

    /// Whether the answer grants anything at all (nsqd's `HasAuthorizations`).
    pub fn has_authorizations(&self) -> bool {
        !self.authorizations.is_empty()
    }

    /// Whether the answer has expired at `now` (it must be asked again).
    pub fn is_expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|e| e < now)
    }

    /// Whether a publish (`channel` empty) to `topic`, or a subscription to `topic`/`channel`,
    /// is allowed.
    pub fn is_allowed(&self, topic: &str, channel: &str) -> bool {
        self.authorizations.iter().any(|a| a.allows(topic, channel))
    }
}

impl Authorization {
    fn allows(&self, topic: &str, channel: &str) -> bool {
        let permitted = if channel.is_empty() {
            self.publish
        } else {
            self.subscribe
        };
        permitted && self.topic.is_match(topic) && self.channels.iter().any(|c| c.is_match(channel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(json: &str) -> Result<AuthState, String> {
        AuthState::from_answer(json.as_bytes(), Instant::now()).map_err(|e| e.0)
    }

    #[test]
    fn a_full_answer_is_read() {
        let t0 = Instant::now();
        let s = AuthState::from_answer(
            br#"{"ttl":3600,"identity":"alice","identity_url":"http://id/alice","extra":1,
                "authorizations":[
                  {"topic":"^orders$","channels":["^billing$","^audit.*"],"permissions":["subscribe"]},
                  {"topic":"^orders$","channels":[".*"],"permissions":["publish"]}]}"#,
            t0,
        )
        .unwrap();
        assert_eq!(s.identity, "alice");
        assert_eq!(s.identity_url, "http://id/alice");
        assert_eq!(s.authorizations.len(), 2);
        assert!(s.has_authorizations());
        assert_eq!(s.expires, Some(t0 + Duration::from_secs(3600)));
        assert!(s.is_allowed("orders", ""));
        assert!(!s.is_allowed("orders2", ""));
        assert!(s.is_allowed("orders", "billing"));
        assert!(s.is_allowed("orders", "audit_2"));
        assert!(!s.is_allowed("orders", "billing2"));
        assert!(!s.is_allowed("other", "billing"));
    }

    #[test]
    fn publish_needs_a_channel_regex_matching_the_empty_name_as_in_nsqd() {
        let s = state(r#"{"ttl":1,"authorizations":[{"topic":".*","permissions":["publish"]}]}"#)
            .unwrap();
        assert!(!s.is_allowed("t", ""));
        let s = state(
            r#"{"ttl":1,"authorizations":[{"topic":".*","channels":["x"],"permissions":["publish"]}]}"#,
        )
        .unwrap();
        assert!(!s.is_allowed("t", ""));
        let s = state(
            r#"{"ttl":1,"authorizations":[{"topic":"t","channels":[""],"permissions":["publish"]}]}"#,
        )
        .unwrap();
        assert!(s.is_allowed("t", ""));
        assert!(s.is_allowed("at", ""), "unanchored, as Go's MatchString");
        assert!(!s.is_allowed("t", "c"), "no subscribe permission");
    }

    #[test]
    fn keys_match_as_in_go_and_unknown_ones_are_ignored() {
        let s = state(
            r#"{"TTL":5,"Identity":"bob","other":[1,2],"Authorizations":[
                {"Topic":"t","Channels":[null,"c"],"Permissions":["publish"],"x":null}]}"#,
        )
        .unwrap();
        assert_eq!(s.identity, "bob");
        assert!(s.is_allowed("t", ""), "a null channel is the empty regex");
    }

    #[test]
    fn no_authorizations_is_valid_but_grants_nothing() {
        for json in [
            r#"{"ttl":5}"#,
            r#"{"ttl":5,"authorizations":null}"#,
            r#"{"ttl":5,"authorizations":[]}"#,
        ] {
            let s = state(json).unwrap();
            assert!(!s.has_authorizations());
            assert!(!s.is_allowed("t", ""));
            assert!(!s.is_allowed("t", "c"));
        }
    }

    #[test]
    fn bad_answers_are_errors() {
        let ok_auth = r#"{"topic":".*","channels":[".*"],"permissions":["publish"]}"#;
        for (json, why) in [
            ("", "bad JSON"),
            ("not json", "bad JSON"),
            ("null", "bad JSON"),
            ("[]", "bad JSON"),
            (r#"[3600,"id","url",[]]"#, "bad JSON"),
            (
                r#"{"ttl":5,"authorizations":[[".*",[".*"],["publish"]]]}"#,
                "bad JSON",
            ),
            (r#"{"ttl":5,"authorizations":{}}"#, "bad JSON"),
            (r#"{"ttl":5,"identity":7}"#, "bad JSON"),
            (
                r#"{"ttl":5,"authorizations":[{"channels":"x"}]}"#,
                "bad JSON",
            ),
            (
                r#"{"ttl":5,"authorizations":[{"permissions":[1]}]}"#,
                "bad JSON",
            ),
            (r#"{"ttl":0}"#, "invalid TTL 0"),
            (r#"{"ttl":-3}"#, "invalid TTL -3"),
            (r#"{"ttl":1.5}"#, "bad JSON"),
            (r#"{"ttl":"5"}"#, "bad JSON"),
            (
                r#"{"ttl":5,"authorizations":[{"topic":"(","channels":[],"permissions":[]}]}"#,
                "unable to compile topic",
            ),
            (
                r#"{"ttl":5,"authorizations":[{"topic":"t","channels":["["],"permissions":[]}]}"#,
                "unable to compile channel",
            ),
            (
                r#"{"ttl":5,"authorizations":[{"topic":"t","channels":[],"permissions":["admin"]}]}"#,
                "unknown permission admin",
            ),
            (
                r#"{"ttl":5,"authorizations":[{"topic":"a{1000}{1000}","channels":[],"permissions":[]}]}"#,
                "unable to compile topic",
            ),
        ] {
            let e = state(json).unwrap_err();
            assert!(e.contains(why), "{json}: {e}");
        }
        let e = state(&format!(r#"{{"authorizations":[{ok_auth}]}}"#)).unwrap_err();
        assert!(e.contains("invalid TTL 0"), "{e}");
    }

    #[test]
    fn expiry_follows_the_ttl() {
        let t0 = Instant::now();
        let s = AuthState::from_answer(br#"{"ttl":2}"#, t0).unwrap();
        assert!(!s.is_expired(t0));
        assert!(!s.is_expired(t0 + Duration::from_secs(2)));
        assert!(s.is_expired(t0 + Duration::from_millis(2001)));
        let s =
            AuthState::from_answer(format!(r#"{{"ttl":{}}}"#, i64::MAX).as_bytes(), t0).unwrap();
        assert!(!s.is_expired(t0 + Duration::from_secs(1 << 40)));
    }
}

//! Discovery: asking lookups which brokers have a topic, and which topics they know
//! ([`topics`], `GET /topics`).
//!
//! One query is `GET /lookup?topic=<topic>` over a fresh HTTP/1.1 connection
//! (`Connection: close`), answered with
//! `{"channels": [...], "producers": [{"broadcast_address", "tcp_port", ...}]}` (or, from old
//! lookups, the same inside `{"status_code", "status_txt", "data"}`). A 404 means the lookup
//! does not know the topic yet: no brokers, not an error.
//!
//! The consumer polls every lookup and takes the union of the answers, keyed by
//! `broadcast_address:tcp_port` ([`broker_addresses`]). The request is sent and its answer
//! read by [`http1::client::exchange`] (`Content-Length`, chunked, or up to the close), and the
//! query is done as soon as the response is whole.

use crate::error::{Error, Result};
use crate::rt;
use http1::client::{exchange, request_bytes, ExchangeError, ACCEPT_NSQ_V1};
use http1::{decode_response, Limits, ReceivedResponse};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::time::Duration;

/// Largest lookup answer read.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;
/// Bounds on a lookup's answer: its body may take all of [`MAX_RESPONSE`].
const RESPONSE_LIMITS: Limits = Limits {
    max_header_bytes: 64 * 1024,
    max_headers: 64,
    max_body: MAX_RESPONSE,
};

/// One broker as a lookup describes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Producer {
    pub broadcast_address: String,
    pub tcp_port: u16,
    #[serde(default)]
    pub http_port: u16,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub version: String,
}

impl Producer {
    /// `broadcast_address:tcp_port`, bracketing IPv6 literals: the key of the union and the
    /// address to connect to.
    pub fn tcp_address(&self) -> String {
        if self.broadcast_address.contains(':') && !self.broadcast_address.starts_with('[') {
            format!("[{}]:{}", self.broadcast_address, self.tcp_port)
        } else {
            format!("{}:{}", self.broadcast_address, self.tcp_port)
        }
    }
}

/// The body of a `/lookup` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LookupResponse {
    #[serde(default)]
    pub channels: Vec<String>,
    #[serde(default)]
    pub producers: Vec<Producer>,
}

#[derive(Deserialize)]
struct Wrapped {
    data: LookupResponse,
}

/// Asks the lookup at `lookupd` (`host:port`, optionally prefixed with `http://`) for the
/// brokers of `topic`.
pub async fn query(lookupd: &str, topic: &str, timeout: Duration) -> Result<LookupResponse> {
    let target = format!("/lookup?topic={}", http1::percent_encode(topic));
    let response = get(lookupd, &target, timeout).await?;
    lookup_answer(&response)
}

/// Asks the lookup at `lookupd` for every topic it knows (`GET /topics`), as nsq_to_file's
/// `--topic-pattern` discovers topics.
pub async fn topics(lookupd: &str, timeout: Duration) -> Result<Vec<String>> {
    let response = get(lookupd, "/topics", timeout).await?;
    match response.status {
        200 => parse_topics_body(&response.body),
        status => Err(Error::Http { status }),
    }
}

/// One `GET target` to the lookup at `lookupd`, bounded by `timeout` as a whole.
async fn get(lookupd: &str, target: &str, timeout: Duration) -> Result<ReceivedResponse> {
    let host = lookupd
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let request = request_bytes(
        "GET",
        &host,
        target,
        &[
            ("Accept", ACCEPT_NSQ_V1),
            ("User-Agent", crate::config::DEFAULT_USER_AGENT),
        ],
        b"",
    );
    rt::with_timeout(timeout, async {
        let mut stream = rt::connect_tcp(&host, timeout).await?;
        exchange(&mut stream, &request, &RESPONSE_LIMITS)
            .await
            .map_err(|e| match e {
                ExchangeError::Send(e) | ExchangeError::Receive(e) => Error::from(e),
                ExchangeError::Response(e) => Error::BadHttpResponse(e.as_str()),
            })
    })
    .await
}

/// Parses a `/topics` JSON body (`{"topics": [...]}`), bare or wrapped in `data`.
pub fn parse_topics_body(body: &[u8]) -> Result<Vec<String>> {
    #[derive(Deserialize)]
    struct Topics {
        #[serde(default)]
        topics: Vec<String>,
    }
    let value: serde_json::Value = serde_json::from_slice(body)?;
    let value = match value.get("data") {
        Some(data) if data.is_object() => data.clone(),
        _ => value,
    };
    let topics: Topics = serde_json::from_value(value)?;
    Ok(topics.topics)
}

/// The union of the brokers in several answers, as `host:port` strings.
pub fn broker_addresses<'a>(
    answers: impl IntoIterator<Item = &'a LookupResponse>,
) -> BTreeSet<String> {
    answers
        .into_iter()
        .flat_map(|a| a.producers.iter().map(Producer::tcp_address))
        .collect()
}

/// Reads a whole HTTP response to `/lookup`, as received up to the lookup's close.
pub fn parse_http_lookup(raw: &[u8]) -> Result<LookupResponse> {
    let response = decode_answer(raw, true)?.ok_or(Error::BadHttpResponse("incomplete answer"))?;
    lookup_answer(&response)
}

/// The response in `raw` if it is whole (with `closed`, `raw` is all the lookup sent).
fn decode_answer(raw: &[u8], closed: bool) -> Result<Option<ReceivedResponse>> {
    decode_response(raw, closed, &RESPONSE_LIMITS)
        .map(|r| r.map(|(response, _)| response))
        .map_err(|e| Error::BadHttpResponse(e.as_str()))
}

/// The brokers in a `/lookup` answer: its body for a 200, none for a 404.
fn lookup_answer(response: &ReceivedResponse) -> Result<LookupResponse> {
    match response.status {
        200 => parse_lookup_body(&response.body),
        404 => Ok(LookupResponse::default()),
        status => Err(Error::Http { status }),
    }
}

/// Parses a `/lookup` JSON body, bare or wrapped in `data`.
pub fn parse_lookup_body(body: &[u8]) -> Result<LookupResponse> {
    let value: serde_json::Value = serde_json::from_slice(body)?;
    if value.get("data").is_some_and(|d| d.is_object()) {
        let wrapped: Wrapped = serde_json::from_value(value)?;
        return Ok(wrapped.data);
    }
    Ok(serde_json::from_value(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"channels":["c"],"producers":[{"remote_address":"127.0.0.1:5000","hostname":"h","broadcast_address":"10.0.0.1","tcp_port":4150,"http_port":4151,"version":"1.3.0"},{"broadcast_address":"::1","tcp_port":4250}]}"#;

    #[test]
    fn parses_a_content_length_answer() {
        let raw = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        let r = parse_http_lookup(raw.as_bytes()).expect("parses");
        assert_eq!(r.channels, ["c"]);
        let addrs: Vec<_> = r.producers.iter().map(Producer::tcp_address).collect();
        assert_eq!(addrs, ["10.0.0.1:4150", "[::1]:4250"]);
    }

    #[test]
    fn parses_chunked_and_wrapped_answers() {
        let wrapped = format!(r#"{{"status_code":200,"status_txt":"OK","data":{BODY}}}"#);
        let (a, b) = wrapped.split_at(10);
        let raw = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        let r = parse_http_lookup(raw.as_bytes()).expect("parses");
        assert_eq!(r.producers.len(), 2);
    }

    #[test]
    fn unknown_topic_is_no_brokers_and_other_statuses_are_errors() {
        let raw = b"HTTP/1.1 404 Not Found\r\nContent-Length: 31\r\n\r\n{\"message\":\"TOPIC_NOT_FOUND\"}  ";
        assert_eq!(
            parse_http_lookup(raw).expect("404 is fine"),
            LookupResponse::default()
        );
        let raw = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
        assert!(matches!(
            parse_http_lookup(raw),
            Err(Error::Http { status: 500 })
        ));
        assert!(parse_http_lookup(b"garbage").is_err());
        assert!(parse_http_lookup(b"HTTP/1.1 200 OK\r\n\r\n{nope").is_err());
        // cut short: the lookup closed before the end of the body or of a chunk
        assert!(matches!(
            parse_http_lookup(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}"),
            Err(Error::BadHttpResponse(_))
        ));
        assert!(matches!(
            parse_http_lookup(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{}"),
            Err(Error::BadHttpResponse(_))
        ));
        assert!(matches!(
            parse_http_lookup(b""),
            Err(Error::BadHttpResponse(_))
        ));
    }

    #[test]
    fn an_answer_without_length_runs_to_the_close() {
        let raw = format!("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{BODY}");
        assert_eq!(
            parse_http_lookup(raw.as_bytes())
                .expect("parses")
                .producers
                .len(),
            2
        );
        // while the lookup has not closed, it is not whole yet
        assert!(matches!(decode_answer(raw.as_bytes(), false), Ok(None)));
    }

    #[test]
    fn union_is_keyed_by_broadcast_address_and_port() {
        let a = parse_lookup_body(BODY.as_bytes()).expect("a");
        let b = parse_lookup_body(
            br#"{"channels":[],"producers":[{"broadcast_address":"10.0.0.1","tcp_port":4150},{"broadcast_address":"10.0.0.2","tcp_port":4150}]}"#,
        )
        .expect("b");
        let all: Vec<_> = broker_addresses([&a, &b]).into_iter().collect();
        assert_eq!(all, ["10.0.0.1:4150", "10.0.0.2:4150", "[::1]:4250"]);
    }

    #[test]
    fn topics_bare_and_wrapped() {
        assert_eq!(
            parse_topics_body(br#"{"topics":["a","b"]}"#).expect("bare"),
            ["a", "b"]
        );
        assert_eq!(
            parse_topics_body(br#"{"status_code":200,"status_txt":"OK","data":{"topics":["x"]}}"#)
                .expect("wrapped"),
            ["x"]
        );
        assert!(parse_topics_body(br#"{"topics":"nope"}"#).is_err());
    }

    #[test]
    fn topic_is_percent_encoded() {
        assert_eq!(http1::percent_encode("t#ephemeral"), "t%23ephemeral");
    }
}

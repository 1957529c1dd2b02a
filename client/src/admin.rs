//! The broker's replay calls over its HTTP API (ours; nsqd has none): rewinding a channel
//! ([`rewind`], `POST /channel/rewind`) and creating a channel that starts in the past
//! ([`create_channel_from`], `POST /channel/create?from=`). Nothing here is on the TCP wire.
//!
//! One call is one `POST` over a fresh HTTP/1.1 connection to the broker's `--http-address`,
//! bounded by a timeout as a whole; a refusal comes back as [`Error::Refused`] with the
//! broker's status and message (`REWIND_BEFORE_HISTORY: oldest retained offset ...`).

use crate::error::{Error, Result};
use crate::rt;
use http1::client::{exchange, request_bytes, ExchangeError, ACCEPT_NSQ_V1};
use http1::{Limits, ReceivedResponse};
use std::time::Duration;

/// Bounds on the broker's answer (a short JSON message).
const LIMITS: Limits = Limits {
    max_header_bytes: 64 * 1024,
    max_headers: 64,
    max_body: 64 * 1024,
};

/// Where a replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// The oldest message the topic keeps.
    Earliest,
    /// A position of the topic's log (a channel's `offset` in `/stats`).
    Offset(u64),
    /// The first message published at or after this time, in nanoseconds since the epoch.
    Timestamp(i64),
}

/// Sends channel `channel` of `topic` on the broker at `http_address` (`host:port`) back (or
/// forward) to `to`: it delivers again, in order, every message kept from there.
pub async fn rewind(
    http_address: &str,
    topic: &str,
    channel: &str,
    to: From,
    timeout: Duration,
) -> Result<()> {
    let position = match to {
        From::Earliest => "earliest".to_string(),
        From::Offset(n) => format!("offset={n}"),
        From::Timestamp(ns) => format!("timestamp={ns}"),
    };
    let target = format!(
        "/channel/rewind?topic={}&channel={}&{position}",
        http1::percent_encode(topic),
        http1::percent_encode(channel)
    );
    post(http_address, &target, timeout).await
}

/// Creates channel `channel` of `topic` starting at `from` instead of at the newest message.
pub async fn create_channel_from(
    http_address: &str,
    topic: &str,
    channel: &str,
    from: From,
    timeout: Duration,
) -> Result<()> {
    let from = match from {
        From::Earliest => "earliest".to_string(),
        From::Offset(n) => format!("offset:{n}"),
        From::Timestamp(ns) => ns.to_string(),
    };
    let target = format!(
        "/channel/create?topic={}&channel={}&from={}",
        http1::percent_encode(topic),
        http1::percent_encode(channel),
        http1::percent_encode(&from)
    );
    post(http_address, &target, timeout).await
}

async fn post(http_address: &str, target: &str, timeout: Duration) -> Result<()> {
    let host = http_address
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let request = request_bytes(
        "POST",
        &host,
        target,
        &[
            ("Accept", ACCEPT_NSQ_V1),
            ("User-Agent", crate::config::DEFAULT_USER_AGENT),
        ],
        b"",
    );
    let response = rt::with_timeout(timeout, async {
        let mut stream = rt::connect_tcp(&host, timeout).await?;
        exchange(&mut stream, &request, &LIMITS)
            .await
            .map_err(|e| match e {
                ExchangeError::Send(e) | ExchangeError::Receive(e) => Error::from(e),
                ExchangeError::Response(e) => Error::BadHttpResponse(e.as_str()),
            })
    })
    .await?;
    answer(&response)
}

/// `Ok` for a 200; else the broker's status and message (`{"message": "..."}`).
fn answer(response: &ReceivedResponse) -> Result<()> {
    if response.status == 200 {
        return Ok(());
    }
    let message = serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&response.body).into_owned());
    Err(Error::Refused {
        status: response.status,
        message,
    })
}

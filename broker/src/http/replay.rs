//! Replay over HTTP (ours; nsqd has none): `POST /channel/rewind?topic=&channel=` with exactly
//! one of `timestamp=` (RFC 3339, or nanoseconds since the Unix epoch), `offset=` (a seq of the
//! topic's log, as `/stats` shows it) or `earliest`, and `POST /channel/create` with
//! `from=earliest|<timestamp>|offset:<n>` (the same positions; without `from=` it is nsqd's
//! create, in [`super::manage`]). Arguments are checked here and refused with 400 and what is
//! wrong; the owner ([`crate::admin::AdminOp::Rewind`]) resolves the position, refuses one
//! before the history (saying how far back it goes) and answers once the channel's new
//! cursor is in the topic's metadata.

use super::ask;
use super::manage;
use super::routes::{error, query, Answer};
use crate::admin::{Action, AdminOp, RewindTo};
use crate::shard::Shard;
use http1::{Query, Request};
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use std::rc::Rc;

/// A time: RFC 3339, or nanoseconds since the epoch.
fn timestamp(v: &str) -> Result<RewindTo, String> {
    let v = v.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v
            .parse::<i64>()
            .map(RewindTo::Timestamp)
            .map_err(|_| format!("INVALID_ARG_TIMESTAMP: {v} is out of range"));
    }
    crate::civil_time::parse(v)
        .map(RewindTo::Timestamp)
        .map_err(|why| {
            format!("INVALID_ARG_TIMESTAMP: {why}; give RFC 3339 (2026-11-26T07:00:00Z) or unix nanoseconds")
        })
}

fn offset(v: &str) -> Result<RewindTo, String> {
    v.trim()
        .parse::<u64>()
        .map(RewindTo::Offset)
        .map_err(|_| format!("INVALID_ARG_OFFSET: {v:?} is not a position (a seq of the topic's log, as /stats shows it)"))
}

/// The rewind's target from `timestamp=`, `offset=` or `earliest`: exactly one of them.
fn rewind_target(q: &Query<'_>) -> Result<RewindTo, String> {
    let given: Vec<&str> = ["timestamp", "offset", "earliest"]
        .into_iter()
        .filter(|k| q.get(k).is_some())
        .collect();
    match given.as_slice() {
        ["timestamp"] => timestamp(q.get("timestamp").unwrap_or_default()),
        ["offset"] => offset(q.get("offset").unwrap_or_default()),
        ["earliest"] => match q.get("earliest").unwrap_or_default() {
            "" | "true" | "1" => Ok(RewindTo::Earliest),
            v => Err(format!(
                "INVALID_ARG_EARLIEST: {v:?} (give earliest alone, or earliest=true)"
            )),
        },
        [] => Err("MISSING_ARG_POSITION: give one of timestamp=, offset= or earliest".into()),
        _ => Err(format!(
            "INVALID_ARG_POSITION: give only one of timestamp=, offset= or earliest (got {})",
            given.join(", ")
        )),
    }
}

/// `from=` of `/channel/create`: `earliest`, `offset:<n>`, or a time.
fn from_arg(v: &str) -> Result<RewindTo, String> {
    let v = v.trim();
    if v == "earliest" {
        return Ok(RewindTo::Earliest);
    }
    if let Some(n) = v.strip_prefix("offset:") {
        return offset(n);
    }
    timestamp(v).map_err(|_| {
        format!("INVALID_ARG_FROM: {v:?}; give earliest, offset:<n>, an RFC 3339 time or unix nanoseconds")
    })
}

/// The topic and channel arguments, checked as nsqd's channel endpoints check them.
fn names<'a>(q: &'a Query<'a>) -> Result<(&'a str, &'a str), Answer> {
    let Some(topic) = q.get("topic") else {
        return Err(error(400, "MISSING_ARG_TOPIC"));
    };
    if !is_valid_topic_name(topic) {
        return Err(error(400, "INVALID_ARG_TOPIC"));
    }
    let Some(channel) = q.get("channel") else {
        return Err(error(400, "MISSING_ARG_CHANNEL"));
    };
    if !is_valid_channel_name(channel) {
        return Err(error(400, "INVALID_ARG_CHANNEL"));
    }
    Ok((topic, channel))
}

async fn ask_owner(
    shard: &Rc<Shard>,
    topic: &str,
    channel: &str,
    to: RewindTo,
    create: bool,
) -> Answer {
    let op = AdminOp::Rewind {
        topic: topic.to_string(),
        channel: channel.to_string(),
        to,
        create,
    };
    manage::answer(ask::owner(shard, topic, op).await)
}

/// `POST /channel/rewind`.
pub async fn rewind(shard: &Rc<Shard>, req: &Request) -> Answer {
    let q = match query(&req.head) {
        Ok(q) => q,
        Err(a) => return a,
    };
    let (topic, channel) = match names(&q) {
        Ok(n) => n,
        Err(a) => return a,
    };
    match rewind_target(&q) {
        Ok(to) => ask_owner(shard, topic, channel, to, false).await,
        Err(why) => error(400, &why),
    }
}

/// `POST /channel/create`: with `from=`, a new channel starting there; else nsqd's create.
pub async fn create(shard: &Rc<Shard>, req: &Request) -> Answer {
    let q = match query(&req.head) {
        Ok(q) => q,
        Err(a) => return a,
    };
    let Some(from) = q.get("from") else {
        return manage::channel(shard, req, Action::Create).await;
    };
    let (topic, channel) = match names(&q) {
        Ok(n) => n,
        Err(a) => return a,
    };
    match from_arg(from) {
        Ok(to) => ask_owner(shard, topic, channel, to, true).await,
        Err(why) => error(400, &why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions() {
        assert_eq!(
            timestamp("1795676400000000000"),
            Ok(RewindTo::Timestamp(1_795_676_400_000_000_000))
        );
        assert_eq!(
            timestamp("2026-11-26T07:00:00Z"),
            Ok(RewindTo::Timestamp(1_795_676_400_000_000_000))
        );
        assert!(timestamp("yesterday").is_err());
        assert_eq!(offset("12"), Ok(RewindTo::Offset(12)));
        assert!(offset("-1").is_err());
        assert_eq!(from_arg("earliest"), Ok(RewindTo::Earliest));
        assert_eq!(from_arg("offset:7"), Ok(RewindTo::Offset(7)));
        assert!(from_arg("offset:x").is_err());
        assert!(from_arg("latest").is_err());
    }
}

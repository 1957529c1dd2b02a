//! Replay over HTTP (ours; nsqd has none): `POST /channel/rewind?topic=&channel=` with exactly
//! one of `timestamp=` (RFC 3339, or nanoseconds since the Unix epoch), `offset=` (a seq of the
//! topic's log, as `/stats` shows it) or `earliest`, and `POST /channel/create` with
//! `from=earliest|<timestamp>|offset:<n>` (the same positions; without `from=` it is nsqd's
//! create, in [`super::manage`]). Arguments are checked here and refused with 400 and what is
//! wrong; the owner ([`crate::admin_ops::AdminOp::Rewind`]) resolves the position, refuses one
//! before the history (saying how far back it goes) and answers once the channel's new
//! cursor is in the topic's metadata. With `dry_run=true` a rewind moves nothing and answers
//! `{"offset": N, "redelivered": M}`: the position resolved, and the messages from there up
//! to the channel's cursor that the rewind would deliver again.

use super::api_error::ApiError;
use super::ask;
use super::manage;
use super::routes::{query, topic_and_channel_args, Handled};
use crate::admin_ops::{Action, AdminOp, AdminResult, RewindTo};
use crate::shard::Shard;
use http1::{Query, Request, Response};
use std::rc::Rc;

/// A time: RFC 3339, or nanoseconds since the epoch.
fn timestamp(v: &str) -> Result<RewindTo, ApiError> {
    let v = v.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v
            .parse::<i64>()
            .map(RewindTo::Timestamp)
            .map_err(|_| ApiError::InvalidArgTimestamp(format!("{v} is out of range")));
    }
    crate::civil_time::parse(v)
        .map(RewindTo::Timestamp)
        .map_err(|why| {
            ApiError::InvalidArgTimestamp(format!(
                "{why}; give RFC 3339 (2026-11-26T07:00:00Z) or unix nanoseconds"
            ))
        })
}

fn offset(v: &str) -> Result<RewindTo, ApiError> {
    v.trim().parse::<u64>().map(RewindTo::Offset).map_err(|_| {
        ApiError::InvalidArgOffset(format!(
            "{v:?} is not a position (a seq of the topic's log, as /stats shows it)"
        ))
    })
}

/// The rewind's target from `timestamp=`, `offset=` or `earliest`: exactly one of them.
fn rewind_target(q: &Query<'_>) -> Result<RewindTo, ApiError> {
    let given: Vec<&str> = ["timestamp", "offset", "earliest"]
        .into_iter()
        .filter(|k| q.get(k).is_some())
        .collect();
    match given.as_slice() {
        ["timestamp"] => timestamp(q.get("timestamp").unwrap_or_default()),
        ["offset"] => offset(q.get("offset").unwrap_or_default()),
        ["earliest"] => match q.get("earliest").unwrap_or_default() {
            "" | "true" | "1" => Ok(RewindTo::Earliest),
            v => Err(ApiError::InvalidArgEarliest(format!(
                "{v:?} (give earliest alone, or earliest=true)"
            ))),
        },
        [] => Err(ApiError::MissingArgPosition),
        _ => Err(ApiError::InvalidArgPosition(given.join(", "))),
    }
}

/// `from=` of `/channel/create`: `earliest`, `offset:<n>`, or a time.
fn from_arg(v: &str) -> Result<RewindTo, ApiError> {
    let v = v.trim();
    if v == "earliest" {
        return Ok(RewindTo::Earliest);
    }
    if let Some(n) = v.strip_prefix("offset:") {
        return offset(n);
    }
    timestamp(v).map_err(|_| {
        ApiError::InvalidArgFrom(format!(
            "{v:?}; give earliest, offset:<n>, an RFC 3339 time or unix nanoseconds"
        ))
    })
}

async fn ask_owner(
    shard: &Rc<Shard>,
    topic: &str,
    channel: &str,
    to: RewindTo,
    create: bool,
    dry_run: bool,
) -> Handled {
    let op = AdminOp::Rewind {
        topic: topic.to_string(),
        channel: channel.to_string(),
        to,
        create,
        dry_run,
    };
    match ask::owner(shard, topic, op).await {
        Some(AdminResult::RewindPlan {
            offset,
            redelivered,
        }) => {
            let body = serde_json::json!({ "offset": offset, "redelivered": redelivered });
            Ok(Response::json(200, body.to_string()).nsq_v1().into())
        }
        other => manage::answer(other),
    }
}

/// `dry_run=`: absent, `false` or `0`: no; `true`, `1` or empty: yes.
fn dry_run(q: &Query<'_>) -> Result<bool, ApiError> {
    match q.get("dry_run") {
        None | Some("false" | "0") => Ok(false),
        Some("" | "true" | "1") => Ok(true),
        Some(v) => Err(ApiError::InvalidArgDryRun(format!(
            "{v:?} (give true or false)"
        ))),
    }
}

/// `POST /channel/rewind`.
pub async fn rewind(shard: &Rc<Shard>, req: &Request) -> Handled {
    let q = query(&req.head)?;
    let (topic, channel) = topic_and_channel_args(&q)?;
    let to = rewind_target(&q)?;
    let dry = dry_run(&q)?;
    ask_owner(shard, topic, channel, to, false, dry).await
}

/// `POST /channel/create`: with `from=`, a new channel starting there; else nsqd's create.
pub async fn create(shard: &Rc<Shard>, req: &Request) -> Handled {
    let q = query(&req.head)?;
    let Some(from) = q.get("from") else {
        return manage::channel(shard, req, Action::Create).await;
    };
    let (topic, channel) = topic_and_channel_args(&q)?;
    let to = from_arg(from)?;
    ask_owner(shard, topic, channel, to, true, false).await
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

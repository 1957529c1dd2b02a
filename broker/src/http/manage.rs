//! `POST /topic/{create,delete,empty,pause,unpause}?topic=` and
//! `POST /channel/{create,delete,empty,pause,unpause}?topic=&channel=`: arguments checked as
//! nsqd checks them, then the work is done by the topic's owner ([`crate::admin_ops`]). (A
//! `/channel/create` with `from=` is replay's, [`super::replay_routes`].)
//! `POST /topic/config?topic=&retention_time=&retention_bytes=&replicas=` (ours): a topic's own
//! retention, Go durations and byte sizes ([`crate::config::size`]), `default` for the flag's;
//! its replica count (through the replication controller, `shard/topic_replicas.rs`); a bad
//! value is refused with 400 and what is wrong with it.
//!
//! nsqd's checks differ per endpoint and are kept: `/topic/create` and `/topic/empty` refuse an
//! invalid name (`INVALID_TOPIC`), `/topic/delete` and `/topic/(un)pause` only look it up
//! (`TOPIC_NOT_FOUND`); the channel endpoints say `INVALID_ARG_TOPIC` / `INVALID_ARG_CHANNEL`.

use super::api_error::ApiError;
use super::ask;
use super::routes::{done, query, topic_and_channel_args, topic_arg, Handled};
use crate::admin_ops::{Action, AdminOp, AdminResult};
use crate::shard::Shard;
use http1::Request;
use protocol::duration::parse_flag_duration;
use protocol::names::is_valid_topic_name;
use std::rc::Rc;

pub async fn topic(shard: &Rc<Shard>, req: &Request, action: Action) -> Handled {
    let q = query(&req.head)?;
    let topic = q.get("topic").ok_or(ApiError::MissingArgTopic)?;
    let checks_name = matches!(action, Action::Create | Action::Empty);
    if checks_name && !is_valid_topic_name(topic) {
        return Err(ApiError::InvalidTopic);
    }
    let op = AdminOp::Topic {
        topic: topic.to_string(),
        action,
    };
    answer(ask::owner(shard, topic, op).await)
}

pub async fn topic_config(shard: &Rc<Shard>, req: &Request) -> Handled {
    let q = query(&req.head)?;
    let topic = topic_arg(&q)?;
    let time = q.get("retention_time").map(|v| {
        setting(v, |v| {
            let d = parse_flag_duration(v)?;
            Ok(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        })
    });
    let bytes = q
        .get("retention_bytes")
        .map(|v| setting(v, crate::config::size::parse_byte_size));
    let retention_time_ns = time.transpose().map_err(ApiError::InvalidRetentionTime)?;
    let retention_bytes = bytes.transpose().map_err(ApiError::InvalidRetentionBytes)?;
    let replicas = q
        .get("replicas")
        .map(parse_replicas)
        .transpose()
        .map_err(ApiError::InvalidReplicas)?;
    if retention_time_ns.is_none() && retention_bytes.is_none() && replicas.is_none() {
        return Err(ApiError::MissingArgRetention);
    }
    if let Some(replicas) = replicas {
        let op = AdminOp::TopicReplicas {
            topic: topic.to_string(),
            replicas,
        };
        answer(ask::owner(shard, topic, op).await)?;
        if retention_time_ns.is_none() && retention_bytes.is_none() {
            return Ok(done());
        }
    }
    let op = AdminOp::TopicConfig {
        topic: topic.to_string(),
        retention_time_ns,
        retention_bytes,
    };
    answer(ask::owner(shard, topic, op).await)
}

/// A replica count: 1 to [`MAX_REPLICAS`].
fn parse_replicas(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_REPLICAS).contains(&n) => Ok(n),
        _ => Err(format!(
            "replicas {v:?}: give a count of brokers from 1 to {MAX_REPLICAS}"
        )),
    }
}

/// The most replicas a topic may ask for.
const MAX_REPLICAS: u32 = 64;

/// A topic or channel setting's value: `default` (the flag's: `None`) or what `parse` makes
/// of it.
pub(super) fn setting<T>(
    v: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    if v.trim() == "default" {
        return Ok(None);
    }
    parse(v).map(Some)
}

pub async fn channel(shard: &Rc<Shard>, req: &Request, action: Action) -> Handled {
    let q = query(&req.head)?;
    let (topic, channel) = topic_and_channel_args(&q)?;
    let op = AdminOp::Channel {
        topic: topic.to_string(),
        channel: channel.to_string(),
        action,
    };
    answer(ask::owner(shard, topic, op).await)
}

/// The answer to an action the owner carried out, or could not; `None`: the broker is
/// stopping. A failure is the broker's, so its reason goes to the log, not to the client.
pub(super) fn answer(result: Option<AdminResult>) -> Handled {
    match result {
        Some(AdminResult::Done) => Ok(done()),
        Some(AdminResult::TopicNotFound) => Err(ApiError::TopicNotFound),
        Some(AdminResult::ChannelNotFound) => Err(ApiError::ChannelNotFound),
        Some(AdminResult::Refused(why)) => Err(why.into()),
        Some(AdminResult::Failed(reason)) => {
            tracing::warn!(%reason, "admin action failed");
            Err(ApiError::InternalError)
        }
        Some(_) => Err(ApiError::InternalError),
        None => Err(ApiError::Exiting),
    }
}

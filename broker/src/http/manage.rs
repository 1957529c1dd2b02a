//! `POST /topic/{create,delete,empty,pause,unpause}?topic=` and
//! `POST /channel/{create,delete,empty,pause,unpause}?topic=&channel=`: arguments checked as
//! nsqd checks them, then the work is done by the topic's owner ([`crate::admin`]).
//!
//! nsqd's checks differ per endpoint and are kept: `/topic/create` and `/topic/empty` refuse an
//! invalid name (`INVALID_TOPIC`), `/topic/delete` and `/topic/(un)pause` only look it up
//! (`TOPIC_NOT_FOUND`); the channel endpoints say `INVALID_ARG_TOPIC` / `INVALID_ARG_CHANNEL`.

use super::ask;
use super::routes::{done, error, query, Answer};
use crate::admin::{Action, AdminOp, AdminResult};
use crate::shard::Shard;
use http1::Request;
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use std::rc::Rc;

pub async fn topic(shard: &Rc<Shard>, req: &Request, action: Action) -> Answer {
    let q = match query(&req.head) {
        Ok(q) => q,
        Err(a) => return a,
    };
    let Some(topic) = q.get("topic") else {
        return error(400, "MISSING_ARG_TOPIC");
    };
    let checks_name = matches!(action, Action::Create | Action::Empty);
    if checks_name && !is_valid_topic_name(topic) {
        return error(400, "INVALID_TOPIC");
    }
    let op = AdminOp::Topic {
        topic: topic.to_string(),
        action,
    };
    answer(ask::owner(shard, topic, op).await)
}

pub async fn channel(shard: &Rc<Shard>, req: &Request, action: Action) -> Answer {
    let q = match query(&req.head) {
        Ok(q) => q,
        Err(a) => return a,
    };
    let Some(topic) = q.get("topic") else {
        return error(400, "MISSING_ARG_TOPIC");
    };
    if !is_valid_topic_name(topic) {
        return error(400, "INVALID_ARG_TOPIC");
    }
    let Some(channel) = q.get("channel") else {
        return error(400, "MISSING_ARG_CHANNEL");
    };
    if !is_valid_channel_name(channel) {
        return error(400, "INVALID_ARG_CHANNEL");
    }
    let op = AdminOp::Channel {
        topic: topic.to_string(),
        channel: channel.to_string(),
        action,
    };
    answer(ask::owner(shard, topic, op).await)
}

fn answer(result: Option<AdminResult>) -> Answer {
    match result {
        Some(AdminResult::Done) => done(),
        Some(AdminResult::TopicNotFound) => error(404, "TOPIC_NOT_FOUND"),
        Some(AdminResult::ChannelNotFound) => error(404, "CHANNEL_NOT_FOUND"),
        Some(AdminResult::Failed(reason)) => {
            tracing::warn!(%reason, "admin action failed");
            error(500, "INTERNAL_ERROR")
        }
        Some(_) => error(500, "INTERNAL_ERROR"),
        None => error(503, "EXITING"),
    }
}

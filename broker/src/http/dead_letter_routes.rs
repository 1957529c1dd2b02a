//! Dead letters over HTTP (ours, no nsqd counterpart):
//! - `POST /channel/config?topic=&channel=&max_attempts=&dead_letter_topic=`: a channel's own
//!   max attempts (0: unlimited; `default`: `--max-attempts`) and dead-letter topic (`default`
//!   or empty: none, messages over the limit are dropped); answered once in the topic's
//!   metadata; a bad value is refused with 400 and what is wrong with it;
//! - `GET /dead_letters?topic=[&id=]`: the origin records of a dead-letter topic (where each
//!   of its messages came from);
//! - `POST /topic/redrive?topic=[&id=]`: publishes a dead-letter topic's recorded messages
//!   (or the one with that ID) back to their origin topics, then forgets their records.
//!
//! The owner does the work (`shard::dead_letter_routing`); a redrive reads the bodies from it
//! in batches (asking again while blocks are fetched from disk) and publishes them through
//! the ordinary publish path, waiting for each answer, before the records are forgotten: a
//! failure part-way leaves the rest recorded, to be redriven again.

use super::api_error::ApiError;
use super::ask;
use super::manage::{answer, setting};
use super::routes::{query, topic_and_channel_args, topic_arg, Handled};
use crate::admin_ops::{AdminOp, AdminResult};
use crate::mailbox::Reply;
use crate::shard::Shard;
use http1::{Request, Response};
use protocol::names::{is_ephemeral, is_valid_topic_name};
use std::rc::Rc;
use std::time::Duration;

/// How often a redrive asks again for bodies being fetched from disk before giving up.
const FETCH_TRIES: u32 = 500;

pub async fn channel_config(shard: &Rc<Shard>, req: &Request) -> Handled {
    let q = query(&req.head)?;
    let (topic, channel) = topic_and_channel_args(&q)?;
    let max_attempts = q
        .get("max_attempts")
        .map(parse_max_attempts)
        .transpose()
        .map_err(ApiError::InvalidMaxAttempts)?;
    let dead_letter_topic = q
        .get("dead_letter_topic")
        .map(|v| parse_dead_letter_topic(v, topic))
        .transpose()
        .map_err(ApiError::InvalidDeadLetterTopic)?;
    if max_attempts.is_none() && dead_letter_topic.is_none() {
        return Err(ApiError::MissingArgMaxAttempts);
    }
    let op = AdminOp::ChannelConfig {
        topic: topic.to_string(),
        channel: channel.to_string(),
        max_attempts,
        dead_letter_topic,
    };
    answer(ask::owner(shard, topic, op).await)
}

/// `default`: the flag's (`None`); else a number of deliveries, 0 for unlimited.
fn parse_max_attempts(v: &str) -> Result<Option<u16>, String> {
    setting(v.trim(), |v| {
        v.parse::<u16>()
            .map_err(|_| format!("{v:?} is not a number from 0 (unlimited) to 65535, nor default"))
    })
}

/// `default` or empty: none; else a durable topic other than the channel's own.
fn parse_dead_letter_topic(v: &str, topic: &str) -> Result<Option<String>, String> {
    let v = v.trim();
    if v.is_empty() || v == "default" {
        return Ok(None);
    }
    if !is_valid_topic_name(v) {
        return Err(format!("{v:?} is not a valid topic name"));
    }
    if is_ephemeral(v) {
        return Err(format!("{v:?} is #ephemeral: dead letters must be kept"));
    }
    if v == topic {
        return Err("a channel cannot send its dead letters to its own topic".into());
    }
    Ok(Some(v.to_string()))
}

/// The `topic` argument, checked, and the optional `id`.
fn topic_and_id(req: &Request) -> Result<(String, Option<String>), ApiError> {
    let q = query(&req.head)?;
    let topic = topic_arg(&q)?;
    Ok((topic.to_string(), q.get("id").map(str::to_string)))
}

pub async fn list(shard: &Rc<Shard>, req: &Request) -> Handled {
    let (topic, id) = topic_and_id(req)?;
    let op = AdminOp::DeadLetters {
        topic: topic.clone(),
        id,
    };
    let records = match ask::owner(shard, &topic, op).await {
        Some(AdminResult::DeadLetters(r)) => r,
        other => return answer(other),
    };
    let body = serde_json::json!({ "topic": topic, "dead_letters": records });
    match serde_json::to_vec(&body) {
        Ok(body) => Ok(Response::json(200, body).nsq_v1().into()),
        Err(_) => Err(ApiError::InternalError),
    }
}

pub async fn redrive(shard: &Rc<Shard>, req: &Request) -> Handled {
    let (topic, id) = topic_and_id(req)?;
    let (mut redriven, mut missing, mut tries) = (0u64, 0u64, 0u32);
    let mut after = None;
    loop {
        let op = AdminOp::RedriveRead {
            topic: topic.clone(),
            id: id.clone(),
            after,
        };
        let batch = match ask::owner(shard, &topic, op).await {
            Some(AdminResult::Redrive(b)) => b,
            other => return answer(other),
        };
        let mut done = Vec::new();
        // Consecutive letters of one origin topic go in one publish, in order.
        let mut letters = batch.letters.into_iter().peekable();
        while let Some((first, body)) = letters.next() {
            after = Some(first.seq);
            let Some(body) = body else {
                missing += 1;
                continue;
            };
            let origin = first.origin_topic.clone();
            let mut ids = vec![first.id];
            let mut bodies = vec![body];
            while let Some((next, Some(_))) = letters.peek() {
                if next.origin_topic != origin {
                    break;
                }
                if let Some((next, Some(body))) = letters.next() {
                    after = Some(next.seq);
                    ids.push(next.id);
                    bodies.push(body);
                }
            }
            let owner = shard.config.owner_of(&origin);
            let reply = shard
                .send_publish(owner, origin.clone(), bodies, Duration::ZERO, false)
                .await;
            match reply {
                Some(Reply::Publish(Ok(()))) => {
                    redriven += ids.len() as u64;
                    done.extend(ids);
                }
                Some(Reply::Publish(Err(e))) => {
                    tracing::warn!(topic, origin, "redrive stopped: {e}");
                    forget(shard, &topic, done).await;
                    return Err(ApiError::RedriveFailed(format!("{origin}: {e}")));
                }
                _ => return Err(ApiError::Exiting),
            }
        }
        if !forget(shard, &topic, done).await {
            return Err(ApiError::InternalError);
        }
        if batch.waiting {
            tries += 1;
            if tries > FETCH_TRIES {
                return Err(ApiError::RedriveFailed(
                    "the dead letters cannot be read from disk".into(),
                ));
            }
            glommio::timer::sleep(Duration::from_millis(10)).await;
            continue;
        }
        if !batch.more {
            break;
        }
    }
    let body = serde_json::json!({ "redriven": redriven, "missing": missing });
    Ok(Response::json(200, body.to_string()).nsq_v1().into())
}

/// Tells the owner that `ids` were redriven; true once their records are forgotten (saved).
async fn forget(shard: &Rc<Shard>, topic: &str, ids: Vec<String>) -> bool {
    if ids.is_empty() {
        return true;
    }
    let op = AdminOp::RedriveDone {
        topic: topic.to_string(),
        ids,
    };
    matches!(ask::owner(shard, topic, op).await, Some(AdminResult::Done))
}

//! `POST /pub?topic=&defer=` and `POST /mpub?topic=&binary=`: the checks in nsqd's order and
//! with its codes, then one `Mail::Publish` to the topic's owner, as a TCP PUB/MPUB sends.
//!
//! Bodies are never copied again: each message is a `Bytes` slice of the request body.

use super::api_error::ApiError;
use super::routes::{query, Answer, Handled};
use crate::mailbox::Reply;
use crate::shard::Shard;
use bytes::Bytes;
use http1::{Query, Request};
use std::rc::Rc;
use std::time::Duration;

/// `POST /pub`: one message, optionally deferred by `defer` milliseconds.
pub async fn pub_one(shard: &Rc<Shard>, req: &Request) -> Handled {
    let config = &shard.config;
    if req.body.len() as u64 > config.max_msg_size {
        return Err(ApiError::MsgTooBig);
    }
    if req.body.is_empty() {
        return Err(ApiError::MsgEmpty);
    }
    let q = query(&req.head)?;
    let topic = topic_arg(&q)?;
    let defer = match q.get("defer") {
        None => Duration::ZERO,
        Some(ms) => parse_defer(ms, config.max_req_timeout).ok_or(ApiError::InvalidDefer)?,
    };
    publish(shard, topic, vec![req.body.clone()], defer).await
}

/// `POST /mpub`: newline-separated messages, or with `binary` `[u32 count]([u32 size][bytes])*`.
/// As nsqd: `binary=false` and `binary=0` mean text, any other value (or none) binary.
pub async fn pub_many(shard: &Rc<Shard>, req: &Request) -> Handled {
    let config = &shard.config;
    let q = query(&req.head)?;
    let topic = topic_arg(&q)?;
    if req.body.len() as u64 > config.max_body_size {
        return Err(ApiError::BodyTooBig);
    }
    let binary = q.get("binary").is_some_and(|v| v != "false" && v != "0");
    let bodies = if binary {
        binary_bodies(&req.body, config.max_msg_size, config.max_body_size)?
    } else {
        line_bodies(&req.body, config.max_msg_size)?
    };
    publish(shard, topic, bodies, Duration::ZERO).await
}

/// The `topic` argument: 400 `MISSING_ARG_TOPIC` or `INVALID_TOPIC`.
fn topic_arg(q: &Query) -> Result<String, ApiError> {
    let topic = q.get("topic").ok_or(ApiError::MissingArgTopic)?;
    if !protocol::names::is_valid_topic_name(topic) {
        return Err(ApiError::InvalidTopic);
    }
    Ok(topic.to_string())
}

/// `defer` in milliseconds, within 0..=max-req-timeout.
fn parse_defer(ms: &str, max: Duration) -> Option<Duration> {
    let ms: i64 = ms.parse().ok()?;
    let ms = u64::try_from(ms).ok()?;
    let d = Duration::from_millis(ms);
    (d <= max).then_some(d)
}

/// Splits on `\n`; empty lines are skipped (as nsqd); a line over the limit is `MSG_TOO_BIG`.
fn line_bodies(body: &Bytes, max_msg: u64) -> Result<Vec<Bytes>, ApiError> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < body.len() {
        let end = body[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(body.len(), |i| start + i);
        if end > start {
            if (end - start) as u64 > max_msg {
                return Err(ApiError::MsgTooBig);
            }
            out.push(body.slice(start..end));
        }
        start = end + 1;
    }
    Ok(out)
}

/// Reads nsqd's binary MPUB body; errors are nsqd's codes (`BAD_BODY`, `BAD_MESSAGE`).
fn binary_bodies(body: &Bytes, max_msg: u64, max_body: u64) -> Result<Vec<Bytes>, ApiError> {
    let read_u32 = |at: usize| -> Option<i32> {
        let b = body.get(at..at + 4)?;
        Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let count = read_u32(0).ok_or(ApiError::BadBody)?;
    // 4 bytes of count, then at least 5 bytes (size + one byte) per message.
    let max_messages = (max_body.saturating_sub(4) / 5) as i64;
    if count <= 0 || i64::from(count) > max_messages {
        return Err(ApiError::BadBody);
    }
    let count = count as usize;
    let mut out = Vec::with_capacity(count.min(body.len() / 5));
    let mut pos = 4;
    for _ in 0..count {
        let size = read_u32(pos).ok_or(ApiError::BadMessage)?;
        if size <= 0 || size as u64 > max_msg {
            return Err(ApiError::BadMessage);
        }
        let start = pos + 4;
        let end = start + size as usize;
        if end > body.len() {
            return Err(ApiError::BadMessage);
        }
        out.push(body.slice(start..end));
        pos = end;
    }
    Ok(out)
}

/// Hands the messages to the topic's owner and waits for its word.
async fn publish(shard: &Rc<Shard>, topic: String, bodies: Vec<Bytes>, defer: Duration) -> Handled {
    if shard.is_stopping() {
        return Err(ApiError::Exiting);
    }
    let owner = shard.config.owner_of(&topic);
    shard.http_publishing.set(shard.http_publishing.get() + 1);
    let answer = publish_counted(shard, owner, topic, bodies, defer).await;
    shard.http_publishing.set(shard.http_publishing.get() - 1);
    answer
}

/// [`publish`] while counted in `http_publishing` (a clean stop waits for it).
async fn publish_counted(
    shard: &Rc<Shard>,
    owner: usize,
    topic: String,
    bodies: Vec<Bytes>,
    defer: Duration,
) -> Handled {
    // A full mailbox towards the owner pushes back on this connection, as on TCP.
    while shard.is_congested(owner) {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    if shard.is_stopping() {
        return Err(ApiError::Exiting);
    }
    // OK now if the owner is another, healthy shard and few early answers are unconfirmed;
    // the shard's confirmer takes the owner's answer (it carries the owner's health).
    let acked = shard.http_unconfirmed() < crate::shard::MAX_UNCONFIRMED
        && shard.can_ack_early(owner, &topic);
    // The name is only needed to learn about another shard's topic.
    let name = (owner != shard.id).then(|| topic.clone());
    let reply = shard.send_publish(owner, topic, bodies, defer, acked);
    let name = match (acked, name) {
        (true, Some(name)) => {
            shard.confirm_later(owner, name, reply);
            return Ok(Answer::PubOk);
        }
        (_, name) => name,
    };
    let reply = reply.await;
    if let Some(name) = &name {
        shard.note_publish_answer(owner, &reply, false, name);
    }
    match reply {
        Some(Reply::Publish(Ok(()))) => Ok(Answer::PubOk),
        _ => Err(ApiError::Exiting),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(msgs: &[&[u8]]) -> Bytes {
        let mut v = (msgs.len() as u32).to_be_bytes().to_vec();
        for m in msgs {
            v.extend((m.len() as u32).to_be_bytes());
            v.extend(*m);
        }
        Bytes::from(v)
    }

    #[test]
    fn lines_skip_empty_and_check_size() {
        let b = Bytes::from_static(b"a\n\nbc\n");
        let got = line_bodies(&b, 10).unwrap();
        assert_eq!(got, [Bytes::from_static(b"a"), Bytes::from_static(b"bc")]);
        assert!(line_bodies(&Bytes::from_static(b"\n\n"), 10)
            .unwrap()
            .is_empty());
        assert_eq!(
            line_bodies(&Bytes::from_static(b"a\nbbbb"), 3),
            Err(ApiError::MsgTooBig)
        );
    }

    #[test]
    fn binary_bodies_like_nsqd() {
        let b = binary(&[b"one", b"two"]);
        assert_eq!(binary_bodies(&b, 10, 100).unwrap().len(), 2);
        assert_eq!(binary_bodies(&binary(&[]), 10, 100), Err(ApiError::BadBody));
        assert_eq!(
            binary_bodies(&Bytes::from_static(b"\0\0"), 10, 100),
            Err(ApiError::BadBody)
        );
        assert_eq!(
            binary_bodies(&binary(&[b"toolong"]), 3, 100),
            Err(ApiError::BadMessage)
        );
        assert_eq!(
            binary_bodies(&binary(&[b""]), 3, 100),
            Err(ApiError::BadMessage)
        );
        let mut cut = binary(&[b"abc"]).to_vec();
        cut.pop();
        assert_eq!(
            binary_bodies(&Bytes::from(cut), 10, 100),
            Err(ApiError::BadMessage)
        );
        let mut huge = (u32::MAX / 2).to_be_bytes().to_vec();
        huge.extend([0, 0, 0, 1, b'x']);
        assert_eq!(
            binary_bodies(&Bytes::from(huge), 10, 100),
            Err(ApiError::BadBody)
        );
    }

    #[test]
    fn defer_bounds() {
        let max = Duration::from_secs(60);
        assert_eq!(parse_defer("0", max), Some(Duration::ZERO));
        assert_eq!(parse_defer("60000", max), Some(max));
        assert_eq!(parse_defer("60001", max), None);
        assert_eq!(parse_defer("-5", max), None);
        assert_eq!(parse_defer("", max), None);
        assert_eq!(parse_defer("1.5", max), None);
    }
}

//! PUB, MPUB and DPUB on a connection: each publish goes to its topic's owner without waiting
//! for the one before ([`publish`]), and the replier task ([`reply_loop`]) writes the answers
//! in command order as they come back.
//!
//! Invariants: at most [`MAX_PIPELINED`] publishes are outstanding. An early answer (the OK
//! written before the owner confirms, see [`Shard::can_ack_early`]) is given only when every
//! earlier answer on the connection is written, and its publish stays outstanding until the
//! owner confirms it. A failed publish writes its fatal error frame and closes the connection.

use super::Conn;
use crate::mailbox::Reply;
use crate::shard::Shard;
use bytes::Bytes;
use protocol::{ErrorCode, ProtocolError};
use std::rc::Rc;
use std::time::Duration;
use tracing::debug;

/// Publishes one connection may have outstanding before its reader waits.
pub const MAX_PIPELINED: usize = 64;

/// A publish sent to its owner, waiting for the answer.
pub(super) struct PendingPublish {
    reply: nsq_common::local_sync::Receiver<Reply>,
    owner: usize,
    /// Its OK is already written (see [`Shard::can_ack_early`]); the answer only confirms it.
    acked: bool,
    topic: String,
    count: u64,
    fail: ErrorCode,
    verb: &'static str,
}

impl Conn {
    fn count_published(&self, topic: &str, n: u64) {
        let mut counts = self.pub_counts.borrow_mut();
        match counts.iter_mut().find(|(t, _)| t == topic) {
            Some((_, c)) => *c += n,
            None => counts.push((topic.to_string(), n)),
        }
    }
}

/// Sends a publish to the topic's owner; its answer is written by the replier, in order.
pub(super) async fn publish(
    shard: &Rc<Shard>,
    conn: &Conn,
    topic: String,
    bodies: Vec<Bytes>,
    defer: Duration,
    fail: ErrorCode,
    verb: &'static str,
) -> Result<(), ProtocolError> {
    let owner = shard.config.owner_of(&topic);
    let count = bodies.len() as u64;
    let counted_topic = topic.clone();
    // OK now, if every earlier answer is written and the owner is another, healthy shard.
    let acked = conn.unanswered.get() == 0 && shard.can_ack_early(owner, &counted_topic);
    if acked {
        conn.count_published(&counted_topic, count);
        conn.push_response(protocol::OK);
    } else {
        conn.unanswered.set(conn.unanswered.get() + 1);
    }
    let reply = shard.send_publish(owner, topic, bodies, defer, acked);
    conn.outstanding.set(conn.outstanding.get() + 1);
    conn.pending.borrow_mut().push_back(PendingPublish {
        reply,
        owner,
        acked,
        topic: counted_topic,
        count,
        fail,
        verb,
    });
    conn.wake_replier.notify();
    Ok(())
}

/// Writes the answers of pipelined publishes in command order. A failed publish sends its
/// (fatal) error frame and closes the connection, as nsqd does.
pub(super) async fn reply_loop(shard: Rc<Shard>, conn: Rc<Conn>) {
    loop {
        let next = conn.pending.borrow_mut().pop_front();
        let Some(p) = next else {
            if conn.closed.get() {
                return;
            }
            conn.wake_replier.notified().await;
            continue;
        };
        let answer = p.reply.await;
        shard.note_publish_answer(p.owner, &answer, p.acked, &p.topic);
        if p.acked {
            conn.outstanding
                .set(conn.outstanding.get().saturating_sub(1));
            conn.replies_done.notify();
            continue;
        }
        conn.unanswered.set(conn.unanswered.get().saturating_sub(1));
        match answer {
            Some(Reply::Publish(Ok(()))) => {
                conn.count_published(&p.topic, p.count);
                conn.push_response(protocol::OK);
            }
            other => {
                let why = match other {
                    Some(Reply::Publish(Err(e))) => e.description,
                    _ => "broker shutting down".to_string(),
                };
                let e = ProtocolError::fatal(p.fail, format!("{} failed {why}", p.verb));
                debug!(error = %e, "publish failed");
                conn.push_error(&e);
                conn.close();
            }
        }
        conn.outstanding
            .set(conn.outstanding.get().saturating_sub(1));
        conn.replies_done.notify();
    }
}

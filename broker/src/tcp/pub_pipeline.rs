//! PUB, MPUB and DPUB on a connection: each publish goes to its topic's owner without waiting
//! for the one before ([`publish`]), and the replier task ([`reply_loop`]) writes the answers
//! in command order as they come back. [`Pipeline`] is the state they share.
//!
//! Invariants: at most [`MAX_PIPELINED`] publishes are outstanding. An early answer (the OK
//! written before the owner confirms, see [`Shard::can_ack_early`]) is given only when every
//! earlier answer on the connection is written, and its publish stays outstanding until the
//! owner confirms it. A publish whose owner (this shard) took it at once, with no earlier
//! publish unanswered, is answered by [`publish`] itself and is never outstanding: the OK is
//! in the output buffer before the reader reads on, and the reader may send it at once
//! ([`super::output::Output::send_now`]). A failed publish writes its fatal error frame and
//! closes the connection.

use super::Conn;
use crate::mailbox::Reply;
use crate::shard::Shard;
use bytes::Bytes;
use nsq_common::local_sync::{Notified, Notify};
use protocol::{ErrorCode, ProtocolError};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;
use tracing::debug;

/// Publishes one connection may have outstanding before its reader waits.
pub const MAX_PIPELINED: usize = 64;

/// Which publish command: its verb and error code follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PubKind {
    Pub,
    Mpub,
    Dpub,
}

impl PubKind {
    fn verb(self) -> &'static str {
        match self {
            PubKind::Pub => "PUB",
            PubKind::Mpub => "MPUB",
            PubKind::Dpub => "DPUB",
        }
    }

    /// The code of its failure frame.
    fn error_code(self) -> ErrorCode {
        match self {
            PubKind::Pub => ErrorCode::PubFailed,
            PubKind::Mpub => ErrorCode::MpubFailed,
            PubKind::Dpub => ErrorCode::DpubFailed,
        }
    }
}

/// A publish command, as decoded.
pub(super) enum Publish {
    Pub {
        topic: String,
        body: Bytes,
    },
    Mpub {
        topic: String,
        bodies: Vec<Bytes>,
    },
    Dpub {
        topic: String,
        defer: Duration,
        body: Bytes,
    },
}

impl Publish {
    fn into_parts(self) -> (PubKind, String, Vec<Bytes>, Duration) {
        match self {
            Publish::Pub { topic, body } => (PubKind::Pub, topic, vec![body], Duration::ZERO),
            Publish::Mpub { topic, bodies } => (PubKind::Mpub, topic, bodies, Duration::ZERO),
            Publish::Dpub { topic, defer, body } => (PubKind::Dpub, topic, vec![body], defer),
        }
    }
}

/// A publish sent to its owner, waiting for the answer.
struct PendingPublish {
    reply: nsq_common::local_sync::Receiver<Reply>,
    owner: usize,
    /// Its OK is already written (see [`Shard::can_ack_early`]); the answer only confirms it.
    acked: bool,
    topic: String,
    count: u64,
    kind: PubKind,
}

/// A connection's publishes in flight and what it has published, shared by its reader (which
/// sends them), its replier (which answers them) and /stats.
pub(super) struct Pipeline {
    /// Publishes sent to their owners, in command order, not yet taken by the replier.
    pending: RefCell<VecDeque<PendingPublish>>,
    /// Publishes not confirmed by their owner yet.
    outstanding: Cell<usize>,
    /// Publishes whose answer the client still waits for (not acknowledged early).
    unanswered: Cell<usize>,
    wake_replier: Notify,
    replies_done: Notify,
    /// Messages published per topic, for /stats `pub_counts`.
    pub_counts: RefCell<Vec<(String, u64)>>,
}

impl Pipeline {
    pub(super) fn new() -> Pipeline {
        Pipeline {
            pending: RefCell::new(VecDeque::new()),
            outstanding: Cell::new(0),
            unanswered: Cell::new(0),
            wake_replier: Notify::new(),
            replies_done: Notify::new(),
            pub_counts: RefCell::new(Vec::new()),
        }
    }

    /// Publishes not confirmed by their owner yet.
    pub(super) fn outstanding(&self) -> usize {
        self.outstanding.get()
    }

    /// Whether the client waits for the answer of a publish.
    pub(super) fn has_unanswered(&self) -> bool {
        self.unanswered.get() > 0
    }

    /// Whether anything was published on this connection.
    pub(super) fn has_published(&self) -> bool {
        !self.pub_counts.borrow().is_empty()
    }

    /// Fires when a publish is confirmed.
    pub(super) fn answered(&self) -> Notified<'_> {
        self.replies_done.notified()
    }

    /// Wakes the replier (a publish was sent, or the connection closed).
    pub(super) fn wake_replier(&self) {
        self.wake_replier.notify();
    }

    /// The messages published per topic (`topic`: that one only), for /stats; `None` when
    /// nothing was published.
    pub(super) fn pub_counts(&self, topic: Option<&str>) -> Option<Vec<crate::stats::PubCount>> {
        let counts = self.pub_counts.borrow();
        if counts.is_empty() {
            return None;
        }
        Some(
            counts
                .iter()
                .filter(|(name, _)| topic.is_none_or(|t| t == name))
                .map(|(topic, count)| crate::stats::PubCount {
                    topic: topic.clone(),
                    count: *count,
                })
                .collect(),
        )
    }

    fn count_published(&self, topic: &str, n: u64) {
        let mut counts = self.pub_counts.borrow_mut();
        match counts.iter_mut().find(|(t, _)| t == topic) {
            Some((_, c)) => *c += n,
            None => counts.push((topic.to_string(), n)),
        }
    }

    /// A publish was confirmed (or given up): one fewer outstanding.
    fn confirmed(&self) {
        self.outstanding
            .set(self.outstanding.get().saturating_sub(1));
        self.replies_done.notify();
    }
}

/// Sends a publish to the topic's owner; its answer is written by the replier, in order.
pub(super) async fn publish(
    shard: &Rc<Shard>,
    conn: &Conn,
    cmd: Publish,
) -> Result<(), ProtocolError> {
    let (kind, topic, bodies, defer) = cmd.into_parts();
    let pipeline = &conn.pipeline;
    let owner = shard.config.owner_of(&topic);
    let count = bodies.len() as u64;
    let counted_topic = topic.clone();
    // OK now, if every earlier answer is written and the owner is another, healthy shard.
    let acked = !pipeline.has_unanswered() && shard.can_ack_early(owner, &counted_topic);
    if acked {
        pipeline.count_published(&counted_topic, count);
        conn.push_response(protocol::OK);
    } else {
        pipeline.unanswered.set(pipeline.unanswered.get() + 1);
    }
    let reply = shard.send_publish(owner, topic, bodies, defer, acked);
    // Answered already (its owner is this shard and took it at once), and nothing before it
    // waits for an answer: OK now, without a turn of the replier.
    if !acked && pipeline.unanswered.get() == 1 && pipeline.pending.borrow().is_empty() {
        if let Some(answer) = reply.take_now_if(|r| matches!(r, Reply::Publish(Ok(())))) {
            shard.note_publish_answer(owner, &Some(answer), false, &counted_topic);
            pipeline.unanswered.set(0);
            pipeline.count_published(&counted_topic, count);
            conn.push_response(protocol::OK);
            return Ok(());
        }
    }
    pipeline.outstanding.set(pipeline.outstanding.get() + 1);
    pipeline.pending.borrow_mut().push_back(PendingPublish {
        reply,
        owner,
        acked,
        topic: counted_topic,
        count,
        kind,
    });
    pipeline.wake_replier.notify();
    Ok(())
}

/// Writes the answers of pipelined publishes in command order. A failed publish sends its
/// (fatal) error frame and closes the connection, as nsqd does.
pub(super) async fn reply_loop(shard: Rc<Shard>, conn: Rc<Conn>) {
    let pipeline = &conn.pipeline;
    loop {
        let next = pipeline.pending.borrow_mut().pop_front();
        let Some(p) = next else {
            if conn.is_closed() {
                return;
            }
            pipeline.wake_replier.notified().await;
            continue;
        };
        let answer = p.reply.await;
        shard.note_publish_answer(p.owner, &answer, p.acked, &p.topic);
        if p.acked {
            pipeline.confirmed();
            continue;
        }
        pipeline
            .unanswered
            .set(pipeline.unanswered.get().saturating_sub(1));
        match answer {
            Some(Reply::Publish(Ok(()))) => {
                pipeline.count_published(&p.topic, p.count);
                conn.push_response(protocol::OK);
            }
            other => {
                let why = match other {
                    Some(Reply::Publish(Err(e))) => e.description,
                    _ => "broker shutting down".to_string(),
                };
                let e = ProtocolError::fatal(
                    p.kind.error_code(),
                    format!("{} failed {why}", p.kind.verb()),
                );
                debug!(error = %e, "publish failed");
                conn.push_error(&e);
                conn.close();
            }
        }
        pipeline.confirmed();
    }
}

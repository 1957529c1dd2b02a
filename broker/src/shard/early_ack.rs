//! Publishes answered OK before their owner shard has them ("early"), and what makes that
//! safe: when it is allowed ([`Shard::can_ack_early`]), learning each owner's storage health
//! from its answers, and confirming early-answered HTTP publishes in order with one task.
//!
//! Invariant: at most [`MAX_UNCONFIRMED`] HTTP publishes travel unconfirmed per shard, and a
//! clean stop waits for their confirmations before the shard reports done.

use super::Shard;
use crate::mailbox::Reply;
use nsq_common::local_sync::{Notify, Receiver};
use protocol::ErrorCode;
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::collections::VecDeque;
use std::rc::Rc;
use tracing::error;

/// An HTTP publish answered OK early; its owner's answer confirms it.
struct Unconfirmed {
    owner: usize,
    topic: String,
    reply: Receiver<Reply>,
}

/// Topics a shard remembers as answered for (see `Shard::can_ack_early`).
const MAX_KNOWN_TOPICS: usize = 100_000;

/// Early-answered HTTP publishes a shard lets travel unconfirmed before it waits for answers.
pub const MAX_UNCONFIRMED: usize = 1024;

/// A shard's knowledge for early answers, and the HTTP publishes it answered early.
pub(crate) struct EarlyAcks {
    /// Per peer: its last publish answer said its storage is failing (no early OKs for it).
    owner_failing: RefCell<Vec<bool>>,
    /// Topics whose publishes from this shard the owner has answered (see `can_ack_early`).
    known_topics: RefCell<HashSet<String>>,
    /// HTTP publishes answered early and not yet confirmed (bounded by [`MAX_UNCONFIRMED`]):
    /// their answers, oldest first, for the one confirmer task (not a task per request).
    unconfirmed: RefCell<VecDeque<Unconfirmed>>,
    /// The answer the confirmer is waiting for right now (still unconfirmed).
    confirming: Cell<bool>,
    wake_confirmer: Notify,
}

impl EarlyAcks {
    pub(crate) fn new(peers: usize) -> EarlyAcks {
        EarlyAcks {
            owner_failing: RefCell::new(vec![false; peers]),
            known_topics: RefCell::new(HashSet::new()),
            unconfirmed: RefCell::new(VecDeque::new()),
            confirming: Cell::new(false),
            wake_confirmer: Notify::new(),
        }
    }
}

impl Shard {
    /// Whether a publish for `owner` may be answered OK before the owner has stored it: not
    /// when answers wait for the disk (--durable, --mem-queue-size 0), not for this shard's own topics (answered at once
    /// anyway), and not while the owner's last answer said its storage is failing (so such
    /// publishes get their E_PUB_FAILED). The message then travels in this process's memory,
    /// in order behind this connection's earlier mail, as a message nsqd has put in its
    /// in-memory queue does; a clean stop waits for its confirmation.
    ///
    /// Also not for a topic this shard has not yet seen a publish answered for: the first
    /// publish creates the topic (and, with lookups, first learns its channels), and a client
    /// that reads /stats after its OK expects to see them, as with nsqd.
    pub fn can_ack_early(&self, owner: usize, topic: &str) -> bool {
        !self.config.acks_wait_for_disk()
            && !self.stopping.get()
            && owner != self.id
            && !self
                .early
                .owner_failing
                .borrow()
                .get(owner)
                .copied()
                .unwrap_or(true)
            && self.early.known_topics.borrow().contains(topic)
    }

    /// HTTP publishes answered OK early and not yet confirmed by their owner.
    pub fn http_unconfirmed(&self) -> usize {
        self.early.unconfirmed.borrow().len() + usize::from(self.early.confirming.get())
    }

    /// Hands the answer of an HTTP publish answered OK early to the confirmer.
    pub fn confirm_later(&self, owner: usize, topic: String, reply: Receiver<Reply>) {
        self.early.unconfirmed.borrow_mut().push_back(Unconfirmed {
            owner,
            topic,
            reply,
        });
        self.early.wake_confirmer.notify();
    }

    /// Takes the answers of early-answered HTTP publishes in order, learning the owners'
    /// health from them (as a TCP connection's replier does for its own).
    pub(super) async fn confirm_http_publishes(self: Rc<Self>) {
        loop {
            let next = self.early.unconfirmed.borrow_mut().pop_front();
            let Some(u) = next else {
                self.early.wake_confirmer.notified().await;
                continue;
            };
            self.early.confirming.set(true);
            let answer = u.reply.await;
            self.early.confirming.set(false);
            self.note_publish_answer(u.owner, &answer, true, &u.topic);
        }
    }

    /// Learns the owner's health from a publish answer; `acked`: the client already has its OK.
    pub fn note_publish_answer(
        &self,
        owner: usize,
        answer: &Option<Reply>,
        acked: bool,
        topic: &str,
    ) {
        let failing = match answer {
            Some(Reply::Publish(Ok(()))) => {
                if !acked && !self.early.known_topics.borrow().contains(topic) {
                    let mut known = self.early.known_topics.borrow_mut();
                    // Bounded: forgetting only costs each topic one waited-for publish.
                    if known.len() >= MAX_KNOWN_TOPICS {
                        known.clear();
                    }
                    known.insert(topic.to_string());
                }
                false
            }
            Some(Reply::Publish(Err(e))) if e.code == ErrorCode::PubFailed => true,
            _ => {
                if acked {
                    error!(
                        shard = self.id,
                        owner,
                        topic,
                        "a publish answered OK early was not confirmed by its owner (stopping?)"
                    );
                }
                return;
            }
        };
        if let Some(f) = self.early.owner_failing.borrow_mut().get_mut(owner) {
            *f = failing;
        }
    }
}

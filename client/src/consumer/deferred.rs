//! Answers given later: the [`Pending`] answer a deferred handler ([`Consumer::new_deferred`])
//! receives with each message, and [`answer_all`] for a batch of them.
//!
//! A handler that holds messages (to write them in batches, say) used to need a task or a
//! future per held message, woken when its batch was done; at a million messages a second that
//! bookkeeping cost more than the work. A [`Pending`] is a few words (the connection, the
//! message id, a weak reference to the consumer): holding one costs nothing but its slot in the
//! holder's list, and answering a batch is one loop, with the clock read once.
//!
//! Invariants (the client guide's, as for a returning handler):
//! - every delivered message is answered exactly once: a `Pending` is consumed by answering,
//!   and one dropped unanswered requeues its message (no backoff) with a warning, so RDY and
//!   in-flight accounting never leak;
//! - until answered, the message counts in flight on its connection (RDY refills, starvation,
//!   [`Consumer::stop`] waiting, retiring a connection only once drained);
//! - FIN counts as a success for backoff, REQ with `backoff: true` as a failure, as for a
//!   returning handler; a consumer whose handlers return is unaffected by this module;
//! - [`Pending::release`] answers nothing on the wire: the broker keeps the message in flight
//!   until the connection closes (then it is back in the channel at once) or its timeout, so a
//!   handler that stops taking messages neither spends their attempts nor finishes them.
//!
//! [`Consumer::new_deferred`]: super::Consumer::new_deferred
//! [`Consumer::stop`]: super::Consumer::stop

use super::Inner;
use crate::backoff::Outcome;
use crate::conn::Conn;
use crate::error::Result;
use crate::message::{HandlerResult, Message};
use crate::rdy::ConnId;
use protocol::{Command, MessageId};
use std::rc::{Rc, Weak};

/// The answer still owed for one delivered message. Answer it with [`Pending::finish`],
/// [`Pending::requeue`], [`Pending::answer`] or, for many, [`answer_all`].
#[must_use = "a Pending dropped unanswered requeues its message"]
pub struct Pending {
    consumer: Weak<Inner>,
    conn_id: ConnId,
    conn: Conn,
    id: MessageId,
    attempts: u16,
    answered: bool,
}

impl Pending {
    pub(super) fn new(consumer: Weak<Inner>, conn_id: ConnId, msg: &Message) -> Pending {
        Pending {
            consumer,
            conn_id,
            conn: msg.conn_handle(),
            id: msg.id(),
            attempts: msg.attempts(),
            answered: false,
        }
    }

    /// The id of the message this answers.
    pub fn id(&self) -> MessageId {
        self.id
    }

    /// Resets the broker's timeout for the message (`TOUCH`), as [`Message::touch`].
    pub fn touch(&self) -> Result<()> {
        self.conn.send(&Command::Touch(self.id))
    }

    /// FIN: processed.
    pub fn finish(self) {
        answer_all([self], HandlerResult::Finish);
    }

    /// REQ with the computed delay, backing off (as [`HandlerResult::requeue`]).
    pub fn requeue(self) {
        answer_all([self], HandlerResult::requeue());
    }

    /// Answers as a returning handler's `result` would.
    pub fn answer(self, result: HandlerResult) {
        answer_all([self], result);
    }

    /// Leaves the message to the broker: no FIN, no REQ. The broker holds it in flight until
    /// the connection closes (it is then back in the channel at once, as a disconnected
    /// consumer's messages are) or until its timeout passes. For a handler that takes no more
    /// messages (nsq_tail after `-n`): release what still arrives, then stop the consumer.
    /// Here it stops counting in flight, so RDY and [`Consumer::stop`] do not wait for it.
    ///
    /// [`Consumer::stop`]: super::Consumer::stop
    pub fn release(mut self) {
        self.answered = true;
        if let Some(consumer) = self.consumer.upgrade() {
            consumer.state.borrow_mut().stats.messages_released += 1;
            consumer.book(self.conn_id, Outcome::Neutral, std::time::Instant::now());
            consumer.changed.notify();
        }
    }

    /// Sends the answer and books it on `consumer` (RDY, backoff, counters).
    fn give(&mut self, consumer: &Rc<Inner>, result: HandlerResult, now: std::time::Instant) {
        self.answered = true;
        let outcome = consumer.answer(&self.conn, self.id, self.attempts, result);
        consumer.book(self.conn_id, outcome, now);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        tracing::warn!(id = %self.id, "message dropped unanswered by its handler; requeueing");
        let result = HandlerResult::Requeue {
            delay: None,
            backoff: false,
        };
        match self.consumer.upgrade() {
            Some(consumer) => {
                self.give(&consumer, result, std::time::Instant::now());
                consumer.changed.notify();
            }
            None => {
                let _ = self.conn.send(&Command::Req {
                    id: self.id,
                    delay_ms: 0,
                });
            }
        }
    }
}

/// Answers every message of `batch` with `result`: FIN or REQ each (queued on its connection,
/// which writes what piled up in one go), then RDY and backoff as if each had been answered
/// alone, with the clock read once for the batch.
pub fn answer_all(batch: impl IntoIterator<Item = Pending>, result: HandlerResult) {
    let now = std::time::Instant::now();
    let mut last: Option<Rc<Inner>> = None;
    for mut p in batch {
        let same = last
            .as_ref()
            .is_some_and(|c| std::ptr::eq(Rc::as_ptr(c), p.consumer.as_ptr()));
        if !same {
            if let Some(c) = last.take() {
                c.changed.notify();
            }
            last = p.consumer.upgrade();
        }
        match &last {
            Some(consumer) => p.give(consumer, result, now),
            None => {
                // The consumer is gone: its connections are closing, the broker requeues.
                p.answered = true;
            }
        }
    }
    if let Some(c) = last {
        c.changed.notify();
    }
}

//! What a consumer's handler receives, and what it answers.
//!
//! A [`Message`] is the broker's message plus the connection it came on, so that the handler
//! can ask for more time with [`Message::touch`]. Finishing and requeueing are not methods:
//! the handler *returns* a [`HandlerResult`] and the consumer sends FIN or REQ for it, so a
//! message can never be answered twice or forgotten.

use crate::conn::Conn;
use crate::error::Result;
use bytes::Bytes;
use protocol::{Command, MessageId};
use std::fmt;
use std::time::Duration;

/// One delivery of a message.
pub struct Message {
    inner: protocol::Message,
    conn: Conn,
}

impl Message {
    pub(crate) fn new(inner: protocol::Message, conn: Conn) -> Message {
        Message { inner, conn }
    }

    pub fn id(&self) -> MessageId {
        self.inner.id
    }

    pub fn body(&self) -> &Bytes {
        &self.inner.body
    }

    /// How many times the broker has delivered this message, this delivery included.
    pub fn attempts(&self) -> u16 {
        self.inner.attempts
    }

    /// Nanoseconds since the Unix epoch at which the broker accepted the message.
    pub fn timestamp(&self) -> i64 {
        self.inner.timestamp
    }

    pub(crate) fn conn_handle(&self) -> Conn {
        self.conn.clone()
    }

    /// The message as it came off the wire.
    pub fn as_protocol(&self) -> &protocol::Message {
        &self.inner
    }

    /// Resets the broker's timeout for this message (`TOUCH`), up to the broker's
    /// `max_msg_timeout` after delivery. Never sent automatically: call it when the handler
    /// knows it needs longer than the message timeout.
    pub fn touch(&self) -> Result<()> {
        self.conn.send(&Command::Touch(self.inner.id))
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

/// What a handler decided about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerResult {
    /// Processed: send FIN. Counts as a success for backoff.
    Finish,
    /// Not processed: send REQ. With `delay: None` the delay grows with the attempts
    /// (`requeue_delay * attempts`, capped). `backoff: true` counts as a failure for backoff
    /// (the consumer slows down); `false` leaves the rate alone.
    Requeue {
        delay: Option<Duration>,
        backoff: bool,
    },
}

impl HandlerResult {
    /// Requeue with the computed delay, and back off.
    pub fn requeue() -> HandlerResult {
        HandlerResult::Requeue {
            delay: None,
            backoff: true,
        }
    }

    /// Requeue with `delay`, without backing off.
    pub fn requeue_after(delay: Duration) -> HandlerResult {
        HandlerResult::Requeue {
            delay: Some(delay),
            backoff: false,
        }
    }
}

//! A channel's consumer table: who subscribed (with what settings), each consumer's RDY, what
//! it holds in flight, the bytes encoded for it and not yet written (its output window), CLS,
//! and whose turn it is.
//!
//! Invariants: a consumer is ready ([`Consumer`]'s `is_ready`) only while it has not sent CLS,
//! `in_flight < rdy`, and `unwritten` is under its window; `in_flight` counts the channel's
//! in-flight entries it owns. A disconnect ([`Channel::remove_consumer`]) returns every message
//! the consumer held to the front of the channel's queue at once, with its attempts kept, so
//! nothing is lost (nsqd waits for their timeout).

use super::{Channel, Owes, Requeued};
use crate::storage::segment::Stored;
use std::sync::Arc;
use std::time::Duration;

/// A consumer connection, wherever it lives: its shard and its connection number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConsumerKey {
    pub shard: usize,
    pub conn: u64,
}

/// What the owner knows of a consumer's client, for /stats.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub remote_address: String,
    pub connect_ts: i64,
    pub sample_rate: u8,
    /// The connection's transport as IDENTIFY negotiated it: TLS (filled once its handshake
    /// is done: version and cipher suite in nsqd's words, `crate::tls`) and compression.
    pub tls: Option<TlsInfo>,
    pub snappy: bool,
    pub deflate: bool,
    /// After AUTH: what the auth server said (one pointer before, or without, AUTH).
    pub auth: Option<Arc<ClientAuth>>,
}

/// A TLS connection as /stats reports it (nsqd's `tls_*` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsInfo {
    pub version: String,
    pub cipher_suite: String,
    /// The ALPN protocol agreed (none is offered: empty).
    pub negotiated_protocol: String,
}

/// What /stats shows of a client's AUTH: whether it holds authorizations, and who the auth
/// server says it is.
#[derive(Debug, Clone, Default)]
pub struct ClientAuth {
    pub authed: bool,
    pub identity: String,
    pub identity_url: String,
}

/// The settings a consumer subscribes with.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub key: ConsumerKey,
    pub msg_timeout: Duration,
    pub info: Arc<ClientInfo>,
    /// Bytes of frames the consumer may have encoded for it and not yet written to its
    /// socket before deliveries to it pause (see `crate::config::Config::output_window`).
    pub output_window: u64,
}

#[derive(Debug)]
pub struct Consumer {
    pub spec: ConsumerSpec,
    pub rdy: u64,
    pub in_flight: u64,
    pub closing: bool,
    /// Bytes of frames encoded for this consumer that its connection has not reported
    /// written yet ([`Channel::written`]).
    pub unwritten: u64,
    pub message_count: u64,
    pub finish_count: u64,
    pub requeue_count: u64,
}

impl Consumer {
    pub(super) fn is_ready(&self) -> bool {
        !self.closing && self.in_flight < self.rdy && self.unwritten < self.spec.output_window
    }
}

/// A SUB refused by the channel: it has `--max-channel-consumers` consumers already (the
/// text is nsqd's).
#[derive(Debug, thiserror::Error)]
#[error("consumers for {topic}:{channel} exceeds limit of {limit}")]
pub struct TooManyConsumers {
    pub topic: String,
    pub channel: String,
    pub limit: u64,
}

impl Channel {
    pub fn add_consumer(&mut self, spec: ConsumerSpec, max: u64) -> Result<(), TooManyConsumers> {
        if max > 0 && self.consumers.len() as u64 >= max {
            return Err(TooManyConsumers {
                topic: self.topic.to_string(),
                channel: self.name.to_string(),
                limit: max,
            });
        }
        self.consumers.push(Consumer {
            spec,
            rdy: 0,
            in_flight: 0,
            closing: false,
            unwritten: 0,
            message_count: 0,
            finish_count: 0,
            requeue_count: 0,
        });
        Ok(())
    }

    /// Removes a consumer and puts its in-flight messages back in front of the queue at once.
    pub fn remove_consumer(&mut self, key: ConsumerKey) {
        self.consumers.retain(|c| c.spec.key != key);
        let mut returned: Vec<(Owes, Stored)> = Vec::new();
        let order = &mut self.in_flight_order;
        self.in_flight.retain(|id, f| {
            if f.consumer == key {
                order.remove(f.slot, f.deadline, *id);
                returned.push((f.owes, f.msg.clone()));
                false
            } else {
                true
            }
        });
        // Oldest first, ahead of newer messages: they were due first.
        returned.sort_by_key(|(_, m)| m.seq);
        for (owes, msg) in returned.into_iter().rev() {
            self.requeue_count += 1;
            // nsqd would time these out: the limit applies as to a timeout.
            if let Some(msg) = self.given_back(owes, msg) {
                self.requeued.push_front(Requeued { after: 0, msg });
            }
        }
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    pub fn consumers(&self) -> &[Consumer] {
        &self.consumers
    }

    pub(super) fn consumer_mut(&mut self, key: ConsumerKey) -> Option<&mut Consumer> {
        self.consumers.iter_mut().find(|c| c.spec.key == key)
    }

    pub fn set_rdy(&mut self, key: ConsumerKey, rdy: u64) {
        if let Some(c) = self.consumer_mut(key) {
            if !c.closing {
                c.rdy = rdy;
            }
        }
    }

    /// The consumer's connection wrote `bytes` more of the frames encoded for it.
    pub fn written(&mut self, key: ConsumerKey, bytes: u64) {
        if let Some(c) = self.consumer_mut(key) {
            c.unwritten = c.unwritten.saturating_sub(bytes);
        }
    }

    /// CLS: no more deliveries to this consumer (RDY 0, as nsqd); FIN/REQ/TOUCH still count.
    pub fn close_consumer(&mut self, key: ConsumerKey) {
        if let Some(c) = self.consumer_mut(key) {
            c.closing = true;
            c.rdy = 0;
        }
    }

    /// The first ready consumer from the one whose turn it is (the turn does not move here).
    pub(super) fn next_ready_consumer(&self) -> Option<usize> {
        let n = self.consumers.len();
        (0..n)
            .map(|step| (self.next_consumer + step) % n)
            .find(|&i| self.consumers[i].is_ready())
    }
}

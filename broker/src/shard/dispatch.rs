//! The owner's side of consumers: SUB, their channel operations (RDY, FIN, REQ, TOUCH, CLS,
//! disconnect), dispatching ready messages and routing the frames to the consumers' shards,
//! and the timers (in-flight timeouts requeue through `Channel::on_timer`, deferred messages
//! come due).
//!
//! Dispatch is batched: operations only mark a channel ([`Shard::dispatch_soon`]) and each
//! batch of mail or commands ends with one [`Shard::flush_dispatches`]. Nothing here waits.

use super::Shard;
use crate::channel::TimerEntry;
use crate::channel::{Batch, ConsumerKey, ConsumerSpec, Deliveries};
use crate::mailbox::{ChannelOp, Mail, RegistryOp};
use crate::topic::{ChannelRef, Topic};
use protocol::{ErrorCode, ProtocolError};
use replication::wire::ChannelOp as ReplicaChannelOp;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use tracing::info;

impl Shard {
    pub(super) fn subscribe_here(
        &self,
        topic: &str,
        channel: &str,
        consumer: ConsumerSpec,
    ) -> Result<(), ProtocolError> {
        let t = self.topic_or_create(topic).map_err(|reason| {
            ProtocolError::fatal(ErrorCode::SubFailed, format!("SUB failed {reason}"))
        })?;
        let (ch, created) = t.borrow_mut().channel_or_create(channel);
        if created {
            self.note_meta_change(&t);
            info!(topic, channel, shard = self.id, "channel created");
            self.report(RegistryOp::Register, topic, Some(channel));
            self.tell_leader(&t, Some((channel, ReplicaChannelOp::Created)));
        }
        let added = ch
            .borrow_mut()
            .add_consumer(consumer, self.config.max_channel_consumers);
        if let Err(e) = added {
            return Err(ProtocolError::fatal(
                ErrorCode::SubFailed,
                format!("SUB failed {e}"),
            ));
        }
        if created {
            let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
            for c in touched {
                self.dispatch(&c);
            }
        }
        Ok(())
    }

    pub(super) fn channel_op_here(
        &self,
        topic: &str,
        channel: &str,
        key: ConsumerKey,
        op: ChannelOp,
    ) {
        let t = self.topics.borrow().get(topic).cloned();
        if let Some(t) = &t {
            if !matches!(op, ChannelOp::Written(_)) {
                self.queue_checkpoint(t);
            }
        }
        let ch = t.as_ref().and_then(|t| t.borrow().channel(channel));
        let Some(ch) = ch else {
            // The channel was deleted under the consumer; only FIN/REQ/TOUCH deserve an answer.
            if let Some((code, verb, ids)) = op_ids(&op) {
                for id in ids {
                    let text = format!("{verb} {id} failed ID not in flight");
                    self.send_conn_error(key, code, text);
                }
            }
            return;
        };
        let mut failures = Vec::new();
        let max = self.config.max_msg_timeout;
        {
            let mut c = ch.borrow_mut();
            match &op {
                ChannelOp::Rdy(n) => c.set_rdy(key, *n),
                ChannelOp::Fin(ids) => {
                    for id in ids {
                        if let Err(e) = c.finish(key, *id) {
                            failures.push((*id, e));
                        }
                    }
                }
                ChannelOp::Req(id, delay) => {
                    if let Err(e) = c.requeue(key, *id, *delay, Instant::now(), &self.timers) {
                        failures.push((*id, e));
                    }
                }
                ChannelOp::Touch(id) => {
                    if let Err(e) = c.touch(key, *id, max, Instant::now(), &self.timers) {
                        failures.push((*id, e));
                    }
                }
                ChannelOp::Close => c.close_consumer(key),
                ChannelOp::Leave => c.remove_consumer(key),
                ChannelOp::Written(bytes) => c.written(key, *bytes),
            }
        }
        if let Some((code, verb, _)) = op_ids(&op) {
            for (id, e) in failures {
                self.send_conn_error(key, code, format!("{verb} {id} failed {}", e.text()));
            }
        }
        if matches!(op, ChannelOp::Req(..) | ChannelOp::Leave) {
            self.send_dead_letters(&ch);
        }
        if matches!(op, ChannelOp::Leave) {
            if let Some(t) = &t {
                self.drop_if_ephemeral_and_unused(t, &ch);
            }
        }
        self.dispatch_soon(&ch);
    }

    fn send_conn_error(&self, key: ConsumerKey, code: ErrorCode, text: String) {
        self.route(
            key.shard,
            Mail::ConnError {
                conn: key.conn,
                error: ProtocolError::non_fatal(code, text),
            },
        );
    }

    /// `#ephemeral` channels go with their last consumer, `#ephemeral` topics with their last
    /// channel.
    fn drop_if_ephemeral_and_unused(&self, t: &Rc<RefCell<Topic>>, ch: &ChannelRef) {
        let (ephemeral, empty, name) = {
            let c = ch.borrow();
            (c.ephemeral, c.consumer_count() == 0, c.name.clone())
        };
        if !(ephemeral && empty) {
            return;
        }
        let topic_gone = {
            let mut tb = t.borrow_mut();
            tb.remove_channel(&name);
            info!(topic = %tb.name, channel = %name, "ephemeral channel removed");
            tb.ephemeral && tb.channel_count() == 0
        };
        let topic_name = t.borrow().name.clone();
        self.report(RegistryOp::Unregister, &topic_name, Some(&name));
        if topic_gone {
            self.topics.borrow_mut().remove(&*topic_name);
            info!(topic = %topic_name, "ephemeral topic removed");
            self.report(RegistryOp::Unregister, &topic_name, None);
        }
    }

    /// Lists `ch` for dispatch at the end of the current batch: a burst of FINs from one read
    /// or one mailbox batch then frees room many times but dispatches (and sends one delivery
    /// batch per consumer) once. The inbox loop and connection readers call
    /// [`Shard::flush_dispatches`] when they finish a batch; the dispatcher task covers every
    /// other path as soon as the current task yields.
    pub(crate) fn dispatch_soon(&self, ch: &ChannelRef) {
        let added = self
            .pending_dispatch
            .add(ch, &mut ch.borrow_mut().dispatch_queued);
        if added == Some(true) {
            self.wake_dispatcher.notify();
        }
    }

    /// Dispatches every channel [`Shard::dispatch_soon`] listed.
    pub(crate) fn flush_dispatches(&self) {
        loop {
            let list = self.pending_dispatch.take();
            if list.is_empty() {
                return;
            }
            for ch in list {
                ch.borrow_mut().dispatch_queued = false;
                self.dispatch(&ch);
            }
        }
    }

    /// Lets a channel deliver what it can, and routes the deliveries.
    pub(crate) fn dispatch(&self, ch: &ChannelRef) {
        if self.stopping.get() {
            return;
        }
        let topic_name = ch.borrow().topic.clone();
        let Some(t) = self.topics.borrow().get(&*topic_name).cloned() else {
            return;
        };
        let log = t.borrow().log.clone();
        let mut out = Deliveries::default();
        ch.borrow_mut().dispatch(
            &log.borrow(),
            Instant::now(),
            self.config.max_msg_timeout,
            &self.timers,
            &mut out,
        );
        self.route_deliveries(out);
        if log.borrow().has_wanted_blocks() {
            self.queue_fetch(&t);
        }
    }

    /// Hands each consumer's frames to its connection: here, or through the mailbox of the
    /// connection's shard.
    fn route_deliveries(&self, out: Deliveries) {
        for Batch {
            to: key,
            frames,
            full,
        } in out.batches
        {
            if key.shard == self.id {
                let c = self.conns.borrow().get(&key.conn).cloned();
                // A connection that is gone has already sent Leave; that requeues these.
                if let Some(c) = c {
                    c.deliver_frames(frames, full);
                }
                continue;
            }
            self.route(
                key.shard,
                Mail::Deliver {
                    conn: key.conn,
                    frames: frames.freeze(),
                    full,
                },
            );
        }
    }

    pub(super) fn on_timers(&self, due: Vec<TimerEntry>) {
        let mut changed: Vec<ChannelRef> = Vec::new();
        let now = Instant::now();
        for e in due {
            let Some(ch) = e.channel.upgrade() else {
                continue;
            };
            let ready = ch.borrow_mut().on_timer(e.kind, e.at, now, &self.timers);
            self.send_dead_letters(&ch);
            if ready && !changed.iter().any(|c| Rc::ptr_eq(c, &ch)) {
                changed.push(ch);
            }
        }
        for ch in changed {
            self.dispatch(&ch);
        }
    }
}

/// The error code, verb and IDs of a FIN, REQ or TOUCH (what a failure answer names).
fn op_ids(op: &ChannelOp) -> Option<(ErrorCode, &'static str, &[protocol::MessageId])> {
    match op {
        ChannelOp::Fin(ids) => Some((ErrorCode::FinFailed, "FIN", ids)),
        ChannelOp::Req(id, _) => Some((ErrorCode::ReqFailed, "REQ", std::slice::from_ref(id))),
        ChannelOp::Touch(id) => Some((ErrorCode::TouchFailed, "TOUCH", std::slice::from_ref(id))),
        _ => None,
    }
}

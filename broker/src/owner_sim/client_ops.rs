//! The simulation's publishers and consumers: PUB, SUB, RDY, FIN, REQ, TOUCH, written-byte
//! reports, CLS, disconnects, virtual time and the timeouts it fires, and what the model
//! makes of a delivery that ends.

use super::{Held, Owes, Sim, SimConsumer, MAX_MSG_TIMEOUT};
use crate::channel::{ClientInfo, ConsumerKey, ConsumerSpec};
use crate::timer::TimerKind;
use crate::topic::ChannelRef;
use bytes::Bytes;
use protocol::{Message, MessageId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Fin,
    /// REQ, a timeout or the consumer's disconnect.
    GivenBack,
}

impl Sim {
    pub(super) fn publish(&mut self) {
        let n = 1 + self.rng.below(4);
        let msgs: Vec<Message> = (0..n)
            .map(|_| {
                let len = self.rng.below(64) as usize;
                let id = self.topic.ids.next_id();
                self.bodies.insert(id, len);
                Message {
                    id,
                    timestamp: self.published as i64,
                    attempts: 0,
                    body: Bytes::from(vec![b'x'; len]),
                }
            })
            .collect();
        self.published += n;
        let ids: Vec<MessageId> = msgs.iter().map(|m| m.id).collect();
        let (end, touched) = self.topic.publish(msgs, 0);
        if end != (self.log_ids.len() + ids.len()) as u64 {
            self.fail(format!(
                "the log ends at {end} after {} messages",
                self.log_ids.len() + ids.len()
            ));
        }
        for &id in &ids {
            self.seqs.insert(id, self.log_ids.len() as u64);
            self.log_ids.push(id);
        }
        for ch in self.channels.values_mut() {
            ch.expected.extend(ids.iter().copied());
        }
        for ch in touched {
            self.dispatch(&ch);
        }
    }

    pub(super) fn subscribe(&mut self) {
        let Some(name) = self.some_channel() else {
            return;
        };
        let key = ConsumerKey {
            shard: 0,
            conn: self.next_conn,
        };
        self.next_conn += 1;
        let timeout =
            Duration::from_millis([300, 1_000, 5_000, 30_000][self.rng.below(4) as usize]);
        let window = [u64::MAX, 60, 400][self.rng.below(3) as usize];
        let spec = ConsumerSpec {
            key,
            msg_timeout: timeout,
            info: Arc::new(ClientInfo::default()),
            output_window: window,
        };
        let ch = self.channel(&name);
        if let Err(e) = ch.borrow_mut().add_consumer(spec, 0) {
            self.fail(format!("subscribe refused: {e}"));
        }
        self.consumers.push(SimConsumer {
            key,
            channel: name,
            timeout,
            window,
            rdy: 0,
            closed: false,
            unwritten: 0,
            held: BTreeMap::new(),
        });
    }

    fn some_consumer(&mut self) -> Option<usize> {
        (!self.consumers.is_empty()).then(|| self.rng.below(self.consumers.len() as u64) as usize)
    }

    pub(super) fn rdy(&mut self) {
        let Some(i) = self.some_consumer() else {
            return;
        };
        let rdy = self.rng.below(7);
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        let ch = self.channel(&name);
        ch.borrow_mut().set_rdy(key, rdy);
        if !self.consumers[i].closed {
            self.consumers[i].rdy = rdy;
        }
        self.dispatch(&ch);
    }

    /// A consumer and one message it holds.
    fn some_held(&mut self) -> Option<(usize, MessageId)> {
        let holders: Vec<usize> = (0..self.consumers.len())
            .filter(|&i| !self.consumers[i].held.is_empty())
            .collect();
        let &i = self.rng.pick(&holders)?;
        let ids: Vec<MessageId> = self.consumers[i].held.keys().copied().collect();
        let &id = self.rng.pick(&ids)?;
        Some((i, id))
    }

    /// Consumer `i` no longer holds `id`; its delivery ended by `end`.
    fn release(&mut self, i: usize, id: MessageId, end: End) {
        let name = self.consumers[i].channel.clone();
        let Some(held) = self.consumers[i].held.remove(&id) else {
            self.fail(format!("{id:?} is not held by {:?}", self.consumers[i].key));
        };
        self.delivery_ended(&name, id, &held, end);
    }

    /// The model's side of a delivery of `id` on channel `name` that ended: a FIN finishes
    /// the message unless a rewind owes it again; given back, a dropped message is owed no
    /// more (one over max attempts is checked by [`Sim::collect_dead`]).
    pub(super) fn delivery_ended(&mut self, name: &str, id: MessageId, held: &Held, end: End) {
        let sim = self.sim_channel(name);
        match (held.owed, end) {
            (Owes::Replayed, _) => {}
            (_, End::Fin) => {
                if !sim.finished.insert(id) || !sim.expected.remove(&id) {
                    self.fail(format!("{id:?} finished twice"));
                }
            }
            (Owes::Dropped, End::GivenBack) => {
                sim.expected.remove(&id);
            }
            (Owes::Message, End::GivenBack) => {}
        }
    }

    pub(super) fn fin(&mut self) {
        let Some((i, id)) = self.some_held() else {
            return;
        };
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        let ch = self.channel(&name);
        if let Err(e) = ch.borrow_mut().finish(key, id) {
            self.fail(format!("FIN of a held message refused: {e:?}"));
        }
        self.release(i, id, End::Fin);
        self.dispatch(&ch);
    }

    /// FIN, REQ or TOUCH of a message the consumer does not hold: refused, nothing changes.
    pub(super) fn wrong_fin(&mut self) {
        let Some(i) = self.some_consumer() else {
            return;
        };
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        // Another consumer's message, or one nobody holds.
        let mine = &self.consumers[i].held;
        let other = self
            .consumers
            .iter()
            .filter(|c| c.key != key)
            .flat_map(|c| c.held.keys().copied())
            .find(|id| !mine.contains_key(id));
        let id = other.unwrap_or_else(|| MessageId::from_u64(u64::MAX - self.rng.below(10)));
        let ch = self.channel(&name);
        let r = match self.rng.below(3) {
            0 => ch.borrow_mut().finish(key, id),
            1 => ch
                .borrow_mut()
                .requeue(key, id, Duration::ZERO, self.now, &self.timers),
            _ => ch
                .borrow_mut()
                .touch(key, id, MAX_MSG_TIMEOUT, self.now, &self.timers),
        };
        if r.is_ok() {
            self.fail(format!("{key:?} acted on {id:?}, which it does not hold"));
        }
    }

    pub(super) fn req(&mut self) {
        let Some((i, id)) = self.some_held() else {
            return;
        };
        let delay = if self.rng.below(2) == 0 {
            Duration::ZERO
        } else {
            Duration::from_millis(self.rng.below(3_000))
        };
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        let ch = self.channel(&name);
        if let Err(e) = ch
            .borrow_mut()
            .requeue(key, id, delay, self.now, &self.timers)
        {
            self.fail(format!("REQ of a held message refused: {e:?}"));
        }
        self.release(i, id, End::GivenBack);
        self.collect_dead(&name, &ch);
        self.dispatch(&ch);
    }

    pub(super) fn touch(&mut self) {
        let Some((i, id)) = self.some_held() else {
            return;
        };
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        let ch = self.channel(&name);
        if let Err(e) = ch
            .borrow_mut()
            .touch(key, id, MAX_MSG_TIMEOUT, self.now, &self.timers)
        {
            self.fail(format!("TOUCH of a held message refused: {e:?}"));
        }
        let timeout = self.consumers[i].timeout;
        if let Some(h) = self.consumers[i].held.get_mut(&id) {
            h.deadline =
                (self.now + timeout.min(MAX_MSG_TIMEOUT)).min(h.delivered_at + MAX_MSG_TIMEOUT);
        }
    }

    pub(super) fn written(&mut self) {
        let Some(i) = self.some_consumer() else {
            return;
        };
        let c = &mut self.consumers[i];
        let bytes = self.rng.below(c.unwritten + 1);
        c.unwritten -= bytes;
        let (key, name) = (c.key, c.channel.clone());
        let ch = self.channel(&name);
        ch.borrow_mut().written(key, bytes);
        self.dispatch(&ch);
    }

    pub(super) fn cls(&mut self) {
        let Some(i) = self.some_consumer() else {
            return;
        };
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        self.channel(&name).borrow_mut().close_consumer(key);
        self.consumers[i].closed = true;
        self.consumers[i].rdy = 0;
    }

    pub(super) fn disconnect(&mut self) {
        let Some(i) = self.some_consumer() else {
            return;
        };
        self.leave(i);
    }

    /// Consumer `i` disconnects: what it held ends as given back.
    pub(super) fn leave(&mut self, i: usize) {
        let c = self.consumers.remove(i);
        let ch = self.channel(&c.channel);
        ch.borrow_mut().remove_consumer(c.key);
        for (id, held) in &c.held {
            self.delivery_ended(&c.channel, *id, held, End::GivenBack);
        }
        self.collect_dead(&c.channel, &ch);
        self.dispatch(&ch);
    }

    pub(super) fn advance(&mut self) {
        let step = Duration::from_millis(self.rng.below(2_000));
        self.advance_by(step);
    }

    pub(super) fn advance_by(&mut self, step: Duration) {
        self.now += step;
        loop {
            let due = self.timers.take_due(self.now);
            if due.is_empty() {
                break;
            }
            for entry in due {
                let Some(ch) = entry.channel.upgrade() else {
                    continue;
                };
                let changed =
                    ch.borrow_mut()
                        .on_timer(entry.kind, entry.at, self.now, &self.timers);
                if entry.kind == TimerKind::InFlight {
                    self.reconcile_timeouts(&ch);
                }
                if changed {
                    self.dispatch(&ch);
                }
            }
        }
        // Every held message past its deadline has timed out by now, and none other.
        for c in &self.consumers {
            if let Some((id, h)) = c.held.iter().find(|(_, h)| h.deadline <= self.now) {
                self.fail(format!(
                    "{id:?} held by {:?} past its deadline ({:?} late)",
                    c.key,
                    self.now - h.deadline
                ));
            }
        }
    }

    /// Ends in the model the deliveries the channel timed out, checking each was due.
    fn reconcile_timeouts(&mut self, ch: &ChannelRef) {
        let name = ch.borrow().name.to_string();
        if !self.channels.contains_key(&name) {
            // Deleted: its timers may still fire, on nothing the model knows.
            return;
        }
        let audit = match ch.borrow().audit(&self.topic.log.borrow()) {
            Ok(a) => a,
            Err(e) => self.fail(e),
        };
        let live: BTreeSet<MessageId> = audit.in_flight.iter().map(|f| f.0).collect();
        let now = self.now;
        let mut ended = Vec::new();
        for (i, c) in self.consumers.iter().enumerate() {
            if c.channel != name {
                continue;
            }
            for (id, h) in &c.held {
                if live.contains(id) {
                    continue;
                }
                if h.deadline > now {
                    self.fail(format!(
                        "{id:?} timed out {:?} before its deadline",
                        h.deadline - now
                    ));
                }
                ended.push((i, *id));
            }
        }
        for (i, id) in ended {
            self.release(i, id, End::GivenBack);
        }
        self.collect_dead(&name, ch);
    }
}

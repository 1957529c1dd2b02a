//! The simulation's deliveries and checks: every delivery checked as it is made
//! ([`Sim::dispatch`]), the real state compared with the model after every step
//! ([`Sim::check`]), and the end, where one consumer per channel takes everything
//! ([`Sim::drain`]).

use super::client_ops::End;
use super::{Held, Owes, Sim, SimConsumer, MAX_MSG_TIMEOUT};
use crate::channel::{ClientInfo, ConsumerKey, ConsumerSpec, Deliveries};
use crate::topic::ChannelRef;
use protocol::MessageId;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

impl Sim {
    pub(super) fn dispatch(&mut self, ch: &ChannelRef) {
        let mut out = Deliveries::default();
        let paused = ch.borrow().paused;
        ch.borrow_mut().dispatch(
            &self.topic.log.borrow(),
            self.now,
            MAX_MSG_TIMEOUT,
            &self.timers,
            &mut out,
        );
        if paused && !out.is_empty() {
            self.fail("a paused channel delivered");
        }
        let name = ch.borrow().name.to_string();
        for d in out.iter() {
            let Some(i) = self.consumers.iter().position(|c| c.key == d.to) else {
                self.fail(format!("delivery to unknown consumer {:?}", d.to));
            };
            let c = &self.consumers[i];
            if c.channel != name {
                self.fail(format!(
                    "{:?} of channel {} got a message of {name}",
                    c.key, c.channel
                ));
            }
            if c.closed || c.held.len() as u64 >= c.rdy || c.unwritten >= c.window {
                self.fail(format!(
                    "delivery to {:?} with closed={} held={} rdy={} unwritten={} window={}",
                    c.key,
                    c.closed,
                    c.held.len(),
                    c.rdy,
                    c.unwritten,
                    c.window
                ));
            }
            let held_already = self
                .consumers
                .iter()
                .any(|c| c.channel == name && c.held.contains_key(&d.msg.id));
            if held_already {
                self.fail(format!("{:?} delivered while in flight", d.msg.id));
            }
            let Some(sim) = self.channels.get_mut(&name) else {
                self.fail(format!("delivery from deleted channel {name}"));
            };
            if sim.finished.contains(&d.msg.id) {
                self.fail(format!("{:?} delivered again after FIN", d.msg.id));
            }
            if !sim.expected.contains(&d.msg.id) {
                self.fail(format!("{:?} delivered but never owed by {name}", d.msg.id));
            }
            let n = sim.attempts.entry(d.msg.id).or_insert(0);
            *n += 1;
            let (got, want, max) = (d.msg.attempts, *n, sim.max_attempts);
            if got != want {
                self.fail(format!(
                    "{:?} delivered with attempts {got}, its delivery #{want}",
                    d.msg.id
                ));
            }
            if max > 0 && got > max {
                self.fail(format!(
                    "{:?} delivered with attempts {got}, over the channel's max attempts {max}",
                    d.msg.id
                ));
            }
            sim.replay.remove(&d.msg.id);
            let body = self.bodies.get(&d.msg.id).copied().unwrap_or(0);
            let timeout = c.timeout.min(MAX_MSG_TIMEOUT);
            let c = &mut self.consumers[i];
            // Frame: size, type, timestamp, attempts, ID, body.
            c.unwritten += (4 + 4 + 8 + 2 + 16 + body) as u64;
            c.held.insert(
                d.msg.id,
                Held {
                    attempts: d.msg.attempts,
                    delivered_at: self.now,
                    deadline: self.now + timeout,
                    owed: Owes::Message,
                },
            );
        }
    }

    pub(super) fn check(&mut self) {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        for name in names {
            self.check_channel(&name);
        }
    }

    fn check_channel(&mut self, name: &str) {
        let ch = self.channel(name);
        let audit = match ch.borrow().audit(&self.topic.log.borrow()) {
            Ok(a) => a,
            Err(e) => self.fail(format!("channel {name}: {e}")),
        };
        // In flight: exactly what the model's consumers hold, with the same attempts.
        let mut held: Vec<(MessageId, ConsumerKey, u16)> = self
            .consumers
            .iter()
            .filter(|c| c.channel == name)
            .flat_map(|c| c.held.iter().map(move |(id, h)| (*id, c.key, h.attempts)))
            .collect();
        let mut real = audit.in_flight.clone();
        let order = |f: &(MessageId, ConsumerKey, u16)| (f.0, f.1.shard, f.1.conn, f.2);
        held.sort_by_key(order);
        real.sort_by_key(order);
        if held != real {
            self.fail(format!(
                "channel {name}: in flight {real:?}, consumers hold {held:?}"
            ));
        }
        for c in ch.borrow().consumers() {
            let Some(m) = self.consumers.iter().find(|m| m.key == c.spec.key) else {
                self.fail(format!("channel {name} has a consumer the model lost"));
            };
            if c.unwritten != m.unwritten || c.rdy != m.rdy {
                self.fail(format!(
                    "{:?}: unwritten {} rdy {}, model {} {}",
                    m.key, c.unwritten, c.rdy, m.unwritten, m.rdy
                ));
            }
        }
        let owed_as: HashMap<MessageId, Owes> = self
            .consumers
            .iter()
            .filter(|c| c.channel == name)
            .flat_map(|c| c.held.iter().map(|(id, h)| (*id, h.owed)))
            .collect();
        // Each delivery owes what the admin operations since decided, by the model's account.
        if let Some((id, real)) = audit
            .owes
            .iter()
            .find(|(id, owes)| owed_as.get(id) != Some(owes))
        {
            let model = owed_as.get(id);
            self.fail(format!(
                "channel {name}: the delivery of {id:?} owes {real:?}, the model says {model:?}"
            ));
        }
        // Every owed message in exactly one place; together, all not finished. A message in
        // flight that a rewind owes again may also wait in the log.
        let waiting: BTreeSet<MessageId> = audit.waiting.iter().copied().collect();
        let mut places: BTreeMap<MessageId, u32> = BTreeMap::new();
        let in_flight = audit
            .in_flight
            .iter()
            .map(|f| &f.0)
            .filter(|id| !(owed_as.get(id) == Some(&Owes::Replayed) && waiting.contains(id)));
        for id in audit
            .waiting
            .iter()
            .chain(&audit.requeued)
            .chain(&audit.deferred)
            .chain(in_flight)
        {
            *places.entry(*id).or_default() += 1;
        }
        if let Some((id, n)) = places.iter().find(|(_, n)| **n > 1) {
            self.fail(format!("channel {name}: {id:?} is in {n} places"));
        }
        let sim = &self.channels[name];
        let owed: BTreeSet<MessageId> = places.keys().copied().collect();
        let missing: Vec<&MessageId> = sim
            .expected
            .iter()
            .filter(|id| !owed.contains(id))
            .take(5)
            .collect();
        if !missing.is_empty() {
            self.fail(format!("channel {name}: lost {missing:?}"));
        }
        // What a rewind owes again waits, or is in flight from before it.
        let queued: BTreeSet<&MessageId> = audit
            .waiting
            .iter()
            .chain(&audit.requeued)
            .chain(&audit.deferred)
            .collect();
        let unowed: Vec<&MessageId> = sim
            .replay
            .iter()
            .filter(|id| !queued.contains(id) && owed_as.get(id) != Some(&Owes::Replayed))
            .take(5)
            .collect();
        if !unowed.is_empty() {
            self.fail(format!(
                "channel {name}: a rewind owes {unowed:?} again, but the channel does not"
            ));
        }
        if let Some(id) = owed.iter().find(|id| sim.finished.contains(id)) {
            self.fail(format!("channel {name}: {id:?} finished and still owed"));
        }
        if let Some(id) = owed.iter().find(|id| !sim.expected.contains(id)) {
            self.fail(format!("channel {name}: {id:?} owed but never given to it"));
        }
        let floor = ch.borrow().floor();
        if floor < sim.floor {
            self.fail(format!(
                "channel {name}: floor went back {} -> {floor}",
                sim.floor
            ));
        }
        self.sim_channel(name).floor = floor;
    }

    /// Everyone leaves; one consumer per channel takes and finishes everything, as time
    /// passes: every channel ends with everything it got finished, each once, and
    /// everything a rewind owed delivered again.
    pub(super) fn drain(&mut self) {
        while !self.consumers.is_empty() {
            self.leave(0);
        }
        let names: Vec<String> = self.channels.keys().cloned().collect();
        for name in &names {
            let ch = self.channel(name);
            ch.borrow_mut().paused = false;
            let key = ConsumerKey {
                shard: 0,
                conn: self.next_conn,
            };
            self.next_conn += 1;
            let spec = ConsumerSpec {
                key,
                msg_timeout: Duration::from_secs(60),
                info: Arc::new(ClientInfo::default()),
                output_window: u64::MAX,
            };
            if let Err(e) = ch.borrow_mut().add_consumer(spec, 0) {
                self.fail(e);
            }
            ch.borrow_mut().set_rdy(key, 1_000_000);
            self.consumers.push(SimConsumer {
                key,
                channel: name.clone(),
                timeout: Duration::from_secs(60),
                window: u64::MAX,
                rdy: 1_000_000,
                closed: false,
                unwritten: 0,
                held: BTreeMap::new(),
            });
        }
        for _ in 0..100 {
            for name in &names {
                let ch = self.channel(name);
                self.dispatch(&ch);
            }
            for i in 0..self.consumers.len() {
                let held: Vec<(MessageId, Held)> = std::mem::take(&mut self.consumers[i].held)
                    .into_iter()
                    .collect();
                let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
                let ch = self.channel(&name);
                for (id, h) in held {
                    if let Err(e) = ch.borrow_mut().finish(key, id) {
                        self.fail(format!("drain: FIN refused: {e:?}"));
                    }
                    self.delivery_ended(&name, id, &h, End::Fin);
                }
            }
            self.check();
            let done = self
                .channels
                .values()
                .all(|c| c.replay.is_empty() && c.expected.is_empty());
            if done {
                return;
            }
            // Deferred messages come due.
            self.advance_by(Duration::from_secs(1));
        }
        for (name, c) in &self.channels {
            let left: Vec<&MessageId> = c.expected.iter().chain(&c.replay).take(5).collect();
            if !left.is_empty() {
                self.fail(format!(
                    "channel {name}: never delivered after draining: {left:?}"
                ));
            }
        }
    }
}

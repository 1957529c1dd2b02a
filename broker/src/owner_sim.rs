//! A seeded, deterministic simulation of a topic's owner: random publishes, subscribes, RDY,
//! FIN, REQ (with and without delay), TOUCH, written-byte reports, CLS, disconnects, channel
//! creation, deletion, pause and empty, and virtual time that fires the timers, all driven
//! straight through [`Topic`] and [`Channel`] as the owner shard drives them, with no I/O.
//!
//! A model of what every consumer holds is kept beside the real state, and after every step
//! the simulation checks the invariants `channel/mod.rs` states:
//! - every message a channel got is in exactly one place: waiting in the log, requeued,
//!   deferred, in flight to exactly one consumer, finished (or dropped by an empty);
//! - a consumer is given a message only while `in_flight < RDY`, it has not sent CLS, and its
//!   unwritten frames are under its window; its `in_flight` equals what it holds;
//! - attempts count the deliveries of a message; a finished message is never delivered again;
//! - an in-flight message times out exactly when its deadline (delivery or TOUCH + timeout,
//!   at most delivery + max-msg-timeout) has passed, and not before;
//! - nothing is lost on requeue, timeout or disconnect: at the end every channel's messages
//!   are all finished once consumers take everything.
//!
//! Each run is reproducible from its seed; a failure names the seed and the step. `SIM_SEED`
//! and `SIM_STEPS` in the environment run one chosen seed.

use crate::channel::{ClientInfo, ConsumerKey, ConsumerSpec, Deliveries, TimerQueue};
use crate::storage::log::TopicLog;
use crate::timer::TimerKind;
use crate::topic::{ChannelRef, Topic};
use bytes::Bytes;
use protocol::{Message, MessageId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAX_MSG_TIMEOUT: Duration = Duration::from_secs(15);
const SEEDS: u64 = 20;
const STEPS: usize = 10_000;

/// xorshift64*: a small generator whose sequence depends on the seed alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }
}

/// A message a consumer holds, as the model sees it.
#[derive(Debug, Clone)]
struct Held {
    attempts: u16,
    delivered_at: Instant,
    deadline: Instant,
}

/// One consumer connection, as the model sees it.
#[derive(Debug)]
struct SimConsumer {
    key: ConsumerKey,
    channel: String,
    timeout: Duration,
    window: u64,
    rdy: u64,
    closed: bool,
    unwritten: u64,
    held: BTreeMap<MessageId, Held>,
}

/// One channel, as the model sees it.
#[derive(Debug, Default)]
struct SimChannel {
    /// Every message the channel got and did not drop.
    expected: BTreeSet<MessageId>,
    finished: BTreeSet<MessageId>,
    /// Deliveries of each message so far.
    attempts: HashMap<MessageId, u16>,
    floor: u64,
}

struct Sim {
    seed: u64,
    step: usize,
    rng: Rng,
    now: Instant,
    timers: TimerQueue,
    topic: Topic,
    channels: BTreeMap<String, SimChannel>,
    consumers: Vec<SimConsumer>,
    next_conn: u64,
    bodies: HashMap<MessageId, usize>,
    published: u64,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        // A small memory queue makes requeued messages wait behind the log's; a large one
        // lets them go first.
        let mem_queue_size = [1, 10, 10_000][rng.below(3) as usize];
        let log = TopicLog::in_memory("sim", u64::MAX);
        Sim {
            seed,
            step: 0,
            rng,
            now: Instant::now(),
            timers: TimerQueue::default(),
            topic: Topic::new("sim", log, mem_queue_size, 0),
            channels: BTreeMap::new(),
            consumers: Vec::new(),
            next_conn: 1,
            bodies: HashMap::new(),
            published: 0,
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "owner simulation, seed {} (SIM_SEED={} to run it alone), step {}: {what}",
            self.seed, self.seed, self.step
        )
    }

    fn channel(&self, name: &str) -> ChannelRef {
        match self.topic.channel(name) {
            Some(c) => c,
            None => self.fail(format!("channel {name} missing")),
        }
    }

    fn run(&mut self, steps: usize) {
        self.create_channel();
        for step in 0..steps {
            self.step = step;
            self.random_step();
            self.check();
        }
        self.step = steps;
        self.drain();
    }

    fn random_step(&mut self) {
        match self.rng.below(100) {
            0..=19 => self.publish(),
            20..=24 => self.subscribe(),
            25..=34 => self.rdy(),
            35..=54 => self.fin(),
            55..=61 => self.req(),
            62..=65 => self.touch(),
            66..=73 => self.written(),
            74..=75 => self.cls(),
            76..=78 => self.disconnect(),
            79..=90 => self.advance(),
            91 => self.create_channel(),
            92 => self.delete_channel(),
            93 => self.empty_channel(),
            94..=95 => self.pause_channel(),
            _ => self.wrong_fin(),
        }
    }

    // ---- operations ---------------------------------------------------------------------

    fn publish(&mut self) {
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
        let (_, touched) = self.topic.publish(msgs, 0);
        for ch in self.channels.values_mut() {
            ch.expected.extend(ids.iter().copied());
        }
        for ch in touched {
            self.dispatch(&ch);
        }
    }

    fn subscribe(&mut self) {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        let Some(name) = self.rng.pick(&names).cloned() else {
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

    fn rdy(&mut self) {
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

    fn fin(&mut self) {
        let Some((i, id)) = self.some_held() else {
            return;
        };
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        let ch = self.channel(&name);
        if let Err(e) = ch.borrow_mut().finish(key, id) {
            self.fail(format!("FIN of a held message refused: {e:?}"));
        }
        self.consumers[i].held.remove(&id);
        let sim = self.channels.get_mut(&name);
        if let Some(sim) = sim {
            if !sim.finished.insert(id) {
                self.fail(format!("{id:?} finished twice"));
            }
        }
        self.dispatch(&ch);
    }

    /// FIN, REQ or TOUCH of a message the consumer does not hold: refused, nothing changes.
    fn wrong_fin(&mut self) {
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

    fn req(&mut self) {
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
        self.consumers[i].held.remove(&id);
        self.dispatch(&ch);
    }

    fn touch(&mut self) {
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

    fn written(&mut self) {
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

    fn cls(&mut self) {
        let Some(i) = self.some_consumer() else {
            return;
        };
        let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
        self.channel(&name).borrow_mut().close_consumer(key);
        self.consumers[i].closed = true;
        self.consumers[i].rdy = 0;
    }

    fn disconnect(&mut self) {
        let Some(i) = self.some_consumer() else {
            return;
        };
        let c = self.consumers.remove(i);
        let ch = self.channel(&c.channel);
        ch.borrow_mut().remove_consumer(c.key);
        self.dispatch(&ch);
    }

    fn advance(&mut self) {
        let step = Duration::from_millis(self.rng.below(2_000));
        self.advance_by(step);
    }

    fn advance_by(&mut self, step: Duration) {
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

    /// Drops from the model what the channel timed out, checking each was due.
    fn reconcile_timeouts(&mut self, ch: &ChannelRef) {
        let name = ch.borrow().name.to_string();
        let audit = match ch.borrow().audit(&self.topic.log.borrow()) {
            Ok(a) => a,
            Err(e) => self.fail(e),
        };
        let live: BTreeSet<MessageId> = audit.in_flight.iter().map(|f| f.0).collect();
        let now = self.now;
        let mut early = None;
        for c in self.consumers.iter_mut().filter(|c| c.channel == name) {
            c.held.retain(|id, h| {
                if live.contains(id) {
                    return true;
                }
                if h.deadline > now {
                    early = Some((*id, h.deadline - now));
                }
                false
            });
        }
        if let Some((id, left)) = early {
            self.fail(format!("{id:?} timed out {left:?} before its deadline"));
        }
    }

    fn create_channel(&mut self) {
        if self.channels.len() >= 4 {
            return;
        }
        let name = format!("c{}", self.rng.below(6));
        let (ch, created) = self.topic.channel_or_create(&name);
        if !created {
            return;
        }
        let audit = match ch.borrow().audit(&self.topic.log.borrow()) {
            Ok(a) => a,
            Err(e) => self.fail(e),
        };
        // A channel starts with what the log shows it (all of it for the topic's first).
        let sim = SimChannel {
            expected: audit.waiting.iter().copied().collect(),
            floor: ch.borrow().floor(),
            ..SimChannel::default()
        };
        self.channels.insert(name, sim);
    }

    fn delete_channel(&mut self) {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        let Some(name) = self.rng.pick(&names).cloned() else {
            return;
        };
        if self.topic.remove_channel(&name).is_none() {
            self.fail(format!("delete of {name}: no such channel"));
        }
        self.channels.remove(&name);
        self.consumers.retain(|c| c.channel != name);
    }

    fn empty_channel(&mut self) {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        let Some(name) = self.rng.pick(&names).cloned() else {
            return;
        };
        let ch = self.channel(&name);
        let audit = match ch.borrow().audit(&self.topic.log.borrow()) {
            Ok(a) => a,
            Err(e) => self.fail(e),
        };
        ch.borrow_mut().empty();
        if let Some(sim) = self.channels.get_mut(&name) {
            for id in audit
                .waiting
                .iter()
                .chain(&audit.requeued)
                .chain(&audit.deferred)
            {
                sim.expected.remove(id);
            }
            // The floor may drop below nothing owed: it restarts from here.
            sim.floor = ch.borrow().floor();
        }
    }

    fn pause_channel(&mut self) {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        let Some(name) = self.rng.pick(&names).cloned() else {
            return;
        };
        let ch = self.channel(&name);
        let paused = !ch.borrow().paused;
        ch.borrow_mut().paused = paused;
        if !paused {
            self.dispatch(&ch);
        }
    }

    // ---- deliveries and checks ----------------------------------------------------------

    fn dispatch(&mut self, ch: &ChannelRef) {
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
            if d.msg.attempts != *n {
                let got = d.msg.attempts;
                let want = *n;
                self.fail(format!(
                    "{:?} delivered with attempts {got}, its delivery #{want}",
                    d.msg.id
                ));
            }
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
                },
            );
        }
    }

    fn check(&mut self) {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        for name in names {
            let ch = self.channel(&name);
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
            // Every owed message in exactly one place; together, all not finished.
            let mut places: BTreeMap<MessageId, u32> = BTreeMap::new();
            for id in audit
                .waiting
                .iter()
                .chain(&audit.requeued)
                .chain(&audit.deferred)
                .chain(audit.in_flight.iter().map(|f| &f.0))
            {
                *places.entry(*id).or_default() += 1;
            }
            if let Some((id, n)) = places.iter().find(|(_, n)| **n > 1) {
                self.fail(format!("channel {name}: {id:?} is in {n} places"));
            }
            let sim = &self.channels[&name];
            let owed: BTreeSet<MessageId> = places.keys().copied().collect();
            let missing: Vec<&MessageId> = sim
                .expected
                .iter()
                .filter(|id| !sim.finished.contains(id) && !owed.contains(id))
                .take(5)
                .collect();
            if !missing.is_empty() {
                self.fail(format!("channel {name}: lost {missing:?}"));
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
            if let Some(sim) = self.channels.get_mut(&name) {
                sim.floor = floor;
            }
        }
    }

    /// Everyone leaves; one consumer per channel takes and finishes everything, as time
    /// passes: every channel ends with everything it got finished, each once.
    fn drain(&mut self) {
        for c in std::mem::take(&mut self.consumers) {
            let ch = self.channel(&c.channel);
            ch.borrow_mut().remove_consumer(c.key);
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
                let held: Vec<MessageId> = self.consumers[i].held.keys().copied().collect();
                let (key, name) = (self.consumers[i].key, self.consumers[i].channel.clone());
                let ch = self.channel(&name);
                for id in held {
                    if let Err(e) = ch.borrow_mut().finish(key, id) {
                        self.fail(format!("drain: FIN refused: {e:?}"));
                    }
                    self.consumers[i].held.remove(&id);
                    if let Some(sim) = self.channels.get_mut(&name) {
                        sim.finished.insert(id);
                    }
                }
            }
            self.check();
            let done = self
                .channels
                .values()
                .all(|c| c.expected.iter().all(|id| c.finished.contains(id)));
            if done {
                return;
            }
            // Deferred messages come due.
            self.advance_by(Duration::from_secs(1));
        }
        for (name, c) in &self.channels {
            let left: Vec<&MessageId> = c
                .expected
                .iter()
                .filter(|id| !c.finished.contains(id))
                .take(5)
                .collect();
            if !left.is_empty() {
                self.fail(format!(
                    "channel {name}: never delivered after draining: {left:?}"
                ));
            }
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn owner_simulation_keeps_the_channel_invariants() {
    let steps = env_u64("SIM_STEPS").map_or(STEPS, |s| s as usize);
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(seed) => vec![seed],
        None => (1..=SEEDS).collect(),
    };
    for seed in seeds {
        let mut sim = Sim::new(seed);
        sim.run(steps);
        assert!(sim.published > 0, "seed {seed} published nothing");
    }
}

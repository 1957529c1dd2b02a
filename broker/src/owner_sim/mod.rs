//! A seeded, deterministic simulation of a topic's owner: random publishes, subscribes, RDY,
//! FIN, REQ (with and without delay), TOUCH, written-byte reports, CLS, disconnects, and the
//! HTTP API's channel operations (create, create in the past, delete, pause, empty, rewind,
//! max attempts), with virtual time that fires the timers, all driven straight through
//! [`Topic`] and [`Channel`](crate::channel::Channel) as the owner shard drives them, with no
//! I/O.
//!
//! The owner applies a consumer's FIN, REQ or TOUCH when its mail arrives, which may be after
//! an admin operation that came later was answered; the simulation interleaves them in any
//! order, so a FIN of a message delivered before a rewind or an empty, a REQ that lands
//! after a new max attempts, or a timeout that fires after an empty are all steps it takes.
//!
//! A model of what every consumer holds and what every channel owes is kept beside the real
//! state, and after every step the simulation checks the invariants `channel/mod.rs` states:
//! - every message a channel got is in exactly one place: waiting in the log, requeued,
//!   deferred, in flight to exactly one consumer, finished (or dropped by an empty, a rewind
//!   forward or max attempts); a message in flight that a rewind made the log owe again may
//!   also wait in the log;
//! - a consumer is given a message only while `in_flight < RDY`, it has not sent CLS, and its
//!   unwritten frames are under its window; its `in_flight` equals what it holds;
//! - attempts count the deliveries of a message since it was last replayed; a finished
//!   message is never delivered again unless a rewind owes it again;
//! - an in-flight message times out exactly when its deadline (delivery or TOUCH + timeout,
//!   at most delivery + max-msg-timeout) has passed, and not before;
//! - nothing is lost on requeue, timeout or disconnect: at the end every channel's messages
//!   are all finished once consumers take everything;
//! - an admin operation answered takes effect, whatever reaches the owner after it: after a
//!   rewind (or a creation) at position p, every message from p on is delivered again (in
//!   flight meanwhile or not) unless a later operation dropped it; after an empty, nothing it
//!   dropped (what was waiting, and what was in flight when a REQ, timeout or disconnect
//!   ends it) is delivered again; after max attempts N is set, no delivery has attempts over
//!   N, and a message given back after its Nth delivery is set aside.
//!
//! Each run is reproducible from its seed; a failure names the seed and the step. `SIM_SEED`
//! and `SIM_STEPS` in the environment run one chosen seed.

mod admin_steps;
mod checks;
mod client_ops;

use crate::channel::{ConsumerKey, Owes, TimerQueue};
use crate::storage::log::TopicLog;
use crate::topic::{ChannelRef, Topic};
use protocol::MessageId;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

const MAX_MSG_TIMEOUT: Duration = Duration::from_secs(15);
const SEEDS: u64 = 20;
const STEPS: usize = 10_000;
/// How many of the last steps a failure names.
const RECENT: usize = 8;

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
    /// What its delivery owes when it ends, by the model's own account of the admin
    /// operations since.
    owed: Owes,
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
    /// What the channel owes: every message it got and did not finish or drop.
    expected: BTreeSet<MessageId>,
    /// What it finished (and no rewind owes again since).
    finished: BTreeSet<MessageId>,
    /// The attempts of each message's last delivery (0: its next delivery is its first, as
    /// after a replay).
    attempts: HashMap<MessageId, u16>,
    /// What a rewind or a creation in the past owes: delivered again (after the operation)
    /// unless a later operation drops it.
    replay: BTreeSet<MessageId>,
    /// The max attempts in force (0: none).
    max_attempts: u16,
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
    /// Every message of the log, by seq.
    log_ids: Vec<MessageId>,
    seqs: HashMap<MessageId, u64>,
    published: u64,
    /// The names of the last [`RECENT`] steps, for a failure's message.
    recent: VecDeque<&'static str>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        // A small memory queue makes requeued messages wait behind the log's; a large one
        // lets them go first.
        let mem_queue_size = [1, 10, 10_000][rng.below(3) as usize];
        let log = TopicLog::in_memory("sim", u64::MAX);
        let mut topic = Topic::new("sim", log, mem_queue_size, 0);
        // `--max-attempts`: the default of every channel without its own.
        topic.max_attempts = [0, 0, 3][rng.below(3) as usize];
        Sim {
            seed,
            step: 0,
            rng,
            now: Instant::now(),
            timers: TimerQueue::default(),
            topic,
            channels: BTreeMap::new(),
            consumers: Vec::new(),
            next_conn: 1,
            bodies: HashMap::new(),
            log_ids: Vec::new(),
            seqs: HashMap::new(),
            published: 0,
            recent: VecDeque::new(),
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "owner simulation, seed {} (SIM_SEED={} to run it alone), step {}: {what} \
             (the last steps: {:?})",
            self.seed, self.seed, self.step, self.recent
        )
    }

    fn channel(&self, name: &str) -> ChannelRef {
        match self.topic.channel(name) {
            Some(c) => c,
            None => self.fail(format!("channel {name} missing")),
        }
    }

    /// The model of channel `name`.
    fn sim_channel(&mut self, name: &str) -> &mut SimChannel {
        if !self.channels.contains_key(name) {
            self.fail(format!("channel {name} missing from the model"));
        }
        self.channels.entry(name.to_string()).or_default()
    }

    fn seq_of(&self, id: MessageId) -> u64 {
        match self.seqs.get(&id) {
            Some(&s) => s,
            None => self.fail(format!("{id:?} was never published")),
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
        type Op = (&'static str, fn(&mut Sim));
        let (name, op): Op = match self.rng.below(100) {
            0..=18 => ("publish", Sim::publish),
            19..=23 => ("subscribe", Sim::subscribe),
            24..=33 => ("rdy", Sim::rdy),
            34..=52 => ("fin", Sim::fin),
            53..=59 => ("req", Sim::req),
            60..=63 => ("touch", Sim::touch),
            64..=71 => ("written", Sim::written),
            72..=73 => ("cls", Sim::cls),
            74..=76 => ("disconnect", Sim::disconnect),
            77..=87 => ("advance", Sim::advance),
            88 => ("create_channel", Sim::create_channel),
            89 => ("delete_channel", Sim::delete_channel),
            90 => ("empty_channel", Sim::empty_channel),
            91..=92 => ("pause_channel", Sim::pause_channel),
            93..=95 => ("rewind_channel", Sim::rewind_channel),
            96 => ("create_channel_from", Sim::create_channel_from),
            97..=98 => ("configure_channel", Sim::configure_channel),
            _ => ("wrong_fin", Sim::wrong_fin),
        };
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(name);
        op(self);
    }

    /// A channel of the model, picked at random.
    fn some_channel(&mut self) -> Option<String> {
        let names: Vec<String> = self.channels.keys().cloned().collect();
        self.rng.pick(&names).cloned()
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

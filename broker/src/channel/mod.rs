//! A channel of a topic, as held by the topic's owner shard: its cursor into the topic's log,
//! the messages it took from the log and still owes (requeued, in flight, deferred), its
//! consumers and their RDY counts, and the delivery decision.
//!
//! Invariants:
//! - Every message of the log from the channel's creation on, but for its `foreign` stretches
//!   (other channels' own messages, from an nsqd import), is, for this channel, either
//!   at or after `cursor` (not taken yet), or in exactly one of `requeued`, `in_flight`,
//!   `deferred`, or finished: every message is delivered or pending exactly once. After a
//!   rewind ([`Channel::rewind`]) a message in flight may also lie at or after `cursor`: the
//!   log owes it and its delivery ends without giving it back; one the cursor passes while
//!   it is in flight is not handed out again then (`rewound_until`) but comes back fresh
//!   when that delivery ends (`owes.rs`), so it is owed once.
//! - An admin operation takes effect whatever reaches the owner after it: what it changes for
//!   a delivery in flight (a rewind owes the message again, an empty drops it) is marked on
//!   the delivery ([`Owes`]) and followed when its FIN, REQ, timeout or departure comes.
//! - Nothing is lost on requeue, timeout or disconnect: REQ, a timed-out delivery and a
//!   deferral come due go back to `requeued` (or, REQ with a delay, to `deferred`); a
//!   consumer's disconnect puts everything it held back at the front of `requeued`; CLS stops
//!   deliveries but FIN/REQ/TOUCH still count. Messages leave only by FIN, by an explicit
//!   empty ([`Channel::empty`]; one in flight when its delivery ends), by reaching max
//!   attempts (`attempt_limit.rs`), by a consumer's sampling (`sample_rate`: the channel skips
//!   the message, as nsqd's does), or, on an `#ephemeral` channel, beyond its memory queue
//!   (`mem_queue_size`; it has no disk, as in nsqd).
//! - `floor()` (the lowest seq still owed) only grows, except by a rewind, which moves it
//!   down to a seq the log still holds; segments below every channel's floor can be deleted.
//! - A consumer's `in_flight` equals the number of `in_flight` entries it owns, and the channel
//!   delivers to a consumer only while `in_flight < rdy` (so each delivery leaves
//!   `in_flight <= rdy`; a lowered RDY stops deliveries until FINs bring it back under), it has
//!   not sent CLS, and the frames encoded for it that its connection has not reported written
//!   (`unwritten`) are fewer bytes than its window (`ConsumerSpec::output_window`): a client
//!   that stops reading holds at most one window (plus one message) of frames in the broker,
//!   whatever its RDY.
//! - Deliveries go to ready consumers in turn (round robin), one message at a time, so a
//!   channel's consumers share it fairly.
//!
//! Where things happen:
//! - `mod.rs` (this file): the [`Channel`] and its state machine: taking messages from the
//!   log or from `requeued` and handing them out ([`Channel::dispatch`]), FIN
//!   ([`Channel::finish`]), REQ ([`Channel::requeue`]), and `requeue_now`, which puts a message
//!   given back (REQ, timeout, deferral come due) at the tail of the queue;
//! - `timeouts.rs`: deadlines and deferrals. **A timeout requeues in
//!   [`Channel::on_timer`]** (`TimerKind::InFlight`): the shard's timer heap
//!   ([`crate::timer`], one entry per channel and kind) fires `Shard::on_timers`, which calls
//!   `on_timer`; every in-flight message past its deadline leaves `in_flight`, its consumer's
//!   count drops, `timeout_count` grows, and `requeue_now` puts it at the tail. Deferred
//!   messages (DPUB, REQ with a delay) come due in the same function (`TimerKind::Deferred`).
//!   TOUCH ([`Channel::touch`]) moves a deadline;
//! - `consumer_table.rs`: the consumer table: subscribe, RDY, CLS, written-byte reports (the output
//!   window), the round-robin turn, and a disconnect ([`Channel::remove_consumer`]), which
//!   returns the consumer's in-flight messages at once;
//! - `deliveries.rs`: [`Deliveries`], the per-consumer buffers of encoded message frames a
//!   dispatch fills;
//! - `detach.rs`: a body held in flight for 250 ms gets its own allocation, so a consumer
//!   holding messages does not keep the buffers they arrived in alive;
//! - `figures.rs`: what the channel counts for `/stats` ([`Figures`]) and its floor for the
//!   flusher;
//! - `reposition.rs`: a rewind to another position of the log, and the position for /stats;
//! - `standby.rs`: a replicated topic's channel position, as the leader sends it and a
//!   follower takes it (finished stretches it passes over when its replica leads);
//! - `owes.rs`: what a delivery in flight owes when it ends, as a rewind or an empty since
//!   its delivery decided;
//! - `attempt_limit.rs`: max attempts: a message given back (REQ, timeout) whose next delivery
//!   would exceed the limit, or one waiting when a lower limit is set, is set aside for the
//!   owner, who publishes it to the dead-letter topic or drops it (the invariants above count
//!   it as finished);
//! - `persist.rs`: the channel's metadata (`meta.json`): what it saves and restores;
//! - `audit.rs` (tests): where every owed message is, for the owner simulation
//!   (`crate::owner_sim`), which checks the invariants above after every step.
//!
//! Nothing here does I/O: operations encode frames into [`Deliveries`], one buffer per consumer,
//! which the shard routes to connections (local, or through the mailbox of the consumer's shard).

mod attempt_limit;
#[cfg(test)]
mod audit;
mod consumer_table;
mod deliveries;
mod detach;
mod figures;
mod owes;
mod persist;
mod reposition;
mod standby;
mod timeouts;

pub use attempt_limit::DeadLetters;
pub use consumer_table::{ClientAuth, ClientInfo, Consumer, ConsumerKey, ConsumerSpec, TlsInfo};
pub use deliveries::{Batch, Deliveries};
pub use figures::Figures;
pub use owes::Owes;

use crate::deadlines::{DeadlineQueue, Slot};
use crate::id_table::IdTable;
use crate::ids::IdHash;
use crate::latency::E2eSamples;
use crate::storage::log::{DiskHint, Read, TopicLog};
use crate::storage::segment::Stored;
use crate::timer::TimerKind;
use protocol::MessageId;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shard's timer queue ([`crate::timer::TimerQueue`]) for its channels.
pub type TimerQueue = crate::timer::TimerQueue<RefCell<Channel>>;
/// A due entry of [`TimerQueue`]: the channel and kind to fire.
pub type TimerEntry = crate::timer::TimerEntry<RefCell<Channel>>;

struct InFlight {
    msg: Stored,
    consumer: ConsumerKey,
    deadline: Instant,
    /// Where `deadline` sits in `in_flight_order`.
    slot: Slot,
    delivered_at: Instant,
    /// Its body has its own allocation (`detach.rs`).
    detached: bool,
    /// What it owes when it ends, as admin operations since its delivery decided (`owes.rs`).
    owes: Owes,
}

struct Deferred {
    msg: Stored,
    at: Instant,
}

/// Why FIN, REQ or TOUCH failed; the text is nsqd's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpError {
    NotInFlight,
    NotOwner,
}

impl OpError {
    pub fn text(self) -> &'static str {
        match self {
            OpError::NotInFlight => "ID not in flight",
            OpError::NotOwner => "client does not own message",
        }
    }
}

/// A message given back to the channel: delivered again once the channel's cursor has
/// reached `after` (what was waiting ahead of it was taken), or sooner when the log has
/// nothing to give. `after` 0: at once (a closed consumer's messages, a restart's).
#[derive(Debug)]
struct Requeued {
    after: u64,
    msg: Stored,
}

/// One channel; the owner shard holds it as `Rc<RefCell<Channel>>` (`crate::topic::ChannelRef`).
pub struct Channel {
    pub topic: Arc<str>,
    pub name: Arc<str>,
    pub ephemeral: bool,
    /// Listed in the shard's `pending_dispatch` (see `Shard::dispatch_soon`).
    pub dispatch_queued: bool,
    pub paused: bool,
    /// A replicated topic's channel on a replica that does not lead: it hands out nothing (not
    /// even what it holds requeued); its leader's channel delivers.
    pub standby: bool,
    /// Next seq to take from the topic's log.
    cursor: u64,
    hint: DiskHint,
    /// The topic's visible end: the channel reads the log below it.
    pub visible_end: u64,
    /// A stretch of the log to pass over (the topic was emptied while paused).
    skip: Option<(u64, u64)>,
    /// Stretches `[from, to)` of the log that are other channels' own messages (an nsqd
    /// import), in order, never overlapping; the cursor passes over them. Kept once passed
    /// (a rewind may come back before one); `next_foreign` is the first not passed yet.
    foreign: Vec<(u64, u64)>,
    next_foreign: usize,
    /// Stretches `[from, to)` finished on the topic's old leader, in order (a replicated
    /// topic's follower took its position, `standby.rs`); dropped once passed.
    finished_elsewhere: VecDeque<(u64, u64)>,
    /// Seqs below this may be in flight and read again from the log after a rewind: such a
    /// message is not handed out twice at once (see `reposition.rs`). 0 when never rewound.
    rewound_until: u64,
    /// Messages given back (REQ, timeouts, deferrals come due, a consumer gone), in order,
    /// each with the log position it waits for (see [`Requeued`]).
    requeued: VecDeque<Requeued>,
    /// In-flight deadlines and deferred due times, in order; FIN/REQ remove from them, so
    /// they hold only what is live. The shard's timer heap holds one entry per kind for the
    /// earliest of each (`armed_*`).
    in_flight_order: DeadlineQueue,
    deferred_order: BTreeSet<(Instant, MessageId)>,
    armed_in_flight: Option<Instant>,
    armed_deferred: Option<Instant>,
    /// When the detach timer fires, if armed (`detach.rs`).
    armed_detach: Option<Instant>,
    in_flight: IdTable<InFlight>,
    deferred: HashMap<MessageId, Deferred, IdHash>,
    consumers: Vec<Consumer>,
    next_consumer: usize,
    /// Ephemeral channels drop messages beyond this many ready ones (they never touch disk).
    mem_queue_size: u64,
    rng: u64,
    me: Weak<RefCell<Channel>>,
    pub message_count: u64,
    pub requeue_count: u64,
    pub timeout_count: u64,
    /// End-to-end latency of finished messages, for /stats.
    e2e: E2eSamples,
    /// Max attempts and the dead-letter topic (`attempt_limit.rs`).
    dead: DeadLetters,
}

impl Channel {
    pub fn new(
        topic: Arc<str>,
        name: &str,
        mem_queue_size: u64,
        cursor: u64,
        visible_end: u64,
    ) -> Rc<RefCell<Channel>> {
        Rc::new_cyclic(|me| {
            RefCell::new(Channel {
                topic,
                ephemeral: protocol::names::is_ephemeral(name),
                dispatch_queued: false,
                name: Arc::from(name),
                paused: false,
                standby: false,
                cursor,
                hint: DiskHint::default(),
                visible_end,
                skip: None,
                foreign: Vec::new(),
                next_foreign: 0,
                finished_elsewhere: VecDeque::new(),
                rewound_until: 0,
                requeued: VecDeque::new(),
                in_flight_order: DeadlineQueue::default(),
                deferred_order: BTreeSet::new(),
                armed_in_flight: None,
                armed_deferred: None,
                armed_detach: None,
                in_flight: IdTable::default(),
                deferred: HashMap::default(),
                consumers: Vec::new(),
                next_consumer: 0,
                mem_queue_size,
                rng: 0x9E37_79B9_7F4A_7C15 ^ (me.as_ptr() as u64),
                me: me.clone(),
                message_count: 0,
                requeue_count: 0,
                timeout_count: 0,
                e2e: Default::default(),
                dead: DeadLetters::default(),
            })
        })
    }

    /// Puts `msg` back at the tail of the queue, as nsqd does for REQ, a timeout or a deferral
    /// that came due ("equivalent to having just published it"): behind what the channel
    /// holds in memory, at most --mem-queue-size messages of its backlog (nsqd's memory queue;
    /// its backlog on disk is read alongside that queue, not ahead of it).
    fn requeue_now(&mut self, msg: Stored) {
        if self.ephemeral && self.requeued.len() as u64 >= self.mem_queue_size {
            tracing::debug!(topic = %self.topic, channel = %self.name, "ephemeral channel full; message dropped");
            return;
        }
        let after = self
            .visible_end
            .min(self.cursor.saturating_add(self.mem_queue_size));
        self.requeued.push_back(Requeued { after, msg });
    }

    /// Passes over `[from, to)` of the log (the topic was emptied while paused).
    pub fn skip_range(&mut self, from: u64, to: u64) {
        self.skip = Some(match self.skip {
            Some((f, _)) if f <= from => (f, to),
            _ => (from, to),
        });
    }

    fn take_in_flight(&mut self, key: ConsumerKey, id: MessageId) -> Result<InFlight, OpError> {
        // One lookup: remove, and put back in the rare case of another consumer's ID.
        let f = self.in_flight.remove(&id).ok_or(OpError::NotInFlight)?;
        if f.consumer != key {
            self.in_flight.insert(id, f);
            return Err(OpError::NotOwner);
        }
        self.in_flight_order.remove(f.slot, f.deadline, id);
        if let Some(c) = self.consumer_mut(key) {
            c.in_flight = c.in_flight.saturating_sub(1);
        }
        Ok(f)
    }

    pub fn finish(&mut self, key: ConsumerKey, id: MessageId) -> Result<(), OpError> {
        let done = self.take_in_flight(key, id)?;
        self.e2e.record(done.msg.msg.timestamp);
        if let Some(c) = self.consumer_mut(key) {
            c.finish_count += 1;
        }
        if let Some(copy) = self.owed_after_fin(done.owes, &done.msg) {
            self.requeue_now(copy);
        }
        Ok(())
    }

    pub fn requeue(
        &mut self,
        key: ConsumerKey,
        id: MessageId,
        delay: Duration,
        now: Instant,
        timers: &TimerQueue,
    ) -> Result<(), OpError> {
        let f = self.take_in_flight(key, id)?;
        self.requeue_count += 1;
        if let Some(c) = self.consumer_mut(key) {
            c.requeue_count += 1;
        }
        let Some(msg) = self.given_back(f.owes, f.msg) else {
            return Ok(());
        };
        if delay.is_zero() {
            self.requeue_now(msg);
        } else {
            let mut msg = msg;
            msg.detach_body();
            self.defer(msg, now + delay, timers);
        }
        Ok(())
    }

    /// Hands messages (requeued first, then the log's) to ready consumers, in turn, until one
    /// side runs out.
    pub fn dispatch(
        &mut self,
        log: &TopicLog,
        now: Instant,
        max_msg_timeout: Duration,
        timers: &TimerQueue,
        out: &mut Deliveries,
    ) {
        if self.paused || self.standby {
            return;
        }
        // Wall-clock time, read only if a deferred (DPUB) record comes up.
        let mut now_ns = None;
        while let Some(ci) = self.next_ready_consumer() {
            // A requeued message once what was ahead of it has been taken (or when the log
            // has nothing to give right now); the log's messages before that.
            let next = if self
                .requeued
                .front()
                .is_some_and(|r| r.after <= self.cursor)
            {
                self.requeued.pop_front().map(|r| r.msg)
            } else {
                match self.take_from_log(log, now, &mut now_ns, timers) {
                    Some(s) => Some(s),
                    None => self.requeued.pop_front().map(|r| r.msg),
                }
            };
            let Some(mut stored) = next else {
                break;
            };
            // The turn passes only once a message was taken for this consumer: moving on
            // when there was none gave the same consumer of two every single message (each
            // dispatch's last, empty look skipped the other one).
            self.next_consumer = (ci + 1) % self.consumers.len();
            let sample_rate = self.consumers[ci].spec.info.sample_rate;
            if sample_rate > 0 && self.roll_percent() > sample_rate as u64 {
                // nsqd's sampling: this consumer's channel skips the message.
                continue;
            }
            stored.msg.attempts = stored.msg.attempts.saturating_add(1);
            // What this consumer can still take: its credit, and no more than is waiting.
            let waiting = self.requeued.len() as u64 + self.waiting_in_log() + 1;
            let c = &mut self.consumers[ci];
            let credit = c.rdy.saturating_sub(c.in_flight).min(waiting);
            c.in_flight += 1;
            c.message_count += 1;
            let key = c.spec.key;
            let timeout = c.spec.msg_timeout.min(max_msg_timeout);
            let deadline = now + timeout;
            let id = stored.msg.id;
            c.unwritten += out.push(key, &stored.msg, credit);
            out.set_last_full(!c.is_ready());
            let slot = self.in_flight_order.push(deadline, id);
            self.in_flight.insert(
                id,
                InFlight {
                    msg: stored,
                    consumer: key,
                    deadline,
                    slot,
                    delivered_at: now,
                    detached: false,
                    owes: Owes::Message,
                },
            );
        }
        self.compact_deadlines();
        self.arm(TimerKind::InFlight, timers);
        if !self.in_flight.is_empty() {
            self.arm_detach(now, timers);
        }
    }

    /// The next deliverable message at the cursor; deferred ones (DPUB) met on the way are set
    /// aside with their timers.
    fn take_from_log(
        &mut self,
        log: &TopicLog,
        now: Instant,
        now_ns: &mut Option<i64>,
        timers: &TimerQueue,
    ) -> Option<Stored> {
        loop {
            if self.cursor >= self.visible_end {
                return None;
            }
            if let Some((from, to)) = self.skip {
                if self.cursor >= to {
                    self.skip = None;
                } else if self.cursor >= from {
                    self.cursor = to;
                    self.skip = None;
                    continue;
                }
            }
            if self.next_foreign < self.foreign.len() && self.pass_foreign() {
                continue;
            }
            if !self.finished_elsewhere.is_empty() && self.pass_finished_elsewhere() {
                continue;
            }
            if self.ephemeral && self.visible_end - self.cursor > self.mem_queue_size {
                self.cursor = self.visible_end - self.mem_queue_size;
            }
            match log.read(self.cursor, self.hint) {
                Read::Msg(s, hint) => {
                    if s.seq >= self.visible_end {
                        return None;
                    }
                    self.cursor = s.seq + 1;
                    self.hint = hint;
                    if s.seq < self.rewound_until && self.in_flight.get_mut(&s.msg.id).is_some() {
                        // Rewound over while in flight: not handed out twice at once; the
                        // delivery's end gives the replay's copy back (`owes.rs`).
                        continue;
                    }
                    let now_ns = match (s.defer_until, *now_ns) {
                        (0, _) => 0,
                        (_, Some(t)) => t,
                        (_, None) => *now_ns.insert(crate::ids::now_nanos()),
                    };
                    if s.defer_until > now_ns {
                        let wait = Duration::from_nanos((s.defer_until - now_ns) as u64);
                        self.defer(s, now + wait, timers);
                        continue;
                    }
                    return Some(s);
                }
                Read::Skip(next) if next > self.cursor => self.cursor = next,
                Read::Skip(_) | Read::End | Read::Wait => return None,
            }
        }
    }

    /// Moves the cursor past a foreign stretch it stands in; true when it moved.
    fn pass_foreign(&mut self) -> bool {
        while let Some(&(from, to)) = self.foreign.get(self.next_foreign) {
            if self.cursor >= to {
                self.next_foreign += 1;
                continue;
            }
            if self.cursor >= from {
                self.cursor = to;
                self.hint = DiskHint::default();
                self.next_foreign += 1;
                return true;
            }
            break;
        }
        false
    }

    fn roll_percent(&mut self) -> u64 {
        // xorshift64: sampling needs spread, not cryptographic quality.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x % 100
    }

    /// nsqd's channel empty: drops every message waiting, and every message in flight once
    /// its delivery ends (a FIN or TOUCH of it still works; see `owes.rs`).
    pub fn empty(&mut self) {
        self.cursor = self.cursor.max(self.visible_end);
        self.requeued.clear();
        self.deferred.clear();
        self.deferred_order.clear();
        self.mark_emptied();
    }

    /// End-to-end latency samples, for /stats.
    pub(crate) fn e2e_samples(&self) -> &E2eSamples {
        &self.e2e
    }
}

#[cfg(test)]
mod channel_tests;

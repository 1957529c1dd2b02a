//! A channel of a topic, as held by the topic's owner shard: its cursor into the topic's log,
//! the messages it took from the log and still owes (requeued, in flight, deferred), its
//! consumers and their RDY counts, and the delivery decision.
//!
//! Invariants:
//! - Every message of the log from the channel's creation on is, for this channel, either
//!   at or after `cursor` (not taken yet), or in exactly one of `requeued`, `in_flight`,
//!   `deferred`, or finished.
//! - `floor()` (the lowest seq still owed) only grows; segments below every channel's floor
//!   can be deleted.
//! - A consumer's `in_flight` equals the number of `in_flight` entries it owns, and the channel
//!   delivers to a consumer only while `in_flight < rdy`, it has not sent CLS, and the frames
//!   encoded for it that its connection has not reported written (`unwritten`) are fewer
//!   bytes than its window (`ConsumerSpec::output_window`): a client that stops reading holds at most one window
//!   (plus one message) of frames in the broker, whatever its RDY.
//! - Deliveries go to ready consumers in turn (round robin), one message at a time, so a
//!   channel's consumers share it fairly.
//!
//! Nothing here does I/O: operations encode frames into [`Deliveries`], one buffer per consumer,
//! which the shard routes to connections (local, or through the mailbox of the consumer's shard).

use crate::deadlines::{DeadlineQueue, Slot};
use crate::id_table::IdTable;
use crate::ids::IdHash;
use crate::storage::log::{DiskHint, Read, TopicLog};
use crate::storage::meta::{ChannelMeta, PendingMeta};
use crate::storage::segment::Stored;
use crate::timer::{TimerKind, TimerQueue};
use bytes::BytesMut;
use protocol::{Message, MessageId};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    fn is_ready(&self) -> bool {
        !self.closing && self.in_flight < self.rdy && self.unwritten < self.spec.output_window
    }
}

/// Bounds of a consumer's new delivery buffer (see [`Deliveries::push`]).
const MIN_BATCH_RESERVE: usize = 4096;
const MAX_BATCH_RESERVE: usize = 256 * 1024;

/// What a dispatch handed out: message frames, encoded straight from the channel's own copy
/// (no clone of the body, whose shared count is an atomic), one buffer per consumer in
/// delivery order.
#[derive(Default)]
pub struct Deliveries {
    pub batches: Vec<(ConsumerKey, BytesMut)>,
    /// Every delivery in order, for the tests.
    #[cfg(test)]
    seen: Vec<Seen>,
}

impl Deliveries {
    /// Adds `msg`'s frame to `to`'s buffer. `credit` is how many more messages `to` may take
    /// (this one included, no more than are waiting): a new buffer is sized for that many
    /// frames like this one, up to `MAX_BATCH_RESERVE`, so a large delivery is not copied over
    /// and over as its buffer grows, and a small one does not take a large buffer.
    fn push(&mut self, to: ConsumerKey, msg: &Message, credit: u64) -> u64 {
        let i = match self.batches.iter().position(|(k, _)| *k == to) {
            Some(i) => i,
            None => {
                let frame = 8 + msg.encoded_len();
                let reserve = (credit as usize)
                    .saturating_mul(frame)
                    .clamp(MIN_BATCH_RESERVE, MAX_BATCH_RESERVE.max(frame));
                self.batches.push((to, BytesMut::with_capacity(reserve)));
                self.batches.len() - 1
            }
        };
        let before = self.batches[i].1.len();
        protocol::frame::write_message_frame(&mut self.batches[i].1, msg);
        let frame_len = (self.batches[i].1.len() - before) as u64;
        #[cfg(test)]
        self.seen.push(Seen {
            to,
            msg: SeenMsg {
                id: msg.id,
                attempts: msg.attempts,
            },
        });
        frame_len
    }
}

#[cfg(test)]
#[derive(Debug)]
pub struct Seen {
    pub to: ConsumerKey,
    pub msg: SeenMsg,
}

#[cfg(test)]
#[derive(Debug)]
pub struct SeenMsg {
    pub id: MessageId,
    pub attempts: u16,
}

#[cfg(test)]
impl std::ops::Deref for Deliveries {
    type Target = Vec<Seen>;
    fn deref(&self) -> &Vec<Seen> {
        &self.seen
    }
}

struct InFlight {
    msg: Stored,
    consumer: ConsumerKey,
    deadline: Instant,
    /// Where `deadline` sits in `in_flight_order`.
    slot: Slot,
    delivered_at: Instant,
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

/// A channel's counts for /stats ([`Channel::figures`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub depth: u64,
    pub backend_depth: u64,
    pub in_flight: u64,
    pub deferred: u64,
}

pub struct Channel {
    pub topic: Arc<str>,
    pub name: Arc<str>,
    pub ephemeral: bool,
    /// Listed in the shard's `pending_dispatch` (see `Shard::dispatch_soon`).
    pub dispatch_queued: bool,
    pub paused: bool,
    /// Next seq to take from the topic's log.
    cursor: u64,
    hint: DiskHint,
    /// The topic's visible end: the channel reads the log below it.
    pub visible_end: u64,
    /// A stretch of the log to pass over (the topic was emptied while paused).
    skip: Option<(u64, u64)>,
    /// Messages to deliver again before the cursor's (REQ, timeout, disconnect).
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
    e2e: crate::stats::E2eSamples,
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
                cursor,
                hint: DiskHint::default(),
                visible_end,
                skip: None,
                requeued: VecDeque::new(),
                in_flight_order: DeadlineQueue::default(),
                deferred_order: BTreeSet::new(),
                armed_in_flight: None,
                armed_deferred: None,
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
            })
        })
    }

    /// Keeps `msg` until `at`. It may wait for hours, so its body must not be a slice of a
    /// long-lived buffer: the log hands out DPUB bodies with their own allocation, and REQ
    /// detaches the body of a message it delays.
    fn defer(&mut self, msg: Stored, at: Instant, timers: &TimerQueue) {
        let id = msg.msg.id;
        if let Some(old) = self.deferred.insert(id, Deferred { msg, at }) {
            self.deferred_order.remove(&(old.at, id));
        }
        self.deferred_order.insert((at, id));
        self.arm(TimerKind::Deferred, timers);
    }

    /// Makes sure the shard's timer heap fires at this channel's earliest deadline of `kind`.
    fn arm(&mut self, kind: TimerKind, timers: &TimerQueue) {
        let (first, armed) = match kind {
            TimerKind::InFlight => (self.in_flight_order.first(), &mut self.armed_in_flight),
            TimerKind::Deferred => (
                self.deferred_order.first().map(|e| e.0),
                &mut self.armed_deferred,
            ),
        };
        if let Some(at) = first {
            if armed.is_none_or(|a| at < a) {
                *armed = Some(at);
                timers.schedule(at, self.me.clone(), kind);
            }
        }
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

    pub fn add_consumer(&mut self, spec: ConsumerSpec, max: u64) -> Result<(), String> {
        if max > 0 && self.consumers.len() as u64 >= max {
            return Err(format!(
                "consumers for {}:{} exceeds limit of {}",
                self.topic, self.name, max
            ));
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
        let mut returned: Vec<Stored> = Vec::new();
        let order = &mut self.in_flight_order;
        self.in_flight.retain(|id, f| {
            if f.consumer == key {
                order.remove(f.slot, f.deadline, *id);
                returned.push(f.msg.clone());
                false
            } else {
                true
            }
        });
        // Oldest first, ahead of newer messages: they were due first.
        returned.sort_by_key(|m| m.seq);
        for msg in returned.into_iter().rev() {
            self.requeue_count += 1;
            self.requeued.push_front(Requeued { after: 0, msg });
        }
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    pub fn consumers(&self) -> &[Consumer] {
        &self.consumers
    }

    fn consumer_mut(&mut self, key: ConsumerKey) -> Option<&mut Consumer> {
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
        if delay.is_zero() {
            self.requeue_now(f.msg);
        } else {
            let mut msg = f.msg;
            msg.detach_body();
            self.defer(msg, now + delay, timers);
        }
        Ok(())
    }

    /// TOUCH: the deadline moves to now + the consumer's timeout, but never past delivery +
    /// max-msg-timeout.
    pub fn touch(
        &mut self,
        key: ConsumerKey,
        id: MessageId,
        max_msg_timeout: Duration,
        now: Instant,
        timers: &TimerQueue,
    ) -> Result<(), OpError> {
        let timeout = self
            .consumers
            .iter()
            .find(|c| c.spec.key == key)
            .map(|c| c.spec.msg_timeout);
        let f = match self.in_flight.get_mut(&id) {
            None => return Err(OpError::NotInFlight),
            Some(f) if f.consumer != key => return Err(OpError::NotOwner),
            Some(f) => f,
        };
        let timeout = timeout.unwrap_or(max_msg_timeout);
        let deadline = (now + timeout).min(f.delivered_at + max_msg_timeout);
        self.in_flight_order.remove(f.slot, f.deadline, id);
        f.deadline = deadline;
        f.slot = self.in_flight_order.push(deadline, id);
        self.compact_deadlines();
        self.arm(TimerKind::InFlight, timers);
        Ok(())
    }

    /// The shard's timer for this channel's `kind` fired (it was armed for `at`): times out
    /// every in-flight message past its deadline, or makes every due deferred message ready,
    /// then re-arms for the next earliest. Returns true when something became deliverable.
    pub fn on_timer(
        &mut self,
        kind: TimerKind,
        at: Instant,
        now: Instant,
        timers: &TimerQueue,
    ) -> bool {
        let armed = match kind {
            TimerKind::InFlight => &mut self.armed_in_flight,
            TimerKind::Deferred => &mut self.armed_deferred,
        };
        if *armed == Some(at) {
            *armed = None;
        }
        let mut changed = false;
        match kind {
            TimerKind::InFlight => {
                while let Some((_, id)) = self.in_flight_order.pop_due(now) {
                    let Some(f) = self.in_flight.remove(&id) else {
                        continue;
                    };
                    if let Some(c) = self.consumer_mut(f.consumer) {
                        c.in_flight = c.in_flight.saturating_sub(1);
                    }
                    self.timeout_count += 1;
                    self.requeue_now(f.msg);
                    changed = true;
                }
            }
            TimerKind::Deferred => {
                while let Some(&(due, id)) = self.deferred_order.first() {
                    if due > now {
                        break;
                    }
                    self.deferred_order.pop_first();
                    if let Some(d) = self.deferred.remove(&id) {
                        self.requeue_now(d.msg);
                        changed = true;
                    }
                }
            }
        }
        self.arm(kind, timers);
        changed
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
        if self.paused {
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
            let slot = self.in_flight_order.push(deadline, id);
            self.in_flight.insert(
                id,
                InFlight {
                    msg: stored,
                    consumer: key,
                    deadline,
                    slot,
                    delivered_at: now,
                },
            );
        }
        self.compact_deadlines();
        self.arm(TimerKind::InFlight, timers);
    }

    /// Squeezes cleared entries out of the in-flight order when they outnumber live ones
    /// (cheap to call: a comparison unless there is something to do). Called after deliveries
    /// and after TOUCH, which also runs while the channel is paused.
    fn compact_deadlines(&mut self) {
        let in_flight = &mut self.in_flight;
        self.in_flight_order.compact(|id, slot| {
            if let Some(f) = in_flight.get_mut(&id) {
                f.slot = slot;
            }
        });
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

    /// The first ready consumer from the one whose turn it is (the turn does not move here).
    fn next_ready_consumer(&self) -> Option<usize> {
        let n = self.consumers.len();
        (0..n)
            .map(|step| (self.next_consumer + step) % n)
            .find(|&i| self.consumers[i].is_ready())
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

    /// Drops every message that is not in flight (nsqd's channel empty).
    pub fn empty(&mut self) {
        self.cursor = self.cursor.max(self.visible_end);
        self.requeued.clear();
        self.deferred.clear();
        self.deferred_order.clear();
    }

    /// Messages not taken yet: the log's from the cursor (deferred records among them
    /// included) plus the requeued.
    pub fn waiting(&self) -> usize {
        self.waiting_in_log() as usize + self.requeued.len()
    }

    /// The channel's figures for /stats, as nsqd defines them, at wall-clock `now_ns`.
    ///
    /// - `depth`: messages ready for a consumer (nsqd: its memory queue plus its backend):
    ///   the log's not yet taken and the requeued, less the log's deferred records (DPUB)
    ///   whose time has not come; never the in-flight or deferred ones.
    /// - `backend_depth`: the part of `depth` beyond the `--mem-queue-size` messages the
    ///   channel holds in memory (nsqd's disk queue; what a channel reads from the segment
    ///   files), all of it with `--mem-queue-size 0`; 0 for `#ephemeral` channels, which have
    ///   no backend and drop what exceeds their memory.
    /// - `deferred`: DPUB records of the log not taken yet and not due, plus what the channel
    ///   holds deferred (taken DPUBs, REQ with a delay).
    pub fn figures(&self, log: &TopicLog, now_ns: i64) -> Figures {
        let deferred_in_log = self.deferred_in_log(log, now_ns);
        let depth = (self.waiting() as u64).saturating_sub(deferred_in_log);
        let backend_depth = if self.ephemeral {
            0
        } else {
            depth.saturating_sub(self.mem_queue_size)
        };
        Figures {
            depth,
            backend_depth,
            in_flight: self.in_flight.len() as u64,
            deferred: self.deferred.len() as u64 + deferred_in_log,
        }
    }

    /// The log's records this channel has yet to take that wait for their deferral.
    fn deferred_in_log(&self, log: &TopicLog, now_ns: i64) -> u64 {
        let all = log.deferred_between(self.cursor, self.visible_end, now_ns);
        let skipped = match self.skip {
            Some((from, to)) => {
                log.deferred_between(from.max(self.cursor), to.min(self.visible_end), now_ns)
            }
            None => 0,
        };
        all - skipped.min(all)
    }

    /// Messages of the log this channel has yet to take (less a skipped stretch).
    fn waiting_in_log(&self) -> u64 {
        let waiting = self.visible_end.saturating_sub(self.cursor);
        let skipped = match self.skip {
            Some((from, to)) => to
                .min(self.visible_end)
                .saturating_sub(from.max(self.cursor)),
            None => 0,
        };
        waiting - skipped.min(waiting)
    }

    /// The lowest seq this channel may still need.
    pub fn floor(&self) -> u64 {
        self.floor_above(0)
    }

    /// [`Channel::floor`] for a caller that only needs it when it lies above `bound`: the
    /// search stops at the first owed seq at or below `bound` and returns that. The flusher
    /// asks with its log's planned end at every round, so it looks at no more than what the
    /// channel owes of the messages published since (in ID order the in-flight table starts
    /// with the oldest), not at everything the channel holds (a million deferred messages).
    pub fn floor_above(&self, bound: u64) -> u64 {
        if self.cursor <= bound {
            return self.cursor;
        }
        let owed = self
            .requeued
            .iter()
            .map(|r| r.msg.seq)
            .chain(self.in_flight.values().map(|f| f.msg.seq))
            .chain(self.deferred.values().map(|d| d.msg.seq));
        let mut floor = self.cursor;
        for seq in owed {
            if seq <= bound {
                return seq;
            }
            floor = floor.min(seq);
        }
        floor
    }

    /// What to persist. Clean: the cursor and every owed message (in flight ones as requeued,
    /// deferred ones with the delay left). Otherwise a floor to restart from.
    pub fn to_meta(&self, clean: bool, now: Instant) -> ChannelMeta {
        if !clean {
            return ChannelMeta {
                name: self.name.to_string(),
                paused: self.paused,
                cursor: self.floor(),
                pending: Vec::new(),
            };
        }
        let mut pending: Vec<PendingMeta> = self
            .requeued
            .iter()
            .map(|r| (&r.msg, 0))
            .chain(self.in_flight.values().map(|f| (&f.msg, 0)))
            .chain(self.deferred.values().map(|d| {
                (
                    &d.msg,
                    d.at.saturating_duration_since(now).as_millis() as u64,
                )
            }))
            .map(|(s, delay_ms)| PendingMeta {
                seq: s.seq,
                attempts: s.msg.attempts,
                delay_ms,
            })
            .collect();
        pending.sort_by_key(|p| p.seq);
        ChannelMeta {
            name: self.name.to_string(),
            paused: self.paused,
            cursor: self.cursor,
            pending,
        }
    }

    /// Restores from persisted metadata; returns how many owed messages came back.
    pub fn restore(
        &mut self,
        meta: &ChannelMeta,
        clean: bool,
        log: &TopicLog,
        now: Instant,
        timers: &TimerQueue,
    ) -> usize {
        self.paused = meta.paused;
        self.cursor = meta.cursor.clamp(log.start(), log.head());
        self.hint = DiskHint::default();
        if !clean {
            return 0;
        }
        let mut restored = 0;
        for p in &meta.pending {
            let Read::Msg(mut s, _) = log.read_blocking(p.seq) else {
                continue;
            };
            if s.seq != p.seq {
                // The record was lost to corruption; nothing to deliver.
                continue;
            }
            s.msg.attempts = p.attempts;
            if p.delay_ms > 0 {
                s.detach_body();
                self.defer(s, now + Duration::from_millis(p.delay_ms), timers);
            } else {
                self.requeued.push_back(Requeued { after: 0, msg: s });
            }
            restored += 1;
        }
        restored
    }

    /// End-to-end latency samples, for /stats.
    pub(crate) fn e2e_samples(&self) -> &crate::stats::E2eSamples {
        &self.e2e
    }

    /// Where every message the channel owes is, checking the bookkeeping that ties the places
    /// together (for the owner simulation, `crate::owner_sim`).
    #[cfg(test)]
    pub(crate) fn audit(&self, log: &TopicLog) -> Result<Audit, String> {
        let mut a = Audit::default();
        let mut seq = self.cursor;
        while seq < self.visible_end {
            match self.skip {
                Some((from, to)) if seq >= from && seq < to => {
                    seq = to;
                    continue;
                }
                _ => {}
            }
            match log.read(seq, DiskHint::default()) {
                Read::Msg(s, _) if s.seq < self.visible_end => {
                    a.waiting.push(s.msg.id);
                    seq = s.seq + 1;
                }
                Read::Msg(..) | Read::End => break,
                Read::Skip(next) if next > seq => seq = next,
                Read::Skip(_) | Read::Wait => return Err(format!("log unreadable at {seq}")),
            }
        }
        a.requeued = self.requeued.iter().map(|r| r.msg.msg.id).collect();
        a.deferred = self.deferred.keys().copied().collect();
        for f in self.in_flight.values() {
            a.in_flight
                .push((f.msg.msg.id, f.consumer, f.msg.msg.attempts));
        }
        if a.in_flight.len() != self.in_flight.len() {
            return Err("the in-flight table's count disagrees with its entries".into());
        }
        for c in &self.consumers {
            let owned = a.in_flight.iter().filter(|f| f.1 == c.spec.key).count() as u64;
            if owned != c.in_flight {
                return Err(format!(
                    "consumer {:?} counts {} in flight, owns {owned}",
                    c.spec.key, c.in_flight
                ));
            }
        }
        if let Some(f) = a
            .in_flight
            .iter()
            .find(|f| !self.consumers.iter().any(|c| c.spec.key == f.1))
        {
            return Err(format!("{:?} in flight to a consumer that left", f.0));
        }
        if self.deferred_order.len() != self.deferred.len()
            || self
                .deferred_order
                .iter()
                .any(|(at, id)| self.deferred.get(id).is_none_or(|d| d.at != *at))
        {
            return Err("deferred order and deferred set disagree".into());
        }
        if let (Some(first), Some(armed)) = (self.deferred_order.first(), self.armed_deferred) {
            if armed > first.0 {
                return Err("the deferred timer is armed after the earliest deferral".into());
            }
        }
        if let (Some(first), armed) = (self.in_flight_order.first(), self.armed_in_flight) {
            if armed.is_none_or(|a| a > first) {
                return Err("the in-flight timer is not armed for the earliest deadline".into());
            }
        }
        Ok(a)
    }
}

/// Where a channel's owed messages are (see [`Channel::audit`]).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Audit {
    /// In the log at or after the cursor, not taken yet.
    pub waiting: Vec<MessageId>,
    pub requeued: Vec<MessageId>,
    pub deferred: Vec<MessageId>,
    /// With the consumer holding it and its attempts.
    pub in_flight: Vec<(MessageId, ConsumerKey, u16)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg(n: u64) -> Message {
        Message {
            id: MessageId::from_u64(n),
            timestamp: n as i64,
            attempts: 0,
            body: Bytes::from(format!("m{n}")),
        }
    }

    fn spec(conn: u64) -> ConsumerSpec {
        ConsumerSpec {
            key: ConsumerKey { shard: 0, conn },
            msg_timeout: Duration::from_secs(60),
            info: Arc::new(ClientInfo::default()),
            output_window: u64::MAX,
        }
    }

    const MAX: Duration = Duration::from_secs(900);

    /// A log holding `n` messages and a channel reading it from the start.
    fn setup(name: &str, n: u64, defer_until: i64) -> (TopicLog, Rc<RefCell<Channel>>) {
        let mut log = TopicLog::in_memory("t", 1000);
        let end = log.append((0..n).map(msg).collect(), defer_until);
        let ch = Channel::new(Arc::from("t"), name, 100, 0, end);
        (log, ch)
    }

    #[test]
    fn rdy_bounds_in_flight_and_delivery_is_round_robin() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 10, 0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(1), 0).unwrap();
        c.add_consumer(spec(2), 0).unwrap();
        c.set_rdy(spec(1).key, 2);
        c.set_rdy(spec(2).key, 3);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(out.len(), 5);
        let to1 = out.iter().filter(|d| d.to.conn == 1).count();
        assert_eq!(to1, 2);
        assert_eq!(out[0].to.conn, 1);
        assert_eq!(out[1].to.conn, 2);
        assert!(out.iter().all(|d| d.msg.attempts == 1));
        assert_eq!(c.waiting(), 5);
        // FIN frees one slot: exactly one more delivery.
        c.finish(spec(1).key, out[0].msg.id).unwrap();
        let mut more = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut more);
        assert_eq!(more.len(), 1);
        assert_eq!(more[0].to.conn, 1);
        assert_eq!(c.floor(), 1, "message 0 is finished, 1 is still in flight");
    }

    /// A consumer whose connection has not written what it was given gets nothing more past
    /// its window, whatever its RDY; the others take the messages; a report of the bytes
    /// written lets it take more.
    #[test]
    fn unwritten_frames_past_the_window_pause_a_consumer() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 10, 0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        let stuck = ConsumerSpec {
            output_window: 1,
            ..spec(1)
        };
        c.add_consumer(stuck, 0).unwrap();
        c.set_rdy(spec(1).key, 100);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(out.len(), 1, "one frame fills a window of one byte");
        let frame = out.batches[0].1.len() as u64;
        assert_eq!(c.consumers()[0].unwritten, frame);
        let mut none = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut none);
        assert_eq!(none.len(), 0, "RDY 100, but nothing was written");
        c.add_consumer(spec(2), 0).unwrap();
        c.set_rdy(spec(2).key, 100);
        let mut rest = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut rest);
        assert_eq!(rest.len(), 9);
        assert!(rest.iter().all(|d| d.to.conn == 2));
        // Written: room again (the message it holds times out or is FINned meanwhile).
        c.written(spec(1).key, frame);
        assert_eq!(c.consumers()[0].unwritten, 0);
        c.requeue(spec(2).key, rest[0].msg.id, Duration::ZERO, now, &timers)
            .unwrap();
        let mut again = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut again);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].to.conn, 1);
    }

    /// Messages that arrive one at a time alternate between two ready consumers, and a
    /// requeued one goes to the consumer whose turn it is. (The turn used to move on the last,
    /// empty look of each dispatch, so one of two consumers got every message.)
    #[test]
    fn one_message_at_a_time_alternates_between_two_consumers() {
        let timers = TimerQueue::default();
        let (mut log, ch) = setup("c", 0, 0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(1), 0).unwrap();
        c.add_consumer(spec(2), 0).unwrap();
        c.set_rdy(spec(1).key, 100);
        c.set_rdy(spec(2).key, 100);
        let mut to = Vec::new();
        for n in 0..10 {
            c.visible_end = log.append(vec![msg(n)], 0);
            let mut out = Deliveries::default();
            c.dispatch(&log, now, MAX, &timers, &mut out);
            assert_eq!(out.len(), 1);
            to.push(out[0].to.conn);
        }
        assert_eq!(to, [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]);
        // Consumer 1 gives its last message back: consumer 1's turn, then 2's.
        let last_of_1 = MessageId::from_u64(8);
        c.requeue(spec(1).key, last_of_1, Duration::ZERO, now, &timers)
            .unwrap();
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].to.conn, out[0].msg.id), (1, last_of_1));
        c.visible_end = log.append(vec![msg(10)], 0);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(out[0].to.conn, 2);
    }

    /// A message given back goes behind what was waiting (nsqd puts it at the tail of its
    /// memory queue), at most --mem-queue-size messages of the backlog; with nothing else
    /// to give it goes at once.
    #[test]
    fn a_requeued_message_goes_behind_the_waiting_ones() {
        let timers = TimerQueue::default();
        let now = Instant::now();
        let order = |mem_queue_size: u64| {
            let mut log = TopicLog::in_memory("t", 1000);
            let end = log.append((0..5).map(msg).collect(), 0);
            let ch = Channel::new(Arc::from("t"), "c", mem_queue_size, 0, end);
            let mut c = ch.borrow_mut();
            c.add_consumer(spec(1), 0).unwrap();
            c.set_rdy(spec(1).key, 1);
            let mut seen = Vec::new();
            let mut first = true;
            loop {
                let mut out = Deliveries::default();
                c.dispatch(&log, now, MAX, &timers, &mut out);
                let Some(d) = out.iter().next() else { break };
                let (id, attempts) = (d.msg.id, d.msg.attempts);
                seen.push((id.to_u64().unwrap(), attempts));
                if first {
                    first = false;
                    c.requeue(spec(1).key, id, Duration::ZERO, now, &timers)
                        .unwrap();
                } else {
                    c.finish(spec(1).key, id).unwrap();
                }
            }
            seen
        };
        assert_eq!(order(100), [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (0, 2)]);
        assert_eq!(order(2), [(0, 1), (1, 1), (2, 1), (0, 2), (3, 1), (4, 1)]);
        assert_eq!(order(0), [(0, 1), (0, 2), (1, 1), (2, 1), (3, 1), (4, 1)]);
    }

    /// `floor_above` agrees with `floor` whenever the floor lies above the bound, and
    /// otherwise answers some owed seq at or below the bound.
    #[test]
    fn floor_above_a_bound_stops_early_and_agrees_above_it() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 10, 0);
        let mut c = ch.borrow_mut();
        c.add_consumer(spec(1), 0).unwrap();
        c.set_rdy(spec(1).key, 10);
        let mut out = Deliveries::default();
        c.dispatch(&log, Instant::now(), MAX, &timers, &mut out);
        for d in out
            .iter()
            .filter(|d| d.msg.id != msg(3).id && d.msg.id != msg(7).id)
        {
            c.finish(spec(1).key, d.msg.id).unwrap();
        }
        // Owed: 3 and 7 in flight; the cursor is at the end (10).
        assert_eq!(c.floor(), 3);
        for bound in [0, 1, 2] {
            assert_eq!(c.floor_above(bound), 3, "bound {bound}");
        }
        for bound in [3, 5, 8, 20] {
            let f = c.floor_above(bound);
            assert!(
                f <= bound && (f == 3 || f == 7 || f == 10),
                "bound {bound}: {f}"
            );
        }
        c.finish(spec(1).key, msg(3).id).unwrap();
        assert_eq!(c.floor_above(6), 7);
        c.finish(spec(1).key, msg(7).id).unwrap();
        assert_eq!(c.floor_above(6), 10, "nothing owed: the cursor");
    }

    #[test]
    fn fin_errors_are_nsqds() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 1, 0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(1), 0).unwrap();
        c.add_consumer(spec(2), 0).unwrap();
        c.set_rdy(spec(1).key, 1);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        let id = out[0].msg.id;
        assert_eq!(c.finish(spec(2).key, id), Err(OpError::NotOwner));
        assert_eq!(
            c.finish(spec(1).key, MessageId::from_u64(99)),
            Err(OpError::NotInFlight)
        );
        c.finish(spec(1).key, id).unwrap();
        assert_eq!(c.finish(spec(1).key, id), Err(OpError::NotInFlight));
    }

    #[test]
    fn disconnect_requeues_in_flight_at_once_with_attempts_kept() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 1, 0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(1), 0).unwrap();
        c.set_rdy(spec(1).key, 1);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        c.remove_consumer(spec(1).key);
        c.add_consumer(spec(2), 0).unwrap();
        c.set_rdy(spec(2).key, 1);
        let mut again = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut again);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].msg.attempts, 2);
        assert_eq!(c.figures(&log, 0).in_flight, 1);
    }

    #[test]
    fn timeout_and_touch() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 1, 0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(1), 0).unwrap();
        c.set_rdy(spec(1).key, 1);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        let id = out[0].msg.id;
        let first_deadline = now + Duration::from_secs(60);
        let later = now + Duration::from_secs(10);
        c.touch(spec(1).key, id, MAX, later, &timers).unwrap();
        // After TOUCH the first deadline passes without a timeout.
        assert!(!c.on_timer(TimerKind::InFlight, first_deadline, first_deadline, &timers));
        let touched = later + Duration::from_secs(60);
        assert!(c.on_timer(TimerKind::InFlight, touched, touched, &timers));
        assert_eq!(c.timeout_count, 1);
        assert_eq!(c.waiting(), 1);
    }

    #[test]
    fn touch_never_passes_max_msg_timeout() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 1, 0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(1), 0).unwrap();
        c.set_rdy(spec(1).key, 1);
        let mut out = Deliveries::default();
        let max = Duration::from_secs(90);
        c.dispatch(&log, now, max, &timers, &mut out);
        let id = out[0].msg.id;
        c.touch(spec(1).key, id, max, now + Duration::from_secs(80), &timers)
            .unwrap();
        assert!(!c.on_timer(
            TimerKind::InFlight,
            now + max,
            now + max - Duration::from_millis(1),
            &timers
        ));
        assert!(c.on_timer(TimerKind::InFlight, now + max, now + max, &timers));
    }

    /// nsqd's figures: deferred records count as deferred from their publication, not as
    /// depth, until their time comes; backend_depth is what exceeds the memory queue.
    #[test]
    fn figures_count_deferred_records_not_yet_taken_as_deferred() {
        let now_ns = crate::ids::now_nanos();
        let due = now_ns + 5_000_000_000;
        let (log, ch) = setup("c", 3, due);
        let c = ch.borrow();
        let expect = Figures {
            depth: 0,
            backend_depth: 0,
            in_flight: 0,
            deferred: 3,
        };
        assert_eq!(c.figures(&log, now_ns), expect);
        let later = c.figures(&log, due);
        assert_eq!(
            (later.depth, later.deferred),
            (3, 0),
            "due: ready for delivery"
        );
    }

    #[test]
    fn backend_depth_is_what_exceeds_the_memory_queue() {
        let mut log = TopicLog::in_memory("t", 1000);
        let end = log.append((0..100).map(msg).collect(), 0);
        for (mem, backend) in [(0, 100), (10, 90), (100, 0), (1000, 0)] {
            let ch = Channel::new(Arc::from("t"), "c", mem, 0, end);
            let f = ch.borrow().figures(&log, 0);
            assert_eq!(
                (f.depth, f.backend_depth),
                (100, backend),
                "mem-queue-size {mem}"
            );
        }
        let ephemeral = Channel::new(Arc::from("t"), "c#ephemeral", 10, 0, end);
        assert_eq!(ephemeral.borrow().figures(&log, 0).backend_depth, 0);
    }

    #[test]
    fn deferred_message_waits_for_its_timer() {
        let timers = TimerQueue::default();
        let later = crate::ids::now_nanos() + 5_000_000_000;
        let (log, ch) = setup("c", 1, later);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        c.add_consumer(spec(1), 0).unwrap();
        c.set_rdy(spec(1).key, 1);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        assert!(out.is_empty());
        assert_eq!(c.figures(&log, crate::ids::now_nanos()).deferred, 1);
        assert_eq!(timers.len(), 1);
        let id = MessageId::from_u64(0);
        assert!(!c.on_timer(TimerKind::Deferred, now, now, &timers));
        let due = c.deferred.get(&id).map(|d| d.at).unwrap();
        assert!(c.on_timer(TimerKind::Deferred, due, due, &timers));
        c.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn clean_meta_round_trip_keeps_owed_messages_and_attempts() {
        let timers = TimerQueue::default();
        let (log, ch) = setup("c", 3, 0);
        let now = Instant::now();
        let meta = {
            let mut c = ch.borrow_mut();
            c.add_consumer(spec(1), 0).unwrap();
            c.set_rdy(spec(1).key, 2);
            let mut out = Deliveries::default();
            c.dispatch(&log, now, MAX, &timers, &mut out);
            c.finish(spec(1).key, out[0].msg.id).unwrap();
            c.to_meta(true, now)
        };
        assert_eq!(meta.cursor, 2);
        assert_eq!(meta.pending.len(), 1);
        assert_eq!(meta.pending[0].attempts, 1);
        let fresh = Channel::new(Arc::from("t"), "c", 100, 0, log.head());
        let mut f = fresh.borrow_mut();
        assert_eq!(f.restore(&meta, true, &log, now, &timers), 1);
        f.add_consumer(spec(9), 0).unwrap();
        f.set_rdy(spec(9).key, 10);
        let mut out = Deliveries::default();
        f.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0].msg.attempts, 2,
            "the owed message keeps its attempts"
        );
        assert_eq!(out[1].msg.attempts, 1);
    }

    #[test]
    fn max_consumers_and_ephemeral_bound() {
        let timers = TimerQueue::default();
        let mut log = TopicLog::in_memory("t", 1000);
        let ch = Channel::new(Arc::from("t"), "c#ephemeral", 2, 0, 0);
        let mut c = ch.borrow_mut();
        assert!(c.ephemeral);
        c.add_consumer(spec(1), 1).unwrap();
        assert_eq!(
            c.add_consumer(spec(2), 1).unwrap_err(),
            "consumers for t:c#ephemeral exceeds limit of 1"
        );
        c.visible_end = log.append((0..5).map(msg).collect(), 0);
        c.set_rdy(spec(1).key, 10);
        let mut out = Deliveries::default();
        c.dispatch(&log, Instant::now(), MAX, &timers, &mut out);
        assert_eq!(
            out.len(),
            2,
            "an ephemeral channel keeps only mem-queue-size messages"
        );
    }
}

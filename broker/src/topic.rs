//! A topic, as held by its owner shard: its log and its channels.
//!
//! Publishing appends to the topic's log once; every channel then reads the log through its own
//! cursor, so a message is stored once however many channels the topic has, and a "copy" to a
//! channel is a cursor step (in memory: a reference to the same `Bytes`).
//!
//! - A topic with no channel keeps its log from `log.start()`: the first channel starts there
//!   and so receives everything published before it existed. Later channels start at the end.
//! - Retention: the topic's own settings (`POST /topic/config`, persisted in its metadata)
//!   override the flags' for each limit; the log applies the result ([`Topic::set_retention`]).
//! - Dead letters: the channels apply `--max-attempts` unless they have their own; a topic
//!   that receives dead letters keeps their origin records (`topic/dead_letters.rs`).
//! - While paused, `visible_end` stays where it was: channels see nothing published since, until
//!   unpause ([`Topic::release_held`]), across a restart too (it is in the metadata).

mod dead_letters;

pub use dead_letters::DeadOrigin;

use crate::channel::{Channel, TimerQueue};
use crate::ids::IdGen;
use crate::latency::E2eTotals;
use crate::storage::log::{Retention, TopicLog};
use crate::storage::meta::{ChannelMeta, TopicMeta, META_VERSION};
use protocol::Message;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

pub type ChannelRef = Rc<RefCell<Channel>>;

pub struct Topic {
    pub name: Arc<str>,
    pub ephemeral: bool,
    pub paused: bool,
    channels: BTreeMap<Arc<str>, ChannelRef>,
    pub log: Rc<RefCell<TopicLog>>,
    /// Channels read the log below this seq.
    visible_end: u64,
    /// While paused: messages below this seq were dropped by an empty (not held any more).
    emptied_until: u64,
    mem_queue_size: u64,
    pub message_count: u64,
    pub message_bytes: u64,
    /// Queued for the shard's flusher.
    pub flush_queued: bool,
    /// Queued for the shard's block fetcher.
    pub fetch_queued: bool,
    /// Listed for the shard's block trimmer (its log has cached blocks).
    pub blocks_listed: bool,
    /// Something structural changed (a channel created or deleted, a pause): checkpoint soon.
    pub meta_dirty: bool,
    /// The metadata last written, so unchanged topics are not rewritten.
    pub last_meta: Option<TopicMeta>,
    /// Counts structural changes (`Shard::note_meta_change`); `meta_saved_gen` is the count
    /// the written metadata covers. An action answered once durable waits for the second to
    /// reach the first as it was.
    pub meta_gen: u64,
    pub meta_saved_gen: u64,
    /// Listed for the next checkpoint (published to, or a channel moved, since the last).
    pub checkpoint_queued: bool,
    /// Makes the IDs of the messages published here: one counter per topic, so the IDs a
    /// channel has in flight are neighbours (see [`crate::id_table`]).
    pub ids: IdGen,
    /// The topic's own retention limits (ns, bytes); `None`: the flag's (`retention_default`).
    pub retention_time_ns: Option<u64>,
    pub retention_bytes: Option<u64>,
    retention_default: Retention,
    /// `--max-attempts`, which its channels apply unless they have their own.
    pub max_attempts: u16,
    /// As a dead-letter topic: where its messages came from (`topic/dead_letters.rs`).
    dead_letters: VecDeque<crate::storage::meta::DeadLetterMeta>,
    /// The e2e totals of its channels deleted so far: the topic's `_count` and `_sum` in
    /// `/metrics` add them, so that they never go down.
    pub e2e_retired: E2eTotals,
    /// A replicated topic's replica (`None`: not replicated, everything as before).
    pub replica: Option<Box<crate::replication::replicas::TopicReplica>>,
    /// A replicated topic's channels see nothing at or above this seq (the leader's high
    /// watermark; on a follower, where it stood when it stopped leading).
    deliver_cap: Option<u64>,
    /// The replica does not lead: channels deliver nothing ([`Topic::stand_by`]).
    standby: bool,
}

impl Topic {
    /// A topic on shard `shard` (whose index goes into the IDs it makes).
    pub fn new(name: &str, log: TopicLog, mem_queue_size: u64, shard: usize) -> Topic {
        let head = log.head();
        let mut ids = IdGen::new(shard);
        ids.resume_after(log.recovered_max_id());
        Topic {
            name: Arc::from(name),
            ephemeral: protocol::names::is_ephemeral(name),
            paused: false,
            channels: BTreeMap::new(),
            log: Rc::new(RefCell::new(log)),
            visible_end: head,
            emptied_until: head,
            mem_queue_size,
            message_count: 0,
            message_bytes: 0,
            flush_queued: false,
            fetch_queued: false,
            blocks_listed: false,
            meta_dirty: false,
            last_meta: None,
            meta_gen: 0,
            meta_saved_gen: 0,
            checkpoint_queued: false,
            ids,
            retention_time_ns: None,
            retention_bytes: None,
            retention_default: Retention::default(),
            max_attempts: 0,
            dead_letters: VecDeque::new(),
            e2e_retired: E2eTotals::default(),
            replica: None,
            deliver_cap: None,
            standby: false,
        }
    }

    /// Sets the flags' retention (`default`) and the topic's own (`None`: the flag's), and
    /// gives the log the result. Takes effect at the next release (checkpoint).
    pub fn set_retention(&mut self, default: Retention, time_ns: Option<u64>, bytes: Option<u64>) {
        self.retention_default = default;
        self.retention_time_ns = time_ns;
        self.retention_bytes = bytes;
        let effective = Retention {
            time_ns: time_ns.unwrap_or(default.time_ns),
            bytes: bytes.unwrap_or(default.bytes),
        };
        self.log.borrow_mut().set_retention(effective);
    }

    /// The flags' retention this topic was given.
    pub fn retention_default(&self) -> Retention {
        self.retention_default
    }

    /// Messages for `bodies`, each with the next ID of this topic, stamped `timestamp`.
    pub fn stamp(&mut self, bodies: Vec<bytes::Bytes>, timestamp: i64) -> Vec<Message> {
        bodies
            .into_iter()
            .map(|body| Message {
                id: self.ids.next_id(),
                timestamp,
                attempts: 0,
                body,
            })
            .collect()
    }

    /// Appends messages to the log. Returns the seq after the last one and the channels that
    /// can now see them (to be dispatched).
    pub fn publish(&mut self, msgs: Vec<Message>, defer_until: i64) -> (u64, Vec<ChannelRef>) {
        self.message_count += msgs.len() as u64;
        self.message_bytes += msgs.iter().map(|m| m.body.len() as u64).sum::<u64>();
        let end = self.log.borrow_mut().append(msgs, defer_until);
        if self.paused {
            return (end, Vec::new());
        }
        (end, self.show_up_to(end))
    }

    fn show_up_to(&mut self, end: u64) -> Vec<ChannelRef> {
        let end = match self.deliver_cap {
            Some(cap) => end.min(cap).max(self.visible_end),
            None => end,
        };
        self.visible_end = end;
        self.emptied_until = self.emptied_until.max(end);
        let channels: Vec<ChannelRef> = self.channels.values().cloned().collect();
        for ch in &channels {
            let mut c = ch.borrow_mut();
            // nsqd counts a message for a channel when the channel receives it.
            c.message_count += end.saturating_sub(c.visible_end);
            c.visible_end = end;
        }
        channels
    }

    /// A replicated topic: channels see nothing at or above `cap` (raised as the high
    /// watermark moves). Returns the channels to dispatch.
    pub fn set_deliver_cap(&mut self, cap: u64) -> Vec<ChannelRef> {
        self.deliver_cap = Some(cap);
        let woken = std::mem::take(&mut self.standby);
        if woken {
            for ch in self.channels.values() {
                ch.borrow_mut().standby = false;
            }
        }
        if self.paused || cap <= self.visible_end {
            return if woken {
                self.channels.values().cloned().collect()
            } else {
                Vec::new()
            };
        }
        let head = self.log.borrow().head();
        self.show_up_to(head)
    }

    /// A replicated topic whose replica does not lead (a follower, a deposed leader, one
    /// waiting for the controller): its channels hand out nothing, what they hold requeued or
    /// what they could still see of the log included, until [`Topic::set_deliver_cap`] (the
    /// replica leads again). Otherwise a deposed leader's consumers would get what the new
    /// leader delivers too.
    pub fn stand_by(&mut self) {
        if self.standby {
            return;
        }
        self.standby = true;
        for ch in self.channels.values() {
            ch.borrow_mut().standby = true;
        }
    }

    /// Appends a replicated topic's publish under `epoch` (the one its replica leads): the
    /// channels see it once the high watermark passes it ([`Topic::set_deliver_cap`]).
    pub fn publish_replicated(
        &mut self,
        epoch: replication::ids::Epoch,
        msgs: Vec<Message>,
        defer_until: i64,
    ) -> Result<u64, replication::replica::LogError> {
        let count = msgs.len() as u64;
        let bytes = msgs.iter().map(|m| m.body.len() as u64).sum::<u64>();
        let log = self.log.clone();
        let mut log = log.borrow_mut();
        let Some(r) = self.replica.as_mut() else {
            return Err(replication::replica::LogError::Storage(
                "not a replicated topic".into(),
            ));
        };
        let end = r.with_log(&mut log, |_, l| l.append_local(epoch, msgs, defer_until))?;
        self.message_count += count;
        self.message_bytes += bytes;
        Ok(end)
    }

    /// Unpause: channels see everything published meanwhile. Returns them for dispatch.
    pub fn release_held(&mut self, _now: Instant, _timers: &TimerQueue) -> Vec<ChannelRef> {
        if self.paused {
            return Vec::new();
        }
        let head = self.log.borrow().head();
        self.show_up_to(head)
    }

    pub fn channel(&self, name: &str) -> Option<ChannelRef> {
        self.channels.get(name).cloned()
    }

    /// The channel `name`, created if missing; `true` when it was created. The first channel
    /// of a topic starts at the oldest retained message, later ones at the visible end.
    pub fn channel_or_create(&mut self, name: &str) -> (ChannelRef, bool) {
        if let Some(ch) = self.channels.get(name) {
            return (ch.clone(), false);
        }
        let cursor = if self.channels.is_empty() {
            self.log.borrow().start()
        } else {
            self.visible_end
        };
        let ch = Channel::new(
            self.name.clone(),
            name,
            self.mem_queue_size,
            cursor,
            self.visible_end,
        );
        ch.borrow_mut()
            .set_dead_letters(self.max_attempts, None, None);
        ch.borrow_mut().standby = self.standby;
        // nsqd counts what a topic held for its first channel as that channel's messages
        // when it hands them over.
        ch.borrow_mut().message_count = self.visible_end.saturating_sub(cursor);
        self.channels.insert(Arc::from(name), ch.clone());
        if !ch.borrow().ephemeral {
            self.meta_dirty = true;
        }
        (ch, true)
    }

    /// Moves channel `ch` to `seq` (a rewind, or a channel created in the past): the log
    /// serves reads from there again. The caller checked that the log holds `seq`.
    pub fn rewind_channel(&self, ch: &ChannelRef, seq: u64) {
        self.log.borrow_mut().reopen_from(seq);
        ch.borrow_mut().rewind(seq);
    }

    pub fn remove_channel(&mut self, name: &str) -> Option<ChannelRef> {
        let removed = self.channels.remove(name);
        if let Some(ch) = &removed {
            if let Ok(c) = ch.try_borrow() {
                self.e2e_retired.add(c.e2e_samples().totals());
            }
            self.meta_dirty = true;
            if self.channels.is_empty() {
                // What the deleted channels had not read is theirs; a next first channel starts
                // with what is published from now on.
                let upto = self.log.borrow().head().min(self.release_cap());
                self.log.borrow_mut().release_below(upto);
            }
        }
        removed
    }

    pub fn channels(&self) -> impl Iterator<Item = &ChannelRef> {
        self.channels.values()
    }

    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Messages the topic holds that no channel has been given yet (nsqd's topic depth).
    pub fn depth(&self) -> usize {
        let log = self.log.borrow();
        if self.channels.is_empty() {
            (log.head() - log.start()) as usize
        } else {
            // Nothing below the start is held (a replicated follower begun at its leader's
            // start may not have seen it).
            let seen = self.visible_end.max(self.emptied_until).max(log.start());
            log.head().saturating_sub(seen) as usize
        }
    }

    /// The part of [`Topic::depth`] beyond the `--mem-queue-size` messages nsqd's topic holds
    /// in memory (its backend, here the segment files; all of it with `--mem-queue-size 0`);
    /// 0 for an `#ephemeral` topic, which has no backend.
    pub fn backend_depth(&self) -> usize {
        if self.ephemeral {
            return 0;
        }
        self.depth().saturating_sub(self.mem_queue_size as usize)
    }

    /// Drops what no channel has been given yet (nsqd's topic empty).
    pub fn empty(&mut self) {
        let head = self.log.borrow().head();
        if self.channels.is_empty() {
            let upto = head.min(self.release_cap());
            self.log.borrow_mut().release_below(upto);
        } else if self.paused {
            for ch in self.channels.values() {
                ch.borrow_mut().skip_range(self.visible_end, head);
            }
            self.emptied_until = head;
        }
    }

    /// The lowest seq any channel may still need; segments below it can go. An `#ephemeral`
    /// channel needs only what it has yet to read of its memory queue's worth of the log.
    pub fn floor(&self) -> u64 {
        let floor = self.floor_above(0);
        match &self.replica {
            // A follower's channels stand where its leader's positions put them.
            Some(r) if r.replica.following().is_some() => floor,
            _ => floor.min(self.release_cap()),
        }
    }

    /// How far a replicated topic's log may be released by dropping what channels were not
    /// given (an empty, the last channel deleted), and how far its leader releases at all: up
    /// to the high watermark (channels deliver nothing above it, and a follower that needs
    /// what was released begins its log at the leader's start). A follower or an idle
    /// replica drops nothing of its own accord. No limit for a topic not replicated.
    fn release_cap(&self) -> u64 {
        match &self.replica {
            None => u64::MAX,
            Some(r) => r.deliverable().unwrap_or_else(|| self.log.borrow().start()),
        }
    }

    /// The lowest seq any channel (ephemeral ones too) takes next from the log; the head when
    /// the topic has no channel. Nothing below it is read from the log's window again: what a
    /// channel holds (in flight, requeued, deferred) it keeps itself, and a rewind reads the
    /// files.
    pub fn lowest_cursor(&self) -> u64 {
        self.channels
            .values()
            .map(|c| c.borrow().cursor())
            .min()
            .unwrap_or_else(|| self.log.borrow().head())
    }

    /// [`Topic::floor`], or any seq at or below `bound` when the floor is there (see
    /// [`Channel::floor_above`]).
    pub fn floor_above(&self, bound: u64) -> u64 {
        let log = self.log.borrow();
        if self.channels.is_empty() {
            return log.start();
        }
        let mut floor = log.head();
        for c in self.channels.values() {
            let c = c.borrow();
            let needs = if c.ephemeral {
                // It keeps what it took itself and reads no further back than its memory
                // queue; releasing what it has not read yet would lose messages it is owed.
                c.cursor()
                    .max(c.visible_end.saturating_sub(self.mem_queue_size))
            } else {
                c.floor_above(bound)
            };
            floor = floor.min(needs);
            if floor <= bound {
                break;
            }
        }
        floor
    }

    /// The metadata to persist. `clean`: a clean stop, with every channel's pending messages.
    pub fn to_meta(&self, clean: bool, now: Instant) -> TopicMeta {
        TopicMeta {
            version: META_VERSION,
            paused: self.paused,
            clean,
            start: self.log.borrow().start(),
            retention_time_ns: self.retention_time_ns,
            retention_bytes: self.retention_bytes,
            channels: self
                .channels
                .values()
                .filter(|c| !c.borrow().ephemeral)
                .map(|c| c.borrow().to_meta(clean, now))
                .collect::<Vec<ChannelMeta>>(),
            visible_end: self.paused.then_some(self.visible_end),
            emptied_until: self.paused.then_some(self.emptied_until),
            dead_letters: self.dead_letters.iter().cloned().collect(),
        }
    }

    /// Restores channels and pause state from persisted metadata (at start-up).
    pub fn restore(&mut self, meta: &TopicMeta, now: Instant, timers: &TimerQueue) -> usize {
        self.paused = meta.paused;
        // Before the release: what the retention keeps must survive it.
        self.set_retention(
            self.retention_default,
            meta.retention_time_ns,
            meta.retention_bytes,
        );
        // Before the channels: a first channel created by SUB later starts from here.
        self.log.borrow_mut().release_below(meta.start);
        self.dead_letters = meta.dead_letters.iter().cloned().collect();
        // Paused: what was published since the pause stays held (an nsqd import's topic
        // queue too), and what an empty dropped of it stays dropped.
        let held = match (self.paused, meta.visible_end) {
            (true, Some(end)) => {
                let log = self.log.borrow();
                let end = end.clamp(log.start(), log.head());
                let emptied = meta.emptied_until.unwrap_or(end).clamp(end, log.head());
                Some((end, emptied))
            }
            _ => None,
        };
        if let Some((end, emptied)) = held {
            self.visible_end = end;
            self.emptied_until = emptied;
        }
        let mut pending = 0;
        for cm in &meta.channels {
            let (ch, _) = self.channel_or_create(&cm.name);
            // A restarted nsqd counts from zero: what a channel still owes is not new to it.
            ch.borrow_mut().message_count = 0;
            let log = self.log.borrow();
            pending += ch.borrow_mut().restore(cm, meta.clean, &log, now, timers);
            if let Some((end, emptied)) = held.filter(|&(end, emptied)| emptied > end) {
                ch.borrow_mut().skip_range(end, emptied);
            }
        }
        if !self.paused {
            let head = self.log.borrow().head();
            self.show_up_to(head);
        }
        self.meta_dirty = false;
        self.last_meta = Some(meta.clone());
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use protocol::MessageId;

    fn msg(n: u64) -> Message {
        Message {
            id: MessageId::from_u64(n),
            timestamp: 0,
            attempts: 0,
            body: Bytes::from_static(b"x"),
        }
    }

    fn topic() -> Topic {
        Topic::new("t", TopicLog::in_memory("t", 100), 100, 0)
    }

    #[test]
    fn first_channel_gets_what_was_published_before_it() {
        let mut t = topic();
        t.publish(vec![msg(1), msg(2)], 0);
        assert_eq!(t.depth(), 2);
        let (ch, created) = t.channel_or_create("c");
        assert!(created);
        assert_eq!(ch.borrow().waiting(), 2);
        assert_eq!(
            ch.borrow().message_count,
            2,
            "counted as nsqd counts the hand-over"
        );
        let (late, _) = t.channel_or_create("late");
        assert_eq!(late.borrow().waiting(), 0);
        assert_eq!(late.borrow().message_count, 0);
    }

    #[test]
    fn every_channel_sees_each_message() {
        let mut t = topic();
        let (a, _) = t.channel_or_create("a");
        let (b, _) = t.channel_or_create("b");
        let (_, touched) = t.publish(vec![msg(1)], 0);
        assert_eq!(touched.len(), 2);
        assert_eq!(a.borrow().waiting(), 1);
        assert_eq!(b.borrow().waiting(), 1);
        assert_eq!(t.message_count, 1);
        assert_eq!(t.message_bytes, 1);
    }

    /// What a paused topic holds stays held across a restart (and what an empty dropped of
    /// it stays dropped): the metadata carries the visible end.
    #[test]
    fn a_paused_topic_still_holds_after_a_restart() {
        let timers = TimerQueue::default();
        let now = Instant::now();
        let mut t = topic();
        t.channel_or_create("a");
        t.publish(vec![msg(1)], 0);
        t.paused = true;
        t.publish(vec![msg(2), msg(3)], 0);
        t.empty();
        t.publish(vec![msg(4)], 0);
        let meta = t.to_meta(true, now);
        assert_eq!((meta.visible_end, meta.emptied_until), (Some(1), Some(3)));
        let mut log = TopicLog::in_memory("t", 100);
        log.append((1..=4).map(msg).collect(), 0);
        let mut again = Topic::new("t", log, 100, 0);
        again.restore(&meta, now, &timers);
        let (a, _) = again.channel_or_create("a");
        assert_eq!(
            a.borrow().waiting(),
            1,
            "message 1, published before the pause"
        );
        assert_eq!(again.depth(), 1, "message 4 is held, 2 and 3 were emptied");
        again.paused = false;
        again.release_held(now, &timers);
        assert_eq!(a.borrow().waiting(), 2, "1 and 4");
    }

    #[test]
    fn paused_topic_holds_until_unpaused_and_empty_drops_held() {
        let timers = TimerQueue::default();
        let mut t = topic();
        let (a, _) = t.channel_or_create("a");
        t.paused = true;
        t.publish(vec![msg(1)], 0);
        assert_eq!(a.borrow().waiting(), 0);
        assert_eq!(t.depth(), 1);
        t.paused = false;
        t.release_held(Instant::now(), &timers);
        assert_eq!(a.borrow().waiting(), 1);
        t.paused = true;
        t.publish(vec![msg(2)], 0);
        t.empty();
        t.paused = false;
        t.release_held(Instant::now(), &timers);
        assert_eq!(
            a.borrow().waiting(),
            1,
            "the emptied message is gone, the earlier one stays"
        );
    }
}

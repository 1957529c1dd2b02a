//! A topic, as held by its owner shard: its channels, and the messages it keeps while it has no
//! channel yet or is paused.
//!
//! Publishing gives every channel a reference to the same message (the body is a shared
//! `Bytes`): a copy per channel costs a pointer, not a memcpy.

use crate::channel::Channel;
use crate::timer::TimerQueue;
use protocol::Message;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub type ChannelRef = Rc<RefCell<Channel>>;

/// A message held by the topic itself, with the delay it was published with.
struct Held {
    msg: Message,
    defer: Duration,
}

pub struct Topic {
    pub name: Arc<str>,
    pub ephemeral: bool,
    pub paused: bool,
    channels: BTreeMap<Arc<str>, ChannelRef>,
    /// Messages waiting for a first channel, or for unpause.
    held: VecDeque<Held>,
    mem_queue_size: u64,
    pub message_count: u64,
    pub message_bytes: u64,
}

impl Topic {
    pub fn new(name: &str, mem_queue_size: u64) -> Topic {
        Topic {
            name: Arc::from(name),
            ephemeral: protocol::names::is_ephemeral(name),
            paused: false,
            channels: BTreeMap::new(),
            held: VecDeque::new(),
            mem_queue_size,
            message_count: 0,
            message_bytes: 0,
        }
    }

    /// Takes new messages. Returns the channels that received some (to be dispatched).
    pub fn publish(
        &mut self,
        msgs: Vec<Message>,
        defer: Duration,
        now: Instant,
        timers: &TimerQueue,
    ) -> Vec<ChannelRef> {
        self.message_count += msgs.len() as u64;
        self.message_bytes += msgs.iter().map(|m| m.body.len() as u64).sum::<u64>();
        if self.paused || self.channels.is_empty() {
            for msg in msgs {
                self.hold(msg, defer);
            }
            return Vec::new();
        }
        self.fan_out(msgs.into_iter().map(|msg| Held { msg, defer }), now, timers)
    }

    fn hold(&mut self, msg: Message, defer: Duration) {
        if self.ephemeral && self.held.len() as u64 >= self.mem_queue_size {
            return;
        }
        self.held.push_back(Held { msg, defer });
    }

    fn fan_out(
        &mut self,
        msgs: impl Iterator<Item = Held>,
        now: Instant,
        timers: &TimerQueue,
    ) -> Vec<ChannelRef> {
        let channels: Vec<ChannelRef> = self.channels.values().cloned().collect();
        for h in msgs {
            for ch in &channels {
                ch.borrow_mut().put(h.msg.clone(), h.defer, now, timers);
            }
        }
        channels
    }

    /// Hands held messages to the channels (after the first channel appears, or on unpause).
    pub fn release_held(&mut self, now: Instant, timers: &TimerQueue) -> Vec<ChannelRef> {
        if self.paused || self.channels.is_empty() || self.held.is_empty() {
            return Vec::new();
        }
        let held: Vec<Held> = self.held.drain(..).collect();
        self.fan_out(held.into_iter(), now, timers)
    }

    pub fn channel(&self, name: &str) -> Option<ChannelRef> {
        self.channels.get(name).cloned()
    }

    /// The channel `name`, created if missing; `true` when it was created.
    pub fn channel_or_create(&mut self, name: &str) -> (ChannelRef, bool) {
        if let Some(ch) = self.channels.get(name) {
            return (ch.clone(), false);
        }
        let ch = Channel::new(self.name.clone(), name, self.mem_queue_size);
        self.channels.insert(Arc::from(name), ch.clone());
        (ch, true)
    }

    pub fn remove_channel(&mut self, name: &str) -> Option<ChannelRef> {
        self.channels.remove(name)
    }

    pub fn channels(&self) -> impl Iterator<Item = &ChannelRef> {
        self.channels.values()
    }

    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Messages the topic holds itself (nsqd's topic depth).
    pub fn depth(&self) -> usize {
        self.held.len()
    }

    /// Drops what the topic holds itself (nsqd's topic empty).
    pub fn empty(&mut self) {
        self.held.clear();
    }

    /// Everything held by the topic itself, for the hand-over to storage.
    pub fn drain_held(&mut self) -> Vec<(Message, Duration)> {
        self.held.drain(..).map(|h| (h.msg, h.defer)).collect()
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

    #[test]
    fn first_channel_gets_what_was_published_before_it() {
        let timers = TimerQueue::default();
        let now = Instant::now();
        let mut t = Topic::new("t", 100);
        t.publish(vec![msg(1), msg(2)], Duration::ZERO, now, &timers);
        assert_eq!(t.depth(), 2);
        let (ch, created) = t.channel_or_create("c");
        assert!(created);
        t.release_held(now, &timers);
        assert_eq!(ch.borrow().depth(), 2);
        assert_eq!(t.depth(), 0);
    }

    #[test]
    fn every_channel_gets_a_copy_sharing_the_body() {
        let timers = TimerQueue::default();
        let now = Instant::now();
        let mut t = Topic::new("t", 100);
        let (a, _) = t.channel_or_create("a");
        let (b, _) = t.channel_or_create("b");
        let touched = t.publish(vec![msg(1)], Duration::ZERO, now, &timers);
        assert_eq!(touched.len(), 2);
        assert_eq!(a.borrow().depth(), 1);
        assert_eq!(b.borrow().depth(), 1);
        assert_eq!(t.message_count, 1);
        assert_eq!(t.message_bytes, 1);
    }

    #[test]
    fn paused_topic_holds_until_unpaused() {
        let timers = TimerQueue::default();
        let now = Instant::now();
        let mut t = Topic::new("t", 100);
        let (a, _) = t.channel_or_create("a");
        t.paused = true;
        t.publish(vec![msg(1)], Duration::ZERO, now, &timers);
        assert_eq!(a.borrow().depth(), 0);
        t.paused = false;
        t.release_held(now, &timers);
        assert_eq!(a.borrow().depth(), 1);
    }
}

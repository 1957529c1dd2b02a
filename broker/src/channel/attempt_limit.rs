//! A channel's limit on attempts (`--max-attempts`, or the channel's own from
//! `POST /channel/config`) and where a message goes when it reaches it.
//!
//! A message given back (REQ, with or without a delay, an in-flight timeout, or its consumer's
//! disconnect, which nsqd would let time out) whose attempts already reach the limit would exceed it on its next delivery: it leaves the channel instead
//! of going back to the queue. A limit lowered by `POST /channel/config` applies at once to
//! what waits given back ([`Channel::configure_dead_letters`]), so no delivery after the
//! answer exceeds it. It is set aside in [`DeadLetters::out`] (counted in
//! `dead_lettered_count`), and the owner shard takes it (`Channel::take_dead`) after the
//! operation or timer that gave it back: with a dead-letter topic it is published there
//! (`shard::dead_letter_routing`), without one it is dropped, as if the broker had FINished it.
//!
//! A message taken for a dead-letter topic stays owed ([`DeadLetters::sending`]) until that
//! topic's owner answers that it stored it (for a replicated one: on a majority of its
//! replicas; [`Channel::dead_stored`]): the channel's floor, its replicated position and its
//! clean-stop metadata keep it, so a crash, a failover or an answer that never comes does not
//! lose it. The owner sends it again while unanswered (`shard::dead_letter_routing`); one
//! restored at start with its attempts at the limit is set aside again rather than delivered.
//!
//! Invariants: with no limit in force (`max == 0`, the default) nothing here changes what the
//! channel does; a message set aside is in none of the channel's delivery queues, so it is
//! never delivered by this channel again (unless a restart finds it still unconfirmed and the
//! limit since raised).

use super::{Channel, Requeued};
use crate::storage::segment::Stored;
use protocol::MessageId;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A channel's dead-letter settings and what they set aside.
#[derive(Debug, Default)]
pub struct DeadLetters {
    /// The channel's own limit (`POST /channel/config`); `None`: the flag's.
    pub own_max: Option<u16>,
    /// The limit in force (0: none).
    pub max: u16,
    /// Where messages over the limit go; `None`: they are dropped.
    pub topic: Option<Arc<str>>,
    /// Messages over the limit, for the owner to take.
    pub out: Vec<Stored>,
    /// Messages taken for the dead-letter topic and not yet stored there, by seq.
    pub sending: BTreeMap<u64, Stored>,
    /// Messages that reached the limit since start (published to `topic` or dropped).
    pub count: u64,
}

impl DeadLetters {
    /// True when a limit is in force (the flag's or the channel's).
    pub fn in_force(&self) -> bool {
        self.max > 0
    }
}

impl Channel {
    /// Sets the dead-letter settings: the flag's limit (`default_max`), the channel's own
    /// (`None`: the flag's) and the dead-letter topic.
    pub fn set_dead_letters(
        &mut self,
        default_max: u16,
        own_max: Option<u16>,
        topic: Option<Arc<str>>,
    ) {
        self.dead.own_max = own_max;
        self.dead.max = own_max.unwrap_or(default_max);
        self.dead.topic = topic;
    }

    /// `POST /channel/config`: new settings (see [`Channel::set_dead_letters`]). A lower
    /// limit applies at once to what waits given back (requeued or deferred): a message whose
    /// next delivery would exceed it is set aside now, as it would be had it come back under
    /// this limit. A message in flight meets the limit when it is given back.
    pub fn configure_dead_letters(
        &mut self,
        default_max: u16,
        own_max: Option<u16>,
        topic: Option<Arc<str>>,
    ) {
        self.set_dead_letters(default_max, own_max, topic);
        let max = self.dead.max;
        if max == 0 {
            return;
        }
        for r in std::mem::take(&mut self.requeued) {
            if let Some(msg) = self.over_limit(r.msg) {
                self.requeued.push_back(Requeued {
                    after: r.after,
                    msg,
                });
            }
        }
        let over: Vec<MessageId> = self
            .deferred
            .iter()
            .filter(|(_, d)| d.msg.msg.attempts >= max)
            .map(|(id, _)| *id)
            .collect();
        for id in over {
            if let Some(d) = self.deferred.remove(&id) {
                self.deferred_order.remove(&(d.at, id));
                self.set_aside(d.msg);
            }
        }
    }

    /// The dead-letter settings and counts.
    pub fn dead_letters(&self) -> &DeadLetters {
        &self.dead
    }

    /// Sets `msg` aside when its next delivery would exceed the limit; gives it back
    /// otherwise.
    pub(super) fn over_limit(&mut self, msg: Stored) -> Option<Stored> {
        if self.dead.max == 0 || msg.msg.attempts < self.dead.max {
            return Some(msg);
        }
        self.set_aside(msg);
        None
    }

    pub(super) fn set_aside(&mut self, msg: Stored) {
        tracing::debug!(topic = %self.topic, channel = %self.name, id = %msg.msg.id,
            attempts = msg.msg.attempts, "message reached max attempts");
        self.dead.count += 1;
        self.dead.out.push(msg);
    }

    /// The messages set aside since the last call, and the dead-letter topic they go to;
    /// with one, they stay owed until [`Channel::dead_stored`].
    pub fn take_dead(&mut self) -> Option<(Vec<Stored>, Option<Arc<str>>)> {
        if self.dead.out.is_empty() {
            return None;
        }
        let out = std::mem::take(&mut self.dead.out);
        if self.dead.topic.is_some() {
            for m in &out {
                self.dead.sending.insert(m.seq, m.clone());
            }
        }
        Some((out, self.dead.topic.clone()))
    }

    /// The dead-letter topic stored the messages at these seqs: no longer owed here. Returns
    /// how many were still waiting.
    pub fn dead_stored(&mut self, seqs: &[u64]) -> usize {
        seqs.iter()
            .filter(|s| self.dead.sending.remove(s).is_some())
            .count()
    }

    /// The messages at these seqs still waiting for the dead-letter topic, and where they go
    /// now (`None`: the channel no longer sends them anywhere; they are no longer owed).
    pub fn dead_unstored(&mut self, seqs: &[u64]) -> (Vec<Stored>, Option<Arc<str>>) {
        let Some(to) = self.dead.topic.clone() else {
            for s in seqs {
                self.dead.sending.remove(s);
            }
            return (Vec::new(), None);
        };
        let msgs = seqs
            .iter()
            .filter_map(|s| self.dead.sending.get(s).cloned())
            .collect();
        (msgs, Some(to))
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use bytes::Bytes;
    use protocol::Message;

    const MAX: Duration = Duration::from_secs(900);

    fn setup(max: u16) -> (TopicLog, Rc<RefCell<Channel>>, ConsumerKey) {
        let mut log = TopicLog::in_memory("t", 1000);
        let m = Message {
            id: MessageId::from_u64(7),
            timestamp: 1,
            attempts: 0,
            body: Bytes::from_static(b"poison"),
        };
        let end = log.append(vec![m], 0);
        let ch = Channel::new(Arc::from("t"), "c", 100, 0, end);
        let key = ConsumerKey { shard: 0, conn: 1 };
        {
            let mut c = ch.borrow_mut();
            c.set_dead_letters(max, None, Some(Arc::from("t.dead")));
            subscribe(&mut c, key);
        }
        (log, ch, key)
    }

    /// Connects consumer `key` (1 s message timeout) with RDY 1.
    fn subscribe(c: &mut Channel, key: ConsumerKey) {
        let spec = ConsumerSpec {
            key,
            msg_timeout: Duration::from_secs(1),
            info: Arc::new(ClientInfo::default()),
            output_window: u64::MAX,
        };
        c.add_consumer(spec, 0).unwrap();
        c.set_rdy(key, 1);
    }

    /// Delivers what the channel has; the attempts of the delivered message, if any.
    fn deliver(c: &mut Channel, log: &TopicLog, now: Instant, timers: &TimerQueue) -> Option<u16> {
        let mut out = Deliveries::default();
        c.dispatch(log, now, MAX, timers, &mut out);
        out.first().map(|d| d.msg.attempts)
    }

    #[test]
    fn req_sets_aside_after_max_attempts() {
        let timers = TimerQueue::default();
        let (log, ch, key) = setup(3);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        for want in 1..=3 {
            assert_eq!(deliver(&mut c, &log, now, &timers), Some(want));
            let id = MessageId::from_u64(7);
            // A delayed REQ of the last attempt is set aside too, not deferred.
            let delay = Duration::from_millis(if want == 3 { 500 } else { 0 });
            c.requeue(key, id, delay, now, &timers).unwrap();
        }
        assert_eq!(deliver(&mut c, &log, now, &timers), None);
        assert_eq!(c.dead_letters().count, 1);
        let (msgs, to) = c.take_dead().unwrap();
        assert_eq!(to.as_deref(), Some("t.dead"));
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].msg.attempts, 3);
        assert_eq!(&msgs[0].msg.body[..], b"poison");
        assert!(c.take_dead().is_none());
        // Owed until the dead-letter topic stored it: the floor, the replicated position and
        // a clean stop's metadata keep it.
        assert_eq!(c.floor(), 0, "owed until stored");
        assert_eq!(c.replicated_position(10), (1, vec![0]));
        let meta = c.to_meta(true, now);
        assert_eq!(meta.pending.len(), 1);
        assert_eq!((meta.pending[0].seq, meta.pending[0].attempts), (0, 3));
        assert_eq!(
            c.dead_unstored(&[0]).0.len(),
            1,
            "sent again while unanswered"
        );
        assert_eq!(c.dead_stored(&[0]), 1);
        assert_eq!(c.dead_stored(&[0]), 0, "answered once");
        assert_eq!(c.floor(), 1, "nothing owed any more");
        assert!(c.to_meta(true, now).pending.is_empty());
    }

    #[test]
    fn one_unstored_at_a_clean_stop_is_set_aside_again_at_start() {
        let timers = TimerQueue::default();
        let (log, ch, key) = setup(1);
        let now = Instant::now();
        let meta = {
            let mut c = ch.borrow_mut();
            assert_eq!(deliver(&mut c, &log, now, &timers), Some(1));
            c.requeue(key, MessageId::from_u64(7), Duration::ZERO, now, &timers)
                .unwrap();
            assert_eq!(c.take_dead().map(|(m, _)| m.len()), Some(1));
            c.to_meta(true, now)
        };
        let again = Channel::new(Arc::from("t"), "c", 100, 0, log.head());
        let mut a = again.borrow_mut();
        a.set_dead_letters(1, None, None);
        assert_eq!(a.restore(&meta, true, &log, now, &timers), 1);
        let (msgs, to) = a.take_dead().expect("set aside again, not delivered");
        assert_eq!((msgs.len(), to.as_deref()), (1, Some("t.dead")));
        subscribe(&mut a, key);
        assert_eq!(deliver(&mut a, &log, now, &timers), None);
    }

    #[test]
    fn timeouts_set_aside_after_max_attempts() {
        let timers = TimerQueue::default();
        let (log, ch, _) = setup(2);
        let mut c = ch.borrow_mut();
        let mut now = Instant::now();
        for want in 1..=2 {
            assert_eq!(deliver(&mut c, &log, now, &timers), Some(want));
            now += Duration::from_secs(2);
            c.on_timer(TimerKind::InFlight, now, now, &timers);
        }
        assert_eq!(deliver(&mut c, &log, now, &timers), None);
        assert_eq!(c.timeout_count, 2);
        assert_eq!(c.take_dead().map(|(m, _)| m.len()), Some(1));
    }

    #[test]
    fn a_disconnect_counts_as_a_timeout() {
        let timers = TimerQueue::default();
        let (log, ch, key) = setup(1);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        assert_eq!(deliver(&mut c, &log, now, &timers), Some(1));
        c.remove_consumer(key);
        assert_eq!(c.take_dead().map(|(m, _)| m.len()), Some(1));
        assert_eq!(c.dead_stored(&[0]), 1);
        assert_eq!(c.floor(), 1);
    }

    /// A lower limit set while messages wait given back applies to them at once: no
    /// delivery after the setting exceeds it. One in flight meets it when given back.
    #[test]
    fn a_lower_limit_sets_aside_what_waits_at_once() {
        let timers = TimerQueue::default();
        let (log, ch, key) = setup(0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        let id = MessageId::from_u64(7);
        for want in 1..=3 {
            assert_eq!(deliver(&mut c, &log, now, &timers), Some(want));
            c.requeue(key, id, Duration::ZERO, now, &timers).unwrap();
        }
        // Requeued after its third delivery; the limit drops to 2.
        c.configure_dead_letters(0, Some(2), None);
        assert_eq!(deliver(&mut c, &log, now, &timers), None);
        assert_eq!(c.take_dead().map(|(m, _)| m[0].msg.attempts), Some(3));
        // Deferred after its second delivery; the limit drops to 2.
        let (log, ch, key) = setup(0);
        let mut d = ch.borrow_mut();
        for want in 1..=2 {
            assert_eq!(deliver(&mut d, &log, now, &timers), Some(want));
            d.requeue(key, id, Duration::from_secs(5), now, &timers)
                .unwrap();
            let due = now + Duration::from_secs(5);
            if want == 1 {
                d.on_timer(TimerKind::Deferred, due, due, &timers);
            }
        }
        d.configure_dead_letters(0, Some(2), None);
        assert_eq!(d.figures(&log, 0).deferred, 0);
        assert_eq!(d.take_dead().map(|(m, _)| m.len()), Some(1));
        // In flight after its first delivery; the limit drops to 1: set aside when given back.
        let (log, ch, key) = setup(0);
        let mut e = ch.borrow_mut();
        assert_eq!(deliver(&mut e, &log, now, &timers), Some(1));
        e.configure_dead_letters(0, Some(1), None);
        assert!(e.take_dead().is_none(), "nothing waits");
        e.requeue(key, id, Duration::ZERO, now, &timers).unwrap();
        assert_eq!(e.take_dead().map(|(m, _)| m.len()), Some(1));
    }

    #[test]
    fn no_limit_changes_nothing() {
        let timers = TimerQueue::default();
        let (log, ch, key) = setup(0);
        let mut c = ch.borrow_mut();
        let now = Instant::now();
        for want in 1..=10 {
            assert_eq!(deliver(&mut c, &log, now, &timers), Some(want));
            c.requeue(key, MessageId::from_u64(7), Duration::ZERO, now, &timers)
                .unwrap();
        }
        assert!(c.take_dead().is_none());
        assert!(!c.dead_letters().in_force());
        // The channel's own limit wins over the flag's; None goes back to it.
        c.set_dead_letters(0, Some(4), None);
        assert_eq!(c.dead_letters().max, 4);
        c.set_dead_letters(5, None, None);
        assert_eq!(c.dead_letters().max, 5);
    }
}

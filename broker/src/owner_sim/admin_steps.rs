//! The simulation's admin operations, as the HTTP API has the owner carry them out: channel
//! create, create in the past (`/channel/create?from=`), delete, empty, pause, rewind and max
//! attempts (`/channel/config`), each with what the model expects of it from then on.

use super::{Owes, Sim, SimChannel};
use crate::topic::ChannelRef;
use protocol::MessageId;
use std::collections::BTreeSet;

/// How far before a channel's cursor a rewind goes at most.
const REWIND_BACK: u64 = 64;

impl Sim {
    pub(super) fn create_channel(&mut self) {
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
            max_attempts: self.topic.max_attempts,
            ..SimChannel::default()
        };
        self.channels.insert(name, sim);
    }

    pub(super) fn delete_channel(&mut self) {
        let Some(name) = self.some_channel() else {
            return;
        };
        if self.topic.remove_channel(&name).is_none() {
            self.fail(format!("delete of {name}: no such channel"));
        }
        self.channels.remove(&name);
        self.consumers.retain(|c| c.channel != name);
    }

    /// Drops what the channel waits to deliver, and what it has in flight once that delivery
    /// ends otherwise than by FIN: none of it is delivered again.
    pub(super) fn empty_channel(&mut self) {
        let Some(name) = self.some_channel() else {
            return;
        };
        let ch = self.channel(&name);
        let audit = match ch.borrow().audit(&self.topic.log.borrow()) {
            Ok(a) => a,
            Err(e) => self.fail(e),
        };
        ch.borrow_mut().empty();
        let held = self.held_on(&name);
        for c in self.consumers.iter_mut().filter(|c| c.channel == name) {
            for h in c.held.values_mut() {
                h.owed = Owes::Dropped;
            }
        }
        let floor = ch.borrow().floor();
        let sim = self.sim_channel(&name);
        for id in audit
            .waiting
            .iter()
            .chain(&audit.requeued)
            .chain(&audit.deferred)
        {
            if !held.contains(id) {
                sim.expected.remove(id);
            }
        }
        sim.replay.clear();
        // The floor may drop below nothing owed: it restarts from here.
        sim.floor = floor;
    }

    pub(super) fn pause_channel(&mut self) {
        let Some(name) = self.some_channel() else {
            return;
        };
        let ch = self.channel(&name);
        let paused = !ch.borrow().paused;
        ch.borrow_mut().paused = paused;
        if !paused {
            self.dispatch(&ch);
        }
    }

    /// A position a rewind may go to (the log holds it), picked at random near `around`:
    /// mostly a little before it, sometimes past it. (Far back, the backlog each step's
    /// audit walks grows with the log.)
    fn some_position(&mut self, around: u64) -> Option<u64> {
        let (oldest, head) = {
            let log = self.topic.log.borrow();
            (log.history().oldest_offset, log.head())
        };
        let around = around.clamp(oldest, head);
        let seq = if self.rng.below(4) == 0 {
            around + self.rng.below(head - around + 1)
        } else {
            around - self.rng.below((around - oldest).min(REWIND_BACK) + 1)
        };
        self.topic.log.borrow().holds(seq).then_some(seq)
    }

    /// `POST /channel/rewind`: every message from the position on is owed again, fresh;
    /// what lies before it is done unless in flight, which finishes normally.
    pub(super) fn rewind_channel(&mut self) {
        let Some(name) = self.some_channel() else {
            return;
        };
        let ch = self.channel(&name);
        let cursor = ch.borrow().cursor();
        let Some(seq) = self.some_position(cursor) else {
            return;
        };
        self.topic.rewind_channel(&ch, seq);
        let held = self.held_on(&name);
        let again: Vec<MessageId> = self.log_ids[seq as usize..].to_vec();
        let before: Vec<MessageId> = {
            let sim = self.sim_channel(&name);
            sim.expected.iter().copied().collect()
        };
        let before: Vec<MessageId> = before
            .into_iter()
            .filter(|id| self.seq_of(*id) < seq)
            .collect();
        let mut restored = Vec::new();
        for c in self.consumers.iter_mut().filter(|c| c.channel == name) {
            for (id, h) in c.held.iter_mut() {
                let at = self.seqs.get(id).copied().unwrap_or(0);
                if at >= seq {
                    h.owed = Owes::Replayed;
                } else if h.owed == Owes::Replayed {
                    h.owed = Owes::Message;
                    restored.push((*id, h.attempts));
                }
            }
        }
        let floor = ch.borrow().floor();
        let sim = self.sim_channel(&name);
        for id in before {
            sim.replay.remove(&id);
            if !held.contains(&id) {
                sim.expected.remove(&id);
            }
        }
        for (id, attempts) in restored {
            sim.attempts.insert(id, attempts);
        }
        for id in again {
            sim.expected.insert(id);
            sim.finished.remove(&id);
            sim.replay.insert(id);
            sim.attempts.insert(id, 0);
        }
        sim.floor = floor;
        self.dispatch(&ch);
    }

    /// `POST /channel/create?from=`: a new channel owing everything from the position on.
    pub(super) fn create_channel_from(&mut self) {
        if self.channels.len() >= 4 {
            return;
        }
        let name = format!("c{}", self.rng.below(6));
        if self.topic.channel(&name).is_some() {
            return;
        }
        let head = self.topic.log.borrow().head();
        let Some(seq) = self.some_position(head) else {
            return;
        };
        let (ch, _) = self.topic.channel_or_create(&name);
        self.topic.rewind_channel(&ch, seq);
        let owed: BTreeSet<MessageId> = self.log_ids[seq as usize..].iter().copied().collect();
        let sim = SimChannel {
            expected: owed.clone(),
            replay: owed,
            floor: ch.borrow().floor(),
            max_attempts: self.topic.max_attempts,
            ..SimChannel::default()
        };
        self.channels.insert(name, sim);
    }

    /// `POST /channel/config` with `max_attempts`: its own limit, or back to the topic's.
    pub(super) fn configure_channel(&mut self) {
        let Some(name) = self.some_channel() else {
            return;
        };
        let own = match self.rng.below(5) {
            0 => None,
            k => Some([0, 1, 2, 4][k as usize - 1]),
        };
        let default = self.topic.max_attempts;
        let ch = self.channel(&name);
        ch.borrow_mut().configure_dead_letters(default, own, None);
        self.sim_channel(&name).max_attempts = own.unwrap_or(default);
        self.collect_dead(&name, &ch);
    }

    /// What `ch` set aside over max attempts: each was given back (or held, for a lowered
    /// limit) after a delivery that reached the limit in force; it is owed no more.
    pub(super) fn collect_dead(&mut self, name: &str, ch: &ChannelRef) {
        let Some((msgs, _)) = ch.borrow_mut().take_dead() else {
            return;
        };
        let sim = self.sim_channel(name);
        let max = sim.max_attempts;
        let mut wrong = None;
        for s in msgs {
            let id = s.msg.id;
            let last = sim.attempts.get(&id).copied().unwrap_or(0);
            if max == 0 || s.msg.attempts < max || s.msg.attempts != last {
                wrong = Some(format!(
                    "{id:?} set aside with attempts {} (its last delivery's {last}), max attempts {max}",
                    s.msg.attempts
                ));
            } else if sim.replay.contains(&id) || !sim.expected.remove(&id) {
                wrong = Some(format!(
                    "{id:?} set aside, but it was not owed as given back"
                ));
            }
        }
        if let Some(wrong) = wrong {
            self.fail(wrong);
        }
    }

    /// The messages the consumers of channel `name` hold.
    pub(super) fn held_on(&self, name: &str) -> BTreeSet<MessageId> {
        self.consumers
            .iter()
            .filter(|c| c.channel == name)
            .flat_map(|c| c.held.keys().copied())
            .collect()
    }
}

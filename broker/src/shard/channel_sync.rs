//! Channel state of replicated topics, from each topic's leader to its followers, on the
//! shard's replication connections (`Forward::Channel`).
//!
//! - The leader, every [`SEND_EVERY`], sends each channel's position (its cursor and what it
//!   still owes below it, `Channel::replicated_position`) and pause state when they changed
//!   since last sent, everything again every [`RESEND_EVERY`] (a follower that restarted or
//!   missed a message catches up), and a deletion once for a channel gone.
//! - A follower applies what its topic's current leader sends, and nothing from any other
//!   broker: a position creates the channel if needed (registered with the lookups) and
//!   moves it there (`Channel::take_position`); its channels deliver nothing while it follows,
//!   and from those positions once it leads. A follower's checkpoints then release what every
//!   channel's position passed, as the leader's do.
//!
//! Invariants: positions only ever describe what the leader's channels finished, so a
//! follower skips nothing its leader still owes (messages finished on the leader after the
//! last position come again after a failover: at-least-once, bounded by [`SEND_EVERY`] of
//! finishes); `#ephemeral` channels are not replicated; nothing here runs for a topic that is
//! not replicated.

use super::Shard;
use crate::mailbox::RegistryOp;
use crate::replication::replicas::now_ms;
use crate::topic::Topic;
use replication::ids::BrokerId;
use replication::replica::Millis;
use replication::wire::{ChannelOp, Forward, MAX_OWED};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use tracing::{debug, info};

/// How often a leader sends the positions that changed.
pub(super) const SEND_EVERY: Millis = 100;
/// How often a leader sends every position, changed or not.
const RESEND_EVERY: Millis = 1_000;

/// What a leader last sent of one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    cursor: u64,
    owed: Vec<u64>,
    paused: bool,
}

/// What a leader last sent of one topic's channels.
#[derive(Debug, Default)]
pub(super) struct TopicPositions {
    channels: HashMap<String, Sent>,
    sent_at: Millis,
    resent_at: Millis,
}

impl Shard {
    /// The leader's side, from the replicas' timer: for each topic this shard leads, what
    /// changed since [`SEND_EVERY`] ago goes to its followers.
    pub(super) fn send_channel_positions(&self, topics: &[Rc<RefCell<Topic>>]) {
        let (Some(peers), Some(status)) = (self.repl.peers(), &self.config.cluster) else {
            return;
        };
        let me = BrokerId(status.identity.broker_id);
        let now = now_ms();
        let mut held = self.repl.positions.borrow_mut();
        for t in topics {
            let tb = t.borrow();
            let Some(r) = tb.replica.as_ref() else {
                continue;
            };
            let followers: Vec<BrokerId> = match (r.replica.leading(), &r.controller) {
                (Some(_), Some(state)) => state
                    .replicas
                    .iter()
                    .copied()
                    .filter(|&b| b != me)
                    .collect(),
                _ => {
                    held.remove(tb.name.as_ref());
                    continue;
                }
            };
            let sent = held.entry(tb.name.to_string()).or_default();
            if now.saturating_sub(sent.sent_at) < SEND_EVERY {
                continue;
            }
            sent.sent_at = now;
            let all = now.saturating_sub(sent.resent_at) >= RESEND_EVERY;
            if all {
                sent.resent_at = now;
            }
            let mut ops: Vec<(String, ChannelOp)> = Vec::new();
            for ch in tb.channels() {
                let c = ch.borrow();
                if c.ephemeral {
                    continue;
                }
                let (cursor, owed) = c.replicated_position(MAX_OWED);
                let now_state = Sent {
                    cursor,
                    owed,
                    paused: c.paused,
                };
                let before = sent.channels.get(c.name.as_ref());
                if all || before.is_none_or(|b| b.paused != now_state.paused) {
                    ops.push((c.name.to_string(), ChannelOp::Paused(now_state.paused)));
                }
                if all || before.is_none_or(|b| b.cursor != cursor || b.owed != now_state.owed) {
                    ops.push((
                        c.name.to_string(),
                        ChannelOp::Position {
                            cursor,
                            owed: now_state.owed.clone(),
                        },
                    ));
                }
                sent.channels.insert(c.name.to_string(), now_state);
            }
            let gone: Vec<String> = sent
                .channels
                .keys()
                .filter(|n| tb.channel(n).is_none())
                .cloned()
                .collect();
            for name in gone {
                sent.channels.remove(&name);
                ops.push((name, ChannelOp::Deleted));
            }
            for (channel, op) in ops {
                for &to in &followers {
                    // Without a connection it is sent again with everything, within a second.
                    let _ = peers.send_forward(
                        to,
                        Forward::Channel {
                            topic: tb.name.to_string(),
                            channel: channel.clone(),
                            op: op.clone(),
                        },
                    );
                }
            }
        }
    }

    /// The follower's side: a channel operation from `from`, applied when `from` leads the
    /// topic this broker follows.
    pub(super) fn apply_channel_op(&self, from: BrokerId, topic: &str, name: &str, op: ChannelOp) {
        let Some(t) = self.repl.topics.borrow().get(topic).cloned() else {
            return;
        };
        let follows = t
            .borrow()
            .replica
            .as_ref()
            .is_some_and(|r| r.replica.following() == Some(from));
        if !follows {
            debug!(
                topic,
                channel = name,
                from = from.0,
                "replication: a channel operation from a broker this one does not follow; ignored"
            );
            return;
        }
        match op {
            ChannelOp::Created => {
                self.channel_from_leader(&t, topic, name);
            }
            ChannelOp::Position { cursor, owed } => {
                let ch = self.channel_from_leader(&t, topic, name);
                ch.borrow_mut().take_position(cursor, &owed);
                self.note_meta_change(&t);
            }
            ChannelOp::Paused(paused) => {
                let ch = self.channel_from_leader(&t, topic, name);
                if ch.borrow().paused != paused {
                    ch.borrow_mut().paused = paused;
                    info!(
                        topic,
                        channel = name,
                        paused,
                        "channel pause state taken from its leader"
                    );
                    self.note_meta_change(&t);
                }
            }
            ChannelOp::Deleted => {
                let Some(ch) = t.borrow_mut().remove_channel(name) else {
                    return;
                };
                self.close_consumers(&ch);
                info!(topic, channel = name, "channel deleted by its leader");
                self.report(RegistryOp::Unregister, topic, Some(name));
                self.note_meta_change(&t);
            }
            // A rewind reaches followers as the position it leads to.
            ChannelOp::Rewound { .. } => {}
        }
    }

    /// The follower's channel `name`, created (and registered) if new.
    fn channel_from_leader(
        &self,
        t: &Rc<RefCell<Topic>>,
        topic: &str,
        name: &str,
    ) -> crate::topic::ChannelRef {
        let (ch, created) = t.borrow_mut().channel_or_create(name);
        if created {
            info!(topic, channel = name, "channel created from its leader's");
            self.report(RegistryOp::Register, topic, Some(name));
            self.note_meta_change(t);
        }
        ch
    }
}

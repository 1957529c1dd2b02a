//! Topic and channel state of replicated topics, between each topic's leader and its
//! followers, on the shard's replication connections (`Forward::Topic`, `Forward::Channel`).
//!
//! - The leader, every [`SEND_EVERY`], sends the topic's settings (pause, retention), each
//!   channel's position (its cursor and what it still owes below it,
//!   `Channel::replicated_position`), pause state and dead-letter settings when they changed
//!   since last sent, everything again every [`RESEND_EVERY`] (a follower that restarted or
//!   missed a message catches up), and a deletion once for a channel gone.
//! - A follower applies what its topic's current leader sends, and nothing from any other
//!   broker: a position creates the channel if needed (registered with the lookups) and
//!   moves it there (`Channel::take_position`); its channels deliver nothing while it follows,
//!   and from those positions once it leads. A follower's checkpoints then release what every
//!   channel's position passed, as the leader's do.
//! - What an operator or a consumer changes on a follower (a channel created by SUB or
//!   `/channel/create`, deleted, paused, its dead-letter settings; the topic paused, its
//!   retention) is applied there and sent to the leader ([`Shard::tell_leader`]), which takes it
//!   from any replica of the topic and sends it back to every follower as its own: the
//!   leader's state is the topic's, and a change made on a follower is not undone by the
//!   leader's next resend once the leader has it.
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
use replication::wire::{ChannelOp, Forward, TopicConfig, MAX_OWED};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
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
    /// Its own max attempts and dead-letter topic.
    dead_letters: (Option<u16>, Option<Arc<str>>),
}

/// What a leader last sent of one topic's channels.
#[derive(Debug, Default)]
pub(super) struct TopicPositions {
    topic: Option<TopicConfig>,
    channels: HashMap<String, Sent>,
    /// The seq the next dead-letter records sent start from; `None`: none sent since this
    /// replica took the lead.
    dead_letters: Option<u64>,
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
            let config = topic_config(&tb);
            if all || sent.topic.as_ref() != Some(&config) {
                for &to in &followers {
                    let _ = peers.send_forward(
                        to,
                        Forward::Topic {
                            topic: tb.name.to_string(),
                            config: config.clone(),
                        },
                    );
                }
                sent.topic = Some(config);
            }
            self.send_dead_letter_records(&tb, &followers, &mut sent.dead_letters, all);
            let mut ops: Vec<(String, ChannelOp)> = Vec::new();
            for ch in tb.channels() {
                let c = ch.borrow();
                if c.ephemeral {
                    continue;
                }
                let (cursor, owed) = c.replicated_position(MAX_OWED);
                let dl = c.dead_letters();
                let now_state = Sent {
                    cursor,
                    owed,
                    paused: c.paused,
                    dead_letters: (dl.own_max, dl.topic.clone()),
                };
                let before = sent.channels.get(c.name.as_ref());
                if all || before.is_none_or(|b| b.paused != now_state.paused) {
                    ops.push((c.name.to_string(), ChannelOp::Paused(now_state.paused)));
                }
                if all || before.is_none_or(|b| b.dead_letters != now_state.dead_letters) {
                    ops.push((c.name.to_string(), config_op(&now_state.dead_letters)));
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

    /// Who `from` is to this broker's replica of `t`: its leader (everything it sends is
    /// applied), a follower while this replica leads (what an operator or consumer changed
    /// there is applied), or neither (ignored).
    fn peer_role(&self, t: &Rc<RefCell<Topic>>, from: BrokerId) -> Option<Sender> {
        let tb = t.borrow();
        let r = tb.replica.as_ref()?;
        if r.replica.following() == Some(from) {
            return Some(Sender::Leader);
        }
        let member = r
            .controller
            .as_ref()
            .is_some_and(|s| s.replicas.contains(&from));
        (r.replica.leading().is_some() && member).then_some(Sender::Follower)
    }

    /// A topic's settings from `from`: its leader's, or a change made on a follower.
    pub(super) fn apply_topic_config(&self, from: BrokerId, topic: &str, config: TopicConfig) {
        let Some(t) = self.repl.topics.borrow().get(topic).cloned() else {
            return;
        };
        let Some(sender) = self.peer_role(&t, from) else {
            debug!(topic, from = from.0, "replication: topic settings from a broker that is neither its leader nor its follower; ignored");
            return;
        };
        if topic_config(&t.borrow()) == config {
            return;
        }
        self.set_topic_paused(&t, config.paused);
        {
            let mut tb = t.borrow_mut();
            let default = tb.retention_default();
            tb.set_retention(default, config.retention_time_ns, config.retention_bytes);
        }
        self.note_meta_change(&t);
        info!(topic, paused = config.paused, retention_time_ns = ?config.retention_time_ns, retention_bytes = ?config.retention_bytes, from = ?sender, "topic settings taken from a replica");
    }

    /// A channel operation from `from`: everything its leader sends; from a follower while this
    /// replica leads, what an operator or consumer changed there (never a position).
    pub(super) fn apply_channel_op(&self, from: BrokerId, topic: &str, name: &str, op: ChannelOp) {
        let Some(t) = self.repl.topics.borrow().get(topic).cloned() else {
            return;
        };
        let sender = self.peer_role(&t, from);
        let applies = match (sender, &op) {
            (Some(Sender::Leader), _) => true,
            (Some(Sender::Follower), ChannelOp::Position { .. } | ChannelOp::Rewound { .. }) => {
                false
            }
            (Some(Sender::Follower), _) => true,
            (None, _) => false,
        };
        if !applies {
            debug!(
                topic,
                channel = name,
                from = from.0,
                ?sender,
                "replication: a channel operation this replica does not take from that broker; ignored"
            );
            return;
        }
        match op {
            ChannelOp::Created => {
                self.channel_from_replica(&t, topic, name);
            }
            ChannelOp::Position { cursor, owed } => {
                let ch = self.channel_from_replica(&t, topic, name);
                ch.borrow_mut().take_position(cursor, &owed);
                self.note_meta_change(&t);
            }
            ChannelOp::Paused(paused) => {
                let ch = self.channel_from_replica(&t, topic, name);
                if ch.borrow().paused != paused {
                    self.set_channel_paused(&ch, paused);
                    info!(
                        topic,
                        channel = name,
                        paused,
                        ?sender,
                        "channel pause state taken from a replica"
                    );
                    self.note_meta_change(&t);
                }
            }
            ChannelOp::Config {
                max_attempts,
                dead_letter_topic,
            } => {
                let ch = self.channel_from_replica(&t, topic, name);
                let to = dead_letter_topic.map(|s| Arc::from(s.as_str()));
                let same = {
                    let c = ch.borrow();
                    c.dead_letters().own_max == max_attempts && c.dead_letters().topic == to
                };
                if !same {
                    info!(topic, channel = name, ?max_attempts, dead_letter_topic = ?to, ?sender, "channel dead letters taken from a replica");
                    self.set_channel_dead_letters(&t, &ch, max_attempts, to);
                }
            }
            ChannelOp::Deleted => {
                let Some(ch) = t.borrow_mut().remove_channel(name) else {
                    return;
                };
                self.close_consumers(&ch);
                info!(
                    topic,
                    channel = name,
                    ?sender,
                    "channel deleted by a replica"
                );
                self.report(RegistryOp::Unregister, topic, Some(name));
                self.note_meta_change(&t);
            }
            // A rewind reaches followers as the position it leads to.
            ChannelOp::Rewound { .. } => {}
        }
    }

    /// On a follower of `t`: tells its leader what an operator or a consumer changed here
    /// (`op` for channel `channel`, or the topic's settings when `channel` is `None`). Not
    /// sent without a connection: the leader's next resend then undoes the change here.
    pub(super) fn tell_leader(&self, t: &Rc<RefCell<Topic>>, change: Option<(&str, ChannelOp)>) {
        let (Some(peers), Some(leader)) = (
            self.repl.peers(),
            t.borrow()
                .replica
                .as_ref()
                .and_then(|r| r.replica.following()),
        ) else {
            return;
        };
        let topic = t.borrow().name.to_string();
        let f = match change {
            Some((channel, _)) if protocol::names::is_ephemeral(channel) => return,
            Some((channel, op)) => Forward::Channel {
                topic,
                channel: channel.to_owned(),
                op,
            },
            None => Forward::Topic {
                config: topic_config(&t.borrow()),
                topic,
            },
        };
        if let Err(e) = peers.send_forward(leader, f) {
            debug!(
                leader = leader.0,
                "replication: a change made here not sent to the leader: {e}"
            );
        }
    }

    /// Pauses or unpauses `t` (its held messages go out on unpause).
    pub(super) fn set_topic_paused(&self, t: &Rc<RefCell<Topic>>, paused: bool) {
        if t.borrow().paused == paused {
            return;
        }
        if paused {
            t.borrow_mut().paused = true;
            return;
        }
        let touched = {
            let mut tb = t.borrow_mut();
            tb.paused = false;
            tb.release_held(Instant::now(), &self.timers)
        };
        for ch in &touched {
            self.dispatch(ch);
        }
    }

    /// Pauses or unpauses channel `ch`.
    pub(super) fn set_channel_paused(&self, ch: &crate::topic::ChannelRef, paused: bool) {
        ch.borrow_mut().paused = paused;
        if !paused {
            self.dispatch(ch);
        }
    }

    /// Channel `ch`'s own max attempts and dead-letter topic; what a lower limit sets aside
    /// goes at once, as after a REQ.
    pub(super) fn set_channel_dead_letters(
        &self,
        t: &Rc<RefCell<Topic>>,
        ch: &crate::topic::ChannelRef,
        own: Option<u16>,
        to: Option<Arc<str>>,
    ) {
        let default = t.borrow().max_attempts;
        ch.borrow_mut().configure_dead_letters(default, own, to);
        self.send_dead_letters(ch);
        self.note_meta_change(t);
    }

    /// The channel `name` a replica names, created (and registered) if new.
    fn channel_from_replica(
        &self,
        t: &Rc<RefCell<Topic>>,
        topic: &str,
        name: &str,
    ) -> crate::topic::ChannelRef {
        let (ch, created) = t.borrow_mut().channel_or_create(name);
        if created {
            info!(topic, channel = name, "channel created from a replica's");
            self.report(RegistryOp::Register, topic, Some(name));
            self.note_meta_change(t);
            // As on SUB: what the topic held waits no longer.
            let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
            for c in &touched {
                self.dispatch(c);
            }
        }
        ch
    }
}

/// Who sent a replica's topic or channel state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    /// The leader this replica follows.
    Leader,
    /// A follower of the topic this replica leads.
    Follower,
}

/// The settings of `t` that carry over.
fn topic_config(t: &Topic) -> TopicConfig {
    TopicConfig {
        paused: t.paused,
        retention_time_ns: t.retention_time_ns,
        retention_bytes: t.retention_bytes,
    }
}

/// A channel's dead-letter settings as the operation that sets them.
fn config_op(dead_letters: &(Option<u16>, Option<Arc<str>>)) -> ChannelOp {
    ChannelOp::Config {
        max_attempts: dead_letters.0,
        dead_letter_topic: dead_letters.1.as_deref().map(str::to_owned),
    }
}

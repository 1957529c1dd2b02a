//! The owner's side of replay: `POST /channel/rewind` and `POST /channel/create` with
//! `from=` ([`crate::admin_ops::AdminOp::Rewind`]). The position is resolved on the log
//! (`earliest`: the oldest record kept; a time: [`seek_time`], which may read segment blocks
//! through the fetch path, in a task of its own so the shard never waits), then checked against
//! what the log still holds, and the channel moved there in one synchronous step
//! ([`Channel::rewind`](crate::channel::Channel::rewind)). The answer waits until the topic's
//! `meta.json` holds the new cursor: a rewind answered survives a crash and a restart with
//! another `--shards` (the metadata lives in the topic's directory, whichever shard owns it).
//!
//! A dry run (`dry_run`, `POST /channel/rewind?...&dry_run=true`) resolves and checks the
//! position the same way, then answers [`AdminResult::RewindPlan`] (the position, and the
//! messages from there up to the channel's cursor, which the rewind would deliver again)
//! without moving anything.
//!
//! Invariant: a channel is only ever moved to a seq the log still holds (`TopicLog::holds`,
//! checked on the owner's thread right before the move); from then on the channel's floor
//! keeps it there (retention never deletes what a channel owes).

use super::Shard;
use crate::admin_ops::{AdminResult, Failure, Refusal, RewindTo};
use crate::mailbox::{RegistryOp, Reply, ReplyTo};
use crate::storage::log::{seek_time, History, Seek};
use crate::topic::Topic;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use tracing::info;

/// The refusal of a position before the history, saying how far back it goes.
fn before_history(h: History) -> AdminResult {
    AdminResult::Refused(Refusal::BeforeHistory {
        oldest_offset: h.oldest_offset,
        oldest_timestamp: h.oldest_timestamp,
    })
}

/// How a rewind moves its channel.
#[derive(Debug, Clone, Copy)]
struct Move {
    /// A new channel, started at the position.
    create: bool,
    /// Nothing moved: only what the rewind would deliver again is answered.
    dry_run: bool,
}

impl Shard {
    /// `AdminOp::Rewind`; `None` when the answer comes later (a time being looked for, or
    /// the metadata being written).
    pub(crate) fn rewind_channel(
        &self,
        topic: String,
        channel: String,
        to: RewindTo,
        create: bool,
        dry_run: bool,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        let move_to = Move { create, dry_run };
        let t = match self.replay_target(&topic, &channel, create) {
            Ok(t) => t,
            Err(refused) => return Some(refused),
        };
        let seq = match to {
            RewindTo::Earliest => t.borrow().log.borrow().history().oldest_offset,
            RewindTo::Offset(seq) => seq,
            RewindTo::Timestamp(ns) => {
                let Some(me) = self.me.upgrade() else {
                    return Some(AdminResult::Failed(Failure::Stopping));
                };
                let log = t.borrow().log.clone();
                glommio::spawn_local(async move {
                    let answer = match seek_time(&log, ns).await {
                        Seek::At(seq) => me.rewind_to(&topic, &channel, seq, move_to, reply),
                        Seek::BeforeHistory(h) => Some(before_history(h)),
                    };
                    if let Some(answer) = answer {
                        me.reply(reply, Reply::Admin(answer));
                    }
                })
                .detach();
                return None;
            }
        };
        self.rewind_to(&topic, &channel, seq, move_to, reply)
    }

    /// The topic of a replay, if the channel may be moved (or created from the past).
    fn replay_target(
        &self,
        topic: &str,
        channel: &str,
        create: bool,
    ) -> Result<Rc<RefCell<Topic>>, AdminResult> {
        let Some(t) = self.topics.borrow().get(topic).cloned() else {
            return Err(AdminResult::TopicNotFound);
        };
        let refuse = |why| Err(AdminResult::Refused(why));
        if t.borrow().ephemeral || !t.borrow().log.borrow().is_persistent() {
            return refuse(Refusal::EphemeralTopicReplay);
        }
        if protocol::names::is_ephemeral(channel) {
            return refuse(Refusal::EphemeralChannelReplay);
        }
        let exists = t.borrow().channel(channel).is_some();
        match (exists, create) {
            (false, false) => Err(AdminResult::ChannelNotFound),
            (true, true) => refuse(Refusal::ChannelExists),
            _ => Ok(t),
        }
    }

    /// Moves (or creates) the channel at `seq`, if the log still holds it; answered once the
    /// topic's metadata holds it. A dry run answers what the move would redeliver instead.
    fn rewind_to(
        &self,
        topic: &str,
        channel: &str,
        seq: u64,
        Move { create, dry_run }: Move,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        // Again: a time was being looked for meanwhile.
        let t = match self.replay_target(topic, channel, create) {
            Ok(t) => t,
            Err(refused) => return Some(refused),
        };
        {
            let tb = t.borrow();
            let log = tb.log.borrow();
            if !log.holds(seq) {
                if seq > log.head() {
                    return Some(AdminResult::Refused(Refusal::PastEnd { head: log.head() }));
                }
                return Some(before_history(log.history()));
            }
            if dry_run {
                let cursor = tb
                    .channel(channel)
                    .map(|c| c.borrow().position(&log).offset);
                return Some(AdminResult::RewindPlan {
                    offset: seq,
                    redelivered: cursor.unwrap_or(seq).saturating_sub(seq),
                });
            }
        }
        let ch = if create {
            let (ch, _) = t.borrow_mut().channel_or_create(channel);
            info!(
                topic,
                channel,
                shard = self.id,
                offset = seq,
                "channel created from the past"
            );
            self.report(RegistryOp::Register, topic, Some(channel));
            let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
            for c in &touched {
                self.dispatch(c);
            }
            ch
        } else {
            let Some(ch) = t.borrow().channel(channel) else {
                return Some(AdminResult::ChannelNotFound);
            };
            ch
        };
        t.borrow().rewind_channel(&ch, seq);
        self.note_meta_change(&t);
        self.dispatch(&ch);
        self.answer_when_meta_saved(&t, reply)
    }
}

//! The owner's side of dead letters.
//!
//! - Sending: after an operation or a timer that gave messages back, the owner of their
//!   topic takes what its channels set aside over max attempts ([`Shard::send_dead_letters`])
//!   and publishes it to the channel's dead-letter topic through the ordinary publish path
//!   (`Mail::Publish` to that topic's owner, here or on another shard; for a replicated one,
//!   on to its leader), with each message's origin (`Mail::Publish::origins`), already
//!   acknowledged (`acked`: stored even while the owner's storage fails). The channel owes
//!   them until the answer says they are stored ([`Shard::dead_letters_answered`]); a refusal,
//!   or no answer within [`DEAD_LETTER_RETRY`], sends them again
//!   ([`Shard::resend_dead_letters`], every second): a dead letter may be stored twice, never
//!   lost. Without a dead-letter topic the messages are dropped, as a FIN would. Either way
//!   the origin topic is checkpointed promptly, so a crash does not deliver them again.
//! - Receiving: the dead-letter topic's owner stores the bodies as new messages (new IDs,
//!   attempts 0: IDs are unique per topic, and two channels may give up on the same message)
//!   and records each one's origin with the topic ([`Shard::record_dead_letters`]), persisted
//!   in its `meta.json` at the next checkpoint.
//! - The HTTP API's channel settings (`POST /channel/config`), origin listing
//!   (`GET /dead_letters`) and redrive (`POST /topic/redrive`, reading bodies back from the
//!   dead-letter topic's log without waiting: blocks on disk are fetched and the caller asks
//!   again).

use super::Shard;
use crate::admin_ops::{AdminResult, RedriveBatch};
use crate::mailbox::{Mail, Reply, ReplyTo};
use crate::storage::log::{DiskHint, Read};
use crate::topic::{ChannelRef, DeadOrigin, Topic};
use bytes::Bytes;
use protocol::MessageId;
use replication::wire::ChannelOp;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How long dead letters wait for their topic's answer before they are sent again.
pub(super) const DEAD_LETTER_RETRY: Duration = Duration::from_secs(10);

/// Dead letters sent to their topic's owner and not answered yet.
#[derive(Debug)]
pub(crate) struct DeadSend {
    topic: Arc<str>,
    channel: Arc<str>,
    /// Their seqs in `topic`.
    seqs: Vec<u64>,
    /// When they were sent; `None`: refused, to send again.
    sent: Option<Instant>,
}

/// Dead letters one redrive read returns at most (and about this many bytes of bodies).
const REDRIVE_BATCH: usize = 256;
const REDRIVE_BATCH_BYTES: usize = 4 << 20;

impl Shard {
    /// Publishes what `ch` set aside over max attempts to its dead-letter topic, or drops it.
    pub(super) fn send_dead_letters(&self, ch: &ChannelRef) {
        let (taken, topic, channel) = {
            let mut c = ch.borrow_mut();
            let Some(taken) = c.take_dead() else {
                return;
            };
            (taken, c.topic.clone(), c.name.clone())
        };
        let (msgs, to) = taken;
        // The channel no longer owes them: a prompt checkpoint keeps a crash from delivering
        // them again (dead letters are rare; the checkpoint rewrites one small file).
        let t = self.topics.borrow().get(&*topic).cloned();
        if let Some(t) = &t {
            self.note_meta_change(t);
        }
        let Some(to) = to else {
            debug!(topic = %topic, channel = %channel, messages = msgs.len(),
                "messages over max attempts dropped (no dead-letter topic)");
            return;
        };
        self.publish_dead_letters(topic, channel, msgs, to);
    }

    /// Publishes dead letters of `channel` of `topic` to `to`, answered to this shard.
    fn publish_dead_letters(
        &self,
        topic: Arc<str>,
        channel: Arc<str>,
        msgs: Vec<crate::storage::segment::Stored>,
        to: Arc<str>,
    ) {
        let mut bodies = Vec::with_capacity(msgs.len());
        let mut origins = Vec::with_capacity(msgs.len());
        let seqs = msgs.iter().map(|s| s.seq).collect();
        for s in msgs {
            origins.push(DeadOrigin {
                topic: topic.to_string(),
                channel: channel.to_string(),
                id: s.msg.id,
                attempts: s.msg.attempts,
                timestamp: s.msg.timestamp,
            });
            bodies.push(s.msg.body);
        }
        let owner = self.config.owner_of(&to);
        let token = self.next_token.get().wrapping_add(1);
        self.next_token.set(token);
        self.dead_sends.borrow_mut().insert(
            token,
            DeadSend {
                topic,
                channel,
                seqs,
                sent: Some(Instant::now()),
            },
        );
        self.route(
            owner,
            Mail::Publish {
                topic: to.to_string(),
                bodies,
                defer: Duration::ZERO,
                acked: true,
                reply: ReplyTo {
                    shard: self.id,
                    token,
                },
                origins,
            },
        );
    }

    /// The dead-letter topic's answer to the dead letters sent with `token`: stored, they
    /// are no longer owed by their channel; refused, they go again at the next resend.
    pub(super) fn dead_letters_answered(&self, token: u64, reply: Reply) {
        let Some(mut d) = self.dead_sends.borrow_mut().remove(&token) else {
            return;
        };
        if let Reply::Publish(Err(e)) = &reply {
            warn!(topic = %d.topic, channel = %d.channel, messages = d.seqs.len(),
                "dead letters not stored ({}); sent again within a second", e.description);
            d.sent = None;
            self.dead_sends.borrow_mut().insert(token, d);
            return;
        }
        let t = self.topics.borrow().get(&*d.topic).cloned();
        let Some(t) = t else {
            return;
        };
        let ch = t.borrow().channel(&d.channel);
        if let Some(ch) = ch {
            if ch.borrow_mut().dead_stored(&d.seqs) > 0 {
                self.note_meta_change(&t);
            }
        }
    }

    /// Sends again the dead letters refused, or unanswered for [`DEAD_LETTER_RETRY`] (their
    /// owner or its leader may have died); from a timer every second.
    pub(super) fn resend_dead_letters(&self) {
        let now = Instant::now();
        let due: Vec<DeadSend> = {
            let mut sends = self.dead_sends.borrow_mut();
            let tokens: Vec<u64> = sends
                .iter()
                .filter(|(_, d)| d.sent.is_none_or(|at| now - at >= DEAD_LETTER_RETRY))
                .map(|(&t, _)| t)
                .collect();
            tokens.iter().filter_map(|t| sends.remove(t)).collect()
        };
        for d in due {
            let t = self.topics.borrow().get(&*d.topic).cloned();
            let Some(ch) = t.and_then(|t| t.borrow().channel(&d.channel)) else {
                continue;
            };
            let (msgs, to) = ch.borrow_mut().dead_unstored(&d.seqs);
            if let (false, Some(to)) = (msgs.is_empty(), to) {
                debug!(topic = %d.topic, channel = %d.channel, messages = msgs.len(), to = %to,
                    "dead letters sent again");
                self.publish_dead_letters(d.topic, d.channel, msgs, to);
            }
        }
    }

    /// Records the origin of dead letters just stored in `t` (their IDs and bodies, in order;
    /// the last one's seq is `end - 1`).
    pub(super) fn record_dead_letters(
        &self,
        t: &Rc<RefCell<Topic>>,
        stored: Vec<(MessageId, Bytes)>,
        origins: Vec<DeadOrigin>,
        end: u64,
    ) {
        let now = crate::ids::now_nanos();
        let first = end.saturating_sub(stored.len() as u64);
        {
            let mut tb = t.borrow_mut();
            for (i, ((id, body), origin)) in stored.into_iter().zip(origins).enumerate() {
                tb.record_dead_letter(origin, id, first + i as u64, &body, now);
            }
        }
        self.note_meta_change(t);
    }

    /// `POST /channel/config`: the channel's own max attempts and dead-letter topic,
    /// answered once in its topic's metadata.
    pub(super) fn channel_config(
        &self,
        topic: &str,
        name: &str,
        max_attempts: Option<Option<u16>>,
        dead_letter_topic: Option<Option<String>>,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        let Some(t) = self.topics.borrow().get(topic).cloned() else {
            return Some(AdminResult::TopicNotFound);
        };
        let Some(ch) = t.borrow().channel(name) else {
            return Some(AdminResult::ChannelNotFound);
        };
        let (own, to) = {
            let c = ch.borrow();
            let own = max_attempts.unwrap_or(c.dead_letters().own_max);
            let to = match dead_letter_topic {
                Some(to) => to.map(|s| Arc::from(s.as_str())),
                None => c.dead_letters().topic.clone(),
            };
            (own, to)
        };
        info!(topic, channel = name, max_attempts = ?own, dead_letter_topic = ?to, "channel dead letters set");
        self.set_channel_dead_letters(&t, &ch, own, to.clone());
        let op = ChannelOp::Config {
            max_attempts: own,
            dead_letter_topic: to.as_deref().map(str::to_owned),
        };
        self.tell_leader(&t, Some((name, op)));
        self.answer_when_meta_saved(&t, reply)
    }

    /// `GET /dead_letters`: the origin records of dead-letter topic `topic`.
    pub(super) fn dead_letter_list(&self, topic: &str, id: Option<String>) -> AdminResult {
        let Some(t) = self.topics.borrow().get(topic).cloned() else {
            return AdminResult::TopicNotFound;
        };
        let tb = t.borrow();
        AdminResult::DeadLetters(
            tb.dead_letter_records()
                .filter(|r| id.as_ref().is_none_or(|id| &r.id == id))
                .cloned()
                .collect(),
        )
    }

    /// Reads the bodies of `topic`'s dead letters after seq `after` for a redrive; stops at
    /// one whose block is on disk (asking the fetcher for it).
    pub(super) fn redrive_read(
        &self,
        topic: &str,
        id: Option<&str>,
        after: Option<u64>,
    ) -> AdminResult {
        let Some(t) = self.topics.borrow().get(topic).cloned() else {
            return AdminResult::TopicNotFound;
        };
        let mut batch = RedriveBatch::default();
        {
            let tb = t.borrow();
            let log = tb.log.borrow();
            let mut bytes = 0;
            let wanted = tb
                .dead_letter_records()
                .filter(|r| after.is_none_or(|a| r.seq > a))
                .filter(|r| id.is_none_or(|id| r.id == id));
            for r in wanted {
                if batch.letters.len() >= REDRIVE_BATCH || bytes >= REDRIVE_BATCH_BYTES {
                    batch.more = true;
                    break;
                }
                let body = match log.read(r.seq, DiskHint::default()) {
                    Read::Msg(s, _) if s.seq == r.seq && s.msg.id.to_string() == r.id => {
                        Some(s.msg.body)
                    }
                    Read::Wait => {
                        batch.waiting = true;
                        break;
                    }
                    _ => None,
                };
                bytes += body.as_ref().map_or(0, Bytes::len);
                batch.letters.push((r.clone(), body));
            }
        }
        if batch.waiting {
            self.queue_fetch(&t);
        }
        AdminResult::Redrive(Box::new(batch))
    }

    /// Forgets the origin records of redriven dead letters; answered once saved.
    pub(super) fn redrive_done(
        &self,
        topic: &str,
        ids: &[String],
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        let Some(t) = self.topics.borrow().get(topic).cloned() else {
            return Some(AdminResult::TopicNotFound);
        };
        let gone = t.borrow_mut().forget_dead_letters(ids);
        info!(topic, redriven = gone, "dead letters redriven");
        self.share_forgotten(&t, ids);
        self.note_meta_change(&t);
        self.answer_when_meta_saved(&t, reply)
    }
}

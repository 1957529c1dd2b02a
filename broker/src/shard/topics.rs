//! The topics a shard owns: loading them at start-up, creating them on first use (asking the
//! lookups for the channels of a new topic first, while its publishes wait), and recording
//! structural changes for the next checkpoint.
//!
//! Invariant: a durable topic exists only once its directory does, so nothing is acknowledged
//! for a topic that a stop would drop; publishes parked for a pending topic are stored (or
//! refused) in the order they came.

use super::ingest::Answer;
use super::Shard;
use crate::mailbox::{Mail, RegistryOp, Reply, ReplyTo};
use crate::storage::{self, log::TopicLog};
use crate::topic::Topic;
use bytes::Bytes;
use protocol::{ErrorCode, ProtocolError};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// A topic that cannot be created because its log (its directory) cannot be made; what
/// asked for it is refused, and the next attempt tries again.
#[derive(Debug, Clone, thiserror::Error)]
#[error("topic {topic}: cannot create its log: {reason}")]
pub(crate) struct TopicRefused {
    topic: String,
    reason: Rc<crate::storage::StorageError>,
}

/// A new topic whose channels were asked from the lookups: publishes wait here, in order,
/// until the answer (`Reply::TopicChannels` for `token`).
pub(super) struct PendingTopic {
    pub(super) token: u64,
    pub(super) publishes: Vec<ParkedPublish>,
}

pub(super) struct ParkedPublish {
    pub(super) bodies: Vec<Bytes>,
    pub(super) defer: Duration,
    /// Already answered OK (early): stored even if storage fails meanwhile.
    pub(super) acked: bool,
    pub(super) reply: ReplyTo,
    /// Dead letters: where each came from (see `Mail::Publish`).
    pub(super) origins: Vec<crate::topic::DeadOrigin>,
}

/// The answer to a publish whose topic cannot be created (`reason`); one that was already
/// answered OK early is lost, and the log says so.
pub(super) fn publish_refused(
    topic: &str,
    messages: usize,
    acked: bool,
    reason: &TopicRefused,
) -> ProtocolError {
    if acked {
        error!(topic, messages, "acknowledged messages lost: {reason}");
    }
    ProtocolError::fatal(ErrorCode::PubFailed, reason.to_string())
}

impl Shard {
    /// The topic `name`, created if missing. A topic created while lookups are configured
    /// asks them for its channels: publishes wait in `pending_topics` until the answer.
    /// Fails (the reason) when the topic's directory cannot be made; the next call tries again.
    pub(crate) fn topic_or_create(&self, name: &str) -> Result<Rc<RefCell<Topic>>, TopicRefused> {
        if let Some(t) = self.topics.borrow().get(name) {
            return Ok(t.clone());
        }
        let t = self.create_topic(name)?;
        let ask = !protocol::names::is_ephemeral(name)
            && !self.lookupd_tcp_addresses().is_empty()
            && !self.pending_topics.borrow().contains_key(name);
        if ask {
            let token = self.next_token.get().wrapping_add(1);
            self.next_token.set(token);
            self.pending_topics.borrow_mut().insert(
                name.to_owned(),
                PendingTopic {
                    token,
                    publishes: Vec::new(),
                },
            );
            debug!(
                topic = name,
                "asking the lookups for the new topic's channels"
            );
            self.route(
                self.control,
                Mail::TopicChannels {
                    topic: name.to_owned(),
                    reply: ReplyTo {
                        shard: self.id,
                        token,
                    },
                },
            );
        }
        Ok(t)
    }

    /// Creates topic `name` (which must not exist) and reports it. A durable topic whose
    /// directory cannot be made (permissions, no inodes left) is not created: serving it from
    /// memory would acknowledge messages that a stop then drops without a word. The caller
    /// refuses what asked for it, and the next publish or SUB tries again, so the topic comes
    /// once the directory can be made.
    /// `--retention-time` and `--retention-bytes`, for the log.
    pub(super) fn retention_default(&self) -> crate::storage::log::Retention {
        crate::storage::log::Retention {
            time_ns: u64::try_from(self.config.retention_time.as_nanos()).unwrap_or(u64::MAX),
            bytes: self.config.retention_bytes,
        }
    }

    fn create_topic(&self, name: &str) -> Result<Rc<RefCell<Topic>>, TopicRefused> {
        let log = if protocol::names::is_ephemeral(name) {
            TopicLog::in_memory(name, self.config.mem_queue_size)
        } else {
            let dir = storage::topic_dir(&self.config.data_path, name);
            match TopicLog::open(
                name,
                dir.clone(),
                self.config.mem_queue_size,
                self.config.max_bytes_per_file,
            ) {
                Ok(log) => log,
                Err(e) => {
                    let refused = TopicRefused {
                        topic: name.to_string(),
                        reason: Rc::new(e),
                    };
                    warn!("{refused}");
                    return Err(refused);
                }
            }
        };
        let mut topic = Topic::new(name, log, self.config.mem_queue_size, self.id);
        topic.max_attempts = self.config.max_attempts;
        if !topic.ephemeral {
            topic.set_retention(self.retention_default(), None, None);
        }
        let t = Rc::new(RefCell::new(topic));
        self.topics.borrow_mut().insert(name.to_string(), t.clone());
        info!(topic = name, shard = self.id, "topic created");
        self.report(RegistryOp::Register, name, None);
        Ok(t)
    }

    /// The lookups' answer for a pending new topic: create its channels, then store what was
    /// published meanwhile, in order, and answer the publishers.
    pub(super) fn topic_channels_known(&self, token: u64, channels: Vec<String>) {
        let name = self
            .pending_topics
            .borrow()
            .iter()
            .find(|(_, p)| p.token == token)
            .map(|(n, _)| n.clone());
        let Some(name) = name else {
            return;
        };
        let Some(pending) = self.pending_topics.borrow_mut().remove(&name) else {
            return;
        };
        let existing = self.topics.borrow().get(&name).cloned();
        let t = match existing {
            Some(t) => t,
            // Deleted meanwhile, but publishes are waiting: they create it again.
            None if !pending.publishes.is_empty() => match self.create_topic(&name) {
                Ok(t) => t,
                Err(reason) => {
                    for p in pending.publishes {
                        let e = publish_refused(&name, p.bodies.len(), p.acked, &reason);
                        self.reply(p.reply, Reply::Publish(Err(e)));
                    }
                    return;
                }
            },
            None => return,
        };
        let mut created_any = false;
        for ch in &channels {
            if !protocol::names::is_valid_channel_name(ch) || protocol::names::is_ephemeral(ch) {
                continue;
            }
            let (_, created) = t.borrow_mut().channel_or_create(ch);
            if created {
                created_any = true;
                info!(topic = %name, channel = %ch, shard = self.id, "channel created (known to the lookups)");
                self.report(RegistryOp::Register, &name, Some(ch));
            }
        }
        if created_any {
            self.note_meta_change(&t);
            let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
            for c in touched {
                self.dispatch(&c);
            }
        }
        debug!(topic = %name, channels = channels.len(), waiting = pending.publishes.len(), "lookups answered");
        for p in pending.publishes {
            let answer = match (self.admin.health(), p.acked) {
                (Some(reason), false) => Answer::refused(reason),
                (unhealthy, _) => self
                    .store_published(&t, p.bodies, p.defer, p.reply, p.origins)
                    .after_storing(unhealthy),
            };
            if let Answer::Now(result) = answer {
                self.reply(p.reply, Reply::Publish(result));
            }
        }
    }

    /// Records a structural change of `t` (channels, pause) for a prompt checkpoint.
    pub(crate) fn note_meta_change(&self, t: &Rc<RefCell<Topic>>) {
        if !t.borrow().log.borrow().is_persistent() {
            return;
        }
        {
            let mut tb = t.borrow_mut();
            tb.meta_dirty = true;
            tb.meta_gen += 1;
        }
        self.queue_flush(t);
    }
}

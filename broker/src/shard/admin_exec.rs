//! The owner's side of the HTTP API's topic and channel actions (create, delete, empty, pause,
//! unpause), of a topic's retention settings (`POST /topic/config`), and of runtime options
//! (`PUT /config`). Deleting closes the consumers' connections wherever they are
//! (`Mail::CloseConn`); a delete is answered once durable (see [`super::durable`]). What
//! cannot be done is answered as a typed [`Refusal`] or [`Failure`], worded by the HTTP side.

use super::Shard;
use crate::admin_ops::{Action, AdminOp, AdminResult, Failure, OptionChange, Refusal};
use crate::channel::ConsumerKey;
use crate::mailbox::{Mail, RegistryOp, ReplyTo};
use crate::topic::ChannelRef;
use replication::wire::ChannelOp;
use std::time::Instant;
use tracing::info;

impl Shard {
    /// Carries out `op`; `None` when the answer to `reply` comes later (once durable).
    pub(crate) fn handle_admin(&self, op: AdminOp, reply: ReplyTo) -> Option<AdminResult> {
        match op {
            AdminOp::Topic { topic, action } => self.topic_action(&topic, action, reply),
            AdminOp::Channel {
                topic,
                channel,
                action,
            } => self.channel_action(&topic, &channel, action, reply),
            AdminOp::TopicConfig {
                topic,
                retention_time_ns,
                retention_bytes,
            } => self.topic_config(&topic, retention_time_ns, retention_bytes, reply),
            AdminOp::TopicReplicas { topic, replicas } => {
                self.set_topic_replicas(&topic, replicas, reply)
            }
            AdminOp::Rewind {
                topic,
                channel,
                to,
                create,
                dry_run,
            } => self.rewind_channel(topic, channel, to, create, dry_run, reply),
            AdminOp::ChannelConfig {
                topic,
                channel,
                max_attempts,
                dead_letter_topic,
            } => self.channel_config(&topic, &channel, max_attempts, dead_letter_topic, reply),
            AdminOp::DeadLetters { topic, id } => Some(self.dead_letter_list(&topic, id)),
            AdminOp::RedriveRead { topic, id, after } => {
                Some(self.redrive_read(&topic, id.as_deref(), after))
            }
            AdminOp::RedriveDone { topic, ids } => self.redrive_done(&topic, &ids, reply),
            AdminOp::Stats(q) => Some(AdminResult::Stats(Box::new(self.shard_stats(&q)))),
            AdminOp::Health => Some(AdminResult::Health(self.admin.health())),
            AdminOp::SetOption(change) => {
                self.set_option(change);
                Some(AdminResult::Done)
            }
        }
    }
    /// The `nsqlookupd_tcp_addresses` in force (the flag, or the last `PUT /config`).
    pub fn lookupd_tcp_addresses(&self) -> Vec<String> {
        self.admin
            .lookupd_tcp_addresses
            .borrow()
            .clone()
            .unwrap_or_else(|| self.config.lookupd_tcp_addresses.clone())
    }
    /// The `log_level` in force.
    pub fn log_level(&self) -> String {
        self.admin
            .log_level
            .borrow()
            .clone()
            .unwrap_or_else(|| self.config.log_level.clone())
    }
    fn set_option(&self, change: OptionChange) {
        match change {
            OptionChange::LookupdTcpAddresses(a) => {
                // Every shard remembers it (GET /config, new topics ask lookups or not); one
                // tells the control thread, which holds the registration connections.
                if self.id == 0 {
                    self.route(self.control, Mail::LookupAddresses(a.clone()));
                }
                *self.admin.lookupd_tcp_addresses.borrow_mut() = Some(a);
            }
            OptionChange::LogLevel(l) => {
                // One shard applies it to the (process-wide) logger; all remember it.
                if self.id == 0 {
                    if let Err(e) = crate::admin_ops::set_log_level(&l) {
                        tracing::warn!("log level {l}: {e}");
                    }
                }
                *self.admin.log_level.borrow_mut() = Some(l);
            }
        }
    }
    fn topic_action(&self, name: &str, action: Action, reply: ReplyTo) -> Option<AdminResult> {
        if action == Action::Create {
            return Some(match self.topic_or_create(name) {
                Ok(_) => AdminResult::Done,
                Err(refused) => AdminResult::Failed(Failure::CreateTopic(refused.to_string())),
            });
        }
        let Some(t) = self.topics.borrow().get(name).cloned() else {
            return Some(AdminResult::TopicNotFound);
        };
        match action {
            Action::Create => {}
            Action::Delete => {
                self.topics.borrow_mut().remove(name);
                self.replicated_topic_deleted(name);
                let channels: Vec<ChannelRef> = t.borrow().channels().cloned().collect();
                for ch in &channels {
                    self.close_consumers(ch);
                }
                // Its segments and metadata go with it: the directory is renamed into the
                // trash now; nothing writes to it by its name afterwards.
                let (destroyed, trash, persistent) = {
                    let tb = t.borrow();
                    let mut log = tb.log.borrow_mut();
                    (log.destroy(), log.take_trash(), log.is_persistent())
                };
                crate::storage::delete_in_background(trash);
                info!(topic = name, shard = self.id, "topic deleted");
                // The control thread unregisters its channels, then the topic.
                self.report(RegistryOp::Unregister, name, None);
                if let Err(reason) = destroyed {
                    return Some(AdminResult::Failed(Failure::DestroyTopic(
                        reason.to_string(),
                    )));
                }
                if persistent {
                    self.answer_when_data_path_synced(reply);
                    return None;
                }
            }
            Action::Empty => {
                t.borrow_mut().empty();
                self.note_meta_change(&t);
            }
            Action::Pause | Action::Unpause => {
                let paused = action == Action::Pause;
                self.set_topic_paused(&t, paused);
                self.note_meta_change(&t);
                self.tell_leader(&t, None);
                info!(topic = name, paused, "topic pause state set");
            }
        }
        Some(AdminResult::Done)
    }
    /// `POST /topic/config`: the topic's own retention, answered once in its metadata.
    fn topic_config(
        &self,
        name: &str,
        time_ns: Option<Option<u64>>,
        bytes: Option<Option<u64>>,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        let Some(t) = self.topics.borrow().get(name).cloned() else {
            return Some(AdminResult::TopicNotFound);
        };
        if t.borrow().ephemeral {
            return Some(AdminResult::Refused(Refusal::EphemeralTopicRetention));
        }
        {
            let mut tb = t.borrow_mut();
            let time_ns = time_ns.unwrap_or(tb.retention_time_ns);
            let bytes = bytes.unwrap_or(tb.retention_bytes);
            let default = tb.retention_default();
            tb.set_retention(default, time_ns, bytes);
            info!(topic = name, ?time_ns, ?bytes, "topic retention set");
        }
        self.tell_leader(&t, None);
        // The next checkpoint writes it, and releases what the retention no longer keeps.
        self.note_meta_change(&t);
        self.answer_when_meta_saved(&t, reply)
    }
    fn channel_action(
        &self,
        topic: &str,
        name: &str,
        action: Action,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        let Some(t) = self.topics.borrow().get(topic).cloned() else {
            return Some(AdminResult::TopicNotFound);
        };
        if action == Action::Create {
            let (_, created) = t.borrow_mut().channel_or_create(name);
            if created {
                self.note_meta_change(&t);
                info!(topic, channel = name, shard = self.id, "channel created");
                self.report(RegistryOp::Register, topic, Some(name));
                // As on SUB: what the topic held waits no longer.
                let touched = t.borrow_mut().release_held(Instant::now(), &self.timers);
                for ch in &touched {
                    self.dispatch(ch);
                }
                self.tell_leader(&t, Some((name, ChannelOp::Created)));
            }
            return Some(AdminResult::Done);
        }
        let Some(ch) = t.borrow().channel(name) else {
            return Some(AdminResult::ChannelNotFound);
        };
        match action {
            Action::Create => {}
            Action::Delete => {
                t.borrow_mut().remove_channel(name);
                self.close_consumers(&ch);
                self.tell_leader(&t, Some((name, ChannelOp::Deleted)));
                info!(topic, channel = name, "channel deleted");
                self.report(RegistryOp::Unregister, topic, Some(name));
                // Answered once meta.json no longer lists it; the checkpoint that writes it
                // also frees the segments only this channel still held.
                self.note_meta_change(&t);
                return self.answer_when_meta_saved(&t, reply);
            }
            Action::Empty => ch.borrow_mut().empty(),
            Action::Pause | Action::Unpause => {
                let paused = action == Action::Pause;
                self.set_channel_paused(&ch, paused);
                self.tell_leader(&t, Some((name, ChannelOp::Paused(paused))));
                info!(topic, channel = name, paused, "channel pause state set");
            }
        }
        // Emptying lets the next checkpoint free the segments no channel needs.
        self.note_meta_change(&t);
        Some(AdminResult::Done)
    }
    /// Closes the connection of every consumer of `ch`, on whichever shard it is.
    pub(super) fn close_consumers(&self, ch: &ChannelRef) {
        let keys: Vec<ConsumerKey> = ch.borrow().consumers().iter().map(|c| c.spec.key).collect();
        for key in keys {
            self.route(key.shard, Mail::CloseConn { conn: key.conn });
        }
    }
    /// Closes connection `conn` of this shard, if it is still there.
    pub(crate) fn close_conn_here(&self, conn: u64) {
        let c = self.conns.borrow().get(&conn).cloned();
        if let Some(c) = c {
            c.close();
        }
    }
}

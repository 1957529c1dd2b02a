//! Admin answers that wait for the disk: a topic deletion is answered once the data path is
//! fsynced (its directory's rename is durable), a channel deletion once the topic's metadata
//! without it is written. The flusher calls in here after each round, so these answers never
//! race a checkpoint.

use super::Shard;
use crate::admin_ops::{AdminResult, Failure};
use crate::mailbox::{Reply, ReplyTo};
use crate::topic::Topic;
use std::cell::RefCell;
use std::rc::Rc;
use tracing::warn;

/// Admin actions answered once what they changed is durable.
#[derive(Debug, Default)]
pub(crate) struct DurableAnswers {
    /// Topic deletions answered once the data path is fsynced.
    data_path_waiters: RefCell<Vec<ReplyTo>>,
    /// Channel deletions answered once their topic's metadata is written.
    meta_waiters: RefCell<Vec<MetaWaiter>>,
}

/// An action answered once `topic`'s metadata of generation `gen` or later is written.
struct MetaWaiter {
    topic: Rc<RefCell<Topic>>,
    gen: u64,
    reply: ReplyTo,
}

impl std::fmt::Debug for MetaWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaWaiter")
            .field("gen", &self.gen)
            .field("reply", &self.reply)
            .finish()
    }
}

impl Shard {
    /// Whether any action waits for metadata to be written.
    pub(crate) fn waits_for_meta(&self) -> bool {
        !self.durable.meta_waiters.borrow().is_empty()
    }
    /// Answers the actions waiting for metadata that is now written, or that could not be
    /// (`failed`: the topics and why; retried by a later checkpoint, but the answer says so).
    pub(crate) fn answer_meta_waiters(&self, failed: &[(Rc<RefCell<Topic>>, String)]) {
        let waiting = std::mem::take(&mut *self.durable.meta_waiters.borrow_mut());
        let mut still = Vec::new();
        for w in waiting {
            let saved = {
                let t = w.topic.borrow();
                // A topic deleted since: its own deletion is what is made durable.
                t.meta_saved_gen >= w.gen || t.log.borrow().is_destroyed()
            };
            let failure = failed.iter().find(|(t, _)| Rc::ptr_eq(t, &w.topic));
            let answer = match (saved, failure) {
                (true, _) => AdminResult::Done,
                (false, Some((_, reason))) => {
                    AdminResult::Failed(Failure::WriteMeta(reason.clone()))
                }
                (false, None) => {
                    still.push(w);
                    continue;
                }
            };
            self.reply(w.reply, Reply::Admin(answer));
        }
        self.durable.meta_waiters.borrow_mut().extend(still);
    }
    /// fsyncs the data path for the topic deletions waiting for it (their directories'
    /// renames), off the shard's thread, and answers them.
    pub(crate) async fn sync_data_path_for_deletions(&self) {
        let waiting = std::mem::take(&mut *self.durable.data_path_waiters.borrow_mut());
        if waiting.is_empty() {
            return;
        }
        let path = self.config.data_path.clone();
        let synced = glommio::executor()
            .spawn_blocking(move || std::fs::File::open(&path).and_then(|d| d.sync_all()))
            .await;
        if let Err(e) = &synced {
            warn!(
                shard = self.id,
                "cannot fsync the data path after deleting a topic: {e}"
            );
        }
        for reply in waiting {
            let answer = match &synced {
                Ok(()) => AdminResult::Done,
                Err(e) => AdminResult::Failed(Failure::SyncDataPath(e.to_string())),
            };
            self.reply(reply, Reply::Admin(answer));
        }
    }
    /// Answers `reply` once the data path is fsynced (a topic deletion).
    pub(super) fn answer_when_data_path_synced(&self, reply: ReplyTo) {
        self.durable.data_path_waiters.borrow_mut().push(reply);
        self.flusher.wake();
    }

    /// Answer `reply` once `t`'s metadata as it is now is written (at once for a topic
    /// without files).
    pub(super) fn answer_when_meta_saved(
        &self,
        t: &Rc<RefCell<Topic>>,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        if !t.borrow().log.borrow().is_persistent() {
            return Some(AdminResult::Done);
        }
        let gen = t.borrow().meta_gen;
        self.durable.meta_waiters.borrow_mut().push(MetaWaiter {
            topic: t.clone(),
            gen,
            reply,
        });
        self.flusher.wake();
        None
    }
}

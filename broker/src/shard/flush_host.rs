//! The shard's side of the write path ([`crate::storage::flusher`]): a [`Topic`] as the
//! flusher's [`Stored`] item, the [`Shard`] as its [`FlushHost`] (its topics, health, the
//! answers waiting for the disk or for metadata, record counters), and the shard's entry points
//! to it (queueing writes and checkpoints, the hand-over at a clean stop).
//!
//! The flusher task is spawned by [`super::lifecycle`]; everything it does is in storage.

use super::Shard;
use crate::config::Config;
use crate::storage::flusher::{FlushHost, Flusher, Stored, SyncPolicy};
use crate::storage::log::{Planned, TopicLog};
use crate::storage::meta::TopicMeta;
use crate::topic::Topic;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use tracing::info;

/// The flusher's sync policy under `config`.
pub(super) fn sync_policy(config: &Config) -> SyncPolicy {
    SyncPolicy {
        durable: config.durable,
        sync_every: config.sync_every,
        sync_timeout: config.sync_timeout,
        acks_wait_for_disk: config.acks_wait_for_disk(),
    }
}

impl Stored for Topic {
    fn name(&self) -> &str {
        &self.name
    }
    fn log(&self) -> &Rc<RefCell<TopicLog>> {
        &self.log
    }
    fn floor(&self) -> u64 {
        Topic::floor(self)
    }
    fn floor_above(&self, bound: u64) -> u64 {
        Topic::floor_above(self, bound)
    }
    fn lowest_cursor(&self) -> u64 {
        Topic::lowest_cursor(self)
    }
    fn flush_queued(&mut self) -> &mut bool {
        &mut self.flush_queued
    }
    fn checkpoint_queued(&mut self) -> &mut bool {
        &mut self.checkpoint_queued
    }
    fn to_meta(&self, clean: bool, now: Instant) -> TopicMeta {
        Topic::to_meta(self, clean, now)
    }
    fn meta_dirty(&self) -> bool {
        self.meta_dirty
    }
    fn set_meta_dirty(&mut self, dirty: bool) {
        self.meta_dirty = dirty;
    }
    fn last_meta(&self) -> Option<&TopicMeta> {
        self.last_meta.as_ref()
    }
    fn set_last_meta(&mut self, meta: TopicMeta) {
        self.last_meta = Some(meta);
    }
    fn meta_gen(&self) -> u64 {
        self.meta_gen
    }
    fn meta_saved_gen(&mut self) -> &mut u64 {
        &mut self.meta_saved_gen
    }
}

impl FlushHost for Shard {
    type Item = Topic;
    type Items<'a> = std::collections::hash_map::Values<'a, String, Rc<RefCell<Topic>>>;
    fn flusher(&self) -> &Flusher<Topic> {
        &self.flusher
    }
    fn with_items<R>(&self, f: impl FnOnce(Self::Items<'_>) -> R) -> R {
        f(self.topics.borrow().values())
    }
    fn set_unhealthy(&self, reason: String) {
        Shard::set_unhealthy(self, reason);
    }
    fn set_healthy(&self) {
        Shard::set_healthy(self);
    }
    fn count_planned(&self, planned: &Planned) {
        let c = &self.admin.records;
        c.written.set(c.written.get() + planned.kept);
        c.skipped.set(c.skipped.get() + planned.skipped);
    }
    fn answer_disk_acks(&self) {
        Shard::answer_disk_acks(self);
        self.replicas_after_flush();
    }
    fn waits_for_meta(&self) -> bool {
        Shard::waits_for_meta(self)
    }
    fn answer_meta_waiters(&self, failed: &[(Rc<RefCell<Topic>>, String)]) {
        Shard::answer_meta_waiters(self, failed);
    }
    async fn sync_data_path_for_deletions(&self) {
        Shard::sync_data_path_for_deletions(self).await;
    }
}

impl Shard {
    /// Lists `t` for the next checkpoint (its channels' floors or structure may have moved).
    pub(super) fn queue_checkpoint(&self, t: &Rc<RefCell<Topic>>) {
        self.flusher.queue_checkpoint(t);
    }

    /// Lists `t`'s appended records for the flusher's next round (and `t` for its checkpoint).
    pub(super) fn queue_flush(&self, t: &Rc<RefCell<Topic>>) {
        self.flusher.queue_flush(t);
    }

    /// The hand-over to storage at a clean stop (see [`Flusher::hand_over`]): returns how many
    /// bytes of acknowledged messages could not be written (lost).
    pub(super) async fn hand_over_to_storage(&self) -> usize {
        let done = self.flusher.hand_over(self).await;
        info!(shard = self.id, owed = done.owed, "storage hand-over done");
        done.lost
    }
}

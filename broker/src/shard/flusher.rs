//! The shard's write path: the flusher task, which encodes what topics appended
//! (`TopicLog::plan`), writes it to the segment files (`storage::log::flush`), fsyncs by the
//! sync policy (`storage::log::sync`), answers the publishes waiting for the disk, checkpoints
//! topic metadata and deletes the segments every channel has passed; and the hand-over at a
//! clean stop, which writes and fsyncs everything and records what every channel still owes.
//!
//! Invariants: the flusher is the only writer of segment files and metadata while the shard
//! runs; a round in progress (`flusher_busy`) finishes before the hand-over starts; a failed
//! write keeps the records and is retried, never dropped.

use super::Shard;
use crate::storage::{self};
use crate::topic::Topic;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// How often channel floors are persisted and passed segments deleted.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// Without --durable nobody waits for the disk: the flusher lets writes gather up to this long,
/// so a stream of single PUBs becomes one write per 10 ms instead of one per message. Each write
/// costs the shard's CPU far more than its bytes (a direct write is a device notification, on
/// a VM an exit to the host, plus an io-wq worker's wake-up when it extends the file): at 1 ms,
/// one-at-a-time PUBs on one core spent ~9% of it there. What a kill -9 can lose is what is
/// not written yet, at most this long's worth (nsqd loses its whole in-memory queue).
const WRITE_COALESCE: Duration = Duration::from_millis(10);

/// How long a clean stop retries (100 ms apart) writing what is pending when writes fail (time
/// for an operator to free space) before it gives up and reports the loss. One deadline for
/// all of a shard's topics: past it each failing topic gets one more attempt, so a stop with
/// a thousand topics on a full disk still ends well within systemd's TimeoutStopSec (60 s in
/// deploy/broker.service), which would otherwise SIGKILL it.
const FINAL_WRITE_PATIENCE: Duration = Duration::from_secs(10);

impl Shard {
    /// Lists `t` for the next checkpoint (its channels' floors or structure may have moved).
    pub(super) fn queue_checkpoint(&self, t: &Rc<RefCell<Topic>>) {
        let added = self
            .checkpoint_list
            .add(t, &mut t.borrow_mut().checkpoint_queued);
        if added == Some(true) {
            // A flusher asleep with nothing to write must still checkpoint within
            // CHECKPOINT_EVERY: FINs alone move floors, and passed segments must go.
            self.wake_flusher.notify();
        }
    }

    /// Encodes what `t` appended since its last write for the flusher, leaving out what every
    /// channel has finished meanwhile (see `TopicLog::plan`), and counts both for /metrics.
    fn plan_writes(&self, t: &Rc<RefCell<Topic>>) {
        let t = t.borrow();
        // Only a floor above what is planned already can leave anything out.
        let floor = t.floor_above(t.log.borrow().planned_end());
        let planned = t.log.borrow_mut().plan(floor);
        let c = &self.admin.records;
        c.written.set(c.written.get() + planned.encoded);
        c.skipped.set(c.skipped.get() + planned.skipped);
    }

    pub(super) fn queue_flush(&self, t: &Rc<RefCell<Topic>>) {
        self.queue_checkpoint(t);
        self.flush_queue.add(t, &mut t.borrow_mut().flush_queued);
        self.wake_flusher.notify();
    }

    /// Writes, fsyncs by the sync policy (or always, durable), answers durable publishes,
    /// checkpoints metadata and deletes passed segments. Sleeps when there is nothing to do.
    pub(super) async fn flusher(self: Rc<Self>) {
        let mut last_checkpoint = Instant::now();
        loop {
            let unsynced_wait = self.next_wake(last_checkpoint);
            match unsynced_wait {
                None => self.wake_flusher.notified().await,
                Some(d) if !d.is_zero() => {
                    futures_lite::future::or(
                        self.wake_flusher.notified(),
                        glommio::timer::sleep(d),
                    )
                    .await;
                }
                Some(_) => {}
            }
            if self.flusher_stop.get() {
                return;
            }
            // Busy from here, the coalescing wait included: a hand-over that starts meanwhile
            // must wait for this round, or both would write the same logs, and its padding
            // trim could cut a write of this round still in flight (acknowledged messages
            // lost at a clean stop).
            self.flusher_busy.set(true);
            // Publishers waiting for the disk get no coalescing delay: the writes of everything
            // published while the previous round ran are one round (group commit).
            if !self.config.acks_wait_for_disk() && !self.flush_queue.is_empty() {
                futures_lite::future::or(
                    self.write_now.notified(),
                    glommio::timer::sleep(WRITE_COALESCE),
                )
                .await;
                if self.flusher_stop.get() {
                    // The hand-over writes everything itself.
                    self.flusher_busy.set(false);
                    self.flusher_idle.notify();
                    return;
                }
            }
            // This round writes everything appended so far.
            self.write_now.reset();
            let queued: Vec<Rc<RefCell<Topic>>> = self.flush_queue.take();
            let mut failed = false;
            for t in &queued {
                t.borrow_mut().flush_queued = false;
                let log = t.borrow().log.clone();
                // Records every channel has finished since they were published are not
                // written at all (see `TopicLog::plan`).
                self.plan_writes(t);
                if let Err(e) = storage::log::flush(&log).await {
                    failed = true;
                    self.set_unhealthy(format!("write failed: {e}"));
                    self.queue_flush(t);
                }
            }
            // fsync: always in durable mode, else every --sync-every messages or --sync-timeout.
            let topics: Vec<Rc<RefCell<Topic>>> = self.topics.borrow().values().cloned().collect();
            for t in &topics {
                let log = t.borrow().log.clone();
                let due = {
                    let l = log.borrow();
                    l.unsynced > 0
                        && (self.config.durable
                            || l.head() - l.synced_end >= self.config.sync_every
                            || l.last_sync.elapsed() >= self.config.sync_timeout)
                };
                if due {
                    if let Err(e) = storage::log::sync(&log).await {
                        failed = true;
                        self.set_unhealthy(format!("fsync failed: {e}"));
                    }
                }
            }
            self.answer_disk_acks();
            if !failed {
                self.set_healthy();
            }
            let structural = queued.iter().any(|t| t.borrow().meta_dirty) || self.waits_for_meta();
            if structural || last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
                last_checkpoint = Instant::now();
                self.checkpoint().await;
            }
            self.sync_data_path_for_deletions().await;
            self.flusher_busy.set(false);
            self.flusher_idle.notify();
            if failed {
                glommio::timer::sleep(Duration::from_secs(1)).await;
            }
            glommio::yield_if_needed().await;
        }
    }

    /// How long the flusher may sleep before a sync or a checkpoint is due; `None` when
    /// nothing is unsynced and no topic waits for a checkpoint.
    fn next_wake(&self, last_checkpoint: Instant) -> Option<Duration> {
        let sync = self.next_sync_wait();
        if self.checkpoint_list.is_empty() {
            return sync;
        }
        let checkpoint = CHECKPOINT_EVERY.saturating_sub(last_checkpoint.elapsed());
        Some(sync.map_or(checkpoint, |d| d.min(checkpoint)))
    }

    /// How long the flusher may sleep before a sync is due; `None` when nothing is unsynced.
    fn next_sync_wait(&self) -> Option<Duration> {
        if !self.flush_queue.is_empty() {
            return Some(Duration::ZERO);
        }
        let topics = self.topics.borrow();
        topics
            .values()
            .filter_map(|t| {
                let t = t.borrow();
                let l = t.log.borrow();
                (l.unsynced > 0).then(|| {
                    self.config
                        .sync_timeout
                        .saturating_sub(l.last_sync.elapsed())
                })
            })
            .min()
            .map(|d| d.min(CHECKPOINT_EVERY))
    }

    /// Persists each changed topic's metadata (channels, pauses, floors: so a crash redelivers
    /// little) and deletes the segments every channel has passed. Unchanged topics cost a
    /// comparison; metadata is written off the shard's thread, into the directory opened here
    /// (see `storage::meta`), never for a deleted topic. Then answers the actions that waited
    /// for it.
    async fn checkpoint(&self) {
        let topics: Vec<Rc<RefCell<Topic>>> = self.checkpoint_list.take();
        let mut failed = Vec::new();
        for t in topics {
            t.borrow_mut().checkpoint_queued = false;
            let (dir, meta, floor, gen) = {
                let tb = t.borrow();
                let log = tb.log.borrow();
                if log.is_destroyed() {
                    // Deleted: writing its metadata would bring it back at the next start.
                    continue;
                }
                let Some(dir) = log.dir().map(|d| d.to_path_buf()) else {
                    continue;
                };
                (
                    dir,
                    tb.to_meta(false, Instant::now()),
                    tb.floor(),
                    tb.meta_gen,
                )
            };
            let unchanged = t.borrow().last_meta.as_ref() == Some(&meta);
            if !unchanged {
                let written = meta.clone();
                let write = match storage::meta::open_dir(&dir) {
                    Ok(handle) => {
                        glommio::executor()
                            .spawn_blocking(move || storage::meta::write(&handle, &written))
                            .await
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = write {
                    warn!(topic = %t.borrow().name, "checkpoint failed: {e}");
                    failed.push((t.clone(), e.to_string()));
                    // Tried again at the next checkpoint.
                    self.queue_checkpoint(&t);
                    continue;
                }
                let mut tb = t.borrow_mut();
                tb.last_meta = Some(meta);
                // A change made while the write ran is not in it.
                tb.meta_dirty = tb.meta_gen != gen;
            }
            {
                let mut tb = t.borrow_mut();
                tb.meta_saved_gen = tb.meta_saved_gen.max(gen);
            }
            let trash = {
                let tb = t.borrow();
                let mut log = tb.log.borrow_mut();
                log.release_below(floor);
                log.take_trash()
            };
            storage::delete_in_background(trash);
        }
        self.answer_meta_waiters(&failed);
    }

    /// The hand-over to storage at a clean stop: every topic's pending writes are written and
    /// fsynced, and its metadata records each channel's cursor and every message it still owed
    /// (in flight ones as requeued, deferred ones with the delay left).
    ///
    /// A write that fails (disk full, say) is retried for a while; returns how many bytes were
    /// still unwritten after that (lost: the process then exits with an error).
    pub(super) async fn hand_over_to_storage(&self) -> usize {
        // The flusher may be writing chunks it took from a log: let that round finish first.
        self.flusher_stop.set(true);
        self.wake_flusher.notify();
        self.write_now.notify();
        while self.flusher_busy.get() {
            self.flusher_idle.notified().await;
        }
        let topics: Vec<Rc<RefCell<Topic>>> = self.topics.borrow().values().cloned().collect();
        let mut owed = 0usize;
        let mut lost = 0usize;
        let mut failed_meta = Vec::new();
        let give_up_at = Instant::now() + FINAL_WRITE_PATIENCE;
        for t in topics {
            let log = t.borrow().log.clone();
            if !log.borrow().is_persistent() {
                continue;
            }
            self.plan_writes(&t);
            let mut tries = 0;
            while let Err(e) = storage::log::flush(&log).await {
                tries += 1;
                let now = Instant::now();
                if now >= give_up_at {
                    let left = log.borrow().unwritten_bytes();
                    error!(topic = %t.borrow().name, unwritten_bytes = left, "final write failed, giving up: {e}");
                    lost += left;
                    break;
                }
                if tries == 1 {
                    let left = give_up_at.saturating_duration_since(now);
                    error!(topic = %t.borrow().name, "final write failed, retrying for {left:.1?}: {e}");
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
            if let Err(e) = storage::log::trim_padding(&log).await {
                warn!(topic = %t.borrow().name, "cannot trim the newest segment's padding: {e}");
            }
            if let Err(e) = storage::log::sync(&log).await {
                error!(topic = %t.borrow().name, "final fsync failed: {e}");
            }
            let (meta, gen) = {
                let tb = t.borrow();
                (tb.to_meta(true, Instant::now()), tb.meta_gen)
            };
            owed += meta.channels.iter().map(|c| c.pending.len()).sum::<usize>();
            let dir = log.borrow().dir().map(|d| d.to_path_buf());
            if let Some(dir) = dir {
                let written = storage::meta::open_dir(&dir)
                    .and_then(|handle| storage::meta::write(&handle, &meta));
                match written {
                    Ok(()) => t.borrow_mut().meta_saved_gen = gen,
                    Err(e) => {
                        error!(topic = %t.borrow().name, "cannot write metadata: {e}");
                        failed_meta.push((t.clone(), e.to_string()));
                    }
                }
            }
        }
        // Deletions that came in after the flusher's last round.
        self.answer_meta_waiters(&failed_meta);
        self.sync_data_path_for_deletions().await;
        info!(shard = self.id, owed, "storage hand-over done");
        lost
    }
}

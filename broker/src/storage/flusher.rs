//! The write path: the flusher task, which encodes what the stored topics appended
//! (`TopicLog::plan`), writes it to the segment files ([`storage::log::flush`]), fsyncs by the sync
//! policy ([`storage::log::sync`]), has the host answer the publishes waiting for the disk, checkpoints
//! topic metadata and deletes the segments every channel has passed; and the hand-over at a
//! clean stop, which writes and fsyncs everything and records what every channel still owes.
//!
//! It knows a topic only through [`Stored`] (its log, the floor it may leave out, the flags of
//! the work sets, its metadata) and its owner only through [`FlushHost`] (every topic it holds,
//! its health, the answers that wait for the disk or for metadata, the record counters), both
//! used by static dispatch.
//!
//! Invariants: the flusher is the only writer of segment files and metadata while the shard
//! runs; a round in progress (`flusher_busy`) finishes before the hand-over starts; a failed
//! write keeps the records and is retried, never dropped.

use crate::storage::log::{Planned, TopicLog};
use crate::storage::meta::TopicMeta;
use crate::storage::{self};
use crate::work_set::WorkSet;
use nsq_common::local_sync::Notify;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{error, warn};

/// How often channel floors are persisted and passed segments deleted.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// Without --durable nobody waits for the disk: the flusher lets writes gather up to this long,
/// so a stream of single PUBs becomes one write per 10 ms instead of one per message. Each write
/// costs the shard's CPU far more than its bytes (a direct write is a device notification, on
/// a VM an exit to the host, plus an io-wq worker's wake-up when it extends the file;
/// docs/benchmarks.md#mpub-ingest, "Writes gather"). What a kill -9 can lose is what is not
/// written yet, at most this long's worth (nsqd loses its whole in-memory queue).
const WRITE_COALESCE: Duration = Duration::from_millis(10);

/// How long a clean stop retries (100 ms apart) writing what is pending when writes fail (time
/// for an operator to free space) before it gives up and reports the loss. One deadline for
/// all of a shard's topics: past it each failing topic gets one more attempt, so a stop with
/// a thousand topics on a full disk still ends well within systemd's TimeoutStopSec (60 s in
/// deploy/broker.service), which would otherwise SIGKILL it.
const FINAL_WRITE_PATIENCE: Duration = Duration::from_secs(10);

/// What the flusher needs of a stored topic.
pub trait Stored {
    /// The topic's name, for the log.
    fn name(&self) -> &str;
    fn log(&self) -> &Rc<RefCell<TopicLog>>;
    /// The lowest seq any durable reader may still need; segments below it can go.
    fn floor(&self) -> u64;
    /// [`Stored::floor`], or any seq at or below `bound` when the floor is there.
    fn floor_above(&self, bound: u64) -> u64;
    /// The lowest seq any reader takes next from the log (its head when none reads).
    fn lowest_cursor(&self) -> u64;
    /// The flag of the flusher's work set.
    fn flush_queued(&mut self) -> &mut bool;
    /// The flag of the next checkpoint's work set.
    fn checkpoint_queued(&mut self) -> &mut bool;
    /// The metadata to persist. `clean`: a clean stop, with every channel's pending messages.
    fn to_meta(&self, clean: bool, now: Instant) -> TopicMeta;
    /// Something structural changed since the metadata last written: checkpoint soon.
    fn meta_dirty(&self) -> bool;
    fn set_meta_dirty(&mut self, dirty: bool);
    /// The metadata last written, so an unchanged topic is not rewritten.
    fn last_meta(&self) -> Option<&TopicMeta>;
    fn set_last_meta(&mut self, meta: TopicMeta);
    /// Counts structural changes; [`Stored::meta_saved_gen`] is the count the written metadata
    /// covers.
    fn meta_gen(&self) -> u64;
    fn meta_saved_gen(&mut self) -> &mut u64;
}

/// What the flusher needs of the owner of the topics (a shard).
pub trait FlushHost {
    type Item: Stored;
    /// An iterator over every topic it holds.
    type Items<'a>: Iterator<Item = &'a Rc<RefCell<Self::Item>>>
    where
        Self: 'a;
    fn flusher(&self) -> &Flusher<Self::Item>;
    /// Gives `f` every topic it holds.
    fn with_items<R>(&self, f: impl FnOnce(Self::Items<'_>) -> R) -> R;
    /// Storage fails: publishes are refused until [`FlushHost::set_healthy`].
    fn set_unhealthy(&self, reason: String);
    fn set_healthy(&self);
    /// Counts what one [`TopicLog::plan`] encoded and left out (for /metrics).
    fn count_planned(&self, planned: &Planned);
    /// Answers the publishes whose records the disk now holds.
    fn answer_disk_acks(&self);
    /// Whether any action waits for metadata to be written.
    fn waits_for_meta(&self) -> bool;
    /// Answers the actions waiting for metadata that is now written, or that could not be
    /// (`failed`: the topics and why).
    fn answer_meta_waiters(&self, failed: &[(Rc<RefCell<Self::Item>>, String)]);
    /// fsyncs the data path for the topic deletions waiting for it, and answers them.
    async fn sync_data_path_for_deletions(&self);
}

/// When written records are fsynced, and whether answers wait for the disk.
#[derive(Debug, Clone, Copy)]
pub struct SyncPolicy {
    /// fsync at every round that has anything unsynced (`--durable`).
    pub durable: bool,
    /// fsync once this many records are unsynced (`--sync-every`).
    pub sync_every: u64,
    /// fsync once the oldest unsynced write is this old (`--sync-timeout`).
    pub sync_timeout: Duration,
    /// Publishes are answered once written or fsynced: no coalescing wait.
    pub acks_wait_for_disk: bool,
}

/// What the hand-over at a clean stop left.
#[derive(Debug, Clone, Copy)]
pub struct HandOver {
    /// Messages the channels still owed, recorded in their metadata.
    pub owed: usize,
    /// Bytes still unwritten when the retries gave up (lost).
    pub lost: usize,
}

/// The flusher's state: the topics with writes, the next checkpoint's topics, its wake-ups and
/// the busy/idle/stop handshake with the hand-over.
pub struct Flusher<T> {
    policy: SyncPolicy,
    /// Topics with writes for the flusher, and its wake-up.
    flush_queue: WorkSet<Rc<RefCell<T>>>,
    wake_flusher: Notify,
    /// Ends the flusher's coalescing wait: a topic has enough bytes unwritten.
    write_now: Notify,
    /// Topics the next checkpoint looks at; untouched topics cost it nothing.
    checkpoint_list: WorkSet<Rc<RefCell<T>>>,
    /// True while the flusher is inside a round (it holds chunks taken from logs).
    flusher_busy: Cell<bool>,
    flusher_idle: Notify,
    /// Set by the hand-over: the flusher stops before its next round.
    flusher_stop: Cell<bool>,
}

/// Plans what `t` appended since its last write for the flusher, leaving out what every
/// channel has finished meanwhile (see `TopicLog::plan`), and counts both for /metrics.
fn plan_writes<T: Stored>(host: &impl FlushHost<Item = T>, t: &Rc<RefCell<T>>) {
    let t = t.borrow();
    // Only a floor above what is planned already can leave anything out.
    let floor = t.floor_above(t.log().borrow().planned_end());
    let planned = t.log().borrow_mut().plan(floor);
    host.count_planned(&planned);
}

impl<T: Stored + 'static> Flusher<T> {
    pub fn new(policy: SyncPolicy) -> Flusher<T> {
        Flusher {
            policy,
            flush_queue: WorkSet::default(),
            wake_flusher: Notify::new(),
            write_now: Notify::new(),
            checkpoint_list: WorkSet::default(),
            flusher_busy: Cell::new(false),
            flusher_idle: Notify::new(),
            flusher_stop: Cell::new(false),
        }
    }

    /// Wakes the flusher for a round (something waits for its checkpoint or its fsync).
    pub fn wake(&self) {
        self.wake_flusher.notify();
    }

    /// Ends the coalescing wait of the round to come (a topic has much unwritten).
    pub fn write_now(&self) {
        self.write_now.notify();
    }

    /// Lists `t` for the next checkpoint (its channels' floors or structure may have moved).
    pub fn queue_checkpoint(&self, t: &Rc<RefCell<T>>) {
        let added = self
            .checkpoint_list
            .add(t, t.borrow_mut().checkpoint_queued());
        if added == Some(true) {
            // A flusher asleep with nothing to write must still checkpoint within
            // CHECKPOINT_EVERY: FINs alone move floors, and passed segments must go.
            self.wake_flusher.notify();
        }
    }

    pub fn queue_flush(&self, t: &Rc<RefCell<T>>) {
        self.queue_checkpoint(t);
        self.flush_queue.add(t, t.borrow_mut().flush_queued());
        self.wake_flusher.notify();
    }

    /// The flusher task: writes, fsyncs by the sync policy (or always, durable), answers
    /// durable publishes, checkpoints metadata and deletes passed segments. Sleeps when there
    /// is nothing to do.
    pub async fn run<H: FlushHost<Item = T>>(host: Rc<H>) {
        let me = host.flusher();
        let mut last_checkpoint = Instant::now();
        loop {
            let unsynced_wait = me.next_wake(&*host, last_checkpoint);
            match unsynced_wait {
                None => me.wake_flusher.notified().await,
                Some(d) if !d.is_zero() => {
                    futures_lite::future::or(me.wake_flusher.notified(), glommio::timer::sleep(d))
                        .await;
                }
                Some(_) => {}
            }
            if me.flusher_stop.get() {
                return;
            }
            // Busy from here, the coalescing wait included: a hand-over that starts meanwhile
            // must wait for this round, or both would write the same logs, and its padding
            // trim could cut a write of this round still in flight (acknowledged messages
            // lost at a clean stop).
            me.flusher_busy.set(true);
            // Publishers waiting for the disk get no coalescing delay: the writes of everything
            // published while the previous round ran are one round (group commit).
            if !me.policy.acks_wait_for_disk && !me.flush_queue.is_empty() {
                futures_lite::future::or(
                    me.write_now.notified(),
                    glommio::timer::sleep(WRITE_COALESCE),
                )
                .await;
                if me.flusher_stop.get() {
                    // The hand-over writes everything itself.
                    me.flusher_busy.set(false);
                    me.flusher_idle.notify();
                    return;
                }
            }
            // This round writes everything appended so far.
            me.write_now.reset();
            let queued: Vec<Rc<RefCell<T>>> = me.flush_queue.take();
            let mut failed = false;
            for t in &queued {
                *t.borrow_mut().flush_queued() = false;
                let log = t.borrow().log().clone();
                // Records every channel has finished since they were published are not
                // written at all (see `TopicLog::plan`).
                plan_writes(&*host, t);
                if let Err(e) = storage::log::flush(&log).await {
                    failed = true;
                    host.set_unhealthy(format!("write failed: {e}"));
                    me.queue_flush(t);
                }
                // What is written now and every channel has read leaves memory.
                let readers_from = t.borrow().lowest_cursor();
                log.borrow_mut().forget_read(readers_from);
            }
            // fsync: always in durable mode, else every --sync-every messages or --sync-timeout.
            let topics: Vec<Rc<RefCell<T>>> = host.with_items(|topics| topics.cloned().collect());
            for t in &topics {
                let log = t.borrow().log().clone();
                let due = {
                    let l = log.borrow();
                    l.unsynced > 0
                        && (me.policy.durable
                            || l.head() - l.synced_end >= me.policy.sync_every
                            || l.last_sync.elapsed() >= me.policy.sync_timeout
                            || l.sync_requested())
                };
                if due {
                    if let Err(e) = storage::log::sync(&log).await {
                        failed = true;
                        host.set_unhealthy(format!("fsync failed: {e}"));
                    }
                }
            }
            host.answer_disk_acks();
            if !failed {
                host.set_healthy();
            }
            let structural =
                queued.iter().any(|t| t.borrow().meta_dirty()) || host.waits_for_meta();
            if structural || last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
                last_checkpoint = Instant::now();
                me.checkpoint(&*host).await;
            }
            host.sync_data_path_for_deletions().await;
            me.flusher_busy.set(false);
            me.flusher_idle.notify();
            if failed {
                glommio::timer::sleep(Duration::from_secs(1)).await;
            }
            glommio::yield_if_needed().await;
        }
    }

    /// How long the flusher may sleep before a sync or a checkpoint is due; `None` when
    /// nothing is unsynced and no topic waits for a checkpoint.
    fn next_wake(
        &self,
        host: &impl FlushHost<Item = T>,
        last_checkpoint: Instant,
    ) -> Option<Duration> {
        let sync = self.next_sync_wait(host);
        if self.checkpoint_list.is_empty() {
            return sync;
        }
        let checkpoint = CHECKPOINT_EVERY.saturating_sub(last_checkpoint.elapsed());
        Some(sync.map_or(checkpoint, |d| d.min(checkpoint)))
    }

    /// How long the flusher may sleep before a sync is due; `None` when nothing is unsynced.
    fn next_sync_wait(&self, host: &impl FlushHost<Item = T>) -> Option<Duration> {
        if !self.flush_queue.is_empty() {
            return Some(Duration::ZERO);
        }
        host.with_items(|topics| {
            topics
                .filter_map(|t| {
                    let t = t.borrow();
                    let l = t.log().borrow();
                    (l.unsynced > 0).then(|| {
                        // A replica's sync request is served at once.
                        if l.sync_requested() {
                            return Duration::ZERO;
                        }
                        self.policy
                            .sync_timeout
                            .saturating_sub(l.last_sync.elapsed())
                    })
                })
                .min()
        })
        .map(|d| d.min(CHECKPOINT_EVERY))
    }

    /// Persists each changed topic's metadata (channels, pauses, floors: so a crash redelivers
    /// little) and deletes the segments every channel has passed. Unchanged topics cost a
    /// comparison; metadata is written off the shard's thread, into the directory opened here
    /// (see `storage::meta`), never for a deleted topic. Then answers the actions that waited
    /// for it.
    async fn checkpoint(&self, host: &impl FlushHost<Item = T>) {
        let topics: Vec<Rc<RefCell<T>>> = self.checkpoint_list.take();
        let mut failed = Vec::new();
        for t in topics {
            *t.borrow_mut().checkpoint_queued() = false;
            let (dir, meta, floor, gen) = {
                let tb = t.borrow();
                let log = tb.log().borrow();
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
                    tb.meta_gen(),
                )
            };
            let unchanged = t.borrow().last_meta() == Some(&meta);
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
                    warn!(topic = %t.borrow().name(), "checkpoint failed: {e}");
                    failed.push((t.clone(), e.to_string()));
                    // Tried again at the next checkpoint.
                    self.queue_checkpoint(&t);
                    continue;
                }
                let mut tb = t.borrow_mut();
                tb.set_last_meta(meta);
                // A change made while the write ran is not in it.
                let dirty = tb.meta_gen() != gen;
                tb.set_meta_dirty(dirty);
            }
            {
                let mut tb = t.borrow_mut();
                let saved = tb.meta_saved_gen();
                *saved = (*saved).max(gen);
            }
            let (trash, keeps) = {
                let tb = t.borrow();
                // The floor may have dropped while the metadata was written (a channel
                // rewound): never release what a channel owes now.
                let floor = floor.min(tb.floor());
                let mut log = tb.log().borrow_mut();
                log.release_below(floor);
                log.shrink_window();
                (log.take_trash(), log.keeps_for_a_time())
            };
            storage::delete_in_background(trash);
            if keeps {
                // Segments kept by a retention time go once old, even if nothing moves.
                self.queue_checkpoint(&t);
            }
        }
        host.answer_meta_waiters(&failed);
    }

    /// The hand-over to storage at a clean stop: every topic's pending writes are written and
    /// fsynced, and its metadata records each channel's cursor and every message it still owed
    /// (in flight ones as requeued, deferred ones with the delay left).
    ///
    /// A write that fails (disk full, say) is retried for a while; [`HandOver::lost`] is how
    /// many bytes were still unwritten after that (lost: the process then exits with an
    /// error).
    pub async fn hand_over(&self, host: &impl FlushHost<Item = T>) -> HandOver {
        // The flusher may be writing chunks it took from a log: let that round finish first.
        self.flusher_stop.set(true);
        self.wake_flusher.notify();
        self.write_now.notify();
        while self.flusher_busy.get() {
            self.flusher_idle.notified().await;
        }
        let topics: Vec<Rc<RefCell<T>>> = host.with_items(|topics| topics.cloned().collect());
        let mut owed = 0usize;
        let mut lost = 0usize;
        let mut failed_meta = Vec::new();
        let give_up_at = Instant::now() + FINAL_WRITE_PATIENCE;
        for t in topics {
            let log = t.borrow().log().clone();
            if !log.borrow().is_persistent() {
                continue;
            }
            plan_writes(host, &t);
            let mut tries = 0;
            while let Err(e) = storage::log::flush(&log).await {
                tries += 1;
                let now = Instant::now();
                if now >= give_up_at {
                    let left = log.borrow().unwritten_bytes();
                    error!(topic = %t.borrow().name(), unwritten_bytes = left, "final write failed, giving up: {e}");
                    lost += left;
                    break;
                }
                if tries == 1 {
                    let left = give_up_at.saturating_duration_since(now);
                    error!(topic = %t.borrow().name(), "final write failed, retrying for {left:.1?}: {e}");
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
            if let Err(e) = storage::log::trim_padding(&log).await {
                warn!(topic = %t.borrow().name(), "cannot trim the newest segment's padding: {e}");
            }
            if let Err(e) = storage::log::sync(&log).await {
                error!(topic = %t.borrow().name(), "final fsync failed: {e}");
            }
            let (meta, gen) = {
                let tb = t.borrow();
                (tb.to_meta(true, Instant::now()), tb.meta_gen())
            };
            owed += meta.channels.iter().map(|c| c.pending.len()).sum::<usize>();
            let dir = log.borrow().dir().map(|d| d.to_path_buf());
            if let Some(dir) = dir {
                let written = storage::meta::open_dir(&dir)
                    .and_then(|handle| storage::meta::write(&handle, &meta));
                match written {
                    Ok(()) => *t.borrow_mut().meta_saved_gen() = gen,
                    Err(e) => {
                        error!(topic = %t.borrow().name(), "cannot write metadata: {e}");
                        failed_meta.push((t.clone(), e.to_string()));
                    }
                }
            }
        }
        // Deletions that came in after the flusher's last round.
        host.answer_meta_waiters(&failed_meta);
        host.sync_data_path_for_deletions().await;
        HandOver { owed, lost }
    }
}

//! One archived topic: a consumer whose deferred handler appends each message to the pending
//! batch and keeps its [`Pending`] answer, and a writer task that hands batches to a blocking
//! thread ([`OutputFile::write_batch`]), then leaves the batch's fdatasync to a task of its own
//! that, once it is done, FINs the batch's messages in one go ([`client::answer_all`]); up to
//! [`MAX_SYNCS`] syncs run at once, so the next batch is written (and its sync started) while
//! the previous one syncs. Holding a message costs its record in the batch and its answer in a
//! list: no task, future or waker per message.
//!
//! When a batch is written (NSQ's router, pipelined): when the pending messages reach half of
//! `--max-in-flight` (NSQ: all of it; half lets the other half fill while this one is written
//! and synced, instead of stalling the consumer for every sync) or the consumer is starved (a
//! connection has 85% of its RDY in flight: it would stall otherwise), every
//! `--sync-interval`, on SIGHUP (which also closes the file), and at once while stopping.
//!
//! Invariants: a message is FINished only after the batch holding it was written and synced
//! (at-least-once: a crash loses nothing acknowledged); `answers` holds the answers of exactly
//! the records in `pending`, in the same order; batches reach the file in the order their
//! messages arrived; a write or sync error ends the process with status 1 (as NSQ), so the
//! broker requeues every message not FINished.

use crate::archive::file::{Batch, OutputFile, ToSync};

/// Batches written and being synced at once (each holds about `batch_target` messages): two
/// halves of `--max-in-flight`, one syncing while the other is written and starts its sync.
pub const MAX_SYNCS: usize = 2;
use crate::metrics::Metrics;
use client::{Consumer, ConsumerConfig, HandlerResult, Message, Pending};
use nsq_common::local_sync::Notify;
use std::cell::{Cell, OnceCell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The shared state of one topic's consumer and writer.
pub struct Topic {
    pub name: String,
    /// Pending messages that make a batch worth writing at once: half of `--max-in-flight`,
    /// so that the other half fills while it is written and synced.
    batch_target: u64,
    sync_interval: Duration,
    pending: RefCell<Batch>,
    /// The answers owed for `pending`'s records, in the same order.
    answers: RefCell<Vec<Pending>>,
    /// Written batches whose sync (then FIN) is under way.
    syncing: Cell<usize>,
    /// Poked after each sync and when the writer ends ([`Topic::stop`] waits on it).
    synced_notify: Notify,
    /// Poked when the filling batch should be written now.
    wake: Notify,
    consumer: OnceCell<Consumer>,
    /// Set by [`Topic::stop`]: write at once; `stopped` once the consumer has stopped.
    stopping: Cell<bool>,
    stopped: Cell<bool>,
    hup: Cell<bool>,
    pub messages: Cell<u64>,
    /// `--stats-address`'s counters, shared by every topic.
    metrics: Rc<Metrics>,
}

impl Topic {
    /// Starts consuming `config` (its topic) into `file`: the consumer and the writer task.
    /// The consumer connects to `nsqds` or `lookupds`; a failed first connection is logged
    /// and retried by the client.
    pub fn start(
        config: ConsumerConfig,
        file: OutputFile,
        sync_interval: Duration,
        nsqds: Vec<String>,
        lookupds: Vec<String>,
        metrics: Rc<Metrics>,
    ) -> client::Result<Rc<Topic>> {
        let topic = Rc::new(Topic {
            name: config.topic.clone(),
            batch_target: (config.max_in_flight / 2).max(1),
            sync_interval,
            pending: RefCell::new(Batch::default()),
            answers: RefCell::new(Vec::new()),
            syncing: Cell::new(0),
            synced_notify: Notify::new(),
            wake: Notify::new(),
            consumer: OnceCell::new(),
            stopping: Cell::new(false),
            stopped: Cell::new(false),
            hup: Cell::new(false),
            messages: Cell::new(0),
            metrics,
        });
        let t = topic.clone();
        let consumer = Consumer::new_deferred(config, move |msg: Message, answer: Pending| {
            t.append(&msg, answer)
        })?;
        let _ = topic.consumer.set(consumer.clone());
        glommio::spawn_local(topic.clone().writer(file)).detach();
        let name = topic.name.clone();
        glommio::spawn_local(async move {
            if let Err(e) = consumer.connect_to_nsqds(nsqds).await {
                tracing::error!(topic = %name, error = %e, "connecting to nsqd (retrying)");
            }
            for lookupd in lookupds {
                if let Err(e) = consumer.connect_to_lookupd(lookupd.clone()).await {
                    tracing::error!(topic = %name, lookupd, error = %e, "querying lookupd (retrying)");
                }
            }
        })
        .detach();
        Ok(topic)
    }

    /// Appends the message's record to the pending batch and keeps its answer with it.
    fn append(&self, msg: &Message, answer: Pending) {
        let full = {
            let mut p = self.pending.borrow_mut();
            p.data.extend_from_slice(msg.body());
            p.data.push(b'\n');
            let end = p.data.len();
            p.ends.push(end);
            p.ends.len() as u64 >= self.batch_target
        };
        self.answers.borrow_mut().push(answer);
        self.messages.set(self.messages.get() + 1);
        self.metrics.received(1);
        let starved = self.consumer.get().is_some_and(|c| c.is_starved());
        if full || starved || self.stopping.get() {
            self.wake.notify();
        }
    }

    /// SIGHUP: sync and close the file (the next message opens a new one).
    pub fn hup(&self) {
        self.hup.set(true);
        self.wake.notify();
    }

    /// Stops consuming (CLS, then waits for the messages in flight, which the writer syncs at
    /// once), then closes the file; returns when all is done.
    pub async fn stop(self: &Rc<Self>) {
        self.stopping.set(true);
        self.wake.notify();
        if let Some(c) = self.consumer.get() {
            c.stop().await;
        }
        self.stopped.set(true);
        self.wake.notify();
        while self.stopped.get() {
            // the writer clears `stopped` when the file is closed
            self.synced_notify.changed().await;
        }
    }

    /// The writer task: waits for a reason to write, writes the filling batch on a blocking
    /// thread, then leaves its fdatasync (and FIN) to a task of its own ([`Topic::sync`]) and
    /// goes on with the next batch: up to [`MAX_SYNCS`] syncs run at once, so a message in
    /// flight waits about one sync, not also the one before its own.
    async fn writer(self: Rc<Self>, mut file: OutputFile) {
        let mut next_tick = Instant::now() + self.sync_interval;
        loop {
            if self.syncing.get() >= MAX_SYNCS {
                // A sync ending pokes `wake`.
                self.wake.notified().await;
                continue;
            }
            let now = Instant::now();
            let tick = now >= next_tick;
            if tick {
                next_tick = now + self.sync_interval;
            }
            let has_records = !self.pending.borrow().ends.is_empty();
            let full = self.pending.borrow().ends.len() as u64 >= self.batch_target;
            let starved = self.consumer.get().is_some_and(|c| c.is_starved());
            let hup = self.hup.replace(false);
            let finishing = self.stopped.get();
            let now_please = has_records && (full || starved || self.stopping.get());
            if !(tick || hup || finishing || now_please) {
                let wait = next_tick.saturating_duration_since(now);
                futures_lite::future::or(self.wake.notified(), glommio::timer::sleep(wait)).await;
                continue;
            }
            if finishing {
                // The close syncs everything; the syncs under way answer their batches first.
                while self.syncing.get() > 0 {
                    self.synced_notify.changed().await;
                }
            }
            let mut batch = std::mem::take(&mut *self.pending.borrow_mut());
            let answers = std::mem::take(&mut *self.answers.borrow_mut());
            batch.tick = tick;
            batch.close = hup || finishing;
            let job = glommio::executor().spawn_blocking(move || {
                let result = file.write_batch(&batch);
                (file, batch, result)
            });
            let (f, batch, result) = job.await;
            file = f;
            let to_sync = match result {
                Ok(to_sync) => to_sync,
                Err(e) => self.fail(e),
            };
            self.syncing.set(self.syncing.get() + 1);
            glommio::spawn_local(self.clone().sync(to_sync, answers)).detach();
            // Reuse the allocation for a later batch when nothing filled meanwhile.
            {
                let mut p = self.pending.borrow_mut();
                if p.ends.is_empty() && p.data.capacity() < batch.data.capacity() {
                    let (mut data, mut ends) = (batch.data, batch.ends);
                    data.clear();
                    ends.clear();
                    p.data = data;
                    p.ends = ends;
                }
            }
            if finishing && self.pending.borrow().ends.is_empty() {
                while self.syncing.get() > 0 {
                    self.synced_notify.changed().await;
                }
                self.stopped.set(false);
                self.synced_notify.notify();
                return;
            }
        }
    }

    /// Makes a written batch durable (fdatasync on a blocking thread, unless the write closed
    /// the file, which synced it), then FINs its messages.
    async fn sync(self: Rc<Self>, to_sync: Option<ToSync>, answers: Vec<Pending>) {
        if let Some(to_sync) = to_sync {
            let done = glommio::executor()
                .spawn_blocking(move || to_sync.sync())
                .await;
            if let Err(e) = done {
                self.fail(e);
            }
        }
        let n = answers.len() as u64;
        if n > 0 {
            tracing::debug!(topic = %self.name, records = n, "synced records to disk");
        }
        client::answer_all(answers, HandlerResult::Finish);
        self.metrics.answered(n, HandlerResult::Finish);
        self.syncing.set(self.syncing.get() - 1);
        self.synced_notify.notify();
        self.wake.notify();
    }

    /// A write or sync failed: as NSQ, the process ends (the broker requeues what was not
    /// FINished).
    fn fail(&self, e: std::io::Error) -> ! {
        self.metrics.error("write");
        tracing::error!(topic = %self.name, error = %e, "writing or syncing the file; exiting");
        std::process::exit(1);
    }
}

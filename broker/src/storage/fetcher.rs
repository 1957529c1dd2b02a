//! The read path behind the in-memory window: the fetcher task reads the segment blocks
//! readers wait for ([`storage::log::fetch`]) and has the host let them dispatch again; the trimmer
//! drops cached blocks nobody read for [`BLOCK_IDLE`] and runs only while some log caches
//! blocks.
//!
//! It knows a topic only through [`Fetched`] (its log, the flags of the work sets, its readers)
//! and its owner only through [`FetchHost`] (waking readers), both used by static dispatch.
//!
//! Invariant: the trimmer runs exactly while `cached_topics` is not empty (only it removes
//! entries).

use super::flusher::Stored;
use crate::storage::{self};
use crate::work_set::WorkSet;
use nsq_common::local_sync::Notify;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Cached segment blocks nobody read for about this long are dropped (see `Fetcher::trimmer`).
const BLOCK_IDLE: Duration = Duration::from_secs(5);

/// What the fetcher needs of a topic, beyond its log.
pub trait Fetched: Stored {
    /// What reads the log (a channel): woken through the host once its blocks are in.
    type Reader: Clone + 'static;
    /// The flag of the fetcher's work set.
    fn fetch_queued(&mut self) -> &mut bool;
    /// The flag of the trimmer's work set (its log has cached blocks).
    fn blocks_listed(&mut self) -> &mut bool;
    fn readers(&self) -> impl Iterator<Item = &Self::Reader>;
}

/// What the fetcher needs of the owner of the topics (a shard).
pub trait FetchHost: 'static {
    type Item: Fetched + 'static;
    fn fetcher(&self) -> &Fetcher<Self::Item>;
    /// Lists a reader to dispatch at the next [`FetchHost::flush_dispatches`].
    fn dispatch_soon(&self, reader: &<Self::Item as Fetched>::Reader);
    /// Dispatches every reader listed.
    fn flush_dispatches(&self);
}

/// The fetcher's and the trimmer's state.
pub struct Fetcher<T> {
    /// Topics whose readers wait for segment blocks, and the fetcher's wake-up.
    fetch_queue: WorkSet<Rc<RefCell<T>>>,
    wake_fetcher: Notify,
    /// Topics whose logs hold cached blocks, aged by the trimmer while it runs.
    cached_topics: WorkSet<Rc<RefCell<T>>>,
}

impl<T> Default for Fetcher<T> {
    fn default() -> Fetcher<T> {
        Fetcher {
            fetch_queue: WorkSet::default(),
            wake_fetcher: Notify::new(),
            cached_topics: WorkSet::default(),
        }
    }
}

impl<T: Fetched + 'static> Fetcher<T> {
    /// Bytes of segment blocks the logs hold (for /metrics).
    pub fn read_cache_bytes(&self) -> u64 {
        self.cached_topics.with_items(|topics| {
            topics
                .iter()
                .map(|t| t.borrow().log().borrow().cached_bytes())
                .sum()
        })
    }

    /// Lists a topic whose log now holds cached blocks, and starts the trimmer if it sleeps.
    pub fn list_cached<H: FetchHost<Item = T>>(host: &Rc<H>, t: &Rc<RefCell<T>>) {
        // The trimmer runs exactly while the list is not empty (only it removes entries).
        let added = host
            .fetcher()
            .cached_topics
            .add(t, t.borrow_mut().blocks_listed());
        if added == Some(true) {
            glommio::spawn_local(Self::trimmer(host.clone())).detach();
        }
    }

    /// Every few seconds, drops the cached blocks nobody read meanwhile; ends when no log has
    /// any (so an idle broker has no timer ticking).
    async fn trimmer<H: FetchHost<Item = T>>(host: Rc<H>) {
        let me = host.fetcher();
        loop {
            glommio::timer::sleep(BLOCK_IDLE).await;
            me.cached_topics.retain(|t| {
                let left = t.borrow().log().borrow().age_blocks();
                if !left {
                    *t.borrow_mut().blocks_listed() = false;
                }
                left
            });
            if me.cached_topics.is_empty() {
                return;
            }
        }
    }

    pub fn queue_fetch(&self, t: &Rc<RefCell<T>>) {
        if self
            .fetch_queue
            .add(t, t.borrow_mut().fetch_queued())
            .is_some()
        {
            self.wake_fetcher.notify();
        }
    }

    /// The fetcher task: reads the segment blocks readers wait for (see `storage::blocks`),
    /// then lets the topics' readers deliver again. Sleeps while nobody waits.
    pub async fn run<H: FetchHost<Item = T>>(host: Rc<H>) {
        let me = host.fetcher();
        loop {
            let queued = me.fetch_queue.take();
            if queued.is_empty() {
                me.wake_fetcher.notified().await;
                continue;
            }
            for t in &queued {
                *t.borrow_mut().fetch_queued() = false;
                let log = t.borrow().log().clone();
                // Room first: the blocks every reader has passed go before new ones come.
                log.borrow().drop_passed_blocks(t.borrow().lowest_cursor());
                let (arrived, failed) = storage::log::fetch(&log).await;
                if arrived > 0 {
                    Self::list_cached(&host, t);
                }
                let readers: Vec<T::Reader> = t.borrow().readers().cloned().collect();
                if failed > 0 {
                    // A read failed: this topic's readers try again in a while (after a few
                    // failures they skip the block), without holding up other topics.
                    let waker = host.clone();
                    glommio::spawn_local(async move {
                        glommio::timer::sleep(storage::blocks::RETRY_AFTER).await;
                        for r in &readers {
                            waker.dispatch_soon(r);
                        }
                        waker.flush_dispatches();
                    })
                    .detach();
                    continue;
                }
                for r in &readers {
                    host.dispatch_soon(r);
                }
            }
            host.flush_dispatches();
        }
    }
}

//! The shard's read path behind the in-memory window: the fetcher task reads the segment
//! blocks channels wait for (`storage::log::fetch`) and lets them dispatch again; the trimmer
//! drops cached blocks nobody read for [`BLOCK_IDLE`] and runs only while some log caches
//! blocks.

use super::Shard;
use crate::storage::{self};
use crate::topic::{ChannelRef, Topic};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Cached segment blocks nobody read for about this long are dropped (see `Shard::trimmer`).
const BLOCK_IDLE: Duration = Duration::from_secs(5);

impl Shard {
    /// Bytes of segment blocks the shard's logs hold (for /metrics).
    pub(crate) fn read_cache_bytes(&self) -> u64 {
        self.cached_topics.with_items(|topics| {
            topics
                .iter()
                .map(|t| t.borrow().log.borrow().cached_bytes())
                .sum()
        })
    }

    /// Lists a topic whose log now holds cached blocks, and starts the trimmer if it sleeps.
    pub(super) fn list_cached(self: &Rc<Self>, t: &Rc<RefCell<Topic>>) {
        // The trimmer runs exactly while the list is not empty (only it removes entries).
        let added = self.cached_topics.add(t, &mut t.borrow_mut().blocks_listed);
        if added == Some(true) {
            glommio::spawn_local(self.clone().trimmer()).detach();
        }
    }

    /// Every few seconds, drops the cached blocks nobody read meanwhile; ends when no log has
    /// any (so an idle broker has no timer ticking).
    async fn trimmer(self: Rc<Self>) {
        loop {
            glommio::timer::sleep(BLOCK_IDLE).await;
            self.cached_topics.retain(|t| {
                let left = t.borrow().log.borrow().age_blocks();
                if !left {
                    t.borrow_mut().blocks_listed = false;
                }
                left
            });
            if self.cached_topics.is_empty() {
                return;
            }
        }
    }

    pub(super) fn queue_fetch(&self, t: &Rc<RefCell<Topic>>) {
        if self
            .fetch_queue
            .add(t, &mut t.borrow_mut().fetch_queued)
            .is_some()
        {
            self.wake_fetcher.notify();
        }
    }

    /// Reads the segment blocks channels wait for (see `storage::blocks`), then lets the
    /// topics' channels deliver again. Sleeps while nobody waits.
    pub(super) async fn fetcher(self: Rc<Self>) {
        loop {
            let queued = self.fetch_queue.take();
            if queued.is_empty() {
                self.wake_fetcher.notified().await;
                continue;
            }
            for t in &queued {
                t.borrow_mut().fetch_queued = false;
                let log = t.borrow().log.clone();
                let (arrived, failed) = storage::log::fetch(&log).await;
                if arrived > 0 {
                    self.list_cached(t);
                }
                let channels: Vec<ChannelRef> = t.borrow().channels().cloned().collect();
                if failed > 0 {
                    // A read failed: this topic's readers try again in a while (after a few
                    // failures they skip the block), without holding up other topics.
                    let shard = self.clone();
                    glommio::spawn_local(async move {
                        glommio::timer::sleep(storage::blocks::RETRY_AFTER).await;
                        for ch in &channels {
                            shard.dispatch_soon(ch);
                        }
                        shard.flush_dispatches();
                    })
                    .detach();
                    continue;
                }
                for ch in &channels {
                    self.dispatch_soon(ch);
                }
            }
            self.flush_dispatches();
        }
    }
}

//! The shard's side of the read path ([`crate::storage::fetcher`]): a [`Topic`] as the
//! fetcher's [`Fetched`] item (its channels are the readers), the [`Shard`] as its
//! [`FetchHost`] (a channel whose blocks arrived is dispatched again), and the shard's entry
//! points to it.
//!
//! The fetcher task is spawned by [`super::lifecycle`]; everything it does is in storage.

use super::Shard;
use crate::storage::fetcher::{FetchHost, Fetched, Fetcher};
use crate::topic::{ChannelRef, Topic};
use std::cell::RefCell;
use std::rc::Rc;

impl Fetched for Topic {
    type Reader = ChannelRef;
    fn fetch_queued(&mut self) -> &mut bool {
        &mut self.fetch_queued
    }
    fn blocks_listed(&mut self) -> &mut bool {
        &mut self.blocks_listed
    }
    fn readers(&self) -> impl Iterator<Item = &ChannelRef> {
        self.channels()
    }
}

impl FetchHost for Shard {
    type Item = Topic;
    fn fetcher(&self) -> &Fetcher<Topic> {
        &self.fetcher
    }
    fn dispatch_soon(&self, reader: &ChannelRef) {
        Shard::dispatch_soon(self, reader);
    }
    fn flush_dispatches(&self) {
        Shard::flush_dispatches(self);
    }
}

impl Shard {
    /// Bytes of segment blocks the shard's logs hold (for /metrics).
    pub(crate) fn read_cache_bytes(&self) -> u64 {
        self.fetcher.read_cache_bytes()
    }

    /// Lists a topic whose log now holds cached blocks, and starts the trimmer if it sleeps.
    pub(super) fn list_cached(self: &Rc<Self>, t: &Rc<RefCell<Topic>>) {
        Fetcher::list_cached(self, t);
    }

    /// Asks the fetcher for the segment blocks `t`'s readers wait for.
    pub(super) fn queue_fetch(&self, t: &Rc<RefCell<Topic>>) {
        self.fetcher.queue_fetch(t);
    }
}

//! [`WorkSet`]: the items waiting for one of a shard's tasks (the flusher's topics, the
//! fetcher's, the trimmer's, the next checkpoint's, the channels to dispatch), each listed at
//! most once however often it is asked for.
//!
//! Invariant: an item is in the set exactly while its `listed` flag is true. The flag lives in
//! the item (a field of the topic or channel, passed to [`WorkSet::add`]), so asking again is
//! one test of a bool, with no search and no hash; whoever takes an item out ([`WorkSet::take`],
//! [`WorkSet::retain`]) clears its flag.

use std::cell::RefCell;

pub struct WorkSet<T> {
    items: RefCell<Vec<T>>,
}

impl<T> Default for WorkSet<T> {
    fn default() -> Self {
        WorkSet {
            items: RefCell::new(Vec::new()),
        }
    }
}

impl<T: Clone> WorkSet<T> {
    /// Lists `item` unless `listed` says it is already (and sets it). `None`: it was listed;
    /// `Some(first)`: it was added, `first` when the set was empty before (the moment to wake
    /// the task that works through it).
    pub fn add(&self, item: &T, listed: &mut bool) -> Option<bool> {
        if *listed {
            return None;
        }
        *listed = true;
        let mut items = self.items.borrow_mut();
        items.push(item.clone());
        Some(items.len() == 1)
    }

    /// Hands every listed item over, oldest first; the caller clears each one's flag.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.items.borrow_mut())
    }

    /// Keeps the items `keep` says to keep; `keep` clears the flag of each it drops.
    pub fn retain(&self, keep: impl FnMut(&T) -> bool) {
        self.items.borrow_mut().retain(keep);
    }

    pub fn is_empty(&self) -> bool {
        self.items.borrow().is_empty()
    }

    /// Looks at the listed items without taking them.
    pub fn with_items<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        f(&self.items.borrow())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_listed_once_until_taken() {
        let set = WorkSet::default();
        let (mut a, mut b) = (false, false);
        assert_eq!(set.add(&1, &mut a), Some(true));
        assert_eq!(set.add(&1, &mut a), None);
        assert_eq!(set.add(&2, &mut b), Some(false));
        assert_eq!(set.take(), vec![1, 2]);
        assert!(set.is_empty());
        // Listed again only once its flag is cleared by whoever took it.
        assert_eq!(set.add(&1, &mut a), None);
        a = false;
        assert_eq!(set.add(&1, &mut a), Some(true));
        set.retain(|_| false);
        assert!(set.is_empty());
    }
}

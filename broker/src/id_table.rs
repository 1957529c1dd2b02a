//! A map from message ID to a channel's record of it (in flight), laid out for the FIN path.
//!
//! The broker makes a topic's IDs from one counter (hex of a u64, see [`crate::ids`]), and a
//! channel delivers them in about that order, so the IDs in flight are mostly a run of
//! neighbouring numbers. Their records live in a *window*: a ring of slots indexed by
//! `number - base`. A delivery writes the slot after the last, a FIN finds its slot by a
//! subtraction, and both walk memory in order (no hashing, no probing at random, which cost
//! two cache misses per FIN when this was a hash table).
//!
//! What does not fit the window goes to a hash map beside it (*others*): IDs the broker did
//! not make, and records shed from the front when the window would grow too sparse
//! (`MAX_SPARSENESS`), which is what a message held in flight for long (TOUCHed, or a slow
//! consumer) while thousands after it are finished would otherwise make it. So memory stays
//! within a small factor of the records held, whatever the order of FINs.
//!
//! A window slot is the index of its record in a slab (*records*, 4 bytes a slot), not the
//! record itself: the window spans up to `MAX_SPARSENESS` times the records it holds, and a
//! channel's in-flight record is some 150 bytes, so slots of records cost a consumer with
//! 5,000 in flight 2.4 MB of mostly empty window; slots of indices cost 64 KB beside the
//! records themselves. The slab reuses freed places, so it holds as many places as the most
//! records the window held at once; it grows by chunks of 256 places that never move, so a
//! growing table allocates 36 KB at a time (for a channel's records) instead of reallocating
//! all it holds (at 5,000 in flight, 0.6 MB copied into 1.2 MB with both alive).
//!
//! An ID is in at most one of the two (an ID in `others` may lie inside the window's range,
//! in an empty slot: lookups fall back to `others`). The window is trimmed to start and end on
//! a record; the window and the slab are released when the table empties.

use crate::ids::IdHash;
use protocol::MessageId;
use std::collections::{HashMap, VecDeque};

pub struct IdTable<T> {
    /// Where in `records` the record under number `base + i` is; [`EMPTY`] where there is
    /// none. Empty, or starts and ends with a record.
    window: VecDeque<u32>,
    base: u64,
    /// Records in the window.
    in_window: usize,
    /// The window's records.
    records: Slab<T>,
    others: HashMap<MessageId, T, IdHash>,
}

impl<T> Default for IdTable<T> {
    fn default() -> Self {
        IdTable {
            window: VecDeque::new(),
            base: 0,
            in_window: 0,
            records: Slab::default(),
            others: HashMap::default(),
        }
    }
}

/// A window slot without a record.
const EMPTY: u32 = u32::MAX;

/// Above this many slots, an emptied window gives its memory back.
const KEEP_SLOTS: usize = 1024;

/// A window longer than this may be at most this many times longer than the records it
/// holds: growing sparser, it sheds records from its front into `others`.
const SPARSE_FROM: usize = 1024;
const MAX_SPARSENESS: usize = 4;

/// Numbers this far below the window's start still extend it at the front (a requeued
/// message delivered again); further ones go to `others`.
const MAX_FRONT_GAP: u64 = 256;

impl<T> IdTable<T> {
    pub fn len(&self) -> usize {
        self.in_window + self.others.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `value` under `id`; returns the value it replaces.
    pub fn insert(&mut self, id: MessageId, value: T) -> Option<T> {
        if !self.others.is_empty() {
            if let Some(old) = self.others.get_mut(&id) {
                return Some(std::mem::replace(old, value));
            }
        }
        let Some(n) = id.to_u64() else {
            return self.others.insert(id, value);
        };
        if self.window.is_empty() {
            self.base = n;
            let at = self.records.put(value);
            self.window.push_back(at);
            self.in_window = 1;
            return None;
        }
        if n < self.base {
            let gap = self.base - n;
            if gap > MAX_FRONT_GAP || self.too_sparse(self.window.len() + gap as usize) {
                return self.others.insert(id, value);
            }
            for _ in 1..gap {
                self.window.push_front(EMPTY);
            }
            let at = self.records.put(value);
            self.window.push_front(at);
            self.base = n;
            self.in_window += 1;
            return None;
        }
        let at = n - self.base;
        if let Some(&slot) = self.window.get(at as usize) {
            if slot != EMPTY {
                return self.records.get_mut(slot).replace(value);
            }
            self.window[at as usize] = self.records.put(value);
            self.in_window += 1;
            return None;
        }
        // Past the end: extend, shedding the front first if that would leave the window too
        // sparse (or longer than an index can be).
        while !self.window.is_empty() {
            let span = n - self.base + 1;
            if span <= usize::MAX as u64 && !self.too_sparse(span as usize) {
                break;
            }
            self.shed_front();
        }
        if self.window.is_empty() {
            self.base = n;
        }
        let at = (n - self.base) as usize;
        self.window.resize(at, EMPTY);
        let place = self.records.put(value);
        self.window.push_back(place);
        self.in_window += 1;
        None
    }

    pub fn get_mut(&mut self, id: &MessageId) -> Option<&mut T> {
        if let Some(slot) = self.slot_of(id) {
            let at = self.window[slot];
            if at != EMPTY {
                return self.records.get_mut(at).as_mut();
            }
        }
        if self.others.is_empty() {
            return None;
        }
        self.others.get_mut(id)
    }

    pub fn remove(&mut self, id: &MessageId) -> Option<T> {
        let in_window = self.slot_of(id).filter(|&slot| self.window[slot] != EMPTY);
        let taken = match in_window {
            Some(slot) => {
                let at = std::mem::replace(&mut self.window[slot], EMPTY);
                self.in_window -= 1;
                self.trim();
                self.records.take(at)
            }
            // An ID in `others` may lie inside the window (the window grew over it later).
            None if self.others.is_empty() => return None,
            None => self.others.remove(id)?,
        };
        if self.is_empty() {
            self.release();
        }
        Some(taken)
    }

    /// Keeps the records for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&MessageId, &mut T) -> bool) {
        let base = self.base;
        for (i, slot) in self.window.iter_mut().enumerate() {
            let at = *slot;
            if at == EMPTY {
                continue;
            }
            let value = self
                .records
                .get_mut(at)
                .as_mut()
                .expect("a window slot's record");
            if !keep(&MessageId::from_u64(base + i as u64), value) {
                *slot = EMPTY;
                self.records.take(at);
                self.in_window -= 1;
            }
        }
        self.trim();
        self.others.retain(|id, v| keep(id, v));
        if self.is_empty() {
            self.release();
        }
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.window
            .iter()
            .filter(|&&at| at != EMPTY)
            .filter_map(|&at| self.records.get(at))
            .chain(self.others.values())
    }

    /// The window slot of `id`, if it falls inside the window.
    #[inline]
    fn slot_of(&self, id: &MessageId) -> Option<usize> {
        let n = id.to_u64()?;
        let at = n.checked_sub(self.base)?;
        (at < self.window.len() as u64).then_some(at as usize)
    }

    fn too_sparse(&self, span: usize) -> bool {
        span > SPARSE_FROM && span / MAX_SPARSENESS > self.in_window + 1
    }

    /// Moves the window's first record into `others` and trims the gap after it.
    fn shed_front(&mut self) {
        if let Some(at) = self.window.pop_front().filter(|&at| at != EMPTY) {
            self.in_window -= 1;
            let value = self.records.take(at);
            self.others.insert(MessageId::from_u64(self.base), value);
        }
        self.base += 1;
        self.trim();
    }

    /// Drops the empty slots at both ends.
    fn trim(&mut self) {
        while self.window.front() == Some(&EMPTY) {
            self.window.pop_front();
            self.base += 1;
        }
        while self.window.back() == Some(&EMPTY) {
            self.window.pop_back();
        }
    }

    fn release(&mut self) {
        self.window.clear();
        self.records.clear(KEEP_SLOTS);
        self.in_window = 0;
        if self.window.capacity() > KEEP_SLOTS {
            self.window.shrink_to(KEEP_SLOTS);
        }
        if self.others.capacity() > KEEP_SLOTS {
            self.others.shrink_to(KEEP_SLOTS);
        }
    }
}

/// Places for records, by a `u32` index, in chunks of [`CHUNK`] that never move: growing
/// adds a chunk and copies nothing. Freed places are reused before new ones are made.
struct Slab<T> {
    chunks: Vec<Box<[Option<T>]>>,
    /// Places handed out so far: the next new one.
    made: u32,
    /// Places made and empty.
    free: Vec<u32>,
}

/// Places per chunk (a power of two).
const CHUNK: usize = 256;

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            chunks: Vec::new(),
            made: 0,
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Puts `value` in a free place; returns where.
    #[inline]
    fn put(&mut self, value: T) -> u32 {
        if let Some(at) = self.free.pop() {
            *self.get_mut(at) = Some(value);
            return at;
        }
        // A window never holds u32::MAX records: it sheds its front long before (a window
        // of that many slots would be 16 GiB).
        let at = self.made;
        if at as usize == self.chunks.len() * CHUNK {
            self.chunks.push((0..CHUNK).map(|_| None).collect());
        }
        self.made += 1;
        *self.get_mut(at) = Some(value);
        at
    }

    /// Takes the record at `at` out, freeing its place.
    #[inline]
    fn take(&mut self, at: u32) -> T {
        let value = self.get_mut(at).take().expect("a window slot's record");
        self.free.push(at);
        value
    }

    #[inline]
    fn get(&self, at: u32) -> Option<&T> {
        self.chunks[at as usize / CHUNK][at as usize % CHUNK].as_ref()
    }

    #[inline]
    fn get_mut(&mut self, at: u32) -> &mut Option<T> {
        &mut self.chunks[at as usize / CHUNK][at as usize % CHUNK]
    }

    /// Forgets every place of an empty slab (every record taken), keeping the chunks of the
    /// first `keep` places.
    fn clear(&mut self, keep: usize) {
        debug_assert_eq!(self.free.len(), self.made as usize, "records left");
        self.chunks.truncate(keep.div_ceil(CHUNK));
        self.made = 0;
        self.free.clear();
        self.free.shrink_to(keep);
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.chunks.iter().flat_map(|c| c.iter()).flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u64) -> MessageId {
        MessageId::from_u64(n)
    }

    #[test]
    fn values_stay_with_their_ids_in_and_out_of_order() {
        let mut t = IdTable::default();
        for n in 0..10 {
            assert!(t.insert(id(n), n).is_none());
        }
        assert_eq!(t.remove(&id(3)), Some(3));
        assert_eq!(t.remove(&id(7)), Some(7));
        assert_eq!(t.remove(&id(7)), None);
        t.insert(id(3), 30);
        assert_eq!(t.len(), 9);
        for n in [0, 1, 2, 4, 5, 6, 8, 9] {
            assert_eq!(t.get_mut(&id(n)).copied(), Some(n));
        }
        assert_eq!(t.get_mut(&id(3)).copied(), Some(30));
        assert_eq!(t.insert(id(9), 90), Some(9));
        assert_eq!(t.len(), 9);
        assert!(
            t.others.is_empty(),
            "neighbouring IDs all sit in the window"
        );
        // Not a broker-made ID: kept beside the window.
        let foreign = MessageId(*b"not-a-hex-id!!!!");
        t.insert(foreign, 77);
        assert_eq!(t.get_mut(&foreign).copied(), Some(77));
        assert_eq!(t.remove(&foreign), Some(77));
    }

    #[test]
    fn a_message_held_long_does_not_stretch_the_window() {
        let mut t = IdTable::default();
        t.insert(id(0), 0u64);
        // A million more delivered and finished, a few at a time, while 0 stays.
        for n in 1..1_000_000u64 {
            t.insert(id(n), n);
            if n % 8 == 0 {
                for m in n - 7..=n {
                    assert_eq!(t.remove(&id(m)), Some(m));
                }
            }
        }
        assert!(t.window.len() <= SPARSE_FROM, "window {}", t.window.len());
        assert_eq!(t.get_mut(&id(0)).copied(), Some(0), "shed, not lost");
        assert_eq!(t.len(), 8);
    }

    #[test]
    fn retain_and_emptying_release_the_memory() {
        let mut t = IdTable::default();
        for n in 0..5000 {
            t.insert(id(n), n);
        }
        t.retain(|i, v| {
            assert_eq!(*i, id(*v));
            *v % 2 == 0
        });
        assert_eq!(t.len(), 2500);
        let mut left: Vec<u64> = t.values().copied().collect();
        left.sort_unstable();
        assert_eq!(left, (0..5000).step_by(2).collect::<Vec<_>>());
        assert_eq!(t.get_mut(&id(3)), None);
        t.retain(|_, _| false);
        assert!(t.is_empty());
        assert!(
            t.window.capacity() <= KEEP_SLOTS,
            "emptied: memory given back"
        );
        t.insert(id(1), 1);
        assert_eq!(t.window.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Get(u64),
        RetainEven,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Mostly neighbouring numbers, some far ones, a few huge jumps.
        let n = prop_oneof![
            8 => 1000u64..1300,
            1 => 0u64..5000,
            1 => any::<u64>(),
        ];
        prop_oneof![
            4 => (n.clone(), any::<u32>()).prop_map(|(n, v)| Op::Insert(n, v)),
            3 => n.clone().prop_map(Op::Remove),
            2 => n.prop_map(Op::Get),
            1 => Just(Op::RetainEven),
        ]
    }

    proptest! {
        /// The table answers exactly as a plain HashMap does, and its window keeps its shape.
        #[test]
        fn behaves_as_a_hash_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut t = IdTable::default();
            let mut model: std::collections::HashMap<MessageId, u32> = Default::default();
            for op in ops {
                match op {
                    Op::Insert(n, v) => prop_assert_eq!(t.insert(id(n), v), model.insert(id(n), v)),
                    Op::Remove(n) => prop_assert_eq!(t.remove(&id(n)), model.remove(&id(n))),
                    Op::Get(n) => prop_assert_eq!(t.get_mut(&id(n)).copied(), model.get(&id(n)).copied()),
                    Op::RetainEven => {
                        t.retain(|_, v| *v % 2 == 0);
                        model.retain(|_, v| *v % 2 == 0);
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(t.in_window, t.window.iter().filter(|&&at| at != EMPTY).count());
                prop_assert!(t.window.front().is_none_or(|&at| at != EMPTY));
                prop_assert!(t.window.back().is_none_or(|&at| at != EMPTY));
                // The slab holds exactly the window's records, each at one slot's place.
                prop_assert_eq!(t.records.held(), t.in_window);
                prop_assert_eq!(t.records.made as usize, t.in_window + t.records.free.len());
                prop_assert!(t.records.chunks.len() * CHUNK >= t.records.made as usize);
                let mut places: Vec<u32> = t.window.iter().copied().filter(|&at| at != EMPTY).collect();
                places.sort_unstable();
                places.dedup();
                prop_assert_eq!(places.len(), t.in_window, "two slots at one place");
                for (k, _) in t.others.iter() {
                    let in_window = t.slot_of(k).is_some_and(|s| t.window[s] != EMPTY);
                    prop_assert!(!in_window, "an ID in both places");
                }
            }
            let mut a: Vec<u32> = t.values().copied().collect();
            let mut b: Vec<u32> = model.values().copied().collect();
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
        }
    }
}

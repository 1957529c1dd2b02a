//! A map from message ID to a channel's record of it (in flight, deferred), laid out for the
//! FIN path.
//!
//! The records live in a slab whose freed slots are taken again first, and the hash table holds
//! only the ID and a slot number. So the table stays a fraction of the records' size (it is
//! probed at random on every FIN), a FIN moves four bytes out of it rather than the whole
//! record, and a delivery writes its record into the slot the last FIN just freed, which is
//! still in cache. The slab is as long as the most records held at once and is released when
//! the table empties.

use crate::ids::IdHash;
use protocol::MessageId;
use std::collections::HashMap;

pub struct IdTable<T> {
    index: HashMap<MessageId, u32, IdHash>,
    slots: Vec<Option<(MessageId, T)>>,
    free: Vec<u32>,
}

impl<T> Default for IdTable<T> {
    fn default() -> Self {
        IdTable {
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

/// Above this many slots, an emptied table gives its memory back.
const KEEP_SLOTS: usize = 1024;

impl<T> IdTable<T> {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Adds `value` under `id`; returns the value it replaces.
    pub fn insert(&mut self, id: MessageId, value: T) -> Option<T> {
        if let Some(&slot) = self.index.get(&id) {
            let entry = &mut self.slots[slot as usize];
            return entry.replace((id, value)).map(|(_, old)| old);
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some((id, value));
                slot
            }
            None => {
                self.slots.push(Some((id, value)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(id, slot);
        None
    }

    pub fn get_mut(&mut self, id: &MessageId) -> Option<&mut T> {
        let slot = *self.index.get(id)?;
        self.slots[slot as usize].as_mut().map(|(_, v)| v)
    }

    pub fn remove(&mut self, id: &MessageId) -> Option<T> {
        let slot = self.index.remove(id)?;
        let taken = self.slots[slot as usize].take().map(|(_, v)| v);
        self.free.push(slot);
        self.release_if_empty();
        taken
    }

    /// Keeps the records for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&MessageId, &mut T) -> bool) {
        for (slot, entry) in self.slots.iter_mut().enumerate() {
            let Some((id, value)) = entry else { continue };
            if !keep(id, value) {
                self.index.remove(id);
                *entry = None;
                self.free.push(slot as u32);
            }
        }
        self.release_if_empty();
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten().map(|(_, v)| v)
    }

    fn release_if_empty(&mut self) {
        if !self.is_empty() {
            return;
        }
        self.slots.clear();
        self.free.clear();
        if self.slots.capacity() > KEEP_SLOTS {
            self.slots.shrink_to(KEEP_SLOTS);
            self.free.shrink_to(KEEP_SLOTS);
            self.index.shrink_to(KEEP_SLOTS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> MessageId {
        MessageId::from_u64(n)
    }

    #[test]
    fn freed_slots_are_taken_again_and_values_stay_with_their_ids() {
        let mut t = IdTable::default();
        for n in 0..10 {
            assert!(t.insert(id(n), n).is_none());
        }
        assert_eq!(t.remove(&id(3)), Some(3));
        assert_eq!(t.remove(&id(7)), Some(7));
        assert_eq!(t.remove(&id(7)), None);
        t.insert(id(100), 100);
        t.insert(id(101), 101);
        assert_eq!(t.slots.len(), 10, "the two freed slots were reused");
        assert_eq!(t.len(), 10);
        for n in [0, 1, 2, 4, 5, 6, 8, 9, 100, 101] {
            assert_eq!(t.get_mut(&id(n)).copied(), Some(n));
        }
        assert_eq!(t.insert(id(100), 1000), Some(100));
        assert_eq!(t.get_mut(&id(100)).copied(), Some(1000));
        assert_eq!(t.len(), 10);
    }

    #[test]
    fn retain_and_emptying_release_the_slots() {
        let mut t = IdTable::default();
        for n in 0..5000 {
            t.insert(id(n), n);
        }
        t.retain(|_, v| *v % 2 == 0);
        assert_eq!(t.len(), 2500);
        let mut left: Vec<u64> = t.values().copied().collect();
        left.sort_unstable();
        assert_eq!(left, (0..5000).step_by(2).collect::<Vec<_>>());
        assert_eq!(t.get_mut(&id(3)), None);
        t.retain(|_, _| false);
        assert!(t.is_empty());
        assert!(
            t.slots.capacity() <= KEEP_SLOTS,
            "emptied: memory given back"
        );
        t.insert(id(1), 1);
        assert_eq!(t.slots.len(), 1);
    }
}

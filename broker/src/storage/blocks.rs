//! The read cache of a topic's segments: aligned blocks read with direct I/O through the
//! shard's io_uring, shared by every channel that reads the log from disk.
//!
//! Reading a segment through a memory mapping would fault each page in synchronously (the
//! shard stalls on the disk) and fill freshly allocated page cache, which on a virtual machine
//! costs more than the read itself. So channels read from here instead:
//!
//! - [`Blocks::with_bytes`] hands out contiguous bytes of a segment when every block covering
//!   them is cached (copying only when a record straddles two blocks); otherwise it names the
//!   missing block, which the reader marks wanted ([`Blocks::want`]) before it waits.
//! - The shard's fetcher takes the wanted blocks ([`Blocks::take_wanted`]), reads them all at
//!   once, and inserts them ([`Blocks::insert`]); then it wakes the topic's channels.
//! - Read-ahead: a reader entering a block asks for the next [`READ_AHEAD`] ones too, so a
//!   sequential reader rarely waits.
//! - A block records how much of it was written when its read was issued; bytes past that
//!   are not trusted (the file's last block grows), and a reader needing them refetches.
//! - Blocks every channel has read past are dropped at each fetch round and after each
//!   write ([`Blocks::drop_passed`]), unless a reader waited for one and has not read it
//!   yet; beyond that at most [`CAPACITY`] blocks per log, evicted oldest first; blocks
//!   nobody read for a few seconds are dropped ([`Blocks::age`]). Bodies are slices of a
//!   block's copy; a record that straddles two blocks is copied on its own.

use crate::ids::IdHash;
use bytes::Bytes;
use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Bytes per block (and per direct read).
pub const BLOCK: u64 = 256 * 1024;
/// Blocks a sequential reader asks for beyond the one it is in.
pub const READ_AHEAD: u64 = 3;
/// Blocks kept per log (6 MiB): room for the read-ahead of 6 channels at different places.
/// Fewer cost draining speed, more cost memory for no speed
/// (docs/benchmarks.md#draining-a-backlog).
pub const CAPACITY: usize = 24;

/// A block of one segment: (segment base seq, block number).
pub type BlockKey = (u64, u64);

struct Block {
    /// A copy of the direct read's buffer (which goes straight back to the shard's registered
    /// pool): bodies are slices of it, a reference count each, not an allocation and a free
    /// each on the path that drains a backlog.
    data: Bytes,
    /// Bytes of `data` that were written when it was read.
    valid: usize,
    /// Read since the last [`Blocks::age`].
    used: Cell<bool>,
    /// A reader waited for it ([`Blocks::want_awaited`]) and nothing has read it since it
    /// came: a block fetched for a reader below every channel (a redrive of dead letters, a
    /// replay's seek) is not dropped as passed before that reader has had it.
    awaited: Cell<bool>,
    /// The fetch round that inserted it.
    round: u64,
}

impl Block {
    fn touch(&self) {
        self.used.set(true);
        self.awaited.set(false);
    }
}

#[derive(Default)]
pub struct Blocks {
    /// Keyed with the broker's cheap integer hash: keys are ours, not a client's.
    cached: HashMap<BlockKey, Block, IdHash>,
    order: VecDeque<BlockKey>,
    wanted: Vec<BlockKey>,
    /// Wanted or being read: not asked for twice.
    asked: HashSet<BlockKey>,
    /// Of those, the ones a reader waits for (not read-ahead).
    awaited: HashSet<BlockKey>,
    /// The current fetch round: blocks inserted in it are not evicted by it.
    round: u64,
    /// Failed reads per block, and when the last one failed; at [`BAD_AFTER`] the block is
    /// bad and readers skip it.
    failures: HashMap<BlockKey, (u32, Instant), IdHash>,
}

/// Failed reads after which a block counts as unreadable.
pub const BAD_AFTER: u32 = 3;
/// How long after a failed read the block may be asked for again: the failures that make a
/// block bad are spread over seconds, so a passing error does not make readers skip it.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Blocks {
    /// The block holding byte `off` of segment `base`, where `off` is in it, and where its
    /// valid part ends (one lookup: the common case of a record inside one block); `Err` when
    /// that block is missing.
    pub fn tail_from(&self, base: u64, off: u64) -> Result<(&Bytes, usize, usize), BlockKey> {
        let n = off / BLOCK;
        let b = self.block(base, n, off + 1)?;
        b.touch();
        Ok((&b.data, (off - n * BLOCK) as usize, b.valid))
    }

    /// Calls `f` with `len` bytes of segment `base` from `off`, if cached; else `Err` names the
    /// first block missing.
    pub fn with_bytes<R>(
        &self,
        base: u64,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, BlockKey> {
        let end = off + len as u64;
        let first = off / BLOCK;
        let last = (end.max(off + 1) - 1) / BLOCK;
        if first == last {
            let b = self.block(base, first, end)?;
            b.touch();
            let from = (off - first * BLOCK) as usize;
            return Ok(f(&b.data[from..from + len]));
        }
        Ok(f(&self.joined(base, off, len)?))
    }

    /// `len` bytes of segment `base` from `off`, copied out of the blocks holding them (a
    /// record that straddles blocks), if cached; else `Err` names the first block missing.
    pub fn joined(&self, base: u64, off: u64, len: usize) -> Result<Bytes, BlockKey> {
        let end = off + len as u64;
        let mut joined = Vec::with_capacity(len);
        for n in off / BLOCK..=(end.max(off + 1) - 1) / BLOCK {
            let b = self.block(base, n, end.min((n + 1) * BLOCK))?;
            b.touch();
            let from = off.max(n * BLOCK) - n * BLOCK;
            let to = end.min((n + 1) * BLOCK) - n * BLOCK;
            joined.extend_from_slice(&b.data[from as usize..to as usize]);
        }
        Ok(Bytes::from(joined))
    }

    /// Block `n` of `base` if it holds valid bytes up to file offset `need_end`.
    fn block(&self, base: u64, n: u64, need_end: u64) -> Result<&Block, BlockKey> {
        match self.cached.get(&(base, n)) {
            Some(b) if n * BLOCK + b.valid as u64 >= need_end => Ok(b),
            _ => Err((base, n)),
        }
    }

    /// Whether block `n` of `base` is cached in full (or up to `written_len`).
    pub fn has(&self, base: u64, n: u64, written_len: u64) -> bool {
        let need_end = ((n + 1) * BLOCK).min(written_len);
        self.block(base, n, need_end).is_ok()
    }

    /// Asks for a block (once, until it is fetched; not within [`RETRY_AFTER`] of a failed
    /// read of it).
    pub fn want(&mut self, key: BlockKey) {
        if let Some((_, at)) = self.failures.get(&key) {
            if at.elapsed() < RETRY_AFTER {
                return;
            }
        }
        if self.asked.insert(key) {
            self.wanted.push(key);
        }
    }

    /// [`Blocks::want`] for a reader that waits for the block (not read-ahead): once
    /// inserted, it stays until something reads it, even if every channel has passed it.
    pub fn want_awaited(&mut self, key: BlockKey) {
        self.want(key);
        if self.asked.contains(&key) {
            self.awaited.insert(key);
        }
    }

    pub fn has_wanted(&self) -> bool {
        !self.wanted.is_empty()
    }

    /// The wanted blocks, for the fetcher (they stay `asked` until inserted or given up).
    pub fn take_wanted(&mut self) -> Vec<BlockKey> {
        std::mem::take(&mut self.wanted)
    }

    /// A fetched block: `valid` bytes of it were written when the read was issued.
    /// Starts a fetch round: what it inserts stays until its readers had their turn, even
    /// past [`CAPACITY`] (a record larger than the cache is read whole, once).
    pub fn begin_round(&mut self) {
        self.round += 1;
    }

    /// A fetched block: `valid` bytes of it were written when the read was issued. Evicts the
    /// oldest blocks of earlier rounds beyond [`CAPACITY`].
    pub fn insert(&mut self, key: BlockKey, data: Bytes, valid: usize) {
        self.asked.remove(&key);
        let awaited = self.awaited.remove(&key);
        self.failures.remove(&key);
        let valid = valid.min(data.len());
        let block = Block {
            data,
            valid,
            used: Cell::new(true),
            awaited: Cell::new(awaited),
            round: self.round,
        };
        // Re-inserted (a grown last block): it moves to the back of the eviction order.
        if self.cached.insert(key, block).is_some() {
            self.order.retain(|k| *k != key);
        }
        self.order.push_back(key);
        while self.cached.len() > CAPACITY {
            let Some(&old) = self.order.front() else {
                break;
            };
            if self.cached.get(&old).is_some_and(|b| b.round == self.round) {
                break;
            }
            self.order.pop_front();
            self.cached.remove(&old);
        }
    }

    /// A fetch that failed: the block may be asked for again, until it failed [`BAD_AFTER`]
    /// times.
    pub fn give_up(&mut self, key: BlockKey) {
        self.asked.remove(&key);
        self.awaited.remove(&key);
    }

    /// A read of `key` that failed (I/O error): counted towards [`Blocks::is_bad`].
    pub fn failed(&mut self, key: BlockKey) {
        self.failed_at(key, Instant::now());
    }

    fn failed_at(&mut self, key: BlockKey, at: Instant) {
        self.give_up(key);
        let entry = self.failures.entry(key).or_insert((0, at));
        *entry = (entry.0 + 1, at);
    }

    /// Whether `key` failed to read [`BAD_AFTER`] times: its readers skip it.
    pub fn is_bad(&self, key: BlockKey) -> bool {
        self.failures
            .get(&key)
            .is_some_and(|(n, _)| *n >= BAD_AFTER)
    }

    /// Drops the blocks nobody read since the last call; returns whether any are left. The
    /// shard calls it every few seconds while a log has blocks, so a topic whose readers
    /// caught up (or left) gives its memory back.
    pub fn age(&mut self) -> bool {
        self.cached.retain(|_, b| b.used.replace(false));
        let cached = &self.cached;
        self.order.retain(|k| cached.contains_key(k));
        !self.cached.is_empty()
    }

    /// Drops the blocks that hold nothing at or after offset `off` of segment `base`, nor of any
    /// later segment: what every channel has passed (a reader that wants it after all, a
    /// channel rewound or a message read again, fetches it again). Not a block a reader
    /// waited for and has not read yet: a reader below every channel (a redrive of dead
    /// letters, a replay's seek by time) reads it a fetch round or a retry later; capacity
    /// and [`Blocks::age`] bound those.
    pub fn drop_passed(&mut self, base: u64, off: u64) {
        let passed = |k: &BlockKey| k.0 < base || k.0 == base && (k.1 + 1) * BLOCK <= off;
        if !self.order.iter().any(passed) {
            return;
        }
        self.cached.retain(|k, b| !passed(k) || b.awaited.get());
        let cached = &self.cached;
        self.order.retain(|k| cached.contains_key(k));
    }

    /// Forgets the blocks of a deleted segment.
    pub fn drop_segment(&mut self, base: u64) {
        self.cached.retain(|k, _| k.0 != base);
        self.order.retain(|k| k.0 != base);
        self.wanted.retain(|k| k.0 != base);
        self.asked.retain(|k| k.0 != base);
        self.awaited.retain(|k| k.0 != base);
        self.failures.retain(|k, _| k.0 != base);
    }

    pub fn clear(&mut self) {
        *self = Blocks::default();
    }

    /// Bytes held.
    pub fn cached_bytes(&self) -> usize {
        self.cached.values().map(|b| b.data.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: u64, len: usize) -> Bytes {
        (0..len)
            .map(|i| ((n * BLOCK + i as u64) % 251) as u8)
            .collect()
    }

    fn expected(off: u64, len: usize) -> Vec<u8> {
        (off..off + len as u64).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn bytes_within_and_across_blocks() {
        let mut b = Blocks::default();
        assert_eq!(b.with_bytes(7, 10, 5, |s| s.to_vec()), Err((7, 0)));
        b.insert((7, 0), block(0, BLOCK as usize), BLOCK as usize);
        assert_eq!(b.with_bytes(7, 10, 5, |s| s.to_vec()), Ok(expected(10, 5)));
        // Straddling into block 1, which is missing, then present.
        assert_eq!(b.with_bytes(7, BLOCK - 3, 10, |s| s.to_vec()), Err((7, 1)));
        b.insert((7, 1), block(1, 100), 100);
        assert_eq!(
            b.with_bytes(7, BLOCK - 3, 10, |s| s.to_vec()),
            Ok(expected(BLOCK - 3, 10))
        );
        // Past the valid part of block 1: refetch.
        assert_eq!(b.with_bytes(7, BLOCK + 90, 20, |s| s.to_vec()), Err((7, 1)));
        assert!(b.has(7, 1, BLOCK + 100));
        assert!(!b.has(7, 1, BLOCK + 101));
    }

    #[test]
    fn a_round_keeps_what_it_inserted_beyond_capacity() {
        let mut b = Blocks::default();
        b.begin_round();
        for n in 0..4 {
            b.insert((1, n), block(n, 8), 8);
        }
        b.begin_round();
        let big = CAPACITY as u64 + 10;
        for n in 100..100 + big {
            b.insert((1, n), block(n, 8), 8);
        }
        assert!(
            (100..100 + big).all(|n| b.has(1, n, n * BLOCK + 8)),
            "a whole round stays"
        );
        assert!(!b.has(1, 0, 8), "older rounds go first");
        b.begin_round();
        b.insert((2, 0), block(0, 8), 8);
        assert!(
            b.cached.len() <= CAPACITY,
            "the next round evicts down to capacity"
        );
    }

    #[test]
    fn failed_reads_make_a_block_bad() {
        let mut b = Blocks::default();
        let long_ago = Instant::now() - RETRY_AFTER;
        for _ in 0..BAD_AFTER {
            assert!(!b.is_bad((1, 5)));
            b.want((1, 5));
            assert_eq!(
                b.take_wanted(),
                [(1, 5)],
                "asked for again after RETRY_AFTER"
            );
            b.failed_at((1, 5), long_ago);
        }
        assert!(b.is_bad((1, 5)));
        b.insert((1, 5), block(5, 8), 8);
        assert!(!b.is_bad((1, 5)), "a later good read clears it");
    }

    #[test]
    fn a_failed_block_is_not_asked_for_again_at_once() {
        let mut b = Blocks::default();
        b.want((1, 5));
        b.take_wanted();
        b.failed((1, 5));
        b.want((1, 5));
        assert!(!b.has_wanted(), "within RETRY_AFTER of the failure");
        assert!(!b.is_bad((1, 5)));
    }

    #[test]
    fn blocks_every_reader_passed_are_dropped() {
        let mut b = Blocks::default();
        for (base, n) in [(1, 0), (1, 1), (9, 0), (9, 1), (9, 2)] {
            b.want_awaited((base, n));
        }
        b.want((9, 3));
        b.want((1, 2));
        for (base, n) in b.take_wanted() {
            b.insert((base, n), block(n, BLOCK as usize), BLOCK as usize);
        }
        b.drop_passed(9, BLOCK + 10);
        assert!(
            !b.has(1, 2, 2 * BLOCK + 8),
            "read-ahead nobody waits for: passed, gone"
        );
        assert!(b.has(9, 3, 4 * BLOCK), "read-ahead not passed yet");
        b.drop_segment(9);
        for n in 0..3 {
            b.want_awaited((9, n));
        }
        for (base, n) in b.take_wanted() {
            b.insert((base, n), block(n, BLOCK as usize), BLOCK as usize);
        }
        assert_eq!(
            b.order.len(),
            5,
            "waited for and not read yet: whoever asked still will"
        );
        // Rounds and later drops do not take an unread block either.
        b.begin_round();
        b.begin_round();
        b.drop_passed(9, BLOCK + 10);
        assert_eq!(b.order.len(), 5);
        for (base, n) in [(1, 0), (1, 1), (9, 0)] {
            assert!(b.with_bytes(base, n * BLOCK, 4, |_| ()).is_ok());
        }
        // Readers are at byte 10 of block 1 of segment 9: what lies before it is passed.
        b.drop_passed(9, BLOCK + 10);
        assert!(
            !b.has(1, 0, 8) && !b.has(1, 1, BLOCK + 8),
            "an earlier segment"
        );
        assert!(!b.has(9, 0, 8), "a block before the readers");
        assert!(b.has(9, 1, 2 * BLOCK), "the block the readers are in");
        assert!(b.has(9, 2, 3 * BLOCK), "read-ahead");
        assert_eq!(b.order.len(), 2);
        // At a block's end exactly: that block is passed too (once read).
        assert!(b.tail_from(9, BLOCK + 10).is_ok());
        b.drop_passed(9, 2 * BLOCK);
        assert!(!b.has(9, 1, 2 * BLOCK) && b.has(9, 2, 3 * BLOCK));
    }

    #[test]
    fn unread_blocks_age_out() {
        let mut b = Blocks::default();
        b.insert((1, 0), block(0, 8), 8);
        b.insert((1, 1), block(1, 8), 8);
        assert!(b.age(), "both fresh");
        assert!(b.with_bytes(1, 0, 4, |_| ()).is_ok());
        assert!(b.age(), "block 0 was read");
        assert!(b.has(1, 0, 8) && !b.has(1, 1, BLOCK + 8));
        assert!(!b.age(), "nothing read since: all gone");
        assert_eq!(b.cached_bytes(), 0);
    }

    #[test]
    fn wanted_once_and_evicted_oldest_first() {
        let mut b = Blocks::default();
        b.want((1, 0));
        b.want((1, 0));
        assert_eq!(b.take_wanted(), vec![(1, 0)]);
        b.want((1, 0));
        assert!(!b.has_wanted(), "asked already, until inserted");
        for n in 0..CAPACITY as u64 + 2 {
            b.begin_round();
            b.insert((1, n), block(n, 8), 8);
        }
        assert!(!b.has(1, 0, 8) && !b.has(1, 1, 8));
        assert!(b.has(1, 2, 2 * BLOCK + 8));
        b.drop_segment(1);
        assert_eq!(b.cached_bytes(), 0);
    }
}

//! Message IDs and timestamps made without coordination.
//!
//! An ID is 16 lowercase hex digits of a u64: the top 8 bits are the index of the shard that
//! owns the topic, the low 56 bits a counter of the topic's own (as nsqd has one ID factory per
//! topic) that starts at the current time in microseconds, or after the highest ID the topic's
//! log holds when that is ahead. So a topic's IDs are unique across restarts, and consecutive
//! messages of a topic have consecutive numbers, which the in-flight table is built on
//! ([`crate::id_table`]). IDs only need to be unique within a topic: FIN, REQ and TOUCH name a
//! message of the channel the connection consumes.

use protocol::MessageId;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// Hashes message IDs for the in-flight and deferred maps. IDs are made by the broker (hex of a
/// counter), and a client can only FIN what it was given, so there is no flooding to defend
/// against; SipHash cost more than the rest of a FIN. Folds the 16 bytes with two multiplies.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_usize(&mut self, _: usize) {
        // The slice length prefix: always 16 for an ID.
    }

    fn finish(&self) -> u64 {
        // splitmix64's finaliser: every input bit reaches the low bits the table indexes with.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `HashMap<MessageId, V, IdHash>`.
pub type IdHash = BuildHasherDefault<IdHasher>;

const COUNTER_BITS: u32 = 56;
const COUNTER_MASK: u64 = (1 << COUNTER_BITS) - 1;

pub struct IdGen {
    shard_bits: u64,
    counter: u64,
}

impl IdGen {
    pub fn new(shard: usize) -> IdGen {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        IdGen {
            shard_bits: ((shard as u64) & 0xff) << COUNTER_BITS,
            counter: micros & COUNTER_MASK,
        }
    }

    /// Continues after `last` (the highest ID number a topic's log holds) when it was made
    /// by this shard's index and is ahead of the clock: a topic that once sustained more than
    /// one message per microsecond does not make an ID its log already holds after a restart.
    /// An ID with another shard's index (the topic moved when `--shards` changed) cannot
    /// collide with this shard's.
    pub fn resume_after(&mut self, last: Option<u64>) {
        if let Some(last) = last {
            if last & !COUNTER_MASK == self.shard_bits {
                self.counter = self.counter.max(last & COUNTER_MASK);
            }
        }
    }

    pub fn next_id(&mut self) -> MessageId {
        self.counter = (self.counter + 1) & COUNTER_MASK;
        MessageId::from_u64(self.shard_bits | self.counter)
    }
}

/// Nanoseconds since the Unix epoch, the timestamp carried by every message.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hasher_spreads_consecutive_ids() {
        use std::hash::BuildHasher;
        let build = IdHash::default();
        let mut gen = IdGen::new(3);
        let mut buckets = [0u32; 64];
        for _ in 0..64_000 {
            let id = gen.next_id();
            buckets[(build.hash_one(id) % 64) as usize] += 1;
        }
        // Consecutive IDs differ in their last hex digits only; each bucket still gets its share.
        assert!(
            buckets.iter().all(|&n| (700..1300).contains(&n)),
            "{buckets:?}"
        );
    }

    #[test]
    fn ids_carry_the_shard_and_never_repeat() {
        let mut a = IdGen::new(1);
        let mut b = IdGen::new(2);
        let ia = a.next_id();
        let ib = b.next_id();
        assert_ne!(ia, ib);
        assert_eq!(ia.to_u64().unwrap() >> 56, 1);
        assert_eq!(ib.to_u64().unwrap() >> 56, 2);
        assert_ne!(a.next_id(), ia);
    }

    #[test]
    fn a_restarted_topic_continues_after_its_highest_id() {
        let ahead = (1u64 << 56) | (COUNTER_MASK - 10);
        let mut gen = IdGen::new(1);
        gen.resume_after(Some(ahead));
        assert_eq!(gen.next_id().to_u64(), Some(ahead + 1));
        // Behind the clock, or another shard's ID: the clock's counter stands.
        // (The reference is taken first: a generator starts at the clock of its creation.)
        let first = IdGen::new(1).next_id().to_u64().unwrap();
        let mut gen = IdGen::new(1);
        gen.resume_after(Some(1u64 << 56));
        gen.resume_after(Some((2u64 << 56) | (COUNTER_MASK - 10)));
        assert!(gen.next_id().to_u64().unwrap() >= first);
    }
}

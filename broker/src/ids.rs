//! Message IDs and timestamps made on a shard without coordination.
//!
//! An ID is 16 lowercase hex digits of a u64: the top 8 bits are the shard index, the low 56 bits
//! a counter that starts at the current time in microseconds, so IDs are unique across shards
//! and, unless a shard sustained more than one message per microsecond, across restarts.

use protocol::MessageId;
use std::time::{SystemTime, UNIX_EPOCH};

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
}

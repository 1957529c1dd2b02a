//! Shard placement: which shard owns a topic. [`owner_of`] is the one place that decides it;
//! every front-end (TCP, HTTP, dead-letter routing) and start-up's topic loading ask it.
//!
//! A topic goes to `mix32(crc32(name)) % shards`: the name's IEEE crc32, passed through
//! murmur3's 32-bit finalizer ([`mix32`]), modulo the shard count. The inputs are the topic's
//! name and `--shards`, nothing else (no CPU, no connection, no load).
//!
//! Invariants:
//! - For a given name and shard count the owner is always the same shard, in every shard and
//!   across restarts: every shard computes it alone, with no table to agree on.
//! - The owner holds the topic, its channels and their timers; no other shard touches them.
//! - A restart with another `--shards` only moves ownership: files are laid out by topic name,
//!   not by shard ([`crate::storage`]), and each shard loads the topics it owns under the new
//!   count, with their channels' positions and owed messages from `meta.json`.
//! - Changing the hash changes every owner the same way as changing the count: data is kept,
//!   ownership moves.
//!
//! Why the mix: every bit of a CRC is an XOR of fixed input bits, so crc32 modulo 2 alone puts
//! every topic whose names differ only in the low bits of a character on one shard (`e2e1`,
//! `e2e2`, `e2e3`, `e2eX`, `e2eY`, `e2eZ` all on shard 1). The finalizer makes every output
//! bit depend on every input bit.

/// The shard (in `0..shards`) that owns `topic`. `shards` is at least 1 (`Config` refuses 0).
#[inline]
pub fn owner_of(topic: &str, shards: usize) -> usize {
    (mix32(crc32fast::hash(topic.as_bytes())) as usize) % shards
}

/// murmur3's 32-bit finalizer: a bijection whose output bits each depend on all input bits.
#[inline]
fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let mut v = vec!["broker".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        Config::parse_from(v).map_err(|e| e.to_string())
    }

    #[test]
    fn owner_is_stable() {
        let c = parse(&["--shards", "4"]).unwrap();
        let o = c.owner_of("events");
        assert!(o < 4);
        assert_eq!(o, c.owner_of("events"));
    }

    #[test]
    fn owners_spread_names_that_differ_in_one_character() {
        let c = parse(&["--shards", "2"]).unwrap();
        let owners: std::collections::BTreeSet<usize> =
            ["e2e1", "e2e2", "e2e3", "e2eX", "e2eY", "e2eZ"]
                .iter()
                .map(|t| c.owner_of(t))
                .collect();
        assert_eq!(owners.len(), 2, "all on one shard");
        let c = parse(&["--shards", "4"]).unwrap();
        let mut per_shard = [0usize; 4];
        for i in 0..4000 {
            per_shard[c.owner_of(&format!("topic.{i}"))] += 1;
        }
        for n in per_shard {
            assert!((900..=1100).contains(&n), "{per_shard:?}");
        }
    }

    /// Another hash keeps every message but moves every topic (which topics share a core, which
    /// shard a producer's connection moves to), so it never changes unnoticed.
    #[test]
    fn owners_are_pinned() {
        let cases = [
            ("events", [1, 1, 1]),
            ("orders", [0, 0, 0]),
            ("e2eX", [1, 3, 7]),
            ("topic.0", [0, 2, 6]),
            ("topic.1", [1, 1, 5]),
        ];
        for (topic, owners) in cases {
            for (shards, want) in [2, 4, 8].into_iter().zip(owners) {
                assert_eq!(super::owner_of(topic, shards), want, "{topic} at {shards}");
            }
        }
        assert_eq!(super::mix32(0), 0);
        assert_eq!(super::mix32(crc32fast::hash(b"events")), 0x63e4_2fe1);
    }
}

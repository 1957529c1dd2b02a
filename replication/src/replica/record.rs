//! A record as the leader ships it: its seq, the crc32 of its bytes as the broker's storage
//! computed it, and the bytes. A batch is consecutive records written under one epoch; the crc
//! travels end to end, so a follower checks each record before storing it.

use crate::ids::{Epoch, Seq};

/// One record of a topic's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its position in the topic's log.
    pub seq: Seq,
    /// crc32 (IEEE) of `bytes`, as stored.
    pub crc: u32,
    /// The record as stored (the broker's message frame).
    pub bytes: Vec<u8>,
}

impl Record {
    /// A record whose crc is computed from `bytes` (the writer's side).
    pub fn new(seq: Seq, bytes: Vec<u8>) -> Record {
        Record {
            seq,
            crc: crc32fast::hash(&bytes),
            bytes,
        }
    }

    /// Whether the bytes still match the crc they were written with.
    pub fn intact(&self) -> bool {
        crc32fast::hash(&self.bytes) == self.crc
    }
}

/// Consecutive records written under one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The epoch whose leader wrote these records (not necessarily the shipping leader's).
    pub epoch: Epoch,
    /// Records with consecutive seqs.
    pub records: Vec<Record>,
}

impl Batch {
    /// The seq after the last record, or `None` for an empty batch.
    pub fn end(&self) -> Option<Seq> {
        self.records.last().map(|r| r.seq + 1)
    }

    /// Whether the seqs run consecutively from `base`.
    pub fn consecutive_from(&self, base: Seq) -> bool {
        self.records
            .iter()
            .enumerate()
            .all(|(i, r)| r.seq == base + i as Seq)
    }

    /// The first record whose crc does not match its bytes.
    pub fn first_damaged(&self) -> Option<Seq> {
        self.records.iter().find(|r| !r.intact()).map(|r| r.seq)
    }
}

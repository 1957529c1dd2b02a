//! The dead-letter parts of the forwards: where a dead letter came from ([`DeadOrigin`], beside
//! a forwarded publish's bodies) and a dead-letter topic's origin records between its replicas
//! ([`DeadLetterOp`] in `Forward::DeadLetters`).
//!
//! Invariants: names are valid topic and channel names (never ephemeral), IDs are 16 bytes, a
//! preview is UTF-8 of at most [`MAX_PREVIEW`] bytes, and one operation carries at most
//! [`MAX_DEAD_LETTERS`] records or IDs: checked when encoding and when decoding.

use super::{put_short_text, put_str, put_u32_len, valid_channel, valid_topic, Reader, WireError};

/// The most records or IDs one dead-letter operation carries (a leader sends more in several).
pub const MAX_DEAD_LETTERS: usize = 256;
/// The longest preview a record carries (the broker keeps 64 bytes of body, as lossy UTF-8).
pub const MAX_PREVIEW: usize = 1024;

const DL_RECORDS: u8 = 1;
const DL_REPLACE: u8 = 2;
const DL_FORGOTTEN: u8 = 3;
const DL_DIGEST: u8 = 4;
const DL_WANTED: u8 = 5;

/// A message ID as it travels (NSQ's 16 bytes).
pub type Id = [u8; 16];

/// Where a dead letter came from: the channel that gave up on it, and the message there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadOrigin {
    /// The topic it was published to.
    pub topic: String,
    /// The channel whose max attempts it reached.
    pub channel: String,
    /// Its ID in that topic.
    pub id: Id,
    /// The deliveries it had there.
    pub attempts: u16,
    /// When it was first published (ns since the epoch).
    pub timestamp: i64,
}

/// One origin record of a dead-letter topic: the dead letter there and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Its ID in the dead-letter topic.
    pub id: Id,
    /// Its seq in the dead-letter topic's log.
    pub seq: u64,
    /// Where it came from.
    pub origin: DeadOrigin,
    /// When it reached the limit (ns since the epoch).
    pub dead_lettered_at: i64,
    /// Its body's size.
    pub body_size: u64,
    /// Its body's first bytes.
    pub preview: String,
}

/// What the replicas of a dead-letter topic tell each other of its origin records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterOp {
    /// Leader -> follower: records after the last one the follower holds, in seq order.
    Records(Vec<DeadLetter>),
    /// Leader -> follower: the follower drops every record it holds, then takes these (more
    /// may follow as `Records`).
    Replace(Vec<DeadLetter>),
    /// Either way: these dead letters were redriven; their records go.
    Forgotten(Vec<Id>),
    /// Leader -> follower: how many records the leader holds and a checksum of their seqs
    /// and IDs; a follower whose own differ asks for them all (`Wanted`).
    Digest {
        /// The leader's record count.
        count: u32,
        /// The checksum ([`digest`]).
        crc: u32,
    },
    /// Follower -> leader: send every record again (`Replace`, then `Records`).
    Wanted,
}

/// The digest of a dead-letter topic's records, in seq order: their count and a crc32 of each
/// one's seq and ID.
pub fn digest<'a>(records: impl Iterator<Item = (u64, &'a [u8])>) -> (u32, u32) {
    let mut h = crc32fast::Hasher::new();
    let mut n = 0u32;
    for (seq, id) in records {
        h.update(&seq.to_be_bytes());
        h.update(id);
        n = n.wrapping_add(1);
    }
    (n, h.finalize())
}

/// The least an origin takes: two names, an ID, attempts, a timestamp.
const MIN_ORIGIN: usize = 2 + 2 + 16 + 2 + 8;
/// The least a record takes.
const MIN_RECORD: usize = 16 + 8 + MIN_ORIGIN + 8 + 8 + 2;

pub(super) fn check_origin(o: &DeadOrigin) -> Result<(), WireError> {
    if !valid_topic(&o.topic) {
        return Err(WireError::TopicName);
    }
    if !valid_channel(&o.channel) {
        return Err(WireError::ChannelName);
    }
    Ok(())
}

pub(super) fn check_op(op: &DeadLetterOp) -> Result<(), WireError> {
    match op {
        DeadLetterOp::Records(rs) | DeadLetterOp::Replace(rs) => {
            if rs.len() > MAX_DEAD_LETTERS {
                return Err(WireError::DeadLettersTooMany(rs.len()));
            }
            for r in rs {
                check_origin(&r.origin)?;
                if r.preview.len() > MAX_PREVIEW {
                    return Err(WireError::Preview);
                }
            }
        }
        DeadLetterOp::Forgotten(ids) if ids.len() > MAX_DEAD_LETTERS => {
            return Err(WireError::DeadLettersTooMany(ids.len()));
        }
        _ => {}
    }
    Ok(())
}

pub(super) fn origin_len(o: &DeadOrigin) -> usize {
    1 + o.topic.len() + 1 + o.channel.len() + 16 + 2 + 8
}

pub(super) fn op_len(op: &DeadLetterOp) -> usize {
    1 + match op {
        DeadLetterOp::Records(rs) | DeadLetterOp::Replace(rs) => {
            4 + rs
                .iter()
                .map(|r| 16 + 8 + origin_len(&r.origin) + 8 + 8 + 2 + r.preview.len())
                .sum::<usize>()
        }
        DeadLetterOp::Forgotten(ids) => 4 + 16 * ids.len(),
        DeadLetterOp::Digest { .. } => 8,
        DeadLetterOp::Wanted => 0,
    }
}

pub(super) fn put_origin(out: &mut Vec<u8>, o: &DeadOrigin) {
    put_str(out, &o.topic);
    put_str(out, &o.channel);
    out.extend_from_slice(&o.id);
    out.extend_from_slice(&o.attempts.to_be_bytes());
    out.extend_from_slice(&o.timestamp.to_be_bytes());
}

pub(super) fn put_op(out: &mut Vec<u8>, op: &DeadLetterOp) -> Result<(), WireError> {
    match op {
        DeadLetterOp::Records(rs) | DeadLetterOp::Replace(rs) => {
            out.push(if matches!(op, DeadLetterOp::Records(_)) {
                DL_RECORDS
            } else {
                DL_REPLACE
            });
            put_u32_len(out, rs.len())?;
            for r in rs {
                out.extend_from_slice(&r.id);
                out.extend_from_slice(&r.seq.to_be_bytes());
                put_origin(out, &r.origin);
                out.extend_from_slice(&r.dead_lettered_at.to_be_bytes());
                out.extend_from_slice(&r.body_size.to_be_bytes());
                // `check_op` bounded the preview to MAX_PREVIEW bytes.
                put_short_text(out, &r.preview, WireError::Preview)?;
            }
        }
        DeadLetterOp::Forgotten(ids) => {
            out.push(DL_FORGOTTEN);
            put_u32_len(out, ids.len())?;
            for id in ids {
                out.extend_from_slice(id);
            }
        }
        DeadLetterOp::Digest { count, crc } => {
            out.push(DL_DIGEST);
            out.extend_from_slice(&count.to_be_bytes());
            out.extend_from_slice(&crc.to_be_bytes());
        }
        DeadLetterOp::Wanted => out.push(DL_WANTED),
    }
    Ok(())
}

impl Reader<'_> {
    fn id(&mut self, what: &'static str) -> Result<Id, WireError> {
        let mut id = [0; 16];
        id.copy_from_slice(self.take(16, what)?);
        Ok(id)
    }

    fn i64(&mut self, what: &'static str) -> Result<i64, WireError> {
        Ok(self.u64(what)? as i64)
    }

    pub(super) fn dead_origin(&mut self) -> Result<DeadOrigin, WireError> {
        let topic = self.topic()?;
        let channel = self.channel()?;
        let id = self.id("a dead letter's origin ID")?;
        let attempts = self.u16("a dead letter's attempts")?;
        let timestamp = self.i64("a dead letter's timestamp")?;
        Ok(DeadOrigin {
            topic,
            channel,
            id,
            attempts,
            timestamp,
        })
    }

    /// A count of at most [`MAX_DEAD_LETTERS`] elements of at least `min_each` bytes.
    fn dead_count(&mut self, min_each: usize, what: &'static str) -> Result<usize, WireError> {
        let n = self.count(min_each, what)?;
        if n > MAX_DEAD_LETTERS {
            return Err(WireError::DeadLettersTooMany(n));
        }
        Ok(n)
    }

    pub(super) fn dead_letter_op(&mut self) -> Result<DeadLetterOp, WireError> {
        match self.u8("a dead-letter operation")? {
            kind @ (DL_RECORDS | DL_REPLACE) => {
                let n = self.dead_count(MIN_RECORD, "a dead-letter record count")?;
                let mut rs = Vec::with_capacity(n);
                for _ in 0..n {
                    let id = self.id("a dead letter's ID")?;
                    let seq = self.u64("a dead letter's seq")?;
                    let origin = self.dead_origin()?;
                    let dead_lettered_at = self.i64("a dead letter's time")?;
                    let body_size = self.u64("a dead letter's body size")?;
                    let preview = self.short_text(
                        MAX_PREVIEW,
                        "a dead letter's preview",
                        WireError::Preview,
                    )?;
                    rs.push(DeadLetter {
                        id,
                        seq,
                        origin,
                        dead_lettered_at,
                        body_size,
                        preview,
                    });
                }
                Ok(if kind == DL_RECORDS {
                    DeadLetterOp::Records(rs)
                } else {
                    DeadLetterOp::Replace(rs)
                })
            }
            DL_FORGOTTEN => {
                let n = self.dead_count(16, "a forgotten dead letters count")?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.push(self.id("a forgotten dead letter's ID")?);
                }
                Ok(DeadLetterOp::Forgotten(ids))
            }
            DL_DIGEST => Ok(DeadLetterOp::Digest {
                count: self.u32("a dead-letter digest's count")?,
                crc: self.u32("a dead-letter digest's crc")?,
            }),
            DL_WANTED => Ok(DeadLetterOp::Wanted),
            byte => Err(WireError::Choice {
                what: "a dead-letter operation",
                byte,
            }),
        }
    }
}

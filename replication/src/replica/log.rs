//! The log a replica replicates, as the broker's storage will offer it: append at the end,
//! truncate the end, read a range, the end and the durable end (what an fsync has covered),
//! and the epoch history of what it holds. The replica never owns the log; the caller passes
//! it into every call, so the same replica runs over the broker's segments and over
//! [`super::mem_log::MemLog`] in the simulation.
//!
//! Contract: seqs are consecutive from the log's start; `start() <= durable_end() <= end()`
//! (an empty log that began at a seq counts it as durable); a truncation is durable before the
//! next append is acknowledged (a crash never brings cut records back); the epoch history
//! covers the records held (its first entry may begin below the start: the log released the
//! records in front of it). Records below the start were released because every one was
//! acknowledged and consumed, or were never held (a follower whose log began at its leader's
//! start); a log that begins again ([`ReplicaLog::start_at`], or a truncation below its start)
//! holds no record and no history.

use super::epochs::EpochHistory;
use super::record::{Batch, Record};
use crate::ids::{Epoch, Seq};

/// Why a log refused an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogError {
    /// An append whose first seq is not the log's end.
    NotAtEnd {
        /// The log's end.
        end: Seq,
        /// The append's first seq.
        base: Seq,
    },
    /// An append under an epoch older than the log's last.
    EpochRegression {
        /// The log's last epoch.
        last: Epoch,
        /// The append's epoch.
        appended: Epoch,
    },
    /// A read of records the log does not hold (past its end, or released below its start).
    OutOfRange {
        /// The first seq asked for.
        from: Seq,
        /// The log's end.
        end: Seq,
    },
    /// The records asked for are stored but not at hand yet (a read from disk waits for its
    /// blocks, a truncation for a write under way): the same call succeeds on a later tick.
    NotReady,
    /// The record at this seq is damaged in storage (its crc does not match): it is never
    /// returned or stored as good.
    Damaged {
        /// The damaged record's seq.
        seq: Seq,
    },
    /// The storage failed (its message).
    Storage(String),
}

impl std::fmt::Display for LogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogError::NotAtEnd { end, base } => {
                write!(f, "append at seq {base}, but the log ends at {end}")
            }
            LogError::EpochRegression { last, appended } => write!(
                f,
                "append under epoch {}, older than the log's last epoch {}",
                appended.0, last.0
            ),
            LogError::OutOfRange { from, end } => {
                write!(
                    f,
                    "read from seq {from}, outside the log (it ends at {end})"
                )
            }
            LogError::NotReady => write!(f, "not ready yet: try again"),
            LogError::Damaged { seq } => write!(f, "record {seq} is damaged in storage"),
            LogError::Storage(m) => write!(f, "storage: {m}"),
        }
    }
}

impl std::error::Error for LogError {}

/// A topic's log, as a replica needs it.
pub trait ReplicaLog {
    /// The seq the next record gets.
    fn end(&self) -> Seq;

    /// The first seq held (records below it were released, or never held).
    fn start(&self) -> Seq;

    /// Drops every record and the epoch history, and makes the log begin, empty, at `start`;
    /// durable before it returns. A follower whose log ends below its leader's start does
    /// this: what it misses was acknowledged and consumed, and the leader no longer has it.
    fn start_at(&mut self, start: Seq) -> Result<(), LogError>;

    /// The end of what an fsync has covered (`<= end()`).
    fn durable_end(&self) -> Seq;

    /// The epochs of the records held.
    fn epochs(&self) -> &EpochHistory;

    /// Appends records written under `epoch`; the first must be at `end()`.
    fn append(&mut self, epoch: Epoch, records: &[Record]) -> Result<(), LogError>;

    /// Cuts every record at or after `end` (nothing when `end >= self.end()`); below the
    /// start, the log begins again at `end` as by [`ReplicaLog::start_at`].
    fn truncate_to(&mut self, end: Seq) -> Result<(), LogError>;

    /// Up to `max_records` records from `from`, all written under one epoch.
    fn read(&self, from: Seq, max_records: usize) -> Result<Batch, LogError>;

    /// Asks for an fsync of everything appended so far; `durable_end()` moves when it completes
    /// (the caller then tells the replica through `on_synced`). While one is pending, a request
    /// may be left to the next sync: the replica asks again on completion while its durable end
    /// is behind its end.
    fn request_sync(&mut self);
}

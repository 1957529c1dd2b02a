//! RLIMIT_MEMLOCK: io_uring and glommio's registered I/O buffers need locked memory. The broker
//! raises its soft limit to what the shards need when the hard limit allows, and otherwise
//! refuses to start with a message that says what to set. The check is
//! `nsq_common::memlock`'s, shared with the lookup and the tools.

pub use nsq_common::memlock::MemlockError;

/// Locked memory each shard asks glommio for (its registered I/O buffer pool), glommio's
/// smallest. Segment writes (up to 1 MiB) do not fit a pool of this order and 256 KiB block
/// reads hardly do: they take heap buffers either way, while the pool's pages stay resident
/// for the broker's whole life.
pub const IO_MEMORY_PER_SHARD: usize = nsq_common::memlock::IO_MEMORY_PER_EXECUTOR;
/// The control thread's pool: it does no direct I/O.
pub const IO_MEMORY_CONTROL: usize = nsq_common::memlock::IO_MEMORY_PER_EXECUTOR;

/// Makes sure the soft RLIMIT_MEMLOCK covers `shards`; `Err` says what to set.
pub fn ensure_memlock(shards: usize) -> Result<(), MemlockError> {
    nsq_common::memlock::ensure(
        &format!("{shards} shards"),
        true,
        shards,
        ", or run with fewer --shards",
    )
}

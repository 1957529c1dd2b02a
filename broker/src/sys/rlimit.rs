//! RLIMIT_MEMLOCK: io_uring and glommio's registered I/O buffers need locked memory. The broker
//! raises its soft limit to what the shards need when the hard limit allows, and otherwise
//! refuses to start with a message that says what to set.

/// Locked memory each shard asks glommio for (its registered I/O buffer pool), glommio's
/// smallest. Segment writes (up to 1 MiB) do not fit a pool of this order and 256 KiB block
/// reads hardly do: they take heap buffers either way, while the pool's pages stay resident
/// for the broker's whole life.
pub const IO_MEMORY_PER_SHARD: usize = 64 * 1024;
/// The control thread's pool: it does no direct I/O.
pub const IO_MEMORY_CONTROL: usize = 64 * 1024;
/// Slack for the rings themselves on kernels that still charge them to RLIMIT_MEMLOCK.
const RING_SLACK: u64 = 256 * 1024;

/// Why the locked memory the shards need is not available.
#[derive(Debug, thiserror::Error)]
pub enum MemlockError {
    #[error("cannot read RLIMIT_MEMLOCK: {0}")]
    Unreadable(std::io::Error),
    /// The soft limit is below what the shards need and the hard limit forbids raising it.
    #[error(
        "RLIMIT_MEMLOCK is {soft_kib} KiB (hard {hard_kib} KiB) but {shards} shards need \
         {need_kib} KiB of locked memory for io_uring. Raise it: `ulimit -l {need_kib}` in the \
         shell, LimitMEMLOCK=infinity in the systemd unit (deploy/ has one), or run with fewer \
         --shards."
    )]
    TooLow {
        soft_kib: u64,
        hard_kib: u64,
        shards: usize,
        need_kib: u64,
    },
}

/// Makes sure the soft RLIMIT_MEMLOCK covers `shards`; `Err` says what to set.
pub fn ensure_memlock(shards: usize) -> Result<(), MemlockError> {
    let need = shards as u64 * (IO_MEMORY_PER_SHARD as u64 + RING_SLACK) + RING_SLACK;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return Err(MemlockError::Unreadable(std::io::Error::last_os_error()));
    }
    if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= need {
        return Ok(());
    }
    if lim.rlim_max == libc::RLIM_INFINITY || lim.rlim_max >= need {
        let raised = libc::rlimit {
            rlim_cur: need,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
            tracing::info!(
                from_kib = lim.rlim_cur / 1024,
                to_kib = need / 1024,
                "raised RLIMIT_MEMLOCK soft limit"
            );
            return Ok(());
        }
    }
    Err(MemlockError::TooLow {
        soft_kib: lim.rlim_cur / 1024,
        hard_kib: if lim.rlim_max == libc::RLIM_INFINITY {
            u64::MAX / 1024
        } else {
            lim.rlim_max / 1024
        },
        shards,
        need_kib: need.div_ceil(1024),
    })
}

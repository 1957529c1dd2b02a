//! RLIMIT_MEMLOCK for the programs that run glommio executors (broker, lookup, the tools):
//! io_uring and glommio's registered I/O buffers need locked memory, and glommio refuses to
//! start an executor under a soft limit of 512 KiB. [`ensure`] raises the soft limit to what
//! the program's executors need when the hard limit allows, and otherwise returns an error
//! that says what to set. Called before the first executor starts.
//!
//! Invariant: the hard limit is never changed; the soft one only ever goes up.

/// Locked memory each executor asks glommio for (`LocalExecutorBuilder::io_memory`): glommio's
/// smallest registered buffer pool. Every executor of the workspace's programs is built with it.
pub const IO_MEMORY_PER_EXECUTOR: usize = 64 * 1024;
/// Slack for the rings themselves on kernels that still charge them to RLIMIT_MEMLOCK.
const RING_SLACK: u64 = 256 * 1024;
/// The soft limit below which glommio refuses to start an executor at all.
const GLOMMIO_MINIMUM: u64 = 512 * 1024;

/// Why the locked memory the executors need is not available.
#[derive(Debug, thiserror::Error)]
pub enum MemlockError {
    #[error("cannot read RLIMIT_MEMLOCK: {0}")]
    Unreadable(std::io::Error),
    /// The soft limit is below what is needed and the hard limit forbids raising it.
    #[error(
        "RLIMIT_MEMLOCK is {soft_kib} KiB (hard {hard_kib} KiB) but {who} need{s} {need_kib} \
         KiB of locked memory for io_uring. Raise it: `ulimit -l {need_kib}` in the shell, \
         LimitMEMLOCK=infinity in the systemd unit (deploy/ has one){hint}.",
        s = if *plural { "" } else { "s" }
    )]
    TooLow {
        soft_kib: u64,
        hard_kib: u64,
        /// What needs it: `2 shards`, `nsq_tail`.
        who: String,
        plural: bool,
        need_kib: u64,
        /// A way to need less, `, or run with fewer --shards`, or empty.
        hint: &'static str,
    },
}

/// Locked memory `executors` executors need.
pub fn needed(executors: usize) -> u64 {
    let per = IO_MEMORY_PER_EXECUTOR as u64 + RING_SLACK;
    (executors.max(1) as u64 * per + RING_SLACK).max(GLOMMIO_MINIMUM)
}

/// Makes sure the soft RLIMIT_MEMLOCK covers `executors` executors of `who` (`plural` when
/// `who` names several things, `2 shards`); `hint` ends the error's advice. `Err` says what to
/// set.
pub fn ensure(
    who: &str,
    plural: bool,
    executors: usize,
    hint: &'static str,
) -> Result<(), MemlockError> {
    let need = needed(executors);
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
        who: who.to_string(),
        plural,
        need_kib: need.div_ceil(1024),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_at_least_glommios_minimum_and_grows_per_executor() {
        assert_eq!(needed(1), 576 * 1024);
        assert_eq!(needed(0), needed(1));
        assert_eq!(needed(4) - needed(3), 320 * 1024);
        let e = MemlockError::TooLow {
            soft_kib: 64,
            hard_kib: 64,
            who: "2 shards".into(),
            plural: true,
            need_kib: 896,
            hint: ", or run with fewer --shards",
        };
        assert_eq!(
            e.to_string(),
            "RLIMIT_MEMLOCK is 64 KiB (hard 64 KiB) but 2 shards need 896 KiB of locked memory \
             for io_uring. Raise it: `ulimit -l 896` in the shell, LimitMEMLOCK=infinity in the \
             systemd unit (deploy/ has one), or run with fewer --shards."
        );
    }
}

//! glibc malloc's thresholds, fixed at start-up so that the memory a busy shard frees is
//! reused rather than handed back to the system and faulted in again.
//!
//! By default glibc serves allocations over 128 KiB with their own `mmap` and trims an
//! arena's free top beyond 128 KiB, both thresholds moving with what the process frees. A
//! shard's buffers of that size flow through at the publish rate (connections' read buffers
//! that message bodies point into, 1 MiB direct-I/O write buffers, 256 KiB blocks read back),
//! and every one that went back to the system would come back as fresh zeroed pages, a page
//! fault and a page of zeroing per 4 KiB published. With the thresholds fixed they are
//! reused; the peak RSS is what the shard holds at once, not what it recycles, plus what the
//! arena grew by while its first buffers found their places (up to the trim threshold; in
//! some runs, docs/benchmarks.md#mpub-ingest, "Peak memory during ingest").
//!
//! [`tune`] sets the mmap threshold to [`MMAP_THRESHOLD`] (which also ends glibc's moving
//! thresholds) and the trim threshold to [`TRIM_THRESHOLD`], unless the operator set either
//! through glibc's own environment variables (`MALLOC_MMAP_THRESHOLD_`,
//! `MALLOC_TRIM_THRESHOLD_`), which then stand. Memory freed after a burst still goes back:
//! beyond the trim threshold at the top of an arena, and through `sys::mem_trim` after waves
//! of closed connections.

/// Allocations from this size on get their own mapping (a segment read back whole, a large
/// message), returned to the system when freed.
pub const MMAP_THRESHOLD: usize = 4 << 20;
/// Free memory at the top of an arena beyond this goes back to the system.
pub const TRIM_THRESHOLD: usize = 16 << 20;

/// Fixes the thresholds, before the shards start (see the module doc).
#[cfg(target_env = "gnu")]
pub fn tune() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some()
    {
        return;
    }
    // SAFETY: mallopt only changes malloc's parameters; called before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
    }
}

#[cfg(not(target_env = "gnu"))]
pub fn tune() {}

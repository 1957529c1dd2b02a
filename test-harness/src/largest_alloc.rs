//! A global allocator for the tests that bound what a decoder asks for (`protocol`'s MPUB and
//! `replication`'s wire frames): every call goes to the system allocator unchanged, and the
//! largest single request since the last [`reset`] is kept. A test binary installs it with
//! `#[global_allocator] static GLOBAL: test_harness::largest_alloc::Largest = Largest;`, so each
//! such test is a binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The allocator: the system's, noting the largest request.
pub struct Largest;

/// The largest single allocation seen since the last [`reset`].
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// Forgets the allocations seen so far.
pub fn reset() {
    LARGEST.store(0, Ordering::Relaxed);
}

/// The largest single allocation (or reallocation's new size) since the last [`reset`].
pub fn largest() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

// SAFETY: every call is passed on unchanged to the system allocator, which upholds
// GlobalAlloc's contract; the counting touches only an atomic.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's guarantees for this call are the ones System needs.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's guarantees for this call are the ones System needs.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: the caller's guarantees for this call are the ones System needs.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

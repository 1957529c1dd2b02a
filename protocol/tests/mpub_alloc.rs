//! How much memory decoding a tiny MPUB makes the decoder ask for.
//!
//! Its own test binary, because it installs a counting global allocator.

use bytes::BytesMut;
use protocol::{decode_command, ConnPhase, DecodeContext, ErrorCode, Limits};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Largest;

/// The largest single allocation seen.
static LARGEST: AtomicUsize = AtomicUsize::new(0);

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

#[global_allocator]
static GLOBAL: Largest = Largest;

/// BUG: `split_mpub_body` does `Vec::with_capacity(count)` with the count the client announces,
/// checked only against `(max_body_size - 4) / 5`, not against the body actually sent. A 15-byte
/// MPUB whose 4-byte body announces 1,048,575 messages makes the decoder allocate
/// 1,048,575 x size_of::<Bytes>() = 32 MiB under nsqd's default limits (5 MiB bodies) before it
/// finds the body empty; with `--max-body-size` raised to 1 GiB it is 6.4 GiB per command, and
/// an allocation failure aborts the whole broker.
#[test]

fn mpub_count_does_not_drive_allocation() {
    let ctx = DecodeContext {
        phase: ConnPhase::Init,
        heartbeats_enabled: true,
        limits: Limits::default(),
    };
    let max_count = ((ctx.limits.max_body_size - 4) / 5) as u32;
    let mut buf = BytesMut::from(&b"MPUB t\n\x00\x00\x00\x04"[..]);
    buf.extend_from_slice(&max_count.to_be_bytes());
    LARGEST.store(0, Ordering::Relaxed);
    let err = decode_command(&mut buf, &ctx).unwrap_err();
    let largest = LARGEST.load(Ordering::Relaxed);
    assert_eq!(err.code, ErrorCode::BadMessage);
    assert!(
        largest < 64 * 1024,
        "decoding a 15-byte MPUB allocated {largest} bytes at once"
    );
}

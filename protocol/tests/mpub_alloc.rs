//! How much memory decoding a tiny MPUB makes the decoder ask for.
//!
//! Its own test binary, because it installs a counting global allocator.

use bytes::BytesMut;
use protocol::{decode_command, ConnPhase, DecodeContext, ErrorCode, Limits};
use test_harness::largest_alloc::{self, Largest};

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
    largest_alloc::reset();
    let err = decode_command(&mut buf, &ctx).unwrap_err();
    let largest = largest_alloc::largest();
    assert_eq!(err.code, ErrorCode::BadMessage);
    assert!(
        largest < 64 * 1024,
        "decoding a 15-byte MPUB allocated {largest} bytes at once"
    );
}

//! The decompression layers a V2 connection gets from IDENTIFY (`protocol::compress`): snappy's
//! framing format and raw deflate, fed bytes from a peer the broker does not trust.
//!
//! Input: `[flags][piece size][stream...]`: flags bit 0 picks deflate (else snappy), bits 1-3
//! a budget (4^n bytes per call, 1 to 16 KiB); the stream is fed in pieces of 1-256 bytes.
//! Checked, beyond "no panic, no sanitizer report": no call yields more than its budget; the
//! compressed bytes held stay bounded (an incomplete snappy chunk at most; nothing for deflate
//! once a call gave 0); an error is final. Then the stream itself, compressed by `Compressor`
//! in the same pieces, decompresses back to exactly itself.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use protocol::compress::{Compressor, Decompressor, MAX_SNAPPY_CHUNK};

fn pair(deflate: bool) -> (Compressor, Decompressor) {
    if deflate {
        (Compressor::deflate(6), Decompressor::deflate())
    } else {
        (Compressor::snappy(), Decompressor::snappy())
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let deflate = data[0] & 1 != 0;
    let budget = 1usize << (((data[0] >> 1) & 7) * 2).min(15);
    let piece = usize::from(data[1]) + 1;
    let stream = &data[2..];

    // Untrusted input: bounded, and an error is final.
    let (_, mut d) = pair(deflate);
    let mut out = BytesMut::new();
    'feed: for p in stream.chunks(piece) {
        if d.feed(p).is_err() {
            assert!(d.feed(b"").is_err(), "a failed stream took input again");
            break;
        }
        loop {
            let before = out.len();
            match d.decompress(&mut out, budget) {
                Ok(0) => {
                    let held = d.buffered();
                    if deflate {
                        assert_eq!(held, 0, "deflate kept input it could decode");
                    } else {
                        assert!(held < 4 + MAX_SNAPPY_CHUNK, "snappy held {held}");
                    }
                    break;
                }
                Ok(n) => {
                    assert!(n <= budget, "{n} bytes for a budget of {budget}");
                    assert_eq!(out.len() - before, n);
                    out.clear();
                }
                Err(_) => {
                    assert!(d.decompress(&mut out, budget).is_err(), "an error is final");
                    break 'feed;
                }
            }
        }
    }

    // Our own output: whatever the bytes, compressed piece by piece, they come back.
    let (mut c, mut d) = pair(deflate);
    let mut wire = Vec::new();
    for p in stream.chunks(piece) {
        c.compress(p, &mut wire).expect("compress");
    }
    d.feed(&wire).expect("feed our own stream");
    let mut got = BytesMut::new();
    while d
        .decompress(&mut got, budget)
        .expect("our own stream decodes")
        > 0
    {}
    assert_eq!(&got[..], stream);
});

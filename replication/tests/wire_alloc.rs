//! How much memory the replication wire decoder asks for when a peer claims huge lengths and
//! counts in a few bytes: never more than a small multiple of what actually arrived.
//!
//! Its own test binary, because it installs a counting global allocator.

use replication::wire::{Decoder, WireError};
use test_harness::largest_alloc::{self, Largest};

#[global_allocator]
static GLOBAL: Largest = Largest;

const MAX_FRAME: usize = 8 << 20;

/// Feeds `bytes` to a fresh decoder one byte at a time; returns its result and the largest
/// allocation made meanwhile.
fn largest_while_decoding(bytes: &[u8]) -> (Result<usize, WireError>, usize) {
    let mut d = Decoder::new(MAX_FRAME);
    let mut frames = Vec::with_capacity(4);
    largest_alloc::reset();
    let mut r = Ok(());
    for b in bytes {
        r = d.feed(std::slice::from_ref(b), &mut frames);
        if r.is_err() {
            break;
        }
    }
    (r.map(|()| frames.len()), largest_alloc::largest())
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

#[test]
fn huge_claims_in_small_frames_allocate_little() {
    // A Messages frame claiming 4 billion messages.
    let (r, largest) = largest_while_decoding(&frame(&[1, 2, 0xff, 0xff, 0xff, 0xff, 0, 0]));
    assert!(matches!(r, Err(WireError::CountTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");

    // One append claiming 4 billion records, then a record claiming a 4 GB body.
    let mut append = vec![1, 2, 0, 0, 0, 1, 1, b't', 1];
    append.extend_from_slice(&[0; 32]);
    let mut records = append.clone();
    records.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    records.extend_from_slice(&[0; 16]);
    let (r, largest) = largest_while_decoding(&frame(&records));
    assert!(matches!(r, Err(WireError::CountTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");
    let mut body = append;
    body.extend_from_slice(&[0, 0, 0, 1]);
    body.extend_from_slice(&[0; 12]);
    body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    body.extend_from_slice(&[0; 8]);
    let (r, largest) = largest_while_decoding(&frame(&body));
    assert!(matches!(r, Err(WireError::CountTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");

    // A forwards frame claiming 4 billion forwards; a publish claiming 4 billion bodies, then
    // a body of 4 GB; a channel position claiming 4 billion finished seqs.
    let (r, largest) = largest_while_decoding(&frame(&[1, 4, 0xff, 0xff, 0xff, 0xff, 0, 0]));
    assert!(matches!(r, Err(WireError::CountTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");
    let mut publish = vec![1, 4, 0, 0, 0, 1, 1];
    publish.extend_from_slice(&[0; 8]);
    publish.extend_from_slice(&[1, b't']);
    publish.extend_from_slice(&[0; 8]);
    let mut bodies = publish.clone();
    bodies.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    bodies.extend_from_slice(&[0; 16]);
    let (r, largest) = largest_while_decoding(&frame(&bodies));
    assert!(matches!(r, Err(WireError::CountTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");
    let mut body = publish;
    body.extend_from_slice(&[0, 0, 0, 1]);
    body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    body.extend_from_slice(&[0; 8]);
    let (r, largest) = largest_while_decoding(&frame(&body));
    assert!(matches!(r, Err(WireError::CountTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");
    let mut position = vec![1, 4, 0, 0, 0, 1, 3, 1, b't', 1, b'c', 4];
    position.extend_from_slice(&[0; 8]);
    position.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    position.extend_from_slice(&[0; 16]);
    let (r, largest) = largest_while_decoding(&frame(&position));
    assert!(matches!(r, Err(WireError::CountTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");

    // A length prefix over the maximum is refused from its four bytes.
    let (r, largest) = largest_while_decoding(&[0xff, 0xff, 0xff, 0xff, 1, 2]);
    assert!(matches!(r, Err(WireError::FrameTooLarge { .. })), "{r:?}");
    assert!(largest < 1024, "largest allocation {largest}");

    // A length at the maximum whose bytes never come: the buffer grows only with what arrives.
    let mut partial = (MAX_FRAME as u32).to_be_bytes().to_vec();
    partial.extend_from_slice(&[1, 2, 0, 0]);
    let (r, largest) = largest_while_decoding(&partial);
    assert_eq!(r, Ok(0));
    assert!(largest < 1024, "largest allocation {largest}");
}

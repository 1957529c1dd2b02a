//! Never-panic properties of the request decoder, the server's side facing the network: any
//! bytes, and mutations of real requests, give requests, "need more", or an error, never a
//! panic; `Incomplete` consumes nothing; and the requests do not depend on how the bytes were
//! cut into reads.

use bytes::BytesMut;
use http1::{Decoded, HttpError, Limits, Request, RequestDecoder};
use proptest::collection::vec;
use proptest::prelude::*;

/// Requests a server sees, to mutate.
const SEEDS: &[&[u8]] = &[
    b"GET /ping HTTP/1.1\r\nHost: h\r\n\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /mpub?topic=t HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n3;x=1\r\nabc\r\n0\r\nT: y\r\n\r\n",
    b"GET /stats?format=json&topic=a%20b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\n\r\n",
];

const LIMITS: Limits = Limits {
    max_header_bytes: 256,
    max_headers: 8,
    max_body: 64,
};

/// Decodes all of `buf` (refilled by the caller): the requests, and whether it ended in an
/// error.
fn drain(d: &mut RequestDecoder, buf: &mut BytesMut, out: &mut Vec<Request>) -> Option<HttpError> {
    loop {
        let before = buf.len();
        match d.decode(buf) {
            Ok(Decoded::Request(r)) => {
                assert!(buf.len() < before);
                assert!(r.body.len() <= LIMITS.max_body);
                let _ = r.head.query();
                let _ = r.head.headers();
                out.push(r);
            }
            Ok(Decoded::SendContinue) => assert_eq!(buf.len(), before),
            Ok(Decoded::Incomplete) => {
                assert_eq!(buf.len(), before);
                return None;
            }
            Err(e) => return Some(e),
        }
    }
}

fn check(stream: &[u8], step: usize) {
    let mut whole = Vec::new();
    let mut buf = BytesMut::from(stream);
    let whole_end = drain(&mut RequestDecoder::new(LIMITS), &mut buf, &mut whole);
    let whole_left = buf.len();

    let mut pieces = Vec::new();
    let mut d = RequestDecoder::new(LIMITS);
    let mut buf = BytesMut::new();
    let mut piece_end = None;
    for part in stream.chunks(step.max(1)) {
        buf.extend_from_slice(part);
        piece_end = drain(&mut d, &mut buf, &mut pieces);
        if piece_end.is_some() {
            break;
        }
    }
    assert_eq!(whole, pieces);
    match (&whole_end, &piece_end) {
        // a head both malformed and too large is refused as either, as far as it had arrived
        (
            Some(HttpError::Malformed(_) | HttpError::HeadersTooLarge),
            Some(HttpError::Malformed(_) | HttpError::HeadersTooLarge),
        ) => {}
        _ => assert_eq!(whole_end, piece_end),
    }
    if whole_end.is_none() {
        assert_eq!(whole_left, buf.len());
    }
}

/// A seed request with some bytes overwritten, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        0..SEEDS.len(),
        vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 0..6),
        1usize..4,
    )
        .prop_map(|(seed, edits, repeat)| {
            let mut v = SEEDS[seed].repeat(repeat);
            for (at, kind, byte) in edits {
                let i = at.index(v.len() + 1);
                match kind {
                    0 if i < v.len() => v[i] = byte,
                    1 => v.insert(i, byte),
                    _ if i < v.len() => {
                        v.remove(i);
                    }
                    _ => {}
                }
            }
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_never_panic(stream in vec(any::<u8>(), 0..600), step in 1usize..64) {
        check(&stream, step);
    }

    #[test]
    fn mutated_requests_never_panic(stream in mutated(), step in 1usize..64) {
        check(&stream, step);
    }
}

//! The server side: `RequestDecoder::decode` over a connection's bytes, as a server's read loop
//! drives it.
//!
//! Input: `[limits selector][read size][stream...]`. Checked, beyond "no panic": `Incomplete`
//! and `SendContinue` consume nothing, a request consumes bytes; a request's parts lie where
//! the head says (method and path non-empty, body within `max_body`); feeding the stream in
//! reads of 1-64 bytes gives the same requests and the same end (the same error, or bytes left
//! over) as feeding it whole (a head both malformed and too large may be refused as either); every request's answer and every error's answer is written
//! without panicking.
#![no_main]

use bytes::BytesMut;
use http1::{Decoded, HttpError, Request, RequestDecoder, Response};
use libfuzzer_sys::fuzz_target;

#[path = "limits.rs"]
mod limits;
use limits::limits;

/// How a run ended.
#[derive(Debug, PartialEq)]
enum End {
    /// Needs more bytes; this many are buffered.
    Incomplete(usize),
    Error(HttpError),
}

/// Decodes everything in `buf` (which the caller refills), pushing requests to `out`.
fn drain(decoder: &mut RequestDecoder, buf: &mut BytesMut, max_body: usize, out: &mut Vec<Request>) -> Option<End> {
    loop {
        let before = buf.len();
        match decoder.decode(buf) {
            Ok(Decoded::Request(req)) => {
                assert!(buf.len() < before, "a request consumes bytes");
                assert!(!req.head.method().is_empty());
                assert!(req.body.len() <= max_body);
                let mut answer = BytesMut::new();
                Response::text(200, "OK").write_for(&req.head, &mut answer);
                let _ = req.head.query();
                let _ = req.head.headers();
                out.push(req);
            }
            Ok(Decoded::SendContinue) => assert_eq!(buf.len(), before),
            Ok(Decoded::Incomplete) => {
                assert_eq!(buf.len(), before, "Incomplete consumes nothing");
                return None;
            }
            Err(e) => {
                let mut answer = BytesMut::new();
                e.to_response().write_to(&mut answer, false, false);
                let _ = e.to_string();
                return Some(End::Error(e));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [sel, chunk, stream @ ..] = data else {
        return;
    };
    let limits = limits(*sel);

    let mut whole = Vec::new();
    let mut buf = BytesMut::from(stream);
    let mut decoder = RequestDecoder::new(limits);
    let whole_end =
        drain(&mut decoder, &mut buf, limits.max_body, &mut whole).unwrap_or(End::Incomplete(buf.len()));

    let step = 1 + (*chunk as usize % 64);
    let mut pieces = Vec::new();
    let mut buf = BytesMut::new();
    let mut decoder = RequestDecoder::new(limits);
    let mut piece_end = None;
    for part in stream.chunks(step) {
        buf.extend_from_slice(part);
        if let Some(end) = drain(&mut decoder, &mut buf, limits.max_body, &mut pieces) {
            piece_end = Some(end);
            break;
        }
    }
    let piece_end = piece_end.unwrap_or(End::Incomplete(buf.len()));
    assert_eq!(whole, pieces, "the same requests however the bytes arrive");
    match (&whole_end, &piece_end) {
        // A head over `max_header_bytes` that is also malformed is refused as one or the other,
        // as far as the bytes arrived when the decoder looked.
        (
            End::Error(HttpError::Malformed(_) | HttpError::HeadersTooLarge),
            End::Error(HttpError::Malformed(_) | HttpError::HeadersTooLarge),
        ) => {}
        _ => assert_eq!(whole_end, piece_end, "the same end however the bytes arrive"),
    }
});

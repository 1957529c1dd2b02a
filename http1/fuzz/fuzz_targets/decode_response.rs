//! The client side: `decode_response` over what a server sent, as `client::exchange` calls it
//! after each read.
//!
//! Input: `[limits selector][read size][stream...]`. Checked, beyond "no panic": `Ok(None)`
//! only before the close; a response takes no more bytes than there are; the body stays
//! within `max_body`; fed in prefixes growing by 1-64 bytes (as received, then at the close)
//! it ends as fed whole (a head both malformed and too large may be refused as either).
#![no_main]

use http1::{decode_response, ResponseError};
use libfuzzer_sys::fuzz_target;

#[path = "limits.rs"]
mod limits;
use limits::limits;

fuzz_target!(|data: &[u8]| {
    let [sel, chunk, stream @ ..] = data else {
        return;
    };
    let limits = limits(*sel);
    let at_close = decode_response(stream, true, &limits);
    match &at_close {
        Ok(None) => panic!("at the close there is an answer or an error"),
        Ok(Some((resp, used))) => {
            assert!(*used <= stream.len());
            assert!(resp.body.len() <= limits.max_body);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // As received: each prefix before the close, then the whole at the close.
    let step = 1 + (*chunk as usize % 64);
    let mut end = step.min(stream.len());
    let fed = loop {
        if end >= stream.len() {
            break decode_response(stream, true, &limits);
        }
        match decode_response(&stream[..end], false, &limits) {
            Ok(None) => end = (end + step).min(stream.len()),
            other => break other,
        }
    };
    match (&at_close, &fed) {
        // A head over `max_header_bytes` that is also malformed is refused as one or the other,
        // as far as the bytes had arrived when the decoder looked.
        (
            Err(ResponseError::Malformed(_) | ResponseError::HeadersTooLarge),
            Err(ResponseError::Malformed(_) | ResponseError::HeadersTooLarge),
        ) => {}
        _ => assert_eq!(at_close, fed, "the same end however the bytes arrive"),
    }
});

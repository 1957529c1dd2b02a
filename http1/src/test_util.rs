//! Helpers the unit tests share: a small decoder and one-request decoding.

use crate::*;
use bytes::BytesMut;

pub(crate) fn decoder() -> RequestDecoder {
    RequestDecoder::new(Limits {
        max_header_bytes: 1024,
        max_headers: 16,
        max_body: 64,
    })
}

pub(crate) fn decode_one(bytes: &[u8]) -> Result<Decoded, HttpError> {
    decoder().decode(&mut BytesMut::from(bytes))
}

pub(crate) fn request(bytes: &[u8]) -> Request {
    match decode_one(bytes) {
        Ok(Decoded::Request(r)) => r,
        other => panic!("expected a request, got {other:?}"),
    }
}

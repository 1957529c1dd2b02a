//! The limits the HTTP targets pick from with their first byte: nsqd's defaults, tiny ones,
//! zero, and large ones, so that every bound is reached often.

use http1::Limits;

pub fn limits(sel: u8) -> Limits {
    match sel & 3 {
        0 => Limits::default(),
        1 => Limits {
            max_header_bytes: 64,
            max_headers: 2,
            max_body: 8,
        },
        2 => Limits {
            max_header_bytes: 0,
            max_headers: 0,
            max_body: 0,
        },
        _ => Limits {
            max_header_bytes: 4096,
            max_headers: 300,
            max_body: 1 << 20,
        },
    }
}

//! Message bodies that carry their own send time, so a consumer can measure end-to-end
//! latency without any side channel.
//!
//! ```text
//!  0               8                16            size
//!  +---------------+----------------+--------------+
//!  | send time, ns | "shbench1"     | filler 'x'   |
//!  | u64 LE, Unix  | marker         |              |
//!  +---------------+----------------+--------------+
//! ```
//!
//! The send time is wall-clock (the consumer may be another process on the same machine); in
//! open-loop runs it is the *scheduled* send time, so a stalled publisher shows up as latency.
//! Bodies without the marker (someone else's messages) are counted but not timed.

use bytes::{BufMut, Bytes, BytesMut};
use std::time::{SystemTime, UNIX_EPOCH};

/// Bytes at the start of every body that the stamp takes.
pub const STAMP_LEN: usize = 16;
const MARKER: &[u8; 8] = b"shbench1";

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `count` bodies of `size` bytes stamped with `sent_ns`, cut from one allocation.
pub fn bodies(size: usize, count: usize, sent_ns: u64) -> Vec<Bytes> {
    debug_assert!(size >= STAMP_LEN);
    let mut buf = BytesMut::with_capacity(size * count);
    for _ in 0..count {
        write_body(&mut buf, size, sent_ns);
    }
    let mut all = buf.freeze();
    (0..count).map(|_| all.split_to(size)).collect()
}

/// Appends one stamped body of `size` bytes to `out`.
pub fn write_body(out: &mut BytesMut, size: usize, sent_ns: u64) {
    out.put_u64_le(sent_ns);
    out.put_slice(MARKER);
    out.put_bytes(b'x', size - STAMP_LEN);
}

/// The send time in a stamped body, or `None` for a body this tool did not write.
pub fn sent_ns(body: &[u8]) -> Option<u64> {
    if body.len() < STAMP_LEN || &body[8..16] != MARKER {
        return None;
    }
    Some(u64::from_le_bytes(body[..8].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_body_gives_back_its_send_time() {
        let b = bodies(200, 3, 123_456_789);
        assert_eq!(b.len(), 3);
        assert!(b.iter().all(|x| x.len() == 200));
        assert_eq!(sent_ns(&b[2]), Some(123_456_789));
        assert_eq!(sent_ns(b"not ours at all, no marker"), None);
        assert_eq!(sent_ns(b"short"), None);
    }
}

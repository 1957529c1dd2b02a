//! An MPUB body, `[u32 count]([u32 size][bytes])*`: nsqd's checks of the count and of each
//! message size, with its texts, made as each size arrives ([`check_mpub_sizes`], resumable
//! through [`DecodeProgress`]) and once more when the body is whole ([`split_mpub_body`]).
//!
//! Invariants: the count never sizes an allocation beyond what the body can hold; a body holds
//! exactly the messages it announces.

use super::{bad_body, bad_message, read_i32, DecodeProgress, Limits};
use crate::error::ProtocolError;
use bytes::{Buf, Bytes};

pub(super) fn check_mpub_count(count: i32, limits: &Limits) -> Result<(), ProtocolError> {
    // 4 bytes of count, then at least 5 bytes (size + one byte) a message.
    let max_messages = (limits.max_body_size.saturating_sub(4)) / 5;
    if count <= 0 || count as u64 > max_messages {
        return Err(bad_body(format!("MPUB invalid message count {count}")));
    }
    Ok(())
}

/// Checks the message sizes of an incomplete MPUB body (`buf[body]`, the count already
/// checked) that have arrived and were not checked yet, in order.
pub(super) fn check_mpub_sizes(
    buf: &[u8],
    body: std::ops::Range<usize>,
    count: i32,
    limits: &Limits,
    progress: &mut DecodeProgress,
) -> Result<(), ProtocolError> {
    if progress.mpub_next == 0 {
        progress.mpub_next = body.start + 4;
        progress.mpub_index = 0;
    }
    while progress.mpub_index < count && progress.mpub_next + 4 <= body.end {
        let size = read_i32(&buf[progress.mpub_next..]);
        check_mpub_message_size(progress.mpub_index, size, limits)?;
        progress.mpub_next += 4 + size as usize;
        progress.mpub_index += 1;
    }
    Ok(())
}

/// nsqd's checks of one MPUB message size, with its texts.
fn check_mpub_message_size(i: i32, size: i32, limits: &Limits) -> Result<(), ProtocolError> {
    if size <= 0 {
        return Err(bad_message(format!(
            "MPUB invalid message({i}) body size {size}"
        )));
    }
    if size as u64 > limits.max_msg_size {
        return Err(bad_message(format!(
            "MPUB message too big {size} > {}",
            limits.max_msg_size
        )));
    }
    Ok(())
}

/// Splits a complete MPUB body `[u32 count]([u32 size][bytes])*` into message bodies.
pub fn split_mpub_body(mut body: Bytes, limits: &Limits) -> Result<Vec<Bytes>, ProtocolError> {
    if body.len() < 4 {
        return Err(bad_body("MPUB failed to read message count"));
    }
    let count = body.get_i32();
    check_mpub_count(count, limits)?;
    // The count is the client's claim: never let it size an allocation beyond what the body
    // can hold (each message takes at least 5 bytes).
    let mut bodies = Vec::with_capacity((count as usize).min(body.len() / 5));
    for i in 0..count {
        if body.len() < 4 {
            return Err(bad_message(format!(
                "MPUB failed to read message({i}) body size"
            )));
        }
        let size = body.get_i32();
        check_mpub_message_size(i, size, limits)?;
        if body.len() < size as usize {
            return Err(bad_message("MPUB failed to read message body"));
        }
        bodies.push(body.split_to(size as usize));
    }
    if !body.is_empty() {
        return Err(bad_body(format!(
            "MPUB body has {} bytes after its {count} messages",
            body.len()
        )));
    }
    Ok(bodies)
}

//! A message as it travels to a consumer: `[i64 BE timestamp ns][u16 BE attempts][16-byte id][body]`.
//!
//! The body is a [`Bytes`], so every channel and shard that holds the message shares one
//! allocation; cloning a `Message` costs a reference count, never a copy of the body.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::fmt;

/// Length of a message ID on the wire.
pub const MESSAGE_ID_LEN: usize = 16;
/// Bytes of a message frame's data before the body: timestamp, attempts, id.
pub const MESSAGE_HEADER_LEN: usize = 8 + 2 + MESSAGE_ID_LEN;

/// A 16-byte message ID. The broker makes them as 16 lowercase hex digits (like nsqd); a client
/// must treat them as opaque bytes and echo them back in FIN, REQ and TOUCH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MessageId(pub [u8; MESSAGE_ID_LEN]);

impl MessageId {
    /// The ID whose text is the 16 hex digits of `n`.
    ///
    /// It runs on every message published, so the digits are made eight at a time, as two
    /// words (the inverse of [`MessageId::to_u64`]'s SWAR: no table and no branch per digit).
    #[inline]
    pub fn from_u64(n: u64) -> MessageId {
        let mut out = [0u8; MESSAGE_ID_LEN];
        out[..8].copy_from_slice(&hex_digits((n >> 32) as u32).to_be_bytes());
        out[8..].copy_from_slice(&hex_digits(n as u32).to_be_bytes());
        MessageId(out)
    }

    /// The number behind a hex ID made by [`MessageId::from_u64`]; `None` for any other ID
    /// (upper-case digits included), so `from_u64(id.to_u64()?) == id` always holds.
    ///
    /// It runs on every FIN, REQ and TOUCH, so the 16 digits are read eight at a time, as two
    /// big-endian words (SWAR: each byte of a word is one digit, checked and converted by
    /// whole-word arithmetic, no branch and no table per digit).
    #[inline]
    pub fn to_u64(&self) -> Option<u64> {
        let (hi, lo) = self.0.split_at(8);
        let hi = u64::from_be_bytes(hi.try_into().ok()?);
        let lo = u64::from_be_bytes(lo.try_into().ok()?);
        let (hi_value, hi_ok) = hex_word(hi);
        let (lo_value, lo_ok) = hex_word(lo);
        (hi_ok & lo_ok).then_some((hi_value << 32) | lo_value)
    }

    /// Reads an ID from a command parameter; `None` unless it is exactly 16 bytes.
    pub fn from_slice(b: &[u8]) -> Option<MessageId> {
        let arr: [u8; MESSAGE_ID_LEN] = b.try_into().ok()?;
        Some(MessageId(arr))
    }

    pub fn as_bytes(&self) -> &[u8; MESSAGE_ID_LEN] {
        &self.0
    }
}

/// Every byte of a word set to `b`.
const fn each(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

/// The value of eight lower-case hex digits packed in `w` (the first digit in the top byte),
/// and whether all eight are `0-9` or `a-f`.
#[inline]
fn hex_word(w: u64) -> (u64, bool) {
    const HIGH: u64 = each(0x80);
    // With every byte's top bit set first (or subtracted from a byte with it set), no
    // subtraction borrows from its neighbour while the byte is below 0x80; a byte at or above
    // 0x80 fails the first test, whatever the others then say.
    let ascii = w & HIGH == 0;
    let at_least = |c: u8| ((w | HIGH) - each(c)) & HIGH;
    let at_most = |c: u8| (each(c | 0x80) - w) & HIGH;
    let digit = at_least(b'0') & at_most(b'9');
    let letter = at_least(b'a') & at_most(b'f');
    let valid = ascii && (digit | letter) == HIGH;
    // '0'-'9' are 0x30-0x39 and 'a'-'f' 0x61-0x66: the low nibble, plus 9 for a letter (bit 6).
    let nibbles = (w & each(0x0f)) + ((w >> 6) & each(0x01)) * 9;
    // Gather the eight nibbles (one per byte) into the low 32 bits, first digit highest.
    let x = (nibbles | (nibbles >> 4)) & 0x00ff_00ff_00ff_00ff;
    let x = (x | (x >> 8)) & 0x0000_ffff_0000_ffff;
    let x = (x | (x >> 16)) & 0x0000_0000_ffff_ffff;
    (x, valid)
}

/// The eight lower-case hex digits of `x`, packed one per byte with the first digit in the
/// top byte (what [`hex_word`] reads).
fn hex_digits(x: u32) -> u64 {
    // Spread the eight nibbles to one per byte, first nibble in the top byte.
    let v = x as u64;
    let v = (v | (v << 16)) & 0x0000_ffff_0000_ffff;
    let v = (v | (v << 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v | (v << 4)) & each(0x0f);
    // 1 in each byte whose nibble is 10 or more: adding 6 carries it into bit 4.
    let letters = ((v + each(6)) >> 4) & each(0x01);
    // '0' + nibble, and for a letter the 39 from '9' + 1 to 'a'.
    v + each(b'0') + letters * (b'a' - b'0' - 10) as u64
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({self})")
    }
}

/// One message: what a consumer receives in a message frame.
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    pub id: MessageId,
    /// Nanoseconds since the Unix epoch at which the broker accepted the message.
    pub timestamp: i64,
    /// How many times the message has been delivered, this delivery included.
    pub attempts: u16,
    pub body: Bytes,
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("timestamp", &self.timestamp)
            .field("attempts", &self.attempts)
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl Message {
    /// Length of the frame data this message encodes to.
    pub fn encoded_len(&self) -> usize {
        MESSAGE_HEADER_LEN + self.body.len()
    }

    /// Appends the message layout (no frame header) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        out.put_i64(self.timestamp);
        out.put_u16(self.attempts);
        out.put_slice(&self.id.0);
        out.put_slice(&self.body);
    }

    /// Reads a message from a message frame's data. The body shares `data`'s allocation.
    pub fn decode(mut data: Bytes) -> Option<Message> {
        if data.len() < MESSAGE_HEADER_LEN {
            return None;
        }
        let timestamp = data.get_i64();
        let attempts = data.get_u16();
        let id = MessageId::from_slice(&data[..MESSAGE_ID_LEN])?;
        data.advance(MESSAGE_ID_LEN);
        Some(Message {
            id,
            timestamp,
            attempts,
            body: data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hex_round_trip() {
        let id = MessageId::from_u64(0x0123_4567_89ab_cdef);
        assert_eq!(&id.0, b"0123456789abcdef");
        assert_eq!(id.to_u64(), Some(0x0123_4567_89ab_cdef));
        assert_eq!(id.to_string(), "0123456789abcdef");
        assert_eq!(MessageId::from_slice(b"short"), None);
        // Only the exact text from_u64 makes: no upper case, sign or other bytes.
        for other in [
            b"0123456789ABCDEF",
            b"+123456789abcdef",
            b"0123456789abcde ",
        ] {
            assert_eq!(MessageId(*other).to_u64(), None);
        }
    }

    /// The plain reading of an ID, one digit at a time: what `to_u64` must agree with.
    fn to_u64_reference(id: &[u8; MESSAGE_ID_LEN]) -> Option<u64> {
        id.iter().try_fold(0u64, |n, &c| {
            let digit = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            Some((n << 4) | digit as u64)
        })
    }

    /// Every value of every pair of neighbouring bytes in an otherwise valid ID (the word
    /// arithmetic must not let one byte's borrow or carry change its neighbour's verdict).
    #[test]
    fn id_parse_agrees_with_the_digit_by_digit_reading_for_every_byte_pair() {
        let base = *b"0123456789abcdef";
        for i in 0..MESSAGE_ID_LEN - 1 {
            for a in 0..=255u8 {
                for b in 0..=255u8 {
                    let mut id = base;
                    id[i] = a;
                    id[i + 1] = b;
                    assert_eq!(MessageId(id).to_u64(), to_u64_reference(&id), "{id:?}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn id_text_round_trips(n: u64, bytes: [u8; MESSAGE_ID_LEN]) {
            proptest::prop_assert_eq!(MessageId::from_u64(n).to_u64(), Some(n));
            let id = MessageId(bytes);
            proptest::prop_assert_eq!(id.to_u64(), to_u64_reference(&bytes));
            if let Some(v) = id.to_u64() {
                proptest::prop_assert_eq!(MessageId::from_u64(v), id);
            }
        }
    }

    #[test]
    fn message_round_trip() {
        let m = Message {
            id: MessageId::from_u64(7),
            timestamp: 1_700_000_000_000_000_000,
            attempts: 3,
            body: Bytes::from_static(b"hello"),
        };
        let mut out = BytesMut::new();
        m.encode(&mut out);
        assert_eq!(out.len(), m.encoded_len());
        assert_eq!(Message::decode(out.freeze()), Some(m));
        assert_eq!(Message::decode(Bytes::from_static(b"short")), None);
    }
}

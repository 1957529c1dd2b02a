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
    pub fn from_u64(n: u64) -> MessageId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; MESSAGE_ID_LEN];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 60 - 4 * i;
            *slot = HEX[((n >> shift) & 0xf) as usize];
        }
        MessageId(out)
    }

    /// The number behind a hex ID made by [`MessageId::from_u64`]; `None` for any other ID
    /// (upper-case digits included), so `from_u64(id.to_u64()?) == id` always holds.
    #[inline]
    pub fn to_u64(&self) -> Option<u64> {
        // Every digit is looked up; one test at the end (it runs on every FIN).
        let mut n = 0u64;
        let mut bad = 0u8;
        for &c in &self.0 {
            let digit = HEX_DIGIT[c as usize];
            bad |= digit;
            n = (n << 4) | (digit & 0xf) as u64;
        }
        (bad & NOT_HEX == 0).then_some(n)
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

/// Marks a byte that is not a lower-case hex digit in [`HEX_DIGIT`].
const NOT_HEX: u8 = 0x80;

/// The value of each lower-case hex digit; [`NOT_HEX`] for every other byte.
static HEX_DIGIT: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

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

    proptest::proptest! {
        #[test]
        fn id_text_round_trips(n: u64, bytes: [u8; MESSAGE_ID_LEN]) {
            proptest::prop_assert_eq!(MessageId::from_u64(n).to_u64(), Some(n));
            let id = MessageId(bytes);
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

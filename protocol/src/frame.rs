//! Frames from the broker to a client: `[u32 BE size][u32 BE type][data]`, where size counts the
//! type and the data.
//!
//! The broker writes frames with [`write_frame`] and [`write_message_frame`]; clients read them
//! with [`decode_frame`].

use crate::message::Message;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The three frame types of protocol V2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    Response = 0,
    Error = 1,
    Message = 2,
}

impl FrameType {
    pub fn from_u32(v: u32) -> Option<FrameType> {
        match v {
            0 => Some(FrameType::Response),
            1 => Some(FrameType::Error),
            2 => Some(FrameType::Message),
            _ => None,
        }
    }
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Response(Bytes),
    Error(Bytes),
    Message(Message),
}

/// Why a frame could not be read. Either way the stream cannot be trusted any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The size field is below 4 or above the reader's limit.
    BadSize(u32),
    /// The type field is not 0, 1 or 2.
    BadType(u32),
    /// A message frame too short to hold a message.
    BadMessage,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadSize(s) => write!(f, "invalid frame size {s}"),
            FrameError::BadType(t) => write!(f, "invalid frame type {t}"),
            FrameError::BadMessage => write!(f, "message frame too short"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Appends a response or error frame carrying `data`.
pub fn write_frame(out: &mut BytesMut, kind: FrameType, data: &[u8]) {
    out.reserve(8 + data.len());
    out.put_u32(4 + data.len() as u32);
    out.put_u32(kind as u32);
    out.put_slice(data);
}

/// Appends a message frame for `msg`.
pub fn write_message_frame(out: &mut BytesMut, msg: &Message) {
    out.reserve(8 + msg.encoded_len());
    out.put_u32(4 + msg.encoded_len() as u32);
    out.put_u32(FrameType::Message as u32);
    msg.encode(out);
}

/// Cuts one frame off the front of `buf`. `Ok(None)` means more bytes are needed and nothing
/// was consumed. `max_size` bounds the size field (a client's defence against a broken peer).
pub fn decode_frame(buf: &mut BytesMut, max_size: u32) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 4 || size > max_size {
        return Err(FrameError::BadSize(size));
    }
    if buf.len() < 4 + size as usize {
        return Ok(None);
    }
    buf.advance(4);
    let mut data = buf.split_to(size as usize).freeze();
    let kind = data.get_u32();
    match FrameType::from_u32(kind) {
        Some(FrameType::Response) => Ok(Some(Frame::Response(data))),
        Some(FrameType::Error) => Ok(Some(Frame::Error(data))),
        Some(FrameType::Message) => Message::decode(data)
            .map(|m| Some(Frame::Message(m)))
            .ok_or(FrameError::BadMessage),
        None => Err(FrameError::BadType(kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageId;

    #[test]
    fn response_frame_bytes() {
        let mut out = BytesMut::new();
        write_frame(&mut out, FrameType::Response, b"OK");
        assert_eq!(&out[..], b"\x00\x00\x00\x06\x00\x00\x00\x00OK");
    }

    #[test]
    fn frames_round_trip_and_wait_for_more() {
        let msg = Message {
            id: MessageId::from_u64(1),
            timestamp: 5,
            attempts: 1,
            body: Bytes::from_static(b"body"),
        };
        let mut out = BytesMut::new();
        write_frame(&mut out, FrameType::Error, b"E_INVALID x");
        write_message_frame(&mut out, &msg);
        let full = out.clone();
        let mut partial = BytesMut::from(&full[..full.len() - 1]);
        assert_eq!(
            decode_frame(&mut partial, 1 << 20).unwrap(),
            Some(Frame::Error(Bytes::from_static(b"E_INVALID x")))
        );
        assert_eq!(decode_frame(&mut partial, 1 << 20).unwrap(), None);
        assert_eq!(
            decode_frame(&mut out, 1 << 20).unwrap(),
            Some(Frame::Error(Bytes::from_static(b"E_INVALID x")))
        );
        assert_eq!(
            decode_frame(&mut out, 1 << 20).unwrap(),
            Some(Frame::Message(msg))
        );
        assert!(out.is_empty());
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut b = BytesMut::from(&b"\x00\x00\x00\x02xx"[..]);
        assert_eq!(decode_frame(&mut b, 100), Err(FrameError::BadSize(2)));
        let mut b = BytesMut::from(&b"\x00\x00\x00\x04\x00\x00\x00\x09"[..]);
        assert_eq!(decode_frame(&mut b, 100), Err(FrameError::BadType(9)));
        let mut b = BytesMut::from(&b"\x00\x00\x00\x05\x00\x00\x00\x02x"[..]);
        assert_eq!(decode_frame(&mut b, 100), Err(FrameError::BadMessage));
    }
}

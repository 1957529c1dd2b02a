//! The NSQ wire protocol, shared by the broker, the lookup, the client library and the bench.
//!
//! This crate owns the V2 and lookup (V1) bytes on the wire and nothing else: no sockets, no
//! async runtime, no clock, no HTTP (that is the `http1` crate). It knows how to
//!
//! - cut a client's byte stream into [`Command`]s the way nsqd 1.3 does, with the same error
//!   codes, texts and fatal/non-fatal rules ([`decode_command`]), and write commands back
//!   ([`Command::encode`]) for clients;
//! - frame responses, errors and messages for a client ([`frame`]) and read them back
//!   ([`decode_frame`]);
//! - lay out a message ([`Message`], [`MessageId`]);
//! - validate topic and channel names ([`names`]);
//! - read and answer IDENTIFY ([`identify`]);
//! - speak the lookup (V1) protocol between a broker and nsqlookupd ([`lookup`]);
//! - parse Go-style durations as nsqd's flags and config take them ([`duration`]);
//! - compress and decompress a connection's bytes once IDENTIFY switched on snappy or
//!   deflate ([`compress`]).
//!
//! ```
//! use bytes::BytesMut;
//! use protocol::{decode_command, Command, DecodeContext};
//!
//! let mut buf = BytesMut::from(&b"PUB events\n\x00\x00\x00\x05hello"[..]);
//! let ctx = DecodeContext::default();
//! match decode_command(&mut buf, &ctx).unwrap() {
//!     Some(Command::Pub { topic, body }) => {
//!         assert_eq!(topic, "events");
//!         assert_eq!(&body[..], b"hello");
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! assert!(buf.is_empty());
//! ```

pub mod command;
pub mod compress;
pub mod duration;
pub mod error;
pub mod frame;
pub mod identify;
pub mod lookup;
pub mod message;
pub mod names;

pub use command::{
    decode_command, decode_command_resuming, Command, ConnPhase, DecodeContext, DecodeProgress,
    Limits,
};
pub use error::{ErrorCode, ProtocolError};
pub use frame::{decode_frame, Frame, FrameType};
pub use message::{Message, MessageId};

/// The four bytes a V2 client sends first.
pub const MAGIC_V2: &[u8; 4] = b"  V2";
/// The four bytes a lookup peer sends first.
pub const MAGIC_V1: &[u8; 4] = b"  V1";
/// The version string reported on the wire (IDENTIFY, /info, /stats). Clients and tools
/// compare it to decide which features nsqd has, so it names the nsqd release we match.
pub const NSQD_COMPAT_VERSION: &str = "1.3.0";
/// The heartbeat payload nsqd sends as a response frame.
pub const HEARTBEAT: &[u8] = b"_heartbeat_";
/// The response to most successful commands.
pub const OK: &[u8] = b"OK";
/// The response to CLS.
pub const CLOSE_WAIT: &[u8] = b"CLOSE_WAIT";

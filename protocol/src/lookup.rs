//! nsqlookupd's TCP protocol V1: the commands a broker sends its lookups, and the replies.
//!
//! A peer opens with the magic `"  V1"` ([`crate::MAGIC_V1`]), then sends commands: a text line,
//! words split on single spaces, ended by `\n` (surrounding whitespace is trimmed, as nsqlookupd
//! does). `IDENTIFY` is followed by `[i32 BE size][JSON body]`. Every reply is `[u32 BE size][data]`
//! with no frame type; an error is data that reads `"E_<CODE> <text>"`.
//!
//! ```text
//! peer -> lookup   "  V1"
//! peer -> lookup   "IDENTIFY\n" [size][{"broadcast_address":..,"tcp_port":..,..}]
//! lookup -> peer   [size][{"broadcast_address":..,"hostname":..,"http_port":..,..}]
//! peer -> lookup   "REGISTER topic channel\n"        lookup -> peer  [2]["OK"]
//! peer -> lookup   "PING\n"                          lookup -> peer  [2]["OK"]
//! peer -> lookup   "CONTROLLER\n" [size][JSON request] lookup -> peer  [size][JSON reply]
//! ```
//!
//! `CONTROLLER` is ours, not nsqlookupd's: a request to the replication controller the lookup
//! hosts (`docs/design/replication.md`). It needs no IDENTIFY (the request names its broker);
//! its body is opaque here, bounded by [`MAX_CONTROLLER_BODY`], and the lookup reads it.
//!
//! The lookup side decodes with [`decode_lookup_command`]; it checks in nsqlookupd's order
//! (identified or not, then parameters, then body) so each error carries nsqlookupd's code and
//! text. Every error nsqlookupd raises on this protocol is fatal: the reply is sent, then the
//! connection is closed. The broker side encodes with [`LookupCommand::encode`] and reads replies
//! with [`decode_reply`].

use crate::error::{ErrorCode, ProtocolError};
use crate::names::{is_valid_channel_name, is_valid_topic_name};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde_json::Value;

/// Longest command line accepted. nsqlookupd has no bound; ours is far above any valid line
/// (a command, a topic and a channel of at most 64 bytes each).
pub const MAX_LINE_LEN: usize = 16 * 1024;
/// Largest IDENTIFY body accepted (nsqlookupd has no bound; a real body is about 150 bytes).
pub const MAX_IDENTIFY_BODY: usize = 64 * 1024;
/// Largest CONTROLLER body accepted (a broker's heartbeat naming every topic it holds stays far
/// below it).
pub const MAX_CONTROLLER_BODY: usize = 4 * 1024 * 1024;
/// The reply nsqlookupd sends to a peer whose first four bytes are not `"  V1"`.
pub const BAD_PROTOCOL_REPLY: &[u8] = b"E_BAD_PROTOCOL";

/// What a peer tells about itself in IDENTIFY, and what the lookup answers about itself: the same
/// five fields both ways. Serialised with the fields in this order (alphabetical), as Go's
/// encoding of a map writes them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PeerInfo {
    pub broadcast_address: String,
    pub hostname: String,
    pub http_port: u16,
    pub tcp_port: u16,
    pub version: String,
}

impl PeerInfo {
    /// Reads the JSON object the way Go's `json.Unmarshal` fills nsqlookupd's `PeerInfo`: keys
    /// match case-insensitively, unknown keys and `null` are ignored, a missing field stays
    /// empty. A body that is not such an object fails with IDENTIFY's decode error.
    pub fn from_json(body: &[u8]) -> Result<PeerInfo, ProtocolError> {
        let bad =
            || ProtocolError::fatal(ErrorCode::BadBody, "IDENTIFY failed to decode JSON body");
        let object = match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => map,
            _ => return Err(bad()),
        };
        let mut info = PeerInfo::default();
        for (key, value) in &object {
            if value.is_null() {
                continue;
            }
            match key.to_ascii_lowercase().as_str() {
                "broadcast_address" => {
                    info.broadcast_address = json_string(value).ok_or_else(bad)?
                }
                "hostname" => info.hostname = json_string(value).ok_or_else(bad)?,
                "version" => info.version = json_string(value).ok_or_else(bad)?,
                "tcp_port" => info.tcp_port = json_port(value).ok_or_else(bad)?,
                "http_port" => info.http_port = json_port(value).ok_or_else(bad)?,
                _ => {}
            }
        }
        Ok(info)
    }

    /// Parses an IDENTIFY body and requires what nsqlookupd requires: broadcast_address,
    /// tcp_port, http_port and version (hostname may be empty).
    pub fn parse_identify(body: &[u8]) -> Result<PeerInfo, ProtocolError> {
        let info = PeerInfo::from_json(body)?;
        if info.broadcast_address.is_empty()
            || info.tcp_port == 0
            || info.http_port == 0
            || info.version.is_empty()
        {
            return Err(ProtocolError::fatal(
                ErrorCode::BadBody,
                "IDENTIFY missing fields",
            ));
        }
        Ok(info)
    }

    /// The JSON object: `{"broadcast_address":..,"hostname":..,"http_port":..,"tcp_port":..,
    /// "version":..}`.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

fn json_string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

fn json_port(v: &Value) -> Option<u16> {
    v.as_u64().and_then(|p| u16::try_from(p).ok())
}

/// A command from a peer of the lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupCommand {
    /// Announces the peer; must come first and only once.
    Identify(PeerInfo),
    /// Registers a topic, or a channel of a topic (which registers the topic too).
    Register {
        topic: String,
        channel: Option<String>,
    },
    /// Unregisters a channel, or a topic (with the peer's channels of that topic).
    Unregister {
        topic: String,
        channel: Option<String>,
    },
    /// Keeps the peer active.
    Ping,
    /// A request to the lookup's replication controller: the JSON body, unread.
    Controller(Bytes),
}

impl LookupCommand {
    /// Appends the command as a peer sends it. The names are written as given: the broker only
    /// registers names it has validated.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            LookupCommand::Identify(info) => {
                let body = info.to_json();
                out.put_slice(b"IDENTIFY\n");
                out.put_u32(body.len() as u32);
                out.put_slice(&body);
            }
            LookupCommand::Register { topic, channel } => {
                encode_line(out, "REGISTER", topic, channel.as_deref())
            }
            LookupCommand::Unregister { topic, channel } => {
                encode_line(out, "UNREGISTER", topic, channel.as_deref())
            }
            LookupCommand::Ping => out.put_slice(b"PING\n"),
            LookupCommand::Controller(body) => {
                out.put_slice(b"CONTROLLER\n");
                out.put_u32(body.len() as u32);
                out.put_slice(body);
            }
        }
    }
}

fn encode_line(out: &mut BytesMut, verb: &str, topic: &str, channel: Option<&str>) {
    out.put_slice(verb.as_bytes());
    out.put_u8(b' ');
    out.put_slice(topic.as_bytes());
    if let Some(channel) = channel {
        out.put_u8(b' ');
        out.put_slice(channel.as_bytes());
    }
    out.put_u8(b'\n');
}

/// Cuts one command off the front of `buf`, as the lookup reads it. `identified` says whether
/// this connection has IDENTIFIED already. `Ok(None)` means more bytes are needed and nothing
/// was consumed. Every error is fatal (nsqlookupd closes after any of them); what was consumed
/// then does not matter.
pub fn decode_lookup_command(
    buf: &mut BytesMut,
    identified: bool,
) -> Result<Option<LookupCommand>, ProtocolError> {
    let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE_LEN {
            return Err(ProtocolError::fatal(
                ErrorCode::Invalid,
                "command line too long",
            ));
        }
        return Ok(None);
    };
    let line = String::from_utf8_lossy(&buf[..newline]).trim().to_owned();
    let params: Vec<&str> = line.split(' ').collect();
    let verb = params[0];
    let command = match verb {
        "PING" => LookupCommand::Ping,
        "IDENTIFY" => {
            if identified {
                return Err(ProtocolError::fatal(
                    ErrorCode::Invalid,
                    "cannot IDENTIFY again",
                ));
            }
            let Some(body) = sized_body(&buf[newline + 1..], MAX_IDENTIFY_BODY, "IDENTIFY")? else {
                return Ok(None);
            };
            let consumed = newline + 1 + 4 + body.len();
            let info = PeerInfo::parse_identify(body)?;
            buf.advance(consumed);
            return Ok(Some(LookupCommand::Identify(info)));
        }
        "CONTROLLER" => {
            let Some(body) = sized_body(&buf[newline + 1..], MAX_CONTROLLER_BODY, "CONTROLLER")?
            else {
                return Ok(None);
            };
            let consumed = newline + 1 + 4 + body.len();
            let body = Bytes::copy_from_slice(body);
            buf.advance(consumed);
            return Ok(Some(LookupCommand::Controller(body)));
        }
        "REGISTER" | "UNREGISTER" => {
            if !identified {
                return Err(ProtocolError::fatal(
                    ErrorCode::Invalid,
                    "client must IDENTIFY",
                ));
            }
            let (topic, channel) = topic_and_channel(verb, &params[1..])?;
            if verb == "REGISTER" {
                LookupCommand::Register { topic, channel }
            } else {
                LookupCommand::Unregister { topic, channel }
            }
        }
        other => {
            return Err(ProtocolError::fatal(
                ErrorCode::Invalid,
                format!("invalid command {other}"),
            ))
        }
    };
    buf.advance(newline + 1);
    Ok(Some(command))
}

/// The `[i32 size][body]` after a command line, once all of it is there; a size above `max`
/// is refused before anything waits for it.
fn sized_body<'a>(
    rest: &'a [u8],
    max: usize,
    verb: &str,
) -> Result<Option<&'a [u8]>, ProtocolError> {
    if rest.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let size = match usize::try_from(size) {
        Ok(size) if size <= max => size,
        _ => {
            return Err(ProtocolError::fatal(
                ErrorCode::BadBody,
                format!("{verb} invalid body size {size}"),
            ))
        }
    };
    Ok(rest.get(4..4 + size))
}

fn topic_and_channel(
    verb: &str,
    params: &[&str],
) -> Result<(String, Option<String>), ProtocolError> {
    let Some(&topic) = params.first() else {
        return Err(ProtocolError::fatal(
            ErrorCode::Invalid,
            format!("{verb} insufficient number of params"),
        ));
    };
    let channel = params.get(1).copied().unwrap_or("");
    if !is_valid_topic_name(topic) {
        return Err(ProtocolError::fatal(
            ErrorCode::BadTopic,
            format!("{verb} topic name '{topic}' is not valid"),
        ));
    }
    if !channel.is_empty() && !is_valid_channel_name(channel) {
        return Err(ProtocolError::fatal(
            ErrorCode::BadChannel,
            format!("{verb} channel name '{channel}' is not valid"),
        ));
    }
    let channel = (!channel.is_empty()).then(|| channel.to_owned());
    Ok((topic.to_owned(), channel))
}

/// Appends one reply: `[u32 BE size][data]`.
pub fn write_reply(out: &mut BytesMut, data: &[u8]) {
    out.put_u32(data.len() as u32);
    out.put_slice(data);
}

/// Appends an error reply, `"E_<CODE> <text>"`.
pub fn write_error_reply(out: &mut BytesMut, err: &ProtocolError) {
    write_reply(out, err.frame_text().as_bytes());
}

/// A reply from a lookup, as the broker reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupReply {
    /// `OK`: the answer to REGISTER, UNREGISTER and PING.
    Ok,
    /// Any other data: IDENTIFY's JSON ([`PeerInfo::from_json`] reads it).
    Data(Bytes),
    /// `E_<CODE> <text>`, after which the lookup closes the connection.
    Error(String),
}

/// A reply that cannot be read: the stream is broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// The size field is above the caller's bound.
    TooBig(u32),
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyError::TooBig(size) => write!(f, "lookup reply of {size} bytes is too big"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// Cuts one reply off the front of `buf`. `Ok(None)` means more bytes are needed and nothing was
/// consumed. `max_size` bounds the size field.
pub fn decode_reply(buf: &mut BytesMut, max_size: u32) -> Result<Option<LookupReply>, ReplyError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size > max_size {
        return Err(ReplyError::TooBig(size));
    }
    if buf.len() < 4 + size as usize {
        return Ok(None);
    }
    buf.advance(4);
    let data = buf.split_to(size as usize).freeze();
    Ok(Some(if &data[..] == crate::OK {
        LookupReply::Ok
    } else if data.starts_with(b"E_") {
        LookupReply::Error(String::from_utf8_lossy(&data).into_owned())
    } else {
        LookupReply::Data(data)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> PeerInfo {
        PeerInfo {
            broadcast_address: "10.0.0.1".into(),
            hostname: "host".into(),
            http_port: 4151,
            tcp_port: 4150,
            version: "1.3.0".into(),
        }
    }

    fn decode_all(bytes: &[u8], identified: bool) -> Result<Option<LookupCommand>, ProtocolError> {
        let mut buf = BytesMut::from(bytes);
        decode_lookup_command(&mut buf, identified)
    }

    fn err_text(bytes: &[u8], identified: bool) -> String {
        match decode_all(bytes, identified) {
            Err(e) => {
                assert!(e.fatal);
                e.frame_text()
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn encoded_commands_decode_back() {
        let commands = [
            LookupCommand::Identify(peer()),
            LookupCommand::Register {
                topic: "t".into(),
                channel: None,
            },
            LookupCommand::Register {
                topic: "t".into(),
                channel: Some("c#ephemeral".into()),
            },
            LookupCommand::Unregister {
                topic: "t".into(),
                channel: Some("c".into()),
            },
            LookupCommand::Unregister {
                topic: "t".into(),
                channel: None,
            },
            LookupCommand::Ping,
            LookupCommand::Controller(Bytes::from_static(br#"{"CreateTopic":{}}"#)),
        ];
        let mut buf = BytesMut::new();
        for c in &commands {
            c.encode(&mut buf);
        }
        let mut identified = false;
        for c in &commands {
            let got = decode_lookup_command(&mut buf, identified).unwrap();
            assert_eq!(got.as_ref(), Some(c));
            identified = true;
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn identify_bytes_are_line_then_sized_json() {
        let mut buf = BytesMut::new();
        LookupCommand::Identify(peer()).encode(&mut buf);
        let json = br#"{"broadcast_address":"10.0.0.1","hostname":"host","http_port":4151,"tcp_port":4150,"version":"1.3.0"}"#;
        let mut want = b"IDENTIFY\n".to_vec();
        want.extend_from_slice(&(json.len() as u32).to_be_bytes());
        want.extend_from_slice(json);
        assert_eq!(&buf[..], &want[..]);
    }

    #[test]
    fn partial_input_consumes_nothing() {
        let mut full = BytesMut::new();
        LookupCommand::Identify(peer()).encode(&mut full);
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(
                decode_lookup_command(&mut buf, false),
                Ok(None),
                "cut {cut}"
            );
            assert_eq!(buf.len(), cut);
        }
        let mut buf = BytesMut::from(&b"REGISTER top"[..]);
        assert_eq!(decode_lookup_command(&mut buf, true), Ok(None));
    }

    #[test]
    fn lines_are_trimmed_like_nsqlookupd() {
        assert_eq!(
            decode_all(b"  PING \r\n", false),
            Ok(Some(LookupCommand::Ping))
        );
        assert_eq!(
            decode_all(b"REGISTER t c extra\n", true),
            Ok(Some(LookupCommand::Register {
                topic: "t".into(),
                channel: Some("c".into())
            }))
        );
    }

    #[test]
    fn errors_carry_nsqlookupd_texts() {
        assert_eq!(err_text(b"\n", false), "E_INVALID invalid command ");
        assert_eq!(
            err_text(b"NOPE x\n", true),
            "E_INVALID invalid command NOPE"
        );
        assert_eq!(
            err_text(b"REGISTER t\n", false),
            "E_INVALID client must IDENTIFY"
        );
        assert_eq!(
            err_text(b"UNREGISTER t\n", false),
            "E_INVALID client must IDENTIFY"
        );
        assert_eq!(
            err_text(b"REGISTER\n", true),
            "E_INVALID REGISTER insufficient number of params"
        );
        assert_eq!(
            err_text(b"UNREGISTER\n", true),
            "E_INVALID UNREGISTER insufficient number of params"
        );
        assert_eq!(
            err_text(b"REGISTER bad!t\n", true),
            "E_BAD_TOPIC REGISTER topic name 'bad!t' is not valid"
        );
        assert_eq!(
            err_text(b"UNREGISTER t bad!c\n", true),
            "E_BAD_CHANNEL UNREGISTER channel name 'bad!c' is not valid"
        );
        assert_eq!(
            err_text(b"IDENTIFY\n\x00\x00\x00\x02{}", true),
            "E_INVALID cannot IDENTIFY again"
        );
    }

    #[test]
    fn identify_body_errors() {
        let with_body = |body: &[u8]| {
            let mut v = b"IDENTIFY\n".to_vec();
            v.extend_from_slice(&(body.len() as u32).to_be_bytes());
            v.extend_from_slice(body);
            v
        };
        assert_eq!(
            err_text(&with_body(b"not json"), false),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            err_text(&with_body(br#"{"tcp_port":"4150"}"#), false),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            err_text(&with_body(br#"{"tcp_port":70000}"#), false),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            err_text(
                &with_body(br#"{"broadcast_address":"a","tcp_port":1}"#),
                false
            ),
            "E_BAD_BODY IDENTIFY missing fields"
        );
        assert_eq!(
            err_text(b"IDENTIFY\n\xff\xff\xff\xff", false),
            "E_BAD_BODY IDENTIFY invalid body size -1"
        );
        assert_eq!(
            err_text(b"IDENTIFY\n\x10\x00\x00\x00", false),
            "E_BAD_BODY IDENTIFY invalid body size 268435456"
        );
    }

    #[test]
    fn identify_json_is_read_like_go() {
        let body = br#"{"Broadcast_Address":"h","TCP_PORT":1,"http_port":2,"version":"v","hostname":null,"extra":[1]}"#;
        let info = PeerInfo::parse_identify(body).unwrap();
        assert_eq!(info.broadcast_address, "h");
        assert_eq!(info.tcp_port, 1);
        assert_eq!(info.http_port, 2);
        assert_eq!(info.hostname, "");
    }

    #[test]
    fn controller_needs_no_identify_and_bounds_its_body() {
        assert_eq!(
            decode_all(b"CONTROLLER\n\x00\x00\x00\x02{}PING\n", false),
            Ok(Some(LookupCommand::Controller(Bytes::from_static(b"{}"))))
        );
        assert_eq!(
            decode_all(b"CONTROLLER\n\x00\x00\x00\x03{}", false),
            Ok(None)
        );
        assert_eq!(
            err_text(b"CONTROLLER\n\x00\x40\x00\x01", false),
            "E_BAD_BODY CONTROLLER invalid body size 4194305"
        );
        assert_eq!(
            err_text(b"CONTROLLER\n\xff\xff\xff\xff", true),
            "E_BAD_BODY CONTROLLER invalid body size -1"
        );
    }

    #[test]
    fn overlong_line_is_refused() {
        let long = vec![b'A'; MAX_LINE_LEN + 1];
        assert_eq!(err_text(&long, false), "E_INVALID command line too long");
    }

    #[test]
    fn replies_round_trip() {
        let mut buf = BytesMut::new();
        write_reply(&mut buf, b"OK");
        write_reply(&mut buf, b"{}");
        write_error_reply(
            &mut buf,
            &ProtocolError::fatal(ErrorCode::Invalid, "client must IDENTIFY"),
        );
        assert_eq!(&buf[..6], b"\x00\x00\x00\x02OK");
        assert_eq!(decode_reply(&mut buf, 1024), Ok(Some(LookupReply::Ok)));
        assert_eq!(
            decode_reply(&mut buf, 1024),
            Ok(Some(LookupReply::Data(Bytes::from_static(b"{}"))))
        );
        assert_eq!(
            decode_reply(&mut buf, 1024),
            Ok(Some(LookupReply::Error(
                "E_INVALID client must IDENTIFY".into()
            )))
        );
        assert_eq!(decode_reply(&mut buf, 1024), Ok(None));
        let mut big = BytesMut::from(&b"\x00\x01\x00\x00"[..]);
        assert_eq!(decode_reply(&mut big, 1024), Err(ReplyError::TooBig(65536)));
    }
}

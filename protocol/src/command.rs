//! Client commands of protocol V2: decoding them from a byte stream the way nsqd does, and
//! encoding them for clients.
//!
//! A command is a line of words separated by single spaces and ended by `\n` (a trailing `\r`
//! is stripped). IDENTIFY, AUTH, PUB, MPUB and DPUB are followed by `[u32 BE size][bytes]`.
//!
//! [`decode_command`] checks in the order nsqd checks (connection state, then parameters, then
//! body size, then body), so that every error carries nsqd's code and text; size limits are
//! enforced as soon as the size is known, before the body arrives. All errors found while
//! decoding are fatal: the stream cannot be resynchronised. Errors that depend on broker state
//! (FIN of an unknown ID, ...) are the broker's to raise.
//!
//! One place where we are stricter than nsqd: an MPUB body must hold exactly the messages it
//! announces (nsqd would read trailing bytes as the next command). The MPUB body's own checks
//! and splitting are in `mpub`.

use crate::error::{ErrorCode, ProtocolError};
use crate::message::{MessageId, MESSAGE_ID_LEN};
use crate::names::{is_valid_channel_name, is_valid_topic_name};
use bytes::{Buf, BufMut, Bytes, BytesMut};

mod mpub;

pub use mpub::split_mpub_body;
use mpub::{check_mpub_count, check_mpub_sizes};

/// Longest command line accepted (nsqd's read buffer size).
pub const MAX_LINE_LEN: usize = 16 * 1024;

/// Where a connection is in its life; decides which commands are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnPhase {
    /// Before SUB: IDENTIFY, AUTH, SUB and the publishing commands.
    #[default]
    Init,
    /// After SUB: RDY, FIN, REQ, TOUCH, CLS and the publishing commands.
    Subscribed,
    /// After CLS: FIN, REQ, TOUCH still count; RDY is ignored.
    Closing,
}

/// The broker's limits that decoding enforces, with nsqd's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_msg_size: u64,
    pub max_body_size: u64,
    pub max_rdy_count: u64,
    pub max_req_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_msg_size: 1024 * 1024,
            max_body_size: 5 * 1024 * 1024,
            max_rdy_count: 2500,
            max_req_timeout_ms: 60 * 60 * 1000,
        }
    }
}

/// What the decoder needs to know about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeContext {
    pub phase: ConnPhase,
    /// False once IDENTIFY set `heartbeat_interval` to -1; SUB then fails as in nsqd.
    pub heartbeats_enabled: bool,
    pub limits: Limits,
}

impl Default for DecodeContext {
    fn default() -> Self {
        DecodeContext {
            phase: ConnPhase::Init,
            heartbeats_enabled: true,
            limits: Limits::default(),
        }
    }
}

/// One client command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// IDENTIFY with its JSON body (see [`crate::identify`]).
    Identify(Bytes),
    /// AUTH with its secret.
    Auth(Bytes),
    Sub {
        topic: String,
        channel: String,
    },
    Pub {
        topic: String,
        body: Bytes,
    },
    Mpub {
        topic: String,
        bodies: Vec<Bytes>,
    },
    Dpub {
        topic: String,
        defer_ms: u64,
        body: Bytes,
    },
    Rdy(u64),
    Fin(MessageId),
    /// REQ with the delay as sent; the broker clamps it to 0..max-req-timeout.
    Req {
        id: MessageId,
        delay_ms: u64,
    },
    Touch(MessageId),
    Cls,
    Nop,
}

impl Command {
    /// The command's name as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Identify(_) => "IDENTIFY",
            Command::Auth(_) => "AUTH",
            Command::Sub { .. } => "SUB",
            Command::Pub { .. } => "PUB",
            Command::Mpub { .. } => "MPUB",
            Command::Dpub { .. } => "DPUB",
            Command::Rdy(_) => "RDY",
            Command::Fin(_) => "FIN",
            Command::Req { .. } => "REQ",
            Command::Touch(_) => "TOUCH",
            Command::Cls => "CLS",
            Command::Nop => "NOP",
        }
    }

    /// Appends the command's bytes to `out` (what a client sends).
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Command::Identify(body) => line_with_body(out, &[b"IDENTIFY"], body),
            Command::Auth(body) => line_with_body(out, &[b"AUTH"], body),
            Command::Sub { topic, channel } => {
                line(out, &[b"SUB", topic.as_bytes(), channel.as_bytes()])
            }
            Command::Pub { topic, body } => line_with_body(out, &[b"PUB", topic.as_bytes()], body),
            Command::Mpub { topic, bodies } => {
                line(out, &[b"MPUB", topic.as_bytes()]);
                let total: usize = 4 + bodies.iter().map(|b| 4 + b.len()).sum::<usize>();
                out.reserve(4 + total);
                out.put_u32(total as u32);
                out.put_u32(bodies.len() as u32);
                for b in bodies {
                    out.put_u32(b.len() as u32);
                    out.put_slice(b);
                }
            }
            Command::Dpub {
                topic,
                defer_ms,
                body,
            } => line_with_body(
                out,
                &[b"DPUB", topic.as_bytes(), defer_ms.to_string().as_bytes()],
                body,
            ),
            Command::Rdy(n) => line(out, &[b"RDY", n.to_string().as_bytes()]),
            // IDs are opaque bytes: written as received, never through text.
            Command::Fin(id) => line(out, &[b"FIN", &id.0]),
            Command::Req { id, delay_ms } => {
                line(out, &[b"REQ", &id.0, delay_ms.to_string().as_bytes()])
            }
            Command::Touch(id) => line(out, &[b"TOUCH", &id.0]),
            Command::Cls => line(out, &[b"CLS"]),
            Command::Nop => line(out, &[b"NOP"]),
        }
    }
}

fn line(out: &mut BytesMut, words: &[&[u8]]) {
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.put_u8(b' ');
        }
        out.put_slice(w);
    }
    out.put_u8(b'\n');
}

fn line_with_body(out: &mut BytesMut, words: &[&[u8]], body: &[u8]) {
    line(out, words);
    out.reserve(4 + body.len());
    out.put_u32(body.len() as u32);
    out.put_slice(body);
}

/// Parameters of one command line kept on the stack (the most any command has, with room).
const STACK_PARAMS: usize = 8;

/// Cuts one command off the front of `buf`.
///
/// `Ok(None)`: more bytes are needed; nothing was consumed. `Ok(Some(cmd))`: the command's bytes
/// were consumed and bodies are shared slices of `buf`'s allocation. `Err(e)`: a fatal protocol
/// error with nsqd's code and text; the connection should send it and close.
pub fn decode_command(
    buf: &mut BytesMut,
    ctx: &DecodeContext,
) -> Result<Option<Command>, ProtocolError> {
    decode_command_resuming(buf, ctx, &mut DecodeProgress::default())
}

/// How far [`decode_command_resuming`] has checked the incomplete command at the front of a
/// connection's buffer, so that the next call goes on from there instead of checking every
/// message size of a large MPUB again as each piece of it arrives. Belongs to one buffer;
/// reset whenever a command is cut off it or an error is returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeProgress {
    /// Offset in the buffer of the next MPUB message size to check (0: none checked yet).
    mpub_next: usize,
    /// Index of the message whose size is at `mpub_next`.
    mpub_index: i32,
}

/// [`decode_command`] for a connection that keeps `progress` with its buffer: every MPUB
/// message size is checked as soon as it arrives, each one once.
pub fn decode_command_resuming(
    buf: &mut BytesMut,
    ctx: &DecodeContext,
    progress: &mut DecodeProgress,
) -> Result<Option<Command>, ProtocolError> {
    let decoded = if let Some(id) = plain_fin(buf) {
        // The command a consumer sends most, in the form every client sends it.
        require_subscribed(ctx.phase, "FIN").map(|()| {
            buf.advance(FIN_LINE_LEN);
            Some(Command::Fin(id))
        })
    } else {
        decode_any_command(buf, ctx, progress)
    };
    if !matches!(decoded, Ok(None)) {
        *progress = DecodeProgress::default();
    }
    decoded
}

/// [`decode_command`] without the FIN shortcut.
fn decode_any_command(
    buf: &mut BytesMut,
    ctx: &DecodeContext,
    progress: &mut DecodeProgress,
) -> Result<Option<Command>, ProtocolError> {
    // The same limit whether the line arrived whole or in pieces.
    let window = &buf[..buf.len().min(MAX_LINE_LEN + 1)];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE_LEN {
            return Err(invalid(format!(
                "command line too long (more than {MAX_LINE_LEN} bytes)"
            )));
        }
        return Ok(None);
    };
    let mut line_end = nl;
    if line_end > 0 && buf[line_end - 1] == b'\r' {
        line_end -= 1;
    }
    let parsed = {
        let line = &buf[..line_end];
        // Every command has a few parameters: they stay on the stack (a Vec here was a malloc
        // and free per FIN); a longer line is split again onto the heap.
        let mut on_stack: [&[u8]; STACK_PARAMS] = [&[]; STACK_PARAMS];
        let mut n = 0;
        let mut more = false;
        for p in line.split(|&b| b == b' ') {
            if n == STACK_PARAMS {
                more = true;
                break;
            }
            on_stack[n] = p;
            n += 1;
        }
        let on_heap: Vec<&[u8]>;
        let params: &[&[u8]] = if more {
            on_heap = line.split(|&b| b == b' ').collect();
            &on_heap
        } else {
            &on_stack[..n]
        };
        parse_line(params, buf, nl + 1, ctx, progress)?
    };
    match parsed {
        Parsed::NeedMore => Ok(None),
        Parsed::Done(cmd, consumed) => {
            buf.advance(consumed);
            Ok(Some(cmd))
        }
        Parsed::WithBody(kind, body_start, body_len) => {
            buf.advance(body_start);
            let body = buf.split_to(body_len).freeze();
            finish_body_command(kind, body, ctx).map(Some)
        }
    }
}

/// `FIN <16-byte ID>\n`.
const FIN_LINE_LEN: usize = 4 + MESSAGE_ID_LEN + 1;

/// The ID of a `FIN <id>\n` line at the start of `buf`, if it is one that the general parser
/// would read the same way: the ID holds no space, newline or final carriage return (any of
/// which makes the general parser see another line or another parameter).
#[inline]
fn plain_fin(buf: &[u8]) -> Option<MessageId> {
    let line = buf.get(..FIN_LINE_LEN)?;
    if &line[..4] != b"FIN " || line[FIN_LINE_LEN - 1] != b'\n' {
        return None;
    }
    let id = &line[4..4 + MESSAGE_ID_LEN];
    if id.iter().any(|&b| b == b' ' || b == b'\n') || id[MESSAGE_ID_LEN - 1] == b'\r' {
        return None;
    }
    MessageId::from_slice(id)
}

/// What a command line says, before any body is cut out.
enum Parsed {
    NeedMore,
    /// A command and the bytes it took.
    Done(Command, usize),
    /// A command whose body is complete in the buffer at `[start, start + len)`.
    WithBody(BodyKind, usize, usize),
}

enum BodyKind {
    Identify,
    Auth,
    Pub(String),
    Mpub(String),
    Dpub(String, u64),
}

fn parse_line(
    params: &[&[u8]],
    buf: &[u8],
    after_line: usize,
    ctx: &DecodeContext,
    progress: &mut DecodeProgress,
) -> Result<Parsed, ProtocolError> {
    let limits = &ctx.limits;
    let phase = ctx.phase;
    let consumed_line = |cmd| Ok(Parsed::Done(cmd, after_line));
    match params[0] {
        b"IDENTIFY" => {
            if phase != ConnPhase::Init {
                return Err(invalid("cannot IDENTIFY in current state"));
            }
            body_after(buf, after_line, |size| {
                if size as i64 > limits.max_body_size as i64 {
                    return Err(bad_body(format!(
                        "IDENTIFY body too big {size} > {}",
                        limits.max_body_size
                    )));
                }
                if size <= 0 {
                    return Err(bad_body(format!("IDENTIFY invalid body size {size}")));
                }
                Ok(BodyKind::Identify)
            })
        }
        b"AUTH" => {
            if phase != ConnPhase::Init {
                return Err(invalid("cannot AUTH in current state"));
            }
            if params.len() != 1 {
                return Err(invalid("AUTH invalid number of parameters"));
            }
            body_after(buf, after_line, |size| {
                if size as i64 > limits.max_body_size as i64 {
                    return Err(bad_body(format!(
                        "AUTH body too big {size} > {}",
                        limits.max_body_size
                    )));
                }
                if size <= 0 {
                    return Err(bad_body(format!("AUTH invalid body size {size}")));
                }
                Ok(BodyKind::Auth)
            })
        }
        b"SUB" => {
            if phase != ConnPhase::Init {
                return Err(invalid("cannot SUB in current state"));
            }
            if !ctx.heartbeats_enabled {
                return Err(invalid("cannot SUB with heartbeats disabled"));
            }
            if params.len() < 3 {
                return Err(invalid("SUB insufficient number of parameters"));
            }
            let topic = topic_param(params[1], "SUB topic name")?;
            let channel = name_param(params[2]).ok_or_else(|| {
                ProtocolError::fatal(
                    ErrorCode::BadChannel,
                    format!("SUB channel name {} is not valid", go_quote(params[2])),
                )
            })?;
            if !is_valid_channel_name(&channel) {
                return Err(ProtocolError::fatal(
                    ErrorCode::BadChannel,
                    format!("SUB channel name {} is not valid", go_quote(params[2])),
                ));
            }
            consumed_line(Command::Sub { topic, channel })
        }
        b"PUB" => {
            if params.len() < 2 {
                return Err(invalid("PUB insufficient number of parameters"));
            }
            let topic = topic_param(params[1], "PUB topic name")?;
            body_after(buf, after_line, |size| {
                if size <= 0 {
                    return Err(bad_message(format!("PUB invalid message body size {size}")));
                }
                if size as u64 > limits.max_msg_size {
                    return Err(bad_message(format!(
                        "PUB message too big {size} > {}",
                        limits.max_msg_size
                    )));
                }
                Ok(BodyKind::Pub(topic))
            })
        }
        b"MPUB" => {
            if params.len() < 2 {
                return Err(invalid("MPUB insufficient number of parameters"));
            }
            // nsqd really does repeat the code inside the text here.
            let topic = topic_param(params[1], "E_BAD_TOPIC MPUB topic name")?;
            let parsed = body_after(buf, after_line, |size| {
                if size <= 0 {
                    return Err(bad_body(format!("MPUB invalid body size {size}")));
                }
                if size as u64 > limits.max_body_size {
                    return Err(bad_body(format!(
                        "MPUB body too big {size} > {}",
                        limits.max_body_size
                    )));
                }
                Ok(BodyKind::Mpub(topic))
            })?;
            if let Parsed::NeedMore = parsed {
                // Report a bad message count, and each bad message size, as soon as it
                // arrives, as nsqd does (it reads them one by one).
                if buf.len() >= after_line + 8 {
                    let count = read_i32(&buf[after_line + 4..]);
                    check_mpub_count(count, limits)?;
                    let body_len = read_i32(&buf[after_line..]) as usize;
                    let body = after_line + 4..(after_line + 4 + body_len).min(buf.len());
                    check_mpub_sizes(buf, body, count, limits, progress)?;
                }
            }
            Ok(parsed)
        }
        b"DPUB" => {
            if params.len() < 3 {
                return Err(invalid("DPUB insufficient number of parameters"));
            }
            let topic = topic_param(params[1], "DPUB topic name")?;
            let defer_ms = parse_base10(params[2]).ok_or_else(|| {
                invalid(format!(
                    "DPUB could not parse timeout {}",
                    String::from_utf8_lossy(params[2])
                ))
            })?;
            if defer_ms > limits.max_req_timeout_ms {
                return Err(invalid(format!(
                    "DPUB timeout {defer_ms} out of range 0-{}",
                    limits.max_req_timeout_ms
                )));
            }
            body_after(buf, after_line, |size| {
                if size <= 0 {
                    return Err(bad_message(format!(
                        "DPUB invalid message body size {size}"
                    )));
                }
                if size as u64 > limits.max_msg_size {
                    return Err(bad_message(format!(
                        "DPUB message too big {size} > {}",
                        limits.max_msg_size
                    )));
                }
                Ok(BodyKind::Dpub(topic, defer_ms))
            })
        }
        b"RDY" => {
            if phase == ConnPhase::Closing {
                // nsqd ignores RDY on a closing connection, whatever it says.
                return consumed_line(Command::Nop);
            }
            if phase != ConnPhase::Subscribed {
                return Err(invalid("cannot RDY in current state"));
            }
            let count = match params.get(1) {
                None => 1,
                Some(p) => parse_base10(p).ok_or_else(|| {
                    invalid(format!(
                        "RDY could not parse count {}",
                        String::from_utf8_lossy(p)
                    ))
                })?,
            };
            if count > limits.max_rdy_count {
                return Err(invalid(format!(
                    "RDY count {count} out of range 0-{}",
                    limits.max_rdy_count
                )));
            }
            consumed_line(Command::Rdy(count))
        }
        b"FIN" => {
            require_subscribed(phase, "FIN")?;
            if params.len() < 2 {
                return Err(invalid("FIN insufficient number of params"));
            }
            consumed_line(Command::Fin(message_id(params[1])?))
        }
        b"REQ" => {
            require_subscribed(phase, "REQ")?;
            if params.len() < 3 {
                return Err(invalid("REQ insufficient number of params"));
            }
            let id = message_id(params[1])?;
            let delay_ms = parse_base10(params[2]).ok_or_else(|| {
                invalid(format!(
                    "REQ could not parse timeout {}",
                    String::from_utf8_lossy(params[2])
                ))
            })?;
            consumed_line(Command::Req { id, delay_ms })
        }
        b"TOUCH" => {
            require_subscribed(phase, "TOUCH")?;
            if params.len() < 2 {
                return Err(invalid("TOUCH insufficient number of params"));
            }
            consumed_line(Command::Touch(message_id(params[1])?))
        }
        b"CLS" => {
            if phase != ConnPhase::Subscribed {
                return Err(invalid("cannot CLS in current state"));
            }
            consumed_line(Command::Cls)
        }
        b"NOP" => consumed_line(Command::Nop),
        other => Err(invalid(format!(
            "invalid command {}",
            String::from_utf8_lossy(other)
        ))),
    }
}

/// Reads the `[u32 size]` after the line, lets `check` judge it, and reports whether the whole
/// body is in the buffer.
fn body_after(
    buf: &[u8],
    start: usize,
    check: impl FnOnce(i32) -> Result<BodyKind, ProtocolError>,
) -> Result<Parsed, ProtocolError> {
    if buf.len() < start + 4 {
        return Ok(Parsed::NeedMore);
    }
    let size = read_i32(&buf[start..]);
    let kind = check(size)?;
    let len = size as usize;
    if buf.len() < start + 4 + len {
        return Ok(Parsed::NeedMore);
    }
    Ok(Parsed::WithBody(kind, start + 4, len))
}

fn finish_body_command(
    kind: BodyKind,
    body: Bytes,
    ctx: &DecodeContext,
) -> Result<Command, ProtocolError> {
    Ok(match kind {
        BodyKind::Identify => Command::Identify(body),
        BodyKind::Auth => Command::Auth(body),
        BodyKind::Pub(topic) => Command::Pub { topic, body },
        BodyKind::Dpub(topic, defer_ms) => Command::Dpub {
            topic,
            defer_ms,
            body,
        },
        BodyKind::Mpub(topic) => Command::Mpub {
            topic,
            bodies: split_mpub_body(body, &ctx.limits)?,
        },
    })
}

fn require_subscribed(phase: ConnPhase, cmd: &str) -> Result<(), ProtocolError> {
    match phase {
        ConnPhase::Subscribed | ConnPhase::Closing => Ok(()),
        ConnPhase::Init => Err(invalid(format!("cannot {cmd} in current state"))),
    }
}

fn message_id(p: &[u8]) -> Result<MessageId, ProtocolError> {
    MessageId::from_slice(p).ok_or_else(|| invalid("invalid message ID"))
}

fn topic_param(p: &[u8], what: &str) -> Result<String, ProtocolError> {
    match name_param(p) {
        Some(name) if is_valid_topic_name(&name) => Ok(name),
        _ => Err(ProtocolError::fatal(
            ErrorCode::BadTopic,
            format!("{what} {} is not valid", go_quote(p)),
        )),
    }
}

fn name_param(p: &[u8]) -> Option<String> {
    std::str::from_utf8(p).ok().map(str::to_owned)
}

/// nsqd's `ByteToBase10`: digits only, no sign. An empty parameter is 0, as in nsqd.
fn parse_base10(p: &[u8]) -> Option<u64> {
    p.iter().try_fold(0u64, |n, &c| {
        if c.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(c - b'0'))
        } else {
            None
        }
    })
}

fn read_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Quotes bytes the way Go's `%q` does for the names that reach error texts.
pub fn go_quote(p: &[u8]) -> String {
    let s = String::from_utf8_lossy(p);
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn invalid(desc: impl Into<String>) -> ProtocolError {
    ProtocolError::fatal(ErrorCode::Invalid, desc)
}

fn bad_body(desc: impl Into<String>) -> ProtocolError {
    ProtocolError::fatal(ErrorCode::BadBody, desc)
}

fn bad_message(desc: impl Into<String>) -> ProtocolError {
    ProtocolError::fatal(ErrorCode::BadMessage, desc)
}

#[cfg(test)]
mod tests;

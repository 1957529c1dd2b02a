//! The replication connection's frame format and its incremental decoder.
//!
//! A frame is a big-endian `u32` length `L` followed by `L` bytes: the protocol version (one
//! byte), the frame kind (one byte) and the kind's body. `L` never exceeds the connection's
//! maximum frame size; the decoder refuses a larger length as soon as the four length bytes
//! have arrived, before buffering anything of it.
//!
//! Invariants:
//! - the decoder holds at most one frame's bytes (`4 + max_frame`), whatever the chunking of
//!   its input;
//! - every count and length read from a frame is checked against the bytes left in that frame
//!   (each element has a minimum encoded size) before anything is allocated for it, so decoding
//!   a frame allocates at most a small multiple of its size;
//! - a frame decodes to exactly one [`Frame`] and every byte of it is used: trailing bytes,
//!   unknown kinds, flags or versions are errors naming what was wrong;
//! - a `Forwards` frame's channel names are never ephemeral, its dead-letter topic names are
//!   valid topic names, a position's owed seqs are
//!   strictly increasing below its cursor and at most [`MAX_OWED`], an answer's text is UTF-8
//!   of at most [`MAX_ANSWER_TEXT`] bytes: checked when encoding and when decoding;
//! - `encode` then `Decoder::feed` gives back the same frame, in any chunking.

use bytes::Bytes;

use crate::ids::{BrokerId, Epoch, Seq};
use crate::replica::{Batch, Msg, Record};

mod dead_letters;
pub use dead_letters::{
    digest, DeadLetter, DeadLetterOp, DeadOrigin, Id, MAX_DEAD_LETTERS, MAX_PREVIEW,
};

/// The protocol version this build speaks (the byte every frame starts with).
pub const PROTOCOL_VERSION: u8 = 1;
/// The longest topic name (NSQ's limit).
pub const MAX_TOPIC_NAME: usize = 64;
/// The longest cluster id.
pub const MAX_CLUSTER_ID: usize = 64;
/// The longest channel name (NSQ's limit).
pub const MAX_CHANNEL_NAME: usize = 64;
/// The longest error text a forwarded publish's answer carries (a longer one is cut by
/// [`crate::wire::Link::send_forward`]).
pub const MAX_ANSWER_TEXT: usize = 1024;
/// The most owed seqs one channel position carries (8 bytes each: half a MiB).
pub const MAX_OWED: usize = 65_536;
/// The bytes before a frame's body: its length, version and kind.
pub const FRAME_OVERHEAD: usize = 4 + 2;

const KIND_HELLO: u8 = 1;
const KIND_MESSAGES: u8 = 2;
const KIND_TICK: u8 = 3;
const KIND_FORWARDS: u8 = 4;

const MSG_APPEND: u8 = 1;
const MSG_ACK: u8 = 2;
const MSG_EPOCH_QUERY: u8 = 3;
const MSG_EPOCH_ANSWER: u8 = 4;
const MSG_START_AT: u8 = 5;

const FWD_PUBLISH: u8 = 1;
const FWD_ANSWER: u8 = 2;
const FWD_CHANNEL: u8 = 3;
const FWD_TOPIC: u8 = 4;
const FWD_DEAD_LETTERS: u8 = 5;

const OP_CREATED: u8 = 1;
const OP_DELETED: u8 = 2;
const OP_PAUSED: u8 = 3;
const OP_POSITION: u8 = 4;
const OP_REWOUND: u8 = 5;
const OP_CONFIG: u8 = 6;

const TOPIC_PAUSED: u8 = 1;
const TOPIC_RETENTION_TIME: u8 = 2;
const TOPIC_RETENTION_BYTES: u8 = 4;
const CHANNEL_MAX_ATTEMPTS: u8 = 1;
const CHANNEL_DEAD_LETTER_TOPIC: u8 = 2;

const ACK_CLEAN: u8 = 1;
const ACK_RESEND: u8 = 2;

/// The least a topic name takes (its length byte and one byte).
const MIN_TOPIC: usize = 2;
/// The least a topic's message takes: a topic and the shortest message (an epoch query).
const MIN_TOPIC_MSG: usize = MIN_TOPIC + 1 + 16;
/// A record's fixed part: seq, crc, length.
const RECORD_HEAD: usize = 8 + 4 + 4;
/// The least a forward takes: a dead-letter operation without arguments (kind, a topic, op).
const MIN_FORWARD: usize = 1 + MIN_TOPIC + 1;

/// The handshake each side sends first on a new connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The cluster both brokers must belong to.
    pub cluster_id: String,
    /// The sending broker.
    pub broker: BrokerId,
    /// The sending broker process's incarnation (grows with every start).
    pub incarnation: u64,
}

/// One topic's replica message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMsg {
    /// The topic's name.
    pub topic: String,
    /// The message between its replicas.
    pub msg: Msg,
}

/// What travels beside the replicas' messages, ordered with them on the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// Follower -> leader: store these as the topic's leader; answered by `Answer` with `id`.
    Publish {
        /// Chosen by the follower to match the answer; unique among its publishes in flight.
        id: u64,
        /// The topic published to.
        topic: String,
        /// The deferral of a DPUB (0: none).
        defer_ms: u64,
        /// The messages' bodies, one for a PUB or DPUB, several for an MPUB.
        bodies: Vec<Bytes>,
        /// For dead letters, where each body came from (one per body); empty otherwise.
        origins: Vec<DeadOrigin>,
    },
    /// Leader -> follower: the outcome of the publish `id` (Err: the error text, the follower
    /// answers its client E_PUB_FAILED with it).
    Answer {
        /// The publish's id.
        id: u64,
        /// Stored and acknowledged, or why not.
        result: Result<(), String>,
    },
    /// Leader -> followers: the topic's settings that carry over (sent when they change, and
    /// again every second); follower -> leader: an operator changed them there.
    Topic {
        /// The topic.
        topic: String,
        /// Its settings.
        config: TopicConfig,
    },
    /// Leader -> followers: a channel operation, applied in order; follower -> leader: an
    /// operator created, deleted, paused or configured the channel there.
    Channel {
        /// The channel's topic.
        topic: String,
        /// The channel (never an ephemeral one: those are not replicated).
        channel: String,
        /// What happened to it.
        op: ChannelOp,
    },
    /// Between a dead-letter topic's replicas: its origin records.
    DeadLetters {
        /// The dead-letter topic.
        topic: String,
        /// What the sender tells.
        op: DeadLetterOp,
    },
}

/// A channel operation the leader's channel went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelOp {
    /// The channel was created.
    Created,
    /// The channel was deleted.
    Deleted,
    /// The channel was paused (true) or unpaused (false).
    Paused(bool),
    /// Where the channel stands: it takes `cursor` next from the log, and of what lies below
    /// it still owes only `owed` (in flight, requeued, deferred); everything else below the
    /// cursor is finished.
    Position {
        /// The next seq the channel takes from the log.
        cursor: u64,
        /// The seqs below `cursor` it still owes, strictly increasing, at most [`MAX_OWED`].
        owed: Vec<u64>,
    },
    /// The channel was rewound: it delivers again from `to`.
    Rewound {
        /// The first seq delivered again.
        to: u64,
    },
    /// The channel's own dead-letter settings.
    Config {
        /// Its own max attempts (`None`: the topic's, from the flag).
        max_attempts: Option<u16>,
        /// Where it sends what runs out of attempts (`None`: nowhere).
        dead_letter_topic: Option<String>,
    },
}

/// A topic's settings that carry over from its leader to its followers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfig {
    /// Paused: its channels deliver nothing.
    pub paused: bool,
    /// Its own retention by age, in nanoseconds (`None`: the flag's).
    pub retention_time_ns: Option<u64>,
    /// Its own retention by size, in bytes (`None`: the flag's).
    pub retention_bytes: Option<u64>,
}

/// A frame of the replication connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The handshake (the version is the frame's own).
    Hello(Hello),
    /// Replica messages of any topics, in the order they were sent.
    Messages(Vec<TopicMsg>),
    /// The pair's heartbeat: every topic whose heartbeat or ack the receiver holds as a
    /// reference is unchanged, except those named here, which the receiver forgets
    /// (`link` says what the receiver does with it).
    Tick {
        /// Numbers the sender's ticks on this connection.
        seq: u64,
        /// Topics whose heartbeat reference is dropped.
        forget_heartbeats: Vec<String>,
        /// Topics whose ack reference is dropped.
        forget_acks: Vec<String>,
    },
    /// Forwarded publishes, their answers and channel operations, in the order they were sent.
    Forwards(Vec<Forward>),
}

/// What was wrong with the bytes received or a frame to send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A frame's length is over the connection's maximum.
    #[error("frame of {len} bytes is over the maximum of {max}")]
    FrameTooLarge {
        /// The length the frame claims (or would have).
        len: u64,
        /// The maximum.
        max: usize,
    },
    /// A frame too short for its version and kind.
    #[error("frame of {0} bytes is too short for a version and a kind")]
    FrameTooShort(u32),
    /// A protocol version this build does not speak.
    #[error("protocol version {0} is not supported (this build speaks {PROTOCOL_VERSION})")]
    Version(u8),
    /// A frame kind this build does not know.
    #[error("unknown frame kind {0}")]
    FrameKind(u8),
    /// A message kind this build does not know.
    #[error("unknown message kind {0}")]
    MessageKind(u8),
    /// The frame ended inside a field.
    #[error("frame ends inside {0}")]
    Truncated(&'static str),
    /// A count or length larger than what the rest of the frame could hold.
    #[error("{what} of {count} is more than the {room} bytes left in the frame can hold")]
    CountTooLarge {
        /// The field.
        what: &'static str,
        /// The count or length read.
        count: u64,
        /// The bytes left in the frame.
        room: usize,
    },
    /// A topic name that is empty, too long or has a character NSQ does not allow.
    #[error("invalid topic name")]
    TopicName,
    /// A cluster id that is empty, too long or not UTF-8.
    #[error("invalid cluster id")]
    ClusterId,
    /// An ack's flags byte with unknown bits.
    #[error("unknown ack flags {0:#04x}")]
    AckFlags(u8),
    /// An epoch answer's presence byte that is neither 0 nor 1.
    #[error("invalid presence byte {0}")]
    Presence(u8),
    /// A forward kind this build does not know.
    #[error("unknown forward kind {0}")]
    ForwardKind(u8),
    /// A channel operation this build does not know.
    #[error("unknown channel operation {0}")]
    ChannelOpKind(u8),
    /// A channel name that is empty, too long, ephemeral or has a character NSQ does not allow.
    #[error("invalid channel name")]
    ChannelName,
    /// A byte standing for a choice that is none of its values.
    #[error("invalid {what} byte {byte}")]
    Choice {
        /// The field.
        what: &'static str,
        /// The byte read.
        byte: u8,
    },
    /// An answer's error text that is too long or not UTF-8.
    #[error("invalid answer text (not UTF-8, or over {MAX_ANSWER_TEXT} bytes)")]
    AnswerText,
    /// A channel position's owed seqs that are not strictly increasing below its cursor.
    #[error("a channel position's owed seqs are not strictly increasing below its cursor")]
    OwedOrder,
    /// A channel position with more owed seqs than one may carry.
    #[error("a channel position of {0} owed seqs is over the maximum of {MAX_OWED}")]
    OwedTooMany(usize),
    /// A forwarded publish whose origins are neither none nor one per body.
    #[error("a publish of {bodies} bodies with {origins} dead-letter origins")]
    OriginCount {
        /// The bodies.
        bodies: usize,
        /// The origins.
        origins: usize,
    },
    /// A dead-letter operation with more records or IDs than one may carry.
    #[error("a dead-letter operation of {0} records is over the maximum of {MAX_DEAD_LETTERS}")]
    DeadLettersTooMany(usize),
    /// A dead letter's preview that is too long or not UTF-8.
    #[error("invalid dead-letter preview (not UTF-8, or over {MAX_PREVIEW} bytes)")]
    Preview,
    /// Bytes left after a frame's last field.
    #[error("{0} bytes after the end of the frame's fields")]
    TrailingBytes(usize),
}

/// Whether `name` is a topic name NSQ allows (an ephemeral one is never replicated).
pub fn valid_topic(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOPIC_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Whether `name` is a channel name that can be replicated: one NSQ allows, not ephemeral.
pub fn valid_channel(name: &str) -> bool {
    name.len() <= MAX_CHANNEL_NAME && valid_topic(name)
}

/// Whether `f` can be encoded: its names valid, its text and owed seqs within bounds.
pub fn check_forward(f: &Forward) -> Result<(), WireError> {
    match f {
        Forward::Publish {
            topic,
            bodies,
            origins,
            ..
        } => {
            if !valid_topic(topic) {
                return Err(WireError::TopicName);
            }
            if !origins.is_empty() && origins.len() != bodies.len() {
                return Err(WireError::OriginCount {
                    bodies: bodies.len(),
                    origins: origins.len(),
                });
            }
            for o in origins {
                dead_letters::check_origin(o)?;
            }
        }
        Forward::DeadLetters { topic, op } => {
            if !valid_topic(topic) {
                return Err(WireError::TopicName);
            }
            dead_letters::check_op(op)?;
        }
        Forward::Answer { result, .. } => {
            if result.as_ref().is_err_and(|e| e.len() > MAX_ANSWER_TEXT) {
                return Err(WireError::AnswerText);
            }
        }
        Forward::Channel { topic, channel, op } => {
            if !valid_topic(topic) {
                return Err(WireError::TopicName);
            }
            if !valid_channel(channel) {
                return Err(WireError::ChannelName);
            }
            match op {
                ChannelOp::Position { cursor, owed } => check_owed(*cursor, owed)?,
                ChannelOp::Config {
                    dead_letter_topic: Some(to),
                    ..
                } if !valid_topic(to) => return Err(WireError::TopicName),
                _ => {}
            }
        }
        Forward::Topic { topic, .. } => {
            if !valid_topic(topic) {
                return Err(WireError::TopicName);
            }
        }
    }
    Ok(())
}

fn check_owed(cursor: u64, owed: &[u64]) -> Result<(), WireError> {
    if owed.len() > MAX_OWED {
        return Err(WireError::OwedTooMany(owed.len()));
    }
    let increasing = owed.windows(2).all(|w| w[0] < w[1]);
    if !increasing || owed.last().is_some_and(|&s| s >= cursor) {
        return Err(WireError::OwedOrder);
    }
    Ok(())
}

/// The bytes a forward takes inside a `Forwards` frame.
pub fn forward_len(f: &Forward) -> usize {
    1 + match f {
        Forward::Publish {
            topic,
            bodies,
            origins,
            ..
        } => {
            8 + 1
                + topic.len()
                + 8
                + 4
                + bodies.iter().map(|b| 4 + b.len()).sum::<usize>()
                + 4
                + origins.iter().map(dead_letters::origin_len).sum::<usize>()
        }
        Forward::DeadLetters { topic, op } => 1 + topic.len() + dead_letters::op_len(op),
        Forward::Answer { result, .. } => 8 + 1 + result.as_ref().err().map_or(0, |e| 2 + e.len()),
        Forward::Channel { topic, channel, op } => {
            1 + topic.len()
                + 1
                + channel.len()
                + 1
                + match op {
                    ChannelOp::Created | ChannelOp::Deleted => 0,
                    ChannelOp::Paused(_) => 1,
                    ChannelOp::Position { owed, .. } => 8 + 4 + 8 * owed.len(),
                    ChannelOp::Rewound { .. } => 8,
                    ChannelOp::Config {
                        dead_letter_topic, ..
                    } => 1 + 2 + dead_letter_topic.as_ref().map_or(0, |t| 1 + t.len()),
                }
        }
        Forward::Topic { topic, .. } => 1 + topic.len() + 1 + 8 + 8,
    }
}

fn put_forward(out: &mut Vec<u8>, f: &Forward) -> Result<(), WireError> {
    check_forward(f)?;
    match f {
        Forward::Publish {
            id,
            topic,
            defer_ms,
            bodies,
            origins,
        } => {
            out.push(FWD_PUBLISH);
            out.extend_from_slice(&id.to_be_bytes());
            put_str(out, topic);
            out.extend_from_slice(&defer_ms.to_be_bytes());
            put_u32_len(out, bodies.len())?;
            for b in bodies {
                put_u32_len(out, b.len())?;
                out.extend_from_slice(b);
            }
            put_u32_len(out, origins.len())?;
            for o in origins {
                dead_letters::put_origin(out, o);
            }
        }
        Forward::DeadLetters { topic, op } => {
            out.push(FWD_DEAD_LETTERS);
            put_str(out, topic);
            dead_letters::put_op(out, op)?;
        }
        Forward::Answer { id, result } => {
            out.push(FWD_ANSWER);
            out.extend_from_slice(&id.to_be_bytes());
            match result {
                Ok(()) => out.push(0),
                Err(text) => {
                    out.push(1);
                    // `check_forward` bounded the text to MAX_ANSWER_TEXT bytes.
                    put_short_text(out, text, WireError::AnswerText)?;
                }
            }
        }
        Forward::Channel { topic, channel, op } => {
            out.push(FWD_CHANNEL);
            put_str(out, topic);
            put_str(out, channel);
            match op {
                ChannelOp::Created => out.push(OP_CREATED),
                ChannelOp::Deleted => out.push(OP_DELETED),
                ChannelOp::Paused(p) => {
                    out.push(OP_PAUSED);
                    out.push(u8::from(*p));
                }
                ChannelOp::Position { cursor, owed } => {
                    out.push(OP_POSITION);
                    out.extend_from_slice(&cursor.to_be_bytes());
                    put_u32_len(out, owed.len())?;
                    for s in owed {
                        out.extend_from_slice(&s.to_be_bytes());
                    }
                }
                ChannelOp::Rewound { to } => {
                    out.push(OP_REWOUND);
                    out.extend_from_slice(&to.to_be_bytes());
                }
                ChannelOp::Config {
                    max_attempts,
                    dead_letter_topic,
                } => {
                    out.push(OP_CONFIG);
                    let mut flags = 0;
                    if max_attempts.is_some() {
                        flags |= CHANNEL_MAX_ATTEMPTS;
                    }
                    if dead_letter_topic.is_some() {
                        flags |= CHANNEL_DEAD_LETTER_TOPIC;
                    }
                    out.push(flags);
                    out.extend_from_slice(&max_attempts.unwrap_or(0).to_be_bytes());
                    if let Some(to) = dead_letter_topic {
                        put_str(out, to);
                    }
                }
            }
        }
        Forward::Topic { topic, config } => {
            out.push(FWD_TOPIC);
            put_str(out, topic);
            let mut flags = 0;
            if config.paused {
                flags |= TOPIC_PAUSED;
            }
            if config.retention_time_ns.is_some() {
                flags |= TOPIC_RETENTION_TIME;
            }
            if config.retention_bytes.is_some() {
                flags |= TOPIC_RETENTION_BYTES;
            }
            out.push(flags);
            out.extend_from_slice(&config.retention_time_ns.unwrap_or(0).to_be_bytes());
            out.extend_from_slice(&config.retention_bytes.unwrap_or(0).to_be_bytes());
        }
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Callers check the length first (a topic or cluster id is at most 64 bytes).
    out.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(s.as_bytes());
}

/// A text of at most `u16::MAX` bytes, after its length (`too_long` otherwise).
fn put_short_text(out: &mut Vec<u8>, text: &str, too_long: WireError) -> Result<(), WireError> {
    let len = u16::try_from(text.len()).map_err(|_| too_long)?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

fn put_u32_len(out: &mut Vec<u8>, n: usize) -> Result<(), WireError> {
    let n = u32::try_from(n).map_err(|_| WireError::FrameTooLarge {
        len: n as u64,
        max: u32::MAX as usize,
    })?;
    out.extend_from_slice(&n.to_be_bytes());
    Ok(())
}

fn put_msg(out: &mut Vec<u8>, msg: &Msg) -> Result<(), WireError> {
    match msg {
        Msg::Append {
            epoch,
            hw,
            base,
            batch,
        } => {
            out.push(MSG_APPEND);
            for v in [epoch.0, *hw, *base, batch.epoch.0] {
                out.extend_from_slice(&v.to_be_bytes());
            }
            put_u32_len(out, batch.records.len())?;
            for r in &batch.records {
                out.extend_from_slice(&r.seq.to_be_bytes());
                out.extend_from_slice(&r.crc.to_be_bytes());
                put_u32_len(out, r.bytes.len())?;
                out.extend_from_slice(&r.bytes);
            }
        }
        Msg::Ack {
            epoch,
            incarnation,
            end,
            durable_end,
            clean,
            resend,
        } => {
            out.push(MSG_ACK);
            for v in [epoch.0, *incarnation, *end, *durable_end] {
                out.extend_from_slice(&v.to_be_bytes());
            }
            let mut flags = 0;
            if *clean {
                flags |= ACK_CLEAN;
            }
            if *resend {
                flags |= ACK_RESEND;
            }
            out.push(flags);
        }
        Msg::StartAt { epoch, hw, start } => {
            out.push(MSG_START_AT);
            for v in [epoch.0, *hw, *start] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        Msg::EpochEndQuery { epoch, last_epoch } => {
            out.push(MSG_EPOCH_QUERY);
            out.extend_from_slice(&epoch.0.to_be_bytes());
            out.extend_from_slice(&last_epoch.0.to_be_bytes());
        }
        Msg::EpochEndAnswer {
            epoch,
            asked,
            found,
        } => {
            out.push(MSG_EPOCH_ANSWER);
            out.extend_from_slice(&epoch.0.to_be_bytes());
            out.extend_from_slice(&asked.0.to_be_bytes());
            match found {
                None => out.push(0),
                Some((e, s)) => {
                    out.push(1);
                    out.extend_from_slice(&e.0.to_be_bytes());
                    out.extend_from_slice(&s.to_be_bytes());
                }
            }
        }
    }
    Ok(())
}

/// The bytes a topic's message takes inside a `Messages` frame.
pub fn encoded_len(topic: &str, msg: &Msg) -> usize {
    1 + topic.len()
        + 1
        + match msg {
            Msg::Append { batch, .. } => {
                32 + 4
                    + batch
                        .records
                        .iter()
                        .map(|r| RECORD_HEAD + r.bytes.len())
                        .sum::<usize>()
            }
            Msg::Ack { .. } => 33,
            Msg::StartAt { .. } => 24,
            Msg::EpochEndQuery { .. } => 16,
            Msg::EpochEndAnswer { found, .. } => 17 + if found.is_some() { 16 } else { 0 },
        }
}

/// Appends `frame` to `out`, or refuses it (leaving `out` as it was) when it is over
/// `max_frame` or names an invalid topic or cluster id.
pub fn encode(frame: &Frame, max_frame: usize, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    let r = encode_body(frame, out).and_then(|()| {
        let len = out.len() - start - 4;
        if len > max_frame {
            return Err(WireError::FrameTooLarge {
                len: len as u64,
                max: max_frame,
            });
        }
        let len = u32::try_from(len).map_err(|_| WireError::FrameTooLarge {
            len: len as u64,
            max: max_frame,
        })?;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    });
    if r.is_err() {
        out.truncate(start);
    }
    r
}

fn encode_body(frame: &Frame, out: &mut Vec<u8>) -> Result<(), WireError> {
    out.extend_from_slice(&[0; 4]);
    out.push(PROTOCOL_VERSION);
    match frame {
        Frame::Hello(h) => {
            if h.cluster_id.is_empty() || h.cluster_id.len() > MAX_CLUSTER_ID {
                return Err(WireError::ClusterId);
            }
            out.push(KIND_HELLO);
            put_str(out, &h.cluster_id);
            out.extend_from_slice(&h.broker.0.to_be_bytes());
            out.extend_from_slice(&h.incarnation.to_be_bytes());
        }
        Frame::Messages(msgs) => {
            out.push(KIND_MESSAGES);
            put_u32_len(out, msgs.len())?;
            for m in msgs {
                if !valid_topic(&m.topic) {
                    return Err(WireError::TopicName);
                }
                put_str(out, &m.topic);
                put_msg(out, &m.msg)?;
            }
        }
        Frame::Tick {
            seq,
            forget_heartbeats,
            forget_acks,
        } => {
            out.push(KIND_TICK);
            out.extend_from_slice(&seq.to_be_bytes());
            for list in [forget_heartbeats, forget_acks] {
                put_u32_len(out, list.len())?;
                for t in list {
                    if !valid_topic(t) {
                        return Err(WireError::TopicName);
                    }
                    put_str(out, t);
                }
            }
        }
        Frame::Forwards(fs) => {
            out.push(KIND_FORWARDS);
            put_u32_len(out, fs.len())?;
            for f in fs {
                put_forward(out, f)?;
            }
        }
    }
    Ok(())
}

/// Reads one frame's body; every read is bounded by the bytes left.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A text after its `u16` length: at most `max` bytes of UTF-8, `bad` otherwise.
    fn short_text(
        &mut self,
        max: usize,
        what: &'static str,
        bad: WireError,
    ) -> Result<String, WireError> {
        let len = usize::from(self.u16(what)?);
        if len > max {
            return Err(bad);
        }
        let b = self.take(len, what)?;
        let text = std::str::from_utf8(b).map_err(|_| bad)?;
        Ok(text.to_owned())
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        let b = self.take(8, what)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A count of elements of at least `min_each` bytes, refused when the frame's remaining
    /// bytes cannot hold that many.
    fn count(&mut self, min_each: usize, what: &'static str) -> Result<usize, WireError> {
        let n = self.u32(what)?;
        let room = self.buf.len();
        let fits = usize::try_from(n)
            .ok()
            .filter(|n| n.saturating_mul(min_each.max(1)) <= room);
        fits.ok_or(WireError::CountTooLarge {
            what,
            count: u64::from(n),
            room,
        })
    }

    fn topic(&mut self) -> Result<String, WireError> {
        let len = usize::from(self.u8("a topic name's length")?);
        let b = self.take(len, "a topic name")?;
        let name = std::str::from_utf8(b).map_err(|_| WireError::TopicName)?;
        if !valid_topic(name) {
            return Err(WireError::TopicName);
        }
        Ok(name.to_owned())
    }

    fn channel(&mut self) -> Result<String, WireError> {
        let len = usize::from(self.u8("a channel name's length")?);
        let b = self.take(len, "a channel name")?;
        let name = std::str::from_utf8(b).map_err(|_| WireError::ChannelName)?;
        if !valid_channel(name) {
            return Err(WireError::ChannelName);
        }
        Ok(name.to_owned())
    }

    fn forward(&mut self) -> Result<Forward, WireError> {
        match self.u8("a forward kind")? {
            FWD_PUBLISH => {
                let id = self.u64("a publish's id")?;
                let topic = self.topic()?;
                let defer_ms = self.u64("a publish's deferral")?;
                let n = self.count(4, "a publish's body count")?;
                let mut bodies = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = self.count(1, "a publish body's length")?;
                    bodies.push(Bytes::copy_from_slice(self.take(len, "a publish's body")?));
                }
                let n = self.count(2 + 2 + 16 + 2 + 8, "a publish's origin count")?;
                if n != 0 && n != bodies.len() {
                    return Err(WireError::OriginCount {
                        bodies: bodies.len(),
                        origins: n,
                    });
                }
                let mut origins = Vec::with_capacity(n);
                for _ in 0..n {
                    origins.push(self.dead_origin()?);
                }
                Ok(Forward::Publish {
                    id,
                    topic,
                    defer_ms,
                    bodies,
                    origins,
                })
            }
            FWD_DEAD_LETTERS => {
                let topic = self.topic()?;
                let op = self.dead_letter_op()?;
                Ok(Forward::DeadLetters { topic, op })
            }
            FWD_ANSWER => {
                let id = self.u64("an answer's id")?;
                let result = match self.u8("an answer's outcome")? {
                    0 => Ok(()),
                    1 => {
                        let text = self.short_text(
                            MAX_ANSWER_TEXT,
                            "an answer's text",
                            WireError::AnswerText,
                        )?;
                        Err(text)
                    }
                    byte => {
                        return Err(WireError::Choice {
                            what: "an answer's outcome",
                            byte,
                        })
                    }
                };
                Ok(Forward::Answer { id, result })
            }
            FWD_CHANNEL => {
                let topic = self.topic()?;
                let channel = self.channel()?;
                let op = match self.u8("a channel operation")? {
                    OP_CREATED => ChannelOp::Created,
                    OP_DELETED => ChannelOp::Deleted,
                    OP_PAUSED => match self.u8("a pause's flag")? {
                        0 => ChannelOp::Paused(false),
                        1 => ChannelOp::Paused(true),
                        byte => {
                            return Err(WireError::Choice {
                                what: "a pause's flag",
                                byte,
                            })
                        }
                    },
                    OP_POSITION => {
                        let cursor = self.u64("a position's cursor")?;
                        let n = self.count(8, "a position's owed count")?;
                        if n > MAX_OWED {
                            return Err(WireError::OwedTooMany(n));
                        }
                        let mut owed = Vec::with_capacity(n);
                        for _ in 0..n {
                            owed.push(self.u64("an owed seq")?);
                        }
                        check_owed(cursor, &owed)?;
                        ChannelOp::Position { cursor, owed }
                    }
                    OP_REWOUND => ChannelOp::Rewound {
                        to: self.u64("a rewind's seq")?,
                    },
                    OP_CONFIG => {
                        let flags = self.u8("a channel config's flags")?;
                        if flags & !(CHANNEL_MAX_ATTEMPTS | CHANNEL_DEAD_LETTER_TOPIC) != 0 {
                            return Err(WireError::Choice {
                                what: "a channel config's flags",
                                byte: flags,
                            });
                        }
                        let attempts = self.u16("a channel's max attempts")?;
                        let max_attempts = (flags & CHANNEL_MAX_ATTEMPTS != 0).then_some(attempts);
                        let dead_letter_topic = if flags & CHANNEL_DEAD_LETTER_TOPIC != 0 {
                            Some(self.topic()?)
                        } else {
                            None
                        };
                        ChannelOp::Config {
                            max_attempts,
                            dead_letter_topic,
                        }
                    }
                    k => return Err(WireError::ChannelOpKind(k)),
                };
                Ok(Forward::Channel { topic, channel, op })
            }
            FWD_TOPIC => {
                let topic = self.topic()?;
                let flags = self.u8("a topic config's flags")?;
                let known = TOPIC_PAUSED | TOPIC_RETENTION_TIME | TOPIC_RETENTION_BYTES;
                if flags & !known != 0 {
                    return Err(WireError::Choice {
                        what: "a topic config's flags",
                        byte: flags,
                    });
                }
                let time = self.u64("a topic's retention time")?;
                let bytes = self.u64("a topic's retention bytes")?;
                let config = TopicConfig {
                    paused: flags & TOPIC_PAUSED != 0,
                    retention_time_ns: (flags & TOPIC_RETENTION_TIME != 0).then_some(time),
                    retention_bytes: (flags & TOPIC_RETENTION_BYTES != 0).then_some(bytes),
                };
                Ok(Forward::Topic { topic, config })
            }
            k => Err(WireError::ForwardKind(k)),
        }
    }

    fn msg(&mut self) -> Result<Msg, WireError> {
        match self.u8("a message kind")? {
            MSG_APPEND => {
                let epoch = Epoch(self.u64("an append's epoch")?);
                let hw = self.u64("an append's high watermark")?;
                let base = self.u64("an append's base")?;
                let batch_epoch = Epoch(self.u64("a batch's epoch")?);
                let n = self.count(RECORD_HEAD, "a batch's record count")?;
                let mut records = Vec::with_capacity(n);
                for _ in 0..n {
                    let seq: Seq = self.u64("a record's seq")?;
                    let crc = self.u32("a record's crc")?;
                    let len = self.count(1, "a record's length")?;
                    let bytes = self.take(len, "a record's bytes")?.to_vec();
                    records.push(Record { seq, crc, bytes });
                }
                Ok(Msg::Append {
                    epoch,
                    hw,
                    base,
                    batch: Batch {
                        epoch: batch_epoch,
                        records,
                    },
                })
            }
            MSG_ACK => {
                let epoch = Epoch(self.u64("an ack's epoch")?);
                let incarnation = self.u64("an ack's incarnation")?;
                let end = self.u64("an ack's end")?;
                let durable_end = self.u64("an ack's durable end")?;
                let flags = self.u8("an ack's flags")?;
                if flags & !(ACK_CLEAN | ACK_RESEND) != 0 {
                    return Err(WireError::AckFlags(flags));
                }
                Ok(Msg::Ack {
                    epoch,
                    incarnation,
                    end,
                    durable_end,
                    clean: flags & ACK_CLEAN != 0,
                    resend: flags & ACK_RESEND != 0,
                })
            }
            MSG_START_AT => Ok(Msg::StartAt {
                epoch: Epoch(self.u64("a start's epoch")?),
                hw: self.u64("a start's high watermark")?,
                start: self.u64("a start's seq")?,
            }),
            MSG_EPOCH_QUERY => Ok(Msg::EpochEndQuery {
                epoch: Epoch(self.u64("a query's epoch")?),
                last_epoch: Epoch(self.u64("a query's last epoch")?),
            }),
            MSG_EPOCH_ANSWER => {
                let epoch = Epoch(self.u64("an answer's epoch")?);
                let asked = Epoch(self.u64("an answer's asked epoch")?);
                let found = match self.u8("an answer's presence byte")? {
                    0 => None,
                    1 => Some((
                        Epoch(self.u64("an answer's found epoch")?),
                        self.u64("an answer's found end")?,
                    )),
                    b => return Err(WireError::Presence(b)),
                };
                Ok(Msg::EpochEndAnswer {
                    epoch,
                    asked,
                    found,
                })
            }
            k => Err(WireError::MessageKind(k)),
        }
    }
}

/// Decodes one frame's bytes (after its length prefix).
pub fn decode_frame(bytes: &[u8]) -> Result<Frame, WireError> {
    let mut r = Reader { buf: bytes };
    let version = r.u8("the version")?;
    if version != PROTOCOL_VERSION {
        return Err(WireError::Version(version));
    }
    let frame = match r.u8("the frame kind")? {
        KIND_HELLO => {
            let len = usize::from(r.u8("the cluster id's length")?);
            let b = r.take(len, "the cluster id")?;
            let cluster_id = std::str::from_utf8(b).map_err(|_| WireError::ClusterId)?;
            if cluster_id.is_empty() || cluster_id.len() > MAX_CLUSTER_ID {
                return Err(WireError::ClusterId);
            }
            Frame::Hello(Hello {
                cluster_id: cluster_id.to_owned(),
                broker: BrokerId(r.u64("the broker id")?),
                incarnation: r.u64("the incarnation")?,
            })
        }
        KIND_MESSAGES => {
            let n = r.count(MIN_TOPIC_MSG, "the message count")?;
            let mut msgs = Vec::with_capacity(n);
            for _ in 0..n {
                let topic = r.topic()?;
                let msg = r.msg()?;
                msgs.push(TopicMsg { topic, msg });
            }
            Frame::Messages(msgs)
        }
        KIND_TICK => {
            let seq = r.u64("the tick's seq")?;
            let mut lists = [Vec::new(), Vec::new()];
            for list in &mut lists {
                let n = r.count(MIN_TOPIC, "the forgotten topic count")?;
                list.reserve_exact(n);
                for _ in 0..n {
                    list.push(r.topic()?);
                }
            }
            let [forget_heartbeats, forget_acks] = lists;
            Frame::Tick {
                seq,
                forget_heartbeats,
                forget_acks,
            }
        }
        KIND_FORWARDS => {
            let n = r.count(MIN_FORWARD, "the forward count")?;
            let mut fs = Vec::with_capacity(n);
            for _ in 0..n {
                fs.push(r.forward()?);
            }
            Frame::Forwards(fs)
        }
        k => return Err(WireError::FrameKind(k)),
    };
    if !r.buf.is_empty() {
        return Err(WireError::TrailingBytes(r.buf.len()));
    }
    Ok(frame)
}

/// Turns a byte stream, in any chunking, into frames.
#[derive(Debug)]
pub struct Decoder {
    max_frame: usize,
    head: [u8; 4],
    head_len: usize,
    /// The current frame's length, once its prefix is read.
    want: Option<usize>,
    body: Vec<u8>,
    failed: Option<WireError>,
}

impl Decoder {
    /// A decoder refusing frames over `max_frame` bytes.
    pub fn new(max_frame: usize) -> Decoder {
        Decoder {
            max_frame,
            head: [0; 4],
            head_len: 0,
            want: None,
            body: Vec::new(),
            failed: None,
        }
    }

    /// Takes the next bytes of the stream and appends the frames they complete to `out`. After
    /// an error the stream is unusable: every later call returns the same error.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<Frame>) -> Result<(), WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        while !input.is_empty() {
            let Some(want) = self.want else {
                let n = (4 - self.head_len).min(input.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&input[..n]);
                self.head_len += n;
                input = &input[n..];
                if self.head_len == 4 {
                    let len = u32::from_be_bytes(self.head);
                    let len_usize = usize::try_from(len).unwrap_or(usize::MAX);
                    if len_usize > self.max_frame {
                        return Err(self.fail(WireError::FrameTooLarge {
                            len: u64::from(len),
                            max: self.max_frame,
                        }));
                    }
                    if len < 2 {
                        return Err(self.fail(WireError::FrameTooShort(len)));
                    }
                    self.want = Some(len_usize);
                    self.body.clear();
                }
                continue;
            };
            let n = (want - self.body.len()).min(input.len());
            self.body.extend_from_slice(&input[..n]);
            input = &input[n..];
            if self.body.len() == want {
                match decode_frame(&self.body) {
                    Ok(f) => out.push(f),
                    Err(e) => return Err(self.fail(e)),
                }
                self.want = None;
                self.head_len = 0;
                // A large frame's buffer is not kept for the connection's lifetime.
                if self.body.capacity() > 64 * 1024 {
                    self.body = Vec::new();
                } else {
                    self.body.clear();
                }
            }
        }
        Ok(())
    }

    /// Bytes held of a frame not yet complete.
    pub fn buffered(&self) -> usize {
        self.head_len + self.body.len()
    }

    fn fail(&mut self, e: WireError) -> WireError {
        self.failed = Some(e.clone());
        self.head_len = 0;
        self.want = None;
        self.body = Vec::new();
        e
    }
}

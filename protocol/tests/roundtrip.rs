//! Property tests for the wire codec: what is encoded decodes back to the same value, consuming
//! exactly the encoded bytes, whatever way the byte stream is cut into reads; and no input makes
//! a decoder panic or eat bytes while asking for more.
//!
//! The last tests reproduce bugs these tests and the fuzzer found (fixed since); they stay as
//! regression tests.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use protocol::command::MAX_LINE_LEN;
use protocol::duration::{format_duration, parse_duration};
use protocol::frame::{write_frame, write_message_frame, FrameError};
use protocol::names::{is_valid_channel_name, is_valid_topic_name, MAX_NAME_LENGTH};
use protocol::{
    decode_command, decode_frame, Command, ConnPhase, DecodeContext, ErrorCode, Frame, FrameType,
    Limits, Message, MessageId, ProtocolError,
};
use std::fmt::Debug;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Shared machinery
// ---------------------------------------------------------------------------------------------

/// Small limits, so that the edges (a body of exactly `max_msg_size`, ...) are generated often.
const LIMITS: Limits = Limits {
    max_msg_size: 256,
    max_body_size: 2048,
    max_rdy_count: 2500,
    max_req_timeout_ms: 3_600_000,
};

fn ctx(phase: ConnPhase) -> DecodeContext {
    DecodeContext {
        phase,
        heartbeats_enabled: true,
        limits: LIMITS,
    }
}

/// What a decoder made of a byte stream: the items it returned, with the number of stream bytes
/// consumed once each was returned, and how it ended: `Ok(leftover)` when it asked for more
/// bytes after the whole stream was fed, `Err(e)` when it failed.
#[derive(Debug, PartialEq)]
struct Outcome<T, E> {
    items: Vec<T>,
    consumed_after: Vec<usize>,
    end: Result<Vec<u8>, E>,
}

/// Feeds `stream` to `decode` in chunks cut at `cuts` (any order, duplicates allowed), calling it
/// after every chunk until it asks for more or fails, as a connection's read loop does. Checks
/// the decoder contract on every call: `Ok(None)` leaves the buffer untouched, `Ok(Some(_))`
/// consumes at least one byte.
fn run_decoder<T: Debug, E: Debug>(
    stream: &[u8],
    cuts: &[usize],
    mut decode: impl FnMut(&mut BytesMut) -> Result<Option<T>, E>,
) -> Result<Outcome<T, E>, TestCaseError> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| c.min(stream.len())).collect();
    points.push(stream.len());
    points.sort_unstable();
    points.dedup();

    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut items = Vec::new();
    let mut consumed_after = Vec::new();
    for end in points {
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
        loop {
            let before = buf.clone();
            match decode(&mut buf) {
                Ok(Some(item)) => {
                    prop_assert!(
                        buf.len() < before.len(),
                        "decoder returned {:?} without consuming anything",
                        item
                    );
                    prop_assert_eq!(&buf[..], &before[before.len() - buf.len()..]);
                    items.push(item);
                    consumed_after.push(fed - buf.len());
                }
                Ok(None) => {
                    prop_assert_eq!(
                        &buf[..],
                        &before[..],
                        "decoder asked for more bytes but changed the buffer"
                    );
                    break;
                }
                Err(e) => {
                    return Ok(Outcome {
                        items,
                        consumed_after,
                        end: Err(e),
                    })
                }
            }
        }
    }
    Ok(Outcome {
        items,
        consumed_after,
        end: Ok(buf.to_vec()),
    })
}

/// Cut points anywhere in a stream (resolved against its length by `resolve_cuts`).
fn cuts() -> impl Strategy<Value = Vec<Index>> {
    vec(any::<Index>(), 0..12)
}

fn resolve_cuts(cuts: &[Index], len: usize) -> Vec<usize> {
    cuts.iter().map(|i| i.index(len + 1)).collect()
}

fn prefix_sums(lens: &[usize]) -> Vec<usize> {
    lens.iter()
        .scan(0, |acc, &l| {
            *acc += l;
            Some(*acc)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

fn phase() -> impl Strategy<Value = ConnPhase> {
    prop_oneof![
        Just(ConnPhase::Init),
        Just(ConnPhase::Subscribed),
        Just(ConnPhase::Closing)
    ]
}

/// Valid topic or channel names: 1 to 64 of `[.a-zA-Z0-9_-]`, or a stem and `#ephemeral`.
fn valid_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[.a-zA-Z0-9_-]{1,64}",
        1 => "[.a-zA-Z0-9_-]{1,54}#ephemeral",
    ]
}

/// Message IDs a client can echo back: the broker's hex IDs, and opaque printable ones. (IDs
/// holding a space, `\n` or a final `\r` cannot be carried by the text protocol at all, and
/// non-UTF-8 ones are mangled by `Command::encode`: see `fin_with_non_utf8_id_round_trips`.)
fn echoable_id() -> impl Strategy<Value = MessageId> {
    prop_oneof![
        any::<u64>().prop_map(MessageId::from_u64),
        proptest::array::uniform16(0x21u8..=0x7e).prop_map(MessageId),
    ]
}

fn body(max: u64) -> impl Strategy<Value = Bytes> {
    prop_oneof![
        4 => vec(any::<u8>(), 1..=max as usize),
        // Exactly at the limit.
        1 => vec(any::<u8>(), max as usize..=max as usize),
    ]
    .prop_map(Bytes::from)
}

/// Up to a limit, with the limit itself generated often.
fn up_to(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0..=max, 1 => Just(max), 1 => Just(0)]
}

/// Commands allowed in every phase.
fn publishing_command() -> BoxedStrategy<Command> {
    let max_msg = LIMITS.max_msg_size;
    // 6 messages of at most 256 bytes stay under max_body_size = 2048.
    prop_oneof![
        (valid_name(), body(max_msg)).prop_map(|(topic, body)| Command::Pub { topic, body }),
        (valid_name(), vec(body(max_msg), 1..=6))
            .prop_map(|(topic, bodies)| Command::Mpub { topic, bodies }),
        (
            valid_name(),
            up_to(LIMITS.max_req_timeout_ms),
            body(max_msg)
        )
            .prop_map(|(topic, defer_ms, body)| Command::Dpub {
                topic,
                defer_ms,
                body
            }),
        Just(Command::Nop),
    ]
    .boxed()
}

/// Commands the decoder accepts in `phase` (and returns as they are).
fn command_for(phase: ConnPhase) -> BoxedStrategy<Command> {
    let own = match phase {
        ConnPhase::Init => prop_oneof![
            body(256).prop_map(Command::Identify),
            body(64).prop_map(Command::Auth),
            (valid_name(), valid_name())
                .prop_map(|(topic, channel)| Command::Sub { topic, channel }),
        ]
        .boxed(),
        ConnPhase::Subscribed => prop_oneof![
            up_to(LIMITS.max_rdy_count).prop_map(Command::Rdy),
            echoable_id().prop_map(Command::Fin),
            (echoable_id(), any::<u64>()).prop_map(|(id, delay_ms)| Command::Req { id, delay_ms }),
            echoable_id().prop_map(Command::Touch),
            Just(Command::Cls),
        ]
        .boxed(),
        // RDY decodes to NOP once closing, and CLS is refused.
        ConnPhase::Closing => prop_oneof![
            echoable_id().prop_map(Command::Fin),
            (echoable_id(), any::<u64>()).prop_map(|(id, delay_ms)| Command::Req { id, delay_ms }),
            echoable_id().prop_map(Command::Touch),
        ]
        .boxed(),
    };
    prop_oneof![3 => own, 2 => publishing_command()].boxed()
}

fn phase_and_commands(max: usize) -> impl Strategy<Value = (ConnPhase, Vec<Command>)> {
    phase().prop_flat_map(move |p| (Just(p), vec(command_for(p), 1..=max)))
}

fn encode_all(cmds: &[Command]) -> (Vec<u8>, Vec<usize>) {
    let mut out = BytesMut::new();
    let mut lens = Vec::new();
    for c in cmds {
        let before = out.len();
        c.encode(&mut out);
        lens.push(out.len() - before);
    }
    (out.to_vec(), lens)
}

fn message() -> impl Strategy<Value = Message> {
    (
        proptest::array::uniform16(any::<u8>()),
        any::<i64>(),
        any::<u16>(),
        vec(any::<u8>(), 0..300),
    )
        .prop_map(|(id, timestamp, attempts, body)| Message {
            id: MessageId(id),
            timestamp,
            attempts,
            body: Bytes::from(body),
        })
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        vec(any::<u8>(), 0..100).prop_map(|d| Frame::Response(Bytes::from(d))),
        vec(any::<u8>(), 0..100).prop_map(|d| Frame::Error(Bytes::from(d))),
        message().prop_map(Frame::Message),
    ]
}

fn encode_frame(out: &mut BytesMut, f: &Frame) {
    match f {
        Frame::Response(d) => write_frame(out, FrameType::Response, d),
        Frame::Error(d) => write_frame(out, FrameType::Error, d),
        Frame::Message(m) => write_message_frame(out, m),
    }
}

/// A decode context with any phase and limits, including 0 and huge ones. `max_body_size` is
/// kept realistic (at most 1 MiB): above that a tiny MPUB makes the decoder allocate without
/// bound (see `mpub_count_does_not_drive_allocation`), which would abort the test process.
fn any_ctx() -> impl Strategy<Value = DecodeContext> {
    let limit = || prop_oneof![Just(0u64), 0..5000u64, any::<u64>()];
    (
        phase(),
        any::<bool>(),
        limit(),
        0..=(1u64 << 20),
        limit(),
        limit(),
    )
        .prop_map(
            |(phase, heartbeats_enabled, max_msg_size, max_body_size, rdy, req)| DecodeContext {
                phase,
                heartbeats_enabled,
                limits: Limits {
                    max_msg_size,
                    max_body_size,
                    max_rdy_count: rdy,
                    max_req_timeout_ms: req,
                },
            },
        )
}

/// Bytes a decoder might see: random bytes, or a valid stream with a few bytes changed,
/// inserted, removed, or cut short (to reach the deeper checks).
fn hostile_command_bytes() -> impl Strategy<Value = Vec<u8>> {
    let mutated = (
        phase_and_commands(4),
        vec((any::<Index>(), any::<u8>(), 0..3u8), 0..6),
        any::<Index>(),
    )
        .prop_map(|((_, cmds), edits, cut)| {
            let (mut bytes, _) = encode_all(&cmds);
            for (at, b, op) in edits {
                if bytes.is_empty() {
                    break;
                }
                let i = at.index(bytes.len());
                match op {
                    0 => bytes[i] = b,
                    1 => bytes.insert(i, b),
                    _ => {
                        bytes.remove(i);
                    }
                }
            }
            let keep = cut.index(bytes.len() + 1).max(bytes.len() * 3 / 4);
            bytes.truncate(keep);
            bytes
        });
    let words = vec(
        prop_oneof![
            Just(b"PUB ".to_vec()),
            Just(b"MPUB ".to_vec()),
            Just(b"DPUB ".to_vec()),
            Just(b"SUB ".to_vec()),
            Just(b"IDENTIFY".to_vec()),
            Just(b"AUTH".to_vec()),
            Just(b"RDY ".to_vec()),
            Just(b"FIN ".to_vec()),
            Just(b"REQ ".to_vec()),
            Just(b"TOUCH ".to_vec()),
            Just(b"CLS".to_vec()),
            Just(b"NOP".to_vec()),
            Just(b"t".to_vec()),
            Just(b"0123456789abcdef".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b" ".to_vec()),
            "[0-9]{1,21}".prop_map(String::into_bytes),
            any::<u32>().prop_map(|n| n.to_be_bytes().to_vec()),
            Just(vec![0xff, 0xff, 0xff, 0xff]),
            Just(vec![0x80, 0, 0, 0]),
            vec(any::<u8>(), 0..8),
        ],
        0..16,
    )
    .prop_map(|ws| ws.concat());
    prop_oneof![vec(any::<u8>(), 0..256), mutated, words]
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// One command, followed by anything: decoded back as it was, exactly its bytes consumed.
    #[test]
    fn command_round_trips(
        (p, cmds) in phase_and_commands(1),
        trailing in vec(any::<u8>(), 0..32),
    ) {
        let cmd = &cmds[0];
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf);
        buf.extend_from_slice(&trailing);
        let got = decode_command(&mut buf, &ctx(p));
        prop_assert_eq!(got, Ok(Some(cmd.clone())));
        prop_assert_eq!(&buf[..], &trailing[..]);
    }

    /// Several commands back to back, fed in arbitrary reads: each read that ends inside a
    /// command gets `Ok(None)` with nothing consumed; all commands come back in order, each
    /// consuming exactly its own bytes.
    #[test]
    fn pipelined_commands_round_trip_in_any_chunking(
        (p, cmds) in phase_and_commands(8),
        cut_at in cuts(),
    ) {
        let (stream, lens) = encode_all(&cmds);
        let c = ctx(p);
        let out = run_decoder(&stream, &resolve_cuts(&cut_at, stream.len()), |b| {
            decode_command(b, &c)
        })?;
        prop_assert_eq!(out.end, Ok(vec![]));
        prop_assert_eq!(out.items, cmds);
        prop_assert_eq!(out.consumed_after, prefix_sums(&lens));
    }

    /// The worst chunking: one byte per read.
    #[test]
    fn commands_round_trip_byte_by_byte((p, cmds) in phase_and_commands(3)) {
        let (stream, lens) = encode_all(&cmds);
        let every_byte: Vec<usize> = (0..stream.len()).collect();
        let c = ctx(p);
        let out = run_decoder(&stream, &every_byte, |b| decode_command(b, &c))?;
        prop_assert_eq!(out.end, Ok(vec![]));
        prop_assert_eq!(out.items, cmds);
        prop_assert_eq!(out.consumed_after, prefix_sums(&lens));
    }

    /// Whatever the bytes and the context: no panic, `Ok(None)` consumes nothing, `Ok(Some)`
    /// consumes something (checked by `run_decoder`), and cutting the stream into reads changes
    /// nothing (streams here are shorter than MAX_LINE_LEN; see
    /// `overlong_line_is_refused_however_it_arrives` for longer ones).
    #[test]
    fn arbitrary_bytes_never_panic_and_chunking_does_not_matter(
        bytes in hostile_command_bytes(),
        c in any_ctx(),
        cut_at in cuts(),
    ) {
        let whole = run_decoder(&bytes, &[], |b| decode_command(b, &c))?;
        let chunked = run_decoder(&bytes, &resolve_cuts(&cut_at, bytes.len()), |b| {
            decode_command(b, &c)
        })?;
        prop_assert_eq!(whole, chunked);
    }

    /// Commands the phase does not allow are refused with E_INVALID, never decoded.
    #[test]
    fn phase_rules_are_enforced((_, cmds) in phase_and_commands(1), other in phase()) {
        let cmd = &cmds[0];
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf);
        let got = decode_command(&mut buf, &ctx(other));
        let allowed = match cmd {
            Command::Identify(_) | Command::Auth(_) | Command::Sub { .. } => {
                other == ConnPhase::Init
            }
            Command::Rdy(_) | Command::Cls => other == ConnPhase::Subscribed,
            Command::Fin(_) | Command::Req { .. } | Command::Touch(_) => {
                other != ConnPhase::Init
            }
            Command::Pub { .. } | Command::Mpub { .. } | Command::Dpub { .. } | Command::Nop => true,
        };
        if allowed {
            prop_assert_eq!(got, Ok(Some(cmd.clone())));
        } else if matches!(cmd, Command::Rdy(_)) && other == ConnPhase::Closing {
            prop_assert_eq!(got, Ok(Some(Command::Nop)));
        } else {
            let e = got.unwrap_err();
            prop_assert_eq!(e.code, ErrorCode::Invalid);
            prop_assert!(e.fatal);
        }
    }
}

/// Every variant, once, in the phase that allows it (so that no variant depends on luck).
#[test]
fn every_variant_round_trips() {
    let id = MessageId::from_u64(0xdead_beef);
    let cases: Vec<(ConnPhase, Command)> = vec![
        (
            ConnPhase::Init,
            Command::Identify(Bytes::from_static(b"{}")),
        ),
        (
            ConnPhase::Init,
            Command::Auth(Bytes::from_static(b"secret")),
        ),
        (
            ConnPhase::Init,
            Command::Sub {
                topic: "t".into(),
                channel: "c#ephemeral".into(),
            },
        ),
        (
            ConnPhase::Init,
            Command::Pub {
                topic: "t".into(),
                body: Bytes::from_static(b"x"),
            },
        ),
        (
            ConnPhase::Subscribed,
            Command::Mpub {
                topic: "t".into(),
                bodies: vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")],
            },
        ),
        (
            ConnPhase::Closing,
            Command::Dpub {
                topic: "t".into(),
                defer_ms: LIMITS.max_req_timeout_ms,
                body: Bytes::from_static(b"later"),
            },
        ),
        (ConnPhase::Subscribed, Command::Rdy(LIMITS.max_rdy_count)),
        (ConnPhase::Subscribed, Command::Fin(id)),
        (
            ConnPhase::Closing,
            Command::Req {
                id,
                delay_ms: u64::MAX,
            },
        ),
        (ConnPhase::Closing, Command::Touch(id)),
        (ConnPhase::Subscribed, Command::Cls),
        (ConnPhase::Init, Command::Nop),
    ];
    let mut names: Vec<&str> = cases.iter().map(|(_, c)| c.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 12, "a Command variant is missing here");
    for (p, cmd) in cases {
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf);
        buf.put_slice(b"NOP\n");
        assert_eq!(
            decode_command(&mut buf, &ctx(p)),
            Ok(Some(cmd.clone())),
            "{cmd:?}"
        );
        assert_eq!(&buf[..], b"NOP\n", "{cmd:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------------

fn frame_len(f: &Frame) -> usize {
    let mut out = BytesMut::new();
    encode_frame(&mut out, f);
    out.len()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Frames back to back, fed in arbitrary reads, decode back as written.
    #[test]
    fn frames_round_trip_in_any_chunking(frames in vec(frame(), 1..8), cut_at in cuts()) {
        let mut out = BytesMut::new();
        let mut lens = Vec::new();
        for f in &frames {
            encode_frame(&mut out, f);
            lens.push(frame_len(f));
        }
        let stream = out.to_vec();
        let result = run_decoder(&stream, &resolve_cuts(&cut_at, stream.len()), |b| {
            decode_frame(b, 1 << 20)
        })?;
        prop_assert_eq!(result.end, Ok(vec![]));
        prop_assert_eq!(result.items, frames);
        prop_assert_eq!(result.consumed_after, prefix_sums(&lens));
    }

    /// The reader's limit bounds the size field exactly: a frame of size `max_size` passes,
    /// one byte more fails with BadSize before its data arrives.
    #[test]
    fn frame_size_limit_is_exact(f in frame()) {
        let mut out = BytesMut::new();
        encode_frame(&mut out, &f);
        let size = (out.len() - 4) as u32;
        let mut exact = out.clone();
        prop_assert_eq!(decode_frame(&mut exact, size), Ok(Some(f.clone())));
        let mut header_only = BytesMut::from(&out[..4]);
        prop_assert_eq!(decode_frame(&mut header_only, size - 1), Err(FrameError::BadSize(size)));
    }

    /// Arbitrary bytes and limits: no panic, and the contract holds in any chunking.
    #[test]
    fn arbitrary_frame_bytes_never_panic(
        bytes in prop_oneof![
            vec(any::<u8>(), 0..300),
            (vec(frame(), 1..4), vec((any::<Index>(), any::<u8>()), 0..4)).prop_map(|(fs, edits)| {
                let mut out = BytesMut::new();
                for f in &fs {
                    encode_frame(&mut out, f);
                }
                let mut v = out.to_vec();
                for (at, b) in edits {
                    let i = at.index(v.len());
                    v[i] = b;
                }
                v
            }),
        ],
        max_size in prop_oneof![Just(0u32), 0..64u32, Just(1 << 20), any::<u32>()],
        cut_at in cuts(),
    ) {
        let whole = run_decoder(&bytes, &[], |b| decode_frame(b, max_size))?;
        let chunked = run_decoder(&bytes, &resolve_cuts(&cut_at, bytes.len()), |b| {
            decode_frame(b, max_size)
        })?;
        prop_assert_eq!(whole, chunked);
    }
}

// ---------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------

fn sub_line(topic: &[u8], channel: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_slice(b"SUB ");
    b.put_slice(topic);
    b.put_u8(b' ');
    b.put_slice(channel);
    b.put_u8(b'\n');
    b
}

fn sub_error(topic: &[u8], channel: &[u8]) -> Option<ErrorCode> {
    match decode_command(&mut sub_line(topic, channel), &ctx(ConnPhase::Init)) {
        Ok(Some(Command::Sub { .. })) => None,
        Ok(other) => panic!("SUB decoded as {other:?}"),
        Err(ProtocolError { code, .. }) => Some(code),
    }
}

/// A character outside `[.a-zA-Z0-9_-]`. `#` is left out: it is allowed in `#ephemeral`.
fn bad_char() -> impl Strategy<Value = char> {
    any::<char>().prop_filter("must be outside the name alphabet", |c| {
        !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '#'))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn valid_names_are_accepted(name in valid_name()) {
        prop_assert!(name.len() <= MAX_NAME_LENGTH);
        prop_assert!(is_valid_topic_name(&name));
        prop_assert!(is_valid_channel_name(&name));
        prop_assert_eq!(sub_error(name.as_bytes(), name.as_bytes()), None);
    }

    /// One character outside the alphabet, anywhere, with or without `#ephemeral`: refused.
    #[test]
    fn names_with_a_bad_char_are_rejected(
        stem in "[.a-zA-Z0-9_-]{0,40}",
        at in any::<Index>(),
        bad in bad_char(),
        ephemeral in any::<bool>(),
    ) {
        let mut name: String = stem.clone();
        let byte_at = at.index(stem.len() + 1);
        name.insert(byte_at, bad);
        if ephemeral {
            name.push_str("#ephemeral");
        }
        prop_assert!(!is_valid_topic_name(&name), "{:?}", name);
        prop_assert!(!is_valid_channel_name(&name), "{:?}", name);
        // Through SUB, unless the character is one that shapes the line itself.
        if !matches!(bad, ' ' | '\n' | '\r') {
            prop_assert_eq!(sub_error(name.as_bytes(), b"c"), Some(ErrorCode::BadTopic));
            prop_assert_eq!(sub_error(b"t", name.as_bytes()), Some(ErrorCode::BadChannel));
        }
    }

    /// `#` anywhere but in a final `#ephemeral` after a non-empty stem: refused.
    #[test]
    fn misplaced_hash_is_rejected(
        a in "[.a-zA-Z0-9_-]{0,20}",
        b in "[.a-zA-Z0-9_#-]{0,20}".prop_filter("that is the valid suffix", |b| b != "ephemeral"),
    ) {
        let name = format!("{a}#{b}");
        prop_assert!(!is_valid_topic_name(&name), "{:?}", name);
        let just_suffix = format!("{a}#ephemeral");
        prop_assert_eq!(is_valid_topic_name(&just_suffix), !a.is_empty() && !a.contains('#'));
    }

    /// Bytes that are not UTF-8 in a SUB name: refused, not decoded lossily.
    #[test]
    fn non_utf8_names_are_rejected(stem in "[a-z]{0,10}", high in 0x80u8..=0xff) {
        let mut name = stem.into_bytes();
        name.push(high);
        prop_assert!(std::str::from_utf8(&name).is_err());
        prop_assert_eq!(sub_error(&name, b"c"), Some(ErrorCode::BadTopic));
        prop_assert_eq!(sub_error(b"t", &name), Some(ErrorCode::BadChannel));
    }

    /// Longer than 64 bytes, in the alphabet or with `#ephemeral`: refused.
    #[test]
    fn long_names_are_rejected(
        name in prop_oneof![
            "[.a-zA-Z0-9_-]{65,200}",
            "[.a-zA-Z0-9_-]{55,100}#ephemeral",
        ],
    ) {
        prop_assert!(name.len() > MAX_NAME_LENGTH);
        prop_assert!(!is_valid_topic_name(&name));
        prop_assert!(!is_valid_channel_name(&name));
        prop_assert_eq!(sub_error(name.as_bytes(), b"c"), Some(ErrorCode::BadTopic));
        prop_assert_eq!(sub_error(b"t", name.as_bytes()), Some(ErrorCode::BadChannel));
    }
}

#[test]
fn name_length_edges() {
    assert!(is_valid_topic_name(&"a".repeat(64)));
    assert!(!is_valid_topic_name(&"a".repeat(65)));
    assert!(is_valid_topic_name(&format!(
        "{}#ephemeral",
        "a".repeat(54)
    )));
    assert!(!is_valid_topic_name(&format!(
        "{}#ephemeral",
        "a".repeat(55)
    )));
    assert!(!is_valid_topic_name(""));
    assert!(!is_valid_topic_name("#ephemeral"));
}

// ---------------------------------------------------------------------------------------------
// Durations
// ---------------------------------------------------------------------------------------------

/// Below 2^23 s (about 97 days) every whole-millisecond duration round-trips; from there on
/// `format_duration` goes through an f64 of seconds and prints noise in the 9th decimal (see
/// `format_duration_is_exact_for_long_durations`).
const EXACT_DURATION_MS: u64 = (1 << 23) * 1000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn durations_round_trip_in_whole_ms(
        ms in prop_oneof![
            0..1_000u64,
            0..60_000u64,
            0..3_600_000u64,
            0..EXACT_DURATION_MS,
            // Near unit boundaries.
            (0..4u64, 0..3u64).prop_map(|(k, d)| [1_000, 60_000, 3_600_000, 86_400_000][k as usize] + d - 1),
        ],
    ) {
        let d = Duration::from_millis(ms);
        let text = format_duration(d);
        prop_assert_eq!(parse_duration(&text), Ok(d), "{}", text);
    }

    /// Whole seconds (what nsqd's settings mostly are) round-trip up to 2^32 s (136 years);
    /// above that the same f64 noise breaks them too (4890664209 s prints as
    /// `1358517h50m8.999999046s`).
    #[test]
    fn durations_round_trip_in_whole_seconds(s in 0..(1u64 << 32)) {
        let d = Duration::from_secs(s);
        let text = format_duration(d);
        prop_assert_eq!(parse_duration(&text), Ok(d), "{}", text);
    }

    /// Any string: an error or a duration, never a panic.
    #[test]
    fn parse_duration_never_panics(s in prop_oneof![
        any::<String>(),
        "[0-9.]{0,25}(ns|us|µs|ms|s|m|h|x|)([0-9.]{0,5}(ns|us|ms|s|m|h))*",
    ]) {
        let _ = parse_duration(&s);
    }
}

// ---------------------------------------------------------------------------------------------
// IDENTIFY
// ---------------------------------------------------------------------------------------------

mod identify {
    use super::*;
    use protocol::identify::{IdentifyLimits, IdentifyRequest, IdentifyResponse};

    fn request() -> impl Strategy<Value = IdentifyRequest> {
        let num = || prop_oneof![Just(-1i64), Just(0i64), -2000..200_000i64, any::<i64>()];
        (
            ("[ -~]{0,20}", "[ -~]{0,20}", any::<String>(), any::<bool>()),
            (num(), num(), num(), num(), num(), num()),
            (any::<bool>(), any::<bool>(), any::<bool>()),
        )
            .prop_map(
                |((c, h, u, f), (hb, obs, obt, dl, sr, mt), (tls, snappy, deflate))| {
                    IdentifyRequest {
                        client_id: c,
                        hostname: h,
                        user_agent: u,
                        feature_negotiation: f,
                        heartbeat_interval: hb,
                        output_buffer_size: obs,
                        output_buffer_timeout: obt,
                        tls_v1: tls,
                        snappy,
                        deflate,
                        deflate_level: dl,
                        sample_rate: sr as i32,
                        msg_timeout: mt,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// A request serialised as a client would send it parses back the same, and whatever
        /// it asks, the negotiated settings stay within the broker's limits.
        #[test]
        fn identify_round_trips_and_negotiation_respects_limits(
            req in request(),
            tls in any::<bool>(),
            snappy in any::<bool>(),
            deflate in any::<bool>(),
        ) {
            let json = serde_json::to_vec(&req).unwrap();
            let parsed = IdentifyRequest::parse(&json).unwrap();
            prop_assert_eq!(&parsed, &req);
            let limits = IdentifyLimits {
                tls_available: tls,
                snappy_available: snappy,
                deflate_available: deflate,
                ..IdentifyLimits::default()
            };
            if let Ok(n) = parsed.negotiate(&limits) {
                if let Some(hb) = n.heartbeat_ms {
                    prop_assert!(hb <= limits.max_heartbeat_ms);
                }
                prop_assert!(n.output_buffer_size <= limits.max_output_buffer_size);
                prop_assert!(n.output_buffer_timeout_ms <= limits.max_output_buffer_timeout_ms);
                prop_assert!(n.msg_timeout_ms <= limits.max_msg_timeout_ms);
                prop_assert!(n.sample_rate <= 99);
                prop_assert!(n.deflate_level <= limits.max_deflate_level);
                prop_assert!(!(n.snappy && n.deflate));
                prop_assert!(!n.tls_v1 || tls);
                let resp = IdentifyResponse::new(&n, &limits, 2500, false);
                let back: IdentifyResponse = serde_json::from_slice(&resp.to_json()).unwrap();
                prop_assert_eq!(back, resp);
            }
        }

        /// Any body: parse and negotiate return, never panic.
        #[test]
        fn identify_arbitrary_body_never_panics(body in prop_oneof![
            vec(any::<u8>(), 0..200),
            "\\{(\"[a-z_]{1,22}\":(-?[0-9]{1,20}|true|false|null|\"[a-z]{0,5}\"|\\[\\]|\\{\\}),?){0,6}\\}".prop_map(String::into_bytes),
        ]) {
            if let Ok(req) = IdentifyRequest::parse(&body) {
                let _ = req.negotiate(&IdentifyLimits::default());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Regression tests for bugs found here (fixed in protocol/src)
// ---------------------------------------------------------------------------------------------

/// BUG: `Command::encode` writes message IDs through `Display`, which is
/// `String::from_utf8_lossy`: an ID that is not UTF-8 goes out as U+FFFD replacement characters
/// (48 bytes for 16), and the broker answers E_INVALID "invalid message ID". The docs on
/// `MessageId` say clients must treat IDs as opaque bytes and echo them back.
#[test]

fn fin_with_non_utf8_id_round_trips() {
    let cmd = Command::Fin(MessageId([0xff; 16]));
    let mut buf = BytesMut::new();
    cmd.encode(&mut buf);
    assert_eq!(buf.len(), b"FIN \n".len() + 16, "encoded as {buf:?}");
    assert_eq!(
        decode_command(&mut buf, &ctx(ConnPhase::Subscribed)),
        Ok(Some(cmd))
    );
}

/// BUG: the MAX_LINE_LEN check only runs while no `\n` is in the buffer, so an overlong line
/// is refused when it arrives in several reads but accepted when the whole line (and its `\n`)
/// lands in one read. nsqd refuses it either way (bufio's ErrBufferFull).
#[test]

fn overlong_line_is_refused_however_it_arrives() {
    let mut line = b"NOP".to_vec();
    line.resize(MAX_LINE_LEN + 100, b' ');
    line.push(b'\n');
    let c = ctx(ConnPhase::Init);
    let in_two_reads = run_decoder(&line, &[MAX_LINE_LEN + 1], |b| decode_command(b, &c)).unwrap();
    assert_eq!(in_two_reads.end.unwrap_err().code, ErrorCode::Invalid);
    let in_one_read = run_decoder(&line, &[], |b| decode_command(b, &c)).unwrap();
    assert_eq!(in_one_read.items, vec![], "whole line accepted as NOP");
}

/// BUG: `format_duration` computes seconds as `ns as f64 / 1e9` and subtracts whole minutes in
/// f64, so from 2^23 s (~97 days) on it prints noise where Go prints the exact value, and the
/// text no longer parses back to the same duration.
#[test]

fn format_duration_is_exact_for_long_durations() {
    let d = Duration::from_millis(EXACT_DURATION_MS + 4);
    assert_eq!(format_duration(d), "2330h10m8.004s");
    assert_eq!(parse_duration(&format_duration(d)), Ok(d));
}

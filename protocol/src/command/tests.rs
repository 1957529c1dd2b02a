//! Unit tests of command decoding and encoding.

use super::*;

proptest::proptest! {
    /// The FIN shortcut decodes exactly what the general parser does, whatever follows
    /// `FIN ` (IDs with spaces, newlines, carriage returns, short lines, other phases).
    #[test]
    fn fin_shortcut_agrees_with_the_parser(
        id in proptest::collection::vec(
            proptest::prop_oneof![
                30 => proptest::sample::select(b"0123456789abcdef".to_vec()),
                1 => proptest::sample::select(b" \r\nX".to_vec()),
            ],
            20,
        ),
        id_len in proptest::prop_oneof![4 => proptest::strategy::Just(16usize), 1 => 0usize..20],
        tail in proptest::collection::vec(proptest::sample::select(b"\n\r FIN0".to_vec()), 0..6),
        subscribed: bool,
    ) {
        let mut line = b"FIN ".to_vec();
        line.extend_from_slice(&id[..id_len]);
        line.extend_from_slice(&tail);
        let c = ctx(if subscribed { ConnPhase::Subscribed } else { ConnPhase::Init });
        let mut fast = BytesMut::from(&line[..]);
        let mut general = BytesMut::from(&line[..]);
        let a = format!("{:?}", decode_command(&mut fast, &c));
        let b = format!("{:?}", decode_any_command(&mut general, &c, &mut DecodeProgress::default()));
        proptest::prop_assert_eq!(a, b);
        proptest::prop_assert_eq!(fast, general);
    }
}

fn ctx(phase: ConnPhase) -> DecodeContext {
    DecodeContext {
        phase,
        heartbeats_enabled: true,
        limits: Limits {
            max_msg_size: 1024,
            max_body_size: 4096,
            max_rdy_count: 50,
            max_req_timeout_ms: 60_000,
        },
    }
}

fn decode(bytes: &[u8], phase: ConnPhase) -> Result<Option<Command>, ProtocolError> {
    let mut buf = BytesMut::from(bytes);
    decode_command(&mut buf, &ctx(phase))
}

fn err_text(bytes: &[u8], phase: ConnPhase) -> String {
    decode(bytes, phase).unwrap_err().frame_text()
}

#[test]
fn fixture_error_texts() {
    use ConnPhase::*;
    let cases: &[(&[u8], ConnPhase, &str)] = &[
        (b"FOO\n", Init, "E_INVALID invalid command FOO"),
        (
            b"PUB bad*topic\n",
            Init,
            "E_BAD_TOPIC PUB topic name \"bad*topic\" is not valid",
        ),
        (
            b"MPUB bad*topic\n",
            Init,
            "E_BAD_TOPIC E_BAD_TOPIC MPUB topic name \"bad*topic\" is not valid",
        ),
        (
            b"DPUB bad*topic 10\n",
            Init,
            "E_BAD_TOPIC DPUB topic name \"bad*topic\" is not valid",
        ),
        (
            b"PUB t\n\0\0\0\0",
            Init,
            "E_BAD_MESSAGE PUB invalid message body size 0",
        ),
        (
            b"PUB t\n\0\0\x04\x01",
            Init,
            "E_BAD_MESSAGE PUB message too big 1025 > 1024",
        ),
        (
            b"MPUB t\n\0\0\0\x04\0\0\0\0",
            Init,
            "E_BAD_BODY MPUB invalid message count 0",
        ),
        (
            b"DPUB t 60001\n",
            Init,
            "E_INVALID DPUB timeout 60001 out of range 0-60000",
        ),
        (b"RDY 1\n", Init, "E_INVALID cannot RDY in current state"),
        (
            b"FIN 0123456789abcdef\n",
            Init,
            "E_INVALID cannot FIN in current state",
        ),
        (b"CLS\n", Init, "E_INVALID cannot CLS in current state"),
        (
            b"SUB t\n",
            Init,
            "E_INVALID SUB insufficient number of parameters",
        ),
        (
            b"SUB bad!topic c\n",
            Init,
            "E_BAD_TOPIC SUB topic name \"bad!topic\" is not valid",
        ),
        (
            b"SUB t bad!chan\n",
            Init,
            "E_BAD_CHANNEL SUB channel name \"bad!chan\" is not valid",
        ),
        (b"FIN 0123\n", Subscribed, "E_INVALID invalid message ID"),
        (
            b"RDY 51\n",
            Subscribed,
            "E_INVALID RDY count 51 out of range 0-50",
        ),
        (
            b"IDENTIFY\n\0\0\0\0",
            Init,
            "E_BAD_BODY IDENTIFY invalid body size 0",
        ),
        (
            b"SUB t c\n",
            Subscribed,
            "E_INVALID cannot SUB in current state",
        ),
        (
            b"REQ 0123456789abcdef -1\n",
            Subscribed,
            "E_INVALID REQ could not parse timeout -1",
        ),
    ];
    for (input, phase, want) in cases {
        assert_eq!(
            &err_text(input, *phase),
            want,
            "{}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn lines_with_many_parameters_decode_like_short_ones() {
    // More parameters than the stack holds: the heap split sees the same ones.
    for extra in [0usize, 5, 6, 20] {
        let mut line = b"SUB t c".to_vec();
        for _ in 0..extra {
            line.extend_from_slice(b" x");
        }
        line.push(b'\n');
        match decode(&line, ConnPhase::Init) {
            Ok(Some(Command::Sub { topic, channel })) => {
                assert_eq!(
                    (topic.as_str(), channel.as_str()),
                    ("t", "c"),
                    "{extra} extra"
                );
            }
            other => panic!("{extra} extra parameters: {other:?}"),
        }
    }
    assert_eq!(
        err_text(b"AUTH a b c d e f g h i j\n", ConnPhase::Init),
        err_text(b"AUTH a\n", ConnPhase::Init)
    );
}

#[test]
fn mpub_message_sizes_are_refused_as_each_arrives() {
    // Body size 4096 announced, nothing of the first message's body yet.
    assert_eq!(
        err_text(b"MPUB t\n\0\0\x10\0\0\0\0\x02\0\0\x04\x01", ConnPhase::Init),
        "E_BAD_MESSAGE MPUB message too big 1025 > 1024"
    );
    assert_eq!(
        err_text(b"MPUB t\n\0\0\x10\0\0\0\0\x02\0\0\0\0", ConnPhase::Init),
        "E_BAD_MESSAGE MPUB invalid message(0) body size 0"
    );
    // The second size, after a complete first message, before the rest of the body.
    assert_eq!(
        err_text(
            b"MPUB t\n\0\0\x10\0\0\0\0\x03\0\0\0\x02ab\xff\xff\xff\xff",
            ConnPhase::Init
        ),
        "E_BAD_MESSAGE MPUB invalid message(1) body size -1"
    );
    // Sizes that are fine leave the command waiting for its body.
    assert_eq!(
        decode(b"MPUB t\n\0\0\x10\0\0\0\0\x02\0\0\x04\0", ConnPhase::Init),
        Ok(None)
    );
}

#[test]
fn mpub_checked_piece_by_piece_resumes_and_decodes_the_same() {
    let c = ctx(ConnPhase::Init);
    let mut whole = BytesMut::new();
    Command::Mpub {
        topic: "t".into(),
        bodies: (1..=20u8)
            .map(|n| Bytes::from(vec![n; n as usize]))
            .collect(),
    }
    .encode(&mut whole);
    let mut progress = DecodeProgress::default();
    let mut buf = BytesMut::new();
    let mut got = None;
    for &b in whole.iter() {
        buf.extend_from_slice(&[b]);
        if let Some(cmd) = decode_command_resuming(&mut buf, &c, &mut progress).unwrap() {
            got = Some(cmd);
        }
    }
    assert_eq!(
        progress,
        DecodeProgress::default(),
        "reset after the command"
    );
    let expected = decode_command(&mut whole.clone(), &c).unwrap();
    assert_eq!(got, expected);
    assert!(buf.is_empty());
    // A bad size late in the body is found as soon as its four bytes are in.
    let k = 15;
    let at = 15 + (0..k).map(|i| 4 + i + 1).sum::<usize>();
    let mut bad = whole[..at + 4].to_vec();
    bad[at..].copy_from_slice(&2000i32.to_be_bytes());
    let mut progress = DecodeProgress::default();
    let mut buf = BytesMut::new();
    for (n, &b) in bad.iter().enumerate() {
        buf.extend_from_slice(&[b]);
        let r = decode_command_resuming(&mut buf, &c, &mut progress);
        if n + 1 < bad.len() {
            assert_eq!(r, Ok(None), "byte {n}");
        } else {
            assert_eq!(
                r.unwrap_err().frame_text(),
                "E_BAD_MESSAGE MPUB message too big 2000 > 1024"
            );
        }
    }
}

#[test]
fn waits_for_whole_commands() {
    assert_eq!(decode(b"PUB t", ConnPhase::Init), Ok(None));
    assert_eq!(decode(b"PUB t\n\0\0", ConnPhase::Init), Ok(None));
    assert_eq!(decode(b"PUB t\n\0\0\0\x03ab", ConnPhase::Init), Ok(None));
    assert_eq!(decode(b"MPUB t\n\0\0\0\x0a\0\0", ConnPhase::Init), Ok(None));
}

#[test]
fn decodes_pipelined_commands_and_strips_cr() {
    let mut buf = BytesMut::from(&b"NOP\r\nRDY\nFIN 0123456789abcdef\n"[..]);
    let c = ctx(ConnPhase::Subscribed);
    assert_eq!(decode_command(&mut buf, &c), Ok(Some(Command::Nop)));
    assert_eq!(decode_command(&mut buf, &c), Ok(Some(Command::Rdy(1))));
    assert_eq!(
        decode_command(&mut buf, &c),
        Ok(Some(Command::Fin(MessageId(*b"0123456789abcdef"))))
    );
    assert_eq!(decode_command(&mut buf, &c), Ok(None));
}

#[test]
fn rdy_ignored_when_closing() {
    assert_eq!(
        decode(b"RDY zz\n", ConnPhase::Closing),
        Ok(Some(Command::Nop))
    );
}

#[test]
fn mpub_trailing_bytes_rejected() {
    let mut out = BytesMut::new();
    out.put_slice(b"MPUB t\n");
    out.put_u32(4 + 4 + 1 + 2);
    out.put_u32(1);
    out.put_u32(1);
    out.put_slice(b"a");
    out.put_slice(b"zz");
    let e = decode_command(&mut out, &ctx(ConnPhase::Init)).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadBody);
}

#[test]
fn overlong_line_is_an_error() {
    let long = vec![b'a'; MAX_LINE_LEN + 1];
    assert_eq!(
        decode(&long, ConnPhase::Init).unwrap_err().code,
        ErrorCode::Invalid
    );
}

#[test]
fn heartbeats_disabled_blocks_sub() {
    let mut c = ctx(ConnPhase::Init);
    c.heartbeats_enabled = false;
    let mut buf = BytesMut::from(&b"SUB t c\n"[..]);
    assert_eq!(
        decode_command(&mut buf, &c).unwrap_err().frame_text(),
        "E_INVALID cannot SUB with heartbeats disabled"
    );
}

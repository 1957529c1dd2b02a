//! Never-panic properties of the lookup protocol V1 decoders (`decode_lookup_command` on the
//! lookup's side, `decode_reply` on the broker's): any bytes, and mutations of a real session,
//! give commands, "need more", or a fatal error; "need more" consumes nothing; the commands do
//! not depend on how the bytes were cut into reads; what is decoded encodes back to itself.

use bytes::BytesMut;
use proptest::collection::vec;
use proptest::prelude::*;
use protocol::lookup::{decode_lookup_command, decode_reply, LookupCommand};
use protocol::ProtocolError;

const SESSION: &[u8] = b"IDENTIFY\n\x00\x00\x00\x5b{\"broadcast_address\":\"h\",\"hostname\":\"h\",\"http_port\":4151,\"tcp_port\":4150,\"version\":\"1.3.0\"}REGISTER t c\nPING\nUNREGISTER t c\nREGISTER t#ephemeral\n";

fn drain(
    buf: &mut BytesMut,
    identified: &mut bool,
    out: &mut Vec<LookupCommand>,
) -> Option<ProtocolError> {
    loop {
        let before = buf.len();
        match decode_lookup_command(buf, *identified) {
            Ok(Some(cmd)) => {
                assert!(buf.len() < before);
                *identified |= matches!(cmd, LookupCommand::Identify(_));
                out.push(cmd);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before);
                return None;
            }
            Err(e) => {
                assert!(e.fatal);
                return Some(e);
            }
        }
    }
}

fn check(stream: &[u8], step: usize, identified: bool) {
    let mut whole = Vec::new();
    let mut id = identified;
    let whole_end = drain(&mut BytesMut::from(stream), &mut id, &mut whole);

    let mut pieces = Vec::new();
    let mut id = identified;
    let mut buf = BytesMut::new();
    let mut piece_end = None;
    for part in stream.chunks(step.max(1)) {
        buf.extend_from_slice(part);
        piece_end = drain(&mut buf, &mut id, &mut pieces);
        if piece_end.is_some() {
            break;
        }
    }
    assert_eq!(&whole, &pieces);
    assert_eq!(whole_end, piece_end);
    for cmd in whole {
        let mut wire = BytesMut::new();
        cmd.encode(&mut wire);
        let id = !matches!(cmd, LookupCommand::Identify(_));
        assert_eq!(decode_lookup_command(&mut wire, id), Ok(Some(cmd)));
        assert!(wire.is_empty());
    }
    let mut buf = BytesMut::from(stream);
    while let Ok(Some(_)) = decode_reply(&mut buf, 64) {}
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 0..6).prop_map(|edits| {
        let mut v = SESSION.to_vec();
        for (at, kind, byte) in edits {
            let i = at.index(v.len() + 1);
            match kind {
                0 if i < v.len() => v[i] = byte,
                1 => v.insert(i, byte),
                _ if i < v.len() => {
                    v.remove(i);
                }
                _ => {}
            }
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_never_panic(stream in vec(any::<u8>(), 0..400), step in 1usize..64, id in any::<bool>()) {
        check(&stream, step, id);
    }

    #[test]
    fn mutated_sessions_never_panic(stream in mutated(), step in 1usize..64, id in any::<bool>()) {
        check(&stream, step, id);
    }
}

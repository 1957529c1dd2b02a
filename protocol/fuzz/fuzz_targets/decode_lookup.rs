//! The lookup protocol V1: `decode_lookup_command` over a peer's bytes, as the lookup's
//! connection loop drives it, and `decode_reply` over the same bytes, as the broker reads a
//! lookup's answers.
//!
//! Input: `[flags][read size][stream...]`: flags bit 0 says whether the peer has identified
//! already, bits 1-7 pick the reply size bound. Checked, beyond "no panic": `Ok(None)` consumes
//! nothing and `Ok(Some)` consumes bytes; every error is fatal; fed in reads of 1-64 bytes the
//! stream gives the same commands and the same end as fed whole; each decoded command, encoded
//! again, decodes to itself; a reply takes its size field's bytes and no more.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use protocol::lookup::{decode_lookup_command, decode_reply, LookupCommand, LookupReply};
use protocol::ProtocolError;

/// Decodes everything in `buf`; the end is `Err` or `None` (more bytes needed).
fn drain(
    buf: &mut BytesMut,
    identified: &mut bool,
    out: &mut Vec<LookupCommand>,
) -> Option<ProtocolError> {
    loop {
        let before = buf.len();
        match decode_lookup_command(buf, *identified) {
            Ok(Some(cmd)) => {
                assert!(buf.len() < before, "a command consumes bytes");
                *identified |= matches!(cmd, LookupCommand::Identify(_));
                out.push(cmd);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "Ok(None) consumes nothing");
                return None;
            }
            Err(e) => {
                assert!(e.fatal, "every lookup protocol error is fatal: {e:?}");
                return Some(e);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, chunk, stream @ ..] = data else {
        return;
    };
    let start_identified = flags & 1 != 0;

    let mut whole = Vec::new();
    let mut identified = start_identified;
    let mut buf = BytesMut::from(stream);
    let whole_end = drain(&mut buf, &mut identified, &mut whole);

    let step = 1 + (*chunk as usize % 64);
    let mut pieces = Vec::new();
    let mut identified = start_identified;
    let mut buf = BytesMut::new();
    let mut piece_end = None;
    for part in stream.chunks(step) {
        buf.extend_from_slice(part);
        piece_end = drain(&mut buf, &mut identified, &mut pieces);
        if piece_end.is_some() {
            break;
        }
    }
    assert_eq!(whole, pieces, "the same commands however the bytes arrive");
    assert_eq!(whole_end, piece_end, "the same end however the bytes arrive");

    for cmd in &whole {
        let mut wire = BytesMut::new();
        cmd.encode(&mut wire);
        let identified = !matches!(cmd, LookupCommand::Identify(_));
        let back = decode_lookup_command(&mut wire, identified);
        assert_eq!(back, Ok(Some(cmd.clone())), "{cmd:?} encodes to what decodes to it");
        assert!(wire.is_empty());
    }

    let max_size = u32::from(flags >> 1) * 16;
    let mut buf = BytesMut::from(stream);
    loop {
        let before = buf.len();
        match decode_reply(&mut buf, max_size) {
            Ok(Some(reply)) => {
                let len = match &reply {
                    LookupReply::Ok => 2,
                    LookupReply::Data(d) => d.len(),
                    LookupReply::Error(_) => continue,
                };
                assert_eq!(before - buf.len(), 4 + len);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before);
                break;
            }
            Err(e) => {
                let _ = e.to_string();
                break;
            }
        }
    }
});

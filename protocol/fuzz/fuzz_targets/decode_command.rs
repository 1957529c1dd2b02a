//! Feeds bytes to `decode_command` as a connection's read loop would.
//!
//! Input: `[context selector][chunk selector][stream...]`.
//! - context selector: bits 0-1 the phase (Init, Subscribed, Closing, Init), bit 2 heartbeats
//!   disabled, bits 3-4 the limits (nsqd's defaults, tiny, zero, large).
//! - chunk selector: the read size for the second, chunked pass (1 + byte % 64).
//!
//! Checked, beyond "no panic":
//! - `Ok(None)` leaves the buffer untouched, `Ok(Some)` consumes at least one byte, errors are
//!   fatal;
//! - the same stream fed in small reads gives the same commands and the same end;
//! - every decoded command, encoded again, decodes to itself in the same context.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use protocol::command::MAX_LINE_LEN;
use protocol::{decode_command, Command, ConnPhase, DecodeContext, Limits, MessageId};

fn context(sel: u8) -> DecodeContext {
    let phase = match sel & 3 {
        1 => ConnPhase::Subscribed,
        2 => ConnPhase::Closing,
        _ => ConnPhase::Init,
    };
    let limits = match (sel >> 3) & 3 {
        0 => Limits::default(),
        1 => Limits {
            max_msg_size: 16,
            max_body_size: 64,
            max_rdy_count: 10,
            max_req_timeout_ms: 1000,
        },
        2 => Limits {
            max_msg_size: 0,
            max_body_size: 0,
            max_rdy_count: 0,
            max_req_timeout_ms: 0,
        },
        // Huge limits: a client-claimed MPUB count must never size an allocation (this once
        // allocated gigabytes from a 15-byte command; run with -malloc_limit_mb to catch it).
        _ => Limits {
            max_msg_size: u32::MAX as u64,
            max_body_size: u32::MAX as u64,
            max_rdy_count: u64::MAX,
            max_req_timeout_ms: u64::MAX,
        },
    };
    DecodeContext {
        phase,
        heartbeats_enabled: sel & 4 == 0,
        limits,
    }
}

#[derive(Debug, PartialEq)]
struct Outcome {
    cmds: Vec<Command>,
    /// `Ok(leftover)` when the decoder wanted more, `Err(text)` when it failed.
    end: Result<Vec<u8>, String>,
}

/// Feeds `stream` in reads of `chunk` bytes, decoding after each read until `None` or an error.
fn run(stream: &[u8], chunk: usize, ctx: &DecodeContext) -> Outcome {
    let mut buf = BytesMut::new();
    let mut cmds = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.clone();
            match decode_command(&mut buf, ctx) {
                Ok(Some(cmd)) => {
                    assert!(buf.len() < before.len(), "{cmd:?} consumed nothing");
                    assert_eq!(&buf[..], &before[before.len() - buf.len()..]);
                    cmds.push(cmd);
                }
                Ok(None) => {
                    assert_eq!(buf, before, "Ok(None) changed the buffer");
                    break;
                }
                Err(e) => {
                    assert!(e.fatal, "decode errors are all fatal: {e:?}");
                    return Outcome {
                        cmds,
                        end: Err(e.frame_text()),
                    };
                }
            }
        }
    }
    Outcome {
        cmds,
        end: Ok(buf.to_vec()),
    }
}

/// IDs that survive `Command::encode`: all of them, except one ending in `\r`, which the
/// decoder's CR stripping takes when it ends the line (as in nsqd: a protocol limit, not a bug).
fn echoable(id: &MessageId) -> bool {
    id.0[15] != b'\r'
}

fn re_encodable(cmd: &Command) -> bool {
    match cmd {
        Command::Fin(id) | Command::Touch(id) | Command::Req { id, .. } => echoable(id),
        _ => true,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let ctx = context(data[0]);
    let chunk = 1 + (data[1] as usize % 64);
    let stream = &data[2..];

    let whole = run(stream, stream.len(), &ctx);

    // However the stream is cut into reads, the outcome is the same.
    let chunked = run(stream, chunk, &ctx);
    assert_eq!(whole, chunked, "chunk size {chunk} changed the outcome");

    for cmd in whole.cmds.iter().filter(|c| re_encodable(c)) {
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf);
        let encoded = buf.clone();
        match decode_command(&mut buf, &ctx) {
            Ok(Some(again)) => {
                assert_eq!(&again, cmd, "re-encoded as {encoded:?}");
                assert!(buf.is_empty(), "re-encoded {cmd:?} left {buf:?}");
            }
            other => panic!("{cmd:?} re-encoded as {encoded:?} decodes to {other:?}"),
        }
    }
});

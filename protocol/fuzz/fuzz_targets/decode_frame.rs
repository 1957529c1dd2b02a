//! Feeds bytes to `decode_frame` as a client's read loop would.
//!
//! Input: `[max_size selector][chunk selector][stream...]`. Checked, beyond "no panic": the
//! `Ok(None)`/`Ok(Some)` contract, that reads of any size give the same outcome, and that the
//! frames decoded, written again, are byte for byte what they were decoded from.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use protocol::frame::{write_frame, write_message_frame, FrameError};
use protocol::{decode_frame, Frame, FrameType};

#[derive(Debug, PartialEq)]
struct Outcome {
    frames: Vec<Frame>,
    end: Result<Vec<u8>, FrameError>,
}

fn run(stream: &[u8], chunk: usize, max_size: u32) -> Outcome {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.clone();
            match decode_frame(&mut buf, max_size) {
                Ok(Some(f)) => {
                    assert!(buf.len() < before.len(), "{f:?} consumed nothing");
                    frames.push(f);
                }
                Ok(None) => {
                    assert_eq!(buf, before, "Ok(None) changed the buffer");
                    break;
                }
                Err(e) => {
                    return Outcome {
                        frames,
                        end: Err(e),
                    }
                }
            }
        }
    }
    Outcome {
        frames,
        end: Ok(buf.to_vec()),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let max_size = match data[0] % 6 {
        0 => 0,
        1 => 4,
        2 => 30,
        3 => 64,
        4 => 1 << 20,
        _ => u32::MAX,
    };
    let chunk = 1 + (data[1] as usize % 64);
    let stream = &data[2..];

    let whole = run(stream, stream.len(), max_size);
    let chunked = run(stream, chunk, max_size);
    assert_eq!(whole, chunked, "chunk size {chunk} changed the outcome");

    let mut out = BytesMut::new();
    for f in &whole.frames {
        match f {
            Frame::Response(d) => write_frame(&mut out, FrameType::Response, d),
            Frame::Error(d) => write_frame(&mut out, FrameType::Error, d),
            Frame::Message(m) => write_message_frame(&mut out, m),
        }
    }
    assert_eq!(&out[..], &stream[..out.len()], "frames re-written differ");
    if let Ok(left) = &whole.end {
        assert_eq!(out.len() + left.len(), stream.len());
    }
});

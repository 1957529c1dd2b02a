//! Micro-benchmarks of the wire codec's hot paths: decoding the commands a broker reads most
//! (PUB, MPUB, FIN), encoding the message frames it writes, and, for comparison, decoding an
//! HTTP `/pub` with the `http1` crate.
//!
//! `cargo bench -p protocol` (a plain harness, no extra crates). Each case runs 15 samples of
//! a fixed batch after a warm-up and prints the median and the fastest sample in nanoseconds
//! per operation. Compare only runs made back to back on one machine: it is shared, so its
//! speed drifts (docs/benchmarks.md, "Codec micro-benchmarks").

use std::hint::black_box;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http1::{Decoded, Limits, RequestDecoder};
use protocol::command::{decode_command, Command, ConnPhase, DecodeContext};
use protocol::frame::write_message_frame;
use protocol::message::{Message, MessageId};

/// Operations per sample.
const BATCH: usize = 2_000;
const SAMPLES: usize = 15;

/// Times `run` (which performs `BATCH` operations on what `setup` made) and prints ns per
/// operation; `setup` is not timed.
fn bench<S, F: FnMut(S)>(name: &str, mut setup: impl FnMut() -> S, mut run: F) {
    for _ in 0..3 {
        run(setup());
    }
    let mut per_op: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let input = setup();
            let start = Instant::now();
            run(input);
            start.elapsed().as_nanos() as f64 / BATCH as f64
        })
        .collect();
    per_op.sort_by(f64::total_cmp);
    println!(
        "{name:<44} median {:>8.1} ns/op   fastest {:>8.1} ns/op",
        per_op[SAMPLES / 2],
        per_op[0]
    );
}

fn commands(one: impl Fn(usize, &mut BytesMut)) -> Vec<u8> {
    let mut out = BytesMut::new();
    for i in 0..BATCH {
        one(i, &mut out);
    }
    out.to_vec()
}

/// Decodes every command of `wire` (BATCH of them) in `phase`.
fn decode_all(name: &str, wire: &[u8], phase: ConnPhase) {
    let ctx = DecodeContext {
        phase,
        ..DecodeContext::default()
    };
    bench(
        name,
        || BytesMut::from(wire),
        |mut buf| {
            let mut n = 0;
            while let Ok(Some(cmd)) = decode_command(&mut buf, &ctx) {
                black_box(&cmd);
                n += 1;
            }
            assert_eq!(n, BATCH);
        },
    );
}

fn main() {
    let body = Bytes::from(vec![b'x'; 200]);

    let pubs = commands(|_, out| {
        Command::Pub {
            topic: "bench".into(),
            body: body.clone(),
        }
        .encode(out)
    });
    decode_all("decode PUB, 200-byte body", &pubs, ConnPhase::Init);

    let fins = commands(|i, out| Command::Fin(MessageId::from_u64(i as u64)).encode(out));
    decode_all("decode FIN", &fins, ConnPhase::Subscribed);

    // Numbers spread over the whole range, and their IDs.
    let numbers: Vec<u64> = (0..BATCH as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let ids: Vec<MessageId> = numbers.iter().map(|&n| MessageId::from_u64(n)).collect();

    // The number behind a FIN's ID (the broker's in-flight lookup key).
    bench(
        "message ID to its number",
        || ids.clone(),
        |ids| {
            let mut sum = 0u64;
            for id in &ids {
                sum = sum.wrapping_add(black_box(id).to_u64().unwrap_or(0));
            }
            black_box(sum);
        },
    );

    // The ID of every message published.
    bench(
        "message ID from its number",
        || numbers.clone(),
        |numbers| {
            let mut last = 0u8;
            for &n in &numbers {
                last ^= black_box(MessageId::from_u64(black_box(n))).0[15];
            }
            black_box(last);
        },
    );

    // One MPUB of 200 bodies counts as 200 operations here: BATCH / 200 commands.
    let mpub = commands(|i, out| {
        if i % 200 == 0 {
            Command::Mpub {
                topic: "bench".into(),
                bodies: vec![body.clone(); 200],
            }
            .encode(out)
        }
    });
    let ctx = DecodeContext::default();
    bench(
        "decode MPUB of 200, per message",
        || BytesMut::from(&mpub[..]),
        |mut buf| {
            let mut n = 0;
            while let Ok(Some(Command::Mpub { bodies, .. })) = decode_command(&mut buf, &ctx) {
                n += bodies.len();
            }
            assert_eq!(n, BATCH);
        },
    );

    let msgs: Vec<Message> = (0..BATCH as u64)
        .map(|i| Message {
            id: MessageId::from_u64(i),
            timestamp: i as i64,
            attempts: 1,
            body: body.clone(),
        })
        .collect();
    bench(
        "encode message frame, 200-byte body",
        || BytesMut::with_capacity(BATCH * 250),
        |mut out| {
            for m in &msgs {
                write_message_frame(&mut out, m);
            }
            black_box(&out);
        },
    );

    let request =
        b"POST /pub?topic=bench HTTP/1.1\r\nHost: 127.0.0.1:4151\r\nContent-Length: 200\r\n\r\n";
    let mut one = request.to_vec();
    one.extend_from_slice(&body);
    let http: Vec<u8> = one.repeat(BATCH);
    bench(
        "decode HTTP POST /pub, 200-byte body",
        || {
            (
                RequestDecoder::new(Limits::default()),
                BytesMut::from(&http[..]),
            )
        },
        |(mut decoder, mut buf)| {
            let mut n = 0;
            while let Ok(Decoded::Request(req)) = decoder.decode(&mut buf) {
                black_box(&req);
                n += 1;
            }
            assert_eq!(n, BATCH);
        },
    );
}

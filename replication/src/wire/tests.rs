//! The codec's properties (round trips in any chunking, arbitrary bytes, limits) and the link
//! driven by real replicas: handshakes, backpressure, and what idle topics cost on the wire.

use proptest::prelude::*;

use super::codec::{decode_frame, encoded_len, forward_len};
use super::*;
use crate::ids::{BrokerId, Epoch};
use crate::replica::{
    Batch, MemLog, Msg, Output, PublishId, Record, Replica, ReplicaConfig, ReplicaLog, TopicState,
};

const MAX: usize = 1 << 16;

fn topic() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._-]{1,64}"
}

fn msg() -> impl Strategy<Value = Msg> {
    let record = (
        any::<u64>(),
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(seq, crc, bytes)| Record { seq, crc, bytes });
    prop_oneof![
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(record, 0..6)
        )
            .prop_map(|(e, hw, base, be, records)| Msg::Append {
                epoch: Epoch(e),
                hw,
                base,
                batch: Batch {
                    epoch: Epoch(be),
                    records,
                },
            }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(e, incarnation, end, durable_end, clean, resend)| Msg::Ack {
                    epoch: Epoch(e),
                    incarnation,
                    end,
                    durable_end,
                    clean,
                    resend,
                }
            ),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(e, hw, start)| Msg::StartAt {
            epoch: Epoch(e),
            hw,
            start,
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(e, l)| Msg::EpochEndQuery {
            epoch: Epoch(e),
            last_epoch: Epoch(l),
        }),
        (
            any::<u64>(),
            any::<u64>(),
            prop::option::of((any::<u64>(), any::<u64>()))
        )
            .prop_map(|(e, a, found)| Msg::EpochEndAnswer {
                epoch: Epoch(e),
                asked: Epoch(a),
                found: found.map(|(fe, s)| (Epoch(fe), s)),
            }),
    ]
}

fn dead_origin() -> impl Strategy<Value = DeadOrigin> {
    (
        topic(),
        topic(),
        any::<[u8; 16]>(),
        any::<u16>(),
        any::<i64>(),
    )
        .prop_map(|(topic, channel, id, attempts, timestamp)| DeadOrigin {
            topic,
            channel,
            id,
            attempts,
            timestamp,
        })
}

fn dead_letter() -> impl Strategy<Value = DeadLetter> {
    (
        any::<[u8; 16]>(),
        any::<u64>(),
        dead_origin(),
        any::<i64>(),
        any::<u64>(),
        "\\PC{0,20}",
    )
        .prop_map(
            |(id, seq, origin, dead_lettered_at, body_size, preview)| DeadLetter {
                id,
                seq,
                origin,
                dead_lettered_at,
                body_size,
                preview,
            },
        )
}

fn forward() -> impl Strategy<Value = Forward> {
    let op = prop_oneof![
        Just(ChannelOp::Created),
        Just(ChannelOp::Deleted),
        any::<bool>().prop_map(ChannelOp::Paused),
        (
            any::<u64>(),
            prop::collection::btree_set(any::<u64>(), 0..6)
        )
            .prop_map(|(cursor, set)| {
                // Owed seqs strictly increasing below the cursor.
                let owed: Vec<u64> = set.into_iter().filter(|&s| s < u64::MAX).collect();
                let cursor = cursor.max(owed.last().map_or(0, |&s| s + 1));
                ChannelOp::Position { cursor, owed }
            }),
        any::<u64>().prop_map(|to| ChannelOp::Rewound { to }),
        (prop::option::of(any::<u16>()), prop::option::of(topic())).prop_map(
            |(max_attempts, dead_letter_topic)| ChannelOp::Config {
                max_attempts,
                dead_letter_topic
            }
        ),
    ];
    let dead_op = prop_oneof![
        prop::collection::vec(dead_letter(), 0..4).prop_map(DeadLetterOp::Records),
        prop::collection::vec(dead_letter(), 0..4).prop_map(DeadLetterOp::Replace),
        prop::collection::vec(any::<[u8; 16]>(), 0..4).prop_map(DeadLetterOp::Forgotten),
        (any::<u32>(), any::<u32>()).prop_map(|(count, crc)| DeadLetterOp::Digest { count, crc }),
        Just(DeadLetterOp::Wanted),
    ];
    prop_oneof![
        (
            any::<u64>(),
            topic(),
            any::<u64>(),
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..5),
            any::<bool>(),
            dead_origin(),
        )
            .prop_map(
                |(id, topic, defer_ms, bodies, dead, origin)| Forward::Publish {
                    id,
                    topic,
                    defer_ms,
                    origins: if dead {
                        vec![origin; bodies.len()]
                    } else {
                        Vec::new()
                    },
                    bodies: bodies.into_iter().map(bytes::Bytes::from).collect(),
                }
            ),
        (topic(), dead_op).prop_map(|(topic, op)| Forward::DeadLetters { topic, op }),
        (any::<u64>(), prop::option::of("\\PC{0,40}")).prop_map(|(id, err)| Forward::Answer {
            id,
            result: err.map_or(Ok(()), Err),
        }),
        (topic(), topic(), op).prop_map(|(topic, channel, op)| Forward::Channel {
            topic,
            channel,
            op
        }),
        (
            topic(),
            any::<bool>(),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>())
        )
            .prop_map(|(topic, paused, time, bytes)| Forward::Topic {
                topic,
                config: TopicConfig {
                    paused,
                    retention_time_ns: time,
                    retention_bytes: bytes,
                },
            }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        prop::collection::vec(forward(), 0..6).prop_map(Frame::Forwards),
        ("[ -~]{1,64}", any::<u64>(), any::<u64>()).prop_map(|(c, b, i)| Frame::Hello(Hello {
            cluster_id: c,
            broker: BrokerId(b),
            incarnation: i,
        })),
        prop::collection::vec(
            (topic(), msg()).prop_map(|(topic, msg)| TopicMsg { topic, msg }),
            0..8
        )
        .prop_map(Frame::Messages),
        (
            any::<u64>(),
            prop::collection::vec(topic(), 0..4),
            prop::collection::vec(topic(), 0..4)
        )
            .prop_map(|(seq, forget_heartbeats, forget_acks)| Frame::Tick {
                seq,
                forget_heartbeats,
                forget_acks,
            }),
    ]
}

/// The replica messages among what a link received.
fn replica_deliveries(got: &[Inbound]) -> impl Iterator<Item = &Delivery> {
    got.iter().filter_map(|i| match i {
        Inbound::Replica(d) => Some(d),
        Inbound::Forward(_) => None,
    })
}

/// Feeds `bytes` cut at `cuts` (positions taken modulo the length).
fn feed_chunked(bytes: &[u8], cuts: &[usize]) -> (Vec<Frame>, Result<(), WireError>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.push(0);
    cuts.push(bytes.len());
    cuts.sort_unstable();
    let mut d = Decoder::new(MAX);
    let mut frames = Vec::new();
    for w in cuts.windows(2) {
        if let Err(e) = d.feed(&bytes[w[0]..w[1]], &mut frames) {
            return (frames, Err(e));
        }
        assert!(d.buffered() <= MAX + 4, "decoder holds more than one frame");
    }
    (frames, Ok(()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frames_round_trip_in_any_chunking(
        frames in prop::collection::vec(frame(), 1..5),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut bytes = Vec::new();
        for f in &frames {
            encode(f, MAX, &mut bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let (decoded, r) = feed_chunked(&bytes, &cuts);
        prop_assert_eq!(r, Ok(()));
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn encoded_len_is_exact(t in topic(), m in msg()) {
        let mut bytes = Vec::new();
        let f = Frame::Messages(vec![TopicMsg { topic: t.clone(), msg: m.clone() }]);
        encode(&f, MAX, &mut bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(bytes.len(), 4 + 2 + 4 + encoded_len(&t, &m));
    }

    #[test]
    fn forward_len_is_exact(f in forward()) {
        let mut bytes = Vec::new();
        encode(&Frame::Forwards(vec![f.clone()]), MAX, &mut bytes)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(bytes.len(), 4 + 2 + 4 + forward_len(&f));
    }

    /// A forwards frame cut short at any position is refused with a typed error naming the
    /// field it ends in (or a count the rest cannot hold), never taken nor a panic.
    #[test]
    fn forwards_cut_anywhere_are_refused(fs in prop::collection::vec(forward(), 1..4)) {
        let mut bytes = Vec::new();
        encode(&Frame::Forwards(fs.clone()), MAX, &mut bytes)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let body = &bytes[4..];
        prop_assert_eq!(decode_frame(body), Ok(Frame::Forwards(fs)));
        for cut in 0..body.len() {
            let r = decode_frame(&body[..cut]);
            prop_assert!(
                matches!(r, Err(WireError::Truncated(_) | WireError::CountTooLarge { .. })),
                "cut at {}: {:?}", cut, r
            );
        }
    }

    /// Whatever mix of replica messages and forwards is queued, with whatever frame size, the
    /// peer's link hands them out in the order they were queued, consecutive ones sharing
    /// frames.
    #[test]
    fn forwards_and_messages_arrive_in_the_order_sent(
        items in prop::collection::vec(prop_oneof![
            (topic(), msg()).prop_map(|(t, m)| Err((t, m))),
            forward().prop_map(Ok),
        ], 1..40),
        max_frame in 700usize..4096,
        ticks in prop::collection::vec(any::<bool>(), 40),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let cfg = LinkConfig { max_frame, ..LinkConfig::default() };
        let mut a = Link::new(hello(1), BrokerId(2), cfg.clone());
        let mut b = Link::new(hello(2), BrokerId(1), cfg);
        let mut hello_a = Vec::new();
        a.poll_transmit(&mut hello_a, usize::MAX);
        prop_assert_eq!(b.receive(&hello_a, &mut Vec::new()), Ok(()));
        let mut sent = Vec::new();
        for (item, tick) in items.into_iter().zip(ticks) {
            match item {
                Ok(f) => {
                    // Those over this test's small frames are refused; the rest go.
                    if a.send_forward(f.clone()).is_ok() {
                        sent.push(Inbound::Forward(f));
                    }
                }
                Err((t, m)) => {
                    // Heartbeats and acks may be compressed into references: only the messages
                    // that always travel are compared.
                    let always = !matches!(
                        &m,
                        Msg::Append { batch, .. } if batch.records.is_empty()
                    ) && !matches!(&m, Msg::Ack { .. });
                    if a.send(&t, m.clone()).is_ok() && always {
                        sent.push(Inbound::Replica(Delivery { topic: t, msg: m, replayed: false }));
                    }
                }
            }
            if tick {
                a.tick();
            }
        }
        let mut bytes = Vec::new();
        a.poll_transmit(&mut bytes, usize::MAX);
        prop_assert_eq!(a.queued_bytes(), 0);
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.extend([0, bytes.len()]);
        cuts.sort_unstable();
        let mut got = Vec::new();
        for w in cuts.windows(2) {
            prop_assert_eq!(b.receive(&bytes[w[0]..w[1]], &mut got), Ok(()));
        }
        let got: Vec<Inbound> = got
            .into_iter()
            .filter(|i| match i {
                Inbound::Forward(_) => true,
                Inbound::Replica(d) => {
                    !d.replayed
                        && !matches!(&d.msg, Msg::Append { batch, .. } if batch.records.is_empty())
                        && !matches!(&d.msg, Msg::Ack { .. })
                }
            })
            .collect();
        prop_assert_eq!(got, sent);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let _ = feed_chunked(&bytes, &cuts);
        let _ = decode_frame(&bytes);
    }

    /// A valid frame with one byte changed, or cut short, is an error or another valid frame,
    /// never a panic.
    #[test]
    fn damaged_frames_never_panic(f in frame(), at in any::<usize>(), to in any::<u8>(), cut in any::<usize>()) {
        let mut bytes = Vec::new();
        encode(&f, MAX, &mut bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut damaged = bytes.clone();
        let i = at % damaged.len();
        damaged[i] = to;
        let _ = feed_chunked(&damaged, &[at, cut]);
        let _ = decode_frame(&damaged[4..]);
        let _ = decode_frame(&bytes[4..4 + cut % (bytes.len() - 3)]);
    }

    /// Every count field set over what the frame could hold is refused as such.
    #[test]
    fn counts_over_the_frame_are_refused(count in 0x100u32.., records in 1usize..4) {
        let m = Msg::Append {
            epoch: Epoch(1),
            hw: 0,
            base: 0,
            batch: Batch { epoch: Epoch(1), records: (0..records as u64).map(|s| Record::new(s, vec![7; 3])).collect() },
        };
        let mut bytes = Vec::new();
        encode(&Frame::Messages(vec![TopicMsg { topic: "t".into(), msg: m }]), MAX, &mut bytes)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        // The message count, right after length, version and kind.
        let mut a = bytes.clone();
        a[6..10].copy_from_slice(&count.to_be_bytes());
        let r = decode_frame(&a[4..]);
        prop_assert!(matches!(r, Err(WireError::CountTooLarge { what: "the message count", .. })), "{:?}", r);
        // The record count: after the count, the topic (2), the kind (1) and four u64s.
        let mut b = bytes.clone();
        let at = 10 + 2 + 1 + 32;
        b[at..at + 4].copy_from_slice(&count.to_be_bytes());
        let r = decode_frame(&b[4..]);
        prop_assert!(matches!(r, Err(WireError::CountTooLarge { what: "a batch's record count", .. })), "{:?}", r);
        // The first record's length: after the record count, its seq and crc.
        let mut c = bytes;
        let at = at + 4 + 8 + 4;
        c[at..at + 4].copy_from_slice(&count.to_be_bytes());
        let r = decode_frame(&c[4..]);
        prop_assert!(matches!(r, Err(WireError::CountTooLarge { what: "a record's length", .. })), "{:?}", r);
    }
}

/// What a replica hands a link in the mirror property: a heartbeat or ack drawn from a few
/// values (so that repeats are common), a resend ack, or an append with a record.
fn link_op() -> impl Strategy<Value = (u8, u8, u8)> {
    (0u8..6, 0u8..4, 0u8..3)
}

fn op_msg(kind: u8, value: u8) -> Msg {
    let v = u64::from(value);
    match kind {
        0 | 1 => Msg::Append {
            epoch: Epoch(1),
            hw: v,
            base: v,
            batch: Batch {
                epoch: Epoch(1),
                records: vec![],
            },
        },
        2 | 3 => Msg::Ack {
            epoch: Epoch(1),
            incarnation: 1,
            end: v,
            durable_end: v,
            clean: true,
            resend: false,
        },
        4 => Msg::Ack {
            epoch: Epoch(1),
            incarnation: 1,
            end: v,
            durable_end: v,
            clean: true,
            resend: true,
        },
        _ => Msg::Append {
            epoch: Epoch(1),
            hw: v,
            base: v,
            batch: Batch {
                epoch: Epoch(1),
                records: vec![Record::new(v, vec![1, 2, 3])],
            },
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever a replica sends and whenever the ticks come, once the bytes have arrived the
    /// receiver holds exactly the sender's references, and every message the sender's replica
    /// handed over reaches the receiver's replica, in full or as a replay of an equal one by
    /// the next tick.
    #[test]
    fn both_ends_keep_the_same_references(
        steps in prop::collection::vec((link_op(), any::<bool>(), any::<bool>()), 1..80),
        max_references in 1usize..4,
        cuts in prop::collection::vec(any::<usize>(), 0..4),
    ) {
        let cfg = LinkConfig { forget_after: 2, max_references, ..LinkConfig::default() };
        let mut a = Link::new(hello(1), BrokerId(2), cfg.clone());
        let mut b = Link::new(hello(2), BrokerId(1), cfg);
        let mut hello_b = Vec::new();
        b.poll_transmit(&mut hello_b, usize::MAX);
        prop_assert_eq!(a.receive(&hello_b, &mut Vec::new()), Ok(()));
        // Messages handed to `a` since its last tick that the receiver must have seen: every
        // append with records, and the last heartbeat and the last ack of each topic (a newer
        // one supersedes an older one).
        let mut owed: std::collections::BTreeMap<(String, u8), Msg> = Default::default();
        let mut owed_data: Vec<(String, Msg)> = Vec::new();
        // What reached the receiver's replicas since the last tick.
        let mut got = Vec::new();
        for ((kind, topic, value), tick, carry) in steps {
            let topic = format!("t{topic}");
            let msg = op_msg(kind, value);
            prop_assert_eq!(a.send(&topic, msg.clone()), Ok(()));
            match kind {
                0 | 1 => { owed.insert((topic, 0), msg); }
                2..=4 => { owed.insert((topic, 1), msg); }
                _ => owed_data.push((topic, msg)),
            }
            if tick {
                a.tick();
            }
            if carry || tick {
                let mut bytes = Vec::new();
                a.poll_transmit(&mut bytes, usize::MAX);
                for w in [0, bytes.len()].iter().chain(cuts.iter().map(|c| c % (bytes.len() + 1)).collect::<Vec<_>>().iter()).copied().collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>().windows(2) {
                    prop_assert_eq!(b.receive(&bytes[w[0]..w[1]], &mut got), Ok(()));
                }
                let [out_hb, out_acks, _, _] = a.references();
                let [_, _, in_hb, in_acks] = b.references();
                prop_assert_eq!(out_hb, in_hb);
                prop_assert_eq!(out_acks, in_acks);
                if tick {
                    let owed = std::mem::take(&mut owed).into_iter().map(|((t, _), m)| (t, m));
                    for (t, m) in owed.chain(owed_data.drain(..)) {
                        prop_assert!(
                            replica_deliveries(&got).any(|d| d.topic == t && d.msg == m),
                            "{} {:?} never reached the receiver", t, m
                        );
                    }
                    got.clear();
                }
            }
        }
    }
}

#[test]
fn a_length_over_the_maximum_is_refused_from_its_prefix() {
    let mut d = Decoder::new(1000);
    let mut frames = Vec::new();
    assert_eq!(d.feed(&[0, 0], &mut frames), Ok(()));
    let r = d.feed(&[0x03, 0xe9, 1, 2, 3], &mut frames);
    assert_eq!(
        r,
        Err(WireError::FrameTooLarge {
            len: 1001,
            max: 1000
        })
    );
    assert_eq!(d.buffered(), 0);
    // The stream stays refused.
    assert!(d.feed(&[0, 0, 0, 2, 1, 1], &mut frames).is_err());
    let big = Frame::Messages(vec![TopicMsg {
        topic: "t".into(),
        msg: Msg::Append {
            epoch: Epoch(1),
            hw: 0,
            base: 0,
            batch: Batch {
                epoch: Epoch(1),
                records: vec![Record::new(0, vec![0; 1000])],
            },
        },
    }]);
    let mut out = vec![9];
    assert!(matches!(
        encode(&big, 1000, &mut out),
        Err(WireError::FrameTooLarge { .. })
    ));
    assert_eq!(out, vec![9], "a refused frame leaves the buffer as it was");
}

#[test]
fn bad_input_names_what_was_wrong() {
    let message = |topic: u8, kind: u8| {
        let mut m = vec![1, 2, 0, 0, 0, 1, 1, topic, kind];
        m.extend_from_slice(&[0; 16]);
        m
    };
    let ack_flags = {
        let mut m = vec![1, 2, 0, 0, 0, 1, 1, b't', 2];
        m.extend_from_slice(&[0; 32]);
        m.push(4);
        m
    };
    let cases: [(Vec<u8>, WireError); 7] = [
        (vec![2, 1], WireError::Version(2)),
        (vec![1, 9], WireError::FrameKind(9)),
        (message(b't', 7), WireError::MessageKind(7)),
        (message(b'#', 3), WireError::TopicName),
        (ack_flags, WireError::AckFlags(4)),
        (vec![1, 2, 0, 0, 0, 0, 5], WireError::TrailingBytes(1)),
        (vec![1, 3, 0, 0], WireError::Truncated("the tick's seq")),
    ];
    for (bytes, want) in cases {
        assert_eq!(decode_frame(&bytes), Err(want), "{bytes:?}");
    }
    let mut d = Decoder::new(100);
    assert_eq!(
        d.feed(&[0, 0, 0, 1, 1], &mut Vec::new()),
        Err(WireError::FrameTooShort(1))
    );
}

fn hello(broker: u64) -> Hello {
    Hello {
        cluster_id: "c1".into(),
        broker: BrokerId(broker),
        incarnation: 7,
    }
}

#[test]
fn the_handshake_must_name_the_cluster_and_the_peer() {
    let mut bytes = Vec::new();
    Link::new(hello(2), BrokerId(1), LinkConfig::default()).poll_transmit(&mut bytes, 1 << 20);
    let mut wrong_peer = Link::new(hello(1), BrokerId(3), LinkConfig::default());
    assert_eq!(
        wrong_peer.receive(&bytes, &mut Vec::new()),
        Err(LinkError::Peer {
            expected: BrokerId(3),
            got: BrokerId(2)
        })
    );
    let mut other = hello(1);
    other.cluster_id = "c2".into();
    let mut wrong_cluster = Link::new(other, BrokerId(2), LinkConfig::default());
    assert!(matches!(
        wrong_cluster.receive(&bytes, &mut Vec::new()),
        Err(LinkError::Cluster { .. })
    ));
    let mut ok = Link::new(hello(1), BrokerId(2), LinkConfig::default());
    assert_eq!(ok.receive(&bytes, &mut Vec::new()), Ok(()));
    assert_eq!(ok.peer_hello(), Some(&hello(2)));
    assert_eq!(
        ok.receive(&bytes, &mut Vec::new()),
        Err(LinkError::HelloTwice)
    );
    let mut tick = Vec::new();
    encode(
        &Frame::Tick {
            seq: 1,
            forget_heartbeats: vec![],
            forget_acks: vec![],
        },
        MAX,
        &mut tick,
    )
    .unwrap_or_default();
    let mut early = Link::new(hello(1), BrokerId(2), LinkConfig::default());
    assert_eq!(
        early.receive(&tick, &mut Vec::new()),
        Err(LinkError::NoHello)
    );
}

#[test]
fn the_queue_refuses_past_its_bound_and_drains() {
    let cfg = LinkConfig {
        max_frame: 4096,
        queue_limit: 10_000,
        ..LinkConfig::default()
    };
    let mut link = Link::new(hello(1), BrokerId(2), cfg);
    let append = |base: u64| Msg::Append {
        epoch: Epoch(1),
        hw: 0,
        base,
        batch: Batch {
            epoch: Epoch(1),
            records: vec![Record::new(base, vec![1; 1000])],
        },
    };
    let mut refused = 0;
    for base in 0..20 {
        match link.send("t", append(base)) {
            Ok(()) => {}
            Err(SendError::Full) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(link.queued_bytes() <= 10_000);
    }
    assert!(refused >= 10, "{refused} refused");
    let too_big = Msg::Append {
        epoch: Epoch(1),
        hw: 0,
        base: 0,
        batch: Batch {
            epoch: Epoch(1),
            records: vec![Record::new(0, vec![1; 5000])],
        },
    };
    assert!(matches!(
        link.send("t", too_big),
        Err(SendError::TooLarge(_))
    ));
    assert_eq!(link.send("#bad", append(0)), Err(SendError::Topic));
    let mut bytes = Vec::new();
    link.poll_transmit(&mut bytes, usize::MAX);
    assert_eq!(link.queued_bytes(), 0);
    let mut frames = Vec::new();
    assert_eq!(Decoder::new(4096).feed(&bytes, &mut frames), Ok(()));
    // The handshake, then the queued appends coalesced into frames of at most 4096 bytes.
    let msgs: usize = frames
        .iter()
        .map(|f| match f {
            Frame::Messages(m) => m.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(msgs, 20 - refused);
    assert!(frames.len() < 1 + msgs, "messages were coalesced");
    assert!(link.send("t", append(0)).is_ok(), "room again once drained");
}

/// Two brokers, each leading half of `topics` topics with the other as follower, connected by
/// two links; time moves in heartbeat intervals.
struct Pair {
    brokers: [Side; 2],
    now: u64,
    acked: Vec<PublishId>,
    proposals: usize,
    /// Bytes sent in each direction during the last interval.
    last_bytes: [usize; 2],
    /// Frames sent in each direction during the last interval.
    last_frames: [usize; 2],
}

struct Side {
    id: BrokerId,
    replicas: Vec<Replica>,
    logs: Vec<MemLog>,
    link: Link,
}

const INTERVAL: u64 = 100;

fn name(i: usize) -> String {
    format!("topic-{i}")
}

fn index(topic: &str) -> usize {
    topic
        .strip_prefix("topic-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

impl Pair {
    fn new(topics: usize) -> Pair {
        let ids = [BrokerId(1), BrokerId(2)];
        let cfg = ReplicaConfig {
            heartbeat_every: INTERVAL,
            ..ReplicaConfig::default()
        };
        let brokers = [0, 1].map(|s| Side {
            id: ids[s],
            replicas: (0..topics)
                .map(|_| Replica::new(ids[s], 1, cfg.clone(), false))
                .collect(),
            logs: (0..topics).map(|_| MemLog::new()).collect(),
            link: Link::new(hello(ids[s].0), ids[1 - s], LinkConfig::default()),
        });
        let mut pair = Pair {
            brokers,
            now: 0,
            acked: Vec::new(),
            proposals: 0,
            last_bytes: [0; 2],
            last_frames: [0; 2],
        };
        for t in 0..topics {
            let state = TopicState {
                epoch: Epoch(1),
                leader: Some(ids[t % 2]),
                isr: ids.to_vec(),
                isr_version: 1,
                replicas: ids.to_vec(),
            };
            for s in 0..2 {
                let mut out = Vec::new();
                let b = &mut pair.brokers[s];
                b.replicas[t].on_state(&mut b.logs[t], state.clone(), 0, &mut out);
                pair.route(s, t, out);
            }
        }
        pair
    }

    fn route(&mut self, s: usize, t: usize, outs: Vec<Output>) {
        for o in outs {
            match o {
                Output::Send { msg, .. } => {
                    // A full queue drops the message as a lost one; this test's queue never fills.
                    let r = self.brokers[s].link.send(&name(t), msg);
                    assert_eq!(r, Ok(()));
                }
                Output::Acked(id) => self.acked.push(id),
                Output::AlterIsr { .. } => self.proposals += 1,
                Output::Failed(..) | Output::Sync => {}
            }
        }
    }

    /// Carries what `s` has queued to the other side; returns (bytes, frames).
    fn carry(&mut self, s: usize) -> (usize, usize) {
        let mut bytes = Vec::new();
        self.brokers[s].link.poll_transmit(&mut bytes, usize::MAX);
        let frames = count_frames(&bytes);
        let r = 1 - s;
        let mut deliveries = Vec::new();
        let from = self.brokers[s].id;
        assert_eq!(
            self.brokers[r].link.receive(&bytes, &mut deliveries),
            Ok(())
        );
        for d in deliveries {
            let Inbound::Replica(d) = d else {
                panic!("only replica messages travel here: {d:?}");
            };
            let t = index(&d.topic);
            let mut out = Vec::new();
            let b = &mut self.brokers[r];
            b.replicas[t].on_message(&mut b.logs[t], from, d.msg, self.now, &mut out);
            self.route(r, t, out);
        }
        (bytes.len(), frames)
    }

    /// One heartbeat interval: every replica ticks, each link ticks, and the links carry
    /// everything both ways until nothing is left (a lossless, fast network).
    fn interval(&mut self) {
        self.now += INTERVAL;
        for s in 0..2 {
            for t in 0..self.brokers[s].replicas.len() {
                let mut out = Vec::new();
                let b = &mut self.brokers[s];
                b.replicas[t].tick(&mut b.logs[t], self.now, &mut out);
                self.route(s, t, out);
            }
            self.brokers[s].link.tick();
        }
        self.last_bytes = [0; 2];
        self.last_frames = [0; 2];
        for _ in 0..10 {
            let mut moved = false;
            for s in 0..2 {
                let (b, f) = self.carry(s);
                self.last_bytes[s] += b;
                self.last_frames[s] += f;
                moved |= b > 0;
            }
            if !moved {
                break;
            }
        }
    }
}

fn count_frames(mut bytes: &[u8]) -> usize {
    let mut n = 0;
    while bytes.len() >= 4 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        bytes = &bytes[(4 + len).min(bytes.len())..];
        n += 1;
    }
    n
}

#[test]
fn replicas_driven_through_links_acknowledge_publishes() {
    let mut pair = Pair::new(4);
    for _ in 0..5 {
        pair.interval();
    }
    for t in 0..4 {
        let s = t % 2;
        let b = &mut pair.brokers[s];
        let epoch = b.replicas[t].leading().unwrap_or(Epoch(0));
        assert_eq!(epoch, Epoch(1), "topic {t} led by broker {s}");
        let end = b.logs[t]
            .append_new(epoch, vec![format!("m{t}").into_bytes()])
            .unwrap_or(0);
        let mut out = Vec::new();
        let now = pair.now;
        assert!(b.replicas[t]
            .published(&mut b.logs[t], t as u64, end, now, &mut out)
            .is_ok());
        pair.route(s, t, out);
    }
    pair.interval();
    pair.acked.sort_unstable();
    assert_eq!(pair.acked, vec![0, 1, 2, 3]);
    for t in 0..4 {
        let follower = &pair.brokers[1 - t % 2];
        assert_eq!(
            follower.logs[t].end(),
            1,
            "topic {t}'s follower holds the record"
        );
    }
}

/// What 10,000 idle replicated topics cost between two brokers: after the first heartbeats,
/// one `Tick` frame per direction per interval, and the replicas stay in sync (no in-sync
/// change proposed for 10 s, five times the lag time) and answer publishes.
#[test]
fn ten_thousand_idle_topics_cost_one_small_frame_per_interval() {
    const TOPICS: usize = 10_000;
    let mut pair = Pair::new(TOPICS);
    for _ in 0..10 {
        pair.interval();
    }
    let proposals = pair.proposals;
    let mut most = [0; 2];
    for _ in 0..100 {
        pair.interval();
        assert_eq!(
            pair.last_frames,
            [1, 1],
            "one frame per direction per interval"
        );
        for (m, b) in most.iter_mut().zip(pair.last_bytes) {
            *m = (*m).max(b);
        }
    }
    assert_eq!(pair.proposals, proposals, "no in-sync change while idle");
    // A Tick without forgotten topics: length 4, version and kind 2, seq 8, two counts 8.
    assert_eq!(most, [22, 22], "bytes per interval in each direction");
    // The per-topic form would carry a heartbeat and an ack per topic and interval.
    let heartbeat = Msg::Append {
        epoch: Epoch(1),
        hw: 0,
        base: 0,
        batch: Batch {
            epoch: Epoch(1),
            records: vec![],
        },
    };
    let ack = Msg::Ack {
        epoch: Epoch(1),
        incarnation: 1,
        end: 0,
        durable_end: 0,
        clean: true,
        resend: false,
    };
    let per_topic = encoded_len(&name(TOPICS - 1), &heartbeat) + encoded_len(&name(0), &ack);
    tracing::info!(
        compressed = most[0],
        uncompressed = per_topic * TOPICS / 2,
        "bytes per interval and direction"
    );
    let t = 1234;
    let s = t % 2;
    let b = &mut pair.brokers[s];
    let end = b.logs[t]
        .append_new(Epoch(1), vec![b"hello".to_vec()])
        .unwrap_or(0);
    let mut out = Vec::new();
    let now = pair.now;
    assert!(b.replicas[t]
        .published(&mut b.logs[t], 99, end, now, &mut out)
        .is_ok());
    pair.route(s, t, out);
    pair.interval();
    assert_eq!(pair.acked, vec![99]);
    // The idle topics stay compressed around the busy one.
    for _ in 0..3 {
        pair.interval();
    }
    assert_eq!(pair.last_frames, [1, 1]);
}

/// A reference the replica stops refreshing is dropped on both ends after `forget_after`
/// ticks, so a topic that stops heartbeating (its replica moved on) stops being replayed.
#[test]
fn unrefreshed_references_are_forgotten_on_both_ends() {
    let cfg = LinkConfig {
        forget_after: 3,
        ..LinkConfig::default()
    };
    let mut a = Link::new(hello(1), BrokerId(2), cfg.clone());
    let mut b = Link::new(hello(2), BrokerId(1), cfg);
    let hb = Msg::Append {
        epoch: Epoch(3),
        hw: 5,
        base: 5,
        batch: Batch {
            epoch: Epoch(3),
            records: vec![],
        },
    };
    let mut hello_b = Vec::new();
    b.poll_transmit(&mut hello_b, usize::MAX);
    assert_eq!(a.receive(&hello_b, &mut Vec::new()), Ok(()));
    let carry = |a: &mut Link, b: &mut Link| {
        let mut bytes = Vec::new();
        a.poll_transmit(&mut bytes, usize::MAX);
        let mut d = Vec::new();
        assert_eq!(b.receive(&bytes, &mut d), Ok(()));
        (
            bytes.len(),
            replica_deliveries(&d).cloned().collect::<Vec<_>>(),
        )
    };
    assert_eq!(a.send("t", hb.clone()), Ok(()));
    a.tick();
    let (_, d) = carry(&mut a, &mut b);
    assert_eq!(
        d.len(),
        1,
        "the explicit heartbeat, not replayed at the same tick"
    );
    assert!(!d[0].replayed);
    assert_eq!(a.send("t", hb.clone()), Ok(()));
    a.tick();
    let (n, d) = carry(&mut a, &mut b);
    assert_eq!(n, 22, "an unchanged heartbeat travels as the tick alone");
    assert_eq!(d.len(), 1);
    assert!(d[0].replayed && d[0].msg == hb);
    // The replica stops sending: replayed for `forget_after - 1` more ticks, then forgotten.
    let mut replays = 0;
    for _ in 0..5 {
        a.tick();
        replays += carry(&mut a, &mut b).1.len();
    }
    assert_eq!(replays, 2);
    assert_eq!(a.send("t", hb.clone()), Ok(()));
    let (n, d) = carry(&mut a, &mut b);
    assert!(
        n > 22 && d.len() == 1 && !d[0].replayed,
        "sent again in full"
    );
}

/// A forwards frame's body (after the length prefix) holding `forward`'s bytes once.
fn forwards_body(forward: &[u8]) -> Vec<u8> {
    let mut b = vec![1, 4, 0, 0, 0, 1];
    b.extend_from_slice(forward);
    b
}

#[test]
fn bad_forwards_name_what_was_wrong() {
    let channel = |topic: &[u8], channel: &[u8], op: &[u8]| {
        let mut f = vec![3, topic.len() as u8];
        f.extend_from_slice(topic);
        f.push(channel.len() as u8);
        f.extend_from_slice(channel);
        f.extend_from_slice(op);
        forwards_body(&f)
    };
    let answer = |outcome: &[u8]| {
        let mut f = vec![2];
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(outcome);
        forwards_body(&f)
    };
    let position = |cursor: u64, owed: &[u64]| {
        let mut op = vec![4];
        op.extend_from_slice(&cursor.to_be_bytes());
        op.extend_from_slice(&(owed.len() as u32).to_be_bytes());
        for s in owed {
            op.extend_from_slice(&s.to_be_bytes());
        }
        channel(b"t", b"c", &op)
    };
    let long_text = {
        let mut o = vec![1];
        o.extend_from_slice(&1025u16.to_be_bytes());
        o.extend_from_slice(&[b'x'; 1025]);
        o
    };
    let mut too_many = vec![4];
    too_many.extend_from_slice(&u64::MAX.to_be_bytes());
    too_many.extend_from_slice(&(MAX_OWED as u32 + 1).to_be_bytes());
    for s in 0..=MAX_OWED as u64 {
        too_many.extend_from_slice(&s.to_be_bytes());
    }
    let cases: Vec<(Vec<u8>, WireError)> = vec![
        (
            forwards_body(&[9, 0, 0, 0, 0, 0]),
            WireError::ForwardKind(9),
        ),
        (channel(b"t", b"c", &[7]), WireError::ChannelOpKind(7)),
        (channel(b"t", b"c#ephemeral", &[1]), WireError::ChannelName),
        (channel(b"t", b"", &[1, 0]), WireError::ChannelName),
        (channel(b"t#x", b"c", &[1]), WireError::TopicName),
        (
            channel(b"t", b"c", &[3, 2]),
            WireError::Choice {
                what: "a pause's flag",
                byte: 2,
            },
        ),
        (
            answer(&[2]),
            WireError::Choice {
                what: "an answer's outcome",
                byte: 2,
            },
        ),
        (answer(&[1, 0, 2, 0xff, 0xfe]), WireError::AnswerText),
        (answer(&long_text), WireError::AnswerText),
        (
            answer(&[1, 0, 3, b'a']),
            WireError::Truncated("an answer's text"),
        ),
        (
            channel(b"t", b"c", &[6, 4, 0, 1]),
            WireError::Choice {
                what: "a channel config's flags",
                byte: 4,
            },
        ),
        (
            channel(b"t", b"c", &[6, 2, 0, 1, 2, b'#', b'x']),
            WireError::TopicName,
        ),
        (
            forwards_body(&[
                4, 1, b't', 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ]),
            WireError::Choice {
                what: "a topic config's flags",
                byte: 8,
            },
        ),
        (
            forwards_body(&[4, 1, b't', 1, 0, 0]),
            WireError::Truncated("a topic's retention time"),
        ),
        (position(5, &[5]), WireError::OwedOrder),
        (position(5, &[3, 3]), WireError::OwedOrder),
        (position(5, &[4, 3]), WireError::OwedOrder),
        (
            channel(b"t", b"c", &too_many),
            WireError::OwedTooMany(MAX_OWED + 1),
        ),
        (
            vec![1, 4, 0, 0, 0, 2, 3, 1, b't', 1, b'c', 1],
            WireError::CountTooLarge {
                what: "the forward count",
                count: 2,
                room: 6,
            },
        ),
        (
            {
                let mut f = forwards_body(&[3, 1, b't', 1, b'c', 2]);
                f.push(0);
                f
            },
            WireError::TrailingBytes(1),
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(
            decode_frame(&bytes),
            Err(want),
            "{:?}",
            &bytes[..bytes.len().min(40)]
        );
    }
    // Valid ones of the same shapes decode.
    assert_eq!(
        decode_frame(&position(10, &[5, 9])),
        Ok(Frame::Forwards(vec![Forward::Channel {
            topic: "t".into(),
            channel: "c".into(),
            op: ChannelOp::Position {
                cursor: 10,
                owed: vec![5, 9]
            },
        }]))
    );
    assert_eq!(
        decode_frame(&answer(&[1, 0, 2, b'n', b'o'])),
        Ok(Frame::Forwards(vec![Forward::Answer {
            id: 0,
            result: Err("no".into())
        }]))
    );
}

/// Counts inside a forward over what the frame could hold are refused before allocating.
#[test]
fn counts_inside_forwards_over_the_frame_are_refused() {
    let publish = Forward::Publish {
        id: 1,
        topic: "t".into(),
        defer_ms: 0,
        bodies: vec![bytes::Bytes::from_static(b"abc")],
        origins: Vec::new(),
    };
    let mut bytes = Vec::new();
    assert_eq!(
        encode(&Frame::Forwards(vec![publish]), MAX, &mut bytes),
        Ok(())
    );
    // After the length, version, kind and count: kind, id, topic, deferral, then the body
    // count and the first body's length.
    let at = 4 + 2 + 4 + 1 + 8 + 2 + 8;
    for (at, what) in [
        (at, "a publish's body count"),
        (at + 4, "a publish body's length"),
    ] {
        let mut b = bytes.clone();
        b[at..at + 4].copy_from_slice(&0x00ff_ffffu32.to_be_bytes());
        let r = decode_frame(&b[4..]);
        assert!(
            matches!(r, Err(WireError::CountTooLarge { what: w, .. }) if w == what),
            "{r:?}"
        );
    }
    let position = Forward::Channel {
        topic: "t".into(),
        channel: "c".into(),
        op: ChannelOp::Position {
            cursor: 3,
            owed: vec![1, 2],
        },
    };
    let mut bytes = Vec::new();
    assert_eq!(
        encode(&Frame::Forwards(vec![position]), MAX, &mut bytes),
        Ok(())
    );
    let at = 4 + 2 + 4 + 1 + 2 + 2 + 1 + 8;
    bytes[at..at + 4].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(
        decode_frame(&bytes[4..]),
        Err(WireError::CountTooLarge {
            what: "a position's owed count",
            ..
        })
    ));
}

#[test]
fn send_forward_checks_and_bounds_what_it_queues() {
    let cfg = LinkConfig {
        max_frame: 4096,
        queue_limit: 10_000,
        ..LinkConfig::default()
    };
    let mut link = Link::new(hello(1), BrokerId(2), cfg);
    let publish = |id: u64, size: usize| Forward::Publish {
        id,
        topic: "t".into(),
        defer_ms: 0,
        bodies: vec![bytes::Bytes::from(vec![1u8; size])],
        origins: Vec::new(),
    };
    // Publish bodies are bounded by the frame.
    assert!(matches!(
        link.send_forward(publish(0, 4096)),
        Err(SendError::TooLarge(_))
    ));
    let mut refused = 0;
    for id in 0..20 {
        match link.send_forward(publish(id, 1000)) {
            Ok(()) => {}
            Err(SendError::Full) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(link.queued_bytes() <= 10_000);
    }
    assert!(refused >= 10, "{refused} refused");
    let bad_topic = Forward::Channel {
        topic: "#t".into(),
        channel: "c".into(),
        op: ChannelOp::Created,
    };
    assert_eq!(link.send_forward(bad_topic), Err(SendError::Topic));
    let ephemeral = Forward::Channel {
        topic: "t".into(),
        channel: "c#ephemeral".into(),
        op: ChannelOp::Created,
    };
    assert_eq!(
        link.send_forward(ephemeral),
        Err(SendError::Forward(WireError::ChannelName))
    );
    let unsorted = Forward::Channel {
        topic: "t".into(),
        channel: "c".into(),
        op: ChannelOp::Position {
            cursor: 6,
            owed: vec![5, 4],
        },
    };
    assert_eq!(
        link.send_forward(unsorted),
        Err(SendError::Forward(WireError::OwedOrder))
    );
    let mut bytes = Vec::new();
    link.poll_transmit(&mut bytes, usize::MAX);
    assert_eq!(link.queued_bytes(), 0);
    let mut frames = Vec::new();
    assert_eq!(Decoder::new(4096).feed(&bytes, &mut frames), Ok(()));
    let ids: Vec<u64> = frames
        .iter()
        .flat_map(|f| match f {
            Frame::Forwards(fs) => fs.clone(),
            _ => Vec::new(),
        })
        .filter_map(|f| match f {
            Forward::Publish { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(ids, (0..(20 - refused)).collect::<Vec<_>>(), "in order");
    assert!(frames.len() < 1 + ids.len(), "forwards were coalesced");
    // An answer's long error text is cut at a character boundary, not refused.
    let long = "é".repeat(MAX_ANSWER_TEXT);
    let answer = Forward::Answer {
        id: 7,
        result: Err(long.clone()),
    };
    assert_eq!(link.send_forward(answer), Ok(()));
    let mut bytes = Vec::new();
    link.poll_transmit(&mut bytes, usize::MAX);
    let mut frames = Vec::new();
    assert_eq!(Decoder::new(4096).feed(&bytes, &mut frames), Ok(()));
    let cut = &long[..MAX_ANSWER_TEXT];
    assert_eq!(
        frames,
        vec![Frame::Forwards(vec![Forward::Answer {
            id: 7,
            result: Err(cut.to_owned())
        }])]
    );
}

#[test]
fn forwards_before_the_handshake_are_refused_and_after_it_arrive() {
    let mut bytes = Vec::new();
    let f = Forward::Answer {
        id: 1,
        result: Ok(()),
    };
    assert_eq!(
        encode(&Frame::Forwards(vec![f.clone()]), MAX, &mut bytes),
        Ok(())
    );
    let mut early = Link::new(hello(1), BrokerId(2), LinkConfig::default());
    assert_eq!(
        early.receive(&bytes, &mut Vec::new()),
        Err(LinkError::NoHello)
    );
    let mut sender = Link::new(hello(2), BrokerId(1), LinkConfig::default());
    assert_eq!(sender.send_forward(f.clone()), Ok(()));
    let mut wire = Vec::new();
    sender.poll_transmit(&mut wire, usize::MAX);
    let mut ok = Link::new(hello(1), BrokerId(2), LinkConfig::default());
    let mut got = Vec::new();
    assert_eq!(ok.receive(&wire, &mut got), Ok(()));
    assert_eq!(got, vec![Inbound::Forward(f)]);
}

#[test]
fn dead_letter_forwards_out_of_bounds_are_refused_both_ways() {
    let origin = DeadOrigin {
        topic: "t".into(),
        channel: "c".into(),
        id: [b'a'; 16],
        attempts: 3,
        timestamp: 1,
    };
    let record = DeadLetter {
        id: [b'b'; 16],
        seq: 1,
        origin: origin.clone(),
        dead_lettered_at: 2,
        body_size: 3,
        preview: "abc".into(),
    };
    let cases = [
        (
            Forward::Publish {
                id: 1,
                topic: "t".into(),
                defer_ms: 0,
                bodies: vec![bytes::Bytes::from_static(b"x"); 2],
                origins: vec![origin.clone()],
            },
            WireError::OriginCount {
                bodies: 2,
                origins: 1,
            },
        ),
        (
            Forward::DeadLetters {
                topic: "t".into(),
                op: DeadLetterOp::Records(vec![record.clone(); MAX_DEAD_LETTERS + 1]),
            },
            WireError::DeadLettersTooMany(MAX_DEAD_LETTERS + 1),
        ),
        (
            Forward::DeadLetters {
                topic: "t".into(),
                op: DeadLetterOp::Forgotten(vec![[0; 16]; MAX_DEAD_LETTERS + 1]),
            },
            WireError::DeadLettersTooMany(MAX_DEAD_LETTERS + 1),
        ),
        (
            Forward::DeadLetters {
                topic: "t".into(),
                op: DeadLetterOp::Replace(vec![DeadLetter {
                    preview: "x".repeat(2000),
                    ..record.clone()
                }]),
            },
            WireError::Preview,
        ),
        (
            Forward::DeadLetters {
                topic: "t".into(),
                op: DeadLetterOp::Records(vec![DeadLetter {
                    origin: DeadOrigin {
                        channel: "c#ephemeral".into(),
                        ..origin.clone()
                    },
                    ..record.clone()
                }]),
            },
            WireError::ChannelName,
        ),
    ];
    for (f, want) in cases {
        let mut out = Vec::new();
        assert_eq!(
            encode(&Frame::Forwards(vec![f.clone()]), MAX, &mut out),
            Err(want.clone()),
            "encoding {f:?}"
        );
        assert!(out.is_empty(), "nothing written for a refused frame");
    }
    // Decoding checks the same bounds: a publish whose origin count is not its body count.
    let good = Forward::Publish {
        id: 1,
        topic: "t".into(),
        defer_ms: 0,
        bodies: vec![bytes::Bytes::from_static(b"x")],
        origins: vec![origin],
    };
    let mut bytes = Vec::new();
    encode(&Frame::Forwards(vec![good.clone()]), MAX, &mut bytes).expect("encodes");
    assert_eq!(decode_frame(&bytes[4..]), Ok(Frame::Forwards(vec![good])));
    // Bodies: 1 -> 2 would need another body; instead the origin count says 2.
    let origins_at = 4 + 2 + 4 + 1 + 8 + 2 + 8 + 4 + 4 + 1;
    bytes[origins_at..origins_at + 4].copy_from_slice(&2u32.to_be_bytes());
    assert!(
        decode_frame(&bytes[4..]).is_err(),
        "an origin count above the body count is refused"
    );
}

//! Unit tests of the segment format: records of both versions read back as written, index
//! points fall where readers need them, and damage (a flipped byte, a length past the end, a
//! damaged header, a torn tail) costs only the records it touches.

use super::*;

fn stored(seq: u64, body: &str) -> Stored {
    Stored {
        seq,
        msg: Message {
            id: MessageId::from_u64(seq + 1000),
            timestamp: seq as i64 * 10,
            attempts: 0,
            body: Bytes::from(body.to_string()),
        },
        defer_until: 0,
    }
}

/// A segment of `n` records in `format`, and where each record starts (and the end).
fn segment_in(format: Format, n: u64) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    match format {
        Format::V1 => v1::encode_header(&mut out, 0, 0),
        Format::V2 => encode_header(&mut out, 0, 0),
    }
    let mut starts = Vec::new();
    for i in 0..n {
        starts.push(out.len());
        let s = stored(i, &format!("body-{i}"));
        match format {
            Format::V1 => v1::encode_record(&mut out, &s),
            Format::V2 => encode_record(&mut out, &s),
        };
    }
    starts.push(out.len());
    (out, starts)
}

fn segment(n: u64) -> Vec<u8> {
    segment_in(Format::V2, n).0
}

#[test]
fn records_round_trip() {
    let seg = Bytes::from(segment(3));
    assert_eq!(
        decode_header(&seg),
        Ok(Header {
            format: Format::V2,
            base: 0
        })
    );
    let r = scan(&seg, Format::V2);
    assert_eq!(r.records, 3);
    assert_eq!(r.valid_end, seg.len());
    assert_eq!(r.torn_tail, 0);
    match parse_at(&seg, Format::V2, HEADER_LEN) {
        Parsed::Record(s, _) => assert_eq!(s, stored(0, "body-0")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        encode_record(&mut Vec::new(), &stored(0, "body-0")),
        record_len(6)
    );
}

/// Version-1 segments (a data directory from before version 2) read back whole.
#[test]
fn version_1_segments_are_read() {
    let (bytes, _) = segment_in(Format::V1, 5);
    let seg = Bytes::from(bytes);
    let rec = recover(&seg);
    assert_eq!(
        rec.header,
        Ok(Header {
            format: Format::V1,
            base: 0
        })
    );
    assert_eq!(rec.report.format, Format::V1);
    assert_eq!(rec.report.records, 5);
    assert_eq!(rec.report.torn_tail, 0);
    match parse_at(&seg, Format::V1, V1_HEADER_LEN) {
        Parsed::Record(s, _) => assert_eq!(s, stored(0, "body-0")),
        other => panic!("{other:?}"),
    }
}

/// No flag bounds a record: a body far above the default --max-msg-size reads back.
#[test]
fn a_large_record_is_a_record() {
    let mut out = Vec::new();
    encode_header(&mut out, 0, 0);
    let big = "y".repeat(3 << 20);
    encode_record(&mut out, &stored(0, &big));
    encode_record(&mut out, &stored(1, "small"));
    let r = scan(&Bytes::from(out), Format::V2);
    assert_eq!((r.records, r.torn_tail), (2, 0));
}

/// Index points every INDEX_EVERY records and, past a large record, at the next one:
/// from any index point a reader passes less than INDEX_BYTES before the record it wants.
#[test]
fn index_points_by_count_and_by_bytes() {
    let big = "x".repeat(INDEX_BYTES as usize + 10);
    let mut out = Vec::new();
    encode_header(&mut out, 0, 0);
    let mut starts = Vec::new();
    for i in 0..600u64 {
        starts.push(out.len());
        let body = if i == 300 {
            big.clone()
        } else {
            format!("body-{i}")
        };
        encode_record(&mut out, &stored(i, &body));
    }
    let r = scan(&Bytes::from(out), Format::V2);
    let seqs: Vec<u64> = r.index.iter().map(|&(seq, _)| seq).collect();
    assert_eq!(seqs, [0, 256, 301, 512]);
    for &(seq, off) in &r.index {
        assert_eq!(off, starts[seq as usize]);
    }
}

#[test]
fn torn_tail_is_reported_not_delivered() {
    for format in [Format::V1, Format::V2] {
        let (full, _) = segment_in(format, 3);
        let cut = Bytes::from(full[..full.len() - 5].to_vec());
        let r = scan(&cut, format);
        assert_eq!(r.records, 2);
        assert!(r.torn_tail > 0);
        assert_eq!(r.valid_end + r.torn_tail, cut.len());
        assert!(r.skipped.is_empty());
    }
}

#[test]
fn flipped_byte_skips_only_that_record() {
    for format in [Format::V1, Format::V2] {
        let (mut bytes, starts) = segment_in(format, 5);
        // A byte inside the body of the third record.
        bytes[starts[2] + format.body_at() + 2] ^= 0xff;
        let r = scan(&Bytes::from(bytes), format);
        assert_eq!(r.records, 4);
        assert_eq!(r.skipped, [(starts[2], starts[3] - starts[2])]);
        assert_eq!(r.last_seq, Some(4));
    }
}

/// A length damaged into one that points past the end of the file is damage, not a torn
/// tail: the records after it are found.
#[test]
fn a_length_pointing_past_the_end_is_damage_in_the_middle() {
    for format in [Format::V1, Format::V2] {
        let (mut bytes, starts) = segment_in(format, 10);
        let len_at = match format {
            Format::V1 => 0,
            Format::V2 => 4,
        };
        // 0x40 in the length's second byte: 4 MiB more, past the end.
        bytes[starts[1] + len_at + 1] ^= 0x40;
        let r = scan(&Bytes::from(bytes), format);
        assert_eq!(r.records, 9, "{format:?}");
        assert_eq!(r.skipped, [(starts[1], starts[2] - starts[1])]);
        assert_eq!(r.torn_tail, 0);
    }
}

/// A damaged header hides no record, whichever byte of it is hit.
#[test]
fn a_damaged_header_hides_nothing() {
    for format in [Format::V1, Format::V2] {
        let (clean, _) = segment_in(format, 5);
        for at in 0..format.header_len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bytes = clean.clone();
                bytes[at] ^= flip;
                let rec = recover(&Bytes::from(bytes));
                assert_eq!(rec.report.format, format, "byte {at} ^ {flip:#x}");
                assert_eq!(rec.report.records, 5, "byte {at} ^ {flip:#x}");
                assert_eq!(rec.report.torn_tail, 0);
                if format == Format::V2 {
                    assert!(rec.header.is_err(), "byte {at} ^ {flip:#x} goes unnoticed");
                }
            }
        }
    }
}

#[test]
fn bad_header() {
    assert_eq!(decode_header(b"short"), Err(HeaderDamage::Short(5)));
    let mut h = segment(0);
    h[0] = b'X';
    assert_eq!(decode_header(&h), Err(HeaderDamage::Magic));
    let mut h = segment(0);
    h[11] = 1; // version 1, with version 2's header length
    assert_eq!(decode_header(&h), Err(HeaderDamage::Length(36)));
    let mut h = segment(0);
    h[20] ^= 1;
    assert_eq!(decode_header(&h), Err(HeaderDamage::Checksum));
}

/// A buffer filled record by record with [`RecordSealer`] holds the same bytes as one filled
/// with [`encode_record`], whatever the count against the sealer's lag (none, fewer, exactly
/// as many, many more), and a seal never reaches past the records it was given.
#[test]
fn records_sealed_behind_the_copy_are_the_records_encoded_at_once() {
    for n in [0, 1, SEAL_LAG - 1, SEAL_LAG, SEAL_LAG + 1, 3 * SEAL_LAG + 5] {
        let records: Vec<Stored> = (0..n as u64)
            .map(|i| stored(i, &"x".repeat(i as usize * 37 % 300)))
            .collect();
        let mut expected = Vec::new();
        for s in &records {
            encode_record(&mut expected, s);
        }
        let mut buf = vec![0xAAu8; expected.len() + 64];
        let mut sealer = RecordSealer::new();
        let mut pos = 0;
        for s in &records {
            let start = pos;
            pos += encode_unsealed_at(&mut buf[pos..], s);
            sealer.encoded(&mut buf, start);
        }
        sealer.finish(&mut buf);
        assert_eq!(pos, expected.len(), "{n} records");
        assert_eq!(&buf[..pos], &expected[..], "{n} records");
        assert!(
            buf[pos..].iter().all(|&b| b == 0xAA),
            "{n} records: past the end"
        );
        let mut seg = Vec::new();
        encode_header(&mut seg, 0, 0);
        seg.extend_from_slice(&buf[..pos]);
        let scanned = scan(&Bytes::from(seg), Format::V2);
        assert_eq!(scanned.records, n as u64, "{n} records read back");
    }
}

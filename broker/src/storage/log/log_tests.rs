//! Unit tests of a topic's log: round trips through direct and buffered files, write
//! planning, reads through the block cache and the fetcher, releases, version-1 segments, and
//! damage (placed, and random over 400 seeds) that must cost only the records it touches.

use super::plan::MAX_WRITE;
use super::*;
use crate::storage::blocks::{self, BLOCK};
use crate::storage::segment;
use bytes::Bytes;
use protocol::{Message, MessageId};

fn message(i: u64) -> Message {
    // Bodies of 100 to ~6,000 bytes: records end anywhere inside a 4 KiB block, and some
    // straddle the cache's blocks.
    let len = 100 + (i as usize * 1_237) % 6_000;
    Message {
        id: MessageId::from_u64(i + 1),
        timestamp: i as i64,
        attempts: 0,
        body: Bytes::from(vec![(i % 251) as u8; len]),
    }
}

/// Appends, flushes in several rounds (each rewrites the partial last block; the last round
/// is over MAX_WRITE, so it goes out as several chunks of one segment), reads every message
/// back through the block cache, trims, and recovers the segment after a reopen.
fn round_trip(direct: bool) {
    let name = if direct { "direct" } else { "buffered" };
    with_dir(name, |dir| async move {
        if !direct {
            crate::storage::file::force_buffered();
        }
        let topic_dir = dir.join("t");
        let total: u64 = 1000;
        let log = RefCell::new(TopicLog::open("t", topic_dir.clone(), 0, 8 << 20).unwrap());
        let mut next = 0;
        for round in [1u64, 7, 40, 52, 200, 700] {
            let msgs: Vec<Message> = (next..next + round).map(message).collect();
            next += round;
            log.borrow_mut().append(msgs, 0);
            if round == 700 {
                log.borrow_mut().plan(0);
                let l = log.borrow();
                assert!(
                    l.pending.len() >= 2,
                    "a round over MAX_WRITE makes several chunks"
                );
                assert!(l.pending.iter().all(|c| c.len <= MAX_WRITE));
            }
            flush(&log).await.unwrap();
        }
        assert_eq!(next, total);
        sync(&log).await.unwrap();
        let seg = log.borrow().segments[0].path.clone();
        let written = log.borrow().segments[0].written_len;
        let on_disk = std::fs::read(&seg).unwrap();
        if direct {
            assert_eq!(on_disk.len() % 4096, 0, "direct writes cover whole blocks");
        } else {
            assert_eq!(
                on_disk.len() as u64,
                written,
                "buffered writes are not padded"
            );
        }
        assert!(
            on_disk[written as usize..].iter().all(|&b| b == 0),
            "padding is zeros"
        );
        let report = segment::scan(&Bytes::from(on_disk), Format::V2);
        assert_eq!(report.records, total);
        assert!(report.skipped.is_empty());
        // Every message read back from disk (mem limit 0), through Wait and the fetcher.
        let mut hint = DiskHint::default();
        for seq in 0..total {
            let mut waits = 0;
            let got = loop {
                let r = log.borrow().read(seq, hint);
                match r {
                    Read::Msg(s, h) => break (s, h),
                    Read::Wait => {
                        waits += 1;
                        assert!(waits < 10, "seq {seq} never arrived");
                        fetch(&log).await;
                    }
                    Read::Skip(n) => panic!("seq {seq}: skip to {n}"),
                    Read::End => panic!("seq {seq}: end"),
                }
            };
            assert_eq!(got.0.seq, seq);
            assert_eq!(got.0.msg, message(seq));
            hint = got.1;
        }
        trim_padding(&log).await.unwrap();
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), written);
        drop(log);
        let reopened = TopicLog::open("t", topic_dir, 0, 8 << 20).unwrap();
        assert_eq!(reopened.head(), total);
        // message(i) has ID i + 1.
        assert_eq!(reopened.recovered_max_id(), Some(total));
    });
}

/// Records are encoded when their chunk is written: a chunk with a gap (records every channel
/// had finished, left out), a record over MAX_WRITE (written in pieces), and small records
/// around them all read back from the file as they were appended.
#[test]
fn planned_records_are_encoded_at_write() {
    with_dir("encode-at-write", |dir| async move {
        let topic_dir = dir.join("t");
        let log = RefCell::new(TopicLog::open("t", topic_dir.clone(), 0, 64 << 20).unwrap());
        let big = |i: u64| Message {
            body: Bytes::from(vec![(i % 251) as u8; MAX_WRITE + MAX_WRITE / 2]),
            ..message(i)
        };
        log.borrow_mut().append((0..10).map(message).collect(), 0);
        // 0..4 finished by every channel: left out of the plan.
        assert_eq!(log.borrow_mut().plan(4).skipped, 4);
        log.borrow_mut().append(vec![big(10)], 0);
        log.borrow_mut().append((11..20).map(message).collect(), 0);
        log.borrow_mut().plan(0);
        {
            let l = log.borrow();
            // The header's chunk lists 4..10 (0..4 left out), the big record has a chunk of its
            // own, over MAX_WRITE, and the small ones after it another.
            let seqs: Vec<_> = l.pending.iter().map(|c| c.seqs.clone()).collect();
            assert_eq!(seqs, vec![vec![4..10], vec![10..11], vec![11..20]]);
            assert!(!l.pending[0].head.is_empty(), "the segment header");
            assert!(l.pending[1].len > MAX_WRITE, "the big record's chunk");
        }
        flush(&log).await.unwrap();
        sync(&log).await.unwrap();
        assert!(log.borrow().pending.is_empty());
        assert_eq!(log.borrow().written_end(), 20);
        let on_disk = std::fs::read(&log.borrow().segments[0].path).unwrap();
        let report = segment::scan(&Bytes::from(on_disk), Format::V2);
        assert_eq!(report.records, 16, "4 left out");
        assert!(report.skipped.is_empty());
        drop(log);
        let reopened = RefCell::new(TopicLog::open("t", topic_dir, 0, 64 << 20).unwrap());
        assert_eq!(reopened.borrow().head(), 20);
        for seq in 4..20 {
            let want = if seq == 10 { big(10) } else { message(seq) };
            match read_through(&reopened, seq, DiskHint::default()).await {
                Read::Msg(s, _) => {
                    assert_eq!(s.seq, seq);
                    assert_eq!(s.msg, want, "seq {seq}");
                }
                _ => panic!("seq {seq} not read back"),
            }
        }
    });
}

/// What every reader has passed leaves the window once written (a reader that comes back
/// for it reads the file); what is unwritten, or not read yet, stays; an ephemeral log's
/// window is all it has and keeps its newest `mem_limit`.
#[test]
fn read_and_written_records_leave_the_window() {
    with_dir("forget-read", |dir| async move {
        let log = RefCell::new(TopicLog::open("t", dir.join("t"), 1000, 64 << 20).unwrap());
        log.borrow_mut().append((0..100).map(message).collect(), 0);
        log.borrow_mut().forget_read(60);
        assert_eq!(log.borrow().window_start(), 0, "nothing written yet");
        flush(&log).await.unwrap();
        log.borrow_mut()
            .append((100..120).map(message).collect(), 0);
        log.borrow_mut().forget_read(60);
        assert_eq!(log.borrow().window_start(), 60, "read by all and written");
        log.borrow_mut().forget_read(120);
        assert_eq!(log.borrow().window_start(), 100, "100.. not written");
        flush(&log).await.unwrap();
        assert_eq!(
            log.borrow().window_start(),
            120,
            "gone as the write completed"
        );
        match read_through(&log, 42, DiskHint::default()).await {
            Read::Msg(s, _) => assert_eq!(s.msg, message(42)),
            _ => panic!("seq 42 not read back from the file"),
        }
        // A burst read and written by now: the window gives its room back at a checkpoint.
        log.borrow_mut()
            .append((120..20_000).map(message).collect(), 0);
        flush(&log).await.unwrap();
        log.borrow_mut().forget_read(20_000);
        let before = log.borrow().window.capacity();
        log.borrow_mut().shrink_window();
        assert!(before >= 16_384 && log.borrow().window.capacity() < 1024);
        let mut eph = TopicLog::in_memory("e", 50);
        eph.append((0..100).map(message).collect(), 0);
        eph.forget_read(100);
        assert_eq!(eph.window_start(), 50);
    });
}

/// A DPUB body is copied out of the buffer it came in (a connection's read buffer) once,
/// when appended, and every channel reading it shares that copy; other bodies are not
/// copied at all.
#[test]
fn deferred_bodies_are_copied_once_at_append() {
    let mut log = TopicLog::in_memory("t", 100);
    let read_buffer = Bytes::from(vec![7u8; 4096]);
    let body = |i: usize| read_buffer.slice(i * 100..i * 100 + 100);
    let msg = |i: usize| Message {
        id: MessageId::from_u64(i as u64 + 1),
        timestamp: 0,
        attempts: 0,
        body: body(i),
    };
    log.append(vec![msg(0)], 0);
    log.append(vec![msg(1)], 1);
    let read = |seq| match log.read(seq, DiskHint::default()) {
        Read::Msg(s, _) => s.msg.body,
        _ => panic!("seq {seq} not read"),
    };
    assert_eq!(read(0).as_ptr(), body(0).as_ptr(), "not deferred: shared");
    let (first, second) = (read(1), read(1));
    assert_eq!(first, body(1));
    assert_ne!(first.as_ptr(), body(1).as_ptr(), "deferred: copied");
    assert_eq!(first.as_ptr(), second.as_ptr(), "once");
}

/// Reads `seq` through the fetcher; panics if it never arrives.
async fn read_through(log: &RefCell<TopicLog>, seq: u64, hint: DiskHint) -> Read {
    for _ in 0..10 {
        let r = log.borrow().read(seq, hint);
        match r {
            Read::Wait => {
                fetch(log).await;
            }
            r => return r,
        }
    }
    panic!("seq {seq} never arrived");
}

/// Runs `test` on a glommio executor with a fresh data directory named after `name` (unique
/// across the log's test modules).
pub(super) fn with_dir<F: std::future::Future<Output = ()>>(
    name: &str,
    test: impl FnOnce(PathBuf) -> F,
) {
    let dir = std::env::temp_dir().join(format!("log-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(512 * 1024)
        .make()
        .unwrap();
    ex.run(async {
        crate::storage::file::probe(&dir, 0).await;
        test(dir.clone()).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A log (nothing kept in memory) holding messages `0..total`, written and synced, and
/// the file offset where each record starts.
async fn written_log(dir: &Path, total: u64) -> (RefCell<TopicLog>, Vec<u64>) {
    let log = RefCell::new(TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap());
    log.borrow_mut()
        .append((0..total).map(message).collect(), 0);
    flush(&log).await.unwrap();
    sync(&log).await.unwrap();
    let mut starts = Vec::new();
    let mut at = HEADER_LEN as u64;
    for i in 0..total {
        starts.push(at);
        at += segment::record_len(message(i).body.len()) as u64;
    }
    starts.push(at);
    (log, starts)
}

/// Reads the whole log in order as a channel does; the seqs delivered.
async fn read_all(log: &RefCell<TopicLog>) -> Vec<u64> {
    let mut delivered = Vec::new();
    let mut hint = DiskHint::default();
    let mut seq = 0;
    loop {
        match read_through(log, seq, hint).await {
            Read::Msg(s, h) => {
                assert_eq!(s.msg, message(s.seq));
                delivered.push(s.seq);
                seq = s.seq + 1;
                hint = h;
            }
            Read::Skip(n) => panic!("skip from {seq} to {n}"),
            Read::End => return delivered,
            Read::Wait => unreachable!(),
        }
    }
}

/// Records below the floor given to `plan` (every channel finished them) are never
/// written, except the newest, so the files still end with the head and its ID. A reader
/// asking for a left-out seq gets the next record there is, and a reopened log continues
/// after the head.
#[test]
fn records_finished_before_the_write_are_left_out() {
    with_dir("plan", |dir| async move {
        let (log, _) = written_log(&dir, 3).await;
        log.borrow_mut().append((3..10).map(message).collect(), 0);
        assert_eq!(
            log.borrow_mut().plan(6),
            Planned {
                kept: 4,
                skipped: 3
            }
        );
        log.borrow_mut().append((10..13).map(message).collect(), 0);
        assert_eq!(
            log.borrow_mut().plan(13),
            Planned {
                kept: 1,
                skipped: 2
            },
            "the head is written even when finished"
        );
        assert_eq!(log.borrow_mut().plan(13), Planned::default());
        flush(&log).await.unwrap();
        sync(&log).await.unwrap();
        assert_eq!(log.borrow().written_end(), 13);
        // Nothing is kept in memory (mem limit 0): reads go to the file.
        for (asked, got) in [(3, 6), (4, 6), (6, 6), (9, 9), (10, 12)] {
            match read_through(&log, asked, DiskHint::default()).await {
                Read::Msg(s, _) => {
                    assert_eq!(s.seq, got, "asked {asked}");
                    assert_eq!(s.msg, message(got));
                }
                _ => panic!("seq {asked}: no message"),
            }
        }
        drop(log);
        let reopened = TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap();
        assert_eq!(reopened.head(), 13);
        assert_eq!(reopened.recovered_max_id(), Some(13));
        let on_disk = std::fs::read(dir.join("t").join(format!("{:020}.seg", 0))).unwrap();
        assert_eq!(segment::scan(&Bytes::from(on_disk), Format::V2).records, 8);
    });
}

/// A wanted seq in a gap before the first segment left (left out when every channel had
/// finished it, and the segment before the gap deleted since) reads the next record there
/// is, not a skip past everything on disk (a crashed channel's restored cursor can be
/// there).
#[test]
fn a_seq_before_the_first_segment_reads_from_it() {
    with_dir("gap-first", |dir| async move {
        // One record a segment.
        let log = RefCell::new(TopicLog::open("t", dir.join("t"), 0, 1).unwrap());
        log.borrow_mut().append(vec![message(0)], 0);
        flush(&log).await.unwrap();
        log.borrow_mut().append((1..10).map(message).collect(), 0);
        assert_eq!(log.borrow_mut().plan(8).skipped, 7);
        flush(&log).await.unwrap();
        log.borrow_mut().release_below(5);
        assert_eq!(log.borrow().segments[0].base, 8, "segment 0 deleted");
        match read_through(&log, 5, DiskHint::default()).await {
            Read::Msg(s, _) => assert_eq!(s.seq, 8),
            _ => panic!("seq 5 must read the next record, 8"),
        }
    });
}

/// Releasing past what is written moves the start at once (what a topic without channels
/// drops when emptied), and the write that follows keeps the file whole.
#[test]
fn releasing_unwritten_records_drops_them_at_once() {
    with_dir("release", |dir| async move {
        let (log, _) = written_log(&dir, 3).await;
        log.borrow_mut().append((3..6).map(message).collect(), 0);
        assert_eq!(log.borrow().written_end(), 3);
        log.borrow_mut().release_below(6);
        assert_eq!(
            log.borrow().start(),
            6,
            "the unwritten records are dropped too"
        );
        assert!(matches!(
            log.borrow().read(3, DiskHint::default()),
            Read::Skip(6)
        ));
        flush(&log).await.unwrap();
        assert_eq!(log.borrow().written_end(), 6);
        log.borrow_mut().append(vec![message(6)], 0);
        match read_through(&log, 6, DiskHint::default()).await {
            Read::Msg(s, _) => assert_eq!(s.seq, 6),
            _ => panic!("seq 6 is readable after the release"),
        }
    });
}

/// Damage that appears after start-up (the file changes under the broker) costs only the
/// damaged records: reading resynchronises on the very next record, even when that one
/// starts in a block not cached yet, instead of jumping to the next index point (up to 255
/// records further). The search is remembered, so a second pass meets the same result.
#[test]
fn damage_after_start_up_loses_only_the_damaged_records() {
    with_dir("damage", |dir| async move {
        let total = 600;
        let (log, starts) = written_log(&dir, total).await;
        // The record that straddles the first block boundary (the next one starts in a
        // block of its own), and one in the middle of a block.
        let straddling = (0..total as usize)
            .find(|&i| starts[i] < BLOCK && starts[i + 1] > BLOCK)
            .unwrap() as u64;
        assert!(straddling < segment::INDEX_EVERY - 2);
        let damaged = [straddling, straddling + 40];
        let path = log.borrow().segments[0].path.clone();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for &d in &damaged {
            let body_at = starts[d as usize] + (segment::BODY_AT + 5) as u64;
            std::os::unix::fs::FileExt::write_all_at(&file, &[0xA5], body_at).unwrap();
        }
        drop(file);
        let expected: Vec<u64> = (0..total).filter(|s| !damaged.contains(s)).collect();
        assert_eq!(read_all(&log).await, expected, "first pass");
        assert_eq!(read_all(&log).await, expected, "second pass");
        let skips = log.borrow().segments[0].skips.borrow().clone();
        for d in damaged {
            let (from, to) = (starts[d as usize], starts[d as usize + 1]);
            assert_eq!(skips.get(&from), Some(&Skip::To(to)));
        }
    });
}

/// A record larger than the whole block cache, read by readers that have no hint (one
/// coming from the in-memory window, or starting over): each read must find what it needs
/// after a round or two. Before, such a reader started at an index point before the large
/// record, needed its blocks and the earlier ones together, and the rounds fetching them
/// evicted each other's blocks forever (a delivery stall seen in CI at --shards 4).
#[test]
fn a_record_larger_than_the_cache_does_not_stall_readers_without_a_hint() {
    with_dir("huge", |dir| async move {
        let big_len = (blocks::CAPACITY + 8) * BLOCK as usize;
        let log = TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap();
        let log = RefCell::new(log);
        let big = 150;
        let msgs = (0..300)
            .map(|i| {
                let mut m = message(i);
                if i == big {
                    m.body = Bytes::from(vec![7u8; big_len]);
                }
                m
            })
            .collect();
        log.borrow_mut().append(msgs, 0);
        flush(&log).await.unwrap();
        sync(&log).await.unwrap();
        // A reader in order up to the large record fills the cache with earlier blocks.
        let mut hint = DiskHint::default();
        for seq in 0..big {
            match read_through(&log, seq, hint).await {
                Read::Msg(s, h) => {
                    assert_eq!(s.seq, seq);
                    hint = h;
                }
                _ => panic!("seq {seq} not read"),
            }
        }
        for seq in [big, big + 1, big - 1, big + 2] {
            match read_through(&log, seq, DiskHint::default()).await {
                Read::Msg(s, _) => {
                    assert_eq!(s.seq, seq);
                    assert_eq!(
                        s.msg.body.len(),
                        if seq == big {
                            big_len
                        } else {
                            message(seq).body.len()
                        }
                    );
                }
                _ => panic!("seq {seq} not read"),
            }
        }
    });
}

/// A block that cannot be read (its reads failed BAD_AFTER times) loses the records that
/// touch it, and only those: reading goes on at the first record after it.
#[test]
fn an_unreadable_block_loses_only_its_records() {
    with_dir("unreadable", |dir| async move {
        let total = 600;
        let (log, starts) = written_log(&dir, total).await;
        let base = log.borrow().segments[0].base;
        for _ in 0..blocks::BAD_AFTER {
            log.borrow().blocks.borrow_mut().failed((base, 1));
        }
        let (lost_from, lost_to) = (BLOCK, 2 * BLOCK);
        let expected: Vec<u64> = (0..total)
            .filter(|&i| {
                let (start, end) = (starts[i as usize], starts[i as usize + 1]);
                end <= lost_from || start >= lost_to
            })
            .collect();
        assert!(expected.len() < total as usize - 50, "block 1 held records");
        assert!(expected.contains(&(segment::INDEX_EVERY - 1)));
        assert_eq!(read_all(&log).await, expected);
    });
}

/// Writes a version-1 segment of `seqs` (messages as `message`) into `dir`.
fn write_v1_segment(dir: &Path, seqs: std::ops::Range<u64>) {
    let mut out = Vec::new();
    segment::v1::encode_header(&mut out, seqs.start, 0);
    for seq in seqs.clone() {
        let s = Stored {
            seq,
            msg: message(seq),
            defer_until: 0,
        };
        segment::v1::encode_record(&mut out, &s);
    }
    std::fs::write(dir.join(format!("{:020}.seg", seqs.start)), out).unwrap();
}

/// A data directory of version-1 segments (written before version 2) opens and reads
/// whole; new records go to a new version-2 segment, never appended to the version-1
/// one, and everything reads back after a reopen. A newest version-1 segment holding only
/// its header gives its name to the version-2 segment that follows.
#[test]
fn version_1_segments_are_read_and_new_records_go_to_version_2() {
    with_dir("v1-upgrade", |dir| async move {
        for (name, last_empty) in [("t", false), ("u", true)] {
            let topic = dir.join(name);
            std::fs::create_dir_all(&topic).unwrap();
            write_v1_segment(&topic, 0..50);
            write_v1_segment(&topic, 50..if last_empty { 50 } else { 100 });
            let head = if last_empty { 50 } else { 100 };
            let log = RefCell::new(TopicLog::open(name, topic.clone(), 0, 64 << 20).unwrap());
            assert_eq!(log.borrow().head(), head);
            assert_eq!(log.borrow().recovered_max_id(), Some(head));
            log.borrow_mut()
                .append((head..head + 50).map(message).collect(), 0);
            flush(&log).await.unwrap();
            sync(&log).await.unwrap();
            trim_padding(&log).await.unwrap();
            let all: Vec<u64> = (0..head + 50).collect();
            assert_eq!(read_all(&log).await, all);
            drop(log);
            let newest = std::fs::read(topic.join(format!("{head:020}.seg"))).unwrap();
            assert_eq!(
                segment::decode_header(&newest).map(|h| h.format),
                Ok(Format::V2)
            );
            assert_eq!(
                std::fs::read_dir(&topic).unwrap().count(),
                if last_empty { 2 } else { 3 }
            );
            let reopened = RefCell::new(TopicLog::open(name, topic, 0, 64 << 20).unwrap());
            assert_eq!(reopened.borrow().head(), head + 50);
            assert_eq!(read_all(&reopened).await, all);
        }
    });
}

/// splitmix64: seeded randomness for the damage runs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The message stored at `seq` in the damage runs: bodies of 0 to 3,000 bytes that
/// differ from seq to seq, some deferred.
fn damage_run_message(seq: u64) -> Stored {
    let mut rng = Rng(seq * 7919 + 1);
    let len = rng.below(3000) as usize;
    let body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    Stored {
        seq,
        msg: Message {
            id: MessageId::from_u64(seq + 1),
            timestamp: seq as i64 * 1000,
            attempts: 0,
            body: Bytes::from(body),
        },
        defer_until: if seq.is_multiple_of(5) { seq as i64 } else { 0 },
    }
}

/// One segment file of the damage runs: its bytes, and each record's (seq, start, end).
fn damage_run_segment(
    format: Format,
    seqs: std::ops::Range<u64>,
) -> (Vec<u8>, Vec<(u64, usize, usize)>) {
    let mut out = Vec::new();
    match format {
        Format::V1 => segment::v1::encode_header(&mut out, seqs.start, 0),
        Format::V2 => segment::encode_header(&mut out, seqs.start, 0),
    }
    let mut records = Vec::new();
    for seq in seqs {
        let start = out.len();
        let s = damage_run_message(seq);
        match format {
            Format::V1 => segment::v1::encode_record(&mut out, &s),
            Format::V2 => segment::encode_record(&mut out, &s),
        };
        records.push((seq, start, out.len()));
    }
    (out, records)
}

/// Opens the log in `dir` (as at start-up) and reads it all from disk, checking every
/// message delivered against what was stored: the seqs delivered.
fn recover_and_read(dir: &Path, seed: u64) -> Vec<u64> {
    read_blocking_all(
        &TopicLog::open("t", dir.to_path_buf(), 0, 64 << 20).unwrap(),
        seed,
    )
}

/// Reads all of `log` from disk, checking every message delivered against what was
/// stored: the seqs delivered.
fn read_blocking_all(log: &TopicLog, seed: u64) -> Vec<u64> {
    let mut delivered = Vec::new();
    let mut seq = 0;
    loop {
        match log.read_blocking(seq) {
            Read::Msg(s, _) => {
                assert_eq!(s, damage_run_message(s.seq), "seed {seed}: garbled record");
                delivered.push(s.seq);
                seq = s.seq + 1;
            }
            Read::Skip(n) => {
                assert!(n > seq, "seed {seed}: skip backwards");
                seq = n;
            }
            Read::End => return delivered,
            Read::Wait => panic!("seed {seed}: blocking read waits"),
        }
    }
}

/// Random damage as a disk does it, over many seeds: one byte anywhere in one segment
/// (header, frame, length, checksums, body, padding) in most runs, several bytes or a
/// burst in the others, in data directories mixing version-1 and version-2 segments, the
/// newest ending with or without direct-write padding. Reading in a log opened before the
/// damage (damage while running), recovery and reading (a start), and a second start
/// after it must each deliver every record no damaged byte touches, each exactly as
/// stored: messages lost <= records damaged, no garbled body, and start-up deletes no
/// undamaged record.
#[test]
fn random_damage_loses_only_the_damaged_records() {
    let base = std::env::temp_dir().join(format!("log-test-{}-damage-runs", std::process::id()));
    let (mut total_damaged, mut total_lost) = (0, 0);
    for seed in 0..400u64 {
        let mut rng = Rng(seed);
        let dir = base.join(format!("{seed}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Three segments of 20 to 80 records each.
        let mut files = Vec::new();
        let mut next = 0;
        for i in 0..3 {
            let n = 20 + rng.below(60);
            let format = if rng.below(3) == 0 || i == 2 && rng.below(2) == 0 {
                Format::V1
            } else {
                Format::V2
            };
            let (mut bytes, records) = damage_run_segment(format, next..next + n);
            if i == 2 && rng.below(2) == 0 {
                bytes.resize(bytes.len().next_multiple_of(4096), 0);
            }
            files.push((dir.join(format!("{next:020}.seg")), bytes, records, format));
            next += n;
        }
        for (path, bytes, ..) in &files {
            std::fs::write(path, bytes).unwrap();
        }
        let running = TopicLog::open("t", dir.clone(), 0, 64 << 20).unwrap();
        // The damage: bytes changed, and the records they touch.
        let hits: Vec<(usize, usize)> = match rng.below(10) {
            0..=6 => vec![(rng.below(3) as usize, 1)],
            7 | 8 => (0..2 + rng.below(6))
                .map(|_| (rng.below(3) as usize, 1))
                .collect(),
            _ => vec![(rng.below(3) as usize, 2 + rng.below(40) as usize)],
        };
        let mut damaged = std::collections::BTreeSet::new();
        for (file, burst) in hits {
            let (_, bytes, records, format) = &mut files[file];
            // Anywhere, or where a byte does the most harm: the header, or a record's
            // frame (its length, seq, checksums).
            let at = match rng.below(4) {
                0 => rng.below(format.header_len() as u64) as usize,
                1 => {
                    let (_, start, _) = records[rng.below(records.len() as u64) as usize];
                    start + rng.below(format.probe_len() as u64) as usize
                }
                _ => rng.below(bytes.len() as u64) as usize,
            };
            let to = (at + burst).min(bytes.len());
            for b in bytes[at..to].iter_mut() {
                *b ^= 1 + rng.below(255) as u8;
            }
            for &(seq, start, end) in records.iter() {
                if start < (at + burst) && at < end {
                    damaged.insert(seq);
                }
            }
        }
        for (path, bytes, ..) in &files {
            std::fs::write(path, bytes).unwrap();
        }
        let while_running = read_blocking_all(&running, seed);
        drop(running);
        let lost_running: Vec<u64> = (0..next).filter(|s| !while_running.contains(s)).collect();
        assert!(
            lost_running.iter().all(|s| damaged.contains(s)),
            "seed {seed}: lost {lost_running:?} while running, damaged {damaged:?}"
        );
        let first = recover_and_read(&dir, seed);
        let lost: Vec<u64> = (0..next).filter(|s| !first.contains(s)).collect();
        assert!(
            lost.iter().all(|s| damaged.contains(s)),
            "seed {seed}: lost {lost:?}, damaged {damaged:?}"
        );
        let second = recover_and_read(&dir, seed);
        assert_eq!(first, second, "seed {seed}: the second start differs");
        let _ = std::fs::remove_dir_all(&dir);
        total_damaged += damaged.len();
        total_lost += lost.len();
    }
    let _ = std::fs::remove_dir_all(&base);
    // The runs did damage records (and recovery lost those).
    assert!(
        total_damaged > 300 && total_lost > 300,
        "{total_damaged} damaged, {total_lost} lost"
    );
}

#[test]
fn direct_io_round_trip() {
    round_trip(true);
}

#[test]
fn buffered_fallback_round_trip() {
    round_trip(false);
}

/// A reader below every channel (a redrive of dead letters, a replay's seek) gets the blocks
/// it waited for even when other fetch rounds and writes come between its fetch and its
/// read; once it has read them and every channel has passed them, they go.
#[test]
fn passed_blocks_wait_for_the_reader_that_asked_for_them() {
    with_dir("passed-blocks", |dir| async move {
        let log = RefCell::new(TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap());
        log.borrow_mut().append((0..2000).map(message).collect(), 0);
        flush(&log).await.unwrap();
        // Every channel is at the head: everything on disk is passed.
        log.borrow_mut().forget_read(2000);
        assert!(matches!(
            log.borrow().read(10, DiskHint::default()),
            Read::Wait
        ));
        fetch(&log).await;
        // Before the reader comes back: another round (a channel's) and the flusher's drop.
        fetch(&log).await;
        log.borrow().drop_passed_blocks(2000);
        log.borrow_mut().forget_read(2000);
        match log.borrow().read(10, DiskHint::default()) {
            Read::Msg(s, _) => assert_eq!(s.msg, message(10)),
            _ => panic!("the block it waited for was dropped before it read it"),
        }
        // Read now, and passed by every channel: it goes at the next drop (the read-ahead
        // nobody has read stays, for capacity and age to take).
        let before = log.borrow().cached_bytes();
        log.borrow_mut().forget_read(2000);
        assert_eq!(log.borrow().cached_bytes(), before - BLOCK);
        assert!(matches!(
            log.borrow().read(10, DiskHint::default()),
            Read::Wait
        ));
    });
}

/// A body read from the growing end of the newest segment is copied out: that block is read
/// again, whole, each time a reader passes its valid part, and slices would keep every one
/// of those copies alive while their messages are in flight (a consumer holding thousands
/// would hold as many copies of the block). A body from a block written in full stays a
/// slice of it.
#[test]
fn bodies_from_the_growing_end_keep_no_block_alive() {
    with_dir("growing-end", |dir| async move {
        let in_block = |log: &RefCell<TopicLog>, body: &Bytes| {
            let l = log.borrow();
            let cache = l.blocks.borrow();
            let (block, _, _) = cache
                .tail_from(0, HEADER_LEN as u64)
                .expect("block 0 cached");
            let start = block.as_ptr() as usize;
            (start..start + block.len()).contains(&(body.as_ptr() as usize))
        };
        let log = RefCell::new(TopicLog::open("t", dir.join("t"), 0, 64 << 20).unwrap());
        let mut held = Vec::new();
        let mut seq = 0;
        // A few records a round: block 0 grows, and a reader at the end reads it again.
        for round in 0..4 {
            log.borrow_mut()
                .append((seq..seq + 5).map(message).collect(), 0);
            flush(&log).await.unwrap();
            for _ in 0..5 {
                let Read::Msg(s, _) = read_through(&log, seq, DiskHint::default()).await else {
                    panic!("seq {seq} not read");
                };
                assert_eq!(s.msg, message(seq));
                assert!(
                    !in_block(&log, &s.msg.body),
                    "round {round}: seq {seq} is a slice of the growing block"
                );
                held.push(s);
                seq += 1;
            }
        }
        // Written past its end, block 0 no longer grows: read afresh, its bodies are slices.
        let full = RefCell::new(TopicLog::open("f", dir.join("f"), 0, 64 << 20).unwrap());
        full.borrow_mut().append((0..200).map(message).collect(), 0);
        flush(&full).await.unwrap();
        let Read::Msg(s, _) = read_through(&full, 0, DiskHint::default()).await else {
            panic!("seq 0 not read");
        };
        assert_eq!(s.msg, message(0));
        assert!(
            in_block(&full, &s.msg.body),
            "a full block's body is a slice"
        );
    });
}

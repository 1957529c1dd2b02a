//! Tests of a replicated topic's log (`replica.rs`, `truncate.rs`) on glommio with temporary
//! directories: a property test against `replication::replica::MemLog` as the model (append,
//! truncate, read, write, sync, crash and reopen in random order), and focused cases:
//! truncations inside a segment, across segments and of records not written yet, each
//! followed by appends and a restart; damage on disk reported, never returned as good.

use super::log_tests::with_dir;
use super::replica::{to_record, ReplicatedLog};
use super::*;
use crate::storage::segment::{self, Stored};
use bytes::Bytes;
use proptest::prelude::*;
use protocol::{Message, MessageId};
use replication::ids::Epoch;
use replication::replica::{Batch, LogError, MemLog, Record, ReplicaLog};
use std::sync::atomic::{AtomicU64, Ordering};

/// The record a leader of `epoch` wrote at `seq`: its content depends on both, so a record
/// cut and written again under another epoch differs from the one cut.
fn record(seq: u64, epoch: u64) -> Record {
    let len = 50 + ((seq * 977 + epoch * 31) % 3_000) as usize;
    to_record(&Stored {
        seq,
        msg: Message {
            id: MessageId::from_u64(seq * 1_000 + epoch),
            timestamp: seq as i64 * 7,
            attempts: 0,
            body: Bytes::from(vec![(seq + epoch) as u8; len]),
        },
        defer_until: if seq.is_multiple_of(5) {
            1_000 + seq as i64
        } else {
            0
        },
    })
}

fn records(from: u64, n: u64, epoch: u64) -> Vec<Record> {
    (from..from + n).map(|s| record(s, epoch)).collect()
}

/// A replicated log in `dir`, nothing kept in memory once written (reads go to the disk).
struct Real {
    log: RefCell<TopicLog>,
    store: ReplicaStore,
    dir: PathBuf,
    max_bytes: u64,
}

impl Real {
    fn open(dir: &Path, max_bytes: u64) -> Real {
        let mut log = TopicLog::open("t", dir.to_path_buf(), 0, max_bytes).unwrap();
        let store = ReplicaStore::open(&mut log).unwrap();
        Real {
            log: RefCell::new(log),
            store,
            dir: dir.to_path_buf(),
            max_bytes,
        }
    }

    /// A crash: everything not written is lost; the log is opened again.
    fn crash(self) -> Real {
        let (dir, max_bytes) = (self.dir.clone(), self.max_bytes);
        drop(self);
        Real::open(&dir, max_bytes)
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut ReplicatedLog<'_>) -> R) -> R {
        let mut l = self.log.borrow_mut();
        f(&mut ReplicatedLog::new(&mut l, &mut self.store))
    }

    /// A read, fetching the blocks it waits for.
    async fn read(&mut self, from: u64, max: usize) -> Result<Batch, LogError> {
        for _ in 0..20 {
            match self.with(|r| r.read(from, max)) {
                Err(LogError::NotReady) => {
                    fetch(&self.log).await;
                }
                other => return other,
            }
        }
        Err(LogError::NotReady)
    }

    /// Every record from `from` to `end`, batch by batch.
    async fn read_range(&mut self, from: u64, end: u64) -> Vec<(Epoch, Record)> {
        let mut out = Vec::new();
        let mut at = from;
        while at < end {
            let b = self.read(at, 17).await.unwrap();
            assert!(!b.records.is_empty(), "empty batch at {at}");
            assert!(b.consecutive_from(at));
            at = b.end().unwrap();
            out.extend(b.records.into_iter().map(|r| (b.epoch, r)));
        }
        out
    }

    async fn write(&self) {
        flush(&self.log).await.unwrap();
    }

    /// A replica's sync request, served as the flusher serves it.
    async fn sync(&mut self) {
        self.with(|r| r.request_sync());
        flush(&self.log).await.unwrap();
        sync(&self.log).await.unwrap();
    }

    fn seg_files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".seg"))
            .collect();
        v.sort();
        v
    }
}

/// Every record of the model, with its epoch.
fn model_range(m: &MemLog, from: u64, end: u64) -> Vec<(Epoch, Record)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < end {
        let b = m.read(at, usize::MAX).unwrap();
        at = b.end().unwrap();
        out.extend(b.records.into_iter().map(|r| (b.epoch, r)));
    }
    out.into_iter().take_while(|(_, r)| r.seq < end).collect()
}

#[derive(Debug, Clone)]
enum Op {
    /// Records under the current epoch, or a newer one.
    Append {
        n: u64,
        new_epoch: bool,
    },
    /// Cut this many records off the end.
    Truncate {
        back: u64,
    },
    /// A read from this fraction (per mille) of the log, of at most `max` records.
    Read {
        at: u64,
        max: usize,
    },
    Write,
    Sync,
    Crash,
    /// Begin again, empty, this many seqs past the end.
    StartAt {
        ahead: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1u64..25, proptest::bool::weighted(0.3)).prop_map(|(n, new_epoch)| Op::Append { n, new_epoch }),
        2 => (0u64..40).prop_map(|back| Op::Truncate { back }),
        3 => (0u64..1000, 1usize..40).prop_map(|(at, max)| Op::Read { at, max }),
        2 => Just(Op::Write),
        2 => Just(Op::Sync),
        1 => Just(Op::Crash),
        1 => (0u64..30).prop_map(|ahead| Op::StartAt { ahead }),
    ]
}

static CASE: AtomicU64 = AtomicU64::new(0);

/// Runs `ops` on a real log and on the model; panics at the first difference.
fn run_ops(ops: Vec<Op>) {
    let name = format!("replica-prop-{}", CASE.fetch_add(1, Ordering::Relaxed));
    with_dir(&name, |dir| async move {
        // Small segments: cuts and reads cross segment boundaries often.
        let mut real = Real::open(&dir.join("t"), 16 * 1024);
        let mut model = MemLog::new();
        let mut epoch = 1u64;
        for op in ops {
            match op {
                Op::Append { n, new_epoch } => {
                    epoch += u64::from(new_epoch);
                    let recs = records(model.end(), n, epoch);
                    assert_eq!(
                        real.with(|r| r.append(Epoch(epoch), &recs)),
                        model.append(Epoch(epoch), &recs)
                    );
                }
                Op::Truncate { back } => {
                    let to = model.end().saturating_sub(back);
                    assert_eq!(real.with(|r| r.truncate_to(to)), Ok(()));
                    assert_eq!(model.truncate_to(to), Ok(()));
                }
                Op::Read { at, max } => {
                    let start = model.start();
                    if start > 0 {
                        assert!(matches!(
                            real.read(start - 1, max).await,
                            Err(LogError::OutOfRange { .. })
                        ));
                    }
                    if model.end() == start {
                        assert!(matches!(
                            real.read(start, max).await,
                            Err(LogError::OutOfRange { .. })
                        ));
                        continue;
                    }
                    let from = start + (model.end() - start) * at / 1000;
                    let want = model.read(from, max).unwrap();
                    let got = real.read(from, max).await.unwrap();
                    assert_eq!(got.epoch, want.epoch);
                    assert!(!got.records.is_empty());
                    assert_eq!(got.records[..], want.records[..got.records.len()]);
                }
                Op::Write => real.write().await,
                Op::Sync => {
                    real.sync().await;
                    model.request_sync();
                    model.complete_sync();
                    assert!(real.log.borrow_mut().take_synced());
                }
                Op::StartAt { ahead } => {
                    let at = model.end() + ahead;
                    assert_eq!(real.with(|r| r.start_at(at)), Ok(()));
                    assert_eq!(model.start_at(at), Ok(()));
                    assert!(real.seg_files().is_empty());
                }
                Op::Crash => {
                    let (durable, end) = (model.durable_end(), model.end());
                    // A log begun again with nothing written since has no file: it opens
                    // empty at 0 (its leader begins it again).
                    let nothing_written = durable == model.start();
                    real = real.crash();
                    let now = real.with(|r| r.end());
                    assert!(
                        durable <= now && now <= end || nothing_written && now == 0,
                        "reopened with end {now}, durable {durable}, end before {end}"
                    );
                    assert!(!real.store.damaged());
                    // What was written survives a process crash; the rest is gone.
                    assert_eq!(model.truncate_to(now), Ok(()));
                }
            }
            assert_eq!(real.with(|r| r.end()), model.end());
            assert_eq!(real.with(|r| r.start()), model.start());
            assert!(real.with(|r| r.durable_end()) >= model.durable_end());
            assert!(real.with(|r| r.durable_end() <= r.end()));
            assert_eq!(real.with(|r| r.epochs().clone()), *model.epochs());
        }
        // Everything the model holds is read back the same, before and after a restart.
        let (start, end) = (model.start(), model.end());
        assert_eq!(
            real.read_range(start, end).await,
            model_range(&model, start, end)
        );
        real.sync().await;
        let mut real = real.crash();
        assert_eq!(real.with(|r| r.end()), if start == end { 0 } else { end });
        if start < end {
            assert_eq!(real.with(|r| r.start()), start);
            assert_eq!(real.with(|r| r.epochs().clone()), *model.epochs());
        }
        assert_eq!(
            real.read_range(start, end).await,
            model_range(&model, start, end)
        );
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The replicated log behaves as the model: same end, epochs and records; a reopen keeps
    /// every durable record and brings no cut one back.
    #[test]
    fn replicated_log_behaves_as_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run_ops(ops);
    }
}

/// A log of `n` records of epoch 1, written and synced.
async fn synced(dir: &Path, n: u64, max_bytes: u64) -> Real {
    let mut real = Real::open(&dir.join("t"), max_bytes);
    assert_eq!(real.with(|r| r.append(Epoch(1), &records(0, n, 1))), Ok(()));
    real.sync().await;
    assert_eq!(real.with(|r| r.durable_end()), n);
    real
}

/// Cuts, appends under a new epoch, and checks the log before and after a restart.
async fn cut_append_restart(mut real: Real, cut: u64, more: u64) {
    assert_eq!(real.with(|r| r.truncate_to(cut)), Ok(()));
    assert_eq!(real.with(|r| r.end()), cut);
    assert!(real.with(|r| r.durable_end()) <= cut);
    assert_eq!(
        real.with(|r| r.append(Epoch(2), &records(cut, more, 2))),
        Ok(())
    );
    real.sync().await;
    let mut want: Vec<(Epoch, Record)> = records(0, cut, 1)
        .into_iter()
        .map(|r| (Epoch(1), r))
        .collect();
    want.extend(records(cut, more, 2).into_iter().map(|r| (Epoch(2), r)));
    assert_eq!(real.read_range(0, cut + more).await, want);
    let mut real = real.crash();
    assert!(!real.store.damaged());
    assert_eq!(real.with(|r| r.end()), cut + more);
    let entries = real.with(|r| r.epochs().entries().to_vec());
    let expect: Vec<(Epoch, u64)> = if cut == 0 {
        vec![(Epoch(2), 0)]
    } else {
        vec![(Epoch(1), 0), (Epoch(2), cut)]
    };
    assert_eq!(entries, expect);
    assert_eq!(real.read_range(0, cut + more).await, want);
}

#[test]
fn a_cut_inside_a_segment_then_appends_survive_a_restart() {
    with_dir("replica-cut-inside", |dir| async move {
        let real = synced(&dir, 60, 64 << 20).await;
        cut_append_restart(real, 23, 10).await;
    });
}

#[test]
fn a_cut_across_segments_deletes_the_newer_ones() {
    with_dir("replica-cut-across", |dir| async move {
        let real = synced(&dir, 80, 16 * 1024).await;
        let before = real.seg_files();
        assert!(before.len() > 4, "{before:?}");
        let mut real = real;
        assert_eq!(real.with(|r| r.truncate_to(9)), Ok(()));
        // The segment holding seq 9 stays; every newer file is gone.
        let kept = real.seg_files();
        assert!(
            kept.iter()
                .all(|f| f.as_str() <= format!("{:020}.seg", 9).as_str()),
            "{kept:?}"
        );
        assert!(kept.len() < before.len());
        cut_append_restart(real, 9, 30).await;
    });
}

#[test]
fn a_cut_of_records_not_written_yet() {
    with_dir("replica-cut-unwritten", |dir| async move {
        let mut real = synced(&dir, 20, 16 * 1024).await;
        // Planned, some in a segment not yet on disk, none written.
        assert_eq!(
            real.with(|r| r.append(Epoch(1), &records(20, 15, 1))),
            Ok(())
        );
        real.log.borrow_mut().plan(0);
        cut_append_restart(real, 27, 6).await;
    });
}

#[test]
fn a_cut_to_nothing_then_appends() {
    with_dir("replica-cut-all", |dir| async move {
        let real = synced(&dir, 30, 16 * 1024).await;
        cut_append_restart(real, 0, 12).await;
    });
}

/// A crash right after a cut, before what was appended after it is written: the cut records
/// are not back.
#[test]
fn a_crash_after_a_cut_never_brings_cut_records_back() {
    with_dir("replica-cut-crash", |dir| async move {
        let mut real = synced(&dir, 40, 16 * 1024).await;
        assert_eq!(real.with(|r| r.truncate_to(12)), Ok(()));
        assert_eq!(
            real.with(|r| r.append(Epoch(3), &records(12, 4, 3))),
            Ok(())
        );
        let mut real = real.crash();
        assert_eq!(real.with(|r| r.end()), 12);
        assert_eq!(
            real.with(|r| r.epochs().entries().to_vec()),
            vec![(Epoch(1), 0)]
        );
        let want: Vec<_> = records(0, 12, 1)
            .into_iter()
            .map(|r| (Epoch(1), r))
            .collect();
        assert_eq!(real.read_range(0, 12).await, want);
    });
}

/// A follower's log begun again past its end (its leader released what it misses): the
/// segments go at once, the next records open a segment based at the new start, and a restart
/// finds the log there with its epoch.
#[test]
fn a_log_begun_again_starts_a_segment_at_its_new_start() {
    with_dir("replica-start-at", |dir| async move {
        let mut real = synced(&dir, 40, 16 * 1024).await;
        assert!(real.seg_files().len() > 1);
        assert_eq!(real.with(|r| r.start_at(100)), Ok(()));
        assert!(real.seg_files().is_empty());
        assert_eq!(real.with(|r| (r.start(), r.end())), (100, 100));
        assert!(real.with(|r| r.epochs().entries().is_empty()));
        assert!(matches!(
            real.read(39, 1).await,
            Err(LogError::OutOfRange { .. })
        ));
        assert_eq!(
            real.with(|r| r.append(Epoch(2), &records(100, 10, 2))),
            Ok(())
        );
        real.sync().await;
        assert_eq!(
            real.seg_files().first(),
            Some(&format!("{:020}.seg", 100)),
            "the first segment is based at the new start"
        );
        let want: Vec<_> = records(100, 10, 2)
            .into_iter()
            .map(|r| (Epoch(2), r))
            .collect();
        let mut real = real.crash();
        assert!(!real.store.damaged());
        assert_eq!(real.with(|r| (r.start(), r.end())), (100, 110));
        assert_eq!(
            real.with(|r| r.epochs().entries().to_vec()),
            vec![(Epoch(2), 100)]
        );
        assert_eq!(real.read_range(100, 110).await, want);
        // A truncation below the start begins the log again there.
        assert_eq!(real.with(|r| r.truncate_to(50)), Ok(()));
        assert_eq!(real.with(|r| (r.start(), r.end())), (50, 50));
        assert!(real.seg_files().is_empty());
    });
}

/// Flips a byte of record `seq`'s body in its file (the log holds one segment).
fn damage(real: &Real, seq: u64) {
    use std::os::unix::fs::FileExt;
    let files = real.seg_files();
    let path = real.dir.join(&files[0]);
    let data = std::fs::read(&path).unwrap();
    let mut off = segment::HEADER_LEN;
    let mut at = 0;
    while at < seq {
        off += segment::Format::V2.frame(&data[off..]).unwrap().len;
        at += 1;
    }
    let pos = off + segment::BODY_AT + 3;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[data[pos] ^ 0x41], pos as u64).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_damaged_record_on_disk_is_reported_never_returned() {
    with_dir("replica-damage", |dir| async move {
        let mut real = synced(&dir, 30, 64 << 20).await;
        damage(&real, 17);
        assert_eq!(real.read(17, 5).await, Err(LogError::Damaged { seq: 17 }));
        // A batch before it stops short of it.
        let b = real.read(10, 20).await.unwrap();
        assert_eq!(b.end(), Some(17));
        assert!(b.first_damaged().is_none());
        // At a restart the log is cut at the damage, and says so.
        let mut real = real.crash();
        assert!(real.store.damaged());
        assert_eq!(real.with(|r| r.end()), 17);
        assert_eq!(
            real.with(|r| r.epochs().entries().to_vec()),
            vec![(Epoch(1), 0)]
        );
    });
}

#[test]
fn a_follower_never_stores_a_record_that_fails_its_crc() {
    with_dir("replica-bad-crc", |dir| async move {
        let mut real = synced(&dir, 5, 64 << 20).await;
        let mut recs = records(5, 3, 1);
        recs[1].bytes[40] ^= 1;
        assert_eq!(
            real.with(|r| r.append(Epoch(1), &recs)),
            Err(LogError::Damaged { seq: 6 })
        );
        assert_eq!(real.with(|r| r.end()), 5);
        let gap = records(6, 2, 1);
        assert!(matches!(
            real.with(|r| r.append(Epoch(1), &gap)),
            Err(LogError::NotAtEnd { .. })
        ));
    });
}

/// A replicated log writes records every channel has finished: followers need them.
#[test]
fn a_replicated_log_skips_nothing() {
    with_dir("replica-no-skip", |dir| async move {
        let mut real = Real::open(&dir.join("t"), 64 << 20);
        assert_eq!(
            real.with(|r| r.append(Epoch(1), &records(0, 10, 1))),
            Ok(())
        );
        let planned = real.log.borrow_mut().plan(u64::MAX);
        assert_eq!(
            planned,
            Planned {
                kept: 10,
                skipped: 0
            }
        );
    });
}

/// A records's bytes and crc are its segment record's payload and payload crc, as stored.
#[test]
fn a_records_crc_is_the_one_the_segment_stores() {
    let r = record(3, 1);
    let stored = Stored {
        seq: 3,
        msg: Message {
            id: MessageId::from_u64(3_001),
            timestamp: 21,
            attempts: 0,
            body: Bytes::from(vec![4u8; 50 + 3 * 977 + 31]),
        },
        defer_until: 0,
    };
    let mut enc = Vec::new();
    segment::encode_record(&mut enc, &stored);
    assert_eq!(&enc[segment::FRAME_LEN..], &r.bytes[..]);
    assert_eq!(enc[16..20], r.crc.to_be_bytes());
}

/// The leader's publishes note their epoch; the history and the records come back after a
/// restart, and a completed fsync is reported once.
#[test]
fn a_leaders_appends_keep_their_epochs() {
    with_dir("replica-leader", |dir| async move {
        let mut real = Real::open(&dir.join("t"), 16 * 1024);
        let msgs = |from: u64, n: u64| -> Vec<Message> {
            (from..from + n)
                .map(|i| Message {
                    id: MessageId::from_u64(i + 1),
                    timestamp: i as i64,
                    attempts: 0,
                    body: Bytes::from(vec![i as u8; 700]),
                })
                .collect()
        };
        assert_eq!(
            real.with(|r| r.append_local(Epoch(4), msgs(0, 30), 0)),
            Ok(30)
        );
        assert_eq!(
            real.with(|r| r.append_local(Epoch(6), msgs(30, 5), 99)),
            Ok(35)
        );
        assert_eq!(
            real.with(|r| r.append_local(Epoch(5), msgs(35, 1), 0)),
            Err(LogError::EpochRegression {
                last: Epoch(6),
                appended: Epoch(5)
            })
        );
        assert!(!real.log.borrow_mut().take_synced());
        real.sync().await;
        assert!(real.log.borrow_mut().take_synced());
        assert!(!real.log.borrow_mut().take_synced());
        let history = [(Epoch(4), 0), (Epoch(6), 30)];
        assert_eq!(real.store.epochs().entries(), &history[..]);
        let mut real = real.crash();
        assert_eq!(real.store.epochs().entries(), &history[..]);
        let b = real.read(28, 10).await.unwrap();
        assert_eq!((b.epoch, b.end()), (Epoch(4), Some(30)));
        let b = real.read(30, 10).await.unwrap();
        assert_eq!((b.epoch, b.end()), (Epoch(6), Some(35)));
        assert_eq!(&b.records[0].bytes[8..16], &99i64.to_be_bytes());
    });
}

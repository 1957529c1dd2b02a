//! Unit tests of finding a position for replay ([`super::seek`]): the history a log keeps,
//! a time found in the window, in segment files read back through the block cache and the
//! fetcher, before the history, and after everything.

use super::seek::SeekStart;
use super::*;
use bytes::Bytes;
use protocol::{Message, MessageId};

const SEC: i64 = 1_000_000_000;

/// Message `i`, published at second `10 * i` (so times between two messages exist).
fn message(i: u64) -> Message {
    Message {
        id: MessageId::from_u64(i + 1),
        timestamp: i as i64 * 10 * SEC,
        attempts: 0,
        body: Bytes::from(vec![b's'; 300]),
    }
}

/// Runs `test` on a glommio executor with a log (no memory window: every read goes to the
/// files) holding messages 0..1000 written in segments of about 64 KiB.
fn with_log<F: std::future::Future<Output = ()>>(
    name: &str,
    test: impl FnOnce(RefCell<TopicLog>) -> F,
) {
    super::log_tests::with_dir(&format!("seek-{name}"), |dir| async move {
        let log = RefCell::new(TopicLog::open("t", dir.join("t"), 0, 64 << 10).unwrap());
        for chunk in 0..10u64 {
            let msgs = (chunk * 100..chunk * 100 + 100).map(message).collect();
            log.borrow_mut().append(msgs, 0);
            log.borrow_mut().plan(0);
            flush(&log).await.unwrap();
        }
        assert!(log.borrow().segments.len() > 3, "several segments");
        test(log).await;
    });
}

#[test]
fn a_time_is_found_in_the_files_at_the_first_record_at_or_after_it() {
    with_log("files", |log| async move {
        let h = log.borrow().history();
        assert_eq!(
            h,
            History {
                oldest_offset: 0,
                oldest_timestamp: 0
            }
        );
        for (t, want) in [
            (0, 0),
            (10 * SEC, 1),
            (10 * SEC + 1, 2),
            (5_000 * SEC, 500),
            (5_005 * SEC, 501),
            (9_990 * SEC, 999),
            (9_990 * SEC + 1, 1000),
            (i64::MAX, 1000),
        ] {
            assert_eq!(seek_time(&log, t).await, Seek::At(want), "time {t}");
        }
        // Every segment boundary: the first record of a segment, and the one before it.
        let bases: Vec<u64> = log.borrow().segments.iter().map(|s| s.base).collect();
        for b in bases.into_iter().filter(|&b| b > 0) {
            let t = b as i64 * 10 * SEC;
            assert_eq!(seek_time(&log, t).await, Seek::At(b));
            assert_eq!(seek_time(&log, t - 1).await, Seek::At(b));
            assert_eq!(seek_time(&log, t - 10 * SEC).await, Seek::At(b - 1));
        }
    });
}

#[test]
fn a_time_before_what_is_kept_says_how_far_back_the_history_goes() {
    with_log("before", |log| async move {
        // Every channel passed the first segments, and no retention keeps them.
        log.borrow_mut().release_below(500);
        let h = log.borrow().history();
        assert!(h.oldest_offset > 0 && h.oldest_offset <= 500);
        assert_eq!(h.oldest_timestamp, h.oldest_offset as i64 * 10 * SEC);
        assert_eq!(seek_time(&log, 0).await, Seek::BeforeHistory(h));
        assert_eq!(
            seek_time(&log, h.oldest_timestamp).await,
            Seek::At(h.oldest_offset)
        );
        assert!(!log.borrow().holds(h.oldest_offset - 1));
        assert!(log.borrow().holds(h.oldest_offset));
        assert!(log.borrow().holds(1000), "the head: nothing to replay");
        assert!(!log.borrow().holds(1001));
        // The start moved past what was released; a rewind reopens it.
        assert_eq!(log.borrow().start(), 500);
        assert!(matches!(
            log.borrow().read(h.oldest_offset, DiskHint::default()),
            Read::Skip(500)
        ));
        log.borrow_mut().reopen_from(h.oldest_offset);
        let got = loop {
            let r = log.borrow().read(h.oldest_offset, DiskHint::default());
            match r {
                Read::Msg(s, _) => break s.seq,
                Read::Wait => {
                    fetch(&log).await;
                }
                _ => panic!("the reopened history reads"),
            }
        };
        assert_eq!(got, h.oldest_offset);
    });
}

#[test]
fn a_time_in_the_window_needs_no_disk() {
    let mut log = TopicLog::in_memory("w", 100);
    assert_eq!(log.history().oldest_offset, 0);
    log.append((0..300).map(message).collect(), 0);
    let h = log.history();
    assert_eq!(h.oldest_offset, 200, "the window keeps the newest 100");
    assert_eq!(log.seek_start(2_500 * SEC), SeekStart::At(250));
    assert_eq!(log.seek_start(2_505 * SEC), SeekStart::At(251));
    assert_eq!(log.seek_start(1_000 * SEC), SeekStart::BeforeHistory);
    assert_eq!(log.timestamp_near(250), Some(2_500 * SEC));
    assert_eq!(log.timestamp_near(300), None);
}

//! Unit tests of the retention rule ([`super::Retention`]): which passed segments
//! [`TopicLog::release_below`] deletes by time, by bytes, by both, and that none a channel
//! still needs is ever deleted, whatever the retention; and that a log with retention writes
//! what every channel has finished, and knows its segments' first timestamps after a reopen.

use super::*;
use crate::storage::segment;
use bytes::Bytes;
use protocol::{Message, MessageId};

const SEC: i64 = 1_000_000_000;

/// Message `i`, published at second `i`, of 100 bytes.
fn message(i: u64) -> Message {
    Message {
        id: MessageId::from_u64(i + 1),
        timestamp: i as i64 * SEC,
        attempts: 0,
        body: Bytes::from(vec![b'r'; 100]),
    }
}

/// The size of one segment holding one message of [`message`].
fn seg_len() -> u64 {
    HEADER_LEN as u64 + segment::record_len(100) as u64
}

/// Runs `test` on a glommio executor with a log in a fresh directory whose segments hold one
/// message each, messages 0..10 written, and `retention`.
fn with_log<F: std::future::Future<Output = ()>>(
    name: &str,
    retention: Retention,
    test: impl FnOnce(RefCell<TopicLog>, PathBuf) -> F,
) {
    super::log_tests::with_dir(&format!("retention-{name}"), |dir| async move {
        let topic = dir.join("t");
        let log = RefCell::new(TopicLog::open("t", topic.clone(), 0, 1).unwrap());
        log.borrow_mut().set_retention(retention);
        log.borrow_mut().append((0..10).map(message).collect(), 0);
        // Every channel has finished everything: only retention keeps records on disk.
        log.borrow_mut().plan(10);
        flush(&log).await.unwrap();
        test(log, topic).await;
    });
}

fn bases(log: &RefCell<TopicLog>) -> Vec<u64> {
    log.borrow().segments.iter().map(|s| s.base).collect()
}

#[test]
fn without_retention_passed_segments_go_at_once() {
    with_log("none", Retention::default(), |log, _| async move {
        // No retention: what every channel finished was not even written, but the head.
        assert_eq!(bases(&log), vec![9]);
        log.borrow_mut().release_below_at(10, 0);
        assert_eq!(bases(&log), vec![9], "the newest segment stays");
    });
}

#[test]
fn retention_by_time_keeps_passed_segments_until_they_are_old() {
    let r = Retention {
        time_ns: 5 * SEC as u64,
        bytes: 0,
    };
    with_log("time", r, |log, _| async move {
        assert_eq!(bases(&log), (0..10).collect::<Vec<_>>(), "all written");
        // At second 6: segment i goes when 6 - (i + 1) > 5, for none.
        log.borrow_mut().release_below_at(10, 6 * SEC);
        assert_eq!(bases(&log), (0..10).collect::<Vec<_>>(), "none is 5 s old");
        log.borrow_mut().release_below_at(10, 12 * SEC);
        // Segment i goes when 12 - (i + 1) > 5: i < 6.
        assert_eq!(bases(&log), (6..10).collect::<Vec<_>>());
        assert_eq!(
            log.borrow().start(),
            10,
            "the start moves as without retention"
        );
        let trash = log.borrow_mut().take_trash();
        assert_eq!(trash.len(), 6);
        log.borrow_mut().release_below_at(10, 1_000 * SEC);
        assert_eq!(bases(&log), vec![9], "the newest segment always stays");
    });
}

#[test]
fn retention_by_bytes_keeps_the_newest_segments_that_hold_the_size() {
    let r = Retention {
        time_ns: 0,
        bytes: 3 * seg_len(),
    };
    with_log("bytes", r, |log, _| async move {
        log.borrow_mut().release_below_at(10, 1_000 * SEC);
        assert_eq!(bases(&log), vec![7, 8, 9], "three segments hold the size");
        assert_eq!(log.borrow().retained().bytes, 3 * seg_len());
        assert_eq!(log.borrow().retained().oldest_offset, 7);
        assert_eq!(log.borrow().retained().oldest_timestamp, 7 * SEC);
    });
}

#[test]
fn with_both_limits_either_one_lets_a_segment_go() {
    let r = Retention {
        time_ns: 5 * SEC as u64,
        bytes: 6 * seg_len(),
    };
    with_log("both", r, |log, _| async move {
        // At second 6 nothing is old yet; the size keeps the six newest.
        log.borrow_mut().release_below_at(10, 6 * SEC);
        assert_eq!(bases(&log), (4..10).collect::<Vec<_>>());
        // At second 11, the time lets segments 0..5 go (11 - (i + 1) > 5: i < 5).
        log.borrow_mut().release_below_at(10, 11 * SEC);
        assert_eq!(bases(&log), (5..10).collect::<Vec<_>>());
    });
}

#[test]
fn retention_never_deletes_what_a_channel_still_needs() {
    let r = Retention {
        time_ns: 1,
        bytes: 1,
    };
    with_log("needed", r, |log, _| async move {
        // A channel still owes message 4: segments 0..4 may go, 4 on must stay, however old
        // and big.
        log.borrow_mut().release_below_at(4, 1_000 * SEC);
        assert_eq!(bases(&log), (4..10).collect::<Vec<_>>());
        assert_eq!(log.borrow().start(), 4);
    });
}

#[test]
fn a_reopened_log_knows_its_segments_first_timestamps() {
    let r = Retention {
        time_ns: 5 * SEC as u64,
        bytes: 0,
    };
    with_log("reopen", r, |log, topic| async move {
        sync(&log).await.unwrap();
        drop(log);
        let mut reopened = TopicLog::open("t", topic, 0, 1).unwrap();
        reopened.set_retention(r);
        assert_eq!(reopened.retained().oldest_timestamp, 0);
        assert_eq!(reopened.retained().bytes, 10 * seg_len());
        reopened.release_below_at(10, 12 * SEC);
        let left: Vec<u64> = reopened.segments.iter().map(|s| s.base).collect();
        assert_eq!(left, (6..10).collect::<Vec<_>>());
        assert_eq!(reopened.retained().oldest_timestamp, 6 * SEC);
    });
}

#[test]
fn the_rule_itself() {
    let none = Retention::default();
    assert!(none.lets_go(0, 0, 0));
    let t = Retention {
        time_ns: 10,
        bytes: 0,
    };
    assert!(!t.lets_go(100, u64::MAX, 110), "10 ns old: kept");
    assert!(t.lets_go(100, 0, 111));
    let b = Retention {
        time_ns: 0,
        bytes: 50,
    };
    assert!(
        !b.lets_go(0, 49, i64::MAX),
        "the newer ones hold less: kept"
    );
    assert!(b.lets_go(0, 50, 0));
}

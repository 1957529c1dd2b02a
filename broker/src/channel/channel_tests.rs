//! Unit tests of the channel: RDY and round robin, the output window, requeue order, FIN
//! errors, disconnects, timeouts and TOUCH, deferrals, figures, metadata round trips.

use super::*;
use crate::storage::meta::ChannelMeta;
use bytes::Bytes;
use protocol::Message;

fn msg(n: u64) -> Message {
    Message {
        id: MessageId::from_u64(n),
        timestamp: n as i64,
        attempts: 0,
        body: Bytes::from(format!("m{n}")),
    }
}

fn spec(conn: u64) -> ConsumerSpec {
    ConsumerSpec {
        key: ConsumerKey { shard: 0, conn },
        msg_timeout: Duration::from_secs(60),
        info: Arc::new(ClientInfo::default()),
        output_window: u64::MAX,
    }
}

const MAX: Duration = Duration::from_secs(900);

/// A log holding `n` messages and a channel reading it from the start.
fn setup(name: &str, n: u64, defer_until: i64) -> (TopicLog, Rc<RefCell<Channel>>) {
    let mut log = TopicLog::in_memory("t", 1000);
    let end = log.append((0..n).map(msg).collect(), defer_until);
    let ch = Channel::new(Arc::from("t"), name, 100, 0, end);
    (log, ch)
}

#[test]
fn rdy_bounds_in_flight_and_delivery_is_round_robin() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 10, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.add_consumer(spec(2), 0).unwrap();
    c.set_rdy(spec(1).key, 2);
    c.set_rdy(spec(2).key, 3);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out.len(), 5);
    let to1 = out.iter().filter(|d| d.to.conn == 1).count();
    assert_eq!(to1, 2);
    assert_eq!(out[0].to.conn, 1);
    assert_eq!(out[1].to.conn, 2);
    assert!(out.iter().all(|d| d.msg.attempts == 1));
    assert_eq!(c.waiting(), 5);
    // FIN frees one slot: exactly one more delivery.
    c.finish(spec(1).key, out[0].msg.id).unwrap();
    let mut more = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut more);
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].to.conn, 1);
    assert_eq!(c.floor(), 1, "message 0 is finished, 1 is still in flight");
}

/// Each consumer's batch says whether it can take more: full once its in-flight count
/// reached its RDY, still ready when the channel ran out first.
#[test]
fn batches_say_when_their_consumer_is_full() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 5, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.add_consumer(spec(2), 0).unwrap();
    c.set_rdy(spec(1).key, 1);
    c.set_rdy(spec(2).key, 100);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out.len(), 5);
    let full = |conn: u64| {
        out.batches
            .iter()
            .find(|b| b.to.conn == conn)
            .map(|b| b.full)
    };
    assert_eq!(full(1), Some(true), "RDY 1, one in flight");
    assert_eq!(full(2), Some(false), "RDY 100, four in flight");
}

/// A consumer whose connection has not written what it was given gets nothing more past
/// its window, whatever its RDY; the others take the messages; a report of the bytes
/// written lets it take more.
#[test]
fn unwritten_frames_past_the_window_pause_a_consumer() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 10, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    let stuck = ConsumerSpec {
        output_window: 1,
        ..spec(1)
    };
    c.add_consumer(stuck, 0).unwrap();
    c.set_rdy(spec(1).key, 100);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out.len(), 1, "one frame fills a window of one byte");
    let frame = out.batches[0].frames.len() as u64;
    assert!(out.batches[0].full, "its window is full");
    assert_eq!(c.consumers()[0].unwritten, frame);
    let mut none = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut none);
    assert_eq!(none.len(), 0, "RDY 100, but nothing was written");
    c.add_consumer(spec(2), 0).unwrap();
    c.set_rdy(spec(2).key, 100);
    let mut rest = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut rest);
    assert_eq!(rest.len(), 9);
    assert!(rest.iter().all(|d| d.to.conn == 2));
    // Written: room again (the message it holds times out or is FINned meanwhile).
    c.written(spec(1).key, frame);
    assert_eq!(c.consumers()[0].unwritten, 0);
    c.requeue(spec(2).key, rest[0].msg.id, Duration::ZERO, now, &timers)
        .unwrap();
    let mut again = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut again);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].to.conn, 1);
}

/// Messages that arrive one at a time alternate between two ready consumers, and a
/// requeued one goes to the consumer whose turn it is. (The turn used to move on the last,
/// empty look of each dispatch, so one of two consumers got every message.)
#[test]
fn one_message_at_a_time_alternates_between_two_consumers() {
    let timers = TimerQueue::default();
    let (mut log, ch) = setup("c", 0, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.add_consumer(spec(2), 0).unwrap();
    c.set_rdy(spec(1).key, 100);
    c.set_rdy(spec(2).key, 100);
    let mut to = Vec::new();
    for n in 0..10 {
        c.visible_end = log.append(vec![msg(n)], 0);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        assert_eq!(out.len(), 1);
        to.push(out[0].to.conn);
    }
    assert_eq!(to, [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]);
    // Consumer 1 gives its last message back: consumer 1's turn, then 2's.
    let last_of_1 = MessageId::from_u64(8);
    c.requeue(spec(1).key, last_of_1, Duration::ZERO, now, &timers)
        .unwrap();
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].to.conn, out[0].msg.id), (1, last_of_1));
    c.visible_end = log.append(vec![msg(10)], 0);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out[0].to.conn, 2);
}

/// A message given back goes behind what was waiting (nsqd puts it at the tail of its
/// memory queue), at most --mem-queue-size messages of the backlog; with nothing else
/// to give it goes at once.
#[test]
fn a_requeued_message_goes_behind_the_waiting_ones() {
    let timers = TimerQueue::default();
    let now = Instant::now();
    let order = |mem_queue_size: u64| {
        let mut log = TopicLog::in_memory("t", 1000);
        let end = log.append((0..5).map(msg).collect(), 0);
        let ch = Channel::new(Arc::from("t"), "c", mem_queue_size, 0, end);
        let mut c = ch.borrow_mut();
        c.add_consumer(spec(1), 0).unwrap();
        c.set_rdy(spec(1).key, 1);
        let mut seen = Vec::new();
        let mut first = true;
        loop {
            let mut out = Deliveries::default();
            c.dispatch(&log, now, MAX, &timers, &mut out);
            let Some(d) = out.iter().next() else { break };
            let (id, attempts) = (d.msg.id, d.msg.attempts);
            seen.push((id.to_u64().unwrap(), attempts));
            if first {
                first = false;
                c.requeue(spec(1).key, id, Duration::ZERO, now, &timers)
                    .unwrap();
            } else {
                c.finish(spec(1).key, id).unwrap();
            }
        }
        seen
    };
    assert_eq!(order(100), [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (0, 2)]);
    assert_eq!(order(2), [(0, 1), (1, 1), (2, 1), (0, 2), (3, 1), (4, 1)]);
    assert_eq!(order(0), [(0, 1), (0, 2), (1, 1), (2, 1), (3, 1), (4, 1)]);
}

/// `floor_above` agrees with `floor` whenever the floor lies above the bound, and
/// otherwise answers some owed seq at or below the bound.
#[test]
fn floor_above_a_bound_stops_early_and_agrees_above_it() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 10, 0);
    let mut c = ch.borrow_mut();
    c.add_consumer(spec(1), 0).unwrap();
    c.set_rdy(spec(1).key, 10);
    let mut out = Deliveries::default();
    c.dispatch(&log, Instant::now(), MAX, &timers, &mut out);
    for d in out
        .iter()
        .filter(|d| d.msg.id != msg(3).id && d.msg.id != msg(7).id)
    {
        c.finish(spec(1).key, d.msg.id).unwrap();
    }
    // Owed: 3 and 7 in flight; the cursor is at the end (10).
    assert_eq!(c.floor(), 3);
    for bound in [0, 1, 2] {
        assert_eq!(c.floor_above(bound), 3, "bound {bound}");
    }
    for bound in [3, 5, 8, 20] {
        let f = c.floor_above(bound);
        assert!(
            f <= bound && (f == 3 || f == 7 || f == 10),
            "bound {bound}: {f}"
        );
    }
    c.finish(spec(1).key, msg(3).id).unwrap();
    assert_eq!(c.floor_above(6), 7);
    c.finish(spec(1).key, msg(7).id).unwrap();
    assert_eq!(c.floor_above(6), 10, "nothing owed: the cursor");
}

#[test]
fn fin_errors_are_nsqds() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 1, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.add_consumer(spec(2), 0).unwrap();
    c.set_rdy(spec(1).key, 1);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    let id = out[0].msg.id;
    assert_eq!(c.finish(spec(2).key, id), Err(OpError::NotOwner));
    assert_eq!(
        c.finish(spec(1).key, MessageId::from_u64(99)),
        Err(OpError::NotInFlight)
    );
    c.finish(spec(1).key, id).unwrap();
    assert_eq!(c.finish(spec(1).key, id), Err(OpError::NotInFlight));
}

#[test]
fn disconnect_requeues_in_flight_at_once_with_attempts_kept() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 1, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.set_rdy(spec(1).key, 1);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    c.remove_consumer(spec(1).key);
    c.add_consumer(spec(2), 0).unwrap();
    c.set_rdy(spec(2).key, 1);
    let mut again = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut again);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].msg.attempts, 2);
    assert_eq!(c.figures(&log, 0).in_flight, 1);
}

#[test]
fn timeout_and_touch() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 1, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.set_rdy(spec(1).key, 1);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    let id = out[0].msg.id;
    let first_deadline = now + Duration::from_secs(60);
    let later = now + Duration::from_secs(10);
    c.touch(spec(1).key, id, MAX, later, &timers).unwrap();
    // After TOUCH the first deadline passes without a timeout.
    assert!(!c.on_timer(TimerKind::InFlight, first_deadline, first_deadline, &timers));
    let touched = later + Duration::from_secs(60);
    assert!(c.on_timer(TimerKind::InFlight, touched, touched, &timers));
    assert_eq!(c.timeout_count, 1);
    assert_eq!(c.waiting(), 1);
}

#[test]
fn touch_never_passes_max_msg_timeout() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 1, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.set_rdy(spec(1).key, 1);
    let mut out = Deliveries::default();
    let max = Duration::from_secs(90);
    c.dispatch(&log, now, max, &timers, &mut out);
    let id = out[0].msg.id;
    c.touch(spec(1).key, id, max, now + Duration::from_secs(80), &timers)
        .unwrap();
    assert!(!c.on_timer(
        TimerKind::InFlight,
        now + max,
        now + max - Duration::from_millis(1),
        &timers
    ));
    assert!(c.on_timer(TimerKind::InFlight, now + max, now + max, &timers));
}

/// nsqd's figures: deferred records count as deferred from their publication, not as
/// depth, until their time comes; backend_depth is what exceeds the memory queue.
#[test]
fn figures_count_deferred_records_not_yet_taken_as_deferred() {
    let now_ns = crate::ids::now_nanos();
    let due = now_ns + 5_000_000_000;
    let (log, ch) = setup("c", 3, due);
    let c = ch.borrow();
    let expect = Figures {
        depth: 0,
        backend_depth: 0,
        in_flight: 0,
        deferred: 3,
    };
    assert_eq!(c.figures(&log, now_ns), expect);
    let later = c.figures(&log, due);
    assert_eq!(
        (later.depth, later.deferred),
        (3, 0),
        "due: ready for delivery"
    );
}

#[test]
fn backend_depth_is_what_exceeds_the_memory_queue() {
    let mut log = TopicLog::in_memory("t", 1000);
    let end = log.append((0..100).map(msg).collect(), 0);
    for (mem, backend) in [(0, 100), (10, 90), (100, 0), (1000, 0)] {
        let ch = Channel::new(Arc::from("t"), "c", mem, 0, end);
        let f = ch.borrow().figures(&log, 0);
        assert_eq!(
            (f.depth, f.backend_depth),
            (100, backend),
            "mem-queue-size {mem}"
        );
    }
    let ephemeral = Channel::new(Arc::from("t"), "c#ephemeral", 10, 0, end);
    assert_eq!(ephemeral.borrow().figures(&log, 0).backend_depth, 0);
}

#[test]
fn deferred_message_waits_for_its_timer() {
    let timers = TimerQueue::default();
    let later = crate::ids::now_nanos() + 5_000_000_000;
    let (log, ch) = setup("c", 1, later);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.set_rdy(spec(1).key, 1);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert!(out.is_empty());
    assert_eq!(c.figures(&log, crate::ids::now_nanos()).deferred, 1);
    assert_eq!(timers.len(), 1);
    let id = MessageId::from_u64(0);
    assert!(!c.on_timer(TimerKind::Deferred, now, now, &timers));
    let due = c.deferred.get(&id).map(|d| d.at).unwrap();
    assert!(c.on_timer(TimerKind::Deferred, due, due, &timers));
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn clean_meta_round_trip_keeps_owed_messages_and_attempts() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 3, 0);
    let now = Instant::now();
    let meta = {
        let mut c = ch.borrow_mut();
        c.add_consumer(spec(1), 0).unwrap();
        c.set_rdy(spec(1).key, 2);
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        c.finish(spec(1).key, out[0].msg.id).unwrap();
        c.to_meta(true, now)
    };
    assert_eq!(meta.cursor, 2);
    assert_eq!(meta.pending.len(), 1);
    assert_eq!(meta.pending[0].attempts, 1);
    let fresh = Channel::new(Arc::from("t"), "c", 100, 0, log.head());
    let mut f = fresh.borrow_mut();
    assert_eq!(f.restore(&meta, true, &log, now, &timers), 1);
    f.add_consumer(spec(9), 0).unwrap();
    f.set_rdy(spec(9).key, 10);
    let mut out = Deliveries::default();
    f.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[0].msg.attempts, 2,
        "the owed message keeps its attempts"
    );
    assert_eq!(out[1].msg.attempts, 1);
}

#[test]
fn max_consumers_and_ephemeral_bound() {
    let timers = TimerQueue::default();
    let mut log = TopicLog::in_memory("t", 1000);
    let ch = Channel::new(Arc::from("t"), "c#ephemeral", 2, 0, 0);
    let mut c = ch.borrow_mut();
    assert!(c.ephemeral);
    c.add_consumer(spec(1), 1).unwrap();
    assert_eq!(
        c.add_consumer(spec(2), 1).unwrap_err().to_string(),
        "consumers for t:c#ephemeral exceeds limit of 1"
    );
    c.visible_end = log.append((0..5).map(msg).collect(), 0);
    c.set_rdy(spec(1).key, 10);
    let mut out = Deliveries::default();
    c.dispatch(&log, Instant::now(), MAX, &timers, &mut out);
    assert_eq!(
        out.len(),
        2,
        "an ephemeral channel keeps only mem-queue-size messages"
    );
}

/// A message still in flight `DETACH_AFTER` after its delivery gets its own copy of its body, so
/// a consumer holding messages does not keep the buffers they arrived in (a whole MPUB, a
/// 256 KiB block) alive; one finished sooner is never copied. The detach timer re-arms for
/// the oldest message not copied yet.
#[test]
fn bodies_held_in_flight_are_copied_out() {
    let timers = TimerQueue::default();
    // Every body is a slice of one buffer, as an MPUB's are of the publisher's.
    let buffer = Bytes::from(vec![7u8; 3000]);
    let mut log = TopicLog::in_memory("t", 1000);
    let end = log.append(
        (0..3)
            .map(|n| Message {
                body: buffer.slice(n * 1000..(n + 1) * 1000),
                ..msg(n as u64)
            })
            .collect(),
        0,
    );
    let ch = Channel::new(Arc::from("t"), "c", 100, 0, end);
    let mut c = ch.borrow_mut();
    let in_buffer = |c: &Channel| {
        let start = buffer.as_ptr() as usize;
        let mut inside: Vec<bool> = c
            .in_flight
            .values()
            .map(|f| (start..start + buffer.len()).contains(&(f.msg.msg.body.as_ptr() as usize)))
            .collect();
        inside.sort_unstable();
        inside
    };
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.set_rdy(spec(1).key, 2);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(timers.len(), 2, "a timeout entry and a detach entry");
    // The first is finished at once; the third is delivered half a second later.
    c.finish(spec(1).key, out[0].msg.id).unwrap();
    let later = now + detach::DETACH_AFTER / 2;
    c.dispatch(&log, later, MAX, &timers, &mut Deliveries::default());
    assert_eq!(in_buffer(&c), [true, true]);
    let first = now + detach::DETACH_AFTER;
    assert!(timers
        .take_due(first)
        .iter()
        .any(|e| e.kind == TimerKind::Detach));
    assert!(!c.on_timer(TimerKind::Detach, first, first, &timers));
    assert_eq!(
        in_buffer(&c),
        [false, true],
        "the one held DETACH_AFTER is copied"
    );
    let second = later + detach::DETACH_AFTER;
    let due = timers.take_due(second);
    assert!(due
        .iter()
        .any(|e| e.kind == TimerKind::Detach && e.at == second));
    c.on_timer(TimerKind::Detach, second, second, &timers);
    assert_eq!(in_buffer(&c), [false, false]);
    for f in c.in_flight.values() {
        assert_eq!(
            f.msg.msg.body,
            buffer.slice(..1000),
            "the copy holds the same bytes"
        );
    }
    assert!(
        timers
            .take_due(second + MAX)
            .iter()
            .all(|e| e.kind != TimerKind::Detach),
        "nothing left to copy: not re-armed"
    );
}

/// An empty drops what waits at once and what is in flight when its delivery ends: a FIN and
/// a TOUCH of it still work, but a REQ, a timeout or a disconnect sent before the empty and
/// arriving after it bring nothing back.
#[test]
fn an_empty_drops_what_is_in_flight_once_its_delivery_ends() {
    let timers = TimerQueue::default();
    let (log, ch) = setup("c", 6, 0);
    let mut c = ch.borrow_mut();
    let now = Instant::now();
    c.add_consumer(spec(1), 0).unwrap();
    c.add_consumer(spec(2), 0).unwrap();
    c.set_rdy(spec(1).key, 2);
    c.set_rdy(spec(2).key, 2);
    let mut out = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut out);
    let held = |key: ConsumerKey| -> Vec<MessageId> {
        out.iter()
            .filter(|d| d.to == key)
            .map(|d| d.msg.id)
            .collect()
    };
    let (one, two) = (held(spec(1).key), held(spec(2).key));
    c.empty();
    assert_eq!((c.waiting(), c.figures(&log, 0).in_flight), (0, 4));
    c.touch(spec(1).key, one[0], MAX, now, &timers).unwrap();
    c.finish(spec(1).key, one[0]).unwrap();
    c.requeue(spec(1).key, one[1], Duration::ZERO, now, &timers)
        .unwrap();
    c.remove_consumer(spec(2).key);
    assert_eq!(
        c.waiting(),
        0,
        "the REQ and the disconnect gave nothing back"
    );
    assert_eq!(c.floor(), 6);
    c.set_rdy(spec(1).key, 1);
    let mut none = Deliveries::default();
    c.dispatch(&log, now, MAX, &timers, &mut none);
    assert!(none.is_empty(), "nothing to deliver again");
    assert!(two.iter().all(|id| c.finish(spec(2).key, *id).is_err()));
    // A timeout after the empty gives nothing back either.
    let (log, ch) = setup("d", 1, 0);
    let mut d = ch.borrow_mut();
    d.add_consumer(spec(1), 0).unwrap();
    d.set_rdy(spec(1).key, 1);
    let mut out = Deliveries::default();
    d.dispatch(&log, now, MAX, &timers, &mut out);
    d.empty();
    let late = now + Duration::from_secs(61);
    d.on_timer(TimerKind::InFlight, late, late, &timers);
    assert_eq!((d.timeout_count, d.waiting()), (1, 0));
}

/// Another channel's stretches of the log (an nsqd import) are passed over, by the depth
/// too; they survive the metadata, and a rewind before one passes over it again.
#[test]
fn foreign_stretches_are_passed_over_across_a_restart_and_a_rewind() {
    let timers = TimerQueue::default();
    let (log, _) = setup("c", 10, 0);
    let now = Instant::now();
    let meta = ChannelMeta {
        name: "c".into(),
        cursor: 1,
        foreign: vec![[2, 4], [6, 7]],
        ..Default::default()
    };
    let ch = Channel::new(Arc::from("t"), "c", 100, 0, log.head());
    let mut c = ch.borrow_mut();
    c.restore(&meta, true, &log, now, &timers);
    assert_eq!(c.figures(&log, 0).depth, 6, "1, 4, 5, 7, 8, 9");
    c.add_consumer(spec(1), 0).unwrap();
    c.set_rdy(spec(1).key, 100);
    let seqs = |c: &mut Channel| {
        let mut out = Deliveries::default();
        c.dispatch(&log, now, MAX, &timers, &mut out);
        let ids: Vec<u64> = out.iter().filter_map(|d| d.msg.id.to_u64()).collect();
        for d in out.iter() {
            c.finish(spec(1).key, d.msg.id).unwrap();
        }
        ids
    };
    assert_eq!(seqs(&mut c), [1, 4, 5, 7, 8, 9]);
    assert_eq!(c.to_meta(true, now).foreign, vec![[2, 4], [6, 7]]);
    c.rewind(0);
    assert_eq!(seqs(&mut c), [0, 1, 4, 5, 7, 8, 9]);
}

//! The client guide's rules, checked against real `broker` (and `lookup`) processes: what the
//! consumer does is observed through the brokers' `/stats` (ready_count, in_flight_count,
//! finish_count, requeue_count, depth, ...) and through the messages' attempts.
//!
//! Binaries: `$BROKER_BIN` / `$LOOKUP_BIN`, else `target/release/{broker,lookup}`; a missing
//! binary fails the test. Every broker runs on 127.0.0.1 with ephemeral ports, `--shards 2`
//! and a private data directory, and is killed when its guard drops. Every wait is bounded;
//! no assertion is about speed.
//!
//! `/stats` of several brokers cannot be read at one instant, so sums over brokers are only
//! checked where each connection's RDY can only grow while sampling (then a sum of readings
//! taken at different times is at most a sum that really existed).

mod support;

use client::{Consumer, ConsumerConfig, HandlerResult, Message, Producer};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::{Duration, Instant};
use support::real::{sleep, BrokerProc, ChannelStats, LookupProc};
use support::run;

const TOPIC: &str = "rules";
const CHANNEL: &str = "ch";
/// Bound of every "until" loop that is not about a specific duration.
const WAIT: Duration = Duration::from_secs(10);
/// Period of `/stats` polling.
const POLL: Duration = Duration::from_millis(15);

fn body_of(m: &Message) -> String {
    String::from_utf8_lossy(m.body()).into_owned()
}

async fn publish_n(addr: &str, prefix: &str, n: usize) {
    let p = Producer::connect(addr).await.expect("producer connects");
    let bodies = (0..n).map(|i| format!("{prefix}-{i}").into()).collect();
    p.multi_publish(TOPIC, bodies).await.expect("MPUB");
    p.stop();
}

async fn publish(addr: &str, body: &str) {
    let p = Producer::connect(addr).await.expect("producer connects");
    p.publish(TOPIC, body.to_string()).await.expect("PUB");
    p.stop();
}

/// The channel's stats on `b` (a channel not created yet reads as empty).
async fn chan(b: &BrokerProc) -> ChannelStats {
    b.channel(TOPIC, CHANNEL).await.unwrap_or_default()
}

/// Polls until `cond` holds on the channel stats of `b`; panics with `what` after [`WAIT`].
async fn until_chan(
    b: &BrokerProc,
    what: &str,
    cond: impl Fn(&ChannelStats) -> bool,
) -> ChannelStats {
    let deadline = Instant::now() + WAIT;
    loop {
        let c = chan(b).await;
        if cond(&c) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: never happened; last stats {c:#?}"
        );
        sleep(POLL).await;
    }
}

/// Polls `cond` until it holds; panics with `what` after `timeout`.
async fn until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: never happened");
        sleep(Duration::from_millis(5)).await;
    }
}

/// A handler that counts finished bodies, after sleeping `work` for each.
fn counting_consumer(
    cfg: ConsumerConfig,
    work: Duration,
) -> (Consumer, Rc<RefCell<BTreeMap<String, u32>>>) {
    let seen: Rc<RefCell<BTreeMap<String, u32>>> = Rc::default();
    let s = seen.clone();
    let c = Consumer::new(cfg, move |m: Message| {
        let s = s.clone();
        async move {
            if !work.is_zero() {
                sleep(work).await;
            }
            *s.borrow_mut().entry(body_of(&m)).or_default() += 1;
            HandlerResult::Finish
        }
    })
    .expect("consumer");
    (c, seen)
}

// ---------------------------------------------------------------------------------------------
// RDY: max_in_flight spread over connections, never exceeded, never above max_rdy_count.
// ---------------------------------------------------------------------------------------------

/// Rules: one connection per broker; max_in_flight never exceeded in total (sum of
/// ready_count and of in_flight_count over three brokers ≤ 10); a connection's RDY never
/// above its broker's max_rdy_count (one broker runs with `--max-rdy-count 3`).
#[test]
fn rdy_total_stays_within_max_in_flight_and_max_rdy_count_over_three_brokers() {
    let capped = BrokerProc::start(&["--max-rdy-count", "3"]);
    let b2 = BrokerProc::start(&[]);
    let b3 = BrokerProc::start(&[]);
    run(move || async move {
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL)
            .max_in_flight(10)
            .backoff_multiplier(Duration::ZERO);
        let (c, seen) = counting_consumer(cfg, Duration::from_millis(10));

        // Alone, the capped broker's connection would get all 10: its max_rdy_count caps it.
        // (The broker refuses RDY above max_rdy_count and closes the connection, so each
        // broker must also see one and the same connection throughout.)
        let mut conns: [BTreeSet<String>; 3] = Default::default();
        publish_n(&capped.tcp, "solo", 60).await;
        c.connect_to_nsqd(capped.tcp.clone())
            .await
            .expect("subscribe");
        let mut capped_max = 0;
        let deadline = Instant::now() + WAIT;
        while seen.borrow().len() < 60 {
            let s = chan(&capped).await;
            for cl in s.clients() {
                assert!(
                    cl.ready_count <= 3,
                    "RDY {} above max_rdy_count 3",
                    cl.ready_count
                );
                capped_max = capped_max.max(cl.ready_count);
                conns[0].insert(cl.remote_address.clone());
            }
            assert!(
                Instant::now() < deadline,
                "solo messages not consumed: {s:#?}"
            );
            sleep(POLL).await;
        }
        assert_eq!(
            capped_max, 3,
            "alone, the connection gets RDY up to max_rdy_count"
        );

        // Three connections: 10 / 3 = 3 each. Sampling starts once all are subscribed (the
        // RDY of each connection only grows from then on).
        c.connect_to_nsqds([b2.tcp.clone(), b3.tcp.clone()])
            .await
            .expect("subscribe");
        c.wait_for_connections(3, WAIT)
            .await
            .expect("3 connections");
        sleep(Duration::from_millis(200)).await;
        let brokers = [&capped, &b2, &b3];
        for (i, b) in brokers.iter().enumerate() {
            publish_n(&b.tcp, &format!("b{i}"), 100).await;
        }
        let total = 60 + 300;
        let mut samples = 0;
        let mut max_ready_sum = 0;
        let mut max_in_flight_sum = 0;
        let deadline = Instant::now() + 2 * WAIT;
        loop {
            let mut ready_sum = 0;
            let mut in_flight_sum = 0;
            for (i, b) in brokers.iter().enumerate() {
                let s = chan(b).await;
                assert!(
                    s.clients().len() <= 1,
                    "more than one connection to broker {i}: {s:#?}"
                );
                conns[i].extend(s.clients().iter().map(|cl| cl.remote_address.clone()));
                ready_sum += s.ready_sum();
                in_flight_sum += s.client_in_flight_sum();
                if i == 0 {
                    for cl in s.clients() {
                        assert!(
                            cl.ready_count <= 3,
                            "RDY {} above max_rdy_count 3",
                            cl.ready_count
                        );
                    }
                }
            }
            samples += 1;
            assert!(
                ready_sum <= 10,
                "sum of ready_count {ready_sum} > max_in_flight 10"
            );
            assert!(
                in_flight_sum <= 10,
                "sum of in_flight_count {in_flight_sum} > max_in_flight 10"
            );
            max_ready_sum = max_ready_sum.max(ready_sum);
            max_in_flight_sum = max_in_flight_sum.max(in_flight_sum);
            let done = seen.borrow().values().sum::<u32>();
            if done as usize >= total {
                break;
            }
            assert!(Instant::now() < deadline, "only {done} of {total} consumed");
            sleep(POLL).await;
        }
        assert_eq!(seen.borrow().len(), total, "every message exactly once");
        assert!(seen.borrow().values().all(|&n| n == 1));
        assert!(
            max_ready_sum > 0 && samples > 1,
            "the sampling saw nothing ({samples} samples, max in flight {max_in_flight_sum})"
        );
        for (i, addrs) in conns.iter().enumerate() {
            assert_eq!(
                addrs.len(),
                1,
                "broker {i} saw connections {addrs:?}: a reconnect"
            );
        }
        // Every broker saw its messages finished by exactly one connection.
        for (i, b) in brokers.iter().enumerate() {
            let s = chan(b).await;
            assert_eq!(s.client_count, 1, "broker {i}: one connection per broker");
            assert_eq!((s.depth, s.in_flight_count), (0, 0), "broker {i} drained");
        }
        c.stop().await;
    });
}

/// Rule: max_in_flight (2) below the number of connections (3): RDY moves to the
/// connections that have none after the idle time, so every broker is drained.
#[test]
fn max_in_flight_below_connection_count_drains_every_broker() {
    let brokers = [
        BrokerProc::start(&[]),
        BrokerProc::start(&[]),
        BrokerProc::start(&[]),
    ];
    run(move || async move {
        for (i, b) in brokers.iter().enumerate() {
            publish_n(&b.tcp, &format!("b{i}"), 6).await;
        }
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL)
            .max_in_flight(2)
            .low_rdy_idle_timeout(Duration::from_millis(250))
            .backoff_multiplier(Duration::ZERO);
        let (c, seen) = counting_consumer(cfg, Duration::ZERO);
        c.connect_to_nsqds(brokers.iter().map(|b| b.tcp.clone()))
            .await
            .expect("subscribe");
        let deadline = Instant::now() + 2 * WAIT;
        loop {
            let mut drained = 0;
            for (i, b) in brokers.iter().enumerate() {
                let s = chan(b).await;
                for cl in s.clients() {
                    // The share of each connection is max(1, 2 / 3) = 1.
                    assert!(
                        cl.ready_count <= 1,
                        "broker {i}: RDY {} > 1",
                        cl.ready_count
                    );
                }
                if s.client_count == 1 && s.depth == 0 && s.in_flight_count == 0 {
                    drained += 1;
                }
            }
            if drained == 3 && seen.borrow().len() == 18 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "not all brokers drained: {drained} of 3, {} of 18 messages",
                seen.borrow().len()
            );
            sleep(POLL).await;
        }
        for i in 0..3 {
            for j in 0..6 {
                assert_eq!(seen.borrow().get(&format!("b{i}-{j}")), Some(&1));
            }
        }
        c.stop().await;
    });
}

// ---------------------------------------------------------------------------------------------
// Failing handlers: REQ delays, backoff, max attempts.
// ---------------------------------------------------------------------------------------------

/// Rule: a failed message is REQ'd with a delay growing with its attempts
/// (`requeue_delay * attempts`); the broker counts the requeues and redelivers with
/// attempts + 1, not before the delay.
#[test]
fn failed_message_is_requeued_with_delay_growing_with_attempts() {
    let b = BrokerProc::start(&[]);
    run(move || async move {
        let step = Duration::from_millis(150);
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL)
            .requeue_delay(step)
            .max_attempts(10)
            .backoff_multiplier(Duration::ZERO);
        let deliveries: Rc<RefCell<Vec<(u16, Instant)>>> = Rc::default();
        let d = deliveries.clone();
        let c = Consumer::new(cfg, move |m: Message| {
            d.borrow_mut().push((m.attempts(), Instant::now()));
            let done = m.attempts() >= 4;
            async move {
                if done {
                    HandlerResult::Finish
                } else {
                    // Requeue with the computed delay, without backoff.
                    HandlerResult::Requeue {
                        delay: None,
                        backoff: false,
                    }
                }
            }
        })
        .expect("consumer");
        publish(&b.tcp, "flaky").await;
        c.connect_to_nsqd(b.tcp.clone()).await.expect("subscribe");

        let mut max_deferred = 0;
        let deadline = Instant::now() + WAIT;
        while deliveries.borrow().len() < 4 {
            max_deferred = max_deferred.max(chan(&b).await.deferred_count);
            assert!(
                Instant::now() < deadline,
                "deliveries: {:?}",
                deliveries.borrow()
            );
            sleep(POLL).await;
        }
        let d = deliveries.borrow().clone();
        let attempts: Vec<u16> = d.iter().map(|x| x.0).collect();
        assert_eq!(attempts, [1, 2, 3, 4]);
        for (k, pair) in d.windows(2).enumerate() {
            let gap = pair[1].1 - pair[0].1;
            let delay = step * (k as u32 + 1);
            assert!(
                gap >= delay,
                "delivery {} came {gap:?} after the REQ, delay was {delay:?}",
                k + 2
            );
        }
        assert!(
            max_deferred >= 1,
            "a REQ with a delay is deferred on the broker"
        );
        let s = until_chan(&b, "message finished", |s| s.finish_sum() == 1).await;
        assert_eq!(s.requeue_count, 3, "channel requeue_count: {s:#?}");
        assert_eq!(s.client_requeue_sum(), 3, "client requeue_count: {s:#?}");
        assert_eq!((s.depth, s.in_flight_count, s.deferred_count), (0, 0, 0));
        assert_eq!(c.stats().messages_requeued, 3);
        c.stop().await;
    });
}

/// Rules: a failure starts backoff — RDY 0 on every connection (nothing is delivered, even
/// with messages waiting) — then RDY 1 on a single connection to test the water (one message
/// in flight), then, after a success, every connection back to its share.
#[test]
fn backoff_pauses_all_connections_then_tests_with_rdy_1_then_recovers() {
    let a = BrokerProc::start(&[]);
    let b = BrokerProc::start(&[]);
    run(move || async move {
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL)
            .max_in_flight(4)
            .backoff_multiplier(Duration::from_millis(800))
            .max_backoff_duration(Duration::from_secs(4))
            .requeue_delay(Duration::from_millis(100))
            .max_attempts(10);
        let attempts: Rc<RefCell<BTreeMap<String, Vec<u16>>>> = Rc::default();
        let at = attempts.clone();
        let c = Consumer::new(cfg, move |m: Message| {
            let at = at.clone();
            async move {
                // Slow enough for the RDY 1 test to be seen on /stats.
                sleep(Duration::from_millis(200)).await;
                let body = body_of(&m);
                at.borrow_mut()
                    .entry(body.clone())
                    .or_default()
                    .push(m.attempts());
                if body == "fail" && m.attempts() == 1 {
                    HandlerResult::requeue()
                } else {
                    HandlerResult::Finish
                }
            }
        })
        .expect("consumer");
        c.connect_to_nsqds([a.tcp.clone(), b.tcp.clone()])
            .await
            .expect("subscribe");
        c.wait_for_connections(2, WAIT)
            .await
            .expect("2 connections");
        let ready = |s: &ChannelStats| s.clients().first().map_or(-1, |c| c.ready_count);
        until_chan(&a, "RDY on a", |s| ready(s) >= 1).await;
        until_chan(&b, "RDY on b", |s| ready(s) >= 1).await;

        publish(&a.tcp, "fail").await;
        until(WAIT, "backoff after the failure", || c.in_backoff()).await;

        let (mut saw_pause, mut saw_test, mut saw_recovery) = (false, false, false);
        let mut received_at_pause = None;
        let mut published = false;
        let deadline = Instant::now() + 2 * WAIT;
        loop {
            let (sa, sb) = (chan(&a).await, chan(&b).await);
            let (ra, rb) = (ready(&sa), ready(&sb));
            let in_flight = sa.client_in_flight_sum() + sb.client_in_flight_sum();
            let received = c.stats().messages_received;
            if !saw_test && (ra, rb) == (0, 0) {
                saw_pause = true;
                received_at_pause.get_or_insert(received);
                assert_eq!(in_flight, 0, "in flight while paused");
                if !published {
                    // Messages waiting on both brokers are not delivered while paused.
                    publish_n(&a.tcp, "a", 4).await;
                    publish_n(&b.tcp, "b", 4).await;
                    published = true;
                }
            } else if saw_pause
                && !saw_recovery
                && ra.min(rb) == 0
                && ra.max(rb) == 1
                // Recovery passes through the same RDY shape (max_in_flight 2 over two
                // connections); only while the client is still backing off is it the probe.
                && c.in_backoff()
            {
                saw_test = true;
                assert!(
                    in_flight <= 1,
                    "more than one message in flight while testing"
                );
                let before = received_at_pause.unwrap_or(received);
                assert!(
                    received <= before + 1,
                    "{} messages delivered between the pause and the RDY 1 test",
                    received - before
                );
            } else if saw_test && ra >= 1 && rb >= 1 {
                saw_recovery = true;
            }
            let finished = c.stats().messages_finished;
            if saw_recovery && finished == 9 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "pause {saw_pause}, test {saw_test}, recovery {saw_recovery}, {finished} of 9 \
                 finished; a: {sa:#?} b: {sb:#?}"
            );
            sleep(POLL).await;
        }
        assert!(!c.in_backoff());
        let at = attempts.borrow().clone();
        assert_eq!(at.get("fail"), Some(&vec![1, 2]));
        assert_eq!(at.len(), 9, "{at:?}");
        // Recovered: both connections hold their share again (4 / 2).
        until_chan(&a, "RDY 2 on a", |s| ready(s) == 2).await;
        until_chan(&b, "RDY 2 on b", |s| ready(s) == 2).await;
        c.stop().await;
    });
}

/// Rule: a message delivered more than max_attempts times goes to the give-up callback and
/// is FINed (the broker counts the finish; the channel ends empty).
#[test]
fn message_past_max_attempts_is_given_up_and_finished() {
    let b = BrokerProc::start(&[]);
    run(move || async move {
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL)
            .max_attempts(3)
            .max_in_flight(2)
            .backoff_multiplier(Duration::ZERO);
        let handled: Rc<RefCell<Vec<(String, u16)>>> = Rc::default();
        let given_up: Rc<RefCell<Vec<(String, u16)>>> = Rc::default();
        let h = handled.clone();
        let c = Consumer::new(cfg, move |m: Message| {
            let body = body_of(&m);
            h.borrow_mut().push((body.clone(), m.attempts()));
            async move {
                if body == "doomed" {
                    HandlerResult::requeue_after(Duration::from_millis(20))
                } else {
                    HandlerResult::Finish
                }
            }
        })
        .expect("consumer");
        let g = given_up.clone();
        c.on_give_up(move |m| g.borrow_mut().push((body_of(m), m.attempts())));
        publish(&b.tcp, "doomed").await;
        publish(&b.tcp, "fine").await;
        c.connect_to_nsqd(b.tcp.clone()).await.expect("subscribe");

        until(WAIT, "give-up callback", || !given_up.borrow().is_empty()).await;
        let s = until_chan(&b, "both finished", |s| s.finish_sum() == 2).await;
        assert_eq!(
            (s.depth, s.in_flight_count, s.deferred_count),
            (0, 0, 0),
            "{s:#?}"
        );
        assert_eq!(s.requeue_count, 3, "three failed attempts requeued: {s:#?}");
        assert_eq!(*given_up.borrow(), [("doomed".to_string(), 4)]);
        let doomed: Vec<u16> = handled
            .borrow()
            .iter()
            .filter(|(b, _)| b == "doomed")
            .map(|x| x.1)
            .collect();
        assert_eq!(doomed, [1, 2, 3], "the handler never sees attempt 4");
        // Nothing comes back: the message is gone.
        sleep(Duration::from_millis(300)).await;
        assert_eq!(given_up.borrow().len(), 1);
        let st = c.stats();
        assert_eq!(
            (
                st.messages_given_up,
                st.messages_finished,
                st.messages_requeued
            ),
            (1, 1, 3)
        );
        c.stop().await;
    });
}

// ---------------------------------------------------------------------------------------------
// Connection life: heartbeats, TOUCH, CLS.
// ---------------------------------------------------------------------------------------------

/// Rule: heartbeats are answered. With a 1 s heartbeat interval (IDENTIFY) the broker would
/// close a client that missed two; the idle connection is the same one after 3.5 s.
#[test]
fn heartbeats_are_answered_so_an_idle_consumer_stays_connected() {
    let b = BrokerProc::start(&[]);
    run(move || async move {
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL).heartbeat_interval(Duration::from_secs(1));
        let (c, seen) = counting_consumer(cfg, Duration::ZERO);
        c.connect_to_nsqd(b.tcp.clone()).await.expect("subscribe");
        let first = until_chan(&b, "subscribed", |s| s.client_count == 1).await;
        let who = first.clients()[0].clone();
        let idle_until = Instant::now() + Duration::from_millis(3500);
        while Instant::now() < idle_until {
            assert_eq!(
                c.stats().connections,
                1,
                "the connection dropped while idle"
            );
            sleep(Duration::from_millis(100)).await;
        }
        let s = chan(&b).await;
        assert_eq!(s.client_count, 1, "{s:#?}");
        let now = &s.clients()[0];
        assert_eq!(
            (&now.remote_address, now.connect_ts),
            (&who.remote_address, who.connect_ts),
            "the consumer reconnected: the first connection was closed"
        );
        publish(&b.tcp, "still-there").await;
        until(WAIT, "message after idling", || {
            seen.borrow().contains_key("still-there")
        })
        .await;
        c.stop().await;
    });
}

/// Rules: the handler can ask for more time (TOUCH via `Message::touch`) and keep a message
/// past the broker's msg_timeout (2 s); nothing is touched automatically — a message held as
/// long without touching times out and is delivered again.
#[test]
fn touch_holds_a_message_past_msg_timeout_and_nothing_touches_automatically() {
    let b = BrokerProc::start(&["--msg-timeout", "2s"]);
    run(move || async move {
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL)
            .max_in_flight(2)
            .backoff_multiplier(Duration::ZERO);
        let deliveries: Rc<RefCell<Vec<(String, u16)>>> = Rc::default();
        let done: Rc<RefCell<Vec<String>>> = Rc::default();
        let (d, f) = (deliveries.clone(), done.clone());
        let c = Consumer::new(cfg, move |m: Message| {
            let (d, f) = (d.clone(), f.clone());
            async move {
                let body = body_of(&m);
                d.borrow_mut().push((body.clone(), m.attempts()));
                if m.attempts() == 1 {
                    for _ in 0..5 {
                        sleep(Duration::from_millis(700)).await;
                        if body == "touched" {
                            m.touch().expect("TOUCH sent");
                        }
                    }
                }
                f.borrow_mut().push(body);
                HandlerResult::Finish
            }
        })
        .expect("consumer");
        publish(&b.tcp, "touched").await;
        publish(&b.tcp, "untouched").await;
        c.connect_to_nsqd(b.tcp.clone()).await.expect("subscribe");
        until(WAIT, "both handlers done", || done.borrow().len() >= 3).await;
        let s = until_chan(&b, "channel empty", |s| {
            s.depth == 0 && s.in_flight_count == 0
        })
        .await;
        let d = deliveries.borrow().clone();
        let of =
            |name: &str| -> Vec<u16> { d.iter().filter(|(b, _)| b == name).map(|x| x.1).collect() };
        assert_eq!(of("touched"), [1], "a touched message must not time out");
        assert_eq!(
            of("untouched"),
            [1, 2],
            "an untouched message times out and comes back"
        );
        assert_eq!(s.timeout_count, 1, "{s:#?}");
        // The late FIN of the timed-out delivery is refused by the broker, non-fatally.
        assert_eq!(c.stats().connections, 1);
        c.stop().await;
    });
}

/// Rule: a clean stop sends CLS (the broker delivers nothing more), waits for the handler in
/// flight to finish and FIN, then closes: the channel has no consumer left.
#[test]
fn stop_sends_cls_waits_for_handlers_in_flight_then_closes() {
    let b = BrokerProc::start(&[]);
    run(move || async move {
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL).max_in_flight(2);
        let started = Rc::new(Cell::new(0u32));
        let finished = Rc::new(Cell::new(0u32));
        let (s2, f2) = (started.clone(), finished.clone());
        let c = Consumer::new(cfg, move |_m: Message| {
            let (s2, f2) = (s2.clone(), f2.clone());
            async move {
                s2.set(s2.get() + 1);
                sleep(Duration::from_millis(700)).await;
                f2.set(f2.get() + 1);
                HandlerResult::Finish
            }
        })
        .expect("consumer");
        publish(&b.tcp, "slow").await;
        c.connect_to_nsqd(b.tcp.clone()).await.expect("subscribe");
        until(WAIT, "handler started", || started.get() == 1).await;

        let stopping = {
            let c = c.clone();
            glommio::spawn_local(async move { c.stop().await })
        };
        // Let CLS reach the broker, then publish: nothing may be delivered any more.
        sleep(Duration::from_millis(150)).await;
        assert_eq!(finished.get(), 0, "the handler should still be running");
        publish(&b.tcp, "after-cls").await;
        stopping.await;
        assert_eq!(
            finished.get(),
            1,
            "stop returned before the handler in flight finished"
        );
        assert_eq!(started.get(), 1, "a message was delivered after CLS");
        let s = until_chan(&b, "consumer gone", |s| s.client_count == 0).await;
        assert_eq!(s.in_flight_count, 0, "{s:#?}");
        assert_eq!(
            s.requeue_count, 0,
            "the message in flight was FINed, not requeued"
        );
        assert_eq!(s.timeout_count, 0);
        assert_eq!(
            s.depth, 1,
            "the message published after CLS waits on the broker"
        );
        assert_eq!(c.stats().messages_finished, 1);
    });
}

// ---------------------------------------------------------------------------------------------
// Discovery through lookup.
// ---------------------------------------------------------------------------------------------

/// Rules: with only a lookup address, the consumer polls it (short interval) and connects to
/// a broker that registers later, then to a second one, and drops a broker the lookup no
/// longer lists (tombstoned: CLS, its /stats shows no consumer) and one that dies. The
/// lookup's `/topics` lists the topic once a broker registered it.
#[test]
fn lookup_polling_finds_brokers_that_register_later_and_drops_vanished_ones() {
    let lookup = LookupProc::start();
    run(move || async move {
        let cfg = ConsumerConfig::new(TOPIC, CHANNEL)
            .max_in_flight(4)
            .lookupd_poll_interval(Duration::from_millis(200))
            .lookupd_poll_jitter(0.2);
        let (c, seen) = counting_consumer(cfg, Duration::ZERO);
        // The topic is unknown yet: no brokers, not an error.
        c.connect_to_lookupd(lookup.http.clone())
            .await
            .expect("first poll");
        assert_eq!(c.stats().connections, 0);

        let mut a = BrokerProc::start_registered(&lookup.tcp, &[]);
        publish_n(&a.tcp, "a", 3).await;
        let registered = |addr: String| {
            let lookup = &lookup;
            async move {
                let deadline = Instant::now() + WAIT;
                while !lookup.brokers_of(TOPIC).await.contains(&addr) {
                    assert!(
                        Instant::now() < deadline,
                        "broker {addr} never registered with the lookup:\n{}",
                        lookup.log()
                    );
                    sleep(POLL).await;
                }
            }
        };
        registered(a.tcp.clone()).await;
        // The lookup's topic list (`/topics`, what nsq_to_file's --topic-pattern polls).
        let topics = client::lookup::topics(&lookup.http, WAIT)
            .await
            .expect("/topics");
        assert_eq!(topics, [TOPIC]);
        c.wait_for_connections(1, WAIT)
            .await
            .expect("broker a found");
        until(WAIT, "a's messages", || seen.borrow().len() == 3).await;

        let b = BrokerProc::start_registered(&lookup.tcp, &[]);
        publish_n(&b.tcp, "b", 3).await;
        registered(b.tcp.clone()).await;
        c.wait_for_connections(2, WAIT)
            .await
            .expect("broker b found");
        until(WAIT, "b's messages", || seen.borrow().len() == 6).await;
        until_chan(&b, "consumer on b", |s| s.client_count == 1).await;

        // No longer listed: the consumer retires the connection (CLS) while b still runs.
        lookup.tombstone(TOPIC, &b.http).await;
        until_chan(&b, "consumer left b", |s| s.client_count == 0).await;
        until(WAIT, "one connection left", || c.stats().connections == 1).await;
        assert_eq!(
            chan(&a).await.client_count,
            1,
            "a is still listed and consumed"
        );

        // A broker that dies is dropped, and not found again while the lookup omits it.
        a.kill();
        until(WAIT, "no connection left", || c.stats().connections == 0).await;
        sleep(Duration::from_millis(600)).await;
        assert_eq!(c.stats().connections, 0);
        c.stop().await;
        drop(b);
    });
}

//! Producer and consumer against an in-process fake nsqd (and fake lookup): what the client
//! puts on the wire, and how it reacts to what comes back. Every wait is bounded.

mod support;

use bytes::Bytes;
use client::{
    answer_all, Consumer, ConsumerConfig, Error, ErrorCode, HandlerResult, Message, Pending,
    Producer, ProducerConfig,
};
use protocol::Command;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use support::{eventually, run, FakeLookupd, FakeNsqd, PubReply, WAIT};

type PublishResult = (usize, Result<(), Error>);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------- producer

#[test]
fn producer_publishes_pub_mpub_dpub_after_identify() {
    run(|| async {
        let fake = FakeNsqd::start();
        let p = Producer::connect(fake.addr.clone()).await.expect("connect");
        p.publish("events", "one").await.expect("pub");
        p.multi_publish("events", vec![Bytes::from("a"), Bytes::from("b")])
            .await
            .expect("mpub");
        p.deferred_publish("events", ms(1500), "later")
            .await
            .expect("dpub");
        let cmds = fake.commands_on(0);
        match &cmds[0] {
            Command::Identify(body) => {
                let v: serde_json::Value = serde_json::from_slice(body).expect("json");
                assert_eq!(v["feature_negotiation"], true);
                assert_eq!(v["heartbeat_interval"], 30000);
            }
            other => panic!("first command {other:?}"),
        }
        assert_eq!(
            cmds[1..],
            [
                Command::Pub {
                    topic: "events".into(),
                    body: Bytes::from("one")
                },
                Command::Mpub {
                    topic: "events".into(),
                    bodies: vec![Bytes::from("a"), Bytes::from("b")]
                },
                Command::Dpub {
                    topic: "events".into(),
                    defer_ms: 1500,
                    body: Bytes::from("later")
                },
            ]
        );
        assert!(matches!(
            p.publish("bad topic!", "x").await,
            Err(Error::InvalidName { what: "topic", .. })
        ));
    });
}

#[test]
fn producer_reports_broker_error_code_and_reconnects() {
    run(|| async {
        let fake = FakeNsqd::start();
        fake.set_pub_replies(vec![PubReply::Fatal(
            "E_BAD_MESSAGE PUB invalid message body size 0",
        )]);
        let p = Producer::connect(fake.addr.clone()).await.expect("connect");
        let err = p.publish("t", "x").await.expect_err("broker refused");
        assert_eq!(err.code(), Some(ErrorCode::BadMessage));
        assert!(err
            .to_string()
            .contains("E_BAD_MESSAGE PUB invalid message body size 0"));
        // The broker closed the connection; the next publish opens a new one.
        assert!(eventually(WAIT, || !p.is_connected()).await);
        p.publish("t", "y").await.expect("publish after reconnect");
        assert_eq!(fake.connections(), 2);
    });
}

#[test]
fn producer_matches_pipelined_replies_in_order() {
    run(|| async {
        let fake = FakeNsqd::start();
        fake.set_pub_replies(vec![
            PubReply::Ok,
            PubReply::NonFatalThenOk,
            PubReply::Ok,
            PubReply::Fatal("E_PUB_FAILED PUB failed exiting"),
        ]);
        let p = Producer::connect(fake.addr.clone()).await.expect("connect");
        let results: Rc<RefCell<Vec<PublishResult>>> = Rc::default();
        let mut tasks = Vec::new();
        for i in 0..6 {
            let p = p.clone();
            let results = results.clone();
            tasks.push(glommio::spawn_local(async move {
                let r = p.publish("t", format!("m{i}")).await;
                results.borrow_mut().push((i, r));
            }));
        }
        for t in tasks {
            t.await;
        }
        let mut results = results.take();
        results.sort_by_key(|(i, _)| *i);
        for (i, r) in &results[..3] {
            assert!(r.is_ok(), "publish {i}: {r:?}");
        }
        assert_eq!(
            results[3].1.as_ref().err().and_then(Error::code),
            Some(ErrorCode::PubFailed)
        );
        for (i, r) in &results[4..] {
            let e = r.as_ref().expect_err("after a fatal error");
            assert!(e.is_connection_error(), "publish {i}: {e:?}");
        }
        // One connection carried all six; the broker read up to its fatal error.
        assert_eq!(fake.connections(), 1);
        assert_eq!(fake.count(|c| matches!(c, Command::Pub { .. })), 4);
    });
}

#[test]
fn producer_answers_heartbeats_with_nop() {
    run(|| async {
        let fake = FakeNsqd::start();
        let p = Producer::connect(fake.addr.clone()).await.expect("connect");
        fake.send_heartbeat(0);
        assert!(eventually(WAIT, || fake.count(|c| *c == Command::Nop) == 1).await);
        p.publish("t", "still fine").await.expect("publish");
    });
}

#[test]
fn producer_times_out_and_drops_a_silent_connection() {
    run(|| async {
        let fake = FakeNsqd::start();
        fake.set_pub_replies(vec![PubReply::Silence]);
        let cfg = ProducerConfig::new().response_timeout(ms(200));
        let p = Producer::connect_with(fake.addr.clone(), cfg)
            .await
            .expect("connect");
        assert!(matches!(p.publish("t", "x").await, Err(Error::Timeout)));
        p.publish("t", "y").await.expect("a new connection answers");
        assert_eq!(fake.connections(), 2);
    });
}

#[test]
fn producer_connect_to_nothing_is_an_io_error() {
    run(|| async {
        let listener = glommio::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let err = Producer::connect(addr).await.err().expect("refused");
        assert!(matches!(err, Error::Io(_)), "{err:?}");
    });
}

// ---------------------------------------------------------------- consumer

fn quick_config() -> ConsumerConfig {
    ConsumerConfig::new("events", "ch")
        .client_id("tester")
        .backoff_multiplier(Duration::ZERO)
        .reconnect_delay(ms(50))
        .stop_timeout(WAIT)
}

fn finishing(
    seen: Rc<RefCell<Vec<String>>>,
) -> impl Fn(Message) -> std::future::Ready<HandlerResult> {
    move |m: Message| {
        seen.borrow_mut()
            .push(String::from_utf8_lossy(m.body()).into_owned());
        std::future::ready(HandlerResult::Finish)
    }
}

#[test]
fn consumer_sends_identify_sub_then_rdy_1() {
    run(|| async {
        let fake = FakeNsqd::start();
        let c = Consumer::new(quick_config().max_in_flight(10), finishing(Rc::default()))
            .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        assert!(eventually(WAIT, || fake.commands_on(0).len() >= 3).await);
        let cmds = fake.commands_on(0);
        match &cmds[0] {
            Command::Identify(body) => {
                let v: serde_json::Value = serde_json::from_slice(body).expect("json");
                assert_eq!(v["feature_negotiation"], true);
                assert_eq!(v["client_id"], "tester");
            }
            other => panic!("first command {other:?}"),
        }
        assert_eq!(
            cmds[1],
            Command::Sub {
                topic: "events".into(),
                channel: "ch".into()
            }
        );
        assert_eq!(cmds[2], Command::Rdy(1));
        c.stop().await;
    });
}

#[test]
fn consumer_finishes_handled_messages() {
    run(|| async {
        let fake = FakeNsqd::start();
        let seen: Rc<RefCell<Vec<String>>> = Rc::default();
        let c = Consumer::new(quick_config().max_in_flight(4), finishing(seen.clone()))
            .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        let ids: Vec<_> = (0..5)
            .map(|i| fake.push_message(&format!("m{i}"), 0))
            .collect();
        assert!(eventually(WAIT, || fake.count(|c| matches!(c, Command::Fin(_))) == 5).await);
        for id in ids {
            assert_eq!(fake.count(|c| *c == Command::Fin(id)), 1);
        }
        assert_eq!(seen.borrow().len(), 5);
        let stats = c.stats();
        assert_eq!((stats.messages_received, stats.messages_finished), (5, 5));
        c.stop().await;
    });
}

#[test]
fn consumer_requeues_with_computed_or_given_delay() {
    run(|| async {
        let fake = FakeNsqd::start();
        let cfg = quick_config()
            .max_in_flight(2)
            .requeue_delay(Duration::from_secs(2));
        let c = Consumer::new(cfg, |m: Message| async move {
            if m.body() == "explicit" {
                HandlerResult::requeue_after(Duration::from_secs(7))
            } else {
                HandlerResult::Requeue {
                    delay: None,
                    backoff: false,
                }
            }
        })
        .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        let third = fake.push_message("computed", 2);
        let explicit = fake.push_message("explicit", 0);
        assert!(
            eventually(WAIT, || fake.count(|c| matches!(c, Command::Req { .. }))
                == 2)
            .await
        );
        // Delivery 3 with a 2 s base: 6 s.
        assert_eq!(
            fake.count(|c| *c
                == Command::Req {
                    id: third,
                    delay_ms: 6000
                }),
            1
        );
        assert_eq!(
            fake.count(|c| *c
                == Command::Req {
                    id: explicit,
                    delay_ms: 7000
                }),
            1
        );
        assert_eq!(c.stats().messages_requeued, 2);
        c.stop().await;
    });
}

#[test]
fn consumer_gives_up_past_max_attempts_and_finishes() {
    run(|| async {
        let fake = FakeNsqd::start();
        let handled = Rc::new(RefCell::new(0));
        let h = handled.clone();
        let c = Consumer::new(quick_config().max_attempts(3), move |_m: Message| {
            *h.borrow_mut() += 1;
            async { HandlerResult::requeue() }
        })
        .expect("consumer");
        let given_up: Rc<RefCell<Vec<(String, u16)>>> = Rc::default();
        let g = given_up.clone();
        c.on_give_up(move |m| {
            g.borrow_mut()
                .push((String::from_utf8_lossy(m.body()).into_owned(), m.attempts()))
        });
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        let id = fake.push_message("poison", 3);
        assert!(eventually(WAIT, || fake.count(|c| *c == Command::Fin(id)) == 1).await);
        assert_eq!(*given_up.borrow(), [("poison".to_string(), 4)]);
        assert_eq!(
            *handled.borrow(),
            0,
            "the handler never sees a given-up message"
        );
        assert_eq!(c.stats().messages_given_up, 1);
        c.stop().await;
    });
}

#[test]
fn deferred_handler_holds_messages_then_answers_them_in_a_batch() {
    run(|| async {
        let fake = FakeNsqd::start();
        let held: Rc<RefCell<Vec<Pending>>> = Rc::default();
        let h = held.clone();
        let c = Consumer::new_deferred(
            quick_config().max_in_flight(10),
            move |_m: Message, p: Pending| h.borrow_mut().push(p),
        )
        .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        let ids: Vec<_> = (0..4)
            .map(|i| fake.push_message(&format!("m{i}"), 0))
            .collect();
        assert!(eventually(WAIT, || held.borrow().len() == 4).await);
        assert_eq!(c.stats().in_flight, 4, "held messages are in flight");
        assert_eq!(fake.count(|c| matches!(c, Command::Fin(_))), 0);
        // Three finished as a batch, the fourth dropped unanswered: requeued, no backoff.
        let mut batch = std::mem::take(&mut *held.borrow_mut());
        let last = batch.pop().expect("four held");
        answer_all(batch, HandlerResult::Finish);
        drop(last);
        assert!(eventually(WAIT, || fake.count(|c| matches!(c, Command::Fin(_))) == 3).await);
        for id in &ids[..3] {
            assert_eq!(fake.count(|c| *c == Command::Fin(*id)), 1);
        }
        assert!(
            eventually(WAIT, || fake
                .count(|c| matches!(c, Command::Req { id, .. } if *id == ids[3]))
                == 1)
            .await
        );
        let stats = c.stats();
        assert_eq!(
            (
                stats.messages_finished,
                stats.messages_requeued,
                stats.in_flight
            ),
            (3, 1, 0)
        );
        assert!(!c.in_backoff());
        // stop waits for a held message, answered meanwhile by another task.
        let id = fake.push_message("late", 0);
        assert!(eventually(WAIT, || held.borrow().len() == 1).await);
        let h = held.clone();
        glommio::spawn_local(async move {
            glommio::timer::sleep(ms(100)).await;
            if let Some(p) = h.borrow_mut().pop() {
                p.finish();
            }
        })
        .detach();
        c.stop().await;
        assert_eq!(
            c.stats().messages_finished,
            4,
            "stop waited for the held one"
        );
        assert!(eventually(WAIT, || fake.count(|c| *c == Command::Fin(id)) == 1).await);
    });
}

#[test]
fn released_messages_get_no_answer_and_stop_does_not_wait_for_them() {
    run(|| async {
        let fake = FakeNsqd::start();
        let held: Rc<RefCell<Vec<Pending>>> = Rc::default();
        let h = held.clone();
        let c = Consumer::new_deferred(
            quick_config().max_in_flight(10),
            move |_m: Message, p: Pending| h.borrow_mut().push(p),
        )
        .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        for i in 0..3 {
            fake.push_message(&format!("m{i}"), 0);
        }
        assert!(eventually(WAIT, || held.borrow().len() == 3).await);
        c.set_max_in_flight(0);
        for p in std::mem::take(&mut *held.borrow_mut()) {
            p.release();
        }
        let stats = c.stats();
        assert_eq!(
            (
                stats.messages_released,
                stats.in_flight,
                stats.messages_finished,
                stats.messages_requeued
            ),
            (3, 0, 0, 0)
        );
        // quick_config's stop_timeout is WAIT: a stop that waited for them would take it all.
        let started = std::time::Instant::now();
        c.stop().await;
        assert!(started.elapsed() < WAIT / 2, "{:?}", started.elapsed());
        assert!(
            eventually(WAIT, || fake.is_dead(0)).await,
            "connection closed"
        );
        let cmds = fake.commands_on(0);
        assert!(
            !cmds
                .iter()
                .any(|c| matches!(c, Command::Fin(_) | Command::Req { .. })),
            "released: neither FIN nor REQ: {cmds:?}"
        );
        let rdy0 = cmds.iter().rposition(|c| *c == Command::Rdy(0));
        assert!(rdy0.is_some(), "RDY 0 sent: {cmds:?}");
    });
}

#[test]
fn consumer_answers_heartbeats_with_nop() {
    run(|| async {
        let fake = FakeNsqd::start();
        let c = Consumer::new(quick_config(), finishing(Rc::default())).expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        fake.send_heartbeat(0);
        fake.send_heartbeat(0);
        assert!(eventually(WAIT, || fake.count(|c| *c == Command::Nop) == 2).await);
        c.stop().await;
    });
}

#[test]
fn consumer_touch_sends_touch_and_never_automatically() {
    run(|| async {
        let fake = FakeNsqd::start();
        let c = Consumer::new(quick_config(), |m: Message| async move {
            if m.body() == "slow" {
                m.touch().expect("touch");
            }
            HandlerResult::Finish
        })
        .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        fake.push_message("fast", 0);
        let slow = fake.push_message("slow", 0);
        assert!(eventually(WAIT, || fake.count(|c| matches!(c, Command::Fin(_))) == 2).await);
        assert_eq!(fake.count(|c| matches!(c, Command::Touch(_))), 1);
        assert_eq!(fake.count(|c| *c == Command::Touch(slow)), 1);
        c.stop().await;
    });
}

#[test]
fn consumer_never_asks_more_than_the_brokers_max_rdy_count() {
    run(|| async {
        let fake = FakeNsqd::start_with_max_rdy(3);
        let cfg = quick_config()
            .max_in_flight(100)
            .low_rdy_idle_timeout(ms(200));
        let c = Consumer::new(cfg, finishing(Rc::default())).expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        assert!(eventually(WAIT, || fake.rdy_of(0) == 3).await);
        for i in 0..10 {
            fake.push_message(&format!("m{i}"), 0);
        }
        assert!(eventually(WAIT, || fake.count(|c| matches!(c, Command::Fin(_))) == 10).await);
        assert_eq!(fake.count(|c| matches!(c, Command::Rdy(n) if *n > 3)), 0);
        c.stop().await;
    });
}

#[test]
fn consumer_backs_off_with_rdy_0_then_probes_with_rdy_1() {
    run(|| async {
        let fake = FakeNsqd::start();
        let cfg = quick_config()
            .max_in_flight(5)
            .backoff_multiplier(ms(100))
            .max_backoff_duration(Duration::from_secs(1))
            .low_rdy_idle_timeout(ms(400));
        let c = Consumer::new(cfg, |m: Message| async move {
            if m.body() == "fail" {
                HandlerResult::requeue()
            } else {
                HandlerResult::Finish
            }
        })
        .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        assert!(eventually(WAIT, || fake.rdy_of(0) == 5).await);
        fake.push_message("fail", 0);
        assert!(eventually(WAIT, || c.in_backoff()).await);
        let log_at = |pred: &dyn Fn(&Command) -> bool| fake.commands_on(0).iter().position(pred);
        let req = log_at(&|c| matches!(c, Command::Req { .. })).expect("REQ sent");
        // Pause, then a probe of RDY 1.
        assert!(eventually(WAIT, || fake.rdy_of(0) == 1).await);
        let cmds = fake.commands_on(0);
        let after: Vec<_> = cmds[req..]
            .iter()
            .filter(|c| matches!(c, Command::Rdy(_)))
            .cloned()
            .collect();
        assert_eq!(after[..2], [Command::Rdy(0), Command::Rdy(1)]);
        // The probe succeeds: backoff ends, full RDY again.
        fake.push_message("ok", 0);
        assert!(eventually(WAIT, || !c.in_backoff() && fake.rdy_of(0) == 5).await);
        c.stop().await;
    });
}

#[test]
fn consumer_stop_sends_cls_and_waits_for_running_handlers() {
    run(|| async {
        let fake = FakeNsqd::start();
        let started = Rc::new(RefCell::new(false));
        let s = started.clone();
        let c = Consumer::new(quick_config(), move |_m: Message| {
            *s.borrow_mut() = true;
            async {
                glommio::timer::sleep(ms(200)).await;
                HandlerResult::Finish
            }
        })
        .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        let id = fake.push_message("slow", 0);
        assert!(eventually(WAIT, || *started.borrow()).await);
        c.stop().await;
        assert_eq!(
            c.stats().messages_finished,
            1,
            "stop waited for the handler"
        );
        assert!(eventually(WAIT, || fake.count(|c| *c == Command::Fin(id)) == 1).await);
        let cmds = fake.commands_on(0);
        let cls = cmds.iter().position(|c| *c == Command::Cls).expect("CLS");
        let fin = cmds
            .iter()
            .position(|c| *c == Command::Fin(id))
            .unwrap_or_else(|| panic!("no FIN in {cmds:?}"));
        assert!(
            cls < fin,
            "CLS first, then the running handler's FIN: {cmds:?}"
        );
        assert!(
            eventually(WAIT, || fake.is_dead(0)).await,
            "connection closed"
        );
        assert_eq!(c.stats().connections, 0);
        assert!(c.connect_to_nsqd(fake.addr.clone()).await.is_err());
    });
}

#[test]
fn consumer_reconnects_to_a_direct_address() {
    run(|| async {
        let fake = FakeNsqd::start();
        let c = Consumer::new(quick_config(), finishing(Rc::default())).expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribe");
        fake.kill(0);
        assert!(eventually(WAIT, || fake.commands_on(1).len() >= 3).await);
        assert_eq!(fake.commands_on(1)[2], Command::Rdy(1));
        let id = fake.push_message("after reconnect", 0);
        assert!(eventually(WAIT, || fake.count(|c| *c == Command::Fin(id)) == 1).await);
        c.stop().await;
    });
}

#[test]
fn consumer_moves_rdy_between_brokers_when_max_in_flight_is_lower() {
    run(|| async {
        let a = FakeNsqd::start();
        let b = FakeNsqd::start();
        let cfg = quick_config()
            .max_in_flight(1)
            .low_rdy_idle_timeout(ms(200));
        let c = Consumer::new(cfg, finishing(Rc::default())).expect("consumer");
        c.connect_to_nsqd(a.addr.clone()).await.expect("a");
        c.connect_to_nsqd(b.addr.clone()).await.expect("b");
        assert!(eventually(WAIT, || c.stats().connections == 2).await);
        // Only one of them may hold the single RDY at any time, and it moves around.
        let mut holders = std::collections::BTreeSet::new();
        let ok = eventually(WAIT, || {
            let (ra, rb) = (a.rdy_of(0), b.rdy_of(0));
            assert!(ra + rb <= 1, "RDY {ra} + {rb} > max_in_flight");
            if ra == 1 {
                holders.insert("a");
            }
            if rb == 1 {
                holders.insert("b");
            }
            holders.len() == 2
        })
        .await;
        assert!(ok, "RDY never moved to the other broker");
        // Messages on either side still get through.
        let id = b.push_message("on b", 0);
        assert!(eventually(WAIT, || b.count(|c| *c == Command::Fin(id)) == 1).await);
        c.stop().await;
    });
}

#[test]
fn consumer_follows_lookup_answers() {
    run(|| async {
        let nsqd = FakeNsqd::start();
        let lookupd = FakeLookupd::start();
        lookupd.set_producers(&[&nsqd.addr]);
        let cfg = quick_config().lookupd_poll_interval(ms(100));
        let c = Consumer::new(cfg, finishing(Rc::default())).expect("consumer");
        c.connect_to_lookupd(lookupd.addr.clone())
            .await
            .expect("first poll");
        c.wait_for_connections(1, WAIT).await.expect("subscribed");
        // Listed twice (two lookups): still one connection.
        c.connect_to_lookupd(lookupd.addr.clone())
            .await
            .expect("poll");
        assert_eq!(nsqd.connections(), 1);
        let id = nsqd.push_message("found", 0);
        assert!(eventually(WAIT, || nsqd.count(|c| *c == Command::Fin(id)) == 1).await);
        // The broker vanishes from the lookup: CLS, then the connection closes.
        lookupd.set_producers(&[]);
        assert!(eventually(WAIT, || nsqd.count(|c| *c == Command::Cls) == 1).await);
        assert!(eventually(WAIT, || nsqd.is_dead(0)).await);
        // It comes back: a new connection on the next poll.
        lookupd.set_producers(&[&nsqd.addr]);
        assert!(eventually(WAIT, || nsqd.connections() == 2).await);
        c.wait_for_connections(1, WAIT)
            .await
            .expect("subscribed again");
        c.stop().await;
    });
}

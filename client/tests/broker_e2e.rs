//! Producer and consumer against the real `broker` binary, started on ephemeral ports.
//!
//! The binary is taken from `$BROKER_BIN`, else `test_harness::binary` builds it
//! (`cargo build --release -p broker`, a no-op when fresh). Every wait is bounded.

mod support;

use client::{
    Consumer, ConsumerConfig, ErrorCode, HandlerResult, Message, Producer, ProducerConfig,
};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;
use support::{eventually, run};
use test_harness::{binary, start_broker, Proc, Started};

const WAIT: Duration = Duration::from_secs(10);

struct Broker {
    _proc: Proc,
    tcp: String,
}

/// Starts the broker (one shard) and waits until it accepts TCP connections.
fn start(name: &str) -> Option<Broker> {
    let prefix = format!("client-e2e-{name}");
    let Started { proc, tcp, .. } = start_broker(&binary("broker"), &prefix, &["--shards", "1"]);
    Some(Broker { _proc: proc, tcp })
}

#[test]
fn e2e_published_messages_are_all_consumed() {
    let Some(broker) = start("all") else {
        return;
    };
    let addr = broker.tcp.clone();
    run(move || async move {
        let p = Producer::connect(addr.clone()).await.expect("producer");
        let mut expected = BTreeSet::new();
        for i in 0..10 {
            p.publish("e2e", format!("pub-{i}")).await.expect("pub");
            expected.insert(format!("pub-{i}"));
        }
        let batch: Vec<_> = (0..10).map(|i| format!("mpub-{i}").into()).collect();
        p.multi_publish("e2e", batch).await.expect("mpub");
        expected.extend((0..10).map(|i| format!("mpub-{i}")));
        p.deferred_publish("e2e", Duration::from_millis(300), "dpub")
            .await
            .expect("dpub");
        expected.insert("dpub".to_string());

        let seen: Rc<RefCell<BTreeSet<String>>> = Rc::default();
        let s = seen.clone();
        let cfg = ConsumerConfig::new("e2e", "ch").max_in_flight(5);
        let c = Consumer::new(cfg, move |m: Message| {
            s.borrow_mut()
                .insert(String::from_utf8_lossy(m.body()).into_owned());
            async { HandlerResult::Finish }
        })
        .expect("consumer");
        c.connect_to_nsqd(addr).await.expect("subscribe");
        let all = eventually(WAIT, || seen.borrow().len() == expected.len()).await;
        assert!(all, "got {} of {}", seen.borrow().len(), expected.len());
        assert_eq!(*seen.borrow(), expected);
        c.stop().await;
        assert_eq!(c.stats().messages_finished, expected.len() as u64);
        p.stop();
    });
}

#[test]
fn e2e_requeued_message_comes_back_with_more_attempts() {
    let Some(broker) = start("req") else {
        return;
    };
    let addr = broker.tcp.clone();
    run(move || async move {
        let p = Producer::connect(addr.clone()).await.expect("producer");
        p.publish("e2e_req", "again").await.expect("pub");
        let attempts: Rc<RefCell<Vec<u16>>> = Rc::default();
        let a = attempts.clone();
        let cfg = ConsumerConfig::new("e2e_req", "ch").backoff_multiplier(Duration::ZERO);
        let c = Consumer::new(cfg, move |m: Message| {
            a.borrow_mut().push(m.attempts());
            let first = m.attempts() == 1;
            async move {
                if first {
                    HandlerResult::requeue_after(Duration::ZERO)
                } else {
                    HandlerResult::Finish
                }
            }
        })
        .expect("consumer");
        c.connect_to_nsqd(addr).await.expect("subscribe");
        assert!(eventually(WAIT, || attempts.borrow().len() == 2).await);
        assert_eq!(*attempts.borrow(), [1, 2]);
        c.stop().await;
    });
}

#[test]
fn e2e_broker_errors_carry_their_code_and_the_producer_recovers() {
    let Some(broker) = start("err") else {
        return;
    };
    let addr = broker.tcp.clone();
    run(move || async move {
        let p = Producer::connect(addr).await.expect("producer");
        let err = p
            .multi_publish("e2e_err", vec!["ok".into(), "".into()])
            .await
            .expect_err("an empty message is refused");
        assert_eq!(err.code(), Some(ErrorCode::BadMessage), "{err}");
        p.publish("e2e_err", "fine")
            .await
            .expect("publish after the error");
    });
}

#[test]
fn e2e_heartbeats_keep_an_idle_connection_open() {
    let Some(broker) = start("hb") else {
        return;
    };
    let addr = broker.tcp.clone();
    run(move || async move {
        let cfg = ProducerConfig::new().heartbeat_interval(Duration::from_secs(1));
        let p = Producer::connect_with(addr, cfg).await.expect("producer");
        // Three heartbeat intervals idle: the broker would close a silent client after two.
        let dropped = eventually(Duration::from_millis(3200), || !p.is_connected()).await;
        assert!(
            !dropped,
            "the broker closed an idle connection that answered heartbeats"
        );
        p.publish("e2e_hb", "alive").await.expect("publish");
    });
}

#[test]
fn e2e_blocking_producer_publishes_recovers_and_outlives_idle_spells() {
    let Some(broker) = start("blocking") else {
        return;
    };
    let cfg = ProducerConfig::new().heartbeat_interval(Duration::from_secs(1));
    let mut p = client::blocking::Producer::connect_with(broker.tcp.clone(), cfg)
        .expect("blocking producer");
    for i in 0..10 {
        p.publish("e2e_blocking", format!("pub-{i}")).expect("pub");
    }
    let err = p
        .multi_publish("e2e_blocking", vec!["ok".into(), "".into()])
        .expect_err("an empty message is refused");
    assert_eq!(err.code(), Some(ErrorCode::BadMessage), "{err}");
    assert!(!p.is_connected(), "a refused publish drops the connection");
    p.multi_publish("e2e_blocking", vec!["m1".into(), "m2".into()])
        .expect("mpub on a new connection");
    // Idle past one heartbeat: the next publish answers it first.
    std::thread::sleep(Duration::from_millis(1300));
    p.publish("e2e_blocking", "after-one-heartbeat")
        .expect("pub after a heartbeat");
    // Idle past two: the broker has closed the connection; the next publish finds that out
    // before it sends, and reconnects.
    std::thread::sleep(Duration::from_millis(2500));
    p.deferred_publish("e2e_blocking", Duration::from_millis(100), "dpub")
        .expect("dpub after the broker closed the idle connection");

    let addr = broker.tcp.clone();
    run(move || async move {
        let seen: Rc<RefCell<BTreeSet<String>>> = Rc::default();
        let s = seen.clone();
        let c = Consumer::new(
            ConsumerConfig::new("e2e_blocking", "ch"),
            move |m: Message| {
                s.borrow_mut()
                    .insert(String::from_utf8_lossy(m.body()).into_owned());
                async { HandlerResult::Finish }
            },
        )
        .expect("consumer");
        c.connect_to_nsqd(addr).await.expect("subscribe");
        let mut expected: BTreeSet<String> = (0..10).map(|i| format!("pub-{i}")).collect();
        expected.extend(["m1", "m2", "after-one-heartbeat", "dpub"].map(String::from));
        let all = eventually(WAIT, || seen.borrow().len() == expected.len()).await;
        assert!(all, "got {:?}", seen.borrow());
        assert_eq!(*seen.borrow(), expected);
        c.stop().await;
    });
}

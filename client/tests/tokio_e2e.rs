//! The client on tokio (a current-thread runtime with a `LocalSet`, as a tokio service runs it)
//! against the real `broker` and `lookup`, the broker requiring AUTH from an auth server the
//! test runs: a producer publishes 100,000 messages over TLS with snappy, authenticated; a
//! consumer that finds the broker through the lookup, over TLS with snappy, authenticated,
//! receives every one, backs off after the failures its handler reports, and recovers. The same crate
//! and API as the glommio tests (`broker_e2e.rs`, `broker_security.rs`), which run unchanged.

mod support;

use client::{
    Consumer, ConsumerConfig, HandlerResult, Message, Producer, ProducerConfig, TlsConfig,
};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};
use support::real::{auth_server, tls_flags, BrokerProc, LookupProc};
use test_harness::certs::Pki;

const MESSAGES: usize = 100_000;
const BATCH: usize = 200;
/// Every this many messages, the handler fails the first delivery (a REQ with backoff).
const FAIL_EVERY: usize = 10_000;

/// Runs `f` as a tokio service would run the client: on a current-thread runtime, in a
/// `LocalSet` (the client's tasks are `spawn_local` ones).
fn on_tokio<F: Future<Output = ()>>(f: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    tokio::task::LocalSet::new().block_on(&rt, f);
}

#[test]
fn a_tokio_service_publishes_and_consumes_100000_over_tls_snappy_and_auth_through_lookup() {
    let pki = Pki::new();
    let lookup = LookupProc::start();
    let mut flags = tls_flags(&pki);
    flags.extend(["--auth-http-address".to_string(), auth_server(64)]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let broker = BrokerProc::start_registered(&lookup.tcp, &flags);
    let tls = TlsConfig::default().root_ca_file(&pki.ca_pem);
    // The topic the auth server lets secret "s3cret" publish to and subscribe on.
    let topic = "allowed";
    on_tokio(async {
        let pcfg = ProducerConfig::new()
            .tls_v1(true)
            .tls_config(tls.clone())
            .snappy(true)
            .auth_secret("s3cret");
        let producer = Producer::connect_with(broker.tcp.clone(), pcfg)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}\n{}", broker.log()));
        let negotiated = producer.negotiated();
        assert!(
            negotiated.tls.is_some(),
            "the producer's TLS: {negotiated:?}"
        );
        assert!(negotiated.compression.is_some(), "the producer's snappy");
        let auth = negotiated
            .auth
            .as_ref()
            .expect("the producer's AUTH answered");
        assert_eq!(auth.identity, "alice", "{auth:?}");
        for start in (0..MESSAGES).step_by(BATCH) {
            let bodies = (start..start + BATCH)
                .map(|i| bytes::Bytes::from(format!("m{i}")))
                .collect();
            producer
                .multi_publish(topic, bodies)
                .await
                .unwrap_or_else(|e| panic!("MPUB at {start}: {e}\n{}", broker.log()));
        }
        // A single PUB too.
        producer.publish(topic, "last").await.expect("PUB");

        let seen: Rc<RefCell<HashSet<usize>>> = Rc::default();
        let failed = Rc::new(Cell::new(0usize));
        let (s, f) = (seen.clone(), failed.clone());
        let ccfg = ConsumerConfig::new(topic, "ch")
            .max_in_flight(200)
            .tls_v1(true)
            .tls_config(tls.clone())
            .snappy(true)
            .auth_secret("s3cret")
            .lookupd_poll_interval(Duration::from_millis(500))
            .backoff_multiplier(Duration::from_millis(50))
            .max_backoff_duration(Duration::from_millis(200));
        let consumer = Consumer::new(ccfg, move |m: Message| {
            let body = String::from_utf8_lossy(m.body()).into_owned();
            let i = body.strip_prefix('m').and_then(|n| n.parse::<usize>().ok());
            let result = match i {
                Some(i) if i % FAIL_EVERY == 0 && m.attempts() == 1 => {
                    f.set(f.get() + 1);
                    HandlerResult::Requeue {
                        delay: Some(Duration::ZERO),
                        backoff: true,
                    }
                }
                Some(i) => {
                    s.borrow_mut().insert(i);
                    HandlerResult::Finish
                }
                None => HandlerResult::Finish,
            };
            std::future::ready(result)
        })
        .expect("consumer");
        consumer
            .connect_to_lookupd(lookup.http.clone())
            .await
            .expect("lookup discovery");
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut backed_off = false;
        while seen.borrow().len() < MESSAGES {
            assert!(
                Instant::now() < deadline,
                "{} of {MESSAGES} received\n{}",
                seen.borrow().len(),
                broker.log()
            );
            backed_off |= consumer.in_backoff();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let stats = consumer.stats();
        let expected_failures = MESSAGES / FAIL_EVERY;
        assert_eq!(failed.get(), expected_failures, "{stats:?}");
        assert!(
            stats.messages_requeued >= expected_failures as u64,
            "{stats:?}"
        );
        assert!(backed_off, "the consumer never backed off: {stats:?}");
        let conns = consumer.negotiated();
        assert_eq!(conns.len(), 1, "one broker found through the lookup");
        let n = &conns[0].1;
        assert!(n.tls.is_some() && n.compression.is_some(), "{conns:?}");
        assert_eq!(
            n.auth.as_ref().map(|a| a.identity.as_str()),
            Some("alice"),
            "{conns:?}"
        );
        consumer.stop().await;
        producer.stop();
    });
}

//! TLS, snappy, deflate and AUTH against the secure fake nsqd ([`support::secure`]), which
//! does the server side with rustls, snap and flate2's own std wrappers: each feature alone
//! and stacked, for the async producer, the consumer and the blocking producer, and the
//! error paths (a broker that refuses TLS, certificates that do not check out, AUTH refused,
//! a corrupt or bomb compressed stream, a hang-up mid-handshake). Every wait is bounded.

mod support;

use bytes::Bytes;
use client::{
    Compression, Consumer, ConsumerConfig, Error, ErrorCode, HandlerResult, Message, Producer,
    ProducerConfig, TlsConfig,
};
use protocol::Command;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use support::secure::{Misbehave, SecureFake, Settings, ALLOWED_TOPIC, NO_PERMISSIONS, SECRET};
use support::{eventually, run, WAIT};
use test_harness::certs::Pki;

/// What a test asks of the client.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layers {
    Tls,
    Snappy,
    Deflate,
    TlsSnappy,
    TlsDeflate,
}

impl Layers {
    fn tls(self) -> bool {
        matches!(self, Layers::Tls | Layers::TlsSnappy | Layers::TlsDeflate)
    }
    fn snappy(self) -> bool {
        matches!(self, Layers::Snappy | Layers::TlsSnappy)
    }
    fn deflate(self) -> bool {
        matches!(self, Layers::Deflate | Layers::TlsDeflate)
    }
    const ALL: [Layers; 5] = [
        Layers::Tls,
        Layers::Snappy,
        Layers::Deflate,
        Layers::TlsSnappy,
        Layers::TlsDeflate,
    ];
}

fn producer_config(pki: &Pki, l: Layers) -> ProducerConfig {
    ProducerConfig::new()
        .tls_v1(l.tls())
        .tls_config(TlsConfig::default().root_ca_file(&pki.ca_pem))
        .snappy(l.snappy())
        .deflate(l.deflate())
        .response_timeout(WAIT)
}

fn fake_with(pki: &Pki, settings: Settings) -> SecureFake {
    SecureFake::start(Settings {
        tls: Some(pki.server_config(false)),
        ..settings
    })
}

fn bodies(prefix: &str, n: usize, size: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| {
            let mut b = format!("{prefix}-{i}-").into_bytes();
            b.resize(size, b'x');
            Bytes::from(b)
        })
        .collect()
}

/// Every command the fake decoded on connection 0, past IDENTIFY.
fn published(fake: &SecureFake) -> Vec<Bytes> {
    fake.seen(0)
        .commands
        .into_iter()
        .flat_map(|c| match c {
            Command::Pub { body, .. } => vec![body],
            Command::Mpub { bodies, .. } => bodies,
            _ => vec![],
        })
        .collect()
}

#[test]
fn producer_publishes_over_each_layer_and_stack() {
    for layers in Layers::ALL {
        run(move || async move {
            let pki = Pki::new();
            let fake = fake_with(&pki, Settings::default());
            let p = Producer::connect_with(fake.addr.clone(), producer_config(&pki, layers))
                .await
                .unwrap_or_else(|e| panic!("{layers:?}: {e}"));
            let batch = bodies("m", 1000, 200);
            p.multi_publish("t", batch[..500].to_vec())
                .await
                .expect("MPUB");
            for b in &batch[500..] {
                p.publish("t", b.clone()).await.expect("PUB");
            }
            // A body far over one snappy block and one deflate window.
            let big = Bytes::from(vec![7u8; 300_000]);
            p.publish("t", big.clone()).await.expect("big PUB");
            let mut want = batch.clone();
            want.push(big);
            let got = published(&fake);
            assert!(
                got == want,
                "{layers:?}: {} bodies of {}, intact: no",
                got.len(),
                want.len()
            );
            let seen = fake.seen(0);
            assert_eq!(seen.tls, layers.tls(), "{layers:?}");
            assert_eq!(seen.snappy, layers.snappy(), "{layers:?}");
            assert_eq!(seen.deflate.is_some(), layers.deflate(), "{layers:?}");
            let n = p.negotiated();
            assert_eq!(n.tls.is_some(), layers.tls(), "{layers:?}: {n:?}");
            if let Some((version, suite)) = &n.tls {
                assert!(version.starts_with("TLS"), "{version}");
                assert!(!suite.is_empty());
            }
            let compression = match layers {
                Layers::Snappy | Layers::TlsSnappy => Some(Compression::Snappy),
                Layers::Deflate | Layers::TlsDeflate => Some(Compression::Deflate { level: 6 }),
                Layers::Tls => None,
            };
            assert_eq!(n.compression, compression, "{layers:?}");
            p.stop();
        });
    }
}

#[test]
fn consumer_receives_over_each_layer_and_stack() {
    for layers in Layers::ALL {
        run(move || async move {
            let pki = Pki::new();
            let messages: Vec<String> = (0..1000).map(|i| format!("msg-{i}")).collect();
            let fake = fake_with(
                &pki,
                Settings {
                    messages: messages.clone(),
                    ..Settings::default()
                },
            );
            let seen: Rc<RefCell<Vec<String>>> = Rc::default();
            let s = seen.clone();
            let cfg = ConsumerConfig::new("t", "c")
                .max_in_flight(100)
                .tls_v1(layers.tls())
                .tls_config(TlsConfig::default().root_ca_file(&pki.ca_pem))
                .snappy(layers.snappy())
                .deflate(layers.deflate())
                .deflate_level(1);
            let c = Consumer::new(cfg, move |m: Message| {
                s.borrow_mut()
                    .push(String::from_utf8_lossy(m.body()).into_owned());
                std::future::ready(HandlerResult::Finish)
            })
            .expect("consumer");
            c.connect_to_nsqd(fake.addr.clone())
                .await
                .unwrap_or_else(|e| panic!("{layers:?}: {e}"));
            assert!(
                eventually(WAIT, || seen.borrow().len() == messages.len()).await,
                "{layers:?}: got {} of {}",
                seen.borrow().len(),
                messages.len()
            );
            assert!(
                *seen.borrow() == messages,
                "{layers:?}: out of order or altered"
            );
            assert!(
                eventually(WAIT, || {
                    let fins = fake
                        .seen(0)
                        .commands
                        .iter()
                        .filter(|c| matches!(c, Command::Fin(_)))
                        .count();
                    fins == messages.len()
                })
                .await,
                "{layers:?}: every message FINned through the layers"
            );
            assert_eq!(fake.seen(0).deflate, layers.deflate().then_some(1));
            let negotiated = c.negotiated();
            assert_eq!(negotiated.len(), 1);
            assert_eq!(negotiated[0].1.tls.is_some(), layers.tls(), "{layers:?}");
            c.stop().await;
        });
    }
}

#[test]
fn blocking_producer_publishes_over_each_layer_and_stack() {
    for layers in Layers::ALL {
        let pki = Pki::new();
        let fake = fake_with(&pki, Settings::default());
        let mut p = client::blocking::Producer::connect_with(
            fake.addr.clone(),
            producer_config(&pki, layers),
        )
        .unwrap_or_else(|e| panic!("{layers:?}: {e}"));
        let batch = bodies("b", 300, 100);
        p.multi_publish("t", batch[..200].to_vec())
            .unwrap_or_else(|e| panic!("{layers:?}: MPUB: {e}"));
        for b in &batch[200..] {
            p.publish("t", b.clone()).expect("PUB");
        }
        let n = p.negotiated().cloned().expect("connected");
        assert_eq!(n.tls.is_some(), layers.tls(), "{layers:?}");
        assert_eq!(n.compression.is_some(), !matches!(layers, Layers::Tls));
        p.close();
        let got = published(&fake);
        assert!(
            got == batch,
            "{layers:?}: {} bodies of {}",
            got.len(),
            batch.len()
        );
    }
}

#[test]
fn deflate_level_is_capped_by_the_broker() {
    run(|| async {
        let pki = Pki::new();
        let fake = fake_with(
            &pki,
            Settings {
                max_deflate_level: 3,
                ..Settings::default()
            },
        );
        let cfg = producer_config(&pki, Layers::Deflate).deflate_level(9);
        let p = Producer::connect_with(fake.addr.clone(), cfg)
            .await
            .expect("connect");
        p.publish("t", "x").await.expect("PUB");
        assert_eq!(fake.seen(0).deflate, Some(3));
        assert_eq!(
            p.negotiated().compression,
            Some(Compression::Deflate { level: 3 })
        );
        match &fake.seen(0).commands[0] {
            Command::Identify(body) => {
                let v: serde_json::Value = serde_json::from_slice(body).expect("json");
                assert_eq!(
                    (v["deflate"].as_bool(), v["deflate_level"].as_i64()),
                    (Some(true), Some(9))
                );
                assert_eq!(v["tls_v1"], false);
                assert_eq!(v["snappy"], false);
            }
            other => panic!("first command {other:?}"),
        }
    });
}

#[test]
fn a_compression_the_broker_does_not_offer_stays_off() {
    run(|| async {
        let pki = Pki::new();
        let fake = fake_with(
            &pki,
            Settings {
                snappy: false,
                ..Settings::default()
            },
        );
        let p = Producer::connect_with(fake.addr.clone(), producer_config(&pki, Layers::Snappy))
            .await
            .expect("connect");
        p.publish("t", "plain").await.expect("PUB");
        assert_eq!(p.negotiated().compression, None);
        assert!(!fake.seen(0).snappy);
    });
}

#[test]
fn both_compressions_at_once_is_refused_before_connecting() {
    let cfg = ProducerConfig::new().snappy(true).deflate(true);
    assert!(matches!(cfg.validate(), Err(Error::InvalidConfig(_))));
    let cfg = ProducerConfig::new().deflate(true).deflate_level(0);
    assert!(matches!(cfg.validate(), Err(Error::InvalidConfig(_))));
}

// ---------------------------------------------------------------- TLS refused or failing

#[test]
fn a_broker_that_does_not_turn_tls_on_is_refused_never_used_in_the_clear() {
    run(|| async {
        let pki = Pki::new();
        let fake = SecureFake::start(Settings::default()); // no TLS offered
        let err = Producer::connect_with(fake.addr.clone(), producer_config(&pki, Layers::Tls))
            .await
            .err()
            .expect("refused");
        assert!(matches!(err, Error::TlsRefused), "{err:?}");
        let err = client::blocking::Producer::connect_with(
            fake.addr.clone(),
            producer_config(&pki, Layers::TlsSnappy),
        )
        .err()
        .expect("refused");
        assert!(matches!(err, Error::TlsRefused), "{err:?}");
        // Nothing but IDENTIFY ever reached the broker.
        for i in 0..fake.connections() {
            let cmds = fake.seen(i).commands;
            assert!(
                cmds.iter().all(|c| matches!(c, Command::Identify(_))),
                "{cmds:?}"
            );
        }
    });
}

#[test]
fn certificates_that_do_not_check_out_fail_the_handshake() {
    run(|| async {
        let pki = Pki::new();
        let fake = fake_with(&pki, Settings::default());
        let untrusted = ProducerConfig::new()
            .tls_v1(true)
            .tls_config(TlsConfig::default().root_ca_file(&pki.other_ca_pem));
        let err = Producer::connect_with(fake.addr.clone(), untrusted)
            .await
            .err()
            .expect("unknown issuer");
        assert!(
            matches!(&err, Error::Tls(t) if t.contains("Issuer")),
            "{err:?}"
        );
        let wrong_name = ProducerConfig::new().tls_v1(true).tls_config(
            TlsConfig::default()
                .root_ca_file(&pki.ca_pem)
                .server_name("other.example"),
        );
        let err = Producer::connect_with(fake.addr.clone(), wrong_name)
            .await
            .err()
            .expect("name mismatch");
        assert!(matches!(&err, Error::Tls(_)), "{err:?}");
        // By name instead of address: the certificate carries localhost too.
        let by_name = ProducerConfig::new().tls_v1(true).tls_config(
            TlsConfig::default()
                .root_ca_file(&pki.ca_pem)
                .server_name("localhost"),
        );
        let p = Producer::connect_with(fake.addr.clone(), by_name)
            .await
            .expect("localhost is in the certificate");
        p.publish("t", "x").await.expect("PUB");
        // insecure_skip_verify accepts the untrusted chain.
        let insecure = ProducerConfig::new().tls_v1(true).tls_config(
            TlsConfig::default()
                .root_ca_file(&pki.other_ca_pem)
                .insecure_skip_verify(true),
        );
        let p = Producer::connect_with(fake.addr.clone(), insecure)
            .await
            .expect("insecure");
        p.publish("t", "y").await.expect("PUB");
        // The blocking producer checks the same way.
        let untrusted = ProducerConfig::new()
            .tls_v1(true)
            .tls_config(TlsConfig::default().root_ca_file(&pki.other_ca_pem));
        let err = client::blocking::Producer::connect_with(fake.addr.clone(), untrusted)
            .err()
            .expect("unknown issuer");
        assert!(matches!(&err, Error::Tls(_)), "{err:?}");
    });
}

#[test]
fn a_required_client_certificate_is_presented_and_its_absence_refused() {
    run(|| async {
        let pki = Pki::new();
        let fake = SecureFake::start(Settings {
            tls: Some(pki.server_config(true)),
            ..Settings::default()
        });
        let without = producer_config(&pki, Layers::Tls);
        let err = Producer::connect_with(fake.addr.clone(), without.clone())
            .await
            .err()
            .expect("no client certificate");
        assert!(
            matches!(&err, Error::Tls(_) | Error::Io(_) | Error::Closed),
            "{err:?}"
        );
        let err = client::blocking::Producer::connect_with(fake.addr.clone(), without)
            .err()
            .expect("no client certificate");
        assert!(
            matches!(&err, Error::Tls(_) | Error::Io(_) | Error::Closed),
            "{err:?}"
        );

        let tls = TlsConfig::default()
            .root_ca_file(&pki.ca_pem)
            .client_cert(&pki.client_cert_pem, &pki.client_key_pem);
        let with = ProducerConfig::new()
            .tls_v1(true)
            .tls_config(tls)
            .snappy(true);
        let p = Producer::connect_with(fake.addr.clone(), with.clone())
            .await
            .expect("with a client certificate");
        p.publish("t", "x").await.expect("PUB");
        let mut b = client::blocking::Producer::connect_with(fake.addr.clone(), with)
            .expect("blocking, with a client certificate");
        b.publish("t", "y").expect("PUB");
        let n = fake.connections();
        assert!(fake.seen(n - 1).client_cert && fake.seen(n - 2).client_cert);
    });
}

#[test]
fn a_hang_up_mid_handshake_is_an_error() {
    run(|| async {
        let pki = Pki::new();
        let fake = fake_with(
            &pki,
            Settings {
                misbehave: Misbehave::HangUpMidHandshake,
                ..Settings::default()
            },
        );
        let err = Producer::connect_with(fake.addr.clone(), producer_config(&pki, Layers::Tls))
            .await
            .err()
            .expect("hung up");
        assert!(
            err.is_connection_error() || matches!(err, Error::Tls(_)),
            "{err:?}"
        );
        // The next connection (a well-behaved one) works.
        let p = Producer::connect_with(fake.addr.clone(), producer_config(&pki, Layers::Tls))
            .await
            .expect("second connection");
        p.publish("t", "x").await.expect("PUB");
    });
}

// ---------------------------------------------------------------- AUTH

fn auth_fake(pki: &Pki) -> SecureFake {
    fake_with(
        pki,
        Settings {
            auth_required: true,
            messages: vec!["for alice".into()],
            ..Settings::default()
        },
    )
}

#[test]
fn auth_sends_the_secret_after_identify_and_its_upgrades() {
    run(|| async {
        let pki = Pki::new();
        let fake = auth_fake(&pki);
        let cfg = producer_config(&pki, Layers::TlsDeflate).auth_secret(SECRET);
        let p = Producer::connect_with(fake.addr.clone(), cfg)
            .await
            .expect("authed");
        let auth = p.negotiated().auth.expect("AUTH answered");
        assert_eq!(auth.identity, "alice");
        assert_eq!(auth.identity_url, "https://auth.example/alice");
        assert_eq!(auth.permission_count, 1);
        p.publish(ALLOWED_TOPIC, "ok").await.expect("allowed topic");
        let cmds = fake.seen(0).commands;
        assert!(matches!(&cmds[0], Command::Identify(_)));
        assert_eq!(cmds[1], Command::Auth(Bytes::from(SECRET)));
        // A topic the authorizations do not cover: E_UNAUTHORIZED, fatal.
        let err = p
            .publish("forbidden", "no")
            .await
            .expect_err("unauthorized");
        assert_eq!(err.code(), Some(ErrorCode::Unauthorized), "{err}");
        assert!(err.to_string().contains("AUTH failed for PUB"), "{err}");

        // The blocking producer and the consumer authenticate the same way.
        let cfg = producer_config(&pki, Layers::Snappy).auth_secret(SECRET);
        let mut b = client::blocking::Producer::connect_with(fake.addr.clone(), cfg)
            .expect("blocking authed");
        assert_eq!(
            b.negotiated()
                .and_then(|n| n.auth.as_ref())
                .map(|a| a.identity.as_str()),
            Some("alice")
        );
        b.publish(ALLOWED_TOPIC, "ok").expect("PUB");
        let got: Rc<RefCell<Vec<String>>> = Rc::default();
        let g = got.clone();
        let cfg = ConsumerConfig::new("t", "c").auth_secret(SECRET);
        let c = Consumer::new(cfg, move |m: Message| {
            g.borrow_mut()
                .push(String::from_utf8_lossy(m.body()).into_owned());
            std::future::ready(HandlerResult::Finish)
        })
        .expect("consumer");
        c.connect_to_nsqd(fake.addr.clone())
            .await
            .expect("subscribed");
        assert!(eventually(WAIT, || got.borrow().len() == 1).await);
        c.stop().await;
    });
}

#[test]
fn auth_refused_or_missing_is_an_error_naming_why() {
    run(|| async {
        let pki = Pki::new();
        let fake = auth_fake(&pki);
        let wrong = ProducerConfig::new().auth_secret("wrong");
        let err = Producer::connect_with(fake.addr.clone(), wrong.clone())
            .await
            .err()
            .expect("wrong secret");
        assert_eq!(err.code(), Some(ErrorCode::AuthFailed), "{err}");
        let err = client::blocking::Producer::connect_with(fake.addr.clone(), wrong)
            .err()
            .expect("wrong secret");
        assert_eq!(err.code(), Some(ErrorCode::AuthFailed), "{err}");

        let none = ProducerConfig::new().auth_secret(NO_PERMISSIONS);
        let err = Producer::connect_with(fake.addr.clone(), none)
            .await
            .err()
            .expect("no authorizations");
        assert_eq!(err.code(), Some(ErrorCode::Unauthorized), "{err}");

        let err = Producer::connect(fake.addr.clone())
            .await
            .err()
            .expect("no secret");
        assert!(matches!(err, Error::AuthRequired), "{err:?}");
        let c = Consumer::new(ConsumerConfig::new("t", "c"), |_m: Message| {
            std::future::ready(HandlerResult::Finish)
        })
        .expect("consumer");
        let err = c
            .connect_to_nsqd(fake.addr.clone())
            .await
            .expect_err("no secret");
        assert!(matches!(err, Error::AuthRequired), "{err:?}");
        c.stop().await;
        // Nothing was published by any of them.
        for i in 0..fake.connections() {
            assert!(!fake
                .seen(i)
                .commands
                .iter()
                .any(|c| matches!(c, Command::Pub { .. } | Command::Sub { .. })));
        }
    });
}

// ---------------------------------------------------------------- broken compressed streams

#[test]
fn garbage_instead_of_the_compressed_ok_fails_the_connection() {
    for layers in [Layers::Snappy, Layers::Deflate, Layers::TlsSnappy] {
        run(move || async move {
            let pki = Pki::new();
            let fake = fake_with(
                &pki,
                Settings {
                    misbehave: Misbehave::GarbageInsteadOfOk,
                    ..Settings::default()
                },
            );
            let err = Producer::connect_with(fake.addr.clone(), producer_config(&pki, layers))
                .await
                .err()
                .expect("garbage");
            assert!(
                matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData),
                "{layers:?}: {err:?}"
            );
            // The blocking producer too (on the fake's second connection, which behaves, so
            // make a fresh fake).
            let fake = fake_with(
                &pki,
                Settings {
                    misbehave: Misbehave::GarbageInsteadOfOk,
                    ..Settings::default()
                },
            );
            let err = client::blocking::Producer::connect_with(
                fake.addr.clone(),
                producer_config(&pki, layers),
            )
            .err()
            .expect("garbage");
            assert!(
                matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData),
                "{layers:?}: {err:?}"
            );
        });
    }
}

#[test]
fn a_corrupt_answer_closes_the_connection_and_the_next_publish_reconnects() {
    for layers in [Layers::Snappy, Layers::Deflate, Layers::TlsDeflate] {
        run(move || async move {
            let pki = Pki::new();
            let fake = fake_with(
                &pki,
                Settings {
                    misbehave: Misbehave::CorruptAnswer,
                    ..Settings::default()
                },
            );
            let p = Producer::connect_with(fake.addr.clone(), producer_config(&pki, layers))
                .await
                .expect("connect");
            let err = p.publish("t", "x").await.expect_err("corrupt answer");
            assert!(err.is_connection_error(), "{layers:?}: {err:?}");
            assert!(eventually(WAIT, || !p.is_connected()).await);
            p.publish("t", "y").await.expect("a new connection");
            assert_eq!(fake.connections(), 2);
        });
    }
}

#[test]
fn a_decompression_bomb_is_cut_at_the_frame_limit() {
    for layers in [Layers::Snappy, Layers::Deflate] {
        run(move || async move {
            let pki = Pki::new();
            let fake = fake_with(
                &pki,
                Settings {
                    misbehave: Misbehave::BombAnswer,
                    ..Settings::default()
                },
            );
            let p = Producer::connect_with(fake.addr.clone(), producer_config(&pki, layers))
                .await
                .expect("connect");
            let err = p.publish("t", "x").await.expect_err("bomb");
            assert!(matches!(err, Error::BadFrame(_)), "{layers:?}: {err:?}");
            p.publish("t", "y").await.expect("a new connection");
        });
        let pki = Pki::new();
        let fake = fake_with(
            &pki,
            Settings {
                misbehave: Misbehave::BombAnswer,
                ..Settings::default()
            },
        );
        let mut b = client::blocking::Producer::connect_with(
            fake.addr.clone(),
            producer_config(&pki, layers),
        )
        .expect("connect");
        let err = b.publish("t", "x").expect_err("bomb");
        assert!(matches!(err, Error::BadFrame(_)), "{layers:?}: {err:?}");
        b.publish("t", "y").expect("a new connection");
    }
}

#[test]
fn tls_settings_that_cannot_work_fail_at_construction() {
    let missing = ProducerConfig::new()
        .tls_v1(true)
        .tls_config(TlsConfig::default().root_ca_file("/nonexistent/ca.pem"));
    let err = client::blocking::Producer::connect_with("127.0.0.1:1", missing.clone())
        .err()
        .expect("no CA file");
    assert!(
        matches!(&err, Error::Tls(t) if t.contains("/nonexistent/ca.pem")),
        "{err:?}"
    );
    let c = Consumer::new(
        ConsumerConfig::new("t", "c")
            .tls_v1(true)
            .tls_config(TlsConfig::default().root_ca_file("/nonexistent/ca.pem")),
        |_m: Message| std::future::ready(HandlerResult::Finish),
    );
    assert!(matches!(c, Err(Error::Tls(_))));
}

#[test]
fn blocking_producer_checks_an_idle_layered_connection_without_blocking() {
    // After half a heartbeat interval of silence the next publish first reads what arrived
    // without blocking (through TLS and the decoder), then publishes on the same connection.
    for layers in [Layers::TlsSnappy, Layers::TlsDeflate, Layers::Deflate] {
        let pki = Pki::new();
        let fake = fake_with(&pki, Settings::default());
        let cfg = producer_config(&pki, layers).heartbeat_interval(Duration::from_secs(1));
        let mut p = client::blocking::Producer::connect_with(fake.addr.clone(), cfg)
            .unwrap_or_else(|e| panic!("{layers:?}: {e}"));
        p.publish("t", "before").expect("PUB");
        std::thread::sleep(Duration::from_millis(600));
        p.publish("t", "after").expect("PUB after the idle check");
        assert_eq!(fake.connections(), 1, "{layers:?}: the same connection");
        assert_eq!(
            published(&fake),
            [Bytes::from("before"), Bytes::from("after")]
        );
    }
}

//! TLS, snappy, deflate and AUTH against the real `broker` (issue 25): the Rust client's side
//! of the "Done when" list. Each test starts its broker on 127.0.0.1 with ephemeral ports and
//! a private data directory (certificates from rcgen in a scratch directory; AUTH against a
//! small HTTP auth server the test runs on a thread), and reads `/stats` for what each
//! consumer negotiated.

mod support;

use client::{
    Consumer, ConsumerConfig, Error, ErrorCode, HandlerResult, Message, Producer, ProducerConfig,
    TlsConfig,
};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use support::real::{auth_server, sleep, tls_flags, BrokerProc, ClientStats};
use support::run;
use test_harness::certs::Pki;

const WAIT: Duration = Duration::from_secs(10);
const NEEDS: &str = "needs the broker side of issue 25 (TLS/compression flags, AUTH)";

#[derive(Clone, Copy, Debug)]
struct Layers {
    tls: bool,
    snappy: bool,
    deflate: bool,
}

const LAYERS: [Layers; 5] = [
    Layers {
        tls: true,
        snappy: false,
        deflate: false,
    },
    Layers {
        tls: false,
        snappy: true,
        deflate: false,
    },
    Layers {
        tls: false,
        snappy: false,
        deflate: true,
    },
    Layers {
        tls: true,
        snappy: true,
        deflate: false,
    },
    Layers {
        tls: true,
        snappy: false,
        deflate: true,
    },
];

fn tls_config(pki: &Pki) -> TlsConfig {
    TlsConfig::default().root_ca_file(&pki.ca_pem)
}

fn start(flags: &[String]) -> BrokerProc {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    BrokerProc::start(&flags)
}

/// The channel's clients as `/stats` reports them, once `n` are listed.
async fn clients(b: &BrokerProc, topic: &str, channel: &str, n: usize) -> Vec<ClientStats> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(c) = b.channel(topic, channel).await {
            if c.clients().len() >= n {
                return c.clients().to_vec();
            }
        }
        assert!(Instant::now() < deadline, "{n} clients never listed");
        sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn each_layer_and_stack_publishes_and_consumes_1000_and_stats_show_them() {
    let _ = NEEDS;
    for l in LAYERS {
        run(move || async move {
            let pki = Pki::new();
            let broker = start(&tls_flags(&pki));
            let topic = "secure";
            let pcfg = ProducerConfig::new()
                .tls_v1(l.tls)
                .tls_config(tls_config(&pki))
                .snappy(l.snappy)
                .deflate(l.deflate);
            let p = Producer::connect_with(broker.tcp.clone(), pcfg)
                .await
                .unwrap_or_else(|e| panic!("{l:?}: {e}\n{}", broker.log()));
            assert_eq!(p.negotiated().tls.is_some(), l.tls, "{l:?}");
            assert_eq!(p.negotiated().compression.is_some(), l.snappy || l.deflate);
            let bodies: Vec<bytes::Bytes> = (0..500).map(|i| format!("m{i}").into()).collect();
            p.multi_publish(topic, bodies).await.expect("MPUB");
            for i in 500..1000 {
                p.publish(topic, format!("m{i}")).await.expect("PUB");
            }
            let got = Rc::new(Cell::new(0usize));
            let g = got.clone();
            let ccfg = ConsumerConfig::new(topic, "ch")
                .max_in_flight(200)
                .tls_v1(l.tls)
                .tls_config(tls_config(&pki))
                .snappy(l.snappy)
                .deflate(l.deflate);
            let c = Consumer::new(ccfg, move |_m: Message| {
                g.set(g.get() + 1);
                std::future::ready(HandlerResult::Finish)
            })
            .expect("consumer");
            c.connect_to_nsqd(broker.tcp.clone()).await.expect("SUB");
            let deadline = Instant::now() + WAIT;
            while got.get() < 1000 {
                assert!(Instant::now() < deadline, "{l:?}: {} of 1000", got.get());
                sleep(Duration::from_millis(10)).await;
            }
            let cs = clients(&broker, topic, "ch", 1).await;
            assert_eq!(
                (cs[0].tls, cs[0].snappy, cs[0].deflate),
                (l.tls, l.snappy, l.deflate),
                "{l:?}: {cs:?}"
            );
            if l.tls {
                assert!(cs[0].tls_version.starts_with("TLS"), "{cs:?}");
            }
            c.stop().await;
            p.stop();
        });
    }
}

#[test]
fn blocking_producer_over_tls_and_deflate() {
    let pki = Pki::new();
    let broker = start(&tls_flags(&pki));
    let cfg = ProducerConfig::new()
        .tls_v1(true)
        .tls_config(tls_config(&pki))
        .deflate(true);
    let mut p = client::blocking::Producer::connect_with(broker.tcp.clone(), cfg)
        .unwrap_or_else(|e| panic!("{e}\n{}", broker.log()));
    for i in 0..1000 {
        p.publish("blocking", format!("m{i}")).expect("PUB");
    }
    let n = p.negotiated().cloned().expect("connected");
    assert!(n.tls.is_some() && n.compression.is_some(), "{n:?}");
}

#[test]
fn require_verify_wants_a_client_certificate() {
    run(|| async {
        let pki = Pki::new();
        let mut flags = tls_flags(&pki);
        flags.extend([
            "--tls-root-ca-file".to_string(),
            pki.ca_pem.display().to_string(),
            "--tls-client-auth-policy".to_string(),
            "require-verify".to_string(),
        ]);
        let broker = start(&flags);
        let without = ProducerConfig::new()
            .tls_v1(true)
            .tls_config(tls_config(&pki));
        let err = match Producer::connect_with(broker.tcp.clone(), without).await {
            // TLS 1.3: the client may finish its side before the broker refuses.
            Ok(p) => p.publish("t", "x").await.expect_err("refused"),
            Err(e) => e,
        };
        assert!(
            matches!(err, Error::Tls(_) | Error::Io(_) | Error::Closed),
            "{err:?}"
        );
        let with = ProducerConfig::new()
            .tls_v1(true)
            .tls_config(tls_config(&pki).client_cert(&pki.client_cert_pem, &pki.client_key_pem));
        let p = Producer::connect_with(broker.tcp.clone(), with)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", broker.log()));
        p.publish("t", "x")
            .await
            .expect("PUB with a client certificate");
    });
}

#[test]
fn tls_required_refuses_a_plaintext_client_and_the_refusal_is_no_fallback() {
    run(|| async {
        let pki = Pki::new();
        let mut flags = tls_flags(&pki);
        flags.push("--tls-required".into());
        let broker = start(&flags);
        let p = Producer::connect(broker.tcp.clone())
            .await
            .expect("IDENTIFY");
        let err = p.publish("t", "x").await.expect_err("TLS required");
        assert_eq!(err.code(), Some(ErrorCode::Invalid), "{err}");
        assert!(err.to_string().contains("TLS required"), "{err}");
        // And a broker without TLS refuses nothing but is refused by a client asking for it.
        let plain = BrokerProc::start(&[]);
        let err = Producer::connect_with(
            plain.tcp.clone(),
            ProducerConfig::new()
                .tls_v1(true)
                .tls_config(tls_config(&pki)),
        )
        .await
        .err()
        .expect("no TLS there");
        assert!(matches!(err, Error::TlsRefused), "{err:?}");
    });
}

#[test]
fn auth_secret_gets_publish_and_subscribe_where_authorized() {
    run(|| async {
        let auth = auth_server(64);
        let broker = start(&["--auth-http-address".to_string(), auth]);
        let p = Producer::connect_with(
            broker.tcp.clone(),
            ProducerConfig::new().auth_secret("s3cret"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", broker.log()));
        let a = p.negotiated().auth.expect("AUTH answered");
        assert_eq!((a.identity.as_str(), a.permission_count), ("alice", 1));
        p.publish("allowed", "yes").await.expect("allowed");
        let err = p.publish("other", "no").await.expect_err("not authorized");
        assert_eq!(err.code(), Some(ErrorCode::Unauthorized), "{err}");

        let err = Producer::connect_with(
            broker.tcp.clone(),
            ProducerConfig::new().auth_secret("wrong"),
        )
        .await
        .err()
        .expect("refused");
        assert_eq!(err.code(), Some(ErrorCode::AuthFailed), "{err}");
        let err = Producer::connect(broker.tcp.clone())
            .await
            .err()
            .expect("no secret");
        assert!(matches!(err, Error::AuthRequired), "{err:?}");

        let got = Rc::new(Cell::new(0usize));
        let g = got.clone();
        let c = Consumer::new(
            ConsumerConfig::new("allowed", "ch").auth_secret("s3cret"),
            move |_m: Message| {
                g.set(g.get() + 1);
                std::future::ready(HandlerResult::Finish)
            },
        )
        .expect("consumer");
        c.connect_to_nsqd(broker.tcp.clone()).await.expect("SUB");
        let cs = clients(&broker, "allowed", "ch", 1).await;
        assert!(cs[0].authed && cs[0].auth_identity == "alice", "{cs:?}");
        let deadline = Instant::now() + WAIT;
        while got.get() < 1 {
            assert!(Instant::now() < deadline, "the allowed message never came");
            sleep(Duration::from_millis(10)).await;
        }
        c.stop().await;
    });
}

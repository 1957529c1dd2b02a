//! Tests against the real `broker` and `lookup` binaries, started by `test_harness` on
//! 127.0.0.1 with ephemeral ports and a private data directory, killed when their guard drops
//! (also when the test panics), plus an async HTTP helper for the brokers' `/stats` and the
//! lookups' HTTP API.
//!
//! Binaries come from `$BROKER_BIN` / `$LOOKUP_BIN`, else `test_harness::binary` builds them
//! (`cargo build --release -p broker`, a no-op when fresh).

use serde::Deserialize;
use std::io::{Read, Write};
use std::time::Duration;
use test_harness::{binary, start_broker, start_lookup, Proc, Started};

/// Longest wait for one HTTP exchange.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(3);

/// A running `broker`; killed on drop.
pub struct BrokerProc {
    proc: Proc,
    /// `127.0.0.1:port` of the TCP (protocol V2) side.
    pub tcp: String,
    /// `127.0.0.1:port` of the HTTP side.
    pub http: String,
}

impl BrokerProc {
    /// Starts a broker with 2 shards and `extra` arguments; returns once both sides listen.
    pub fn start(extra: &[&str]) -> BrokerProc {
        let mut flags = vec!["--shards", "2"];
        flags.extend_from_slice(extra);
        let Started { proc, tcp, http } =
            start_broker(&binary("broker"), "client-real-broker", &flags);
        BrokerProc { proc, tcp, http }
    }

    /// Starts a broker that registers with the lookup at `lookup_tcp` as 127.0.0.1.
    pub fn start_registered(lookup_tcp: &str, extra: &[&str]) -> BrokerProc {
        let mut args = vec![
            "--lookupd-tcp-address",
            lookup_tcp,
            "--broadcast-address",
            "127.0.0.1",
        ];
        args.extend_from_slice(extra);
        BrokerProc::start(&args)
    }

    /// Kills the broker now (SIGKILL, as a crash).
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// The broker's log so far, for failure messages.
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// `GET /stats?format=json`, parsed.
    pub async fn stats(&self) -> Stats {
        let (status, body) = http(&self.http, "GET", "/stats?format=json", b"").await;
        assert_eq!(status, 200, "/stats on {}", self.http);
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "/stats on {} is not the expected JSON ({e}): {}",
                self.http,
                String::from_utf8_lossy(&body)
            )
        })
    }

    /// The stats of `topic`/`channel`, if the channel exists.
    pub async fn channel(&self, topic: &str, channel: &str) -> Option<ChannelStats> {
        self.stats().await.channel(topic, channel).cloned()
    }

    /// `POST /topic/create`.
    pub async fn create_topic(&self, topic: &str) {
        let (status, body) = http(
            &self.http,
            "POST",
            &format!("/topic/create?topic={topic}"),
            b"",
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
}

/// A running `lookup`; killed on drop.
pub struct LookupProc {
    proc: Proc,
    /// `127.0.0.1:port` brokers register on.
    pub tcp: String,
    /// `127.0.0.1:port` of the HTTP API consumers poll.
    pub http: String,
}

impl LookupProc {
    pub fn start() -> LookupProc {
        let Started { proc, tcp, http } = start_lookup(
            &binary("lookup"),
            "client-real-lookup",
            &["--broadcast-address", "127.0.0.1"],
        );
        LookupProc { proc, tcp, http }
    }

    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// The `host:tcp_port` of every broker `/lookup?topic=` lists (none on 404).
    pub async fn brokers_of(&self, topic: &str) -> Vec<String> {
        let (status, body) = http(&self.http, "GET", &format!("/lookup?topic={topic}"), b"").await;
        if status == 404 {
            return Vec::new();
        }
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let v: serde_json::Value = serde_json::from_slice(&body).expect("lookup JSON");
        let v = v.get("data").unwrap_or(&v);
        v["producers"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        format!(
                            "{}:{}",
                            p["broadcast_address"].as_str().unwrap_or(""),
                            p["tcp_port"]
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `POST /topic/tombstone?topic=&node=` for the broker whose HTTP side is `broker_http`:
    /// the lookup stops listing it for `topic`.
    pub async fn tombstone(&self, topic: &str, broker_http: &str) {
        let (status, body) = http(
            &self.http,
            "POST",
            &format!("/topic/tombstone?topic={topic}&node={broker_http}"),
            b"",
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
}

/// One HTTP/1.1 exchange with `Connection: close` (`http1::client`), bounded by
/// [`HTTP_TIMEOUT`]; panics on any failure. Returns the status and the body.
pub async fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let request = http1::client::request_bytes(method, addr, path, &[], body);
    let exchange = async {
        let sock: std::net::SocketAddr = addr.parse().expect("ip:port");
        let mut stream = glommio::net::TcpStream::connect(sock)
            .await
            .map_err(|e| e.to_string())?;
        let limits = http1::Limits::default();
        http1::client::exchange(&mut stream, &request, &limits)
            .await
            .map_err(|e| e.to_string())
    };
    let timeout = async {
        glommio::timer::sleep(HTTP_TIMEOUT).await;
        Err("timed out".to_string())
    };
    let response = futures_lite::future::or(exchange, timeout)
        .await
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"));
    (response.status, response.body.to_vec())
}

/// Sleeps on the glommio executor.
pub async fn sleep(d: Duration) {
    glommio::timer::sleep(d).await
}

/// What `/stats?format=json` reports (the parts the tests read).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Stats {
    #[serde(default)]
    pub topics: Vec<TopicStats>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct TopicStats {
    pub topic_name: String,
    #[serde(default)]
    pub channels: Vec<ChannelStats>,
    #[serde(default)]
    pub depth: i64,
    #[serde(default)]
    pub message_count: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChannelStats {
    pub channel_name: String,
    #[serde(default)]
    pub depth: i64,
    #[serde(default)]
    pub in_flight_count: i64,
    #[serde(default)]
    pub deferred_count: i64,
    #[serde(default)]
    pub message_count: u64,
    #[serde(default)]
    pub requeue_count: u64,
    #[serde(default)]
    pub timeout_count: u64,
    #[serde(default)]
    pub client_count: i64,
    #[serde(default)]
    pub clients: Option<Vec<ClientStats>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClientStats {
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub remote_address: String,
    #[serde(default)]
    pub ready_count: i64,
    #[serde(default)]
    pub in_flight_count: i64,
    #[serde(default)]
    pub message_count: u64,
    #[serde(default)]
    pub finish_count: u64,
    #[serde(default)]
    pub requeue_count: u64,
    #[serde(default)]
    pub connect_ts: i64,
    #[serde(default)]
    pub tls: bool,
    #[serde(default)]
    pub tls_version: String,
    #[serde(default)]
    pub snappy: bool,
    #[serde(default)]
    pub deflate: bool,
    #[serde(default)]
    pub authed: bool,
    #[serde(default)]
    pub auth_identity: String,
}

impl Stats {
    pub fn channel(&self, topic: &str, channel: &str) -> Option<&ChannelStats> {
        self.topics
            .iter()
            .find(|t| t.topic_name == topic)?
            .channels
            .iter()
            .find(|c| c.channel_name == channel)
    }
}

impl ChannelStats {
    pub fn clients(&self) -> &[ClientStats] {
        self.clients.as_deref().unwrap_or(&[])
    }

    /// Sum of `ready_count` over the channel's clients.
    pub fn ready_sum(&self) -> i64 {
        self.clients().iter().map(|c| c.ready_count).sum()
    }

    /// Sum of the clients' `in_flight_count`.
    pub fn client_in_flight_sum(&self) -> i64 {
        self.clients().iter().map(|c| c.in_flight_count).sum()
    }

    pub fn finish_sum(&self) -> u64 {
        self.clients().iter().map(|c| c.finish_count).sum()
    }

    pub fn client_requeue_sum(&self) -> u64 {
        self.clients().iter().map(|c| c.requeue_count).sum()
    }
}

/// An auth server on a thread: `secret=s3cret` may publish and subscribe on topic `allowed`
/// (channels `.*`), any other secret is refused with 403. Answers `count` requests at most.
pub fn auth_server(count: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let Ok(mut s) = stream else { return };
            let mut req = Vec::new();
            let mut chunk = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&chunk[..n]),
                }
            }
            let line = String::from_utf8_lossy(&req);
            let (status, body) = if line.contains("secret=s3cret") {
                (
                    "200 OK",
                    r#"{"ttl":3600,"identity":"alice","identity_url":"https://auth.example/alice","authorizations":[{"permissions":["publish","subscribe"],"topic":"allowed","channels":[".*"]}]}"#,
                )
            } else {
                ("403 Forbidden", r#"{"message":"NOT_AUTHORIZED"}"#)
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// The broker flags of a TLS listener with `pki`'s server certificate.
pub fn tls_flags(pki: &test_harness::certs::Pki) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        pki.server_cert_pem.display().to_string(),
        "--tls-key".into(),
        pki.server_key_pem.display().to_string(),
        // With a certificate the broker also serves HTTPS, by default on 0.0.0.0:4152 (as
        // nsqd): a port of its own for each test's broker.
        "--https-address=127.0.0.1:0".into(),
    ]
}

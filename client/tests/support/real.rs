//! A harness for tests against the real `broker` and `lookup` binaries: processes started on
//! 127.0.0.1 with ephemeral ports and a private data directory, killed when their guard drops
//! (also when the test panics), plus a small async HTTP client for the brokers' `/stats` and
//! the lookups' HTTP API.
//!
//! Binaries come from `$BROKER_BIN` / `$LOOKUP_BIN`, else `target/release/{broker,lookup}` of
//! the workspace. A missing binary fails the test with a message saying how to build it: a
//! test that cannot run must not pass.

use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use serde::Deserialize;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for a process to listen, and for one HTTP exchange.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(3);

fn binary(var: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../target/release")
            .join(name)
    });
    assert!(
        path.is_file(),
        "no {name} binary at {}: build it with `cargo build --release -p {name}` \
         (in the same target dir) or point ${var} at it",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("an ephemeral port")
}

fn unique_dir(prefix: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "client-real-{prefix}-{}-{n}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Waits until `child` accepts TCP connections on every address, or panics (also when it
/// exits first, e.g. because a port was taken).
fn wait_listening(what: &str, child: &mut Child, log: &PathBuf, addrs: &[&str]) {
    let deadline = Instant::now() + START_TIMEOUT;
    for addr in addrs {
        while std::net::TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let out = std::fs::read_to_string(log).unwrap_or_default();
                panic!("{what} exited ({status}) before listening on {addr}:\n{out}");
            }
            assert!(Instant::now() < deadline, "{what} never listened on {addr}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A running `broker`; killed on drop.
pub struct BrokerProc {
    child: Option<Child>,
    /// `127.0.0.1:port` of the TCP (protocol V2) side.
    pub tcp: String,
    /// `127.0.0.1:port` of the HTTP side.
    pub http: String,
    dir: PathBuf,
}

impl BrokerProc {
    /// Starts a broker with 2 shards and `extra` arguments; returns once both sides listen.
    pub fn start(extra: &[&str]) -> BrokerProc {
        let bin = binary("BROKER_BIN", "broker");
        let dir = unique_dir("broker");
        let data = dir.join("data");
        std::fs::create_dir_all(&data).expect("data dir");
        let log = dir.join("broker.log");
        let tcp = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let logfile = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(bin)
            .args(["--tcp-address", &tcp, "--http-address", &http])
            .arg("--data-path")
            .arg(&data)
            .args(["--shards", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(logfile.try_clone().expect("log file"))
            .stderr(logfile)
            .spawn()
            .expect("broker starts");
        wait_listening("broker", &mut child, &log, &[&tcp, &http]);
        BrokerProc {
            child: Some(child),
            tcp,
            http,
            dir,
        }
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
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The broker's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
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

impl Drop for BrokerProc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running `lookup`; killed on drop.
pub struct LookupProc {
    child: Child,
    /// `127.0.0.1:port` brokers register on.
    pub tcp: String,
    /// `127.0.0.1:port` of the HTTP API consumers poll.
    pub http: String,
    dir: PathBuf,
}

impl LookupProc {
    pub fn start() -> LookupProc {
        let bin = binary("LOOKUP_BIN", "lookup");
        let dir = unique_dir("lookup");
        let log = dir.join("lookup.log");
        let tcp = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let logfile = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(bin)
            .args(["--tcp-address", &tcp, "--http-address", &http])
            .args(["--broadcast-address", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(logfile.try_clone().expect("log file"))
            .stderr(logfile)
            .spawn()
            .expect("lookup starts");
        wait_listening("lookup", &mut child, &log, &[&tcp, &http]);
        LookupProc {
            child,
            tcp,
            http,
            dir,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("lookup.log")).unwrap_or_default()
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

impl Drop for LookupProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.1 exchange with `Connection: close`, bounded by [`HTTP_TIMEOUT`]; panics on
/// any failure. Returns the status and the body.
pub async fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let exchange = async {
        let sock: std::net::SocketAddr = addr.parse().expect("ip:port");
        let mut stream = glommio::net::TcpStream::connect(sock).await?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let timeout = async {
        glommio::timer::sleep(HTTP_TIMEOUT).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out",
        ))
    };
    let raw = futures_lite::future::or(exchange, timeout)
        .await
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {path}: no HTTP head in answer"));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: bad status line in {head:?}"));
    let mut payload = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        payload = dechunk(&payload);
    }
    (status, payload)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_text.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + size).min(data.len());
        out.extend_from_slice(&data[start..end]);
        data = &data[(end + 2).min(data.len())..];
    }
    out
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

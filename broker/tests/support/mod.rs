//! Test support: starts the built broker (`test_harness::Proc`) on 127.0.0.1 with ephemeral
//! ports and a fresh data path, and speaks to it with blocking std sockets: a small HTTP/1.1
//! client and a raw V2 client. Every read has a timeout, so no test can hang.

#![allow(dead_code)]

pub mod cluster;

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use test_harness::{start_broker, Proc, Started};

/// Longest wait for anything the broker should do promptly.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The fixtures recorded from real nsqd: tests/fixtures/nsq (a copy of ../shared/fixtures), or
/// $NSQ_FIXTURES.
pub fn fixture(name: &str) -> Value {
    let base = std::env::var("NSQ_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nsq")
        });
    let path = base.join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// A running broker, killed when dropped.
pub struct Broker {
    proc: Proc,
    pub tcp: SocketAddr,
    pub http: SocketAddr,
}

impl Broker {
    pub fn start(shards: usize, extra: &[&str]) -> Broker {
        let shards = format!("--shards={shards}");
        let mut flags = vec![shards.as_str()];
        flags.extend_from_slice(extra);
        let bin = Path::new(env!("CARGO_BIN_EXE_broker"));
        let Started { proc, tcp, http } = start_broker(bin, "broker-http-test", &flags);
        // Other shards bind their SO_REUSEPORT listeners at about the same time.
        std::thread::sleep(Duration::from_millis(150));
        Broker {
            proc,
            tcp: tcp.parse().expect("an address"),
            http: http.parse().expect("an address"),
        }
    }

    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// Its `--data-path` (the harness's `data` in its scratch directory).
    pub fn data_path(&self) -> PathBuf {
        self.proc.dir().join("data")
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.proc.exited()
    }

    /// Stops it the clean way (SIGTERM, as systemd does) and waits, bounded, until it exits.
    pub fn stop(&mut self) {
        if let Some(pid) = self.proc.pid() {
            // SAFETY: sending a signal to a child this harness started and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        let deadline = std::time::Instant::now() + PATIENCE;
        while self.exited().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the broker did not stop on SIGTERM:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Panics (with the broker's stderr) if the broker has exited.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.proc.exited() {
            panic!("broker exited with {status}; stderr:\n{}", self.log());
        }
    }

    pub fn get(&self, target: &str) -> Resp {
        request(self.http, "GET", target, None)
    }

    pub fn post(&self, target: &str, body: &[u8]) -> Resp {
        request(self.http, "POST", target, Some(body))
    }

    /// GET /stats?format=json (plus `extra` query) as JSON.
    pub fn stats(&self, extra: &str) -> Value {
        let r = self.get(&format!("/stats?format=json{extra}"));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    /// The stats of one topic, if the broker has it.
    pub fn topic_stats(&self, topic: &str) -> Option<Value> {
        let s = self.stats("");
        s["topics"]
            .as_array()?
            .iter()
            .find(|t| t["topic_name"] == topic)
            .cloned()
    }

    /// The stats of one channel, if the broker has it.
    pub fn channel_stats(&self, topic: &str, channel: &str) -> Option<Value> {
        let t = self.topic_stats(topic)?;
        t["channels"]
            .as_array()?
            .iter()
            .find(|c| c["channel_name"] == channel)
            .cloned()
    }

    /// Polls `what` until it returns true, at most [`PATIENCE`].
    pub fn eventually(&self, desc: &str, mut what: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if what() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("timed out waiting for {desc}; stderr:\n{}", self.log());
    }
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Resp {
    /// `HTTP/1.1` or `HTTP/1.0`, as the status line says.
    pub version: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        http1::header_in(&self.headers, name)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// One request on a fresh connection (`Connection: close`).
pub fn request(addr: SocketAddr, method: &str, target: &str, body: Option<&[u8]>) -> Resp {
    let mut c = Http::connect(addr);
    c.send(method, target, body, &["Connection: close"]);
    let r = c.read_response();
    assert_eq!(r.header("Connection"), Some("close"), "{method} {target}");
    r
}

/// A keep-alive HTTP/1.1 connection.
pub struct Http {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Http {
    pub fn connect(addr: SocketAddr) -> Http {
        let stream = TcpStream::connect_timeout(&addr, PATIENCE).expect("connect HTTP");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        stream.set_write_timeout(Some(PATIENCE)).expect("timeout");
        Http {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn encode(method: &str, target: &str, body: Option<&[u8]>, headers: &[&str]) -> Vec<u8> {
        let mut req = format!("{method} {target} HTTP/1.1\r\nHost: test\r\n");
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        if let Some(b) = body {
            req.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body.unwrap_or_default());
        bytes
    }

    pub fn send(&mut self, method: &str, target: &str, body: Option<&[u8]>, headers: &[&str]) {
        let bytes = Http::encode(method, target, body, headers);
        self.stream.write_all(&bytes).expect("write request");
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write request");
    }

    pub fn call(&mut self, method: &str, target: &str, body: Option<&[u8]>) -> Resp {
        self.send(method, target, body, &[]);
        self.read_response()
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) => panic!("HTTP read: {e}"),
        }
    }

    /// Reads one response (by Content-Length).
    pub fn read_response(&mut self) -> Resp {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            assert!(self.fill(), "connection closed before a response head");
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("Content-Length"))
            .map_or(0, |(_, v)| v.parse().unwrap_or(0));
        while self.buf.len() < len {
            assert!(self.fill(), "connection closed inside a body");
        }
        let body: Vec<u8> = self.buf.drain(..len).collect();
        Resp {
            version: status_line
                .split(' ')
                .next()
                .unwrap_or_default()
                .to_string(),
            status,
            headers,
            body,
        }
    }

    /// True when the server closes the connection within the timeout.
    pub fn closed_by_server(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
        false
    }
}

/// A message frame's contents.
#[derive(Debug, Clone)]
pub struct Msg {
    pub id: String,
    pub attempts: u16,
    pub timestamp: i64,
    pub body: Vec<u8>,
}

/// A raw NSQ V2 client.
pub struct V2 {
    stream: TcpStream,
    buf: Vec<u8>,
    closed: bool,
}

const FRAME_RESPONSE: u32 = 0;
const FRAME_ERROR: u32 = 1;
const FRAME_MESSAGE: u32 = 2;

impl V2 {
    pub fn connect(addr: SocketAddr) -> V2 {
        let mut stream = TcpStream::connect_timeout(&addr, PATIENCE).expect("connect V2");
        stream.set_write_timeout(Some(PATIENCE)).expect("timeout");
        stream.write_all(b"  V2").expect("magic");
        V2 {
            stream,
            buf: Vec::new(),
            closed: false,
        }
    }

    /// Connects and identifies with heartbeats at the default interval.
    pub fn identified(addr: SocketAddr, client_id: &str, hostname: &str, user_agent: &str) -> V2 {
        let mut c = V2::connect(addr);
        let body = serde_json::json!({
            "client_id": client_id,
            "hostname": hostname,
            "user_agent": user_agent,
            "feature_negotiation": false,
        })
        .to_string();
        c.command_with_body("IDENTIFY", body.as_bytes());
        c.expect_ok("IDENTIFY");
        c
    }

    pub fn command(&mut self, line: &str) {
        self.stream
            .write_all(format!("{line}\n").as_bytes())
            .expect("write command");
    }

    pub fn command_with_body(&mut self, line: &str, body: &[u8]) {
        let mut bytes = format!("{line}\n").into_bytes();
        bytes.extend((body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(body);
        self.stream.write_all(&bytes).expect("write command");
    }

    pub fn subscribe(&mut self, topic: &str, channel: &str, rdy: u32) {
        self.command(&format!("SUB {topic} {channel}"));
        self.expect_ok("SUB");
        self.command(&format!("RDY {rdy}"));
    }

    pub fn publish(&mut self, topic: &str, body: &[u8]) {
        self.command_with_body(&format!("PUB {topic}"), body);
        self.expect_ok("PUB");
    }

    pub fn fin(&mut self, id: &str) {
        self.command(&format!("FIN {id}"));
    }

    fn expect_ok(&mut self, what: &str) {
        match self.frame(PATIENCE) {
            Some((FRAME_RESPONSE, data)) if data == b"OK" => {}
            other => panic!("{what}: expected OK, got {other:?}"),
        }
    }

    /// The next frame other than a heartbeat, within `wait`.
    pub fn frame(&mut self, wait: Duration) -> Option<(u32, Vec<u8>)> {
        let deadline = Instant::now() + wait;
        loop {
            if self.buf.len() >= 8 {
                let size = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                    as usize;
                if self.buf.len() >= 4 + size {
                    let kind =
                        u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
                    let data = self.buf[8..4 + size].to_vec();
                    self.buf.drain(..4 + size);
                    if kind == FRAME_RESPONSE && data == b"_heartbeat_" {
                        self.command("NOP");
                        continue;
                    }
                    return Some((kind, data));
                }
            }
            let now = Instant::now();
            if now >= deadline || self.closed {
                return None;
            }
            let _ = self.stream.set_read_timeout(Some(deadline - now));
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return None;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                Err(_) => {
                    self.closed = true;
                    return None;
                }
            }
        }
    }

    /// The next message within `wait`, if any. Error frames fail the test.
    pub fn message(&mut self, wait: Duration) -> Option<Msg> {
        match self.frame(wait)? {
            (FRAME_MESSAGE, d) => {
                assert!(d.len() >= 26, "short message frame");
                Some(Msg {
                    timestamp: i64::from_be_bytes(d[0..8].try_into().ok()?),
                    attempts: u16::from_be_bytes([d[8], d[9]]),
                    id: String::from_utf8_lossy(&d[10..26]).into_owned(),
                    body: d[26..].to_vec(),
                })
            }
            (FRAME_ERROR, d) => panic!("error frame: {}", String::from_utf8_lossy(&d)),
            (kind, d) => panic!("unexpected frame {kind}: {}", String::from_utf8_lossy(&d)),
        }
    }

    /// True once the broker has closed this connection (within the timeout).
    pub fn closed_by_server(&mut self) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while !self.closed && Instant::now() < deadline {
            let _ = self.frame(Duration::from_millis(100));
        }
        self.closed
    }
}

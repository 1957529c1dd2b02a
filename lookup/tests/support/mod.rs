//! Test support: starts the built `lookup` binary (`test_harness::Proc`) on loopback with
//! ephemeral ports, and talks to it as a broker (raw TCP V1) and as an HTTP client, with std
//! sockets. Every wait is bounded.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use test_harness::{start_lookup, Proc, Started};

/// How long any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// A running lookup, killed on drop.
pub struct Lookupd {
    _proc: Proc,
    pub tcp: SocketAddr,
    pub http: SocketAddr,
}

impl Lookupd {
    /// Starts the lookup with ephemeral ports, broadcast address `lookup-test`, and `extra`
    /// flags.
    pub fn start(extra: &[&str]) -> Lookupd {
        let mut flags = vec!["--broadcast-address=lookup-test"];
        flags.extend_from_slice(extra);
        let bin = Path::new(env!("CARGO_BIN_EXE_lookup"));
        let Started { proc, tcp, http } = start_lookup(bin, "lookup-test", &flags);
        Lookupd {
            _proc: proc,
            tcp: tcp.parse().expect("an address"),
            http: http.parse().expect("an address"),
        }
    }

    /// One HTTP request on a fresh connection.
    pub fn http(&self, method: &str, target: &str) -> HttpResponse {
        http_request(self.http, method, target)
    }

    pub fn get_json(&self, target: &str) -> Value {
        let r = self.http("GET", target);
        assert_eq!(r.status, 200, "GET {target}: {}", r.body);
        r.json()
    }

    /// A peer that has sent the magic and IDENTIFIED as `broadcast:http_port`.
    pub fn peer(&self, broadcast: &str, http_port: u16) -> Peer {
        let mut peer = Peer::connect(self.tcp);
        let reply = peer.identify(&identify_body(broadcast, http_port));
        assert!(reply.starts_with('{'), "IDENTIFY answered {reply}");
        peer
    }
}

pub fn identify_body(broadcast: &str, http_port: u16) -> String {
    serde_json::json!({
        "broadcast_address": broadcast,
        "hostname": "test-host",
        "tcp_port": 4150,
        "http_port": http_port,
        "version": "1.3.0",
    })
    .to_string()
}

/// A raw TCP V1 connection.
pub struct Peer {
    pub stream: TcpStream,
}

impl Peer {
    /// Connects and sends the magic.
    pub fn connect(addr: SocketAddr) -> Peer {
        let mut peer = Peer::connect_raw(addr);
        peer.send(b"  V1");
        peer
    }

    pub fn connect_raw(addr: SocketAddr) -> Peer {
        let stream = TcpStream::connect_timeout(&addr, WAIT).expect("connect tcp");
        stream.set_read_timeout(Some(WAIT)).expect("timeout");
        stream.set_write_timeout(Some(WAIT)).expect("timeout");
        Peer { stream }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Reads one `[u32 size][data]` reply.
    pub fn reply(&mut self) -> String {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("reply size");
        let mut data = vec![0u8; u32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut data).expect("reply data");
        String::from_utf8(data).expect("utf-8 reply")
    }

    /// Sends a command line and reads its reply.
    pub fn command(&mut self, line: &str) -> String {
        self.send(format!("{line}\n").as_bytes());
        self.reply()
    }

    pub fn identify(&mut self, body: &str) -> String {
        let mut bytes = b"IDENTIFY\n".to_vec();
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(body.as_bytes());
        self.send(&bytes);
        self.reply()
    }

    /// True once the lookup has closed the connection (bounded by the read timeout).
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        http1::header_in(&self.headers, name)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends one request with `Connection: close` and reads the whole answer.
pub fn http_request(addr: SocketAddr, method: &str, target: &str) -> HttpResponse {
    let raw = format!("{method} {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    let bytes = http_exchange(addr, raw.as_bytes());
    let mut responses = parse_responses(&bytes);
    assert_eq!(responses.len(), 1, "{method} {target}");
    responses.remove(0)
}

/// Sends raw bytes and reads until the lookup closes the connection.
pub fn http_exchange(addr: SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect_timeout(&addr, WAIT).expect("connect http");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    stream.write_all(raw).expect("write request");
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).expect("read response");
    bytes
}

/// Splits a byte stream into responses (each with a Content-Length).
pub fn parse_responses(mut bytes: &[u8]) -> Vec<HttpResponse> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let end = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("end of headers");
        let head = std::str::from_utf8(&bytes[..end]).expect("utf-8 head");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().expect("status line");
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("Content-Length"))
            .and_then(|(_, v)| v.parse().ok())
            .expect("Content-Length");
        let body = String::from_utf8(bytes[end + 4..end + 4 + len].to_vec()).expect("utf-8 body");
        bytes = &bytes[end + 4 + len..];
        out.push(HttpResponse {
            status,
            headers,
            body,
        });
    }
    out
}

/// Polls `check` every 50 ms until it holds, failing after [`WAIT`].
pub fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The fixture file `name`: the real nsqlookupd responses kept in tests/fixtures/nsq (a copy
/// of ../shared/fixtures), or $NSQ_FIXTURES.
pub fn fixture(name: &str) -> Value {
    let base = std::env::var("NSQ_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nsq")
        });
    let path = base.join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read fixture {}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture JSON")
}

/// Asserts that `actual` has the shape of `expected`: the same keys in every object, the same
/// JSON type at every place, and array elements shaped like the fixture's first element.
pub fn assert_same_shape(actual: &Value, expected: &Value, at: &str) {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            let mut ak: Vec<_> = a.keys().collect();
            let mut ek: Vec<_> = e.keys().collect();
            ak.sort();
            ek.sort();
            assert_eq!(ak, ek, "keys at {at}");
            for (k, ev) in e {
                assert_same_shape(&a[k], ev, &format!("{at}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(e)) => {
            if let (Some(first), Some(efirst)) = (a.first(), e.first()) {
                for (i, v) in a.iter().enumerate() {
                    assert_same_shape(v, efirst, &format!("{at}[{i}]"));
                }
                let _ = first;
            }
        }
        (Value::Number(a), Value::Number(e)) => {
            assert_eq!(a.is_f64(), e.is_f64(), "number kind at {at}");
        }
        (a, e) => assert_eq!(
            std::mem::discriminant(a),
            std::mem::discriminant(e),
            "type at {at}: {a} vs {e}"
        ),
    }
}

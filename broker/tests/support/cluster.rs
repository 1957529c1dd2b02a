//! A replication cluster for tests, with real processes on 127.0.0.1: three lookups hosting the
//! controller (Raft on ports picked here, everything else ephemeral, temp data paths) and
//! brokers with `--replication-address` ([`Member`]); what the controller applied is read from
//! the lookups' `GET /controller`, what the brokers hold from their `/stats`. Every wait is
//! bounded ([`AGREE`]).

use super::Broker;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use test_harness::{binary, free_port, free_ports, scratch_dir, start_lookup, Proc, Started};

/// How long the cluster may take to agree on something.
pub const AGREE: Duration = Duration::from_secs(20);

pub struct Lookups {
    pub procs: Vec<Option<Proc>>,
    pub tcp: Vec<SocketAddr>,
    pub http: Vec<Option<SocketAddr>>,
    pub data: Vec<PathBuf>,
}

impl Lookups {
    pub fn start() -> Lookups {
        let raft: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let peers = raft
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let bin = binary("lookup");
        let mut l = Lookups {
            procs: Vec::new(),
            tcp: Vec::new(),
            http: Vec::new(),
            data: Vec::new(),
        };
        for i in 0..3 {
            let data = scratch_dir("session-lookup-data");
            let flags = [
                "--broadcast-address=lookup-test".to_owned(),
                format!("--controller-id={}", i + 1),
                format!("--controller-peers={peers}"),
                format!("--data-path={}", data.display()),
            ];
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let Started { proc, tcp, http } = start_lookup(&bin, "session-lookup", &flags);
            l.procs.push(Some(proc));
            l.tcp.push(tcp.parse().expect("addr"));
            l.http.push(Some(http.parse().expect("addr")));
            l.data.push(data);
        }
        l
    }

    /// `--lookupd-tcp-address` flags naming all three.
    pub fn flags(&self) -> Vec<String> {
        self.tcp
            .iter()
            .map(|a| format!("--lookupd-tcp-address={a}"))
            .collect()
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            p.kill();
        }
        self.http[i] = None;
    }

    pub fn status(&self, i: usize) -> Option<Value> {
        get_json(self.http[i]?, "/controller")
    }

    /// The agreed leader's controller id (1..=3), once every running node names the same
    /// running one, which calls itself leader.
    pub fn agreed_leader(&self) -> Option<u64> {
        let running: Vec<usize> = (0..3).filter(|&i| self.procs[i].is_some()).collect();
        let statuses: Vec<Value> = running
            .iter()
            .map(|&i| self.status(i))
            .collect::<Option<_>>()?;
        let leader = statuses[0]["leader"].as_u64()?;
        if leader == 0
            || statuses
                .iter()
                .any(|s| s["leader"].as_u64() != Some(leader))
        {
            return None;
        }
        let l = leader as usize - 1;
        (running.contains(&l) && self.status(l)?["role"] == "leader").then_some(leader)
    }

    pub fn wait_leader(&self, what: &str) -> u64 {
        wait(what, || self.agreed_leader(), || self.logs())
    }

    /// The metadata once every running node has applied the same and `check` holds for it.
    pub fn wait_metadata(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        wait(
            what,
            || {
                let mds: Vec<Value> = (0..3)
                    .filter(|&i| self.procs[i].is_some())
                    .map(|i| self.status(i).map(|s| s["metadata"].clone()))
                    .collect::<Option<_>>()?;
                (mds.iter().all(|m| *m == mds[0]) && check(&mds[0])).then(|| mds[0].clone())
            },
            || self.logs(),
        )
    }

    /// Sends `request` to the agreed leader over `CONTROLLER`; its JSON answer.
    pub fn to_leader(&self, request: &Value) -> Value {
        let leader = self.wait_leader("before a request") as usize - 1;
        let mut s = TcpStream::connect_timeout(&self.tcp[leader], Duration::from_secs(2))
            .expect("connect to the leader");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let body = request.to_string();
        let mut bytes = b"  V1CONTROLLER\n".to_vec();
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(body.as_bytes());
        s.write_all(&bytes).expect("write");
        let mut size = [0u8; 4];
        s.read_exact(&mut size).expect("answer size");
        let mut data = vec![0u8; u32::from_be_bytes(size) as usize];
        s.read_exact(&mut data).expect("answer");
        serde_json::from_slice(&data).expect("JSON answer")
    }

    pub fn logs(&self) -> String {
        (0..3)
            .map(|i| {
                let log = self.procs[i].as_ref().map(Proc::log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(10).collect();
                format!(
                    "lookup {}: {:?}\n{}\n",
                    i + 1,
                    self.status(i).map(|s| s["metadata"].clone()),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect()
    }
}

impl Drop for Lookups {
    fn drop(&mut self) {
        // A start that failed part way holds fewer than three.
        for i in 0..self.procs.len() {
            self.kill(i);
        }
        for d in &self.data {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Polls `probe` every 50 ms until it gives something, at most [`AGREE`].
pub fn wait<T>(what: &str, mut probe: impl FnMut() -> Option<T>, logs: impl Fn() -> String) -> T {
    let deadline = Instant::now() + AGREE;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}\n{}", logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// GET `target` as JSON; None if unreachable or not a 200.
pub fn get_json(addr: SocketAddr, target: &str) -> Option<Value> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let raw = format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(raw.as_bytes()).ok()?;
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    serde_json::from_str(body).ok()
}

/// A broker with `--replication-address` on its own data path, which outlives restarts.
pub struct Member {
    pub broker: Option<Broker>,
    pub shards: usize,
    pub data: PathBuf,
    pub address: String,
    /// Flags beyond the lookups, the data path and the replication address.
    pub extra: Vec<String>,
}

impl Member {
    pub fn start(lookups: &Lookups, shards: usize) -> Member {
        Member::start_with(lookups, shards, &[])
    }

    /// A member started with `extra` flags too (kept for its restarts).
    pub fn start_with(lookups: &Lookups, shards: usize, extra: &[&str]) -> Member {
        let mut m = Member {
            broker: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            shards,
            data: scratch_dir("session-broker-data"),
            address: format!("127.0.0.1:{}", free_ports(shards)),
        };
        m.restart(lookups);
        m
    }

    /// SIGKILL (if running), then start again on the same data path and address.
    pub fn restart(&mut self, lookups: &Lookups) {
        self.broker = None;
        let mut flags = lookups.flags();
        flags.push(format!("--data-path={}", self.data.display()));
        flags.push(format!("--replication-address={}", self.address));
        flags.extend(self.extra.iter().cloned());
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        self.broker = Some(Broker::start(self.shards, &flags));
    }

    pub fn wipe(&mut self) {
        self.broker = None;
        let _ = std::fs::remove_dir_all(&self.data);
        std::fs::create_dir_all(&self.data).expect("an empty data path");
    }

    pub fn broker(&self) -> &Broker {
        self.broker.as_ref().expect("running")
    }

    pub fn cluster(&self) -> Value {
        self.broker().stats("")["cluster"].clone()
    }

    pub fn id(&self) -> u64 {
        self.cluster()["broker_id"].as_u64().expect("a broker id")
    }

    /// Waits until its /stats shows a session current with leader `leader`.
    pub fn wait_following(&self, leader: u64, lookups: &Lookups) -> Value {
        wait(
            &format!("broker {} follows controller {leader}", self.address),
            || {
                let c = self.cluster();
                (c["controller_leader"] == leader
                    && c["live"] == true
                    && c["view_version"].is_u64())
                .then_some(c)
            },
            || format!("{}\n{}", self.broker().log(), lookups.logs()),
        )
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.broker = None;
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// `host:port` with the port moved up by `i`.
pub fn plus(address: &str, i: u16) -> String {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    format!("{host}:{}", port.parse::<u16>().expect("port") + i)
}

//! The replication controller hosted in the lookup, through the wire with real processes:
//! three lookups with `--controller-id` on 127.0.0.1 (Raft on ports picked here, everything
//! else ephemeral) and temp data paths; a fake broker speaking `CONTROLLER` on the V1 TCP port;
//! `GET /controller` to see what each node has applied. Every wait is bounded.

mod support;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Lookupd, Peer};
use test_harness::{free_port, scratch_dir, start_lookup, Proc, Started};

/// How long a cluster may take to agree on something.
const AGREE: Duration = Duration::from_secs(20);

struct Node {
    proc: Option<Proc>,
    tcp: Option<SocketAddr>,
    http: Option<SocketAddr>,
    data: PathBuf,
}

/// Three controller lookups; their data paths are removed on drop.
struct Cluster {
    nodes: Vec<Node>,
    peers: String,
    raft: Vec<SocketAddr>,
    /// Every node's TCP address as last started, for the fake broker.
    tcp: Arc<Mutex<Vec<Option<SocketAddr>>>>,
    /// Flags every node starts with besides the controller's own.
    extra: Vec<String>,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Cluster {
        let raft: Vec<SocketAddr> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()).parse().expect("addr"))
            .collect();
        let peers = raft
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = (0..3)
            .map(|_| Node {
                proc: None,
                tcp: None,
                http: None,
                data: scratch_dir("controller-data"),
            })
            .collect();
        let mut c = Cluster {
            nodes,
            peers,
            raft,
            tcp: Arc::new(Mutex::new(vec![None; 3])),
            extra: extra.iter().map(|f| (*f).to_owned()).collect(),
        };
        for i in 0..3 {
            c.restart(i);
        }
        c
    }

    /// Starts node `i` (index 0..3, controller id i+1) on its data path.
    fn restart(&mut self, i: usize) {
        let bin = Path::new(env!("CARGO_BIN_EXE_lookup"));
        let mut flags = vec![
            "--broadcast-address=lookup-test".to_owned(),
            format!("--controller-id={}", i + 1),
            format!("--controller-peers={}", self.peers),
            format!("--data-path={}", self.nodes[i].data.display()),
        ];
        flags.extend(self.extra.iter().cloned());
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let Started { proc, tcp, http } = start_lookup(bin, "controller-lookup", &flags);
        let n = &mut self.nodes[i];
        n.proc = Some(proc);
        n.tcp = Some(tcp.parse().expect("addr"));
        n.http = Some(http.parse().expect("addr"));
        self.tcp.lock().expect("lock")[i] = n.tcp;
    }

    /// SIGKILL node `i`.
    fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].proc.take() {
            p.kill();
        }
        self.nodes[i].tcp = None;
        self.nodes[i].http = None;
        self.tcp.lock().expect("lock")[i] = None;
    }

    fn status(&self, i: usize) -> Option<Value> {
        get_json(self.nodes[i].http?, "/controller")
    }

    /// The leader's index once every running node names the same leader, a running one,
    /// which calls itself leader.
    fn agreed_leader(&self) -> Option<usize> {
        let running: Vec<usize> = (0..3).filter(|&i| self.nodes[i].proc.is_some()).collect();
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
        if !running.contains(&l) {
            return None;
        }
        (self.status(l)?["role"] == "leader").then_some(l)
    }

    fn wait_leader(&self, what: &str) -> usize {
        let deadline = Instant::now() + AGREE;
        loop {
            if let Some(l) = self.agreed_leader() {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader: {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every running node has applied the same metadata and `check` holds for it.
    fn wait_metadata(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + AGREE;
        loop {
            let mds: Option<Vec<Value>> = (0..3)
                .filter(|&i| self.nodes[i].proc.is_some())
                .map(|i| self.status(i).map(|s| s["metadata"].clone()))
                .collect();
            if let Some(mds) = mds {
                if mds.iter().all(|m| *m == mds[0]) && check(&mds[0]) {
                    return mds[0].clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "the nodes never agreed on metadata where {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let status = n.http.and_then(|h| get_json(h, "/controller"));
                let log = n.proc.as_ref().map(Proc::log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                format!(
                    "node {}: {status:?}\n{}\n",
                    i + 1,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut p) = n.proc.take() {
                p.kill();
            }
            let _ = std::fs::remove_dir_all(&n.data);
        }
    }
}

/// GET `target` as JSON; None if the lookup cannot be reached or answers otherwise.
fn get_json(addr: SocketAddr, target: &str) -> Option<Value> {
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

/// Sends one `CONTROLLER` request on `peer` and reads the reply's text.
fn controller(peer: &mut Peer, request: &Value) -> String {
    let body = request.to_string();
    let mut bytes = b"CONTROLLER\n".to_vec();
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(body.as_bytes());
    peer.send(&bytes);
    peer.reply()
}

fn heartbeat(broker: u64) -> Value {
    json!({"Heartbeat": {
        "broker": broker,
        "incarnation": 1,
        "addresses": [format!("127.0.0.1:{}", 4150 + broker)],
        "known": null,
    }})
}

/// One request to whichever node leads (asked in turn; a NotLeader answer names the leader).
fn to_leader(tcp: &Arc<Mutex<Vec<Option<SocketAddr>>>>, request: &Value) -> Option<Value> {
    let addrs = tcp.lock().ok()?.clone();
    for addr in addrs.into_iter().flatten() {
        let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            continue;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut peer = Peer { stream };
        peer.send(b"  V1");
        let body = request.to_string();
        let mut bytes = b"CONTROLLER\n".to_vec();
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(body.as_bytes());
        if peer.stream.write_all(&bytes).is_err() {
            continue;
        }
        let mut size = [0u8; 4];
        if peer.stream.read_exact(&mut size).is_err() {
            continue;
        }
        let mut data = vec![0u8; u32::from_be_bytes(size) as usize];
        if peer.stream.read_exact(&mut data).is_err() {
            continue;
        }
        let Ok(answer) = serde_json::from_slice::<Value>(&data) else {
            continue;
        };
        if answer["reply"].get("NotLeader").is_none() {
            return Some(answer);
        }
    }
    None
}

/// A fake broker heartbeating every 300 ms to the controller leader, until dropped.
struct FakeBroker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeBroker {
    fn start(tcp: Arc<Mutex<Vec<Option<SocketAddr>>>>, broker: u64) -> FakeBroker {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let _ = to_leader(&tcp, &heartbeat(broker));
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        FakeBroker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn three_lookups_elect_register_place_fail_over_and_recover_from_disk() {
    let mut c = Cluster::start();
    let leader = c.wait_leader("at start");

    // The leader answers a broker's heartbeat with its view; a follower names the leader.
    let leader_tcp = c.nodes[leader].tcp.expect("running");
    let mut peer = Peer::connect(leader_tcp);
    let reply: Value = serde_json::from_str(&controller(&mut peer, &heartbeat(1))).expect("JSON");
    assert_eq!(reply["controller"], leader as u64 + 1, "{reply}");
    assert!(reply["reply"]["Heartbeat"]["update"].is_object(), "{reply}");
    let follower = (leader + 1) % 3;
    let mut other = Peer::connect(c.nodes[follower].tcp.expect("running"));
    let reply: Value = serde_json::from_str(&controller(&mut other, &heartbeat(1))).expect("JSON");
    assert_eq!(reply["controller"], follower as u64 + 1, "{reply}");
    assert_eq!(
        reply["reply"]["NotLeader"]["leader"],
        leader as u64 + 1,
        "{reply}"
    );

    // The broker is registered on every node, and stays live while it heartbeats.
    let broker = FakeBroker::start(c.tcp.clone(), 1);
    c.wait_metadata("broker 1 is registered", |md| {
        md["brokers"]["1"]["fenced"] == false
    });

    // CreateTopic with one replica places it on the only broker.
    let create = json!({"CreateTopic": {"name": "orders", "replicas": 1, "min_insync": 1}});
    let answer = to_leader(&c.tcp, &create).expect("a leader answers");
    assert_eq!(answer["reply"], "Proposed", "{answer}");
    let placed = c.wait_metadata("orders is placed on broker 1", |md| {
        let t = &md["topics"]["orders"];
        t["leader"] == 1 && t["replicas"] == json!([1]) && t["isr"] == json!([1])
    });

    // SIGKILL the leader: the two others elect one of them within a few seconds, and the
    // metadata is still there.
    c.kill(leader);
    let killed_at = Instant::now();
    let new_leader = c.wait_leader("after the leader was killed");
    let took = killed_at.elapsed();
    assert_ne!(new_leader, leader);
    eprintln!("a new controller leader was agreed {took:?} after the SIGKILL");
    assert!(took < Duration::from_secs(5), "re-election took {took:?}");
    let after = c.wait_metadata("the metadata survived the leader", |md| {
        md["topics"]["orders"]["replicas"] == json!([1]) && md["brokers"]["1"]["fenced"] == false
    });
    assert_eq!(after, placed);

    // The killed node comes back from its data path and catches up.
    c.restart(leader);
    let caught_up = c.wait_metadata("the restarted node caught up", |md| *md == placed);
    assert_eq!(caught_up, placed);

    // All three restart at once: the metadata comes back from their disks.
    for i in 0..3 {
        c.kill(i);
    }
    for i in 0..3 {
        c.restart(i);
    }
    c.wait_leader("after all restarted");
    let recovered = c.wait_metadata("the metadata survived a full restart", |md| *md == placed);
    assert_eq!(recovered, placed);
    drop(broker);
}

#[test]
fn garbage_on_the_raft_port_closes_that_connection_only() {
    let c = Cluster::start();
    let leader = c.wait_leader("at start");
    let target = c.raft[(leader + 1) % 3];
    let frames: [&[u8]; 4] = [
        // Oversized: refused from its length alone.
        &[0xff, 0xff, 0xff, 0xff, 1, 2, 3],
        // Not a Raft message.
        &[0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff],
        // A valid empty message: from 0 to 0, not addressed to this node.
        &[0, 0, 0, 0],
        b"GET / HTTP/1.1\r\n\r\n",
    ];
    for frame in frames {
        let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(2)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(frame).expect("write");
        let mut byte = [0u8; 1];
        let closed = match s.read(&mut byte) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        };
        assert!(closed, "{frame:?} did not close the connection");
    }
    // The cluster still works: every node answers, with one leader.
    for i in 0..3 {
        assert!(
            c.status(i).is_some(),
            "node {} is down\n{}",
            i + 1,
            c.logs()
        );
    }
    c.wait_leader("after the garbage");
}

#[test]
fn a_lookup_without_the_controller_answers_controller_with_an_error_and_goes_on() {
    let lookup = Lookupd::start(&[]);
    let mut peer = Peer::connect(lookup.tcp);
    let reply = controller(&mut peer, &heartbeat(1));
    assert!(
        reply.starts_with("E_INVALID CONTROLLER this lookup runs no replication controller"),
        "{reply}"
    );
    // Not fatal: the connection goes on as nsqlookupd's.
    assert_eq!(peer.command("PING"), "OK");
    let r = lookup.http("GET", "/controller");
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("NO_CONTROLLER"), "{}", r.body);
}

#[test]
fn a_controller_refuses_a_body_that_is_not_a_request_and_closes() {
    let c = Cluster::start();
    let mut peer = Peer::connect(c.nodes[0].tcp.expect("running"));
    let reply = controller(&mut peer, &json!({"Nope": 1}));
    assert!(
        reply.starts_with("E_BAD_BODY CONTROLLER failed to decode JSON body"),
        "{reply}"
    );
    assert!(peer.is_closed());
}

#[test]
fn a_data_path_of_another_controller_refuses_the_start() {
    let data = scratch_dir("controller-data");
    let raft = free_port();
    let run = |id: u64| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lookup"))
            .args([
                "--tcp-address=127.0.0.1:0".to_owned(),
                "--http-address=127.0.0.1:0".to_owned(),
                format!("--controller-id={id}"),
                format!("--controller-peers={id}=127.0.0.1:{raft}"),
                format!("--data-path={}", data.display()),
            ])
            .output()
            .expect("run lookup")
    };
    // Node 1 (a cluster of one) creates its log, and is killed.
    let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_lookup"))
        .args([
            "--tcp-address=127.0.0.1:0".to_owned(),
            "--http-address=127.0.0.1:0".to_owned(),
            "--controller-id=1".to_owned(),
            format!("--controller-peers=1=127.0.0.1:{raft}"),
            format!("--data-path={}", data.display()),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start lookup");
    let log = data.join("controller-raft.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log.exists() {
        assert!(Instant::now() < deadline, "no Raft log written");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = first.kill();
    let _ = first.wait();
    let out = run(2);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("belongs to controller 1"), "{stderr}");
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_torn_tail_is_cut_at_start_and_damage_before_intact_records_refuses_it() {
    let data = scratch_dir("controller-data");
    let raft = free_port();
    let flags = [
        "--controller-id=1".to_owned(),
        format!("--controller-peers=1=127.0.0.1:{raft}"),
        format!("--data-path={}", data.display()),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let bin = Path::new(env!("CARGO_BIN_EXE_lookup"));
    let start = || {
        let s = start_lookup(bin, "controller-lookup", &flags);
        let tcp: SocketAddr = s.tcp.parse().expect("addr");
        let http: SocketAddr = s.http.parse().expect("addr");
        (s.proc, tcp, http)
    };
    let registered = |http: SocketAddr| {
        get_json(http, "/controller").is_some_and(|s| s["metadata"]["brokers"]["1"].is_object())
    };
    // A cluster of one registers a broker.
    let (mut proc, tcp, http) = start();
    let tcp_list = Arc::new(Mutex::new(vec![Some(tcp)]));
    support::wait_until("broker 1 registered", || {
        let _ = to_leader(&tcp_list, &heartbeat(1));
        registered(http)
    });
    proc.kill();

    // A crash in the middle of a write: half a record at the end.
    let log = data.join("controller-raft.log");
    let mut bytes = std::fs::read(&log).expect("the Raft log");
    let intact = bytes.len();
    bytes.extend_from_slice(&[0, 0, 0, 40, 1, 2, 3, 4, 2, b'x', b'y']);
    std::fs::write(&log, &bytes).expect("write");
    let (mut proc, _, http) = start();
    support::wait_until("broker 1 back from the log", || registered(http));
    assert!(proc.log().contains("cutting a torn tail"), "{}", proc.log());
    proc.kill();
    assert!(std::fs::metadata(&log).expect("the log").len() >= intact as u64);

    // A flipped bit in the first batch, with intact records after it: refused, named.
    let mut bytes = std::fs::read(&log).expect("the Raft log");
    let identity = 9 + u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    bytes[identity + 12] ^= 0x04;
    std::fs::write(&log, &bytes).expect("write");
    let out = std::process::Command::new(bin)
        .args(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"])
        .args(&flags)
        .output()
        .expect("run lookup");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("is damaged at offset {identity}")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&data);
}

/// Snapshot settings small enough for a test to cross many snapshots.
const SNAPSHOT_FLAGS: [&str; 2] = [
    "--controller-snapshot-every=20",
    "--controller-snapshot-margin=5",
];

/// Creates `names` one by one through whichever node leads, each answered `Proposed`.
fn create_topics(c: &Cluster, names: impl Iterator<Item = String>) {
    for name in names {
        let create = json!({"CreateTopic": {"name": name, "replicas": 1, "min_insync": 1}});
        let deadline = Instant::now() + AGREE;
        loop {
            if let Some(a) = to_leader(&c.tcp, &create) {
                if a["reply"] == "Proposed" {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{name} never proposed\n{}",
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn topic_count(md: &Value) -> usize {
    md["topics"].as_object().map_or(0, serde_json::Map::len)
}

#[test]
fn snapshots_bound_the_log_catch_up_a_stopped_lookup_and_restart_all_three() {
    let mut c = Cluster::start_with(&SNAPSHOT_FLAGS);
    let leader = c.wait_leader("at start");
    let broker = FakeBroker::start(c.tcp.clone(), 1);
    c.wait_metadata("broker 1 is registered", |md| {
        md["brokers"]["1"]["fenced"] == false
    });

    // One follower is stopped while the others commit far more than the margin.
    let stopped = (leader + 1) % 3;
    c.kill(stopped);
    const TOPICS: usize = 200;
    create_topics(&c, (0..TOPICS).map(|i| format!("t{i}")));
    let placed = c.wait_metadata("every topic is placed", |md| topic_count(md) == TOPICS);

    // The running nodes took snapshots, and their logs hold a bounded number of entries: at most
    // the margin, the entries between two snapshots, and those not yet applied.
    let log_bytes = |i: usize| {
        std::fs::metadata(c.nodes[i].data.join("controller-raft.log"))
            .expect("the Raft log")
            .len()
    };
    for i in (0..3).filter(|&i| i != stopped) {
        let s = c.status(i).expect("running");
        assert!(s["snapshots"]["taken"].as_u64() >= Some(5), "{s}");
        let held = s["log_entries"].as_u64().expect("log_entries");
        assert!(held <= 5 + 20 + 5, "node {} holds {held} entries", i + 1);
        assert!(c.nodes[i].data.join("controller-snapshot").exists());
    }
    // Uncompacted, the running nodes' logs would hold every topic's entry and each commit
    // record (tens of KiB); compacted, a few dozen entries.
    let running = (0..3).find(|&i| i != stopped).expect("a running node");
    let small = log_bytes(stopped);
    let big = log_bytes(running);
    eprintln!("the stopped node's log: {small} bytes; a running node's: {big} bytes");
    assert!(big < 16 * 1024, "a compacted log of {big} bytes");

    // Restarted, the stopped node is too far behind for the log: a snapshot brings it back.
    c.restart(stopped);
    let caught_up = c.wait_metadata("the stopped node caught up", |md| *md == placed);
    assert_eq!(caught_up, placed);
    let s = c.status(stopped).expect("running");
    assert!(s["snapshots"]["installed"].as_u64() >= Some(1), "{s}");
    assert!(
        c.nodes[stopped].data.join("controller-snapshot").exists(),
        "the installed snapshot is stored"
    );

    // Everyone goes on: more entries after the install, then all three restart from snapshot
    // and log, with the same metadata.
    create_topics(&c, (TOPICS..TOPICS + 30).map(|i| format!("t{i}")));
    let placed = c.wait_metadata("every topic is placed", |md| topic_count(md) == TOPICS + 30);
    drop(broker);
    for i in 0..3 {
        c.kill(i);
    }
    for i in 0..3 {
        c.restart(i);
    }
    c.wait_leader("after all restarted");
    let recovered = c.wait_metadata("the metadata survived a full restart", |md| {
        topic_count(md) == TOPICS + 30
    });
    assert_eq!(recovered["topics"], placed["topics"]);
    for i in 0..3 {
        let s = c.status(i).expect("running");
        assert_eq!(
            s["snapshots"]["restarted_from_snapshot"],
            true,
            "node {}: {s}",
            i + 1
        );
    }
}

#[test]
fn a_damaged_snapshot_file_refuses_the_start_with_a_safe_remedy() {
    let data = scratch_dir("controller-data");
    let raft = free_port();
    let flags = [
        "--controller-id=1".to_owned(),
        format!("--controller-peers=1=127.0.0.1:{raft}"),
        format!("--data-path={}", data.display()),
        SNAPSHOT_FLAGS[0].to_owned(),
        SNAPSHOT_FLAGS[1].to_owned(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let bin = Path::new(env!("CARGO_BIN_EXE_lookup"));
    let Started { mut proc, tcp, .. } = start_lookup(bin, "controller-lookup", &flags);
    let tcp_list = Arc::new(Mutex::new(vec![Some(tcp.parse().expect("addr"))]));
    let snapshot = data.join("controller-snapshot");
    let mut n = 0;
    support::wait_until("a snapshot is stored", || {
        let _ = to_leader(&tcp_list, &heartbeat(1));
        let create =
            json!({"CreateTopic": {"name": format!("t{n}"), "replicas": 1, "min_insync": 1}});
        if to_leader(&tcp_list, &create).is_some() {
            n += 1;
        }
        snapshot.exists()
    });
    proc.kill();

    let mut bytes = std::fs::read(&snapshot).expect("the snapshot");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&snapshot, &bytes).expect("write");
    let out = std::process::Command::new(bin)
        .args(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"])
        .args(&flags)
        .output()
        .expect("run lookup");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("controller-snapshot is damaged"),
        "{stderr}"
    );
    assert!(stderr.contains("restore it from a backup"), "{stderr}");
    assert!(!stderr.contains("empty node"), "{stderr}");
    let _ = std::fs::remove_dir_all(&data);
}

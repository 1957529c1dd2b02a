//! The broker's session with the replication controller, with real processes on 127.0.0.1:
//! three lookups hosting the controller (Raft on ports picked here, everything else ephemeral,
//! temp data paths) and brokers with `--replication-address`; what the controller applied is
//! read from the lookups' `GET /controller`, what the brokers hold from their `/stats`. Every
//! wait is bounded.

mod support;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::Broker;
use test_harness::{binary, free_port, scratch_dir, start_and_stop, start_lookup, Proc, Started};

/// How long the cluster may take to agree on something.
const AGREE: Duration = Duration::from_secs(20);

struct Lookups {
    procs: Vec<Option<Proc>>,
    tcp: Vec<SocketAddr>,
    http: Vec<Option<SocketAddr>>,
    data: Vec<PathBuf>,
}

impl Lookups {
    fn start() -> Lookups {
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
    fn flags(&self) -> Vec<String> {
        self.tcp
            .iter()
            .map(|a| format!("--lookupd-tcp-address={a}"))
            .collect()
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            p.kill();
        }
        self.http[i] = None;
    }

    fn status(&self, i: usize) -> Option<Value> {
        get_json(self.http[i]?, "/controller")
    }

    /// The agreed leader's controller id (1..=3), once every running node names the same
    /// running one, which calls itself leader.
    fn agreed_leader(&self) -> Option<u64> {
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

    fn wait_leader(&self, what: &str) -> u64 {
        wait(what, || self.agreed_leader(), || self.logs())
    }

    /// The metadata once every running node has applied the same and `check` holds for it.
    fn wait_metadata(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
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
    fn to_leader(&self, request: &Value) -> Value {
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

    fn logs(&self) -> String {
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
        for i in 0..3 {
            self.kill(i);
            let _ = std::fs::remove_dir_all(&self.data[i]);
        }
    }
}

/// Polls `probe` every 50 ms until it gives something, at most [`AGREE`].
fn wait<T>(what: &str, mut probe: impl FnMut() -> Option<T>, logs: impl Fn() -> String) -> T {
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

/// A broker with `--replication-address` on its own data path, which outlives restarts.
struct Member {
    broker: Option<Broker>,
    shards: usize,
    data: PathBuf,
    address: String,
}

impl Member {
    fn start(lookups: &Lookups, shards: usize) -> Member {
        let mut m = Member {
            broker: None,
            shards,
            data: scratch_dir("session-broker-data"),
            address: format!("127.0.0.1:{}", free_ports(shards)),
        };
        m.restart(lookups);
        m
    }

    /// SIGKILL (if running), then start again on the same data path and address.
    fn restart(&mut self, lookups: &Lookups) {
        self.broker = None;
        let mut flags = lookups.flags();
        flags.push(format!("--data-path={}", self.data.display()));
        flags.push(format!("--replication-address={}", self.address));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        self.broker = Some(Broker::start(self.shards, &flags));
    }

    fn wipe(&mut self) {
        self.broker = None;
        let _ = std::fs::remove_dir_all(&self.data);
        std::fs::create_dir_all(&self.data).expect("an empty data path");
    }

    fn broker(&self) -> &Broker {
        self.broker.as_ref().expect("running")
    }

    fn cluster(&self) -> Value {
        self.broker().stats("")["cluster"].clone()
    }

    fn id(&self) -> u64 {
        self.cluster()["broker_id"].as_u64().expect("a broker id")
    }

    /// Waits until its /stats shows a session current with leader `leader`.
    fn wait_following(&self, leader: u64, lookups: &Lookups) -> Value {
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

/// A port `p` with `p + 1 .. p + n - 1` free too (shard i listens on the replication port + i).
fn free_ports(n: usize) -> u16 {
    for _ in 0..200 {
        let p = free_port();
        let free = (1..n as u32).all(|i| {
            u16::try_from(u32::from(p) + i)
                .is_ok_and(|q| std::net::TcpListener::bind(("127.0.0.1", q)).is_ok())
        });
        if free {
            return p;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// `host:port` with the port moved up by `i`.
fn plus(address: &str, i: u16) -> String {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    format!("{host}:{}", port.parse::<u16>().expect("port") + i)
}

/// The broker registered at `address` (its first, shard 0's) in the metadata:
/// (id, incarnation, fenced).
fn registered_at(md: &Value, address: &str) -> Vec<(u64, u64, bool)> {
    md["brokers"]
        .as_object()
        .map(|brokers| {
            brokers
                .iter()
                .filter(|(_, b)| b["addresses"][0] == address)
                .map(|(id, b)| {
                    (
                        id.parse().expect("a numeric id"),
                        b["incarnation"].as_u64().expect("incarnation"),
                        b["fenced"] == true,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn live_at(md: &Value, address: &str, id: u64, incarnation: u64) -> bool {
    registered_at(md, address).contains(&(id, incarnation, false))
}

#[test]
fn brokers_register_restart_follow_the_leader_and_come_back_wiped_as_new() {
    let mut lookups = Lookups::start();
    let leader = lookups.wait_leader("at start");
    let mut a = Member::start(&lookups, 2);
    let mut b = Member::start(&lookups, 4);
    // A broker without the flag, registered with the same lookups: it sends nothing.
    let flags = lookups.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let plain = Broker::start(1, &flags);

    // Both members register, live, each under the id its /stats shows, in its first incarnation.
    let (ida, idb) = (a.id(), b.id());
    assert_ne!(ida, idb);
    let md = lookups.wait_metadata("both brokers are registered and live", |md| {
        live_at(md, &a.address, ida, 1) && live_at(md, &b.address, idb, 1)
    });
    assert_eq!(md["brokers"].as_object().map(|m| m.len()), Some(2), "{md}");
    for m in [&a, &b] {
        let c = m.wait_following(leader, &lookups);
        assert_eq!(c["incarnation"], 1, "{c}");
        assert_eq!(c["address"], m.address.as_str(), "{c}");
    }
    assert!(
        plain.stats("").get("cluster").is_none(),
        "a broker without --replication-address shows no cluster"
    );

    // A topic placed on both: each broker's owner shard receives its state.
    let answer = lookups
        .to_leader(&json!({"CreateTopic": {"name": "orders", "replicas": 2, "min_insync": 1}}));
    assert_eq!(answer["reply"], "Proposed", "{answer}");
    for m in [&a, &b] {
        let t = wait(
            "the topic's state reaches its owner shard",
            || {
                let t = m.cluster()["topics"]["orders"].clone();
                t["leader"].is_u64().then_some(t)
            },
            || m.broker().log(),
        );
        let mut replicas: Vec<u64> = t["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        replicas.sort_unstable();
        let mut want = vec![ida, idb];
        want.sort_unstable();
        assert_eq!(replicas, want, "{t}");
    }

    // A restarted broker: the same id, the next incarnation.
    a.restart(&lookups);
    assert_eq!(a.id(), ida);
    assert_eq!(a.cluster()["incarnation"], 2);
    lookups.wait_metadata("the restarted broker comes back in incarnation 2", |md| {
        live_at(md, &a.address, ida, 2) && live_at(md, &b.address, idb, 1)
    });

    // The controller leader killed: both follow the new one and stay live.
    lookups.kill(leader as usize - 1);
    let new_leader = lookups.wait_leader("after the leader was killed");
    assert_ne!(new_leader, leader);
    a.wait_following(new_leader, &lookups);
    b.wait_following(new_leader, &lookups);
    // Past the session timeout (3 s) after the failover: nobody fenced, nobody re-registered.
    let settled = Instant::now();
    while settled.elapsed() < Duration::from_secs(4) {
        let md = lookups.wait_metadata("the metadata is agreed", |_| true);
        assert!(
            live_at(&md, &a.address, ida, 2) && live_at(&md, &b.address, idb, 1),
            "a session was fenced after the failover: {md}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // B's data path wiped: it comes back as a new broker at the same address, the old id
    // retired.
    b.wipe();
    b.restart(&lookups);
    let idb2 = b.id();
    assert_ne!(idb2, idb);
    assert_eq!(b.cluster()["incarnation"], 1);
    let md = lookups.wait_metadata("the wiped broker is a new one, the old id retired", |md| {
        live_at(md, &b.address, idb2, 1)
            && md["retired"]
                .as_array()
                .is_some_and(|r| r.contains(&json!(idb)))
    });
    b.wait_following(new_leader, &lookups);

    // Only the members ever registered: the plain broker sent nothing.
    let ids: Vec<u64> = md["brokers"]
        .as_object()
        .expect("brokers")
        .keys()
        .map(|k| k.parse().expect("id"))
        .collect();
    for id in &ids {
        assert!([ida, idb, idb2].contains(id), "unknown broker {id}: {md}");
    }
    assert!(plain.stats("").get("cluster").is_none());

    // A copy of A's data path started as another process is a newer incarnation of A's id:
    // the controller then answers A's heartbeats `Stale`, and A stops the clean way.
    let copy = scratch_dir("session-copy");
    std::fs::copy(a.data.join("broker-identity"), copy.join("broker-identity"))
        .expect("copy the identity");
    let mut flags = lookups.flags();
    flags.push(format!("--data-path={}", copy.display()));
    flags.push(format!("--replication-address=127.0.0.1:{}", free_port()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let twin = Broker::start(1, &flags);
    assert_eq!(twin.stats("")["cluster"]["broker_id"], ida);
    assert_eq!(twin.stats("")["cluster"]["incarnation"], 3);
    let old = a.broker.as_mut().expect("running");
    let status = wait("the older incarnation stops", || old.exited(), String::new);
    let log = old.log();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("newer incarnation"), "{log}");
    drop(twin);
    let _ = std::fs::remove_dir_all(&copy);
}

#[test]
fn a_damaged_identity_file_refuses_the_start() {
    let data = scratch_dir("session-damaged");
    std::fs::write(
        data.join("broker-identity"),
        "nsq-shard broker identity v1\nbroker-id 5\n",
    )
    .expect("write");
    let mut cmd = std::process::Command::new(binary("broker"));
    cmd.args([
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        &format!("--data-path={}", data.display()),
        &format!("--replication-address=127.0.0.1:{}", free_port()),
    ]);
    let text = match start_and_stop(cmd, "TCP: listening") {
        Ok(log) => panic!("the broker started over a damaged identity file:\n{log}"),
        Err(log) => log,
    };
    assert!(text.contains("broker-identity is damaged"), "{text}");
    // The file is left as it was.
    assert!(std::fs::read_to_string(data.join("broker-identity"))
        .expect("kept")
        .ends_with("broker-id 5\n"));
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn each_shard_registers_its_port_and_learns_every_peers_shard_of_its_index() {
    let lookups = Lookups::start();
    let leader = lookups.wait_leader("at start");
    let a = Member::start(&lookups, 2);
    let mut b = Member::start(&lookups, 3);
    let (ida, idb) = (a.id(), b.id());
    for m in [&a, &b] {
        m.wait_following(leader, &lookups);
    }

    // The leader's metadata: one address per shard, the replication port + the shard's index.
    let md = lookups.wait_metadata(
        "both brokers are registered with their shards' ports",
        |md| {
            md["brokers"][ida.to_string()]["addresses"] == json!([a.address, plus(&a.address, 1)])
                && md["brokers"][idb.to_string()]["addresses"]
                    == json!([b.address, plus(&b.address, 1), plus(&b.address, 2)])
        },
    );
    assert_eq!(md["brokers"].as_object().map(|m| m.len()), Some(2), "{md}");

    // Each shard has the other broker, at the address of its shard of the same index modulo
    // that broker's shard count; never itself.
    let peers_are = |m: &Member, want: Value| {
        wait(
            &format!("{}'s shards know their peers", m.address),
            || (m.cluster()["peers"] == want).then_some(()),
            || format!("{}\n{}", m.cluster(), m.broker().log()),
        )
    };
    let one = |id: u64, addr: String| json!({ id.to_string(): addr });
    peers_are(
        &a,
        json!([one(idb, b.address.clone()), one(idb, plus(&b.address, 1))]),
    );
    peers_are(
        &b,
        json!([
            one(ida, a.address.clone()),
            one(ida, plus(&a.address, 1)),
            one(ida, a.address.clone())
        ]),
    );

    // B restarted with one shard: the same broker (the same id, not retired), now with one
    // address, which both of A's shards dial.
    b.shards = 1;
    b.restart(&lookups);
    assert_eq!(b.id(), idb);
    let md = lookups.wait_metadata("B re-registered with one address", |md| {
        live_at(md, &b.address, idb, 2)
            && md["brokers"][idb.to_string()]["addresses"] == json!([b.address])
    });
    assert!(
        md["retired"].as_array().is_none_or(|r| r.is_empty()),
        "{md}"
    );
    peers_are(
        &a,
        json!([one(idb, b.address.clone()), one(idb, b.address.clone())]),
    );
    peers_are(&b, json!([one(ida, a.address.clone())]));
}

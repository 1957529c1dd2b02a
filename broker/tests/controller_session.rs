//! The broker's session with the replication controller, with real processes on 127.0.0.1:
//! three lookups hosting the controller (Raft on ports picked here, everything else ephemeral,
//! temp data paths) and brokers with `--replication-address`; what the controller applied is
//! read from the lookups' `GET /controller`, what the brokers hold from their `/stats`. Every
//! wait is bounded.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::cluster::{plus, wait, Lookups, Member};
use support::Broker;
use test_harness::{binary, free_port, scratch_dir, start_and_stop};

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

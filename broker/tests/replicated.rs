//! Replicated topics end to end, with real processes on 127.0.0.1: three lookups running the
//! controller and three brokers with `--replicas=3`. A publish is answered OK only once a
//! majority holds it; the followers hold every acknowledged message and take the leader's channel
//! positions; when the leader is killed another replica leads, takes publishes and delivers every
//! acknowledged message its channel had not finished (and none it had); the killed
//! broker comes back as a follower and catches up; once the leader released what its channel
//! finished, a wiped replica comes back under a new id, begins its log at the leader's start
//! and is back in sync; `POST /topic/config?replicas=` shrinks and grows the topic. A follower
//! whose log may miss a suffix (a reboot without `--durable`, a torn tail) says so when it
//! registers and leaves the in-sync set until it has caught up. Pauses, retention, channels and
//! their dead-letter settings made on any replica reach every replica; a replicated
//! dead-letter topic's origin records are on every replica, so its next leader lists and
//! redrives them. Every wait is bounded.

mod support;

use serde_json::Value;
use std::time::{Duration, Instant};
use support::cluster::{wait, Lookups, Member};
use support::{PATIENCE, V2};

const TOPIC: &str = "orders";

/// One cluster at a time: the lookups' Raft ports are picked free before they are bound, and
/// two clusters starting together can pick the same one.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds [`ONE_CLUSTER`] for a test (a test that failed while holding it does not stop the
/// others).
fn one_cluster() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Three lookups running the controller and three brokers with `--replicas=3` and
/// `replication_timeout`, once the controller has all three live.
fn start_cluster(replication_timeout: &str) -> (Lookups, Vec<Member>) {
    let lookups = Lookups::start();
    lookups.wait_leader("at start");
    let extra = ["--replicas=3", replication_timeout];
    let members: Vec<Member> = (0..3)
        .map(|_| Member::start_with(&lookups, 1, &extra))
        .collect();
    lookups.wait_metadata("three brokers live", |md| {
        md["brokers"]
            .as_object()
            .is_some_and(|b| b.values().filter(|b| b["fenced"] == false).count() == 3)
    });
    (lookups, members)
}

/// The lookups' state and every running broker's log, for a failed wait.
fn cluster_logs(lookups: &Lookups, members: &[Member]) -> String {
    let mut s = lookups.logs();
    for m in members.iter().filter(|m| m.broker.is_some()) {
        s.push_str(&format!("\n--- broker {}\n{}", m.address, m.broker().log()));
    }
    s
}

/// The broker id each member's /stats names as the topic's leader, once all running members
/// agree on one of them.
fn agreed_leader(members: &[Member]) -> Option<usize> {
    agreed_leader_of(members, TOPIC)
}

/// [`agreed_leader`] of `topic`.
fn agreed_leader_of(members: &[Member], topic: &str) -> Option<usize> {
    let ids: Vec<u64> = members
        .iter()
        .filter(|m| m.broker.is_some())
        .map(|m| m.cluster()["topics"][topic]["leader"].as_u64())
        .collect::<Option<_>>()?;
    let first = *ids.first()?;
    if ids.iter().any(|&i| i != first) {
        return None;
    }
    members
        .iter()
        .position(|m| m.broker.is_some() && m.id() == first)
}

/// Publishes `body` on a new connection: `Ok` for OK, `Err(text)` for an error frame.
fn publish(m: &Member, body: &[u8]) -> Result<(), String> {
    let mut c = V2::connect(m.broker().tcp);
    c.command_with_body(&format!("PUB {TOPIC}"), body);
    match c.frame(PATIENCE) {
        Some((0, d)) if d == b"OK" => Ok(()),
        Some((_, d)) => Err(String::from_utf8_lossy(&d).into_owned()),
        None => Err("no answer".into()),
    }
}

/// Every message body `channel` of the topic on `m` delivers within a quiet second, FINed.
fn drain(m: &Member, channel: &str) -> Vec<Vec<u8>> {
    let mut c = V2::connect(m.broker().tcp);
    c.subscribe(TOPIC, channel, 100);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match c.message(Duration::from_secs(2)) {
            Some(msg) => {
                c.fin(&msg.id);
                got.push(msg.body);
            }
            None => break,
        }
    }
    got
}

/// The first `n` message bodies `channel` of the topic on `m` delivers, one at a time, each
/// FINed.
fn consume(m: &Member, channel: &str, n: usize) -> Vec<Vec<u8>> {
    let mut c = V2::connect(m.broker().tcp);
    c.subscribe(TOPIC, channel, 1);
    let mut got = Vec::new();
    while got.len() < n {
        let msg = c
            .message(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("message {} of {n} not delivered", got.len()));
        c.fin(&msg.id);
        got.push(msg.body);
    }
    got
}

/// Where channel `channel` of the topic stands on `m` (its next seq), if it exists there.
fn channel_offset(m: &Member, channel: &str) -> Option<u64> {
    let s = m.broker().stats(&format!(
        "&topic={TOPIC}&channel={channel}&include_positions=true"
    ));
    s["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic_name"] == TOPIC)?["channels"]
        .as_array()?
        .iter()
        .find(|c| c["channel_name"] == channel)?["offset"]
        .as_u64()
}

fn depth(m: &Member) -> Option<u64> {
    m.broker()
        .topic_stats(TOPIC)
        .and_then(|t: Value| t["depth"].as_u64())
}

#[test]
fn a_replicated_topic_is_acknowledged_by_a_majority_and_survives_its_leader() {
    let _one = one_cluster();
    let (lookups, mut members) = start_cluster("--replication-timeout=3s");
    let logs = |members: &[Member]| cluster_logs(&lookups, members);

    // The first publish asks the controller to create the topic on all three.
    let mut acked: Vec<Vec<u8>> = Vec::new();
    if publish(&members[0], b"first").is_ok() {
        acked.push(b"first".to_vec());
    }
    let leader = wait(
        "the three brokers agree on the topic's leader",
        || agreed_leader(&members),
        || logs(&members),
    );

    // /stats and /metrics show each broker's replica.
    for (i, m) in members.iter().enumerate() {
        let want = if i == leader { "leader" } else { "follower" };
        let r = wait(
            &format!("broker {i}'s /stats shows it as {want}"),
            || {
                let r = m.broker().topic_stats(TOPIC)?["replication"].clone();
                (r["role"] == want).then_some(r)
            },
            || logs(&members),
        );
        assert_eq!(r["replicas"], 3, "{r}");
        assert_eq!(r["leader"], members[leader].id(), "{r}");
        let metrics = m.broker().get("/metrics").text();
        let line = format!(
            "nsq_topic_replica_leader{{topic=\"{TOPIC}\"}} {}",
            u8::from(i == leader)
        );
        assert!(metrics.contains(&line), "no `{line}` in /metrics");
    }

    // Every publish to the leader is answered OK once a majority holds it.
    for i in 0..200 {
        let body = format!("m{i}").into_bytes();
        publish(&members[leader], &body)
            .unwrap_or_else(|e| panic!("publish {i}: {e}\n{}", logs(&members)));
        acked.push(body);
    }
    // A follower forwards publishes to the leader and relays its answer.
    for i in 0..20 {
        let body = format!("via-follower{i}").into_bytes();
        publish(&members[(leader + 1 + i % 2) % 3], &body)
            .unwrap_or_else(|e| panic!("publish {i} to a follower: {e}\n{}", logs(&members)));
        acked.push(body);
    }

    // Both followers hold every acknowledged message.
    for (i, m) in members.iter().enumerate().filter(|(i, _)| *i != leader) {
        wait(
            &format!("follower {i} holds all {} messages", acked.len()),
            || (depth(m) == Some(acked.len() as u64)).then_some(()),
            || logs(&members),
        );
    }

    // A consumer of channel "c" on the leader finishes the first 150 messages; the followers'
    // channel takes the leader's position (created there, registered, at seq 150).
    let finished = consume(&members[leader], "c", 150);
    for (i, m) in members.iter().enumerate().filter(|(i, _)| *i != leader) {
        wait(
            &format!("follower {i}'s channel stands where the leader's does"),
            || (channel_offset(m, "c") == Some(150)).then_some(()),
            || logs(&members),
        );
    }

    // The leader dies: another replica leads, takes publishes, and delivers everything its
    // channel had not finished, and nothing it had.
    let killed_at = Instant::now();
    members[leader].broker = None;
    let new_leader = wait(
        "a surviving replica leads",
        || agreed_leader(&members).filter(|&l| l != leader),
        || logs(&members),
    );
    let mut first_ok = None;
    for i in 0..50 {
        let body = format!("after{i}").into_bytes();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match publish(&members[new_leader], &body) {
                Ok(()) => break,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "publish after failover: {e}\n{}",
                    logs(&members)
                ),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        first_ok.get_or_insert_with(|| killed_at.elapsed());
        acked.push(body);
    }
    eprintln!(
        "failover: first acknowledged publish on the new leader {:?} after the kill",
        first_ok
    );
    let mut got = drain(&members[new_leader], "c");
    let again = got.iter().filter(|b| finished.contains(b)).count();
    assert_eq!(
        again, 0,
        "messages finished on the old leader delivered again by the new one"
    );
    got.sort();
    got.dedup();
    let mut want: Vec<Vec<u8>> = acked
        .iter()
        .filter(|b| !finished.contains(b))
        .cloned()
        .collect();
    want.sort();
    let lost: Vec<_> = want
        .iter()
        .filter(|b| got.binary_search(b).is_err())
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged messages lost: {:?}",
        lost.len(),
        lost.iter()
            .take(5)
            .map(|b| String::from_utf8_lossy(b))
            .collect::<Vec<_>>()
    );

    // The killed broker comes back as a follower and catches up.
    members[leader].restart(&lookups);
    wait(
        "the restarted broker follows the new leader",
        || {
            let c = members[leader].cluster();
            (c["topics"][TOPIC]["leader"].as_u64() == Some(members[new_leader].id())).then_some(())
        },
        || logs(&members),
    );
    // (What channel "c" finished may be released by then: the restarted broker then begins
    // at the leader's start; a follower releases nothing itself.)
    let repl = |m: &Member| {
        m.broker()
            .topic_stats(TOPIC)
            .map(|t| t["replication"].clone())
    };
    wait(
        "the restarted broker holds everything its leader holds",
        || {
            let (r, l) = (repl(&members[leader])?, repl(&members[new_leader])?);
            (r["log_end"] == l["log_end"]).then_some(())
        },
        || logs(&members),
    );

    // The new leader releases what its channel finished (up to its high watermark).
    let released = wait(
        "the leader releases what its channel finished",
        || {
            let r = repl(&members[new_leader])?;
            let (start, end) = (r["log_start"].as_u64()?, r["log_end"].as_u64()?);
            (start > 0 && start == end).then_some(start)
        },
        || logs(&members),
    );

    // A replica whose data path is wiped comes back under a new id and takes the old id's
    // place; its leader no longer has what it misses, so it begins its log at the leader's
    // start, takes what follows, and is back in sync.
    let wiped = leader;
    let old_id = members[wiped].id();
    members[wiped].wipe();
    members[wiped].restart(&lookups);
    let new_id = members[wiped].id();
    assert_ne!(new_id, old_id, "a wiped data path registers under a new id");
    for i in 0..5 {
        let body = format!("after-wipe{i}").into_bytes();
        publish(&members[new_leader], &body)
            .unwrap_or_else(|e| panic!("publish {i} after the wipe: {e}\n{}", logs(&members)));
    }
    let r = wait(
        "the wiped broker is back in sync, begun at the leader's start",
        || {
            let leader_view = repl(&members[new_leader])?;
            let isr: Vec<u64> = serde_json::from_value(leader_view["isr"].clone()).ok()?;
            let r = repl(&members[wiped])?;
            let caught_up = r["log_end"] == leader_view["log_end"];
            (isr.len() == 3 && isr.contains(&new_id) && caught_up).then_some(r)
        },
        || logs(&members),
    );
    assert_eq!(r["role"], "follower", "{r}");
    assert_eq!(
        r["log_start"].as_u64(),
        Some(released),
        "the wiped broker begins at the leader's start: {r}"
    );
    assert_eq!(depth(&members[wiped]), Some(5), "{r}");

    // The topic's replica count, through POST /topic/config on any broker: below the minimum in
    // sync is refused with why; down to 2 drops a follower (never the leader); back to 3 adds a
    // live broker, which catches up and joins the in-sync set.
    let config = |m: &Member, replicas: &str| {
        m.broker().post(
            &format!("/topic/config?topic={TOPIC}&replicas={replicas}"),
            b"",
        )
    };
    let refused = config(&members[wiped], "1");
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(
        refused.text().contains("minimum in sync"),
        "{}",
        refused.text()
    );
    let leader_id = members[new_leader].id();
    for (replicas, via) in [(2usize, wiped), (3, new_leader)] {
        let r = config(&members[via], &replicas.to_string());
        assert_eq!(r.status, 200, "replicas={replicas}: {}", r.text());
        wait(
            &format!("the topic has {replicas} replicas, all in sync, the same leader"),
            || {
                let r = repl(&members[new_leader])?;
                let isr = r["isr"].as_array()?.len();
                (r["replicas"] == replicas && isr == replicas && r["leader"] == leader_id)
                    .then_some(())
            },
            || logs(&members),
        );
    }
}

/// How a test stops a follower, and what it does to its data path before starting it again.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    /// A clean stop (SIGTERM): nothing may be missing.
    CleanStop,
    /// SIGKILL: what the follower had not written yet is gone (no `--durable`).
    Kill,
    /// A clean stop, then the host "rebooted": the identity file names another boot id, so what
    /// was written but not fsynced may be gone.
    Reboot,
    /// SIGKILL, then bytes that are no record after the newest segment's last one: recovery
    /// cuts a torn tail.
    TornTail,
}

impl Damage {
    fn stop(self, m: &mut Member) {
        match self {
            Damage::CleanStop | Damage::Reboot => {
                if let Some(b) = m.broker.as_mut() {
                    b.stop();
                }
            }
            Damage::Kill | Damage::TornTail => {}
        }
        m.broker = None;
        let data = &m.data;
        match self {
            Damage::CleanStop | Damage::Kill => {}
            Damage::Reboot => {
                let path = data.join("broker-identity");
                let text = std::fs::read_to_string(&path).expect("the identity file");
                let body: String = text
                    .lines()
                    .filter(|l| !l.starts_with("crc32 "))
                    .map(|l| match l.strip_prefix("boot-id ") {
                        Some(_) => "boot-id another-boot\n".to_owned(),
                        None => format!("{l}\n"),
                    })
                    .collect();
                let crc = crc32fast::hash(body.as_bytes());
                std::fs::write(&path, format!("{body}crc32 {crc:08x}\n")).expect("rewrite");
            }
            Damage::TornTail => {
                let newest = std::fs::read_dir(data.join(TOPIC))
                    .expect("the topic's directory")
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "seg"))
                    .max()
                    .expect("a segment");
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&newest)
                    .expect("open the segment");
                std::io::Write::write_all(&mut f, &[0xAB; 64]).expect("append");
            }
        }
    }
}

/// A follower whose log may miss a suffix others hold (without `--durable`: it was killed, or its
/// host rebooted; or recovery cut a torn tail) names the topic when it registers: it leaves the
/// in-sync set at once (the controller would otherwise count it whole and might elect it),
/// catches up and is back in sync. After a clean stop it names nothing.
#[test]
fn a_follower_that_may_miss_a_suffix_says_so_when_it_registers() {
    let _one = one_cluster();
    // A long replication timeout: a follower restarting is not dropped for lagging.
    let (lookups, mut members) = start_cluster("--replication-timeout=20s");
    let logs = |members: &[Member]| cluster_logs(&lookups, members);
    let _ = publish(&members[0], b"first");
    let leader = wait(
        "the three brokers agree on the topic's leader",
        || agreed_leader(&members),
        || logs(&members),
    );
    let follower = (leader + 1) % 3;
    let mut published = 0u64;
    let mut publish_some = |members: &[Member], n: usize| {
        for i in 0..n {
            publish(&members[leader], format!("m{published}").as_bytes())
                .unwrap_or_else(|e| panic!("publish {i}: {e}\n{}", logs(members)));
            published += 1;
        }
        published
    };
    publish_some(&members, 20);
    let in_sync = |md: &Value| md["topics"][TOPIC]["isr"].as_array().map_or(0, |a| a.len()) == 3;
    const NAMED: &str = "registering with topics whose log here may miss a suffix";

    for damage in [
        Damage::CleanStop,
        Damage::Kill,
        Damage::Reboot,
        Damage::TornTail,
    ] {
        let before = lookups.wait_metadata("all three in sync", in_sync)["topics"][TOPIC]
            ["isr_version"]
            .as_u64()
            .expect("an isr_version");
        damage.stop(&mut members[follower]);
        members[follower].restart(&lookups);
        let total = publish_some(&members, 5);
        // "first" may or may not have been acknowledged.
        let holds = |m: &Member| depth(m).is_some_and(|d| d >= total);
        let md = lookups.wait_metadata(&format!("after {damage:?}, all three in sync"), |md| {
            in_sync(md) && holds(&members[follower])
        });
        let log = members[follower].broker().log();
        let named = log.lines().find(|l| l.contains(NAMED)).map(str::to_owned);
        if damage == Damage::CleanStop {
            assert_eq!(named, None, "a clean stop names nothing");
            continue;
        }
        let named = named.unwrap_or_else(|| panic!("after {damage:?}: no `{NAMED}`\n{log}"));
        assert!(named.contains(TOPIC), "{named}");
        let after = md["topics"][TOPIC]["isr_version"]
            .as_u64()
            .expect("isr_version");
        assert!(
            after >= before + 2,
            "after {damage:?} the follower left the in-sync set and came back: isr_version \
             {before} -> {after}"
        );
    }

    // Settings made on a follower reach the leader, and from it every replica; settings made
    // on the leader reach the followers.
    let other = (leader + 2) % 3;
    let on = |i: usize, target: &str| {
        let r = members[i].broker().post(target, b"");
        assert_eq!(r.status, 200, "{target} on broker {i}: {}", r.text());
    };
    on(follower, &format!("/topic/pause?topic={TOPIC}"));
    on(
        follower,
        &format!("/channel/create?topic={TOPIC}&channel=audit"),
    );
    on(
        follower,
        &format!(
            "/channel/config?topic={TOPIC}&channel=audit&max_attempts=3&dead_letter_topic=orders-dead"
        ),
    );
    on(
        follower,
        &format!("/channel/pause?topic={TOPIC}&channel=audit"),
    );
    on(
        leader,
        &format!("/topic/config?topic={TOPIC}&retention_time=1h"),
    );
    for (i, m) in members.iter().enumerate() {
        wait(
            &format!("broker {i} holds the settings made on a follower and on the leader"),
            || {
                let t = m.broker().topic_stats(TOPIC)?;
                let c = m.broker().channel_stats(TOPIC, "audit")?;
                (t["paused"] == true
                    && t["retention"]["time_is_topics"] == true
                    && t["retention"]["time_ns"] == 3_600_000_000_000u64
                    && c["paused"] == true
                    && c["max_attempts"] == 3
                    && c["dead_letter_topic"] == "orders-dead")
                    .then_some(())
            },
            || logs(&members),
        );
    }
    on(other, &format!("/topic/unpause?topic={TOPIC}"));
    on(
        leader,
        &format!("/channel/delete?topic={TOPIC}&channel=audit"),
    );
    for (i, m) in members.iter().enumerate() {
        wait(
            &format!("broker {i}: the topic unpaused, the channel gone"),
            || {
                let t = m.broker().topic_stats(TOPIC)?;
                let gone = m.broker().channel_stats(TOPIC, "audit").is_none();
                (t["paused"] == false && gone).then_some(())
            },
            || logs(&members),
        );
    }

    // Dead letters: a channel of the topic gives up on messages after one attempt and sends
    // them to a replicated dead-letter topic. Every replica of that topic holds their origin
    // records; its leader dies, the next one lists them and redrives them to their origin.
    const DEAD: &str = "orders-dead";
    let lead = wait(
        "the topic's leader",
        || agreed_leader(&members),
        || logs(&members),
    );
    on(lead, &format!("/channel/create?topic={TOPIC}&channel=work"));
    on(
        lead,
        &format!(
            "/channel/config?topic={TOPIC}&channel=work&max_attempts=1&dead_letter_topic={DEAD}"
        ),
    );
    let bodies: Vec<String> = (0..5).map(|i| format!("poison{i}")).collect();
    for b in &bodies {
        publish(&members[lead], b.as_bytes())
            .unwrap_or_else(|e| panic!("publish {b}: {e}\n{}", logs(&members)));
    }
    let mut c = V2::connect(members[lead].broker().tcp);
    c.subscribe(TOPIC, "work", 10);
    let mut given_up = 0;
    while let Some(msg) = c.message(Duration::from_secs(2)) {
        c.command(&format!("REQ {} 0", msg.id));
        given_up += 1;
    }
    drop(c);
    assert!(given_up >= bodies.len(), "{given_up} messages given up on");
    let records = |m: &Member| -> Option<Vec<Value>> {
        let r = m.broker().get(&format!("/dead_letters?topic={DEAD}"));
        (r.status == 200).then(|| r.json()["dead_letters"].as_array().cloned())?
    };
    let previews = |rs: &[Value]| -> Vec<String> {
        let mut p: Vec<String> = rs
            .iter()
            .filter(|r| r["origin_topic"] == TOPIC && r["origin_channel"] == "work")
            .filter_map(|r| r["preview"].as_str().map(str::to_owned))
            .filter(|p| p.starts_with("poison"))
            .collect();
        p.sort();
        p
    };
    for (i, m) in members.iter().enumerate() {
        wait(
            &format!(
                "broker {i} holds the origin records of the {} dead letters",
                bodies.len()
            ),
            || (records(m).is_some_and(|rs| previews(&rs) == bodies)).then_some(()),
            || logs(&members),
        );
    }
    let dead_leader = wait(
        "the brokers agree on the dead-letter topic's leader",
        || agreed_leader_of(&members, DEAD),
        || logs(&members),
    );
    members[dead_leader].broker = None;
    let next = wait(
        "another replica leads the dead-letter topic",
        || agreed_leader_of(&members, DEAD).filter(|&l| l != dead_leader),
        || logs(&members),
    );
    let listed = records(&members[next]).unwrap_or_default();
    assert_eq!(
        previews(&listed),
        bodies,
        "the new leader's records: {listed:?}"
    );
    let r = members[next]
        .broker()
        .post(&format!("/topic/redrive?topic={DEAD}"), b"");
    assert_eq!(r.status, 200, "redrive: {}", r.text());
    assert_eq!(
        r.json()["redriven"].as_u64(),
        Some(listed.len() as u64),
        "{}",
        r.text()
    );
    for (i, m) in members
        .iter()
        .enumerate()
        .filter(|(_, m)| m.broker.is_some())
    {
        wait(
            &format!("broker {i}: the redriven records are forgotten"),
            || {
                records(m)
                    .is_some_and(|rs| previews(&rs).is_empty())
                    .then_some(())
            },
            || logs(&members),
        );
    }
    // They are back in their origin topic: its channel delivers them again.
    let origin_leader = wait(
        "the topic's leader after the kill",
        || agreed_leader(&members),
        || logs(&members),
    );
    let mut again: Vec<String> = drain(&members[origin_leader], "work")
        .into_iter()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .filter(|b| b.starts_with("poison"))
        .collect();
    again.sort();
    again.dedup();
    assert_eq!(again, bodies, "redriven messages delivered again");
}

//! The V1 TCP protocol as brokers speak it: handshake, IDENTIFY, (UN)REGISTER, PING, errors,
//! and what a peer's registrations become when it unregisters, disconnects or goes quiet.

mod support;

use serde_json::Value;
use support::{identify_body, wait_until, Lookupd, Peer};

fn producers(lookupd: &Lookupd, topic: &str) -> Vec<Value> {
    let v = lookupd.get_json(&format!("/lookup?topic={topic}"));
    v["producers"].as_array().cloned().unwrap_or_default()
}

fn debug_entries(lookupd: &Lookupd, key: &str) -> usize {
    let v = lookupd.get_json("/debug");
    v[key].as_array().map_or(0, Vec::len)
}

#[test]
fn tcp_identify_answers_with_the_lookups_own_identity() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = Peer::connect(lookupd.tcp);
    let reply = peer.identify(&identify_body("127.0.0.1", 4151));
    let v: Value = serde_json::from_str(&reply).expect("JSON reply");
    let keys: Vec<_> = v.as_object().expect("object").keys().cloned().collect();
    assert_eq!(
        keys,
        [
            "broadcast_address",
            "hostname",
            "http_port",
            "tcp_port",
            "version"
        ]
    );
    assert_eq!(v["broadcast_address"], "lookup-test");
    assert_eq!(v["tcp_port"], lookupd.tcp.port());
    assert_eq!(v["http_port"], lookupd.http.port());
    assert_eq!(v["version"], "1.3.0");
    assert!(v["hostname"].is_string());
    // nsqlookupd writes the map with sorted keys, so the bytes start like this
    assert!(reply.starts_with("{\"broadcast_address\":\"lookup-test\",\"hostname\":"));
    assert_eq!(peer.command("PING"), "OK");
    assert_eq!(peer.command("REGISTER t c"), "OK");
    assert_eq!(peer.command("REGISTER t"), "OK");
    assert_eq!(peer.command("UNREGISTER t c"), "OK");
    assert_eq!(peer.command("UNREGISTER t"), "OK");
}

#[test]
fn tcp_bad_magic_is_answered_then_closed() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = Peer::connect_raw(lookupd.tcp);
    peer.send(b"  V2");
    assert_eq!(peer.reply(), "E_BAD_PROTOCOL");
    assert!(peer.is_closed());
}

#[test]
fn tcp_errors_carry_nsqlookupd_texts_and_close() {
    let lookupd = Lookupd::start(&[]);
    let cases: &[(&[u8], &str)] = &[
        (b"REGISTER t\n", "E_INVALID client must IDENTIFY"),
        (b"UNREGISTER t\n", "E_INVALID client must IDENTIFY"),
        (b"NOPE\n", "E_INVALID invalid command NOPE"),
        (
            b"IDENTIFY\n\x00\x00\x00\x08not json",
            "E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (
            b"IDENTIFY\n\x00\x00\x00\x02{}",
            "E_BAD_BODY IDENTIFY missing fields",
        ),
    ];
    for (bytes, want) in cases {
        let mut peer = Peer::connect(lookupd.tcp);
        peer.send(bytes);
        assert_eq!(peer.reply(), *want);
        assert!(peer.is_closed(), "{want}: connection still open");
    }
    let after_identify: &[(&str, &str)] = &[
        (
            "REGISTER",
            "E_INVALID REGISTER insufficient number of params",
        ),
        (
            "REGISTER bad!t",
            "E_BAD_TOPIC REGISTER topic name 'bad!t' is not valid",
        ),
        (
            "UNREGISTER t bad!c",
            "E_BAD_CHANNEL UNREGISTER channel name 'bad!c' is not valid",
        ),
    ];
    for (line, want) in after_identify {
        let mut peer = lookupd.peer("127.0.0.1", 4151);
        assert_eq!(peer.command(line), *want);
        assert!(peer.is_closed(), "{want}: connection still open");
    }
    let mut peer = lookupd.peer("127.0.0.1", 4151);
    assert_eq!(
        peer.identify(&identify_body("127.0.0.1", 4151)),
        "E_INVALID cannot IDENTIFY again"
    );
    assert!(peer.is_closed());
    // nothing above left a registration behind
    assert_eq!(
        lookupd.get_json("/nodes")["producers"],
        serde_json::json!([])
    );
}

#[test]
fn tcp_disconnect_removes_the_peers_registrations() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = lookupd.peer("127.0.0.1", 4151);
    assert_eq!(peer.command("REGISTER t c"), "OK");
    assert_eq!(producers(&lookupd, "t").len(), 1);
    assert_eq!(
        lookupd.get_json("/nodes")["producers"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    drop(peer);
    wait_until("the producer to go", || producers(&lookupd, "t").is_empty());
    wait_until("the node to go", || {
        lookupd.get_json("/nodes")["producers"] == serde_json::json!([])
    });
    assert_eq!(debug_entries(&lookupd, "channel:t:c"), 0);
    // as in nsqlookupd, the registrations themselves stay until deleted over HTTP
    assert_eq!(
        lookupd.get_json("/topics")["topics"],
        serde_json::json!(["t"])
    );
    assert_eq!(
        lookupd.get_json("/channels?topic=t")["channels"],
        serde_json::json!(["c"])
    );
}

#[test]
fn tcp_unregister_of_a_topic_takes_its_channels_along() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = lookupd.peer("127.0.0.1", 4151);
    let mut other = lookupd.peer("127.0.0.2", 4151);
    assert_eq!(peer.command("REGISTER t c1"), "OK");
    assert_eq!(peer.command("REGISTER t c2"), "OK");
    assert_eq!(other.command("REGISTER t c1"), "OK");
    assert_eq!(debug_entries(&lookupd, "channel:t:c1"), 2);
    assert_eq!(peer.command("UNREGISTER t"), "OK");
    assert_eq!(debug_entries(&lookupd, "channel:t:c1"), 1);
    assert_eq!(debug_entries(&lookupd, "channel:t:c2"), 0);
    assert_eq!(debug_entries(&lookupd, "topic:t:"), 1);
    let remaining = producers(&lookupd, "t");
    assert_eq!(remaining.len(), 1);
    assert_eq!(remaining[0]["broadcast_address"], "127.0.0.2");
}

#[test]
fn tcp_ephemeral_channel_goes_with_its_last_producer() {
    let lookupd = Lookupd::start(&[]);
    let mut a = lookupd.peer("127.0.0.1", 4151);
    let mut b = lookupd.peer("127.0.0.2", 4151);
    assert_eq!(a.command("REGISTER t e#ephemeral"), "OK");
    assert_eq!(b.command("REGISTER t e#ephemeral"), "OK");
    assert_eq!(a.command("REGISTER t durable"), "OK");
    let channels = || lookupd.get_json("/channels?topic=t")["channels"].clone();
    assert_eq!(channels(), serde_json::json!(["durable", "e#ephemeral"]));
    assert_eq!(a.command("UNREGISTER t e#ephemeral"), "OK");
    assert_eq!(channels(), serde_json::json!(["durable", "e#ephemeral"]));
    assert_eq!(b.command("UNREGISTER t e#ephemeral"), "OK");
    assert_eq!(channels(), serde_json::json!(["durable"]));
    // a durable channel stays listed without producers
    assert_eq!(a.command("UNREGISTER t durable"), "OK");
    assert_eq!(channels(), serde_json::json!(["durable"]));
    // and so does an ephemeral topic until its last producer unregisters it
    assert_eq!(a.command("REGISTER t#ephemeral"), "OK");
    assert_eq!(a.command("UNREGISTER t#ephemeral"), "OK");
    assert_eq!(
        lookupd.get_json("/topics")["topics"],
        serde_json::json!(["t"])
    );
}

#[test]
fn tcp_inactive_producers_are_hidden_until_they_ping() {
    let lookupd = Lookupd::start(&["--inactive-producer-timeout", "1s"]);
    let mut peer = lookupd.peer("127.0.0.1", 4151);
    assert_eq!(peer.command("REGISTER t"), "OK");
    assert_eq!(producers(&lookupd, "t").len(), 1);
    wait_until("the producer to turn inactive", || {
        producers(&lookupd, "t").is_empty()
            && lookupd.get_json("/nodes")["producers"] == serde_json::json!([])
    });
    // still registered, only hidden
    assert_eq!(debug_entries(&lookupd, "topic:t:"), 1);
    assert_eq!(peer.command("PING"), "OK");
    assert_eq!(producers(&lookupd, "t").len(), 1);
    assert_eq!(
        lookupd.get_json("/nodes")["producers"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn tcp_commands_may_arrive_in_one_write_and_in_pieces() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = Peer::connect_raw(lookupd.tcp);
    let body = identify_body("127.0.0.1", 4151);
    let mut bytes = b"  V1IDENTIFY\n".to_vec();
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(body.as_bytes());
    bytes.extend_from_slice(b"REGISTER t c\nPING\n");
    for piece in bytes.chunks(7) {
        peer.send(piece);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(peer.reply().starts_with('{'));
    assert_eq!(peer.reply(), "OK");
    assert_eq!(peer.reply(), "OK");
    assert_eq!(producers(&lookupd, "t").len(), 1);
}

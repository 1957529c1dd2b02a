//! nsqd's HTTP API against the built broker: every endpoint and error code through real
//! requests, checked against the responses recorded from nsqd 1.3 (tests/fixtures/nsq, a copy of ../shared/fixtures), and
//! the API's effect on TCP consumers (publish, pause, empty, delete) with one and two shards.

mod support;

use serde_json::Value;
use std::time::{Duration, Instant};
use support::{fixture, Broker, Http, PATIENCE, V2};

/// A wait long enough to say "nothing was delivered".
const QUIET: Duration = Duration::from_millis(300);

/// The broker flags of the fixture run, minus the addresses and data path the harness sets.
fn fixture_flags(cases: &Value) -> Vec<String> {
    cases["broker_flags"]
        .as_array()
        .expect("broker_flags")
        .iter()
        .filter_map(|f| f.as_str())
        .filter(|f| {
            !f.starts_with("--tcp-address")
                && !f.starts_with("--http-address")
                && !f.starts_with("--data-path")
        })
        .map(str::to_string)
        .collect()
}

/// A body of `len` bytes that provokes what the fixture case provoked (the fixture only
/// records lengths). The broker runs with --max-msg-size=1024 --max-body-size=4096.
fn body_for(request: &str, len: usize) -> Vec<u8> {
    if request.contains("binary") {
        // [count 1][size][bytes]: one message of len - 8 bytes.
        let mut b = 1u32.to_be_bytes().to_vec();
        b.extend(((len - 8) as u32).to_be_bytes());
        b.extend(vec![b'm'; len - 8]);
        return b;
    }
    if request.starts_with("POST /mpub") {
        if len <= 1024 {
            // Short lines.
            return (0..len)
                .map(|i| if i % 2 == 1 { b'\n' } else { b'x' })
                .collect();
        }
        // One line longer than a message may be.
        let mut b = vec![b'x'; len - 1];
        b.push(b'\n');
        return b;
    }
    vec![b'a'; len]
}

fn check_fixture_cases(shards: usize) {
    let cases = fixture("nsqd_http_responses.json");
    let flags = fixture_flags(&cases);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut broker = Broker::start(shards, &flags);
    for case in cases["cases"].as_array().expect("cases") {
        let request = case["request"].as_str().expect("request");
        let (method, target) = request.split_once(' ').expect("method and target");
        let body = case["request_body_len"]
            .as_u64()
            .map(|n| body_for(request, n as usize));
        let body = body.or_else(|| (method == "POST").then(Vec::new));
        let r = support::request(broker.http, method, target, body.as_deref());
        let want_status = case["status"].as_u64().expect("status") as u16;
        assert_eq!(r.status, want_status, "{request}: {}", r.text());
        assert_eq!(
            r.text(),
            case["body"].as_str().expect("body"),
            "{request} body"
        );
        assert_eq!(
            r.header("Content-Type"),
            case["content_type"].as_str(),
            "{request} Content-Type"
        );
        assert_eq!(
            r.header("X-NSQ-Content-Type"),
            case["x_nsq_content_type"].as_str(),
            "{request} X-NSQ-Content-Type"
        );
    }
    broker.assert_alive();
}

#[test]
fn http_every_fixture_case_answers_like_nsqd_with_one_shard() {
    check_fixture_cases(1);
}

#[test]
fn http_every_fixture_case_answers_like_nsqd_with_two_shards() {
    check_fixture_cases(2);
}

/// Compares the JSON shape of `ours` with nsqd's `theirs`: the same keys in every object, the
/// same JSON types (integers where nsqd has integers), arrays compared element by element
/// against nsqd's first element. Arrays nsqd filled must be filled in ours too.
fn assert_same_shape(ours: &Value, theirs: &Value, path: &str) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let mut ka: Vec<&String> = a.keys().collect();
            let mut kb: Vec<&String> = b.keys().collect();
            ka.sort();
            kb.sort();
            assert_eq!(ka, kb, "keys of {path}");
            for (k, v) in b {
                assert_same_shape(&a[k], v, &format!("{path}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if let Some(first) = b.first() {
                assert!(!a.is_empty(), "{path}: nsqd's is not empty, ours is");
                for (i, item) in a.iter().enumerate() {
                    assert_same_shape(item, first, &format!("{path}[{i}]"));
                }
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            if b.is_i64() || b.is_u64() {
                assert!(
                    a.is_i64() || a.is_u64(),
                    "{path}: integer expected, got {a}"
                );
            }
        }
        (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_))
        | (Value::Null, Value::Null) => {}
        _ => panic!("{path}: ours is {ours}, nsqd's is {theirs}"),
    }
}

#[test]
fn http_stats_json_has_nsqds_shape_and_counts() {
    let mut broker = Broker::start(2, &[]);
    let topic = "http_stats_json_shape";
    let mut consumer = V2::identified(broker.tcp, "kitcons", "kithost", "kit/1.0");
    consumer.subscribe(topic, "c", 1);
    let mut producer = V2::identified(broker.tcp, "kitprod", "kithost", "");
    for _ in 0..3 {
        producer.publish(topic, b"ab");
    }
    let msg = consumer.message(PATIENCE).expect("one delivery");
    assert_eq!(msg.body, b"ab");
    broker.eventually("depth 2, one in flight", || {
        broker
            .channel_stats(topic, "c")
            .is_some_and(|c| c["depth"] == 2 && c["in_flight_count"] == 1)
    });

    let stats = broker.stats("");
    assert_same_shape(&stats, &fixture("nsqd_stats.json"), "stats");
    assert_eq!(stats["version"], "1.3.0");
    assert_eq!(stats["health"], "OK");
    let t = &stats["topics"][0];
    assert_eq!(t["topic_name"], topic);
    assert_eq!(t["message_count"], 3);
    assert_eq!(t["message_bytes"], 6);
    assert_eq!(t["depth"], 0);
    let c = &t["channels"][0];
    assert_eq!(
        (
            &c["depth"],
            &c["in_flight_count"],
            &c["message_count"],
            &c["client_count"]
        ),
        (&2.into(), &1.into(), &3.into(), &1.into())
    );
    let client = &c["clients"][0];
    assert_eq!(client["client_id"], "kitcons");
    assert_eq!(client["hostname"], "kithost");
    assert_eq!(client["user_agent"], "kit/1.0");
    assert_eq!(client["state"], 3);
    assert_eq!(client["ready_count"], 1);
    assert_eq!(client["in_flight_count"], 1);
    assert_eq!(client["message_count"], 1);
    assert_eq!(client["version"], "V2");
    let producers = stats["producers"].as_array().expect("producers");
    assert_eq!(producers.len(), 1, "{producers:?}");
    assert_eq!(producers[0]["client_id"], "kitprod");
    assert_eq!(producers[0]["state"], 0);
    assert_eq!(
        producers[0]["pub_counts"],
        serde_json::json!([{"topic": topic, "count": 3}])
    );

    // FIN counts on the consumer, and frees RDY for the next message.
    consumer.fin(&msg.id);
    let next = consumer.message(PATIENCE).expect("the next delivery");
    assert_eq!(next.body, b"ab");
    broker.eventually("finish_count 1, two delivered", || {
        broker.channel_stats(topic, "c").is_some_and(|c| {
            c["clients"][0]["finish_count"] == 1
                && c["clients"][0]["message_count"] == 2
                && c["depth"] == 1
        })
    });

    // Filters.
    let other = format!("{topic}_other");
    producer.publish(&other, b"x");
    assert_eq!(
        broker.stats("")["producers"][0]["pub_counts"],
        serde_json::json!([{"topic": topic, "count": 3}, {"topic": other, "count": 1}])
    );
    // As nsqd's GetStats: a topic filter keeps that topic's pub_counts only; a topic that does
    // not exist gives null topics and producers; a channel that does not exist, no topics.
    let only = broker.stats(&format!("&topic={topic}&channel=c"));
    assert_eq!(only["topics"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        only["producers"][0]["pub_counts"],
        serde_json::json!([{"topic": topic, "count": 3}])
    );
    let none = broker.stats("&topic=no_such_topic");
    assert_eq!(
        (&none["topics"], &none["producers"]),
        (&Value::Null, &Value::Null)
    );
    let no_channel = broker.stats(&format!("&topic={topic}&channel=nope"));
    assert_eq!(no_channel["topics"], serde_json::json!([]));
    assert_eq!(no_channel["producers"].as_array().map(Vec::len), Some(1));
    let no_clients = broker.stats("&include_clients=false&include_mem=false");
    assert_eq!(no_clients["producers"], Value::Null);
    assert_eq!(
        no_clients["topics"][0]["channels"][0]["clients"],
        Value::Null
    );
    assert_eq!(no_clients["topics"][0]["channels"][0]["client_count"], 1);
    assert!(no_clients.get("memory").is_none());
    let r = broker.get("/stats?format=json");
    assert_eq!(
        r.header("Content-Type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
    broker.assert_alive();
}

#[test]
fn http_stats_text_has_nsqds_layout() {
    let mut broker = Broker::start(1, &[]);
    assert_eq!(
        broker.post("/topic/create?topic=fixture_topic", b"").status,
        200
    );
    let r = broker.post("/channel/create?topic=fixture_topic&channel=c", b"");
    assert_eq!(r.status, 200);
    for _ in 0..3 {
        assert_eq!(broker.post("/pub?topic=fixture_topic", b"x").status, 200);
    }
    let r = broker.get("/stats");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    let ours = r.text();
    let theirs = fixture("nsqd_stats_text.json")["body"]
        .as_str()
        .expect("body")
        .to_string();
    let (ol, tl): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), theirs.lines().collect());
    assert_eq!(ol.len(), tl.len(), "ours:\n{ours}\nnsqd's:\n{theirs}");
    for (o, t) in ol.iter().zip(&tl) {
        let same = if t.starts_with("nsqd v") {
            o.starts_with("nsqd v1.3.0 (built w/")
        } else if let Some(rest) = t.strip_prefix("start_time ") {
            o.starts_with("start_time ") && o.len() == t.len() && rest.ends_with('Z')
        } else if t.starts_with("uptime ") {
            o.starts_with("uptime ")
        } else if let Some((key, _)) = t.split_once('\t') {
            o.split_once('\t')
                .is_some_and(|(k, v)| k == key && v.parse::<u64>().is_ok())
        } else {
            o == t
        };
        assert!(
            same,
            "line differs:\n ours: {o:?}\nnsqd: {t:?}\n\nours:\n{ours}"
        );
    }
    broker.assert_alive();
}

fn check_publish_and_consume(shards: usize) {
    let mut broker = Broker::start(
        shards,
        &[
            "--e2e-processing-latency-percentile=0.5",
            "--e2e-processing-latency-percentile=0.99",
        ],
    );
    let topic = "http_to_tcp";
    let mut consumer = V2::identified(broker.tcp, "c1", "h", "test");
    consumer.subscribe(topic, "ch", 10);
    let fin = |consumer: &mut V2, want: &[u8]| {
        let m = consumer.message(PATIENCE).expect("a delivery");
        assert_eq!(m.body, want);
        assert_eq!(m.attempts, 1);
        consumer.fin(&m.id);
        m
    };

    assert_eq!(
        broker.post(&format!("/pub?topic={topic}"), b"hello").status,
        200
    );
    fin(&mut consumer, b"hello");

    assert_eq!(
        broker
            .post(&format!("/mpub?topic={topic}"), b"one\n\ntwo\n")
            .status,
        200
    );
    fin(&mut consumer, b"one");
    fin(&mut consumer, b"two");

    let mut binary = 2u32.to_be_bytes().to_vec();
    for m in [&b"bin\none"[..], b"b2"] {
        binary.extend((m.len() as u32).to_be_bytes());
        binary.extend(m);
    }
    let r = broker.post(&format!("/mpub?topic={topic}&binary=true"), &binary);
    assert_eq!(r.status, 200, "{}", r.text());
    fin(&mut consumer, b"bin\none");
    fin(&mut consumer, b"b2");
    // nsqd reads `binary` as a boolean: false and 0 are text mode.
    for off in ["false", "0"] {
        let r = broker.post(&format!("/mpub?topic={topic}&binary={off}"), b"t1\nt2\n");
        assert_eq!(r.status, 200, "binary={off}: {}", r.text());
        fin(&mut consumer, b"t1");
        fin(&mut consumer, b"t2");
    }

    let sent = Instant::now();
    assert_eq!(
        broker
            .post(&format!("/pub?topic={topic}&defer=400"), b"later")
            .status,
        200
    );
    let m = fin(&mut consumer, b"later");
    assert!(
        sent.elapsed() >= Duration::from_millis(350),
        "deferred message came early"
    );
    assert!(m.timestamp > 0);

    broker.eventually("all ten finished and counted", || {
        let Some(t) = broker.topic_stats(topic) else {
            return false;
        };
        let c = &t["channels"][0];
        t["message_count"] == 10
            && c["message_count"] == 10
            && c["clients"][0]["finish_count"] == 10
            && c["e2e_processing_latency"]["count"] == 10
    });
    let t = broker.topic_stats(topic).expect("topic");
    let lat = &t["channels"][0]["e2e_processing_latency"];
    let percentiles = lat["percentiles"].as_array().expect("percentiles");
    assert_eq!(percentiles.len(), 2);
    assert_eq!(percentiles[0]["quantile"], 0.5);
    assert!(percentiles[1]["value"].as_f64().is_some_and(|v| v > 0.0));
    // Whole nanoseconds are written as Go writes them, without a fraction.
    assert!(percentiles[1]["value"].is_u64(), "{lat}");
    assert_eq!(t["e2e_processing_latency"]["count"], 10);
    // A topic without channels aggregates nothing: null percentiles, as nsqd.
    let lonely = format!("{topic}_lonely");
    assert_eq!(
        broker.post(&format!("/pub?topic={lonely}"), b"x").status,
        200
    );
    let l = broker.topic_stats(&lonely).expect("topic");
    assert_eq!(
        l["e2e_processing_latency"],
        serde_json::json!({"count": 0, "percentiles": null})
    );
    broker.assert_alive();
}

#[test]
fn http_published_messages_are_consumed_over_tcp_with_one_shard() {
    check_publish_and_consume(1);
}

#[test]
fn http_published_messages_are_consumed_over_tcp_with_two_shards() {
    check_publish_and_consume(2);
}

/// Several consumers, so that with two shards some sit on the topic's owner and some not.
fn consumers(broker: &Broker, topic: &str, channel: &str, n: usize) -> Vec<V2> {
    (0..n)
        .map(|i| {
            let mut c = V2::identified(broker.tcp, &format!("c{i}"), "h", "test");
            c.subscribe(topic, channel, 5);
            c
        })
        .collect()
}

/// Waits for one delivery to any of `cs`; returns (consumer index, message).
fn one_delivery(cs: &mut [V2]) -> (usize, support::Msg) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        for (i, c) in cs.iter_mut().enumerate() {
            if let Some(m) = c.message(Duration::from_millis(20)) {
                return (i, m);
            }
        }
    }
    panic!("no delivery");
}

fn assert_quiet(cs: &mut [V2], why: &str) {
    let deadline = Instant::now() + QUIET;
    while Instant::now() < deadline {
        for c in cs.iter_mut() {
            if let Some(m) = c.message(Duration::from_millis(20)) {
                panic!("{why}: delivered {:?}", String::from_utf8_lossy(&m.body));
            }
        }
    }
}

#[test]
fn http_pause_unpause_empty_and_delete_act_on_connected_consumers() {
    let mut broker = Broker::start(2, &[]);
    let t = "admin_topic";
    let mut cs = consumers(&broker, t, "c", 3);
    let pub_ = |body: &[u8]| {
        let r = broker.post(&format!("/pub?topic={t}"), body);
        assert_eq!(r.status, 200, "{}", r.text());
    };
    let ok = |target: &str| {
        let r = broker.post(target, b"");
        assert_eq!((r.status, r.text()), (200, String::new()), "{target}");
    };

    // A paused channel holds its messages; unpause delivers them.
    ok(&format!("/channel/pause?topic={t}&channel=c"));
    pub_(b"p1");
    assert_quiet(&mut cs, "paused channel");
    let c = broker.channel_stats(t, "c").expect("channel");
    assert_eq!(
        (c["paused"].clone(), c["depth"].clone()),
        (true.into(), 1.into())
    );
    ok(&format!("/channel/unpause?topic={t}&channel=c"));
    let (i, m) = one_delivery(&mut cs);
    assert_eq!(m.body, b"p1");
    cs[i].fin(&m.id);

    // A paused topic holds them itself.
    ok(&format!("/topic/pause?topic={t}"));
    pub_(b"p2");
    assert_quiet(&mut cs, "paused topic");
    let ts = broker.topic_stats(t).expect("topic");
    assert_eq!(
        (ts["paused"].clone(), ts["depth"].clone()),
        (true.into(), 1.into())
    );
    ok(&format!("/topic/unpause?topic={t}"));
    let (i, m) = one_delivery(&mut cs);
    assert_eq!(m.body, b"p2");
    cs[i].fin(&m.id);

    // Emptying a channel drops its backlog, not what is in flight.
    pub_(b"kept in flight");
    let (holder, inflight) = one_delivery(&mut cs);
    ok(&format!("/channel/pause?topic={t}&channel=c"));
    pub_(b"e1");
    pub_(b"e2");
    broker.eventually("depth 2", || {
        broker
            .channel_stats(t, "c")
            .is_some_and(|c| c["depth"] == 2)
    });
    ok(&format!("/channel/empty?topic={t}&channel=c"));
    let c = broker.channel_stats(t, "c").expect("channel");
    assert_eq!(
        (c["depth"].clone(), c["in_flight_count"].clone()),
        (0.into(), 1.into())
    );
    ok(&format!("/channel/unpause?topic={t}&channel=c"));
    assert_quiet(&mut cs, "emptied channel");
    cs[holder].fin(&inflight.id);

    // Emptying a topic drops what it holds.
    ok(&format!("/topic/pause?topic={t}"));
    pub_(b"t1");
    pub_(b"t2");
    assert_eq!(broker.topic_stats(t).expect("topic")["depth"], 2);
    ok(&format!("/topic/empty?topic={t}"));
    assert_eq!(broker.topic_stats(t).expect("topic")["depth"], 0);
    ok(&format!("/topic/unpause?topic={t}"));
    assert_quiet(&mut cs, "emptied topic");

    // After all that, delivery still flows.
    pub_(b"still flowing");
    let (i, m) = one_delivery(&mut cs);
    assert_eq!(m.body, b"still flowing");
    cs[i].fin(&m.id);

    // Creating a channel hands it what the topic held, as SUB does.
    let u = "admin_held";
    assert_eq!(broker.post(&format!("/pub?topic={u}"), b"h1").status, 200);
    assert_eq!(broker.post(&format!("/pub?topic={u}"), b"h2").status, 200);
    assert_eq!(broker.topic_stats(u).expect("topic")["depth"], 2);
    ok(&format!("/channel/create?topic={u}&channel=c2"));
    let c2 = broker.channel_stats(u, "c2").expect("channel");
    assert_eq!(c2["depth"], 2);
    assert_eq!(broker.topic_stats(u).expect("topic")["depth"], 0);

    // Emptying a topic without channels drops what it holds at once, even what was published
    // a moment ago and is not written to its file yet; a channel created afterwards gets none.
    let e = "admin_empty_fresh";
    assert_eq!(
        broker.post(&format!("/pub?topic={e}"), b"gone1").status,
        200
    );
    assert_eq!(
        broker.post(&format!("/pub?topic={e}"), b"gone2").status,
        200
    );
    ok(&format!("/topic/empty?topic={e}"));
    assert_eq!(broker.topic_stats(e).expect("topic")["depth"], 0);
    ok(&format!("/channel/create?topic={e}&channel=late"));
    let late = broker.channel_stats(e, "late").expect("channel");
    assert_eq!(late["depth"], 0, "{late}");

    // Deleting a channel closes its consumers, on whichever shard they are.
    ok(&format!("/channel/delete?topic={t}&channel=c"));
    for (i, c) in cs.iter_mut().enumerate() {
        assert!(c.closed_by_server(), "consumer {i} still connected");
    }
    assert!(broker.channel_stats(t, "c").is_none());
    assert_eq!(
        broker
            .post(&format!("/channel/delete?topic={t}&channel=c"), b"")
            .status,
        404
    );

    // Deleting a topic closes the consumers of all its channels and frees it.
    let mut more = consumers(&broker, t, "d", 2);
    ok(&format!("/topic/delete?topic={t}"));
    for (i, c) in more.iter_mut().enumerate() {
        assert!(
            c.closed_by_server(),
            "consumer {i} of the deleted topic still connected"
        );
    }
    assert!(broker.topic_stats(t).is_none());
    let r = broker.post(&format!("/topic/delete?topic={t}"), b"");
    assert_eq!(
        (r.status, r.text()),
        (404, r#"{"message":"TOPIC_NOT_FOUND"}"#.into())
    );
    broker.assert_alive();
}

#[test]
fn http_keep_alive_pipelining_and_expect_continue() {
    let mut broker = Broker::start(2, &[]);
    let mut c = Http::connect(broker.http);
    for _ in 0..3 {
        let r = c.call("GET", "/ping", None);
        assert_eq!((r.status, r.text()), (200, "OK".into()));
        assert_eq!(r.header("Connection"), None);
    }
    // Three requests in one write, three answers in order.
    let mut batch = Http::encode("GET", "/ping", None, &[]);
    batch.extend(Http::encode(
        "POST",
        "/pub?topic=pipelined",
        Some(b"x"),
        &[],
    ));
    batch.extend(Http::encode("GET", "/no/such", None, &[]));
    c.send_raw(&batch);
    assert_eq!(c.read_response().text(), "OK");
    let r = c.read_response();
    assert_eq!((r.status, r.text()), (200, "OK".into()));
    assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
    assert_eq!(c.read_response().status, 404);

    // Expect: 100-continue.
    c.send_raw(b"POST /pub?topic=pipelined HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
    assert_eq!(c.read_response().status, 100);
    c.send_raw(b"abc");
    assert_eq!(c.read_response().status, 200);

    // HTTP/1.0 without keep-alive: answered, then closed.
    c.send_raw(b"GET /ping HTTP/1.0\r\n\r\n");
    let r = c.read_response();
    assert_eq!((r.status, r.header("Connection")), (200, Some("close")));
    assert!(c.closed_by_server());

    // A body over --max-body-size: nsqd's code, then the connection closes.
    let mut c = Http::connect(broker.http);
    c.send(
        "POST",
        "/mpub?topic=pipelined",
        Some(&vec![b'x'; 6 * 1024 * 1024]),
        &[],
    );
    let r = c.read_response();
    assert_eq!(
        (r.status, r.text()),
        (413, r#"{"message":"BODY_TOO_BIG"}"#.into())
    );
    assert!(c.closed_by_server());

    // A malformed request: 400, closed.
    let mut c = Http::connect(broker.http);
    c.send_raw(b"GARBAGE\r\n\r\n");
    assert_eq!(c.read_response().status, 400);
    assert!(c.closed_by_server());

    assert_eq!(
        broker.topic_stats("pipelined").expect("topic")["message_count"],
        2
    );
    broker.assert_alive();
}

#[test]
fn http_options_redirects_and_http10_answer_as_nsqds_router_does() {
    let mut broker = Broker::start(2, &[]);
    let mut c = Http::connect(broker.http);
    // OPTIONS: 200 with Allow, no body; an unknown path is still 404.
    let r = c.call("OPTIONS", "/pub", None);
    assert_eq!((r.status, r.header("Allow")), (200, Some("POST, OPTIONS")));
    assert!(r.body.is_empty());
    let r = c.call("OPTIONS", "/config/log_level", None);
    assert_eq!(
        (r.status, r.header("Allow")),
        (200, Some("GET, PUT, OPTIONS"))
    );
    let r = c.call("OPTIONS", "*", None);
    assert_eq!((r.status, r.header("Allow")), (200, None));
    assert_eq!(c.call("OPTIONS", "/nope", None).status, 404);

    // A trailing slash, a path to clean or the wrong case: redirected, query kept, 301 for
    // GET and 307 (same method and body) for the others; nothing is published by it.
    let r = c.call("POST", "/pub/?topic=redirected", Some(b"x"));
    assert_eq!(
        (r.status, r.header("Location")),
        (307, Some("/pub?topic=redirected"))
    );
    let r = c.call("GET", "/Stats?format=json", None);
    assert_eq!(
        (r.status, r.header("Location")),
        (301, Some("/stats?format=json"))
    );
    let r = c.call("GET", "//ping/", None);
    assert_eq!((r.status, r.header("Location")), (301, Some("/ping")));
    let r = c.call("PUT", "/CONFIG/log_level", Some(b"debug"));
    assert_eq!(
        (r.status, r.header("Location")),
        (307, Some("/config/log_level"))
    );
    // The decoded path goes back escaped: no header line of the client's making.
    let r = c.call("GET", "/config/x%0d%0aSet-Cookie:%20a=b%3F/", None);
    assert_eq!(
        (r.status, r.header("Location")),
        (301, Some("/config/x%0D%0ASet-Cookie:%20a=b%3F"))
    );
    assert_eq!(r.header("Set-Cookie"), None);
    assert!(
        r.text()
            .contains("href=\"/config/x%0D%0ASet-Cookie:%20a=b%3F\""),
        "{}",
        r.text()
    );
    // Only to a route that takes the method: GET /pub/ is no redirect to a POST route.
    assert_eq!(c.call("GET", "/pub/", None).status, 404);
    assert_eq!(c.call("DELETE", "/ping/", None).status, 404);
    assert!(broker.topic_stats("redirected").is_none());

    // An HTTP/1.0 request is answered in HTTP/1.0, the publish fast path included.
    c.send_raw(
        b"POST /pub?topic=old HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
    );
    let r = c.read_response();
    assert_eq!(
        (r.version.as_str(), r.status, r.text()),
        ("HTTP/1.0", 200, "OK".into())
    );
    assert_eq!(r.header("Connection"), Some("keep-alive"));
    assert_eq!(c.call("GET", "/ping", None).version, "HTTP/1.1");
    c.send_raw(b"GET /ping HTTP/1.0\r\n\r\n");
    let r = c.read_response();
    assert_eq!(
        (r.version.as_str(), r.header("Connection")),
        ("HTTP/1.0", Some("close"))
    );
    assert!(c.closed_by_server());
    broker.assert_alive();
}

#[test]
fn a_body_limit_below_the_message_limit_is_taken_as_nsqd_takes_it() {
    // Independent limits: one message up to --max-msg-size, an MPUB body up to --max-body-size.
    let mut broker = Broker::start(1, &["--max-msg-size=2000", "--max-body-size=1000"]);
    let big = vec![b'x'; 1500];
    assert_eq!(broker.post("/pub?topic=limits", &big).status, 200);
    let r = broker.post("/mpub?topic=limits", &big);
    assert_eq!(
        (r.status, r.text()),
        (413, r#"{"message":"BODY_TOO_BIG"}"#.into())
    );
    let mut tcp = V2::connect(broker.tcp);
    tcp.publish("limits", &big);
    assert_eq!(
        broker.topic_stats("limits").expect("topic")["message_count"],
        2
    );
    broker.assert_alive();
}

#[test]
fn http_errors_for_every_endpoint() {
    let mut broker = Broker::start(
        2,
        &[
            "--max-msg-size=100",
            "--max-body-size=1000",
            "--max-req-timeout=10s",
        ],
    );
    let cases: &[(&str, &str, &[u8], u16, &str)] = &[
        ("POST", "/pub?topic=t", b"", 400, "MSG_EMPTY"),
        ("POST", "/pub?topic=t", &[b'x'; 101], 413, "MSG_TOO_BIG"),
        ("POST", "/pub?topic=t", &[b'x'; 1001], 413, "MSG_TOO_BIG"),
        ("POST", "/pub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/pub?topic=a*b", b"x", 400, "INVALID_TOPIC"),
        (
            "POST",
            "/pub?topic=t&defer=10001",
            b"x",
            400,
            "INVALID_DEFER",
        ),
        ("POST", "/pub?topic=t&defer=abc", b"x", 400, "INVALID_DEFER"),
        ("POST", "/pub?topic=t&a=%zz", b"x", 400, "INVALID_REQUEST"),
        ("POST", "/mpub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/mpub?topic=a*b", b"x", 400, "INVALID_TOPIC"),
        ("POST", "/mpub?topic=t", &[b'x'; 101], 413, "MSG_TOO_BIG"),
        (
            "POST",
            "/mpub?topic=t&binary=1",
            b"\0\0\0\0",
            413,
            "BAD_BODY",
        ),
        ("POST", "/mpub?topic=t&binary=1", b"\0\0", 413, "BAD_BODY"),
        (
            "POST",
            "/mpub?topic=t&binary=1",
            b"\0\0\0\x01\0\0\0\x05ab",
            413,
            "BAD_MESSAGE",
        ),
        ("POST", "/topic/create", b"", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/topic/create?topic=a*b", b"", 400, "INVALID_TOPIC"),
        ("POST", "/topic/empty?topic=a*b", b"", 400, "INVALID_TOPIC"),
        (
            "POST",
            "/topic/empty?topic=nope",
            b"",
            404,
            "TOPIC_NOT_FOUND",
        ),
        ("POST", "/topic/delete", b"", 400, "MISSING_ARG_TOPIC"),
        (
            "POST",
            "/topic/delete?topic=nope",
            b"",
            404,
            "TOPIC_NOT_FOUND",
        ),
        (
            "POST",
            "/topic/pause?topic=nope",
            b"",
            404,
            "TOPIC_NOT_FOUND",
        ),
        (
            "POST",
            "/topic/unpause?topic=nope",
            b"",
            404,
            "TOPIC_NOT_FOUND",
        ),
        ("POST", "/channel/create", b"", 400, "MISSING_ARG_TOPIC"),
        (
            "POST",
            "/channel/create?topic=a*b&channel=c",
            b"",
            400,
            "INVALID_ARG_TOPIC",
        ),
        (
            "POST",
            "/channel/create?topic=t",
            b"",
            400,
            "MISSING_ARG_CHANNEL",
        ),
        (
            "POST",
            "/channel/create?topic=t&channel=c*d",
            b"",
            400,
            "INVALID_ARG_CHANNEL",
        ),
        (
            "POST",
            "/channel/create?topic=nope&channel=c",
            b"",
            404,
            "TOPIC_NOT_FOUND",
        ),
        (
            "POST",
            "/channel/delete?topic=nope&channel=c",
            b"",
            404,
            "TOPIC_NOT_FOUND",
        ),
        (
            "POST",
            "/channel/delete?topic=t&channel=nope",
            b"",
            404,
            "CHANNEL_NOT_FOUND",
        ),
        (
            "POST",
            "/channel/empty?topic=t&channel=nope",
            b"",
            404,
            "CHANNEL_NOT_FOUND",
        ),
        (
            "POST",
            "/channel/pause?topic=t&channel=nope",
            b"",
            404,
            "CHANNEL_NOT_FOUND",
        ),
        (
            "POST",
            "/channel/unpause?topic=t&channel=nope",
            b"",
            404,
            "CHANNEL_NOT_FOUND",
        ),
        ("GET", "/config/nope", b"", 400, "INVALID_OPTION"),
        ("PUT", "/config/max_msg_size", b"5", 400, "INVALID_OPTION"),
        (
            "PUT",
            "/config/nsqlookupd_tcp_addresses",
            b"not json",
            400,
            "INVALID_VALUE",
        ),
        ("PUT", "/config/log_level", b"loud", 400, "INVALID_VALUE"),
        ("PUT", "/config/log_level", b"", 413, "INVALID_VALUE"),
        ("GET", "/nope", b"", 404, "NOT_FOUND"),
        ("GET", "/topic/nope", b"", 404, "NOT_FOUND"),
        ("GET", "/pub?topic=t", b"", 405, "METHOD_NOT_ALLOWED"),
        ("POST", "/stats", b"", 405, "METHOD_NOT_ALLOWED"),
        (
            "DELETE",
            "/config/log_level",
            b"",
            405,
            "METHOD_NOT_ALLOWED",
        ),
        ("POST", "/ping", b"", 405, "METHOD_NOT_ALLOWED"),
    ];
    // The topic `t` must exist for the CHANNEL_NOT_FOUND cases.
    assert_eq!(broker.post("/topic/create?topic=t", b"").status, 200);
    for (method, target, body, status, code) in cases {
        let body = (*method != "GET").then_some(*body);
        let r = support::request(broker.http, method, target, body);
        assert_eq!(
            (r.status, r.text()),
            (*status, format!("{{\"message\":\"{code}\"}}")),
            "{method} {target}"
        );
        assert_eq!(
            r.header("Content-Type"),
            Some("application/json; charset=utf-8")
        );
    }
    broker.assert_alive();
}

#[test]
fn http_ping_info_and_config() {
    let mut broker = Broker::start(2, &["--lookupd-tcp-address=127.0.0.1:4160"]);
    let r = broker.get("/ping");
    assert_eq!((r.status, r.text()), (200, "OK".into()));
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("X-NSQ-Content-Type"), None);

    let r = broker.get("/info");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
    let info = r.json();
    assert_same_shape(&info, &fixture("nsqd_info.json"), "info");
    assert_eq!(info["version"], "1.3.0");
    assert_eq!(info["tcp_port"], broker.tcp.port());
    assert_eq!(info["http_port"], broker.http.port());
    assert_eq!(info["max_heartbeat_interval"], 60_000_000_000u64);
    assert_eq!(info["max_output_buffer_size"], 65536);

    let get = |opt: &str| {
        let r = broker.get(&format!("/config/{opt}"));
        assert_eq!(r.status, 200, "{opt}: {}", r.text());
        r.json()
    };
    assert_eq!(get("max_msg_size"), 1024 * 1024);
    assert_eq!(get("msg_timeout"), 60_000_000_000u64);
    assert_eq!(
        get("nsqlookupd_tcp_addresses"),
        serde_json::json!(["127.0.0.1:4160"])
    );
    assert_eq!(get("log_level"), 2);
    // Without --broadcast-*-port nsqd fills in the listening ports.
    assert_eq!(get("broadcast_tcp_port"), broker.tcp.port());
    assert_eq!(get("broadcast_http_port"), broker.http.port());
    assert_eq!(get("id"), 0);
    // nsqd's defaults: both compressions offered.
    assert_eq!(get("deflate"), true);
    assert_eq!(get("snappy"), true);
    assert_eq!(get("auth_http_addresses"), serde_json::json!([]));
    assert_eq!(get("tls_required"), 0);
    let r = support::request(broker.http, "PUT", "/config/log_level", Some(b"trace"));
    assert_eq!(
        (r.status, r.text()),
        (400, r#"{"message":"INVALID_VALUE"}"#.into())
    );

    let put = |opt: &str, body: &[u8]| {
        let r = support::request(broker.http, "PUT", &format!("/config/{opt}"), Some(body));
        assert_eq!(r.status, 200, "{opt}: {}", r.text());
        r.json()
    };
    let addrs = serde_json::json!(["127.0.0.1:1", "127.0.0.1:2"]);
    assert_eq!(
        put("nsqlookupd_tcp_addresses", addrs.to_string().as_bytes()),
        addrs
    );
    assert_eq!(put("log_level", b"warn"), 3);
    assert_eq!(
        put("nsqlookupd_tcp_addresses", b"null"),
        serde_json::json!([])
    );
    assert_eq!(
        put("nsqlookupd_tcp_addresses", addrs.to_string().as_bytes()),
        addrs
    );
    // Every shard took it: ask on many connections (spread over the shards).
    for _ in 0..8 {
        assert_eq!(get("nsqlookupd_tcp_addresses"), addrs);
        assert_eq!(get("log_level"), 3);
    }
    broker.assert_alive();
}

#[test]
fn http_config_answers_a_string_as_its_bare_text_as_nsqd() {
    // nsqd's V1 API writes a string as it is (Go then sniffs `text/plain; charset=utf-8`; an
    // empty one has no body and no Content-Type) and everything else as JSON; scripts read
    // `/config/data_path` as the path itself.
    let mut broker = Broker::start(2, &["--statsd-prefix=svc.%s"]);
    let data = broker.data_path().display().to_string();
    for (opt, want) in [
        ("data_path", data.as_str()),
        ("statsd_prefix", "svc.%s"),
        ("log_prefix", "[nsqd] "),
        ("tcp_address", &broker.tcp.to_string()),
        ("auth_http_request_method", "get"),
    ] {
        let r = broker.get(&format!("/config/{opt}"));
        assert_eq!((r.status, r.text()), (200, want.to_string()), "{opt}");
        assert_eq!(
            r.header("Content-Type"),
            Some("text/plain; charset=utf-8"),
            "{opt}"
        );
        assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
    }
    for opt in ["tls_cert", "https_address", "statsd_address"] {
        let r = broker.get(&format!("/config/{opt}"));
        assert_eq!((r.status, r.text()), (200, String::new()), "{opt}");
        assert_eq!(r.header("Content-Type"), None, "{opt}");
        assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
    }
    // Numbers, booleans and lists stay JSON.
    for (opt, want) in [
        ("max_msg_size", "1048576"),
        ("deflate", "true"),
        ("nsqlookupd_tcp_addresses", "[]"),
    ] {
        let r = broker.get(&format!("/config/{opt}"));
        assert_eq!((r.status, r.text()), (200, want.to_string()), "{opt}");
        assert_eq!(
            r.header("Content-Type"),
            Some("application/json; charset=utf-8"),
            "{opt}"
        );
    }
    broker.assert_alive();
}

#[test]
fn http_info_reports_the_listening_ports_and_config_the_broadcast_ones() {
    let broker = Broker::start(
        1,
        &["--broadcast-tcp-port=14150", "--broadcast-http-port=14151"],
    );
    let info = broker.get("/info").json();
    assert_eq!(info["tcp_port"], broker.tcp.port());
    assert_eq!(info["http_port"], broker.http.port());
    let get = |opt: &str| broker.get(&format!("/config/{opt}")).json();
    assert_eq!(get("broadcast_tcp_port"), 14150);
    assert_eq!(get("broadcast_http_port"), 14151);
}

#[test]
fn http_metrics_report_topics_channels_and_shards() {
    let mut broker = Broker::start(2, &[]);
    assert_eq!(broker.post("/mpub?topic=m", b"a\nb").status, 200);
    assert_eq!(
        broker
            .post("/channel/create?topic=m&channel=mc", b"")
            .status,
        200
    );
    let r = broker.get("/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = r.text();
    for want in [
        "nsq_topic_messages_total{topic=\"m\"} 2\n",
        "nsq_topic_message_bytes_total{topic=\"m\"} 2\n",
        "nsq_channel_depth{topic=\"m\",channel=\"mc\"} 2\n",
        "nsq_channel_clients{topic=\"m\",channel=\"mc\"} 0\n",
        "nsq_healthy 1\n",
        "nsq_shard_outbox_depth{shard=\"0\",peer=\"1\"} ",
        "nsq_shard_outbox_depth{shard=\"1\",peer=\"0\"} ",
        "nsq_shard_http_requests_total{shard=\"1\"} ",
        "nsq_channel_e2e_processing_latency_seconds_count{topic=\"m\",channel=\"mc\"} 0\n",
        "nsq_channel_e2e_processing_latency_seconds_sum{topic=\"m\",channel=\"mc\"} 0\n",
        "nsq_topic_e2e_processing_latency_seconds_sum{topic=\"m\"} 0\n",
        "# TYPE nsq_data_path_size_bytes gauge\n",
        "# TYPE nsq_data_path_available_bytes gauge\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    let (size, available) = (
        gauge("nsq_data_path_size_bytes"),
        gauge("nsq_data_path_available_bytes"),
    );
    assert!(0 < size && available <= size, "{size} {available}");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = line.rsplit_once(' ').expect("name value");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    broker.assert_alive();
}

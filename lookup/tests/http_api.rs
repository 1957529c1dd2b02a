//! The HTTP API against the recorded nsqlookupd responses: status codes, headers, bodies byte
//! for byte where the fixture pins them, JSON shapes otherwise; and the HTTP/1.1 handling.

mod support;

use serde_json::{json, Value};
use support::{assert_same_shape, fixture, http_exchange, parse_responses, wait_until, Lookupd};

#[test]
fn http_recorded_cases_match_byte_for_byte() {
    let lookupd = Lookupd::start(&[]);
    let cases = fixture("nsqlookupd_http_responses.json");
    let cases = cases["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for case in cases {
        let request = case["request"].as_str().expect("request");
        let (method, target) = request.split_once(' ').expect("method and target");
        let r = lookupd.http(method, target);
        assert_eq!(u64::from(r.status), case["status"], "{request}: status");
        assert_eq!(
            r.body,
            case["body"].as_str().expect("body"),
            "{request}: body"
        );
        assert_eq!(
            r.header("Content-Type"),
            case["content_type"].as_str(),
            "{request}: Content-Type"
        );
        assert_eq!(
            r.header("X-NSQ-Content-Type"),
            case["x_nsq_content_type"].as_str(),
            "{request}: X-NSQ-Content-Type"
        );
    }
}

#[test]
fn http_lookup_topics_channels_nodes_info_have_nsqlookupds_shapes() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = lookupd.peer("127.0.0.1", 4151);
    assert_eq!(peer.command("REGISTER t c"), "OK");

    let lookup = lookupd.get_json("/lookup?topic=t");
    assert_same_shape(&lookup, &fixture("nsqlookupd_lookup.json"), "lookup");
    assert_eq!(lookup["channels"], json!(["c"]));
    let producer = &lookup["producers"][0];
    assert_eq!(producer["broadcast_address"], "127.0.0.1");
    assert_eq!(producer["hostname"], "test-host");
    assert_eq!(producer["tcp_port"], 4150);
    assert_eq!(producer["http_port"], 4151);
    assert_eq!(producer["version"], "1.3.0");
    let remote = producer["remote_address"].as_str().expect("remote_address");
    assert_eq!(remote, peer.stream.local_addr().expect("addr").to_string());

    let topics = lookupd.get_json("/topics");
    assert_same_shape(&topics, &fixture("nsqlookupd_topics.json"), "topics");
    assert_eq!(topics, json!({ "topics": ["t"] }));

    let channels = lookupd.get_json("/channels?topic=t");
    assert_same_shape(&channels, &fixture("nsqlookupd_channels.json"), "channels");
    assert_eq!(channels, json!({ "channels": ["c"] }));
    assert_eq!(
        lookupd.get_json("/channels?topic=never"),
        json!({ "channels": [] })
    );

    let nodes = lookupd.get_json("/nodes");
    assert_same_shape(&nodes, &fixture("nsqlookupd_nodes.json"), "nodes");
    assert_eq!(nodes["producers"][0]["topics"], json!(["t"]));
    assert_eq!(nodes["producers"][0]["tombstones"], json!([false]));

    let info = lookupd.get_json("/info");
    assert_same_shape(&info, &fixture("nsqlookupd_info.json"), "info");
    assert_eq!(info, fixture("nsqlookupd_info.json"));
}

#[test]
fn http_producer_fields_are_in_nsqlookupds_order() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = lookupd.peer("127.0.0.1", 4151);
    assert_eq!(peer.command("REGISTER t"), "OK");
    let body = lookupd.http("GET", "/lookup?topic=t").body;
    let order = [
        "\"channels\"",
        "\"producers\"",
        "\"remote_address\"",
        "\"hostname\"",
        "\"broadcast_address\"",
        "\"tcp_port\"",
        "\"http_port\"",
        "\"version\"",
    ];
    let positions: Vec<usize> = order.iter().map(|k| body.find(k).expect(k)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{body}");
    let body = lookupd.http("GET", "/nodes").body;
    let version = body.find("\"version\"").expect("version");
    let tombstones = body.find("\"tombstones\"").expect("tombstones");
    let topics = body.find("\"topics\"").expect("topics");
    assert!(version < tombstones && tombstones < topics, "{body}");
}

#[test]
fn http_create_and_delete_topics_and_channels() {
    let lookupd = Lookupd::start(&[]);
    let r = lookupd.http("POST", "/topic/create?topic=t1");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "");
    assert_eq!(r.header("Content-Type"), None);
    assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
    assert_eq!(
        lookupd.get_json("/lookup?topic=t1"),
        json!({ "channels": [], "producers": [] })
    );

    assert_eq!(
        lookupd
            .http("POST", "/channel/create?topic=t2&channel=c")
            .status,
        200
    );
    assert_eq!(
        lookupd.get_json("/topics"),
        json!({ "topics": ["t1", "t2"] })
    );
    assert_eq!(
        lookupd.get_json("/channels?topic=t2"),
        json!({ "channels": ["c"] })
    );

    assert_eq!(
        lookupd
            .http("POST", "/channel/delete?topic=t2&channel=c")
            .status,
        200
    );
    assert_eq!(
        lookupd.get_json("/channels?topic=t2"),
        json!({ "channels": [] })
    );

    assert_eq!(
        lookupd
            .http("POST", "/channel/create?topic=t1&channel=c")
            .status,
        200
    );
    assert_eq!(lookupd.http("POST", "/topic/delete?topic=t1").status, 200);
    assert_eq!(lookupd.get_json("/topics"), json!({ "topics": ["t2"] }));
    assert_eq!(
        lookupd.get_json("/channels?topic=t1"),
        json!({ "channels": [] })
    );
    assert_eq!(lookupd.http("GET", "/lookup?topic=t1").status, 404);
    // deleting what is not there is fine for a topic
    assert_eq!(
        lookupd.http("POST", "/topic/delete?topic=never").status,
        200
    );

    let errors: &[(&str, &str, u16, &str)] = &[
        ("POST", "/topic/create", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/topic/delete", 400, "MISSING_ARG_TOPIC"),
        (
            "POST",
            "/channel/create?topic=t",
            400,
            "MISSING_ARG_CHANNEL",
        ),
        (
            "POST",
            "/channel/create?topic=t&channel=bad!",
            400,
            "INVALID_ARG_CHANNEL",
        ),
        (
            "POST",
            "/channel/create?channel=c",
            400,
            "MISSING_ARG_TOPIC",
        ),
        (
            "POST",
            "/channel/delete?topic=bad!&channel=c",
            400,
            "INVALID_ARG_TOPIC",
        ),
        ("POST", "/topic/tombstone", 400, "MISSING_ARG_TOPIC"),
        ("GET", "/lookup?topic=%zz", 400, "INVALID_REQUEST"),
        ("GET", "/channels?topic=a;b", 400, "INVALID_REQUEST"),
        ("GET", "/topic/create?topic=t", 405, "METHOD_NOT_ALLOWED"),
        ("POST", "/lookup?topic=t", 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/create_topic?topic=t", 404, "NOT_FOUND"),
        ("GET", "/nope", 404, "NOT_FOUND"),
    ];
    for (method, target, status, message) in errors {
        let r = lookupd.http(method, target);
        assert_eq!(r.status, *status, "{method} {target}");
        assert_eq!(r.json(), json!({ "message": message }), "{method} {target}");
        assert_eq!(
            r.header("Content-Type"),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
    }
    assert_eq!(
        lookupd.http("GET", "/topic/create").header("Allow"),
        Some("POST, OPTIONS")
    );
}

#[test]
fn http_tombstone_hides_a_producer_from_lookup_until_it_expires() {
    let lookupd = Lookupd::start(&["--tombstone-lifetime", "1s"]);
    let mut a = lookupd.peer("127.0.0.1", 4151);
    let mut b = lookupd.peer("127.0.0.1", 5151);
    assert_eq!(a.command("REGISTER t"), "OK");
    assert_eq!(b.command("REGISTER t"), "OK");
    assert_eq!(b.command("REGISTER u"), "OK");
    let r = lookupd.http("POST", "/topic/tombstone?topic=t&node=127.0.0.1:5151");
    assert_eq!((r.status, r.body.as_str()), (200, ""));

    let ports = |v: &Value| -> Vec<u64> {
        v["producers"]
            .as_array()
            .expect("producers")
            .iter()
            .filter_map(|p| p["http_port"].as_u64())
            .collect()
    };
    assert_eq!(ports(&lookupd.get_json("/lookup?topic=t")), [4151]);
    assert_eq!(ports(&lookupd.get_json("/lookup?topic=u")), [5151]);
    let nodes = lookupd.get_json("/nodes");
    assert_eq!(ports(&nodes), [4151, 5151]);
    assert_eq!(nodes["producers"][1]["topics"], json!(["t", "u"]));
    assert_eq!(nodes["producers"][1]["tombstones"], json!([true, false]));
    let debug = lookupd.get_json("/debug");
    let tombstoned: Vec<bool> = debug["topic:t:"]
        .as_array()
        .expect("topic:t:")
        .iter()
        .filter_map(|p| p["tombstoned"].as_bool())
        .collect();
    assert_eq!(tombstoned, [false, true]);

    wait_until("the tombstone to expire", || {
        ports(&lookupd.get_json("/lookup?topic=t")) == [4151, 5151]
    });
    assert_eq!(
        lookupd.get_json("/nodes")["producers"][1]["tombstones"],
        json!([false, false])
    );
}

#[test]
fn http_debug_lists_every_registration_with_its_producers() {
    let lookupd = Lookupd::start(&[]);
    let mut peer = lookupd.peer("127.0.0.1", 4151);
    assert_eq!(peer.command("REGISTER t c"), "OK");
    let debug = lookupd.get_json("/debug");
    let keys: Vec<_> = debug.as_object().expect("object").keys().cloned().collect();
    assert_eq!(keys, ["channel:t:c", "client::", "topic:t:"]);
    let entry = &debug["topic:t:"][0];
    let shape = json!({
        "broadcast_address": "", "hostname": "", "http_port": 0, "id": "",
        "last_update": 0, "tcp_port": 0, "tombstoned": false, "tombstoned_at": 0,
        "version": "",
    });
    assert_same_shape(entry, &shape, "debug entry");
    assert_eq!(
        entry["id"],
        peer.stream.local_addr().expect("addr").to_string()
    );
    assert!(entry["last_update"].as_i64().expect("last_update") > 0);
}

#[test]
fn http_keep_alive_pipelining_and_close() {
    let lookupd = Lookupd::start(&[]);
    let raw = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\nGET /info HTTP/1.1\r\nHost: x\r\n\r\nGET /topics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /ping HTTP/1.1\r\n\r\n";
    let responses = parse_responses(&http_exchange(lookupd.http, raw));
    let bodies: Vec<&str> = responses.iter().map(|r| r.body.as_str()).collect();
    assert_eq!(bodies, ["OK", "{\"version\":\"1.3.0\"}", "{\"topics\":[]}"]);
    assert_eq!(responses[2].header("Connection"), Some("close"));

    // HTTP/1.0 closes after one answer unless it asks to keep the connection
    let responses = parse_responses(&http_exchange(
        lookupd.http,
        b"GET /ping HTTP/1.0\r\n\r\nGET /ping HTTP/1.0\r\n\r\n",
    ));
    assert_eq!(responses.len(), 1);

    // a body is read and ignored; chunked too
    let responses = parse_responses(&http_exchange(
        lookupd.http,
        b"POST /topic/create?topic=b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyzPOST /topic/create?topic=c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\nGET /topics HTTP/1.1\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!(responses.len(), 3);
    assert_eq!(responses[2].json(), json!({ "topics": ["b", "c"] }));
}

#[test]
fn http_malformed_requests_get_400_and_a_close() {
    let lookupd = Lookupd::start(&[]);
    for raw in [
        &b"NOT HTTP AT ALL\r\n\r\n"[..],
        b"GET /ping HTTP/1.1\r\nBroken header line\r\n\r\n",
        b"POST /topic/create?topic=t HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"GET /ping HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let responses = parse_responses(&http_exchange(lookupd.http, raw));
        assert_eq!(responses.len(), 1, "{}", String::from_utf8_lossy(raw));
        assert_eq!(responses[0].status, 400, "{}", String::from_utf8_lossy(raw));
        assert_eq!(responses[0].header("Connection"), Some("close"));
    }
    let responses = parse_responses(&http_exchange(
        lookupd.http,
        b"POST /topic/create?topic=t HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
    ));
    assert_eq!(responses[0].status, 413);
    // the lookup is still serving
    assert_eq!(lookupd.http("GET", "/ping").body, "OK");
}

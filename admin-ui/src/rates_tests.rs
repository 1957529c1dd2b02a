//! The ring and the rate arithmetic: counter resets, restarts, gaps, new series, the cap.

use super::*;

fn stats(start: u64, topics: Value) -> Value {
    json!({ "start_time": start, "topics": topics, "memory": {"heap_in_use_bytes": 1000} })
}

/// One topic `t` with `count` messages and a channel `c` whose one client has FIN'd `fin`.
fn one(start: u64, count: u64, fin: u64) -> Value {
    stats(
        start,
        json!([{ "topic_name": "t", "message_count": count, "depth": 5,
                 "e2e_processing_latency": {"count": 1, "percentiles": [
                     {"quantile": 0.99, "value": 2000.0}, {"quantile": 0.5, "value": 1000.0}]},
                 "channels": [{ "channel_name": "c", "message_count": count, "depth": 3,
                                "in_flight_count": 2, "deferred_count": 0, "client_count": 1,
                                "clients": [{"remote_address": "1.2.3.4:5", "connect_ts": 7,
                                             "finish_count": fin}] }] }]),
    )
}

/// The keys of every series now kept.
fn keys(store: &Store) -> std::collections::BTreeSet<Key> {
    store.series.keys().cloned().collect()
}

/// `answers` as read at `secs`.
fn at(
    secs: f64,
    answers: impl IntoIterator<Item = (String, Value)>,
) -> Vec<(String, crate::wire::Stats, f64)> {
    answers
        .into_iter()
        .map(|(n, v)| (n, read(v), secs))
        .collect()
}

/// `v` read as a broker's `/stats`.
fn read(v: Value) -> crate::wire::Stats {
    serde_json::from_value(v).unwrap()
}

fn nodes(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn last(store: &Store, key: &Key, field: usize) -> Option<f32> {
    let p = store.series.get(key)?.ring.last()?;
    let v = p.v[field];
    v.is_finite().then_some(v)
}

fn topic() -> Key {
    Key::Topic("t".into())
}

fn channel() -> Key {
    Key::Channel("t".into(), "c".into())
}

#[test]
fn rate_is_the_increase_per_second_and_none_across_a_reset() {
    assert_eq!(rate(100, 300, 2.0), Some(100.0));
    assert_eq!(rate(100, 100, 1.0), Some(0.0));
    assert_eq!(rate(300, 100, 1.0), None, "a counter going down is a reset");
    assert_eq!(rate(1, 2, 0.0), None);
    assert_eq!(rate(1, 2, -1.0), None);
    assert_eq!(rate(1, 2, f64::NAN), None);
}

#[test]
fn ring_keeps_its_size_and_the_window() {
    let mut r = Ring::new(3);
    let p = |t_ms| Point {
        t_ms,
        v: [0.0; FIELDS],
    };
    for t in 1..=5 {
        r.push(p(t * 1000));
    }
    assert_eq!(r.iter().count(), 3);
    assert_eq!(
        r.iter().map(|p| p.t_ms).collect::<Vec<_>>(),
        [3000, 4000, 5000]
    );
    // A point a window later pushes out everything older than the window.
    r.push(p(5000 + WINDOW_SECS * 1000 + 1));
    assert_eq!(r.iter().count(), 1);
}

#[test]
fn ring_length_and_series_cap_follow_the_interval() {
    let s = Store::new(Duration::from_secs(10));
    assert_eq!(s.ring_len, 181);
    assert_eq!(s.cap, MAX_POINTS / 181);
    let s = Store::new(Duration::from_secs(1));
    assert_eq!(s.ring_len, 1801);
    assert_eq!(s.cap, 582);
}

#[test]
fn rates_in_and_out_from_two_readings() {
    let mut s = Store::new(Duration::from_secs(1));
    let n = nodes(&["a"]);
    s.record(1000, &n, &at(10.0, [("a".into(), one(1, 100, 10))]), true);
    // First reading: figures but no rate.
    assert_eq!(last(&s, &topic(), IN), None);
    assert_eq!(last(&s, &topic(), DEPTH), Some(5.0));
    assert_eq!(last(&s, &channel(), IN_FLIGHT), Some(2.0));
    s.record(3000, &n, &at(12.0, [("a".into(), one(1, 500, 110))]), true);
    assert_eq!(last(&s, &topic(), IN), Some(200.0));
    assert_eq!(last(&s, &channel(), IN), Some(200.0));
    assert_eq!(last(&s, &channel(), OUT), Some(50.0));
    assert_eq!(last(&s, &topic(), OUT), Some(50.0));
    let node = Key::Node("a".into());
    assert_eq!(last(&s, &node, IN), Some(200.0));
    assert_eq!(
        last(&s, &node, DEPTH),
        Some(8.0),
        "the topic's depth and its channel's"
    );
    assert_eq!(last(&s, &node, MEMORY), Some(1000.0));
    assert_eq!(last(&s, &topic(), E2E), Some(2000.0));
    assert_eq!(s.series[&topic()].quantiles, [0.99, 0.5]);
}

#[test]
fn a_counter_reset_or_a_restart_gives_no_rate_then_counts_again() {
    let mut s = Store::new(Duration::from_secs(1));
    let n = nodes(&["a"]);
    s.record(1000, &n, &at(1.0, [("a".into(), one(1, 1000, 0))]), true);
    s.record(2000, &n, &at(2.0, [("a".into(), one(1, 1100, 0))]), true);
    assert_eq!(last(&s, &topic(), IN), Some(100.0));
    // The counter went down (same start time): no rate, never negative nor huge.
    s.record(3000, &n, &at(3.0, [("a".into(), one(1, 40, 0))]), true);
    assert_eq!(last(&s, &topic(), IN), None);
    s.record(4000, &n, &at(4.0, [("a".into(), one(1, 90, 0))]), true);
    assert_eq!(last(&s, &topic(), IN), Some(50.0));
    // A restart (new start_time) with a counter that happens to be higher: no rate either.
    s.record(5000, &n, &at(5.0, [("a".into(), one(2, 5000, 0))]), true);
    assert_eq!(last(&s, &topic(), IN), None);
    assert_eq!(last(&s, &channel(), OUT), None);
    s.record(6000, &n, &at(6.0, [("a".into(), one(2, 5010, 0))]), true);
    assert_eq!(last(&s, &topic(), IN), Some(10.0));
}

#[test]
fn a_gap_gives_the_average_over_it() {
    let mut s = Store::new(Duration::from_secs(1));
    let n = nodes(&["a", "b"]);
    let both = |c: u64| vec![("a".into(), one(1, c, 0)), ("b".into(), one(1, c, 0))];
    s.record(1000, &n, &at(1.0, both(0)), true);
    s.record(2000, &n, &at(2.0, both(100)), true);
    assert_eq!(last(&s, &topic(), IN), Some(200.0), "summed over the nodes");
    // b does not answer for two rounds: the topic keeps a's part, the series are kept.
    s.record(3000, &n, &at(3.0, [("a".into(), one(1, 200, 0))]), false);
    s.record(4000, &n, &at(4.0, [("a".into(), one(1, 300, 0))]), false);
    assert_eq!(last(&s, &topic(), IN), Some(100.0));
    assert!(keys(&s).contains(&Key::Node("b".into())));
    // b answers again: its 300 messages over the 3 s since its last answer.
    s.record(5000, &n, &at(5.0, both(400)), true);
    assert_eq!(last(&s, &topic(), IN), Some(100.0 + 100.0));
    assert_eq!(s.series[&topic()].ring.iter().count(), 5);
}

#[test]
fn new_clients_count_from_zero_and_gone_ones_are_forgotten() {
    let mut s = Store::new(Duration::from_secs(1));
    let n = nodes(&["a"]);
    let with = |clients: Value| {
        stats(
            1,
            json!([{ "topic_name": "t", "message_count": 0,
                     "channels": [{ "channel_name": "c", "message_count": 0,
                                    "clients": clients }] }]),
        )
    };
    let c = |addr: &str, fin: u64| json!({"remote_address": addr, "connect_ts": 1, "finish_count": fin});
    s.record(
        1000,
        &n,
        &at(1.0, [("a".into(), with(json!([c("x:1", 50)])))]),
        true,
    );
    s.record(
        2000,
        &n,
        &at(
            2.0,
            [("a".into(), with(json!([c("x:1", 60), c("y:1", 5)])))],
        ),
        true,
    );
    assert_eq!(last(&s, &channel(), OUT), Some(15.0));
    // x left, y stays; x's address comes back as a new connection later.
    s.record(
        3000,
        &n,
        &at(3.0, [("a".into(), with(json!([c("y:1", 9)])))]),
        true,
    );
    assert_eq!(last(&s, &channel(), OUT), Some(4.0));
    s.record(
        4000,
        &n,
        &at(4.0, [("a".into(), with(json!([c("x:1", 3), c("y:1", 9)])))]),
        true,
    );
    assert_eq!(last(&s, &channel(), OUT), Some(3.0));
}

#[test]
fn series_of_what_disappeared_are_dropped_only_when_everything_answered() {
    let mut s = Store::new(Duration::from_secs(1));
    let n = nodes(&["a", "b"]);
    s.record(
        1000,
        &n,
        &at(
            1.0,
            [
                ("a".into(), one(1, 1, 0)),
                ("b".into(), stats(1, json!([]))),
            ],
        ),
        true,
    );
    assert!(keys(&s).contains(&topic()));
    // a does not answer: its topic is kept.
    s.record(
        2000,
        &n,
        &at(2.0, [("b".into(), stats(1, json!([])))]),
        false,
    );
    assert!(keys(&s).contains(&topic()));
    // everything answered and no node has it: dropped.
    let gone = [
        ("a".into(), stats(1, json!([]))),
        ("b".into(), stats(1, json!([]))),
    ];
    s.record(3000, &n, &at(3.0, gone), true);
    assert!(!keys(&s).contains(&topic()) && !keys(&s).contains(&channel()));
    assert_eq!(
        keys(&s),
        [Key::Node("a".into()), Key::Node("b".into())].into()
    );
    // A node no longer known loses its series and its baseline.
    let only_b = nodes(&["b"]);
    s.record(
        4000,
        &only_b,
        &at(4.0, [("b".into(), stats(1, json!([])))]),
        true,
    );
    assert_eq!(keys(&s), [Key::Node("b".into())].into());
    assert!(!s.bases.contains_key("a"));
}

#[test]
fn past_the_cap_new_series_are_refused_and_old_ones_go_on() {
    let mut s = Store::new(Duration::from_secs(1));
    s.cap = 3; // node a, topic t, channel t/c
    let n = nodes(&["a"]);
    s.record(1000, &n, &at(1.0, [("a".into(), one(1, 0, 0))]), true);
    let two = stats(
        1,
        json!([{"topic_name": "t", "message_count": 10, "channels": []},
               {"topic_name": "u", "message_count": 10, "channels": []}]),
    );
    s.record(2000, &n, &at(2.0, [("a".into(), two)]), true);
    assert_eq!(s.refused, 1);
    assert!(!keys(&s).contains(&Key::Topic("u".into())));
    assert_eq!(last(&s, &topic(), IN), Some(10.0));
    assert_eq!(s.summary()["refused_series"], 1);
}

#[test]
fn json_columns_with_nulls_for_what_is_not_known() {
    let mut s = Store::new(Duration::from_secs(1));
    let n = nodes(&["a"]);
    s.record(1000, &n, &at(1.0, [("a".into(), one(1, 0, 0))]), true);
    s.record(2000, &n, &at(2.0, [("a".into(), one(1, 3, 1))]), true);
    let j = s.series_json(&channel());
    assert_eq!(j["t"], json!([1000, 2000]));
    assert_eq!(j["in"], json!([null, 3.0]));
    assert_eq!(j["out"], json!([null, 1.0]));
    assert_eq!(j["in_flight"], json!([2.0, 2.0]));
    assert_eq!(j["e2e"], json!([]), "the channel reports no percentiles");
    let tj = s.series_json(&topic());
    assert_eq!(tj["e2e"][0]["quantile"], 0.99);
    assert_eq!(tj["e2e"][1]["values"], json!([1000.0, 1000.0]));
    assert_eq!(j["latest"]["in"], 3.0);
    assert_eq!(j["of"], json!({"channel": {"topic": "t", "channel": "c"}}));
    let none = s.series_json(&Key::Topic("nope".into()));
    assert_eq!(none["t"], json!([]));
    assert_eq!(none["latest"]["in"], Value::Null);
    let sum = s.summary();
    assert_eq!(sum["topics"]["t"]["in_series"], json!([null, 3.0]));
    assert_eq!(sum["channels"]["t"]["c"]["out"], 1.0);
    assert_eq!(sum["nodes"]["a"]["memory"], 1000.0);
}

#[test]
fn each_node_is_timed_by_its_own_reading() {
    let mut s = Store::new(Duration::from_secs(1));
    let n = nodes(&["a", "b"]);
    let first = [
        ("a".into(), read(one(1, 0, 0)), 1.0),
        ("b".into(), read(one(1, 0, 0)), 1.0),
    ];
    s.record(1000, &n, &first, true);
    // b answered half a second later than a in the second round.
    let second = [
        ("a".into(), read(one(1, 100, 0)), 2.0),
        ("b".into(), read(one(1, 150, 0)), 2.5),
    ];
    s.record(2000, &n, &second, true);
    assert_eq!(last(&s, &Key::Node("a".into()), IN), Some(100.0));
    assert_eq!(last(&s, &Key::Node("b".into()), IN), Some(100.0));
    assert_eq!(last(&s, &topic(), IN), Some(200.0));
}

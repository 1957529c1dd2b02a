//! The result file: it round-trips through JSON unchanged and carries every field reports
//! and other tools read.

mod common;

use common::canned;
use shard_bench::result::BenchResult;

#[test]
fn a_result_survives_a_json_round_trip() {
    let r = canned("pubsub run", "pubsub", 1_000_000.0);
    let back = BenchResult::from_json(&r.to_json()).expect("reads back");
    assert_eq!(back, r);
}

#[test]
fn the_json_has_the_fields_other_tools_read() {
    let r = canned("pubsub run", "pubsub", 1_000_000.0);
    let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    for path in [
        "/format",
        "/mode",
        "/published/msgs_per_s",
        "/published/mb_per_s",
        "/consumed/messages",
        "/ack_latency_us/p99",
        "/e2e_latency_us/p999",
        "/e2e_latency_us/max",
        "/series/0/sub_per_s",
        "/broker/cpu_s_per_million_pub",
        "/broker/peak_rss_kb",
        "/settings/batch_size",
        "/targets/0/met",
    ] {
        assert!(v.pointer(path).is_some(), "missing {path}");
    }
}

#[test]
fn targets_are_checked_against_the_measured_values() {
    let r = canned("x", "pubsub", 1_000_000.0);
    assert_eq!(r.targets.len(), 2);
    assert!(!r.targets[0].met, "1M msg/s is below 1.2M");
    assert_eq!(r.targets[0].measured, Some(1_000_000.0));
    assert!(r.targets[1].met, "0.55 µs is within 0.6");
}

#[test]
fn a_file_that_is_not_a_result_is_refused_clearly() {
    let dir = std::env::temp_dir().join(format!("shard-bench-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.json");
    std::fs::write(&path, "{\"hello\": 1}").unwrap();
    let err = BenchResult::read(&path).unwrap_err().to_string();
    assert!(err.contains("not a shard-bench result"), "{err}");
    let good = dir.join("good.json");
    let r = canned("x", "pub", 10.0);
    r.write(&good).unwrap();
    assert_eq!(BenchResult::read(&good).unwrap(), r);
    std::fs::remove_dir_all(&dir).unwrap();
}

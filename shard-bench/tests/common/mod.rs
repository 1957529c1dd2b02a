//! A canned result for the JSON and report tests.

use shard_bench::result::{
    BenchResult, BrokerUsage, Percentiles, Sample, Settings, Target, Throughput, FORMAT,
};

pub fn canned(label: &str, mode: &str, rate: f64) -> BenchResult {
    let p = |base: f64| Percentiles {
        count: 1000,
        mean: base * 1.2,
        p50: base,
        p90: base * 2.0,
        p99: base * 5.0,
        p999: base * 10.0,
        max: base * 40.0,
    };
    let mut r = BenchResult {
        format: FORMAT,
        label: label.to_string(),
        mode: mode.to_string(),
        command: format!("shard-bench {mode} --duration 3s"),
        settings: Settings {
            brokers: vec!["127.0.0.1:4150".into()],
            lookupds: vec![],
            topic: "bench".into(),
            channels: vec!["bench".into()],
            size: 200,
            batch_size: 200,
            connections: 4,
            sub_connections: 4,
            max_in_flight: 2500,
            output_buffer_timeout_ms: 250,
            pipeline: 1,
            duration_s: 3.0,
            warmup_s: 0.0,
            rate: None,
            count: None,
            threads: 1,
            cpus: vec![],
            blocking: false,
            features: Vec::new(),
        },
        started_at: 1_700_000_000,
        elapsed_s: 3.0,
        published: Throughput::new((rate * 3.0) as u64, (rate * 600.0) as u64, 3.0),
        consumed: Throughput::new((rate * 3.0) as u64, (rate * 600.0) as u64, 3.0),
        errors: 0,
        ack_latency_us: Some(p(300.0)),
        e2e_latency_us: Some(p(150.0)),
        series: (1..=3)
            .map(|t| Sample {
                t: t as f64,
                // Whole numbers: serde_json's float parsing is not exact to the last bit.
                pub_per_s: ((rate as u64) * (18 + t) / 20) as f64,
                sub_per_s: rate,
            })
            .collect(),
        broker: Some(BrokerUsage {
            pid: 4242,
            cpu_s: 2.5,
            cpu_s_per_million_pub: Some(0.8),
            cpu_s_per_million_sub: Some(0.55),
            peak_rss_kb: 204_800,
            rss_kb: 102_400,
        }),
        targets: vec![],
        host_load: Some(1.5),
    };
    r.check_targets(&[
        "sub_rate>=1200000".parse::<Target>().unwrap(),
        "cpu_us_per_sub<=0.6".parse().unwrap(),
    ]);
    r
}

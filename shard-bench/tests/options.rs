//! Option parsing: what the command line accepts, what it refuses, and the defaults a plan gets.

use clap::Parser;
use shard_bench::options::{Cli, Command, Mode, RawWorkload};
use shard_bench::result::Target;
use std::time::Duration;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("shard-bench").chain(args.iter().copied()))
}

fn load_args(args: &[&str]) -> shard_bench::options::LoadArgs {
    match parse(args).expect("parses").command {
        Command::Pub(a) | Command::Sub(a) | Command::Pubsub(a) => a,
        Command::Raw(r) => r.load,
        Command::Compare(c) => c.load,
        Command::Report(_) | Command::Sink(_) => panic!("not a load command"),
    }
}

#[test]
fn pub_with_every_load_option_gives_a_plan_with_those_values() {
    let a = load_args(&[
        "pub",
        "--nsqd-tcp-address",
        "127.0.0.1:4150",
        "--nsqd-tcp-address",
        "127.0.0.1:5150",
        "--topic",
        "t1",
        "--size",
        "512",
        "--batch-size",
        "1",
        "--connections",
        "3",
        "--pipeline",
        "8",
        "--duration",
        "1m30s",
        "--warmup",
        "250ms",
        "--rate",
        "100000",
        "--count",
        "5000",
        "--threads",
        "2",
        "--cpus",
        "0",
        "--broker-pid",
        "42",
        "--json",
        "/tmp/x.json",
        "--target",
        "pub_rate>=60000",
    ]);
    let plan = a.plan(Mode::Pub, "pub").expect("valid");
    assert_eq!(plan.brokers, ["127.0.0.1:4150", "127.0.0.1:5150"]);
    assert_eq!(plan.topic, "t1");
    assert_eq!(plan.size, 512);
    assert_eq!(plan.batch_size, 1);
    assert_eq!(plan.connections, 3);
    assert_eq!(plan.pipeline, 8);
    assert_eq!(plan.duration, Duration::from_secs(90));
    assert_eq!(plan.warmup, Duration::from_millis(250));
    assert_eq!(plan.rate, Some(100_000));
    assert_eq!(plan.count, Some(5000));
    assert_eq!(plan.threads, 2);
    assert_eq!(plan.cpus, [0]);
    assert_eq!(plan.placement(1), Some(0));
    assert_eq!(plan.broker_pid, Some(42));
    assert_eq!(plan.targets, ["pub_rate>=60000".parse::<Target>().unwrap()]);
    assert_eq!(plan.label, "pub PUB x3 conn @100000/s");
}

#[test]
fn defaults_are_the_standard_workload_on_the_default_broker() {
    let plan = load_args(&["pubsub"]).plan(Mode::PubSub, "pubsub").unwrap();
    assert_eq!(plan.brokers, ["127.0.0.1:4150"]);
    assert_eq!(plan.topic, "bench");
    assert_eq!(plan.channels, ["bench"]);
    assert_eq!(plan.size, 200);
    assert_eq!(plan.batch_size, 200);
    assert_eq!(plan.connections, 4);
    assert_eq!(plan.sub_connections, 4);
    assert_eq!(plan.max_in_flight, 2500);
    assert_eq!(
        plan.output_buffer_timeout,
        Some(Duration::from_millis(250)),
        "go-nsq's"
    );
    assert_eq!(plan.duration, Duration::from_secs(10));
    assert_eq!(plan.rate, None);
    assert_eq!(plan.threads, 1);
    assert_eq!(plan.placement(0), None);
    assert_eq!(plan.executors(), 1);
}

#[test]
fn output_buffer_timeout_takes_a_duration_or_minus_one() {
    let plan = |v: &str| {
        load_args(&["pubsub", "--output-buffer-timeout", v])
            .plan(Mode::PubSub, "pubsub")
            .map(|p| p.output_buffer_timeout)
    };
    assert_eq!(plan("1s").unwrap(), Some(Duration::from_secs(1)));
    assert_eq!(plan("-1").unwrap(), None);
}

#[test]
fn lookups_alone_mean_no_default_broker() {
    let plan = load_args(&[
        "sub",
        "--lookupd-http-address",
        "127.0.0.1:4161",
        "--channel",
        "a",
        "--channel",
        "b",
    ])
    .plan(Mode::Sub, "sub")
    .unwrap();
    assert!(plan.brokers.is_empty());
    assert_eq!(plan.lookupds, ["127.0.0.1:4161"]);
    assert_eq!(plan.channels, ["a", "b"]);
}

#[test]
fn raw_takes_a_workload() {
    match parse(&["raw", "--workload", "sub", "--connections", "2"])
        .unwrap()
        .command
    {
        Command::Raw(r) => {
            assert_eq!(r.workload, RawWorkload::Sub);
            assert_eq!(r.load.connections, 2);
        }
        other => panic!("parsed as {other:?}"),
    }
}

#[test]
fn malformed_flags_are_refused_by_the_parser() {
    assert!(parse(&["pub", "--duration", "ten seconds"]).is_err());
    assert!(parse(&["pub", "--size", "-1"]).is_err());
    assert!(parse(&["pub", "--no-such-flag"]).is_err());
    assert!(parse(&["pub", "--target", "speed>=1"]).is_err());
    assert!(parse(&["pub", "--target", "pub_rate=1"]).is_err());
    assert!(
        parse(&["report", "--out", "/tmp/x"]).is_err(),
        "report needs results"
    );
    assert!(parse(&["fly"]).is_err());
}

#[test]
fn blocking_is_off_by_default_and_named_in_the_label() {
    assert!(!load_args(&["pub"]).plan(Mode::Pub, "pub").unwrap().blocking);
    let plan = load_args(&[
        "pub",
        "--blocking",
        "--batch-size",
        "1",
        "--connections",
        "1",
    ])
    .plan(Mode::Pub, "pub")
    .unwrap();
    assert!(plan.blocking);
    assert_eq!(plan.label, "pub PUB x1 conn blocking");
}

#[test]
fn values_that_cannot_work_are_refused_with_the_flag_named() {
    let cases: [(&[&str], Mode, &str); 11] = [
        (&["pub", "--size", "8"], Mode::Pub, "--size"),
        (&["pub", "--batch-size", "0"], Mode::Pub, "--batch-size"),
        (&["pub", "--connections", "0"], Mode::Pub, "--connections"),
        (&["pub", "--topic", "bad topic!"], Mode::Pub, "--topic"),
        (&["sub", "--channel", "no/slash"], Mode::Sub, "--channel"),
        (&["sub", "--rate", "1000"], Mode::Sub, "--rate"),
        (&["pub", "--duration", "0s"], Mode::Pub, "--duration"),
        (&["pub", "--cpus", "4096"], Mode::Pub, "--cpus"),
        (&["sub", "--blocking"], Mode::Sub, "--blocking"),
        (&["pub", "--blocking", "--rate", "10"], Mode::Pub, "--rate"),
        (
            &["pub", "--blocking", "--pipeline", "2"],
            Mode::Pub,
            "--pipeline",
        ),
    ];
    for (args, mode, flag) in cases {
        let err = load_args(args)
            .plan(mode, "x")
            .expect_err(&format!("{args:?} should be refused"));
        assert!(err.to_string().contains(flag), "{args:?}: {err}");
    }
}

#[test]
fn targets_parse_both_directions_and_underscored_numbers() {
    let t: Target = "sub_rate>=1_200_000".parse().unwrap();
    assert!(t.at_least && t.value == 1_200_000.0);
    assert!(t.is_met_by(1_300_000.0) && !t.is_met_by(1.0));
    let t: Target = "e2e_p99_us<=1000".parse().unwrap();
    assert!(t.is_met_by(999.0) && !t.is_met_by(1001.0));
    assert_eq!(t.to_string(), "e2e_p99_us<=1000");
}

#[test]
fn security_flags_become_client_features_and_label_parts() {
    let plain = load_args(&["pub"]).plan(Mode::Pub, "pub").unwrap();
    assert_eq!(plain.features, client::Features::default());
    assert!(plain.feature_names.is_empty());

    let plan = load_args(&[
        "pubsub",
        "--tls",
        "--tls-insecure-skip-verify",
        "--deflate",
        "--deflate-level",
        "3",
        "--auth-secret",
        "s3cret",
    ])
    .plan(Mode::PubSub, "pubsub")
    .unwrap();
    assert!(plan.features.tls_v1 && plan.features.tls_config.insecure_skip_verify);
    assert!(plan.features.deflate && !plan.features.snappy);
    assert_eq!(plan.features.deflate_level, 3);
    assert_eq!(plan.features.auth_secret.as_deref(), Some("s3cret"));
    assert_eq!(plan.feature_names, ["tls", "deflate-3", "auth"]);
    assert!(plan.label.ends_with("tls deflate-3 auth"), "{}", plan.label);

    let plan = load_args(&["sub", "--snappy"])
        .plan(Mode::Sub, "sub")
        .unwrap();
    assert!(plan.features.snappy);
    assert_eq!(plan.feature_names, ["snappy"]);
}

#[test]
fn security_flags_that_cannot_work_are_refused() {
    let cases: [(&[&str], &str); 7] = [
        (&["pub", "--snappy", "--deflate"], "--snappy"),
        (
            &["pub", "--deflate", "--deflate-level", "0"],
            "--deflate-level",
        ),
        (&["pub", "--tls-insecure-skip-verify"], "need --tls"),
        (&["pub", "--tls-root-ca-file", "/x.pem"], "need --tls"),
        (&["pub", "--tls", "--tls-cert", "/c.pem"], "--tls-key"),
        (
            &["pub", "--tls", "--tls-root-ca-file", "/nonexistent/ca.pem"],
            "/nonexistent/ca.pem",
        ),
        (&["raw", "--snappy"], "raw"),
    ];
    for (args, what) in cases {
        let name = if args[0] == "raw" { "raw-pub" } else { "pub" };
        let err = load_args(args)
            .plan(Mode::Pub, name)
            .expect_err(&format!("{args:?} should be refused"));
        assert!(err.to_string().contains(what), "{args:?}: {err}");
    }
}

#[test]
fn compare_takes_the_load_flags_after_its_own() {
    let a = load_args(&[
        "compare",
        "--broker",
        "a=x {tcp}",
        "--broker",
        "b=y {tcp}",
        "--workload",
        "pub",
        "--batch-size",
        "1",
        "--connections",
        "2",
    ]);
    assert_eq!((a.batch_size, a.connections), (1, 2));
    assert!(
        parse(&["compare", "--workload", "pub"]).is_err(),
        "--broker is required"
    );
}

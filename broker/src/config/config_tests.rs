//! Unit tests of the flags: nsqd's defaults, Go's forms, and what is refused.

use super::*;

fn parse(args: &[&str]) -> Result<Config, String> {
    let mut v = vec!["broker".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    Config::parse_from(v).map_err(|e| e.to_string())
}

#[test]
fn defaults_are_nsqds() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.tcp_address.port(), 4150);
    assert_eq!(c.http_address.port(), 4151);
    assert_eq!(c.mem_queue_size, 10_000);
    assert_eq!(c.msg_timeout, Duration::from_secs(60));
    assert_eq!(c.max_req_timeout, Duration::from_secs(3600));
    assert_eq!(c.max_rdy_count, 2500);
    assert!(c.shards >= 1);
}

#[test]
fn go_style_flags_and_durations() {
    let c = parse(&[
        "-tcp-address=127.0.0.1:5000",
        "--max-req-timeout=60000ms",
        "-msg-timeout",
        "1m30s",
        "--shards",
        "3",
    ])
    .unwrap();
    assert_eq!(c.tcp_address.port(), 5000);
    assert_eq!(c.max_req_timeout, Duration::from_secs(60));
    assert_eq!(c.msg_timeout, Duration::from_secs(90));
    assert_eq!(c.shards, 3);
}

#[test]
fn bad_flags_are_clear_errors() {
    assert!(parse(&["--no-such-flag"]).is_err());
    assert!(parse(&["--msg-timeout", "60"])
        .unwrap_err()
        .contains("unit"));
    assert!(parse(&["--shards", "0"]).is_err());
    assert!(parse(&["--tcp-address", "127.0.0.1:99999"]).is_err());
    // Not host:port: a unix socket path, as nsqd 1.3 takes it.
    let c = parse(&["--tcp-address", "/run/b.sock", "--http-address=h.sock"]).unwrap();
    assert_eq!(c.tcp_address, ListenAddr::Unix("/run/b.sock".into()));
    assert_eq!((c.tcp_address.port(), c.tcp_address.info_port()), (0, -1));
    assert!(parse(&["--tcp-address=s.sock", "--http-address=s.sock"]).is_err());
    // Lookups refuse port 0: a broadcast port is needed to register.
    let err = parse(&["--tcp-address=t.sock", "--lookupd-tcp-address=l:4160"]).unwrap_err();
    assert!(err.contains("--broadcast-tcp-port"), "{err}");
    assert!(parse(&[
        "--tcp-address=t.sock",
        "--broadcast-tcp-port=4150",
        "--lookupd-tcp-address=l:4160"
    ])
    .is_ok());
    // nsqd would silently not listen: no certificate, no HTTPS.
    let err = parse(&["--https-address", "127.0.0.1:4152"]).unwrap_err();
    assert!(err.contains("--tls-cert"), "{err}");
    assert!(parse(&["--https-address="])
        .unwrap()
        .https_address
        .is_none());
    // Independent limits, as in nsqd: a body limit below the message limit is allowed.
    assert!(parse(&["--max-msg-size", "10", "--max-body-size", "5"]).is_ok());
    assert!(parse(&["--max-body-size", "0"]).is_err());
    assert!(parse(&["--node-id", "1024"])
        .unwrap_err()
        .contains("[0,1024)"));
    assert!(parse(&[
        "--tcp-address=127.0.0.1:5000",
        "--http-address=127.0.0.1:5000"
    ])
    .unwrap_err()
    .contains("two addresses"));
}

/// As Go's flag package: the last of a repeated flag wins; list flags add up.
#[test]
fn a_repeated_flag_takes_its_last_value() {
    let c = parse(&[
        "--data-path=/a",
        "--mem-queue-size=5",
        "--data-path=/b",
        "--lookupd-tcp-address=127.0.0.1:1",
        "--lookupd-tcp-address=127.0.0.1:2",
    ])
    .unwrap();
    assert_eq!(c.data_path, PathBuf::from("/b"));
    assert_eq!(c.mem_queue_size, 5);
    assert_eq!(c.lookupd_tcp_addresses.len(), 2);
}

#[test]
fn auth_flags() {
    let c = parse(&[]).unwrap();
    assert!(!c.auth.enabled());
    assert_eq!(c.auth.method, crate::auth::AuthMethod::Get);
    assert_eq!(c.auth.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.auth.request_timeout, Duration::from_secs(5));
    let c = parse(&[
        "--auth-http-address=127.0.0.1:4181",
        "--auth-http-address",
        "http://auth.local:8080/check",
        "--auth-http-request-method=post",
        "--http-client-connect-timeout=500ms",
        "--http-client-request-timeout=1s",
    ])
    .unwrap();
    assert!(c.auth.enabled());
    assert_eq!(c.auth.servers.len(), 2);
    assert_eq!(c.auth.servers[1].path, "/check");
    assert_eq!(c.auth.method, crate::auth::AuthMethod::Post);
    assert_eq!(c.auth.connect_timeout, Duration::from_millis(500));
    assert_eq!(c.auth.request_timeout, Duration::from_secs(1));
    assert!(parse(&["--auth-http-request-method=put"])
        .unwrap_err()
        .contains("must be post or get"));
    assert!(parse(&["--auth-http-address=https://a/auth"])
        .unwrap_err()
        .contains("https"));
    assert!(parse(&["--auth-http-address=a:b:c"]).is_err());
    assert!(parse(&["--http-client-request-timeout=0s"]).is_err());
}

#[test]
fn version_names_the_nsqd_it_stands_for() {
    let version = <Args as clap::CommandFactory>::command()
        .get_version()
        .unwrap_or_default()
        .to_string();
    assert!(
        version.contains(&format!("nsqd v{}", protocol::NSQD_COMPAT_VERSION)),
        "{version}"
    );
}

#[test]
fn retention_flags_take_durations_and_byte_sizes() {
    let c = parse(&[]).unwrap();
    assert_eq!(
        c.retention_time,
        Duration::ZERO,
        "default: nothing kept, as nsqd"
    );
    assert_eq!(c.retention_bytes, 0);
    let c = parse(&["--retention-time=24h", "-retention-bytes", "10GiB"]).unwrap();
    assert_eq!(c.retention_time, Duration::from_secs(86_400));
    assert_eq!(c.retention_bytes, 10 << 30);
    for bad in [
        &["--retention-bytes=10XB"][..],
        &["--retention-time=10"][..],
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn max_attempts_flag_defaults_to_unlimited() {
    assert_eq!(
        parse(&[]).unwrap().max_attempts,
        0,
        "default: unlimited, as nsqd"
    );
    assert_eq!(parse(&["--max-attempts=5"]).unwrap().max_attempts, 5);
    assert_eq!(parse(&["-max-attempts", "7"]).unwrap().max_attempts, 7);
    for bad in [
        "--max-attempts=-1",
        "--max-attempts=65536",
        "--max-attempts=x",
    ] {
        assert!(parse(&[bad]).is_err(), "{bad}");
    }
}

#[test]
fn replication_address_is_absent_by_default_and_checked_when_given() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.replication_address, None);
    assert!(c.cluster.is_none());
    for good in ["127.0.0.1:4153", "broker-1.internal:4153", "[::1]:4153"] {
        let flag = format!("--replication-address={good}");
        assert_eq!(
            parse(&[&flag]).unwrap().replication_address.as_deref(),
            Some(good)
        );
    }
    // Shard i listens on the port + i: the last one must be a port.
    let ok = parse(&["--replication-address=h:65534", "--shards=2"]).unwrap();
    assert_eq!(ok.replication_address.as_deref(), Some("h:65534"));
    let e = parse(&["--replication-address=h:65500", "--shards=37"]).unwrap_err();
    assert!(
        e.contains("--replication-address") && e.contains("--shards 37") && e.contains("65536"),
        "{e}"
    );
    for (bad, why) in [
        ("127.0.0.1", "no port"),
        ("127.0.0.1:0", "port 0"),
        ("127.0.0.1:x", "not a number"),
        (":4153", "no host"),
        ("0.0.0.0:4153", "unspecified"),
        ("[::]:4153", "unspecified"),
        ("127.0.0.1:65535", "--shards 2"),
    ] {
        let flag = format!("--replication-address={bad}");
        let e = parse(&[&flag, "--shards=2"]).unwrap_err();
        assert!(
            e.contains("--replication-address") && e.contains(why),
            "{bad}: {e}"
        );
    }
}

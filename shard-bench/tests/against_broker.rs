//! A short real run: the release broker started here on ephemeral 127.0.0.1 ports with
//! `--shards 2`, and `shard-bench pubsub` against it for 2 seconds.
//!
//! The broker binary comes from `$BROKER_BIN`, else `test_harness::binary` builds it
//! (`cargo build --release -p broker`, a no-op when fresh).

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};
use test_harness::{binary, free_port, start_broker, Proc, Started};

struct Broker {
    proc: Proc,
    /// HTTP address, host:port.
    http: String,
}

/// Starts a broker with a data directory of its own (tests run in parallel).
fn start(name: &str) -> (Broker, String) {
    start_with(name, &[])
}

/// [`start`] with more broker flags.
fn start_with(name: &str, extra: &[&str]) -> (Broker, String) {
    let mut flags = vec!["--shards", "2"];
    flags.extend_from_slice(extra);
    let prefix = format!("shard-bench-broker-{name}");
    let Started { proc, tcp, http } = start_broker(&binary("broker"), &prefix, &flags);
    (Broker { proc, http }, tcp)
}

/// A plain HTTP/1.0 GET; the body.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(addr).expect("HTTP connect");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("HTTP request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("HTTP response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header and a body");
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    body.to_string()
}

/// Runs shard-bench with `args` plus `--json FILE`; fails unless it exits 0. Returns stdout,
/// stderr and the result JSON.
fn run_bench(args: &[&str], json: &std::path::Path) -> (String, String, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_shard-bench"))
        .args(args)
        .arg("--json")
        .arg(json)
        .output()
        .expect("shard-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "shard-bench failed:\n{stdout}\n{stderr}"
    );
    let text = std::fs::read_to_string(json).expect("result written");
    let v = serde_json::from_str(&text).expect("result is JSON");
    (stdout, stderr, v)
}

#[test]
fn a_two_second_pubsub_run_publishes_consumes_and_writes_its_result() {
    let (broker, addr) = start("pubsub");
    let json = broker.proc.dir().join("result.json");
    let pid = broker.proc.pid().expect("the broker runs").to_string();
    let (stdout, stderr, v) = run_bench(
        &[
            "pubsub",
            "--nsqd-tcp-address",
            &addr,
            "--topic",
            "bench_test",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--batch-size",
            "50",
            "--broker-pid",
            &pid,
        ],
        &json,
    );
    assert!(stderr.contains("msg/s"), "no progress line:\n{stderr}");
    assert!(
        stdout.contains("published:") && stdout.contains("e2e:"),
        "{stdout}"
    );

    let num = |p: &str| {
        v.pointer(p)
            .and_then(|x| x.as_f64())
            .unwrap_or_else(|| panic!("{p} missing in {v:#}"))
    };
    assert_eq!(v["mode"], "pubsub");
    assert!(num("/elapsed_s") >= 1.9, "measured for the duration");
    assert!(
        num("/published/messages") > 1000.0,
        "published too little: {v:#}"
    );
    assert!(
        num("/consumed/messages") > 1000.0,
        "consumed too little: {v:#}"
    );
    assert!(num("/published/msgs_per_s") > 0.0 && num("/consumed/mb_per_s") > 0.0);
    assert_eq!(num("/errors"), 0.0);
    for q in ["p50", "p90", "p99", "p999", "max"] {
        assert!(num(&format!("/ack_latency_us/{q}")) > 0.0);
        assert!(num(&format!("/e2e_latency_us/{q}")) > 0.0);
    }
    assert!(num("/e2e_latency_us/max") >= num("/e2e_latency_us/p50"));
    assert!(
        !v["series"].as_array().unwrap().is_empty(),
        "a sample per second"
    );
    assert!(num("/broker/cpu_s") > 0.0, "the broker worked");
    assert!(num("/broker/cpu_s_per_million_sub") > 0.0);
    assert!(num("/broker/peak_rss_kb") > 0.0);
}

#[test]
fn a_blocking_pub_run_publishes_from_threads_and_records_it() {
    let (broker, addr) = start("blocking");
    let json = broker.proc.dir().join("blocking.json");
    let (_, _, v) = run_bench(
        &[
            "pub",
            "--nsqd-tcp-address",
            &addr,
            "--topic",
            "bench_blocking",
            "--duration",
            "1s",
            "--connections",
            "2",
            "--batch-size",
            "1",
            "--blocking",
            "--threads",
            "2",
        ],
        &json,
    );
    assert_eq!(v["settings"]["blocking"], true, "{v:#}");
    assert_eq!(v["errors"], 0, "{v:#}");
    let published = v["published"]["messages"].as_u64().unwrap_or(0);
    assert!(published > 100, "published too little: {v:#}");
    assert!(
        v["ack_latency_us"]["p50"].as_f64().unwrap_or(0.0) > 0.0,
        "{v:#}"
    );
    // What the bench counted is what the broker holds.
    let stats = http_get(&broker.http, "/stats?format=json&topic=bench_blocking");
    let s: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    let held = s["topics"][0]["message_count"].as_u64().unwrap_or(0);
    assert!(
        held >= published,
        "broker has {held}, bench counted {published}"
    );
}

#[test]
fn an_unreachable_broker_is_a_clear_error_not_a_hang() {
    let port = free_port();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_shard-bench"))
        .args([
            "pub",
            "--nsqd-tcp-address",
            &format!("127.0.0.1:{port}"),
            "--duration",
            "2s",
        ])
        .output()
        .expect("shard-bench runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot connect"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// Runs shard-bench with `args`; expects it to fail. Returns stderr.
fn run_bench_failing(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shard-bench"))
        .args(args)
        .output()
        .expect("shard-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "shard-bench should have failed:\n{stderr}"
    );
    stderr
}

#[test]
fn a_feature_the_broker_does_not_enable_fails_the_run_rather_than_measuring_plaintext() {
    let (_broker, addr) = start_with("no-features", &["--snappy=false", "--deflate=false"]);
    let common = ["--nsqd-tcp-address", &addr, "--duration", "1s"];
    let stderr = run_bench_failing(&[&["pub", "--snappy"][..], &common].concat());
    assert!(
        stderr.contains("did not enable the compression"),
        "{stderr}"
    );
    let stderr = run_bench_failing(&[&["pubsub", "--deflate"][..], &common].concat());
    assert!(
        stderr.contains("did not enable the compression"),
        "{stderr}"
    );
    // A broker without a certificate never turns TLS on: no run in the clear.
    let stderr =
        run_bench_failing(&[&["pub", "--tls", "--tls-insecure-skip-verify"][..], &common].concat());
    assert!(stderr.contains("TLS"), "{stderr}");
}

/// A CA and a certificate it signed for 127.0.0.1, made with the openssl command (webpki
/// refuses a trust anchor as the server's own certificate); (ca, cert, key).
fn certificates(dir: &std::path::Path) -> (String, String, String) {
    let path = |name: &str| dir.join(name).display().to_string();
    let (ca, ca_key, cert, key, csr, ext) = (
        path("ca.pem"),
        path("ca-key.pem"),
        path("cert.pem"),
        path("key.pem"),
        path("req.csr"),
        path("ext.cnf"),
    );
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .expect("extensions file");
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &[
                "req",
                "-x509",
                "-days",
                "1",
                "-subj",
                "/CN=bench CA",
                "-keyout",
                &ca_key,
                "-out",
                &ca,
            ][..],
            &ec,
        ]
        .concat(),
    );
    openssl(
        &[
            &[
                "req",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                &key,
                "-out",
                &csr,
            ][..],
            &ec,
        ]
        .concat(),
    );
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-extfile",
        &ext,
        "-out",
        &cert,
    ]);
    (ca, cert, key)
}

#[test]
fn pubsub_runs_over_tls_snappy_and_deflate_and_records_them() {
    let scratch = std::env::temp_dir().join(format!("shard-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let (ca, cert, key) = certificates(&scratch);
    let (broker, addr) = start_with(
        "features",
        // HTTPS (on by default with a certificate) on a port of its own.
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--https-address=127.0.0.1:0",
        ],
    );
    let cases: [(&[&str], &[&str]); 4] = [
        (&["--tls", "--tls-root-ca-file", &ca], &["tls"]),
        (&["--snappy"], &["snappy"]),
        (&["--deflate", "--deflate-level", "1"], &["deflate-1"]),
        (
            &["--tls", "--tls-insecure-skip-verify", "--snappy"],
            &["tls", "snappy"],
        ),
    ];
    for (i, (flags, names)) in cases.into_iter().enumerate() {
        let json = broker.proc.dir().join(format!("features-{i}.json"));
        let topic = format!("bench_features_{i}");
        let mut args = vec![
            "pubsub",
            "--nsqd-tcp-address",
            &addr,
            "--topic",
            &topic,
            "--duration",
            "1s",
            "--connections",
            "2",
            "--batch-size",
            "20",
        ];
        args.extend_from_slice(flags);
        let (_, _, v) = run_bench(&args, &json);
        assert_eq!(v["settings"]["features"], serde_json::json!(names), "{v:#}");
        assert_eq!(v["errors"], 0, "{v:#}");
        assert!(
            v["consumed"]["messages"].as_u64().unwrap_or(0) > 100,
            "{v:#}"
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn compare_runs_two_broker_commands_alternately_and_prints_medians_and_ratios() {
    let broker = binary("broker");
    let cmd = |name: &str, shards: u32| {
        format!(
            "{name}={} --shards {shards} --tcp-address={{tcp}} --http-address={{http}} \
             --data-path={{data}}",
            broker.display()
        )
    };
    let tmp = test_harness::scratch_dir("shard-bench-compare-test");
    let out = Command::new(env!("CARGO_BIN_EXE_shard-bench"))
        .env("TMPDIR", &tmp)
        .args([
            "compare",
            "--broker",
            &cmd("two", 2),
            "--broker",
            &cmd("one", 1),
            "--runs",
            "2",
            "--workload",
            "sub",
            "--prefill",
            "20000",
            "--duration",
            "20s",
            "--quiet",
        ])
        .output()
        .expect("shard-bench runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Alternating: two, one, then one, two.
    let order: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("--- "))
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(order, ["two", "one", "one", "two"], "{stderr}");
    assert!(
        stdout.contains("| figure | two | one | one / two |"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| consumed msg/s |"))
        .unwrap_or_else(|| panic!("no consumed row:\n{stdout}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    for cell in &cells[2..4] {
        let rate: f64 = cell.parse().unwrap_or_else(|_| panic!("{row}"));
        assert!(rate > 0.0, "{row}");
    }
    assert!(cells[4].ends_with('x'), "{row}");
    // Every run's broker directory is gone.
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .expect("the scratch dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Kills the process it holds when dropped, so a failing test leaves no sink running.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `shard-bench sink` with `extra` arguments on a free port; the port, and the process
/// (killed when dropped).
fn start_sink(extra: &[&str]) -> (KillOnDrop, u16) {
    let port = free_port();
    let sink = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_shard-bench"))
            .args(["sink", "--tcp-address", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("shard-bench sink starts"),
    );
    (sink, port)
}

fn connect_to_sink(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    let conn = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("the sink never listened: {e}"),
        }
    };
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    conn
}

/// Sends a PUB and an MPUB of two on a new connection and checks both are answered OK.
fn assert_sink_answers_publishes(conn: &mut TcpStream) {
    use std::io::{Read, Write};
    let mut request = b"  V2PUB t\n".to_vec();
    request.extend_from_slice(&5u32.to_be_bytes());
    request.extend_from_slice(b"hello");
    // Then an MPUB of two.
    request.extend_from_slice(b"MPUB t\n");
    let mut body = 2u32.to_be_bytes().to_vec();
    for m in [&b"a"[..], b"bc"] {
        body.extend_from_slice(&(m.len() as u32).to_be_bytes());
        body.extend_from_slice(m);
    }
    request.extend_from_slice(&(body.len() as u32).to_be_bytes());
    request.extend_from_slice(&body);
    conn.write_all(&request).expect("write");
    let ok = [0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K'];
    let mut answers = [0u8; 20];
    conn.read_exact(&mut answers).expect("two answers");
    assert_eq!(&answers[..10], &ok, "{answers:?}");
    assert_eq!(&answers[10..], &ok, "{answers:?}");
}

#[test]
fn the_standalone_sink_answers_publishes_with_ok_until_killed() {
    let (_sink, port) = start_sink(&[]);
    assert_sink_answers_publishes(&mut connect_to_sink(port));
}

#[test]
fn a_sink_of_several_executors_serves_the_connections_it_hands_over() {
    // One executor per CPU at most: on a one-CPU machine this is the single-executor sink.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let executors = cpus.min(2).to_string();
    let (_sink, port) = start_sink(&["--executors", &executors]);
    // Connection i goes to executor i mod N: three connections reach every executor, the
    // later ones by hand-over, and each is answered while the others stay open.
    let mut conns: Vec<TcpStream> = (0..3).map(|_| connect_to_sink(port)).collect();
    for conn in &mut conns {
        assert_sink_answers_publishes(conn);
    }
}

/// Sends `head` (`PUB t\n` or `MPUB t\n`) with `body` after its size, and checks the
/// answer is OK.
fn published_ok(conn: &mut TcpStream, head: &[u8], body: &[u8]) {
    use std::io::{Read, Write};
    let mut request = head.to_vec();
    request.extend_from_slice(&(body.len() as u32).to_be_bytes());
    request.extend_from_slice(body);
    conn.write_all(&request).expect("publish");
    let mut answer = [0u8; 10];
    conn.read_exact(&mut answer).expect("an answer");
    assert_eq!(answer, [0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K']);
}

/// Sends an MPUB of `bodies` to topic `t` and checks the answer is OK.
fn mpub_answered_ok(conn: &mut TcpStream, bodies: &[Vec<u8>]) {
    let mut body = (bodies.len() as u32).to_be_bytes().to_vec();
    for m in bodies {
        body.extend_from_slice(&(m.len() as u32).to_be_bytes());
        body.extend_from_slice(m);
    }
    published_ok(conn, b"MPUB t\n", &body);
}

/// The bodies in the files of a keeping sink's executor 0, in the order kept: each after its
/// length; a length of 0 is the padding of a write that was not full (to the next block). A
/// body cut off by the end of the file is not written whole yet (a write ends inside it and
/// the next is still to come) and ends the list.
fn kept_bodies(dir: &std::path::Path) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    for n in 1.. {
        let Ok(data) = std::fs::read(dir.join(format!("sink-0-{n}.dat"))) else {
            break;
        };
        let mut pos = 0;
        while pos + 4 <= data.len() {
            let len = u32::from_be_bytes(data[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            if len == 0 {
                pos = (pos / 4096 + 1) * 4096;
                continue;
            }
            let Some(body) = data.get(pos + 4..pos + 4 + len) else {
                return bodies;
            };
            bodies.push(body.to_vec());
            pos += 4 + len;
        }
    }
    bodies
}

#[test]
fn a_keeping_sink_writes_every_body_it_answers_to_its_files_in_order() {
    let dir = test_harness::scratch_dir("shard-bench-keep");
    let (_sink, port) = start_sink(&["--data-path", dir.to_str().expect("utf-8 path")]);
    let mut conn = connect_to_sink(port);
    assert_sink_answers_publishes(&mut conn);
    // Then an MPUB of 6 bodies of 200,000 bytes: more than one 1 MiB write, so one write is
    // full and a body straddles two.
    let big: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'k' + i; 200_000]).collect();
    mpub_answered_ok(&mut conn, &big);
    let mut want: Vec<Vec<u8>> = vec![b"hello".to_vec(), b"a".to_vec(), b"bc".to_vec()];
    want.extend(big);
    // What is not a full write is written once nothing has come for 10 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut kept = kept_bodies(&dir);
    while kept != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        kept = kept_bodies(&dir);
    }
    assert_eq!(kept.len(), want.len(), "bodies kept");
    assert!(kept == want, "the bodies kept differ from those sent");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sink_that_answers_after_the_write_has_each_body_in_its_files_at_its_ok() {
    use std::io::Write;
    let dir = test_harness::scratch_dir("shard-bench-written");
    let (_sink, port) = start_sink(&[
        "--data-path",
        dir.to_str().expect("utf-8 path"),
        "--ack-after-write",
    ]);
    let mut conn = connect_to_sink(port);
    conn.write_all(b"  V2").expect("magic");
    let mut want: Vec<Vec<u8>> = Vec::new();
    // Each OK comes after the write: the files hold the body when it arrives, where a sink
    // that answers first writes a buffer that is not full only after 10 ms.
    for i in 0..5u8 {
        let body = vec![b'a' + i; 100 + usize::from(i)];
        published_ok(&mut conn, b"PUB t\n", &body);
        want.push(body);
        assert!(
            kept_bodies(&dir) == want,
            "PUB {i}: not in the files at its OK"
        );
    }
    // An MPUB over 1 MiB: a full write, then the rest at once.
    let big: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'k' + i; 200_000]).collect();
    mpub_answered_ok(&mut conn, &big);
    want.extend(big);
    let kept = kept_bodies(&dir);
    assert_eq!(kept.len(), want.len(), "bodies kept at the MPUB's OK");
    assert!(kept == want, "the bodies kept differ from those sent");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ack_after_write_needs_a_data_path() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shard-bench"))
        .args(["sink", "--ack-after-write"])
        .output()
        .expect("shard-bench runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--data-path"), "{err}");
}

/// Reads frames from `conn` until `n` messages came; panics on an error frame or a timeout.
fn read_messages(conn: &mut TcpStream, n: usize) {
    use std::io::Read;
    let mut got = 0;
    while got < n {
        let mut head = [0u8; 8];
        conn.read_exact(&mut head).expect("a frame");
        let size = u32::from_be_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let kind = u32::from_be_bytes(head[4..].try_into().expect("4 bytes"));
        let mut rest = vec![0u8; size - 4];
        conn.read_exact(&mut rest).expect("the frame's data");
        assert_ne!(kind, 1, "{}", String::from_utf8_lossy(&rest));
        if kind == 2 {
            got += 1;
        }
    }
}

/// Checks that nothing arrives on `conn` for 300 ms.
fn assert_nothing_comes(conn: &mut TcpStream, what: &str) {
    use std::io::Read;
    conn.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    assert!(conn.read(&mut byte).is_err(), "{what}");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
}

#[test]
fn a_relaying_sink_delivers_what_was_published_and_no_more() {
    use std::io::{Read, Write};
    let (_sink, port) = start_sink(&["--relay"]);
    let mut publisher = connect_to_sink(port);
    publisher.write_all(b"  V2").expect("magic");
    let mut subscriber = connect_to_sink(port);
    subscriber
        .write_all(b"  V2SUB t c\nRDY 100\n")
        .expect("SUB");
    let mut ok = [0u8; 10];
    subscriber.read_exact(&mut ok).expect("SUB answered");
    assert_eq!(ok, [0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K'], "SUB answered OK");
    let publish =
        |conn: &mut TcpStream, n: usize| mpub_answered_ok(conn, &vec![b"hello".to_vec(); n]);
    // Nothing published, nothing delivered, for all its RDY.
    assert_nothing_comes(&mut subscriber, "a message before any publish");
    publish(&mut publisher, 3);
    read_messages(&mut subscriber, 3);
    assert_nothing_comes(&mut subscriber, "more than was published");
    // Two more published come as two while the three are still in flight (no FIN sent:
    // bench_reader holds its FINs until most of its RDY has come).
    publish(&mut publisher, 2);
    read_messages(&mut subscriber, 2);
}

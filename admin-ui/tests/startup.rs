//! Start-up through the binary's command line: Go's flag conventions that wrapper scripts
//! rely on, and what nsqadmin accepts.

use std::process::Command;

/// Runs admin-ui with `args` until its log says it listens (`Ok` with its stderr so far) or it
/// exits (`Err` with its stderr); killed either way, within 20 s.
fn start_and_stop(args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_admin-ui"));
    cmd.args(args).arg("--sample-interval=0");
    test_harness::start_and_stop(cmd, "HTTP: listening")
}

#[test]
fn a_repeated_flag_takes_its_last_value_and_list_flags_add_up() {
    // The first value is a port another socket holds: starting at all proves the last won.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = taken.local_addr().expect("addr").to_string();
    let log = start_and_stop(&[
        &format!("--http-address={taken}"),
        "-http-address=127.0.0.1:0",
        "--nsqd-http-address=127.0.0.1:1",
        "--nsqd-http-address=127.0.0.1:2",
        "--base-path=/a",
        "--base-path=/b",
    ])
    .unwrap_or_else(|log| panic!("did not start:\n{log}"));
    assert!(!log.contains(&taken), "{log}");
}

#[test]
fn proxy_graphite_without_graphite_url_starts_with_a_warning() {
    let log = start_and_stop(&[
        "--http-address=127.0.0.1:0",
        "--nsqd-http-address=127.0.0.1:1",
        "--proxy-graphite",
    ])
    .unwrap_or_else(|log| panic!("did not start:\n{log}"));
    assert!(
        log.contains("--proxy-graphite: no --graphite-url to proxy to"),
        "{log}"
    );
}

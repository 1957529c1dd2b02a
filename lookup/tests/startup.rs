//! Start-up: flags are checked before anything is bound.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lookup"))
        .args(args)
        .output()
        .expect("run lookup")
}

#[test]
fn startup_refuses_unknown_and_malformed_flags() {
    for args in [
        &["--no-such-flag"][..],
        &["-no-such-flag=1"],
        &["--tombstone-lifetime", "soon"],
        &["-inactive-producer-timeout=5 minutes"],
        &["--tcp-address", "not an address"],
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn startup_reports_a_port_it_cannot_bind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = run(&["--tcp-address", &addr, "--http-address", "127.0.0.1:0"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot listen on TCP address"), "{stderr}");
    // The holder is named: here, this test's own process.
    let me = format!("process {}", std::process::id());
    assert!(stderr.contains(&me), "{stderr}");
}

#[test]
fn startup_help_lists_nsqlookupds_flags() {
    let out = run(&["-help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--tcp-address",
        "--http-address",
        "--broadcast-address",
        "--inactive-producer-timeout",
        "--tombstone-lifetime",
    ] {
        assert!(help.contains(flag), "{flag} missing from help");
    }
}

/// Runs the lookup with `args` until its log says it listens (its stderr so far) or it exits
/// (`Err` with its stderr); killed either way, within 20 s.
fn start_and_stop(args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lookup"));
    cmd.args(args);
    test_harness::start_and_stop(cmd, "HTTP: listening")
}

#[test]
fn a_repeated_flag_takes_its_last_value_as_gos_flag_package() {
    // The first value is a port another socket holds: starting at all proves the last won.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = taken.local_addr().expect("addr").to_string();
    let log = start_and_stop(&[
        "--tcp-address=127.0.0.1:0",
        &format!("--http-address={taken}"),
        "-http-address=127.0.0.1:0",
        "--tombstone-lifetime=1s",
        "--tombstone-lifetime=2s",
    ])
    .unwrap_or_else(|log| panic!("did not start:\n{log}"));
    assert!(!log.contains(&taken), "{log}");
}

/// Two ports free now, from below the ephemeral range (see `test_harness::free_port`).
fn free_ports() -> (String, String) {
    let addr = |p: u16| format!("127.0.0.1:{p}");
    (
        addr(test_harness::free_port()),
        addr(test_harness::free_port()),
    )
}

#[test]
fn a_restart_at_once_after_a_kill_comes_up_on_the_same_ports() {
    // A killed lookup's listeners stay listening for some milliseconds (its io_uring accept is
    // torn down after it exits): each restart must wait for them, not fail. Rounds:
    // LOOKUP_CRASH_RESTARTS (default 5).
    let rounds: usize = std::env::var("LOOKUP_CRASH_RESTARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let (tcp, http) = free_ports();
    let tcp = format!("--tcp-address={tcp}");
    let http = format!("--http-address={http}");
    for round in 0..=rounds {
        if let Err(log) = start_and_stop(&[&tcp, &http]) {
            panic!("round {round}: the restart did not come up:\n{log}");
        }
    }
}

#[test]
fn startup_names_the_controller_flag_that_is_missing_or_wrong() {
    for (args, needle) in [
        (&["--controller-id=1"][..], "--controller-peers"),
        (
            &["--controller-id=1", "--controller-peers=1=127.0.0.1:1"],
            "--data-path",
        ),
        (&["--data-path=/tmp/x"], "give --controller-id"),
        (
            &[
                "--controller-id=2",
                "--controller-peers=1=127.0.0.1:1",
                "--data-path=/tmp/x",
            ],
            "no entry for this lookup's --controller-id 2",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn the_controller_flags_are_read_from_the_config_file_too() {
    let dir = test_harness::scratch_dir("lookup-config");
    let file = dir.join("lookup.toml");
    let data = dir.join("data");
    let raft = test_harness::free_port();
    std::fs::write(
        &file,
        format!(
            "controller_id = 1\ncontroller_peers = \"1=127.0.0.1:{raft}\"\ndata_path = \"{}\"\n",
            data.display()
        ),
    )
    .expect("write config");
    let log = start_and_stop(&[
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        &format!("--config={}", file.display()),
    ])
    .unwrap_or_else(|log| panic!("did not start:\n{log}"));
    assert!(
        log.contains(&format!("controller: Raft listening on 127.0.0.1:{raft}")),
        "{log}"
    );
    assert!(data.join("controller-raft.log").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

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

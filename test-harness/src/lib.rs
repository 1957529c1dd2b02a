//! For tests only (a dev-dependency): the workspace's binaries (`broker`, `lookup`) as processes
//! a test starts on 127.0.0.1, with ephemeral ports and a scratch directory of their own.
//!
//! - [`binary`] finds a binary: `$BROKER_BIN` / `$LOOKUP_BIN` when set, else it runs
//!   `cargo build --release -p <name>` once per test process (a no-op when the binary is fresh)
//!   and takes `target/release/<name>`; so `cargo test` on a fresh clone builds what it needs.
//!   A build that fails fails the test, saying what to build: a test that cannot run must not
//!   pass.
//! - [`free_port`], [`free_ports`] and [`scratch_dir`] give every process its own ports and
//!   files, so tests run side by side.
//! - [`start_broker`] and [`start_lookup`] start one on ephemeral ports it binds itself and
//!   names in its log (and, for a broker, a data directory of its own), with the test's flags
//!   after the addresses.
//! - [`start_and_stop`] runs a binary until its log says it is ready (or it exits), for
//!   start-up tests of its flags.
//! - [`Proc`] is a running binary: started with its output in a log file, waited for until it
//!   listens on every given address (or fails with its log if it exits first), killed and its
//!   directory removed when dropped (also when the test panics). Any binary can be started so:
//!   a crate's own tests give `env!("CARGO_BIN_EXE_<name>")`, which cargo builds for them.
//!
//! - [`certs`]: TLS certificates made in-process (rcgen) for the TLS tests of the crates.
//! - [`handshake`]: a fake broker's read of the magic and IDENTIFY.
//! - [`imports`] reads which modules of a directory name which, for the layering tests (no
//!   circle of imports).
//!
//! Its own unit tests check the documentation's relative links (`doc_links.rs`).

pub mod certs;
#[cfg(test)]
mod doc_links;
pub mod handshake;
pub mod imports;
pub mod largest_alloc;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Longest wait for a process to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The workspace's root directory.
fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// What `tests/run.sh` builds, in one `cargo build`: the whole workspace with every target, so
/// that cargo unifies features exactly as `cargo test --workspace` does (dev-dependencies
/// included). Building the same here makes the build a no-op after run.sh's and inside
/// `cargo test --workspace`; any narrower set gives shared dependencies (getrandom, serde, ...)
/// other features, and so ring, rustls and the broker would be compiled a second time.
const RUN_SH_BUILD: [&str; 4] = ["build", "--release", "--workspace", "--all-targets"];

/// The variables `cargo test` gives a test process about its own package and target.
fn is_a_test_process_var(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_BIN_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// The path of the release binary `name` (`broker`, `lookup`): `$<NAME>_BIN` when set, else
/// built (once per test process) as `tests/run.sh` builds it ([`RUN_SH_BUILD`]).
pub fn binary(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_ascii_uppercase());
    if let Some(path) = std::env::var_os(&var) {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "${var} is {}, not a file", path.display());
        return path;
    }
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    build
        .args(RUN_SH_BUILD)
        .current_dir(&root)
        .stdin(Stdio::null());
    // What `cargo test` sets for the test process describes the test's package, not the build:
    // ring's build script tracks CARGO_MANIFEST_DIR, so passing it on made every test binary's
    // first call rebuild ring, rustls and everything above them (about 3 minutes each).
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_a_test_process_var) {
            build.env_remove(&key);
        }
    }
    let status = build.status();
    let path = target.join("release").join(name);
    match status {
        Ok(s) if s.success() && path.is_file() => {}
        Ok(s) => panic!(
            "`cargo {}` in {} ended with {s} and left no {}: build it by hand, or point \
             ${var} at a {name} binary",
            RUN_SH_BUILD.join(" "),
            root.display(),
            path.display()
        ),
        Err(e) => panic!(
            "cannot run {cargo:?} to build {name} ({e}): run `cargo build --release \
             --workspace --all-targets`, or point ${var} at a {name} binary"
        ),
    }
    built.insert(name.to_owned(), path.clone());
    path
}

/// A TCP port on 127.0.0.1, free a moment ago, for a process that must be told its port before
/// it starts (a Raft peer list names every peer's); [`free_ports`] of one.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `n` consecutive TCP ports on 127.0.0.1, all free a moment ago (a broker's
/// shard i listens on its `--replication-address` port + i).
///
/// They come from below the kernel's ephemeral range (`ip_local_port_range`), so no process
/// that binds port 0 or connects out, in this test or one running beside it, can take them
/// before their owner binds them. Ports are handed out in turn, in blocks of [`PORT_BLOCK`]
/// from a place set by the process ID, so a later call in this process never gets a port
/// within [`PORT_BLOCK`] above an earlier one (`port + i` stays the caller's) and two test
/// processes rarely start at one place. Where the range leaves no room below it, it falls
/// back to ephemeral ports.
pub fn free_ports(n: usize) -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    const FLOOR: usize = 10_000;
    let n = n.max(1);
    let blocks = n.div_ceil(PORT_BLOCK);
    let low = ephemeral_low();
    let all_free = |first: usize| {
        (first..first + n).all(|p| {
            u16::try_from(p).is_ok_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        })
    };
    if low > FLOOR + 1_000 {
        let span = (low - FLOOR) / PORT_BLOCK;
        let start = std::process::id() as usize * 7_919;
        for _ in 0..span {
            let block = (start + NEXT.fetch_add(blocks, Ordering::Relaxed)) % span;
            let first = FLOOR + block * PORT_BLOCK;
            if first + n <= low && all_free(first) {
                return first as u16;
            }
        }
    }
    for _ in 0..200 {
        let first = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| usize::from(a.port()))
            .expect("an ephemeral port on 127.0.0.1");
        if all_free(first) {
            return first as u16;
        }
    }
    panic!("no {n} consecutive free ports on 127.0.0.1");
}

/// How many ports [`free_ports`] sets aside at each call, at least.
pub const PORT_BLOCK: usize = 8;

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_low() -> usize {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A new empty directory under the system's temp dir, unique to this process and call.
pub fn scratch_dir(prefix: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// A running binary; killed (SIGKILL) and its directory removed when dropped.
pub struct Proc {
    name: String,
    child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd` (the binary with its arguments and environment) in `dir`, which the process
    /// owns from now on, with its stdout and stderr in `dir/<name>.log`, and returns once it
    /// accepts TCP connections on every address of `listens`.
    pub fn start(name: &str, mut cmd: Command, dir: PathBuf, listens: &[&str]) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let logfile = std::fs::File::create(&log).expect("a log file");
        let child = cmd
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(logfile.try_clone().expect("a log file"))
            .stderr(logfile)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} ({:?}) does not start: {e}", cmd.get_program()));
        let mut proc = Proc {
            name: name.to_owned(),
            child: Some(child),
            dir,
            log,
        };
        proc.wait_listening(listens);
        proc
    }

    /// Starts `cmd` as [`Proc::start`] does, for a process that binds port 0 and writes each
    /// address it listens on after one of `markers` in its log; returns once every one is in
    /// the log and accepts TCP connections, with the addresses in the order of `markers`.
    pub fn start_announced(
        name: &str,
        cmd: Command,
        dir: PathBuf,
        markers: &[&str],
    ) -> (Proc, Vec<String>) {
        let mut proc = Proc::start(name, cmd, dir, &[]);
        let deadline = Instant::now() + START_TIMEOUT;
        let mut addrs = Vec::new();
        for marker in markers {
            let addr = loop {
                if let Some(addr) = address_after(&proc.log(), marker) {
                    break addr;
                }
                if let Some(status) = proc.exited() {
                    panic!(
                        "{name} exited ({status}) before writing `{marker}` in its log:\n{}",
                        proc.log()
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "{name} never wrote `{marker}` in its log:\n{}",
                    proc.log()
                );
                std::thread::sleep(Duration::from_millis(10));
            };
            addrs.push(addr);
        }
        let listens: Vec<&str> = addrs.iter().map(String::as_str).collect();
        proc.wait_listening(&listens);
        (proc, addrs)
    }

    /// How it ended, if it has (`None` while it runs, and after [`Proc::kill`]).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn wait_listening(&mut self, addrs: &[&str]) {
        let deadline = Instant::now() + START_TIMEOUT;
        for addr in addrs {
            while std::net::TcpStream::connect(addr).is_err() {
                if let Some(status) = self.exited() {
                    panic!(
                        "{} exited ({status}) before listening on {addr}:\n{}",
                        self.name,
                        self.log()
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "{} never listened on {addr}:\n{}",
                    self.name,
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// The directory the process owns.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its process ID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What it wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it now (SIGKILL, as a crash) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A started `broker` or `lookup`: the process, and its `127.0.0.1:port` addresses.
pub struct Started {
    pub proc: Proc,
    /// The TCP side (protocol V2 for a broker, V1 for a lookup).
    pub tcp: String,
    /// The HTTP API.
    pub http: String,
}

/// Starts the broker `bin` with its data in a new scratch directory (`<prefix>-...`) and `flags`
/// after the addresses; returns once both sides listen.
///
/// The broker binds port 0 and the harness reads the ports it got from its log: ports picked
/// here and passed in would race with every other test starting a process at the same moment
/// (one of them fails to bind, or, worse, the harness connects to the other's listener).
pub fn start_broker(bin: &Path, prefix: &str, flags: &[&str]) -> Started {
    let dir = scratch_dir(prefix);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("a data directory");
    let mut cmd = Command::new(bin);
    cmd.arg("--tcp-address=127.0.0.1:0")
        .arg("--http-address=127.0.0.1:0")
        .arg(format!("--data-path={}", data.display()))
        .args(flags);
    let (proc, addrs) = Proc::start_announced(
        "broker",
        cmd,
        dir,
        &["TCP: listening tcp=", "HTTP: listening http="],
    );
    let [tcp, http] = <[String; 2]>::try_from(addrs).expect("two addresses");
    Started { proc, tcp, http }
}

/// Starts the lookup `bin` on ephemeral ports (read from its log, as [`start_broker`]), with
/// `flags` after the addresses; returns once both sides listen.
pub fn start_lookup(bin: &Path, prefix: &str, flags: &[&str]) -> Started {
    let mut cmd = Command::new(bin);
    cmd.arg("--tcp-address=127.0.0.1:0")
        .arg("--http-address=127.0.0.1:0")
        .args(flags);
    let (proc, addrs) = Proc::start_announced(
        "lookup",
        cmd,
        scratch_dir(prefix),
        &["TCP: listening on ", "HTTP: listening on "],
    );
    let [tcp, http] = <[String; 2]>::try_from(addrs).expect("two addresses");
    Started { proc, tcp, http }
}

/// Runs `cmd` (a binary with its arguments) until a line of its stderr contains `ready`, and
/// stops it: `Ok` with its stderr so far, or `Err` with its stderr if it exits first or does
/// not get there within [`STOP_WAIT`]; killed either way. For start-up tests of a binary's
/// flags, where the process runs for a moment and nothing else.
pub fn start_and_stop(mut cmd: Command, ready: &str) -> Result<String, String> {
    use std::io::BufRead;
    let mut child = cmd
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{:?} does not start: {e}", cmd.get_program()));
    let Some(stderr) = child.stderr.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("no stderr".into());
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + STOP_WAIT;
    let mut log = String::new();
    let started = loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
                if line.contains(ready) {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    if started {
        Ok(log)
    } else {
        Err(log)
    }
}

/// Longest [`start_and_stop`] waits for its line.
pub const STOP_WAIT: Duration = Duration::from_secs(20);

/// The address written right after `marker` in `log` (up to the next space or line end).
fn address_after(log: &str, marker: &str) -> Option<String> {
    let rest = &log[log.find(marker)? + marker.len()..];
    let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
    (!addr.is_empty()).then_some(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_dirs_are_distinct_and_ports_bindable() {
        let (a, b) = (scratch_dir("harness"), scratch_dir("harness"));
        assert_ne!(a, b);
        assert!(a.is_dir() && b.is_dir());
        let port = free_port();
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        let _ = std::fs::remove_dir_all(a);
        let _ = std::fs::remove_dir_all(b);
    }

    #[test]
    fn a_block_of_ports_is_free_and_not_handed_out_again() {
        let first = free_ports(3);
        for p in first..first + 3 {
            assert!(std::net::TcpListener::bind(("127.0.0.1", p)).is_ok(), "{p}");
        }
        // Later ports stay clear of the block and of the ports above it its caller may use.
        for _ in 0..20 {
            let p = usize::from(free_port());
            let block = usize::from(first)..usize::from(first) + PORT_BLOCK;
            assert!(!block.contains(&p), "{p} within {block:?}");
        }
    }

    #[test]
    fn addresses_are_read_after_their_marker() {
        let log = "2026 INFO broker::launch: TCP: listening tcp=127.0.0.1:4150 shards=2\n\
                   2026 INFO lookup: HTTP: listening on 127.0.0.1:4161\n";
        let tcp = address_after(log, "TCP: listening tcp=");
        assert_eq!(tcp.as_deref(), Some("127.0.0.1:4150"));
        let http = address_after(log, "HTTP: listening on ");
        assert_eq!(http.as_deref(), Some("127.0.0.1:4161"));
        assert_eq!(address_after(log, "HTTPS: listening"), None);
        assert_eq!(
            address_after("TCP: listening tcp=", "TCP: listening tcp="),
            None
        );
    }

    #[test]
    fn start_and_stop_waits_for_its_line_or_the_exit() {
        let mut ready = Command::new("/bin/sh");
        ready.args([
            "-c",
            "echo starting >&2; echo HTTP: listening >&2; sleep 30",
        ]);
        let log = start_and_stop(ready, "HTTP: listening");
        assert_eq!(log.as_deref(), Ok("starting\nHTTP: listening\n"));
        let mut failing = Command::new("/bin/sh");
        failing.args(["-c", "echo bad flag >&2; exit 2"]);
        assert_eq!(
            start_and_stop(failing, "HTTP: listening"),
            Err("bad flag\n".to_owned())
        );
    }

    #[test]
    fn a_process_that_exits_before_listening_fails_with_its_log() {
        let dir = scratch_dir("harness");
        let port = free_port();
        let result = std::panic::catch_unwind(|| {
            let mut sh = Command::new("/bin/sh");
            sh.args(["-c", "echo cannot start; exit 3"]);
            Proc::start("sh", sh, dir, &[&format!("127.0.0.1:{port}")])
        });
        let err = result.err().expect("a panic");
        let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            text.contains("exited") && text.contains("cannot start"),
            "{text}"
        );
    }
}

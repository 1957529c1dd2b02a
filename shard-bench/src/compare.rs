//! `shard-bench compare`: one workload against two (or more) broker commands, alternately,
//! with a fresh broker and data directory for every run, and the medians side by side.
//!
//! A broker is given as `NAME=COMMAND`. The command runs under `/bin/sh -c "exec COMMAND"` (so
//! its process is the broker itself, whose CPU and peak RSS are measured), with `{tcp}`,
//! `{http}` and `{data}` replaced by two free 127.0.0.1 ports and a new empty directory; the
//! run starts once `{tcp}` accepts connections. The order alternates (A B, then B A, ...) so
//! that a drift of the host's speed during the comparison falls on both sides alike. `--prefill`
//! publishes a backlog (MPUB of 200, not measured) before each measured run: with
//! `--workload sub` (and no `--count`) each run ends once it is drained, so the rate is the
//! drain's (and `--warmup` is not applied: it would drain part of the backlog unmeasured). Every broker is stopped with SIGTERM (SIGKILL
//! after 10 s) and its directory removed, also when a run fails.
//!
//! The summary prints, per broker, the median of each figure over its runs, and each broker's
//! ratio to the first one.

use crate::error::{BenchError, Result};
use crate::options::{LoadArgs, Mode};
use crate::result::BenchResult;
use crate::runner;
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for a broker to accept connections.
const START_WAIT: Duration = Duration::from_secs(30);
/// Longest wait for a broker to stop after SIGTERM.
const STOP_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    Pub,
    Sub,
    Pubsub,
}

impl Workload {
    fn mode(self) -> (Mode, &'static str) {
        match self {
            Workload::Pub => (Mode::Pub, "pub"),
            Workload::Sub => (Mode::Sub, "sub"),
            Workload::Pubsub => (Mode::PubSub, "pubsub"),
        }
    }
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// A broker to measure, `NAME=COMMAND` (at least two). `{tcp}`, `{http}` and `{data}` in
    /// COMMAND become a free TCP port's address, a free HTTP port's address and a new data
    /// directory, e.g. `ours=target/release/broker --shards 2 --tcp-address={tcp}
    /// --http-address={http} --data-path={data}`.
    #[arg(long = "broker", value_name = "NAME=COMMAND", required = true)]
    pub brokers: Vec<String>,
    /// Runs per broker, alternating, each on a fresh broker.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// What each run measures (with the load flags below).
    #[arg(long, value_enum, default_value = "pubsub")]
    pub workload: Workload,
    /// Messages published before each measured run (MPUB of 200, 4 connections; not measured).
    /// With `--workload sub` and no `--count`, the run drains them: it ends when all are
    /// consumed (or at --duration), with no warm-up.
    #[arg(long, default_value_t = 0)]
    pub prefill: u64,
    /// Write each run's result as JSON into this directory (`<name>-<run>.json`).
    #[arg(long, value_name = "DIR")]
    pub json_dir: Option<PathBuf>,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// One broker command, by name.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerCommand {
    pub name: String,
    pub command: String,
}

/// Parses `NAME=COMMAND`.
pub fn parse_broker(s: &str) -> Result<BrokerCommand> {
    let bad = |why: &str| BenchError::InvalidOption(format!("--broker {s:?}: {why}"));
    let (name, command) = s
        .split_once('=')
        .ok_or_else(|| bad("write it as NAME=COMMAND"))?;
    let (name, command) = (name.trim(), command.trim());
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(bad("NAME must be letters, digits, '-', '_' or '.'"));
    }
    if !command.contains("{tcp}") {
        return Err(bad(
            "COMMAND must listen on {tcp} (e.g. --tcp-address={tcp}), the address measured",
        ));
    }
    Ok(BrokerCommand {
        name: name.to_string(),
        command: command.to_string(),
    })
}

/// The command with its placeholders filled in.
pub fn fill(command: &str, tcp: &str, http: &str, data: &Path) -> String {
    command
        .replace("{tcp}", tcp)
        .replace("{http}", http)
        .replace("{data}", &data.display().to_string())
}

/// The order of the brokers in run `round`: forwards on even rounds, backwards on odd ones.
pub fn order(brokers: usize, round: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..brokers).collect();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

/// Runs the comparison and prints the runs and the summary.
pub fn run(args: CompareArgs, command_line: &str) -> Result<()> {
    let brokers = args
        .brokers
        .iter()
        .map(|b| parse_broker(b))
        .collect::<Result<Vec<_>>>()?;
    let bad = |s: &str| Err(BenchError::InvalidOption(s.to_string()));
    if brokers.len() < 2 {
        return bad("compare needs at least two --broker");
    }
    if let Some(dup) = brokers
        .iter()
        .enumerate()
        .find(|(i, b)| brokers[..*i].iter().any(|o| o.name == b.name))
    {
        return bad(&format!("--broker name {:?} is given twice", dup.1.name));
    }
    if args.runs == 0 {
        return bad("--runs must be at least 1");
    }
    let l = &args.load;
    if !l.nsqd_tcp_addresses.is_empty() || !l.lookupd_http_addresses.is_empty() {
        return bad("compare starts the brokers itself: give {tcp} in --broker, not --nsqd-tcp-address or --lookupd-http-address");
    }
    if l.broker_pid.is_some() || l.json.is_some() {
        return bad(
            "compare measures each broker it starts: use --json-dir, not --broker-pid or --json",
        );
    }
    if args.workload == Workload::Sub && args.prefill == 0 && l.count.is_none() {
        eprintln!("shard-bench compare: --workload sub without --prefill measures an empty topic");
    }
    let (mode, mode_name) = args.workload.mode();
    // Checks the load flags once, before any broker starts.
    l.plan(mode, mode_name)?;
    if let Some(dir) = &args.json_dir {
        std::fs::create_dir_all(dir).map_err(|source| BenchError::File {
            path: dir.clone(),
            source,
        })?;
    }
    let mut results: Vec<Vec<BenchResult>> = vec![Vec::new(); brokers.len()];
    for round in 0..args.runs {
        for i in order(brokers.len(), round) {
            let b = &brokers[i];
            eprintln!("--- {} run {} of {}", b.name, round + 1, args.runs);
            let r = one_run(&args, b, round, command_line)?;
            eprintln!("{r}");
            if let Some(dir) = &args.json_dir {
                r.write(&dir.join(format!("{}-{}.json", b.name, round + 1)))?;
            }
            results[i].push(r);
        }
    }
    print!("{}", summary(&brokers, &results, args.workload));
    Ok(())
}

/// A broker started for one run; stopped and its directory removed when dropped.
struct Running {
    child: Child,
    dir: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) with the PID of a child we have not reaped: it is still ours.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(BenchError::Io)?;
    Ok(l.local_addr().map_err(BenchError::Io)?.port())
}

fn start(b: &BrokerCommand, round: usize) -> Result<(Running, String)> {
    let dir = std::env::temp_dir().join(format!(
        "shard-bench-compare-{}-{}-{}",
        std::process::id(),
        b.name,
        round
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|source| BenchError::File {
        path: data.clone(),
        source,
    })?;
    let tcp = format!("127.0.0.1:{}", free_port()?);
    let http = format!("127.0.0.1:{}", free_port()?);
    let command = fill(&b.command, &tcp, &http, &data);
    let log_path = dir.join("broker.log");
    let log = std::fs::File::create(&log_path).map_err(|source| BenchError::File {
        path: log_path.clone(),
        source,
    })?;
    let err = log.try_clone().map_err(BenchError::Io)?;
    let child = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("exec {command}"))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(BenchError::Io)?;
    let mut running = Running { child, dir };
    let deadline = Instant::now() + START_WAIT;
    loop {
        if std::net::TcpStream::connect(&tcp).is_ok() {
            return Ok((running, tcp));
        }
        let log = || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        };
        if let Ok(Some(status)) = running.child.try_wait() {
            return Err(BenchError::InvalidOption(format!(
                "broker {:?} exited ({status}) before listening on {tcp}: `{command}`\n{}",
                b.name,
                log()
            )));
        }
        if Instant::now() > deadline {
            return Err(BenchError::InvalidOption(format!(
                "broker {:?} did not listen on {tcp} within {}s: `{command}`\n{}",
                b.name,
                START_WAIT.as_secs(),
                log()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn one_run(
    args: &CompareArgs,
    b: &BrokerCommand,
    round: usize,
    command_line: &str,
) -> Result<BenchResult> {
    let (running, tcp) = start(b, round)?;
    if args.prefill > 0 {
        let mut fill = args.load.clone();
        fill.nsqd_tcp_addresses = vec![tcp.clone()];
        fill.batch_size = 200;
        fill.connections = 4;
        fill.pipeline = 1;
        fill.rate = None;
        fill.blocking = false;
        fill.warmup = Duration::ZERO;
        fill.count = Some(args.prefill);
        fill.duration = Duration::from_secs(600);
        fill.targets.clear();
        fill.quiet = true;
        let plan = fill.plan(Mode::Pub, "pub")?;
        let r = runner::run(plan, format!("{command_line} (prefill)"))?;
        if r.published.messages < args.prefill {
            return Err(BenchError::InvalidOption(format!(
                "prefill of {:?} published {} of {} messages",
                b.name, r.published.messages, args.prefill
            )));
        }
    }
    let mut load = args.load.clone();
    if args.workload == Workload::Sub && args.prefill > 0 && load.count.is_none() {
        // Draining: the run ends with the backlog, so the rate is the drain's; a warm-up
        // would drain part of it unmeasured (all of it, on a fast broker).
        load.count = Some(args.prefill);
        load.warmup = Duration::ZERO;
    }
    load.nsqd_tcp_addresses = vec![tcp];
    load.broker_pid = Some(running.child.id());
    load.label = Some(format!("{} {}", b.name, round + 1));
    let (mode, mode_name) = args.workload.mode();
    let plan = load.plan(mode, mode_name)?;
    let result = runner::run(plan, command_line.to_string());
    drop(running);
    result
}

/// The median of `v` (`None` if empty).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

type Figure = (&'static str, fn(&BenchResult) -> Option<f64>);

fn figures(workload: Workload) -> Vec<Figure> {
    let mut f: Vec<Figure> = Vec::new();
    if workload != Workload::Sub {
        f.push(("published msg/s", |r| Some(r.published.msgs_per_s)));
        f.push(("publish ack p99 µs", |r| r.ack_latency_us.map(|p| p.p99)));
    }
    if workload != Workload::Pub {
        f.push(("consumed msg/s", |r| Some(r.consumed.msgs_per_s)));
    }
    if workload == Workload::Pubsub {
        f.push(("e2e p50 µs", |r| r.e2e_latency_us.map(|p| p.p50)));
        f.push(("e2e p99 µs", |r| r.e2e_latency_us.map(|p| p.p99)));
    }
    f.push(("broker CPU µs/msg", |r| {
        let b = r.broker.as_ref()?;
        if r.consumes() {
            b.cpu_s_per_million_sub
        } else {
            b.cpu_s_per_million_pub
        }
    }));
    f.push(("broker peak RSS MiB", |r| {
        r.broker.as_ref().map(|b| b.peak_rss_kb as f64 / 1024.0)
    }));
    f
}

/// The table of medians, with each broker's ratio to the first.
pub fn summary(brokers: &[BrokerCommand], results: &[Vec<BenchResult>], w: Workload) -> String {
    let mut out = String::new();
    let runs = results.iter().map(Vec::len).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "\nmedians of {runs} alternating run(s) each, a fresh broker per run ({:?})\n",
        w
    );
    let mut head = "| figure |".to_string();
    let mut rule = "| --- |".to_string();
    for (i, b) in brokers.iter().enumerate() {
        let _ = write!(head, " {} |", b.name);
        rule.push_str(" ---: |");
        if i > 0 {
            let _ = write!(head, " {} / {} |", b.name, brokers[0].name);
            rule.push_str(" ---: |");
        }
    }
    let _ = writeln!(out, "{head}\n{rule}");
    for (name, get) in figures(w) {
        let meds: Vec<Option<f64>> = results
            .iter()
            .map(|rs| median(rs.iter().filter_map(get).collect()))
            .collect();
        let mut row = format!("| {name} |");
        for (i, m) in meds.iter().enumerate() {
            match m {
                Some(v) => {
                    let _ = write!(row, " {} |", show(*v));
                }
                None => row.push_str(" - |"),
            }
            if i > 0 {
                match (meds[0], m) {
                    (Some(a), Some(b)) if a > 0.0 => {
                        let _ = write!(row, " {:.2}x |", b / a);
                    }
                    _ => row.push_str(" - |"),
                }
            }
        }
        let _ = writeln!(out, "{row}");
    }
    out
}

fn show(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_commands_parse_and_fill() {
        let b = parse_broker("ours=broker --tcp-address={tcp} --data-path={data}").unwrap();
        assert_eq!(b.name, "ours");
        let filled = fill(&b.command, "127.0.0.1:1", "127.0.0.1:2", Path::new("/d"));
        assert_eq!(filled, "broker --tcp-address=127.0.0.1:1 --data-path=/d");
        for bad in ["nocommand", "=broker {tcp}", "a b=broker {tcp}", "x=broker"] {
            assert!(parse_broker(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn runs_alternate_and_medians_are_medians() {
        assert_eq!(order(2, 0), vec![0, 1]);
        assert_eq!(order(2, 1), vec![1, 0]);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}

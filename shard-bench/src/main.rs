use clap::Parser;
use shard_bench::options::{Cli, Command, Mode, RawWorkload};
use shard_bench::{compare, keep, report, runner, sink, BenchError};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shard-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, BenchError> {
    let command_line = command_line();
    let (plan, _sink) = match cli.command {
        Command::Pub(a) => (a.plan(Mode::Pub, "pub")?, None),
        Command::Sub(a) => (a.plan(Mode::Sub, "sub")?, None),
        Command::Pubsub(a) => (a.plan(Mode::PubSub, "pubsub")?, None),
        Command::Raw(r) => {
            let (mode, name) = match r.workload {
                RawWorkload::Pub => (Mode::Pub, "raw-pub"),
                RawWorkload::Sub => (Mode::Sub, "raw-sub"),
            };
            let mut plan = r.load.plan(mode, name)?;
            let sink = sink::start(sink::Placement::One(r.sink_cpu), plan.size)?;
            plan.brokers = vec![sink.addr.to_string()];
            plan.lookupds.clear();
            (plan, Some(sink))
        }
        Command::Sink(s) => {
            let placement = match s.executors {
                1 => sink::Placement::One(s.cpu),
                n => sink::Placement::PerCpu(n as usize),
            };
            let keep = s.data_path.map(|dir| keep::KeepTo {
                dir,
                ack: if s.ack_after_write {
                    keep::AckAt::Written
                } else {
                    keep::AckAt::Kept
                },
            });
            let sink = sink::start_at(s.tcp_address, placement, s.size as usize, keep, s.relay)?;
            eprintln!("shard-bench: sink listening on {} until killed", sink.addr);
            loop {
                std::thread::park();
            }
        }
        Command::Compare(c) => {
            compare::run(c, &command_line)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Report(r) => {
            let w = report::write_report(&r.results, &r.out, &r.title)?;
            println!(
                "{}",
                std::fs::read_to_string(&w.markdown).unwrap_or_default()
            );
            println!(
                "wrote {}, {}, {}",
                w.markdown.display(),
                w.throughput_svg.display(),
                w.latency_svg.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let json = plan.json.clone();
    let result = runner::run(plan, command_line)?;
    print!("{result}");
    if let Some(path) = json {
        result.write(&path)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The command line as typed, quoted where needed, for the result.
fn command_line() -> String {
    std::env::args()
        .enumerate()
        .map(|(i, a)| {
            let a = if i == 0 { "shard-bench".to_string() } else { a };
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

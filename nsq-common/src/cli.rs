//! Command-line conventions the three binaries (broker, lookup, admin-ui) share with NSQ's Go
//! programs: long flags written with one dash (`-tcp-address=:4150`), the log level names
//! `fatal` included, and SIGTERM as a clean end. Behind the `cli` feature, so the client
//! library does not pull in clap.

use clap::CommandFactory;

/// `args` with each single-dash long flag that `F` knows (`-tcp-address=x`, `-tcp-address
/// x`) rewritten to its double-dash form, so that clap reads Go-style command lines. Anything
/// else, a value that starts with a dash included, is left as it is.
pub fn go_style_flags<F: CommandFactory, I: IntoIterator<Item = String>>(args: I) -> Vec<String> {
    let command = F::command();
    let known: Vec<&str> = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .chain(["help", "version"])
        .collect();
    args.into_iter()
        .enumerate()
        .map(|(i, arg)| {
            let Some(rest) = arg.strip_prefix('-') else {
                return arg;
            };
            if i == 0 || rest.starts_with('-') {
                return arg;
            }
            let name = rest.split('=').next().unwrap_or_default();
            if known.contains(&name) {
                format!("-{arg}")
            } else {
                arg
            }
        })
        .collect()
}

/// A `--log-level` value as nsqd reads it (any case): `debug`, `info`, `warn`, `error`, or
/// `fatal` (logged as `error`, the most severe level there is here).
pub fn parse_log_level(s: &str) -> Result<tracing::Level, String> {
    match s.to_ascii_lowercase().as_str() {
        "debug" => Ok(tracing::Level::DEBUG),
        "info" => Ok(tracing::Level::INFO),
        "warn" => Ok(tracing::Level::WARN),
        "error" | "fatal" => Ok(tracing::Level::ERROR),
        _ => Err(format!(
            "invalid log level {s:?}: debug, info, warn, error or fatal"
        )),
    }
}

/// Ends the process with status 0 on SIGTERM or SIGINT, as nsqlookupd and nsqadmin end: for
/// a program that keeps nothing on disk there is nothing to finish (without this, SIGTERM's
/// default action ends it with status 143, which service managers report as a failure). The
/// broker, which has storage to hand over, runs its own shutdown instead.
pub fn exit_on_signals() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                tracing::info!(signal, "exiting on a signal");
                std::process::exit(0);
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};

    struct Known;

    impl CommandFactory for Known {
        fn command() -> Command {
            Command::new("t")
                .arg(Arg::new("tcp-address").long("tcp-address"))
                .arg(Arg::new("log-level").long("log-level"))
                .arg(Arg::new("x").short('x').action(ArgAction::SetTrue))
        }

        fn command_for_update() -> Command {
            Self::command()
        }
    }

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn known_single_dash_flags_get_two_dashes() {
        let out = go_style_flags::<Known, _>(strings(&[
            "-prog",
            "-tcp-address=:1",
            "-log-level",
            "-x",
            "--help",
            "-nope",
            "v",
            "-help",
        ]));
        assert_eq!(
            out,
            strings(&[
                "-prog",
                "--tcp-address=:1",
                "--log-level",
                "-x",
                "--help",
                "-nope",
                "v",
                "--help"
            ])
        );
    }

    #[test]
    fn log_levels_as_nsqd_names_them() {
        assert_eq!(parse_log_level("FATAL"), Ok(tracing::Level::ERROR));
        assert_eq!(parse_log_level("Warn"), Ok(tracing::Level::WARN));
        assert!(parse_log_level("loud").is_err());
        assert!(parse_log_level("trace").is_err());
    }
}

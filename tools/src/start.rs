//! How every tool's `main` begins and ends: its command line parsed ([`options`]: `--version`
//! answered, logging set up), its fatal errors printed as `<tool>: <message>` with status 1
//! ([`fatal`]), and its async work run on the tool's one executor ([`run`], [`run_with`]:
//! signal handlers first, then RLIMIT_MEMLOCK and the executor, then the outcome as the exit
//! status).
//!
//! Invariant: nothing here starts work before the tool has checked its flags; each step runs
//! in the order above, so a tool's messages and exit statuses are the same whichever step
//! fails.

use crate::cli::{self, Signals};
use glommio::LocalExecutorBuilder;
use std::future::Future;

/// What [`options`] needs to know of a tool's parsed flags.
pub trait ToolOptions: clap::Parser {
    /// `--version` was given.
    fn version(&self) -> bool;

    /// The level to log at (`--log-level` where the tool has it).
    fn log_level(&self) -> tracing::Level {
        tracing::Level::WARN
    }
}

/// The tool's flags, or `None` once `--version` is printed (the tool then exits 0); logging is
/// set up before the flags are returned.
pub fn options<T: ToolOptions>(tool: &str) -> Option<T> {
    let opts: T = cli::parse_args();
    if opts.version() {
        println!("{}", cli::version_line(tool));
        return None;
    }
    cli::init_logging(opts.log_level());
    Some(opts)
}

/// Prints `<tool>: <message>` to stderr and gives the exit status of a fatal error, 1.
pub fn fatal(tool: &str, message: impl std::fmt::Display) -> i32 {
    eprintln!("{tool}: {message}");
    1
}

/// What a tool's async main ends with, turned into its exit status.
pub trait Outcome: Send + 'static {
    fn exit_code(self, tool: &str) -> i32;
}

/// The exit status itself.
impl Outcome for i32 {
    fn exit_code(self, _tool: &str) -> i32 {
        self
    }
}

/// 0, or the error as a [`fatal`] one.
impl Outcome for Result<(), String> {
    fn exit_code(self, tool: &str) -> i32 {
        match self {
            Ok(()) => 0,
            Err(e) => fatal(tool, e),
        }
    }
}

/// Runs `main` on the tool's executor (see [`run_with`]) as it comes from [`cli::executor`].
pub fn run<M, F>(tool: &'static str, main: M) -> i32
where
    M: FnOnce(Signals) -> F + Send + 'static,
    F: Future + 'static,
    F::Output: Outcome,
{
    run_with(tool, |b| b, main)
}

/// Registers the signal handlers, builds the tool's executor ([`cli::executor`], then
/// `configure`), runs `main` on it with the signals and returns its exit status; a failure of
/// any of these is [`fatal`].
pub fn run_with<C, M, F>(tool: &'static str, configure: C, main: M) -> i32
where
    C: FnOnce(LocalExecutorBuilder) -> LocalExecutorBuilder,
    M: FnOnce(Signals) -> F + Send + 'static,
    F: Future + 'static,
    F::Output: Outcome,
{
    let signals = match Signals::register() {
        Ok(s) => s,
        Err(e) => return fatal(tool, format!("installing signal handlers: {e}")),
    };
    let executor = match cli::executor(tool) {
        Ok(b) => configure(b),
        Err(e) => return fatal(tool, e),
    };
    match executor.spawn(move || main(signals)).map(|h| h.join()) {
        Ok(Ok(outcome)) => outcome.exit_code(tool),
        Ok(Err(e)) | Err(e) => fatal(tool, e),
    }
}

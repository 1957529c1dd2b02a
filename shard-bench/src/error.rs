//! The crate's one error type: what can stop a bench run or a report before it produces a
//! result. Failures of single publishes during a run are not errors here; they are counted in
//! the result (`errors`) and the run goes on.

use std::fmt;
use std::io;
use std::path::PathBuf;

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

#[derive(Debug)]
#[non_exhaustive]
pub enum BenchError {
    /// A flag value that cannot work (the text names the flag).
    InvalidOption(String),
    /// The broker (or the raw sink) could not be reached or refused the subscription.
    Connect { addr: String, source: client::Error },
    /// Lookups named no broker for the topic.
    NoBrokers { topic: String },
    /// A glommio executor could not be started (CPU pinning, io_uring, locked memory).
    Executor(String),
    /// The run did not end within its hard deadline.
    Stuck(&'static str),
    /// Reading or writing a file.
    File { path: PathBuf, source: io::Error },
    /// A result file that is not a shard-bench result.
    BadResult {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// Anything else from the operating system.
    Io(io::Error),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::InvalidOption(what) => write!(f, "invalid option: {what}"),
            BenchError::Connect { addr, source } => write!(f, "cannot connect to {addr}: {source}"),
            BenchError::NoBrokers { topic } => {
                write!(f, "the lookups know no broker for topic {topic:?}")
            }
            BenchError::Executor(e) => write!(f, "cannot start a glommio executor: {e}"),
            BenchError::Stuck(what) => write!(f, "the run did not stop in time ({what})"),
            BenchError::File { path, source } => write!(f, "{}: {source}", path.display()),
            BenchError::BadResult { path, source } => {
                write!(
                    f,
                    "{} is not a shard-bench result: {source}",
                    path.display()
                )
            }
            BenchError::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Connect { source, .. } => Some(source),
            BenchError::File { source, .. } => Some(source),
            BenchError::BadResult { source, .. } => Some(source),
            BenchError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for BenchError {
    fn from(e: io::Error) -> Self {
        BenchError::Io(e)
    }
}

//! Start-up progress: which step each shard (and the control thread) has reached, a watchdog
//! that names whoever has not finished a step after [`REPORT_AFTER`], and the wake-up ticks
//! that keep a start-up wait from depending on a cross-thread wake-up alone. Also
//! [`StartError`]: every reason the broker does not start, each saying what to fix.
//!
//! Invariants:
//! - Every participant moves through [`Step`] in order and ends at [`Step::Serving`] or
//!   [`Step::Failed`]; main returns from [`StartProgress::watch`] only when every shard has.
//! - A step that does no work proportional to the data ([`Step::bounded`]: joining the mailbox
//!   mesh, probing the data path, opening the servers) that has not finished after
//!   [`STEP_LIMIT`] ends the process with status 1 and says which participant and step it was,
//!   so that a supervisor restarts the broker instead of leaving it up and deaf. Loading topics
//!   (recovery reads every segment) is reported, never cut short.

use crate::config::ConfigError;
use crate::sys::listen::ListenError;
use crate::sys::rlimit::MemlockError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use tracing::{error, warn};

/// How long a step may take before the watchdog names it in the log (and again every as long).
pub const REPORT_AFTER: Duration = Duration::from_secs(10);
/// How often the watchdog looks at the steps.
const WATCH_POLL: Duration = Duration::from_millis(500);
/// How long a bounded step may take before the process gives up.
pub const STEP_LIMIT: Duration = Duration::from_secs(60);
/// While a start-up step waits on another thread, its executor wakes up this often to look
/// again: a lost cross-thread wake-up then costs a tick instead of the start.
pub const WAKE_TICK: Duration = Duration::from_millis(20);

/// Why the broker did not start, or (only [`StartError::LostAtStop`]) why a shard's run ended
/// badly. The text is the operator's message: what failed, with the figures, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The nsqd data directory in the data path cannot be imported (nothing was).
    #[error(transparent)]
    NsqdImport(#[from] crate::nsqd_import::ImportError),
    /// The broker's identity file (`--replication-address`) cannot be read, is damaged, or
    /// cannot be written.
    #[error(transparent)]
    Identity(#[from] crate::cluster::IdentityError),
    /// The command line is refused: a bad flag or flag value.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// RLIMIT_MEMLOCK is below what the shards' io_uring needs (the text gives the figures and
    /// the settings that raise it).
    #[error(transparent)]
    Memlock(#[from] MemlockError),
    /// A listening socket could not be opened: the address is in use, or another socket error.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// Another broker on this host holds the claim on the address (see `launch::claim_ports`).
    #[error(
        "cannot listen on {flag} {addr}: another broker on this host is starting, running or \
         stopping on it (it holds the abstract unix socket @nsq-broker-listen-{addr}; `ss -xlp` \
         shows which process)"
    )]
    AddressClaimed {
        flag: &'static str,
        addr: SocketAddr,
    },
    #[error("cannot listen on {flag} {addr}: cannot claim it: {source}")]
    ClaimFailed {
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A port-0 address whose socket reports no address once bound.
    #[error("{flag} {addr}: no local address")]
    NoLocalAddress {
        flag: &'static str,
        addr: SocketAddr,
    },
    /// `--data-path` does not exist: a typo would otherwise start an empty store while the
    /// data sits elsewhere (nsqd refuses it too).
    #[error(
        "--data-path {} does not exist; create it (the broker's systemd unit uses \
         StateDirectory= to do so) or correct the path",
        path.display()
    )]
    DataPathMissing { path: PathBuf },
    /// `--data-path` names something that is not a directory.
    #[error("--data-path {} is not a directory", path.display())]
    DataPathNotDirectory { path: PathBuf },
    /// This user cannot create files in `--data-path` (its mode, its owner, a read-only file
    /// system): every publish would fail.
    #[error(
        "--data-path {} is not writable: {source}; the broker's user must be able to create \
         files there",
        path.display()
    )]
    DataPathNotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open --data-path {}: {source}", path.display())]
    DataPathOpen {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another broker (or an nsqd, which takes the same lock) holds the lock on `--data-path`.
    #[error(
        "cannot lock --data-path {}: in use by another broker or a running nsqd (each needs its \
         own; to take over nsqd's data, stop nsqd first)",
        path.display()
    )]
    DataPathInUse { path: PathBuf },
    #[error("cannot lock --data-path {}: {source}", path.display())]
    DataPathLock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("cannot start shard {shard} on cpu {cpu}: {source}")]
    SpawnShard {
        shard: usize,
        cpu: usize,
        source: glommio::GlommioError<()>,
    },
    #[error("cannot start the control thread: {0}")]
    SpawnControl(glommio::GlommioError<()>),
    /// `--tls-cert`, `--tls-key` or `--tls-root-ca-file` cannot be read or used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A shard could not join the mailbox mesh (the other participants then wait for it).
    #[error("shard {shard}: could not join the mailbox mesh")]
    JoinMesh { shard: usize },
    #[error("shard {shard}: no listening sockets were opened for it")]
    NoListeners { shard: usize },
    /// `--replication-address`: the shard's listener for peer brokers (port + shard index)
    /// cannot be opened.
    #[error("shard {shard}: cannot listen for peer brokers (--replication-address's port + {shard}): {source}")]
    Replication {
        shard: usize,
        source: std::io::Error,
    },
    /// A stored topic's log cannot be opened (recovery failed: a segment cannot be read, a
    /// directory cannot be listed).
    #[error("topic {topic}: cannot open its log in {}: {source}", dir.display())]
    TopicLoad {
        topic: String,
        dir: PathBuf,
        source: crate::storage::StorageError,
    },
    /// At the end of a shard's run: acknowledged messages it could not write at shutdown.
    #[error(
        "shard {shard}: {bytes} bytes of acknowledged messages could not be written at shutdown \
         (see the errors above); they are lost"
    )]
    LostAtStop { shard: usize, bytes: usize },
}

impl StartError {
    /// The process's exit status for this error: 2 for a refused command line (as for a usage
    /// error), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// A participant's step, in the order they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Step {
    /// Its thread is being started.
    Spawning = 0,
    JoiningMesh = 1,
    LoadingTopics = 2,
    ProbingDataPath = 3,
    StartingServers = 4,
    Serving = 5,
    Failed = 6,
}

impl Step {
    fn from_u8(v: u8) -> Step {
        match v {
            0 => Step::Spawning,
            1 => Step::JoiningMesh,
            2 => Step::LoadingTopics,
            3 => Step::ProbingDataPath,
            4 => Step::StartingServers,
            5 => Step::Serving,
            _ => Step::Failed,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Step::Spawning => "starting its thread and executor",
            Step::JoiningMesh => "joining the mailbox mesh",
            Step::LoadingTopics => "loading its topics (recovering their segments)",
            Step::ProbingDataPath => "probing the data path for direct I/O",
            Step::StartingServers => "starting its TCP and HTTP servers",
            Step::Serving => "serving",
            Step::Failed => "failed",
        }
    }

    /// Whether the step's work does not grow with the data, so that a long wait there means a
    /// stuck start rather than a big one.
    pub fn bounded(self) -> bool {
        matches!(
            self,
            Step::Spawning | Step::JoiningMesh | Step::ProbingDataPath | Step::StartingServers
        )
    }

    fn done(self) -> bool {
        matches!(self, Step::Serving | Step::Failed)
    }
}

/// The steps of the shards (`0..shards`) and of the control thread (the last slot).
pub struct StartProgress {
    steps: Vec<AtomicU8>,
}

impl StartProgress {
    pub fn new(shards: usize) -> StartProgress {
        StartProgress {
            steps: (0..=shards)
                .map(|_| AtomicU8::new(Step::Spawning as u8))
                .collect(),
        }
    }

    /// The slot of the control thread.
    pub fn control(&self) -> usize {
        self.steps.len() - 1
    }

    pub fn set(&self, who: usize, step: Step) {
        if let Some(s) = self.steps.get(who) {
            s.store(step as u8, Ordering::Release);
        }
    }

    pub fn get(&self, who: usize) -> Step {
        self.steps
            .get(who)
            .map_or(Step::Failed, |s| Step::from_u8(s.load(Ordering::Acquire)))
    }

    fn name(&self, who: usize) -> String {
        if who == self.control() {
            "the control thread".into()
        } else {
            format!("shard {who}")
        }
    }

    /// The participants that have not reached `Serving` or `Failed`, with their step.
    #[cfg(test)]
    fn unfinished(&self) -> Vec<(usize, Step)> {
        (0..self.steps.len())
            .map(|who| (who, self.get(who)))
            .filter(|&(_, step)| !step.done())
            .collect()
    }

    /// Waits for every shard's word on `ready` (true: serving); returns whether all serve.
    /// Every [`REPORT_AFTER`] it logs whoever has been at one step that long; a bounded step
    /// held for [`STEP_LIMIT`] ends the process (status 1).
    pub fn watch(&self, ready: &Receiver<bool>, shards: usize) -> bool {
        let mut answered = 0;
        let mut all_serving = true;
        let start = Instant::now();
        // Per participant: the step last seen and since when.
        let mut seen: Vec<(Step, Instant)> = (0..self.steps.len())
            .map(|who| (self.get(who), start))
            .collect();
        let mut reported = start;
        while answered < shards {
            match ready.recv_timeout(WATCH_POLL) {
                Ok(serving) => {
                    answered += 1;
                    all_serving &= serving;
                }
                Err(RecvTimeoutError::Disconnected) => return false,
                Err(RecvTimeoutError::Timeout) => {}
            }
            let now = Instant::now();
            let mut stuck = Vec::new();
            for (who, (step, since)) in seen.iter_mut().enumerate() {
                let current = self.get(who);
                if current != *step {
                    *step = current;
                    *since = now;
                }
                if !current.done() && now - *since >= REPORT_AFTER {
                    stuck.push((who, current, now - *since));
                }
            }
            if !stuck.is_empty() && now - reported >= REPORT_AFTER {
                reported = now;
                self.report(&stuck);
            }
        }
        all_serving
    }

    fn report(&self, stuck: &[(usize, Step, Duration)]) {
        for &(who, step, held) in stuck {
            warn!(
                "start-up: {} has not finished {} after {:.0?}",
                self.name(who),
                step.describe(),
                held
            );
        }
        let limit = step_limit();
        if let Some(&(who, step, held)) = stuck.iter().find(|s| s.1.bounded() && s.2 >= limit) {
            error!(
                "start-up: {} is stuck {} ({:.0?}); exiting so that the supervisor starts \
                 the broker again",
                self.name(who),
                step.describe(),
                held
            );
            std::process::exit(1);
        }
    }
}

/// A test hook: with `BROKER_TEST_STALL_START=<shard>:<step>` in the environment (step as
/// `Step`'s name, e.g. `1:ProbingDataPath`), that shard never finishes that step, so tests can
/// watch the watchdog. With `BROKER_TEST_STEP_LIMIT_SECS=N` a bounded step may take N seconds
/// instead of [`STEP_LIMIT`]. Neither is meant for production.
pub async fn stall_if_asked(who: usize, step: Step) {
    let Ok(spec) = std::env::var("BROKER_TEST_STALL_START") else {
        return;
    };
    if spec == format!("{who}:{step:?}") {
        warn!("start-up: shard {who} stalls at {step:?} (BROKER_TEST_STALL_START)");
        futures_lite::future::pending::<()>().await;
    }
}

fn step_limit() -> Duration {
    std::env::var("BROKER_TEST_STEP_LIMIT_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(STEP_LIMIT, Duration::from_secs)
}

/// Runs `fut` on this executor while a timer wakes the executor every [`WAKE_TICK`], so that
/// `fut` is polled again even if the wake-up it waits for from another thread is lost.
pub async fn with_wake_ticks<T>(fut: impl std::future::Future<Output = T>) -> T {
    futures_lite::future::or(fut, async {
        loop {
            glommio::timer::sleep(WAKE_TICK).await;
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_lists_who_is_short_of_serving() {
        let p = StartProgress::new(2);
        assert_eq!(
            p.unfinished(),
            vec![
                (0, Step::Spawning),
                (1, Step::Spawning),
                (2, Step::Spawning)
            ]
        );
        p.set(0, Step::Serving);
        p.set(1, Step::LoadingTopics);
        p.set(p.control(), Step::Serving);
        assert_eq!(p.unfinished(), vec![(1, Step::LoadingTopics)]);
        p.set(1, Step::Failed);
        assert!(p.unfinished().is_empty());
    }

    #[test]
    fn watch_returns_once_every_shard_answered() {
        let p = StartProgress::new(2);
        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(true).unwrap();
        tx.send(false).unwrap();
        assert!(!p.watch(&rx, 2));
        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(true).unwrap();
        tx.send(true).unwrap();
        assert!(p.watch(&rx, 2));
    }

    #[test]
    fn only_steps_that_do_not_grow_with_the_data_are_bounded() {
        assert!(Step::JoiningMesh.bounded());
        assert!(Step::ProbingDataPath.bounded());
        assert!(!Step::LoadingTopics.bounded());
        assert!(!Step::Serving.bounded());
    }
}

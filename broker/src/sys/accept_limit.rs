//! What an accept loop does when the process is out of file descriptors.
//!
//! At the descriptor limit `accept` fails with `EMFILE` (or `ENFILE` for the whole system)
//! and the connection stays in the listener's queue: its client would wait there for as long
//! as the limit lasts, and an accept loop that simply retried would fail again at once. So
//! each accept loop keeps one spare descriptor ([`AcceptLimit`]): at the limit it closes the
//! spare, accepts the waiting connection with the freed slot, closes that connection at once
//! (its client reads end-of-file: refused, not left hanging), and opens its spare again.
//! Connections already open are served as before. The failure is logged at most once a
//! second per accept loop, with the number of connections refused since the last line.

use glommio::net::TcpListener;
use std::fs::File;
use std::io;
use std::time::{Duration, Instant};
use tracing::{error, warn};

/// Least time between two log lines about failing accepts.
const LOG_EVERY: Duration = Duration::from_secs(1);
/// Pause after an accept error that is not the descriptor limit, or when no spare is left.
const BACKOFF: Duration = Duration::from_millis(50);
/// How long to wait for the connection that made `accept` fail, once a slot is free.
const TAKE_WAIT: Duration = Duration::from_millis(100);

/// One accept loop's spare descriptor and the state of its rate-limited log.
pub struct AcceptLimit {
    shard: usize,
    what: &'static str,
    spare: Option<File>,
    last_log: Option<Instant>,
    refused: u64,
    failed: u64,
}

fn open_spare() -> Option<File> {
    File::open("/dev/null").ok()
}

fn is_fd_limit(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

impl AcceptLimit {
    /// `what` names the listener in the log ("TCP", "HTTP").
    pub fn new(shard: usize, what: &'static str) -> AcceptLimit {
        AcceptLimit {
            shard,
            what,
            spare: open_spare(),
            last_log: None,
            refused: 0,
            failed: 0,
        }
    }

    /// Handles a failed `accept` on `listener`: at the descriptor limit, refuses the waiting
    /// connection with the spare's slot; otherwise waits a moment.
    pub async fn on_error(&mut self, listener: &TcpListener, e: impl Into<io::Error>) {
        let e: io::Error = e.into();
        self.failed += 1;
        if is_fd_limit(&e) && self.spare.take().is_some() {
            let taken =
                glommio::timer::timeout(TAKE_WAIT, async { Ok(listener.accept().await) }).await;
            if let Ok(Ok(stream)) = taken {
                drop(stream);
                self.refused += 1;
            }
            self.spare = open_spare();
        } else {
            glommio::timer::sleep(BACKOFF).await;
            if self.spare.is_none() {
                self.spare = open_spare();
            }
        }
        self.log(&e);
    }

    fn log(&mut self, e: &io::Error) {
        let now = Instant::now();
        if self
            .last_log
            .is_some_and(|at| now.duration_since(at) < LOG_EVERY)
        {
            return;
        }
        self.last_log = Some(now);
        let (failed, refused) = (self.failed, self.refused);
        self.failed = 0;
        self.refused = 0;
        if is_fd_limit(e) {
            warn!(
                shard = self.shard,
                failed,
                refused,
                "{} accept failed: {e}; new connections are refused (closed at once) until descriptors free up",
                self.what
            );
        } else {
            error!(
                shard = self.shard,
                failed, "{} accept failed: {e}", self.what
            );
        }
    }
}

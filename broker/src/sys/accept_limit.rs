//! What the accept loops do when the process is out of file descriptors.
//!
//! At the descriptor limit `accept` fails with `EMFILE` (or `ENFILE` for the whole system)
//! and the connection stays in the listener's queue: its client would wait there for as long
//! as the limit lasts, and an accept loop that simply retried would fail again at once. So the
//! process keeps a pool of spare descriptors, one per accept loop ([`AcceptLimit`]): a loop at
//! the limit closes a spare, accepts the waiting connection with the freed slot, closes that
//! connection at once (its client reads end-of-file: refused, not left hanging), and opens the
//! spare again. Connections already open are served as before. The failure is logged at most
//! once a second per accept loop, with the number of connections refused since the last line.
//!
//! The pool is shared by every loop of every shard, and it is refilled before a connection is
//! served: the slot a loop frees to refuse can be taken by another thread's accept, which then
//! serves that connection, and the spare cannot be opened again. Were the spares per loop, each
//! such race would leave one loop without a spare for good, and the connections queued on its
//! listener would hang (seen with four shards). Instead, a loop that accepts while the pool is
//! short opens a spare first, and if that fails (the process is at its limit) the connection
//! it accepted is refused and its slot becomes the spare. Invariant: the pool is short only
//! between a refusal and the next accept anywhere in the process, so a loop at the limit finds
//! a spare unless every loop refuses at the same instant (then it waits a moment and retries).

use glommio::net::{TcpListener, TcpStream};
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::{error, warn};

/// Least time between two log lines about failing accepts.
const LOG_EVERY: Duration = Duration::from_secs(1);
/// Pause after an accept error that is not the descriptor limit, or when no spare is left.
const BACKOFF: Duration = Duration::from_millis(50);
/// How long to wait for the connection that made `accept` fail, once a slot is free.
const TAKE_WAIT: Duration = Duration::from_millis(100);

/// The process's spare descriptors, and how many it should hold (one per accept loop).
static SPARES: Mutex<Vec<File>> = Mutex::new(Vec::new());
static WANTED: AtomicUsize = AtomicUsize::new(0);
/// `WANTED` minus the spares held: non-zero only around a refusal (see the module doc).
static SHORT: AtomicUsize = AtomicUsize::new(0);

fn open_spare() -> Option<File> {
    File::open("/dev/null").ok()
}

fn spares() -> std::sync::MutexGuard<'static, Vec<File>> {
    SPARES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes a spare out of the pool (its slot is freed when the caller drops it).
fn take_spare() -> Option<File> {
    let mut pool = spares();
    let spare = pool.pop()?;
    SHORT.store(
        WANTED.load(Ordering::Relaxed).saturating_sub(pool.len()),
        Ordering::Relaxed,
    );
    Some(spare)
}

/// Opens spares until the pool holds what it should; false if the process is at its limit.
fn refill() -> bool {
    let mut pool = spares();
    let wanted = WANTED.load(Ordering::Relaxed);
    let mut full = true;
    while pool.len() < wanted {
        match open_spare() {
            Some(f) => pool.push(f),
            None => {
                full = false;
                break;
            }
        }
    }
    SHORT.store(wanted.saturating_sub(pool.len()), Ordering::Relaxed);
    full
}

fn is_fd_limit(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// One accept loop's part in the pool, and the state of its rate-limited log.
pub struct AcceptLimit {
    shard: usize,
    what: &'static str,
    last_log: Option<Instant>,
    refused: u64,
    failed: u64,
}

impl AcceptLimit {
    /// `what` names the listener in the log ("TCP", "HTTP"). Adds one spare to the pool.
    pub fn new(shard: usize, what: &'static str) -> AcceptLimit {
        WANTED.fetch_add(1, Ordering::Relaxed);
        refill();
        AcceptLimit {
            shard,
            what,
            last_log: None,
            refused: 0,
            failed: 0,
        }
    }

    /// A connection `accept` gave: returned to be served, unless the pool is short and cannot
    /// be refilled (the process is at its limit), in which case it is refused (closed) and its
    /// slot becomes a spare.
    pub fn admit(&mut self, stream: TcpStream) -> Option<TcpStream> {
        if SHORT.load(Ordering::Relaxed) == 0 || refill() {
            return Some(stream);
        }
        drop(stream);
        self.refused += 1;
        refill();
        None
    }

    /// Handles a failed `accept` on `listener`: at the descriptor limit, refuses the waiting
    /// connection with a spare's slot; otherwise (or with no spare) waits a moment.
    pub async fn on_error(&mut self, listener: &TcpListener, e: impl Into<io::Error>) {
        let e: io::Error = e.into();
        self.failed += 1;
        let spare = if is_fd_limit(&e) { take_spare() } else { None };
        if let Some(spare) = spare {
            drop(spare);
            let taken =
                glommio::timer::timeout(TAKE_WAIT, async { Ok(listener.accept().await) }).await;
            if let Ok(Ok(stream)) = taken {
                drop(stream);
                self.refused += 1;
            }
        } else {
            glommio::timer::sleep(BACKOFF).await;
        }
        refill();
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

impl Drop for AcceptLimit {
    fn drop(&mut self) {
        WANTED.fetch_sub(1, Ordering::Relaxed);
        let mut pool = spares();
        let wanted = WANTED.load(Ordering::Relaxed);
        pool.truncate(wanted);
        SHORT.store(wanted.saturating_sub(pool.len()), Ordering::Relaxed);
    }
}

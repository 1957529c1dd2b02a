//! The replication controller hosted in the lookup (`docs/design/replication.md`): the
//! `replication::controller::Controller` (raft-rs, the cluster's metadata, broker sessions)
//! run on the lookup's executor, with its Raft log on disk and its messages on TCP. Constructed
//! only with `--controller-id`; without it the lookup is nsqlookupd and nothing here runs.
//!
//! - [`storage`]: the Raft log, hard state and latest snapshot in `--data-path`;
//! - [`transport`]: Raft messages to and from the other lookups;
//! - this module: [`Hosted`], which drives the node (tick, step, requests) and carries out
//!   what it asks (persist, then send, then apply), and the brokers' request API.
//!
//! Invariants:
//! - every input is followed by [`Hosted::drive`], which writes what the node asks (fsynced
//!   where it must) before releasing the messages that depend on it, all without an `.await`:
//!   nothing else touches the node in between (the executor waits for the fsync);
//! - a write that fails stops the controller for good (the lookup goes on serving its
//!   nsqlookupd API): Raft may not go on over a log it cannot trust to be on disk, and a restart
//!   loads whatever reached it;
//! - only the controller leader answers brokers; every answer names this node's id.

pub mod storage;
pub mod transport;

use std::cell::RefCell;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;

use replication::controller::{BrokerReply, BrokerRequest, Controller, NodeConfig, SessionConfig};
use serde::Serialize;
use serde_json::json;
use tracing::{debug, error, info, warn};

use crate::config::ControllerConfig;
use storage::RaftLog;
use transport::Outbox;

/// Time between two ticks of the node (Raft's clock and the broker sessions').
pub const TICK: Duration = Duration::from_millis(100);
/// Ticks between a Raft leader's heartbeats.
const HEARTBEAT_TICKS: usize = 2;
/// Election timeouts are drawn per node from `[MIN_ELECTION_TICKS, MIN_ELECTION_TICKS + SPREAD)`
/// (1 to 1.5 s), as the simulations draw them.
const MIN_ELECTION_TICKS: usize = 10;
const ELECTION_SPREAD: u64 = 6;
/// A broker not heard from for this many ticks (3 s) is fenced.
const SESSION_TICKS: u64 = 30;
/// A session proposal not applied after this many ticks is made again.
const RETRY_TICKS: u64 = 10;
/// Outputs handled per input at most (each one consumes a `Ready`; more waits for the next
/// input or tick).
const MAX_ROUNDS: usize = 64;

/// What the lookup holds of its controller.
pub struct Hosted {
    id: u64,
    voters: Vec<u64>,
    ctl: Controller,
    log: RaftLog,
    outbox: Outbox,
    /// Why the controller stopped, if it did.
    stopped: Option<String>,
    /// The flock on the data path, held for the whole run.
    _lock: File,
}

impl std::fmt::Debug for Hosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosted")
            .field("id", &self.id)
            .field("voters", &self.voters)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

/// A broker's request that cannot be answered.
#[derive(Debug)]
pub enum RequestError {
    /// The body is not a `BrokerRequest` (the connection is closed, as for a bad IDENTIFY).
    BadBody(String),
    /// The controller stopped after a storage failure.
    Stopped(String),
}

/// What a broker receives: the answering node's id and its reply.
#[derive(Serialize)]
struct Answer<'a> {
    controller: u64,
    reply: &'a BrokerReply,
}

impl Hosted {
    /// One tick of the node's clock.
    pub fn tick(&mut self) {
        if self.stopped.is_some() {
            return;
        }
        for (peer, delivered) in self.outbox.snapshot_reports() {
            if !delivered {
                info!(
                    "controller: a snapshot for peer {peer} was lost on the way; it is sent again"
                );
            }
            if let Err(e) = self.ctl.report_snapshot(peer, delivered) {
                debug!("controller: a snapshot report not taken: {e}");
            }
        }
        self.ctl.tick();
        self.drive();
    }

    /// A Raft message from a peer.
    pub fn step(&mut self, msg: raft::eraftpb::Message) {
        if self.stopped.is_some() {
            return;
        }
        if let Err(e) = self.ctl.step(msg) {
            debug!("controller: a Raft message refused: {e}");
        }
        self.drive();
    }

    /// A broker's `CONTROLLER` request: the JSON answer.
    pub fn request(&mut self, body: &[u8]) -> Result<Vec<u8>, RequestError> {
        if let Some(why) = &self.stopped {
            return Err(RequestError::Stopped(why.clone()));
        }
        let req: BrokerRequest =
            serde_json::from_slice(body).map_err(|e| RequestError::BadBody(e.to_string()))?;
        let reply = self.ctl.handle(req);
        self.drive();
        let answer = Answer {
            controller: self.id,
            reply: &reply,
        };
        serde_json::to_vec(&answer).map_err(|e| RequestError::BadBody(e.to_string()))
    }

    /// `GET /controller`: this node and the metadata it has applied.
    pub fn status(&self) -> serde_json::Value {
        let node = self.ctl.node();
        let stats = node.snapshot_stats();
        let role = if node.is_leader() {
            "leader"
        } else {
            "follower"
        };
        json!({
            "id": self.id,
            "voters": self.voters,
            "role": role,
            "term": node.term(),
            "leader": node.leader_id(),
            "applied_index": node.applied_index(),
            "log_entries": self.log.entries(),
            "snapshot_index": node.snapshot_index(),
            "snapshots": {
                "taken": stats.taken,
                "installed": stats.installed,
                "sent": stats.sent,
                "failed": stats.failed,
                "restarted_from_snapshot": stats.restarted_from_snapshot,
            },
            "stopped": self.stopped,
            "metadata": node.metadata(),
        })
    }

    /// Carries out what the node asks until it asks nothing more.
    fn drive(&mut self) {
        for _ in 0..MAX_ROUNDS {
            if self.stopped.is_some() {
                return;
            }
            let Some(mut out) = self.ctl.ready() else {
                return;
            };
            for m in out.messages.drain(..) {
                self.outbox.send(m);
            }
            if let Err(e) = self.log.write(&out.persist) {
                // Dropping the output undoes nothing written, and sends nothing that waited.
                drop(out);
                self.stop(format!("writing the Raft log: {e}"));
                return;
            }
            if let Some(index) = out.installed {
                // The metadata was replaced wholesale; what follows applies on top of it.
                info!(
                    index,
                    "controller: caught up by installing the leader's snapshot at index {index}"
                );
            }
            for a in &out.applied {
                log_applied(a);
            }
            let after = out.persisted();
            for m in after.messages {
                self.outbox.send(m);
            }
            for a in &after.applied {
                log_applied(a);
            }
            if let Some(commit) = after.commit {
                if let Err(e) = self.log.commit(commit) {
                    self.stop(format!("writing the Raft log: {e}"));
                    return;
                }
            }
        }
    }

    fn stop(&mut self, why: String) {
        error!("controller: stopped: {why}; restart the lookup once the data path is writable");
        self.stopped = Some(why);
    }
}

fn log_applied(a: &replication::controller::Applied) {
    if let Some(entry) = &a.entry {
        info!(
            index = a.index,
            term = a.term,
            "controller: applied {entry:?}: {:?}",
            a.outcome
        );
    }
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("--data-path {path}: {source}")]
    DataPath {
        path: String,
        source: std::io::Error,
    },
    #[error("--data-path {0} is in use by another process")]
    Locked(String),
    #[error("{0}")]
    Storage(#[from] storage::StorageError),
    #[error("the controller's Raft log is not usable: {0}")]
    Node(#[from] replication::controller::NodeError),
    #[error("cannot listen for Raft on --controller-address {address}: {source}")]
    Bind {
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Loads the node from the data path, binds its Raft address and starts its tasks.
pub fn start(cfg: &ControllerConfig) -> Result<Rc<RefCell<Hosted>>, StartError> {
    let shown = cfg.data_path.display().to_string();
    std::fs::create_dir_all(&cfg.data_path).map_err(|source| StartError::DataPath {
        path: shown.clone(),
        source,
    })?;
    let lock = lock_dir(&cfg.data_path).map_err(|e| match e {
        None => StartError::Locked(shown.clone()),
        Some(source) => StartError::DataPath {
            path: shown.clone(),
            source,
        },
    })?;
    let voters: Vec<u64> = cfg.peers.keys().copied().collect();
    let (log, durable) = RaftLog::open(&cfg.data_path, cfg.id, &voters)?;
    let restored = durable.entries.len();
    let node = NodeConfig {
        id: cfg.id,
        voters: voters.clone(),
        election_tick: MIN_ELECTION_TICKS + (os_random() % ELECTION_SPREAD) as usize,
        heartbeat_tick: HEARTBEAT_TICKS,
        snapshot_every: cfg.snapshot_every,
        snapshot_margin: cfg.snapshot_margin,
    };
    let sessions = SessionConfig {
        timeout: SESSION_TICKS,
        retry: RETRY_TICKS,
        // Re-replication (`--replica-reassign-after`) comes with the brokers' replicas.
        reassign_after: None,
    };
    let ctl = Controller::new(&node, sessions, durable)?;
    let listener = crate::server::listen(cfg.listen).map_err(|source| StartError::Bind {
        address: cfg.listen,
        source,
    })?;
    let bound = listener.local_addr().unwrap_or(cfg.listen);
    info!(
        "controller: node {} of {voters:?}, {restored} log entries restored from {shown}, election after {} ticks of {} ms",
        cfg.id,
        node.election_tick,
        TICK.as_millis()
    );
    info!("controller: Raft listening on {bound}");
    let hosted = Rc::new(RefCell::new(Hosted {
        id: cfg.id,
        voters: voters.clone(),
        ctl,
        log,
        outbox: Outbox::start(cfg.id, &cfg.peers),
        stopped: None,
        _lock: lock,
    }));
    glommio::spawn_local(transport::serve(listener, hosted.clone(), cfg.id, voters)).detach();
    glommio::spawn_local(tick_loop(hosted.clone())).detach();
    Ok(hosted)
}

async fn tick_loop(hosted: Rc<RefCell<Hosted>>) {
    loop {
        glommio::timer::sleep(TICK).await;
        hosted.borrow_mut().tick();
    }
}

/// A random number from the OS (std's hasher keys are seeded from it): each node's election
/// timeout, which must differ between nodes and cannot come from raft-rs's own draw.
fn os_random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

/// An exclusive flock on the data path for the whole run: two lookups on one Raft log would
/// break Raft. `Err(None)`: another process holds it.
fn lock_dir(dir: &std::path::Path) -> Result<File, Option<std::io::Error>> {
    let f = File::open(dir).map_err(Some)?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            None
        } else {
            warn!("controller: cannot lock the data path: {e}");
            Some(e)
        });
    }
    Ok(f)
}

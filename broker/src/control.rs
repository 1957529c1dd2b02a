//! The control thread: a small unpinned executor that joins the shards' mailbox mesh as its last
//! peer. It waits for SIGTERM/SIGINT and runs the shutdown in two phases, so that a PUB waiting
//! for another shard's answer still gets it:
//!
//! 1. `Shutdown` to every shard: stop accepting, stop delivering, let each connection finish
//!    the command in progress; each shard answers `ShutdownDone` once its connections are gone
//!    (bounded wait).
//! 2. `Exit` to every shard once all are done: nothing can reach an owner any more, so each
//!    shard hands its topics over to storage and returns.
//!
//! A second signal during shutdown exits at once with status 1.

use crate::mailbox::{Batch, Mail};
use glommio::channels::channel_mesh::{Full, MeshBuilder};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::cell::Cell;
use std::rc::Rc;
use tracing::{error, info, warn};

pub async fn run(mesh: MeshBuilder<Batch, Full>, shards: usize, mut signals: Signals) {
    let Ok((senders, mut receivers)) = mesh.join().await else {
        error!("control: could not join the mailbox mesh");
        std::process::exit(1);
    };
    let done = Rc::new(Cell::new(0usize));
    let all_done = Rc::new(crate::sync::Notify::new());
    for (_, rx) in receivers.streams() {
        let done = done.clone();
        let all_done = all_done.clone();
        glommio::spawn_local(async move {
            while let Some(batch) = rx.recv().await {
                for mail in batch {
                    if let Mail::ShutdownDone { shard } = mail {
                        info!(shard, "shard quiet");
                        done.set(done.get() + 1);
                        if done.get() >= shards {
                            all_done.notify();
                        }
                    }
                }
            }
        })
        .detach();
    }

    let handle = signals.handle();
    let (first, signals) = glommio::executor()
        .spawn_blocking(move || {
            let first = signals.forever().next();
            (first, signals)
        })
        .await;
    info!(signal = ?first, "signal received; shutting down");
    // A second signal means: stop now.
    glommio::spawn_local(glommio::executor().spawn_blocking(move || {
        let mut signals = signals;
        if signals.forever().next().is_some() {
            warn!("second signal: exiting without finishing the shutdown");
            std::process::exit(1);
        }
    }))
    .detach();

    for shard in 0..shards {
        let _ = senders.send_to(shard, vec![Mail::Shutdown]).await;
    }
    all_done.notified().await;
    for shard in 0..shards {
        let _ = senders.send_to(shard, vec![Mail::Exit]).await;
    }
    handle.close();
}

/// Registers the handlers before any shard thread starts, so no signal is missed.
pub fn install_signals() -> std::io::Result<Signals> {
    Signals::new([SIGTERM, SIGINT])
}

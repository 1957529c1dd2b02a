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
//! A shard that ended with an error (counted by main) is not waited for; main raises SIGTERM
//! itself when a shard fails to start, so the others stop this same way.
//!
//! A second signal during shutdown exits at once with status 1.
//!
//! With `--replication-address` it also runs the broker's session with the replication
//! controller ([`crate::controller_session`]), which follows the same lookup addresses, sends
//! every shard its peers (`Mail::ReplicaPeers`) and carries the shards' requests to the
//! controller (`Mail::ControllerRequest`); without the flag such a request is answered at once
//! with an error.
//!
//! The control thread also holds the broker's one registration connection per lookup
//! ([`crate::lookup_reg`]): shards report topic and channel changes to it (`Mail::Registry`),
//! shard 0 forwards `PUT /config/nsqlookupd_tcp_addresses` (`Mail::LookupAddresses`), and an
//! owner creating a topic asks it for the lookups' channels of that topic
//! (`Mail::TopicChannels`, answered through the control thread's own outboxes).

use crate::config::Config;
use crate::lookup_reg::Registrar;
use crate::mailbox::{Batch, Mail, Outbox, Reply};
use crate::startup::{with_wake_ticks, StartProgress, Step};
use glommio::channels::channel_mesh::{Full, MeshBuilder};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, error, info, warn};

pub async fn run(
    config: Arc<Config>,
    mesh: MeshBuilder<Batch, Full>,
    shards: usize,
    mut signals: Signals,
    failed_shards: Arc<AtomicUsize>,
    progress: &StartProgress,
) {
    progress.set(progress.control(), Step::JoiningMesh);
    let Ok((senders, mut receivers)) = with_wake_ticks(mesh.join()).await else {
        error!("control: could not join the mailbox mesh");
        std::process::exit(1);
    };
    progress.set(progress.control(), Step::Serving);
    let senders = Rc::new(senders);
    // Replies to the shards' questions leave through outboxes, like a shard's.
    let outboxes: Rc<Vec<Outbox>> = Rc::new(
        (0..senders.nr_consumers())
            .map(|_| Outbox::default())
            .collect(),
    );
    for peer in 0..shards {
        let senders = senders.clone();
        let outboxes = outboxes.clone();
        glommio::spawn_local(async move { outboxes[peer].pump(&senders, peer).await }).detach();
    }
    let registrar = Registrar::new(&config);
    registrar.set_addresses(config.lookupd_tcp_addresses.clone());

    // The session with the replication controller, only with --replication-address.
    let session = config
        .cluster
        .clone()
        .map(|status| crate::controller_session::start(&config, status, outboxes.clone()));

    let done = Rc::new(Cell::new(0usize));
    let all_done = Rc::new(nsq_common::local_sync::Notify::new());
    for (_, rx) in receivers.streams() {
        let done = done.clone();
        let all_done = all_done.clone();
        let registrar = registrar.clone();
        let outboxes = outboxes.clone();
        let session = session.clone();
        glommio::spawn_local(async move {
            while let Some(batch) = rx.recv().await {
                for mail in batch {
                    match mail {
                        Mail::ShutdownDone { shard } => {
                            info!(shard, "shard quiet");
                            done.set(done.get() + 1);
                            all_done.notify();
                        }
                        Mail::Registry { op, topic, channel } => {
                            registrar.change(op, &topic, channel.as_deref())
                        }
                        Mail::TopicChannels { topic, reply } => {
                            let registrar = registrar.clone();
                            let outboxes = outboxes.clone();
                            glommio::spawn_local(async move {
                                let channels = registrar.topic_channels(topic).await;
                                if let Some(o) = outboxes.get(reply.shard) {
                                    o.push(Mail::Reply {
                                        token: reply.token,
                                        reply: Reply::TopicChannels(channels),
                                    });
                                }
                            })
                            .detach();
                        }
                        Mail::ControllerRequest { request, reply } => match &session {
                            Some(s) => s.request(request, reply),
                            None => crate::controller_session::answer(
                                &outboxes,
                                reply,
                                Err(crate::controller_session::NOT_CONFIGURED.into()),
                            ),
                        },
                        Mail::LookupAddresses(addrs) => {
                            if let Some(s) = &session {
                                s.set_addresses(addrs.clone());
                            }
                            registrar.set_addresses(addrs)
                        }
                        other => debug!(?other, "control: mail not for the control thread"),
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
    // A plain thread, not the executor's blocking pool: it outlives the executor at exit
    // (the pool would answer an executor that is gone).
    let _ = std::thread::Builder::new()
        .name("second-signal".into())
        .spawn(move || {
            let mut signals = signals;
            if signals.forever().next().is_some() {
                warn!("second signal: exiting without finishing the shutdown");
                std::process::exit(1);
            }
        });

    for shard in 0..shards {
        let _ = senders.send_to(shard, vec![Mail::Shutdown]).await;
    }
    // A shard that ended with an error (at start, say) never answers; don't wait for it.
    while done.get() + failed_shards.load(Ordering::SeqCst) < shards {
        futures_lite::future::or(
            all_done.notified(),
            glommio::timer::sleep(Duration::from_millis(100)),
        )
        .await;
    }
    for shard in 0..shards {
        let _ = senders.send_to(shard, vec![Mail::Exit]).await;
    }
    handle.close();
}

/// Registers the handlers before any shard thread starts, so no signal is missed.
pub fn install_signals() -> std::io::Result<Signals> {
    Signals::new([SIGTERM, SIGINT])
}

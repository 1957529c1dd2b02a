//! A shard's life: joining the mailbox mesh, loading its topics, starting its tasks (inbox
//! loops, outbox pumps, flusher, fetcher, dispatcher, timers, confirmer) and servers, and the
//! clean stop (no new connections, connections drained, then the hand-over to storage).

use super::{ConnHandle, Shard};
use crate::config::Config;
use crate::mailbox::{Batch, Mail, RegistryOp};
use crate::startup::{with_wake_ticks, StartError, StartProgress, Step};
use crate::storage::{self, log::TopicLog};
use crate::topic::Topic;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Senders};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

impl Shard {
    /// Loads the topics this shard owns from `--data-path` (blocking: before serving).
    fn load_topics(&self) -> Result<(), StartError> {
        // It exists and is writable: `launch` checked it, and holds its lock.
        let data = &self.config.data_path;
        let mut damaged = Vec::new();
        for name in storage::stored_topics(data) {
            if self.config.owner_of(&name) != self.id {
                continue;
            }
            let dir = storage::topic_dir(data, &name);
            let log = TopicLog::open(
                &name,
                dir.clone(),
                self.config.mem_queue_size,
                self.config.max_bytes_per_file,
            )
            .map_err(|source| StartError::TopicLoad {
                topic: name.clone(),
                dir: dir.clone(),
                source,
            })?;
            let mut topic = Topic::new(&name, log, self.config.mem_queue_size, self.id);
            topic.set_retention(self.retention_default(), None, None);
            let meta = match storage::meta::read(&dir) {
                Ok(m) => m,
                Err(e) => {
                    warn!(topic = %name, "unreadable metadata ({e}); channels will be recreated by their consumers");
                    None
                }
            };
            let owed = meta
                .as_ref()
                .map(|m| topic.restore(m, Instant::now(), &self.timers))
                .unwrap_or(0);
            let head = topic.log.borrow().head();
            info!(
                topic = %name,
                shard = self.id,
                messages = head - topic.log.borrow().start(),
                channels = topic.channel_count(),
                owed,
                clean = meta.as_ref().is_some_and(|m| m.clean),
                "topic restored"
            );
            self.report(RegistryOp::Register, &name, None);
            for ch in topic.channels() {
                let ch = ch.borrow().name.clone();
                self.report(RegistryOp::Register, &name, Some(&ch));
            }
            let clean = meta.as_ref().is_some_and(|m| m.clean);
            let topic = Rc::new(RefCell::new(topic));
            if self.reopen_replicated(&topic, clean) {
                warn!(topic = %name, shard = self.id, "replication: this log may miss a suffix; the controller is told so at registration");
                damaged.push(name.clone());
            }
            self.topics.borrow_mut().insert(name, topic.clone());
        }
        if let Some(status) = &self.config.cluster {
            status.shard_loaded(damaged);
        }
        Ok(())
    }

    pub(super) fn begin_shutdown(&self) {
        if self.stopping.replace(true) {
            return;
        }
        info!(
            shard = self.id,
            "shutting down: no new connections, no new deliveries"
        );
        self.stop_accepting.notify();
        self.http_stop.notify();
        let conns: Vec<Rc<dyn ConnHandle>> = self.conns.borrow().values().cloned().collect();
        for c in conns {
            c.request_stop();
        }
        self.conns_changed.notify();
    }

    /// Called by the TCP acceptor once it stopped accepting (a clean stop): reports to the
    /// control thread once the connections are done.
    pub fn stopped_accepting(self: &Rc<Self>) {
        glommio::spawn_local(self.clone().report_when_quiet()).detach();
    }

    /// Waits (bounded) until every connection of this shard has finished, then tells control.
    async fn report_when_quiet(self: Rc<Self>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.conns.borrow().is_empty() && Instant::now() < deadline {
            futures_lite::future::or(
                self.conns_changed.notified(),
                glommio::timer::sleep(Duration::from_millis(100)),
            )
            .await;
        }
        // HTTP publishes in progress, and those answered early: their owners must have them
        // before this shard says done.
        let http_deadline = Instant::now() + Duration::from_secs(5);
        while (self.http_unconfirmed() > 0 || self.http_publishing.get() > 0)
            && Instant::now() < http_deadline
        {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        if self.http_unconfirmed() > 0 {
            error!(
                shard = self.id,
                unconfirmed = self.http_unconfirmed(),
                "HTTP publishes answered OK were not confirmed by their owners at shutdown"
            );
        }
        let left = self.conns.borrow().len();
        if left > 0 {
            warn!(
                shard = self.id,
                left, "connections still open at shutdown; closing them"
            );
            let conns: Vec<Rc<dyn ConnHandle>> = self.conns.borrow().values().cloned().collect();
            for c in conns {
                c.close();
            }
        }
        self.route(self.control, Mail::ShutdownDone { shard: self.id });
    }
}

/// Starts the servers of a shard (TCP connections and HTTP, layers above this one) on its
/// listeners; returns the TCP acceptor's task, stopped at exit.
pub type StartFrontEnds = fn(&Rc<Shard>, crate::sys::listen::ShardListeners) -> glommio::Task<()>;

/// A shard's servers: its listening sockets and how to start serving on them.
pub struct FrontEnds {
    pub listeners: Option<crate::sys::listen::ShardListeners>,
    pub start: StartFrontEnds,
}

/// Runs shard `id` until the control thread says exit.
pub async fn run(
    id: usize,
    config: Arc<Config>,
    mesh: MeshBuilder<Batch, Full>,
    control: usize,
    front_ends: FrontEnds,
    ready: &std::sync::mpsc::Sender<bool>,
    progress: &StartProgress,
) -> Result<(), StartError> {
    // Joins before anything can fail: a shard that left without joining would keep every
    // other participant waiting in its join.
    progress.set(id, Step::JoiningMesh);
    let (senders, mut receivers) = with_wake_ticks(mesh.join())
        .await
        .map_err(|_| StartError::JoinMesh { shard: id })?;
    let listeners = front_ends
        .listeners
        .ok_or(StartError::NoListeners { shard: id })?;
    let peers = senders.nr_consumers();
    let shard = Rc::new_cyclic(|me| Shard::new(id, config.clone(), peers, control, me.clone()));
    progress.set(id, Step::LoadingTopics);
    shard.load_topics()?;
    progress.set(id, Step::ProbingDataPath);
    crate::startup::stall_if_asked(id, Step::ProbingDataPath).await;
    storage::file::probe(&config.data_path, id).await;
    progress.set(id, Step::StartingServers);
    // Blocks read at start-up (messages owed at the last stop) age like any others.
    let loaded: Vec<Rc<RefCell<Topic>>> = shard.topics.borrow().values().cloned().collect();
    for t in &loaded {
        if t.borrow().log.borrow().cached_bytes() > 0 {
            shard.list_cached(t);
        }
    }
    shard
        .start_replication()
        .map_err(|source| StartError::Replication { shard: id, source })?;
    glommio::spawn_local(storage::flusher::Flusher::run(shard.clone())).detach();
    glommio::spawn_local(storage::fetcher::Fetcher::run(shard.clone())).detach();
    shard.start_statsd();
    if shard.sends.available() {
        let sender = shard.clone();
        glommio::spawn_local(async move { sender.sends.run().await }).detach();
    }
    let senders = Rc::new(senders);

    for (peer, rx) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(batch) = rx.recv().await {
                for mail in batch {
                    shard.handle(mail);
                }
                shard.flush_dispatches();
                glommio::yield_if_needed().await;
            }
            debug!(shard = shard.id, peer, "inbox closed");
        })
        .detach();
    }
    spawn_pumps(&shard, &senders, peers);
    glommio::spawn_local(shard.clone().confirm_http_publishes()).detach();
    // Dead letters the last stop left unstored go now; unanswered ones again every second.
    for t in &loaded {
        let channels: Vec<_> = t.borrow().channels().cloned().collect();
        for ch in &channels {
            shard.send_dead_letters(ch);
        }
    }
    let resender = shard.clone();
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(Duration::from_secs(1)).await;
            resender.resend_dead_letters();
        }
    })
    .detach();
    let dispatcher = shard.clone();
    glommio::spawn_local(async move {
        loop {
            dispatcher.wake_dispatcher.notified().await;
            dispatcher.flush_dispatches();
        }
    })
    .detach();

    let timers_shard = shard.clone();
    glommio::spawn_local(async move {
        let s = timers_shard.clone();
        timers_shard.timers.run(move |due| s.on_timers(due)).await;
    })
    .detach();

    let acceptor = (front_ends.start)(&shard, listeners);
    // Its topics are loaded and it accepts: main logs "listening" once every shard has said so.
    progress.set(id, Step::Serving);
    let _ = ready.send(true);

    // Wait for shutdown, then for the connections to finish, then for the word to exit.
    shard.exit.notified().await;
    drop(acceptor);
    let lost = shard.hand_over_to_storage().await;
    debug!(shard = id, "exited");
    if lost > 0 {
        return Err(StartError::LostAtStop {
            shard: id,
            bytes: lost,
        });
    }
    Ok(())
}

fn spawn_pumps(shard: &Rc<Shard>, senders: &Rc<Senders<Batch>>, peers: usize) {
    for peer in 0..peers {
        if peer == shard.id {
            continue;
        }
        let shard = shard.clone();
        let senders = senders.clone();
        glommio::spawn_local(async move {
            shard.outboxes[peer].pump(&senders, peer).await;
        })
        .detach();
    }
}

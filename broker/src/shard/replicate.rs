//! The shard's side of replicated topics (docs/design/replication.md, "How the broker runs
//! it"); nothing here is constructed without `--replication-address`.
//!
//! - The transport: shard `i` runs its own [`Peers`], listening on the replication address's
//!   port + `i`, connected to shard `i` of every peer (`Mail::ReplicaPeers` from the session).
//!   A message for a topic another shard owns is forwarded there (`Mail::ReplicaInbound`).
//! - The controller's decisions (`Mail::ReplicaTopics`) create the topic here if needed, make
//!   its log replicated, and are applied to its [`TopicReplica`].
//! - A publish to a replicated topic: on its leader, appended under the epoch it leads and
//!   answered once the replica says `Acked` or `Failed`; channels deliver only below the high
//!   watermark. A publish to a new topic while `--replicas` > 1 asks the controller to create
//!   it and waits (bounded by `--replication-timeout`) for its state.
//! - Every 50 ms each replicated topic's replica ticks; after every flusher round the replicas
//!   whose log completed an fsync are told. Channel positions go from leader to followers
//!   (`channel_sync.rs`).
//!
//! Invariants: every publish handed to a replica is answered exactly once; channels never see
//! a record at or above the high watermark; a topic with a local unreplicated history is never
//! made replicated (its records have no epoch).

use super::ingest::Answer;
use super::topics::ParkedPublish;
use super::Shard;
use crate::ids::now_nanos;
use crate::mailbox::{Mail, Reply, ReplyTo};
use crate::replication::replicas::{now_ms, replica_config, TopicReplica};
use crate::replication::transport::config::TransportConfig;
use crate::replication::transport::peers::Peers;
use crate::storage::log::ReplicaStore;
use crate::topic::{DeadOrigin, Topic};
use bytes::Bytes;
use protocol::{ErrorCode, Message, ProtocolError};
use replication::controller::{BrokerReply, BrokerRequest, TopicState as ControllerState};
use replication::ids::BrokerId;
use replication::replica::{Output, PublishError};
use replication::wire::{Delivery, Forward, Inbound};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How often every replica ticks.
const TICK_EVERY: Duration = Duration::from_millis(50);
/// Publishes parked for one new topic at most (more are refused at once).
const MAX_AWAITING: usize = 10_000;
/// The cluster id brokers of one deployment share in their handshakes.
pub(crate) const CLUSTER_ID: &str = "nsq-shard";

/// Who waits for a replicated publish's answer.
#[derive(Debug, Clone, Copy)]
enum Waiter {
    /// A connection of this broker (through the shards' mail).
    Local(ReplyTo),
    /// A follower that forwarded it: answered on the replication connection.
    Peer { broker: BrokerId, id: u64 },
}

/// A publish forwarded to its topic's leader, waiting for the answer.
struct Forwarded {
    reply: ReplyTo,
    topic: String,
    deadline: Instant,
}

/// A new topic waiting for the controller's decision.
struct AwaitingTopic {
    since: Instant,
    publishes: Vec<ParkedPublish>,
}

/// What one shard keeps for replication (empty and unused without `--replication-address`).
#[derive(Default)]
pub(crate) struct ShardReplication {
    peers: RefCell<Option<Rc<Peers>>>,
    /// This shard's replicated topics (ticked).
    pub(super) topics: RefCell<BTreeMap<String, Rc<RefCell<Topic>>>>,
    /// New topics whose publishes wait for the controller.
    awaiting: RefCell<HashMap<String, AwaitingTopic>>,
    next_publish: Cell<u64>,
    /// Who waits for each publish a replica of this shard holds (`TopicReplica::waiting`).
    waiters: RefCell<HashMap<u64, Waiter>>,
    /// The leaders of replicated topics this broker holds no replica of.
    routes: RefCell<HashMap<String, BrokerId>>,
    /// Publishes forwarded to a leader, by their id on the wire.
    forwarded: RefCell<HashMap<u64, Forwarded>>,
    next_forward: Cell<u64>,
    /// What this shard's leaders last sent of their channels (`channel_sync.rs`).
    pub(super) positions: RefCell<HashMap<String, super::channel_sync::TopicPositions>>,
}

impl ShardReplication {
    /// The shard's transport, if replication runs.
    pub(super) fn peers(&self) -> Option<Rc<Peers>> {
        self.peers.borrow().clone()
    }
}

fn pub_failed(reason: String) -> ProtocolError {
    ProtocolError::fatal(ErrorCode::PubFailed, reason)
}

impl Shard {
    /// Starts this shard's replication transport and replica ticks (`--replication-address`
    /// only): listens on the address's port + this shard's index.
    pub(super) fn start_replication(self: &Rc<Self>) -> std::io::Result<()> {
        let (Some(addr), Some(status)) = (&self.config.replication_address, &self.config.cluster)
        else {
            return Ok(());
        };
        let base = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{addr} resolves to no address")))?;
        let port = base.port().checked_add(self.id as u16).ok_or_else(|| {
            std::io::Error::other(format!("{addr}: port + shard {} is above 65535", self.id))
        })?;
        let listen = SocketAddr::new(base.ip(), port);
        let mut cfg = TransportConfig::new(
            CLUSTER_ID,
            BrokerId(status.identity.broker_id),
            status.identity.incarnation,
        );
        cfg.shard = self.id;
        let me = self.me.clone();
        let peers = Peers::new(cfg, move |from, inbound| {
            if let Some(shard) = me.upgrade() {
                match inbound {
                    Inbound::Replica(delivery) => shard.replica_inbound(from, delivery),
                    Inbound::Forward(f) => shard.forward_inbound(from, f),
                }
            }
        })
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        let bound = peers.listen(listen)?;
        info!(shard = self.id, address = %bound, "replication: listening for peer brokers");
        *self.repl.peers.borrow_mut() = Some(Rc::new(peers));
        let shard = self.clone();
        glommio::spawn_local(async move {
            // Also while stopping: the last publishes are answered by the replicas.
            loop {
                glommio::timer::sleep(TICK_EVERY).await;
                shard.tick_replicas();
                shard.expire_awaiting();
                shard.expire_forwarded();
            }
        })
        .detach();
        Ok(())
    }

    /// The session's peer set for this shard's index.
    pub(super) fn replica_peers_changed(&self, peers: BTreeMap<u64, SocketAddr>) {
        debug!(shard = self.id, ?peers, "replication: this shard's peers");
        if let Some(p) = self.repl.peers() {
            p.set_peers(peers.iter().map(|(id, a)| (BrokerId(*id), *a)).collect());
        }
        *self.replica_peers.borrow_mut() = peers;
    }

    /// Leaders of topics this broker holds no replica of changed.
    pub(super) fn replica_routes_changed(&self, routes: Vec<(String, Option<u64>)>) {
        let mut held = self.repl.routes.borrow_mut();
        for (name, leader) in routes {
            match leader {
                Some(l) => held.insert(name, BrokerId(l)),
                None => held.remove(&name),
            };
        }
    }

    /// A message from a peer's replica: handled here if this shard owns its topic.
    pub(super) fn replica_inbound(&self, from: BrokerId, delivery: Delivery) {
        let owner = self.config.owner_of(&delivery.topic);
        if owner != self.id {
            self.route(
                owner,
                Mail::ReplicaInbound {
                    from: from.0,
                    delivery,
                },
            );
            return;
        }
        let Some(t) = self.repl.topics.borrow().get(&delivery.topic).cloned() else {
            return;
        };
        let mut out = Vec::new();
        {
            let mut tb = t.borrow_mut();
            let log = tb.log.clone();
            let mut log = log.borrow_mut();
            if let Some(r) = tb.replica.as_mut() {
                let now = now_ms();
                r.with_log(&mut log, |r, l| {
                    r.on_message(l, from, delivery.msg, now, &mut out)
                });
            }
        }
        self.after_replica(&t, out);
    }

    /// The controller's view of some of this shard's topics changed.
    pub(super) fn replica_topics_changed(&self, changed: Vec<(String, Option<ControllerState>)>) {
        for (name, state) in changed {
            match state {
                Some(state) => {
                    debug!(topic = %name, ?state, "replication: the controller's state of a topic");
                    self.replica_topics
                        .borrow_mut()
                        .insert(name.clone(), state.clone());
                    self.apply_topic_state(&name, state);
                }
                None => {
                    debug!(topic = %name, "replication: no longer a replica of the topic");
                    self.replica_topics.borrow_mut().remove(&name);
                    self.stop_replica(&name);
                }
            }
        }
    }

    /// Applies the controller's decision about `name`, creating the topic and its replica
    /// first if needed; then stores the publishes that waited for it.
    fn apply_topic_state(&self, name: &str, state: ControllerState) {
        let Some(t) = self.replicated_topic(name, &state) else {
            return;
        };
        let mut out = Vec::new();
        {
            let mut tb = t.borrow_mut();
            let log = tb.log.clone();
            let mut log = log.borrow_mut();
            if let Some(r) = tb.replica.as_mut() {
                r.apply_controller(&mut log, state, &mut out);
            }
        }
        self.after_replica(&t, out);
        let waiting = self.repl.awaiting.borrow_mut().remove(name);
        if let Some(w) = waiting {
            debug!(
                topic = name,
                publishes = w.publishes.len(),
                "replication: the topic's state arrived"
            );
            for p in w.publishes {
                if let Answer::Now(result) =
                    self.store_published(&t, p.bodies, p.defer, p.reply, p.origins)
                {
                    self.reply(p.reply, Reply::Publish(result));
                }
            }
        }
    }

    /// The topic `name` with its replica, made if needed: `None` when it holds an unreplicated
    /// history (left alone, with a warning) or cannot be created.
    fn replicated_topic(&self, name: &str, state: &ControllerState) -> Option<Rc<RefCell<Topic>>> {
        let t = match self.topic_or_create(name) {
            Ok(t) => t,
            Err(e) => {
                warn!(
                    topic = name,
                    "replication: cannot create the replicated topic: {e}"
                );
                return None;
            }
        };
        if t.borrow().replica.is_some() {
            // A replica again after it stopped being one (a shrink, then a grow): ticked again.
            self.repl
                .topics
                .borrow_mut()
                .entry(name.to_string())
                .or_insert_with(|| t.clone());
            return Some(t);
        }
        let has_history = t.borrow().log.borrow().head() > 0;
        if has_history {
            warn!(
                topic = name,
                "replication: this broker holds the topic unreplicated, with messages; it stays \
                 unreplicated here (delete it to take the replicated one)"
            );
            return None;
        }
        self.make_replicated(&t, state.min_insync)
            .map_err(|e| {
                warn!(
                    topic = name,
                    "replication: cannot open the replicated log: {e}"
                )
            })
            .ok()?;
        Some(t)
    }

    /// Makes `t`'s log replicated and gives it a replica (the topic is empty, or was
    /// replicated before a restart).
    pub(super) fn make_replicated(
        &self,
        t: &Rc<RefCell<Topic>>,
        min_insync: u32,
    ) -> Result<(), crate::storage::StorageError> {
        let Some(status) = &self.config.cluster else {
            return Ok(());
        };
        let mut tb = t.borrow_mut();
        let store = ReplicaStore::open(&mut tb.log.borrow_mut())?;
        let cfg = replica_config(
            min_insync,
            self.config.durable,
            self.config.replication_timeout,
        );
        tb.replica = Some(Box::new(TopicReplica::new(
            BrokerId(status.identity.broker_id),
            status.identity.incarnation,
            cfg,
            store,
        )));
        // Nothing is delivered until this replica leads and its high watermark moves.
        let _ = tb.set_deliver_cap(0);
        tb.stand_by();
        let name = tb.name.to_string();
        drop(tb);
        info!(topic = %name, shard = self.id, "replication: the topic is replicated here");
        self.repl.topics.borrow_mut().insert(name, t.clone());
        Ok(())
    }

    /// Who waits for `t`'s replica, taken from it (each is answered once, by the caller).
    fn take_waiters(&self, t: &Rc<RefCell<Topic>>) -> Vec<Waiter> {
        let ids = t
            .borrow_mut()
            .replica
            .as_mut()
            .map(|r| std::mem::take(&mut r.waiting))
            .unwrap_or_default();
        let mut waiters = self.repl.waiters.borrow_mut();
        ids.iter().filter_map(|id| waiters.remove(id)).collect()
    }

    /// This broker stopped being a replica of `name`: its waiting publishes fail, its channels
    /// stand by; the topic and its files stay.
    fn stop_replica(&self, name: &str) {
        let Some(t) = self.repl.topics.borrow_mut().remove(name) else {
            return;
        };
        // Its replicas elsewhere deliver now: its channels here hand out nothing more.
        t.borrow_mut().stand_by();
        info!(
            topic = name,
            shard = self.id,
            "replication: no longer a replica of the topic here; its channels stand by"
        );
        let waiting = self.take_waiters(&t);
        for w in waiting {
            let e = pub_failed(format!("this broker is no longer a replica of {name}"));
            self.answer_waiter(w, Err(e));
        }
    }

    /// Whether a publish to `name` must wait for the controller: `--replicas` > 1 and the
    /// topic is new here (absent, or present with an empty log and no replica yet).
    pub(super) fn publish_waits_for_controller(&self, name: &str) -> bool {
        if self.config.replicas <= 1 || protocol::names::is_ephemeral(name) {
            return false;
        }
        match self.topics.borrow().get(name) {
            None => true,
            Some(t) => {
                let t = t.borrow();
                t.replica.is_none() && t.log.borrow().head() == 0
            }
        }
    }

    /// Parks a publish to a new replicated topic and asks the controller to create it (the
    /// first time).
    pub(super) fn park_for_controller(&self, name: &str, p: ParkedPublish) -> Answer {
        let first = {
            let mut awaiting = self.repl.awaiting.borrow_mut();
            let entry = awaiting
                .entry(name.to_owned())
                .or_insert_with(|| AwaitingTopic {
                    since: Instant::now(),
                    publishes: Vec::new(),
                });
            if entry.publishes.len() >= MAX_AWAITING {
                return Answer::refused(format!(
                    "topic {name} is being created on the cluster; too many publishes wait"
                ));
            }
            entry.publishes.push(p);
            entry.publishes.len() == 1
        };
        if first {
            let request = BrokerRequest::CreateTopic {
                name: name.to_owned(),
                replicas: self.config.replicas,
                min_insync: self.config.min_insync_replicas,
            };
            let topic = name.to_owned();
            let me = self.me.clone();
            glommio::spawn_local(async move {
                let Some(shard) = me.upgrade() else {
                    return;
                };
                match shard.ask_controller(request).await {
                    Ok(BrokerReply::Proposed) => {
                        debug!(topic = %topic, "replication: topic creation proposed")
                    }
                    // The topic may exist already (its state then comes with the view), or too
                    // few brokers are live: the parked publishes then fail at their deadline.
                    other => {
                        info!(topic = %topic, ?other, "replication: topic creation not proposed")
                    }
                }
            })
            .detach();
        }
        Answer::Later
    }

    /// Publishes that waited too long for a new topic's state fail.
    fn expire_awaiting(&self) {
        let timeout = self.config.replication_timeout;
        let expired: Vec<(String, AwaitingTopic)> = {
            let mut awaiting = self.repl.awaiting.borrow_mut();
            let names: Vec<String> = awaiting
                .iter()
                .filter(|(_, w)| w.since.elapsed() >= timeout)
                .map(|(n, _)| n.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|n| awaiting.remove(&n).map(|w| (n, w)))
                .collect()
        };
        for (name, w) in expired {
            warn!(topic = %name, publishes = w.publishes.len(), "replication: no state from the controller for the new topic in time (is this broker one of its replicas? are enough brokers live?)");
            for p in w.publishes {
                let e = pub_failed(format!(
                    "topic {name}: the replication controller placed no replica here in time"
                ));
                self.reply(p.reply, Reply::Publish(Err(e)));
            }
        }
    }

    /// Stores a publish to a replicated topic for a connection of this broker: on its leader,
    /// appended and answered by the replica; on a follower, forwarded to the leader.
    pub(super) fn store_replicated(
        &self,
        t: &Rc<RefCell<Topic>>,
        bodies: Vec<Bytes>,
        defer: Duration,
        reply: ReplyTo,
        origins: Vec<DeadOrigin>,
    ) -> Answer {
        match self.replicate_publish(t, bodies, defer, origins, Waiter::Local(reply)) {
            Ok(()) => Answer::Later,
            Err(reason) => Answer::refused(reason),
        }
    }

    /// A publish to replicated topic `t`: `Ok` once `waiter` is registered (answered later),
    /// `Err` when refused with nothing stored. A follower forwards a local publish to its
    /// leader; a forwarded one it does not lead is refused (never forwarded twice).
    fn replicate_publish(
        &self,
        t: &Rc<RefCell<Topic>>,
        bodies: Vec<Bytes>,
        defer: Duration,
        origins: Vec<DeadOrigin>,
        waiter: Waiter,
    ) -> Result<(), String> {
        let (epoch, name, leader) = {
            let tb = t.borrow();
            let Some(r) = tb.replica.as_ref() else {
                return Err("not a replicated topic".into());
            };
            (
                r.replica.leading(),
                tb.name.to_string(),
                r.replica.following(),
            )
        };
        let Some(epoch) = epoch else {
            return match (leader, waiter) {
                (Some(l), Waiter::Local(reply)) => {
                    self.forward_publish(l, &name, bodies, defer, origins, reply)
                }
                (l, _) => Err(format!(
                    "topic {name} is replicated and this broker does not lead it ({})",
                    l.map_or("no leader now".to_owned(), |l| format!(
                        "broker {} does",
                        l.0
                    ))
                )),
            };
        };
        let timestamp = now_nanos();
        let defer_until = if defer.is_zero() {
            0
        } else {
            timestamp + defer.as_nanos() as i64
        };
        let msgs: Vec<Message> = {
            let mut tb = t.borrow_mut();
            // IDs follow every one this log holds, those it took as a follower too.
            let held = tb.log.borrow().recovered_max_id();
            tb.ids.resume_after(held);
            tb.stamp(bodies, timestamp)
        };
        // Dead letters: the IDs and bodies their origin records describe.
        let dead = (!origins.is_empty()).then(|| {
            msgs.iter()
                .map(|m| (m.id, m.body.clone()))
                .collect::<Vec<_>>()
        });
        let end = t
            .borrow_mut()
            .publish_replicated(epoch, msgs, defer_until)
            .map_err(|e| format!("topic {name}: {e}"))?;
        if let Some(dead) = dead {
            self.record_dead_letters(t, dead, origins, end);
        }
        let id = self.repl.next_publish.get() + 1;
        self.repl.next_publish.set(id);
        let mut out = Vec::new();
        let published = {
            let mut tb = t.borrow_mut();
            let log = tb.log.clone();
            let mut log = log.borrow_mut();
            match tb.replica.as_mut() {
                Some(r) => {
                    r.waiting.insert(id);
                    self.repl.waiters.borrow_mut().insert(id, waiter);
                    let now = now_ms();
                    let p = r.with_log(&mut log, |r, l| r.published(l, id, end, now, &mut out));
                    if p.is_err() {
                        r.waiting.remove(&id);
                        self.repl.waiters.borrow_mut().remove(&id);
                    }
                    p.is_ok()
                }
                None => false,
            }
        };
        if !published {
            return Err(format!("topic {name}: no longer its leader"));
        }
        self.queue_flush(t);
        self.after_replica(t, out);
        Ok(())
    }

    /// Sends a publish to `leader` on this shard's connection to it; answered when the
    /// leader's answer comes back, or failed at `--replication-timeout` (the leader may still
    /// have stored it: a retry may duplicate it, as at-least-once allows).
    fn forward_publish(
        &self,
        leader: BrokerId,
        name: &str,
        bodies: Vec<Bytes>,
        defer: Duration,
        origins: Vec<DeadOrigin>,
        reply: ReplyTo,
    ) -> Result<(), String> {
        let Some(peers) = self.repl.peers() else {
            return Err(format!("topic {name}: no connection to its leader"));
        };
        let id = self.repl.next_forward.get() + 1;
        self.repl.next_forward.set(id);
        let f = Forward::Publish {
            id,
            topic: name.to_owned(),
            defer_ms: u64::try_from(defer.as_millis()).unwrap_or(u64::MAX),
            bodies,
            origins: origins
                .iter()
                .map(super::dead_letter_replicas::to_wire)
                .collect(),
        };
        peers.send_forward(leader, f).map_err(|e| {
            format!(
                "topic {name}: cannot forward to its leader, broker {}: {e}",
                leader.0
            )
        })?;
        self.repl.forwarded.borrow_mut().insert(
            id,
            Forwarded {
                reply,
                topic: name.to_owned(),
                deadline: Instant::now() + self.config.replication_timeout,
            },
        );
        Ok(())
    }

    /// Where a publish to `name` goes when this broker holds no replica of it but knows its
    /// leader.
    pub(super) fn routed_leader(&self, name: &str) -> Option<BrokerId> {
        // Without replication a publish pays one branch here, nothing more.
        self.config.cluster.as_ref()?;
        let leader = *self.repl.routes.borrow().get(name)?;
        let local = self
            .topics
            .borrow()
            .get(name)
            .is_some_and(|t| t.borrow().replica.is_some());
        (!local).then_some(leader)
    }

    /// A publish to `name` forwarded at once to its leader (this broker holds no replica).
    pub(super) fn publish_to_leader(
        &self,
        leader: BrokerId,
        name: &str,
        bodies: Vec<Bytes>,
        defer: Duration,
        origins: Vec<DeadOrigin>,
        reply: ReplyTo,
    ) -> Answer {
        match self.forward_publish(leader, name, bodies, defer, origins, reply) {
            Ok(()) => Answer::Later,
            Err(reason) => Answer::refused(reason),
        }
    }

    /// A forwarded publish, its answer, or a channel operation from a peer broker: a publish
    /// or a channel operation goes to its topic's owner shard first.
    pub(super) fn forward_inbound(&self, from: BrokerId, f: Forward) {
        let topic = match &f {
            Forward::Publish { topic, .. }
            | Forward::DeadLetters { topic, .. }
            | Forward::Channel { topic, .. }
            | Forward::Topic { topic, .. } => Some(topic),
            Forward::Answer { .. } => None,
        };
        if let Some(owner) = topic
            .map(|t| self.config.owner_of(t))
            .filter(|&o| o != self.id)
        {
            self.route(
                owner,
                Mail::ReplicaForward {
                    from: from.0,
                    forward: f,
                },
            );
            return;
        }
        match f {
            Forward::Publish {
                id,
                topic,
                defer_ms,
                bodies,
                origins,
            } => {
                let t = self.repl.topics.borrow().get(&topic).cloned();
                let waiter = Waiter::Peer { broker: from, id };
                let origins = origins
                    .into_iter()
                    .map(super::dead_letter_replicas::from_wire)
                    .collect();
                let defer = Duration::from_millis(defer_ms);
                let result = match t {
                    Some(t) => self.replicate_publish(&t, bodies, defer, origins, waiter),
                    None => Err(format!("topic {topic}: not replicated on this broker")),
                };
                if let Err(reason) = result {
                    self.answer_peer(from, id, Err(reason));
                }
            }
            Forward::Answer { id, result } => {
                let Some(f) = self.repl.forwarded.borrow_mut().remove(&id) else {
                    return;
                };
                let answer = result.map_err(pub_failed);
                debug!(topic = %f.topic, leader = from.0, ok = answer.is_ok(), "replication: forwarded publish answered");
                self.reply(f.reply, Reply::Publish(answer));
            }
            Forward::Channel { topic, channel, op } => {
                self.apply_channel_op(from, &topic, &channel, op);
            }
            Forward::Topic { topic, config } => {
                self.apply_topic_config(from, &topic, config);
            }
            Forward::DeadLetters { topic, op } => {
                self.apply_dead_letter_op(from, &topic, op);
            }
        }
    }

    /// Answers a publish `broker` forwarded.
    fn answer_peer(&self, broker: BrokerId, id: u64, result: Result<(), String>) {
        if let Some(p) = self.repl.peers() {
            // Without a connection the follower's own deadline answers its client.
            let _ = p.send_forward(broker, Forward::Answer { id, result });
        }
    }

    /// Answers whoever waits for a replicated publish.
    fn answer_waiter(&self, waiter: Waiter, result: Result<(), ProtocolError>) {
        match waiter {
            Waiter::Local(reply) => self.reply(reply, Reply::Publish(result)),
            Waiter::Peer { broker, id } => {
                self.answer_peer(broker, id, result.map_err(|e| e.description))
            }
        }
    }

    /// Forwarded publishes whose leader did not answer in time fail.
    fn expire_forwarded(&self) {
        let now = Instant::now();
        let expired: Vec<Forwarded> = {
            let mut fwd = self.repl.forwarded.borrow_mut();
            let ids: Vec<u64> = fwd
                .iter()
                .filter(|(_, f)| f.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| fwd.remove(&id)).collect()
        };
        for f in expired {
            let e = pub_failed(format!(
                "topic {}: its leader did not answer within {:?} (the message may be stored)",
                f.topic, self.config.replication_timeout
            ));
            self.reply(f.reply, Reply::Publish(Err(e)));
        }
    }

    /// Carries out a replica's outputs, then lets channels see what the high watermark passed.
    fn after_replica(&self, t: &Rc<RefCell<Topic>>, out: Vec<Output>) {
        let name = t.borrow().name.clone();
        let peers = self.repl.peers();
        let mut flush = false;
        for o in out {
            match o {
                Output::Send { to, msg } => {
                    if let Some(p) = &peers {
                        // A message without a connection is lost like one the network
                        // dropped: the replicas send again.
                        let _ = p.send(to, &name, msg);
                    }
                }
                Output::AlterIsr {
                    epoch,
                    isr_version,
                    isr,
                    incarnations,
                    proposal,
                } => self.propose_isr(t, epoch, isr_version, isr, incarnations, proposal),
                Output::Acked(id) => {
                    let waiter = t
                        .borrow_mut()
                        .replica
                        .as_mut()
                        .map(|r| r.waiting.remove(&id));
                    let waiter = waiter.and_then(|_| self.repl.waiters.borrow_mut().remove(&id));
                    if let Some(w) = waiter {
                        self.answer_waiter(w, Ok(()));
                    }
                }
                Output::Failed(id, why) => {
                    let waiter = t
                        .borrow_mut()
                        .replica
                        .as_mut()
                        .map(|r| r.waiting.remove(&id));
                    let waiter = waiter.and_then(|_| self.repl.waiters.borrow_mut().remove(&id));
                    if let Some(w) = waiter {
                        let text = match why {
                            PublishError::Timeout => format!(
                                "topic {name}: not stored on enough replicas within {:?}",
                                self.config.replication_timeout
                            ),
                            PublishError::NotLeader => {
                                format!("topic {name}: this broker stopped leading it")
                            }
                        };
                        self.answer_waiter(w, Err(pub_failed(text)));
                    }
                }
                Output::Sync => flush = true,
            }
        }
        // A follower's appends, and a sync asked for, are the flusher's to write.
        let (unplanned, deliverable) = {
            let tb = t.borrow();
            let log = tb.log.borrow();
            (
                log.unwritten_bytes() > 0 || log.sync_requested(),
                tb.replica.as_ref().and_then(|r| r.deliverable()),
            )
        };
        if flush || unplanned {
            self.queue_flush(t);
        }
        match deliverable {
            Some(hw) => {
                let touched = t.borrow_mut().set_deliver_cap(hw);
                for ch in touched {
                    self.dispatch(&ch);
                }
            }
            None => t.borrow_mut().stand_by(),
        }
    }

    /// Sends the leader's in-sync proposal to the controller (through the control thread's
    /// session); a refusal is the replica's answer at once, an acceptance comes back with the
    /// metadata (`TopicState::answered`).
    #[allow(clippy::too_many_arguments)]
    fn propose_isr(
        &self,
        t: &Rc<RefCell<Topic>>,
        epoch: replication::ids::Epoch,
        isr_version: u64,
        isr: Vec<BrokerId>,
        incarnations: Vec<(BrokerId, u64)>,
        proposal: u64,
    ) {
        let Some(status) = &self.config.cluster else {
            return;
        };
        let name = t.borrow().name.to_string();
        if let Some(r) = t.borrow_mut().replica.as_mut() {
            r.proposal = Some((epoch, proposal));
        }
        let request = BrokerRequest::AlterIsr {
            broker: BrokerId(status.identity.broker_id),
            topic: name.clone(),
            epoch,
            isr_version,
            isr,
            incarnations,
            proposal,
        };
        let me = self.me.clone();
        glommio::spawn_local(async move {
            let Some(shard) = me.upgrade() else {
                return;
            };
            match shard.ask_controller(request).await {
                Ok(BrokerReply::Proposed) => {}
                Ok(BrokerReply::Refused { reason }) => {
                    debug!(topic = %name, %reason, "replication: in-sync proposal refused");
                    shard.isr_proposal_refused(&name, proposal);
                }
                // No controller answered: the replica proposes again after its retry time.
                other => debug!(topic = %name, ?other, "replication: in-sync proposal not taken"),
            }
        })
        .detach();
    }

    fn isr_proposal_refused(&self, name: &str, proposal: u64) {
        let Some(t) = self.repl.topics.borrow().get(name).cloned() else {
            return;
        };
        let mut out = Vec::new();
        {
            let mut tb = t.borrow_mut();
            let log = tb.log.clone();
            let mut log = log.borrow_mut();
            if let Some(r) = tb.replica.as_mut() {
                r.proposal_refused(&mut log, proposal, &mut out);
            }
        }
        self.after_replica(&t, out);
    }

    /// Every replica's timer; a read that found its records on disk asks the fetcher.
    fn tick_replicas(&self) {
        let topics: Vec<Rc<RefCell<Topic>>> = self.repl.topics.borrow().values().cloned().collect();
        let now = now_ms();
        for t in &topics {
            let mut out = Vec::new();
            {
                let mut tb = t.borrow_mut();
                let log = tb.log.clone();
                let mut log = log.borrow_mut();
                if let Some(r) = tb.replica.as_mut() {
                    r.with_log(&mut log, |r, l| r.tick(l, now, &mut out));
                }
            }
            if t.borrow().log.borrow().has_wanted_blocks() {
                self.queue_fetch(t);
            }
            self.after_replica(t, out);
        }
        self.send_channel_positions(&topics);
    }

    /// After a flusher round: replicas whose log completed an fsync are told.
    pub(super) fn replicas_after_flush(&self) {
        if self.repl.topics.borrow().is_empty() {
            return;
        }
        let topics: Vec<Rc<RefCell<Topic>>> = self.repl.topics.borrow().values().cloned().collect();
        let now = now_ms();
        for t in topics {
            let mut out = Vec::new();
            {
                let mut tb = t.borrow_mut();
                let log = tb.log.clone();
                let mut log = log.borrow_mut();
                if !log.take_synced() {
                    continue;
                }
                if let Some(r) = tb.replica.as_mut() {
                    r.with_log(&mut log, |r, l| r.on_synced(l, now, &mut out));
                }
            }
            self.after_replica(&t, out);
        }
    }

    /// A replicated topic was deleted: its waiting publishes are answered OK (taken, then
    /// dropped with the topic, as for an unreplicated one) and it is no longer ticked.
    pub(super) fn replicated_topic_deleted(&self, name: &str) {
        let Some(t) = self.repl.topics.borrow_mut().remove(name) else {
            return;
        };
        let waiting = self.take_waiters(&t);
        for w in waiting {
            self.answer_waiter(w, Ok(()));
        }
    }

    /// At load: a topic with an epoch history was replicated; it is again, waiting for the
    /// controller's state. `clean`: its metadata says the last stop was clean.
    ///
    /// True when its log here may miss a suffix the others hold: recovery cut records, the log
    /// cannot be opened as a replica, or (without `--durable`, where a follower acknowledges
    /// what it has not written or fsynced) the last stop was not clean or the host rebooted
    /// since. The controller is told so at registration.
    pub(super) fn reopen_replicated(&self, t: &Rc<RefCell<Topic>>, clean: bool) -> bool {
        let dir = t.borrow().log.borrow().dir().map(|d| d.to_path_buf());
        let Some(dir) = dir else {
            return false;
        };
        let Some(status) = &self.config.cluster else {
            return false;
        };
        if !dir.join(crate::storage::log::replica::EPOCHS_FILE).exists() {
            return false;
        }
        let min_insync = self.config.min_insync_replicas;
        if let Err(e) = self.make_replicated(t, min_insync) {
            warn!(topic = %t.borrow().name, "replication: cannot reopen the replicated log: {e}");
            return true;
        }
        if clean {
            // A crash before the first checkpoint must not find this stop's flag.
            let meta = t.borrow().to_meta(false, Instant::now());
            let written = crate::storage::meta::open_dir(&dir)
                .and_then(|d| crate::storage::meta::write(&d, &meta));
            if let Err(e) = written {
                warn!(topic = %t.borrow().name, "replication: cannot mark the topic running: {e}");
                return true;
            }
        }
        let cut = t
            .borrow()
            .replica
            .as_ref()
            .is_none_or(|r| r.store.damaged());
        let unsynced_lost = !self.config.durable && (!clean || status.identity.boot_changed);
        cut || unsynced_lost
    }
}

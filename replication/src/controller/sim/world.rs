//! One simulated cluster: controller nodes with a disk each (synced and unsynced writes), fake
//! brokers, the network, and the faults, all driven by one seed. A step is one tick of virtual
//! time: faults strike, nodes tick (or not, or many times: clock jumps), due messages are
//! delivered, brokers act, and the checker looks at everything.

use std::collections::BTreeMap;

use raft::eraftpb::{HardState, MessageType};

use super::check::{Checker, Violation};
use super::net::{Addr, Envelope, Net, Payload};
use super::rng::Rng;
use crate::controller::metadata::mutation::{self, Mutation};
use crate::controller::node::{Applied, Durable, NodeConfig, Persist};
use crate::controller::service::{BrokerReply, BrokerRequest, Controller};
use crate::controller::session::SessionConfig;
use crate::controller::view::{BrokerView, ViewUpdate};
use crate::ids::BrokerId;

/// Steps between a broker's heartbeats.
const HEARTBEAT_EVERY: u64 = 5;
/// Topics the operator creates.
const TOPICS: u64 = 6;

/// The shape of one run.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) nodes: u64,
    pub(crate) brokers: u64,
    /// Steps with faults.
    pub(crate) chaos_steps: u64,
    /// Steps after healing within which the cluster must be whole again.
    pub(crate) heal_bound: u64,
    /// Crash-heavy: nodes crash and come back every few steps (the short windows between a
    /// write and its sync, between a vote and the leader's first append, get hit often).
    pub(crate) storm: bool,
    /// The nodes' snapshot settings (`snapshot_every` 0: never).
    pub(crate) snapshot_every: u64,
    pub(crate) snapshot_margin: u64,
}

/// What a run did.
#[derive(Debug, Default, Clone)]
pub(crate) struct Stats {
    pub(crate) steps: u64,
    pub(crate) applied: usize,
    pub(crate) terms: usize,
    pub(crate) leader_changes: u64,
    pub(crate) node_crashes: u64,
    pub(crate) broker_crashes: u64,
    pub(crate) wiped_brokers: u64,
    pub(crate) partitions: u64,
    pub(crate) clock_jumps: u64,
    pub(crate) messages: u64,
    pub(crate) dropped: u64,
    /// Steps from healing until the cluster was whole.
    pub(crate) heal_steps: u64,
    /// Snapshots nodes took, installed from a leader, and started from at a restart.
    pub(crate) snapshots_taken: u64,
    pub(crate) snapshots_installed: u64,
    pub(crate) snapshot_restarts: u64,
    /// Snapshot sends reported delivered, and given up as lost (reported or timed out).
    pub(crate) snapshots_delivered: u64,
    pub(crate) snapshots_lost: u64,
    /// The most log entries a node held in memory.
    pub(crate) max_log_len: usize,
    /// Per kind of entry: (applied, refused).
    pub(crate) entries: BTreeMap<&'static str, (u64, u64)>,
    /// A digest of everything applied, to show a seed replays exactly.
    pub(crate) fingerprint: u64,
}

struct Disk {
    /// Survives a crash.
    synced: Durable,
    /// Written, not synced: a crash keeps some prefix of it.
    unsynced: Vec<Persist>,
    /// The hard state as last written (synced or not).
    hard_state: HardState,
}

impl Disk {
    fn write(&mut self, p: Persist) {
        if let Some(hs) = &p.hard_state {
            self.hard_state = hs.clone();
        }
        let synced = p.must_sync
            && !mutation::active(Mutation::IgnoreSync)
            && !(mutation::active(Mutation::ForgetVote) && p.entries.is_empty());
        if synced {
            for u in self.unsynced.drain(..) {
                self.synced.write(&u);
            }
            self.synced.write(&p);
        } else {
            self.unsynced.push(p);
        }
    }

    fn crash(&mut self, rng: &mut Rng) {
        let keep = rng.below(self.unsynced.len() as u64 + 1) as usize;
        for u in self.unsynced.drain(..).take(keep) {
            self.synced.write(&u);
        }
        self.hard_state = self.synced.hard_state.clone();
    }
}

struct SimNode {
    id: u64,
    cfg: NodeConfig,
    ctl: Option<Controller>,
    disk: Disk,
    down_until: u64,
    paused_until: u64,
    extra_ticks: u64,
}

struct SimBroker {
    /// Its host: the address stays when the data path is wiped (a new id).
    slot: u64,
    id: BrokerId,
    /// Topics named as damaged at registration, until the registration is seen applied.
    damaged: Vec<String>,
    /// The topics it held when it crashed.
    held: Vec<String>,
    /// Its last AlterIsr proposal number.
    proposal: u64,
    incarnation: u64,
    up: bool,
    /// When a crashed broker comes back (None: never).
    back_at: Option<u64>,
    view: Option<BrokerView>,
    target: u64,
    next_heartbeat: u64,
    last_reply: u64,
}

impl SimBroker {
    fn addr(&self) -> Addr {
        Addr::Broker(self.id.0, self.incarnation)
    }
}

/// The simulated cluster.
pub(crate) struct World {
    rng: Rng,
    now: u64,
    params: Params,
    nodes: Vec<SimNode>,
    brokers: Vec<SimBroker>,
    net: Net,
    checker: Checker,
    sessions: SessionConfig,
    partition_until: u64,
    /// Wiped brokers so far (their new ids follow the first brokers').
    next_broker_id: u64,
    stats: Stats,
    fingerprint: std::collections::hash_map::DefaultHasher,
    // Fault rates, per million per step, drawn from the seed.
    node_crash_pm: u64,
    broker_crash_pm: u64,
    partition_pm: u64,
    clock_pm: u64,
    alter_pm: u64,
}

impl World {
    pub(crate) fn new(seed: u64, params: Params) -> Result<Self, Violation> {
        let mut rng = Rng::new(seed);
        let voters: Vec<u64> = (1..=params.nodes).collect();
        // Distinct election timeouts, drawn from the seed (raft-rs' own draw is not seeded).
        let mut timeouts: Vec<u64> = (10..10 + 2 * params.nodes).collect();
        for i in (1..timeouts.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            timeouts.swap(i, j);
        }
        let mut checker = Checker::new();
        let mut nodes = Vec::new();
        let sessions = SessionConfig {
            timeout: 30,
            retry: 10,
            reassign_after: Some(150),
        };
        for (i, id) in voters.iter().enumerate() {
            let cfg = NodeConfig {
                id: *id,
                voters: voters.clone(),
                election_tick: timeouts[i] as usize,
                heartbeat_tick: 2,
                snapshot_every: params.snapshot_every,
                snapshot_margin: params.snapshot_margin,
            };
            let ctl = Controller::new(&cfg, sessions.clone(), Durable::default())
                .map_err(|e| format!("node {id} did not start: {e}"))?;
            checker.restarted(*id, 0);
            nodes.push(SimNode {
                id: *id,
                cfg,
                ctl: Some(ctl),
                disk: Disk {
                    synced: Durable::default(),
                    unsynced: Vec::new(),
                    hard_state: HardState::default(),
                },
                down_until: 0,
                paused_until: 0,
                extra_ticks: 0,
            });
        }
        let brokers = (1..=params.brokers)
            .map(|id| SimBroker {
                slot: id,
                id: BrokerId(id),
                damaged: Vec::new(),
                held: Vec::new(),
                proposal: 0,
                incarnation: 1,
                up: true,
                back_at: None,
                view: None,
                target: 1 + rng.below(params.nodes),
                next_heartbeat: rng.below(HEARTBEAT_EVERY),
                last_reply: 0,
            })
            .collect();
        let net = Net::new(
            rng.below(200_000),
            rng.below(100_000),
            rng.range(1, 8),
            rng.below(20_000),
        );
        Ok(Self {
            node_crash_pm: if params.storm {
                rng.range(30_000, 80_000)
            } else {
                rng.below(15_000)
            },
            broker_crash_pm: rng.below(6_000),
            partition_pm: rng.below(10_000),
            clock_pm: rng.below(10_000),
            alter_pm: rng.range(5_000, 60_000),
            rng,
            now: 0,
            params,
            nodes,
            brokers,
            net,
            checker,
            sessions,
            partition_until: 0,
            next_broker_id: 0,
            stats: Stats::default(),
            fingerprint: std::collections::hash_map::DefaultHasher::new(),
        })
    }

    /// Runs the chaos, heals, and waits for the cluster to be whole.
    pub(crate) fn run(mut self) -> Result<Stats, Violation> {
        for _ in 0..self.params.chaos_steps {
            self.faults();
            self.step()?;
        }
        self.heal();
        let healed_at = self.now;
        loop {
            self.step()?;
            if self.whole().is_ok() {
                break;
            }
            if self.now - healed_at > self.params.heal_bound {
                let why = self.whole().err().unwrap_or_default();
                return Err(format!(
                    "not whole {} steps after healing: {why}",
                    self.params.heal_bound
                ));
            }
        }
        self.stats.heal_steps = self.now - healed_at;
        self.stats.steps = self.now;
        for n in &self.nodes {
            if let Some(ctl) = &n.ctl {
                self.stats.snapshots_lost += ctl.node().snapshot_stats().failed;
            }
        }
        self.stats.applied = self.checker.applied_len();
        self.stats.terms = self.checker.terms();
        self.stats.leader_changes = self.checker.leader_changes;
        self.stats.entries = std::mem::take(&mut self.checker.entries);
        self.stats.messages = self.net.sent;
        self.stats.dropped = self.net.dropped;
        use std::hash::Hasher;
        self.stats.fingerprint = self.fingerprint.finish();
        Ok(self.stats)
    }

    fn faults(&mut self) {
        let now = self.now;
        let n = self.params.nodes;
        if self.rng.chance(self.node_crash_pm) {
            let i = self.rng.below(n) as usize;
            // Mostly quick restarts (the window where unsynced state matters), some long outages.
            let down_for = if self.params.storm || self.rng.below(10) < 7 {
                self.rng.range(1, 20)
            } else {
                self.rng.range(20, 300)
            };
            let node = &mut self.nodes[i];
            if let Some(ctl) = node.ctl.take() {
                self.stats.snapshots_lost += ctl.node().snapshot_stats().failed;
                node.disk.crash(&mut self.rng);
                node.down_until = now + down_for;
                self.stats.node_crashes += 1;
            }
        }
        if self.net.sides.is_none() && self.rng.chance(self.partition_pm) {
            let mut sides = BTreeMap::new();
            for id in 1..=n {
                sides.insert((0u8, id), self.rng.below(2) as u8);
            }
            for b in 1..=self.params.brokers {
                sides.insert((1u8, b), self.rng.below(2) as u8);
            }
            self.net.sides = Some(sides);
            self.partition_until = now + self.rng.range(20, 300);
            self.stats.partitions += 1;
        } else if self.net.sides.is_some() && now >= self.partition_until {
            self.net.sides = None;
        }
        if self.rng.chance(self.clock_pm) {
            let i = self.rng.below(n) as usize;
            if self.rng.below(2) == 0 {
                self.nodes[i].paused_until = now + self.rng.range(5, 100);
            } else {
                self.nodes[i].extra_ticks = self.rng.range(5, 60);
            }
            self.stats.clock_jumps += 1;
        }
        if self.rng.chance(self.broker_crash_pm) {
            let i = self.rng.below(self.params.brokers) as usize;
            let back = self.rng.range(10, 400);
            let b = &mut self.brokers[i];
            if b.up {
                b.up = false;
                b.held = b.view.as_ref().map_or_else(Vec::new, |v| {
                    v.topics
                        .iter()
                        .filter(|(_, t)| t.replicas.contains(&v.broker))
                        .map(|(n, _)| n.clone())
                        .collect()
                });
                b.view = None;
                b.back_at = Some(now + back);
                self.stats.broker_crashes += 1;
            }
        }
        // The operator asks for the topics until they exist (a request to a follower, or one
        // lost, is simply made again).
        if now.is_multiple_of(20) {
            let k = self.rng.below(TOPICS);
            let name = format!("topic{k}");
            if !self.checker.has_topic(&name) {
                let replicas = self.rng.range(1, 4) as u32;
                let min_insync = self.rng.range(1, replicas as u64 + 1) as u32;
                let req = BrokerRequest::CreateTopic {
                    name,
                    replicas,
                    min_insync,
                };
                let target = 1 + self.rng.below(n);
                self.send(
                    Addr::Broker(0, 0),
                    Addr::Node(target),
                    Payload::Request(req),
                );
            }
        }
    }

    /// Ends every fault; some crashed brokers stay down for good.
    fn heal(&mut self) {
        self.net.sides = None;
        self.net.drop_pm = 0;
        self.net.dup_pm = 0;
        self.net.long_delay_pm = 0;
        self.net.max_delay = self.net.max_delay.min(3);
        let now = self.now;
        for node in &mut self.nodes {
            node.paused_until = 0;
            node.extra_ticks = 0;
            node.down_until = node.down_until.min(now);
        }
        for b in &mut self.brokers {
            if !b.up {
                b.back_at = if self.rng.below(2) == 0 {
                    Some(now)
                } else {
                    None
                };
            }
        }
    }

    fn step(&mut self) -> Result<(), Violation> {
        self.now += 1;
        let now = self.now;
        for i in 0..self.nodes.len() {
            if self.nodes[i].ctl.is_none() && now >= self.nodes[i].down_until {
                self.restart(i)?;
            }
            let ticks = if self.nodes[i].paused_until > now {
                0
            } else {
                1 + std::mem::take(&mut self.nodes[i].extra_ticks)
            };
            for _ in 0..ticks {
                if let Some(ctl) = self.nodes[i].ctl.as_mut() {
                    ctl.tick();
                }
                self.drive(i)?;
            }
        }
        for env in self.net.due(now) {
            self.deliver(env)?;
        }
        for i in 0..self.brokers.len() {
            self.broker_step(i);
        }
        self.check()
    }

    fn restart(&mut self, i: usize) -> Result<(), Violation> {
        let node = &mut self.nodes[i];
        let ctl = Controller::new(&node.cfg, self.sessions.clone(), node.disk.synced.clone())
            .map_err(|e| format!("node {} did not restart: {e}", node.id))?;
        if ctl.node().snapshot_stats().restarted_from_snapshot {
            self.stats.snapshot_restarts += 1;
        }
        self.checker.restarted(node.id, ctl.node().applied_index());
        node.ctl = Some(ctl);
        Ok(())
    }

    /// Carries out what node `i` asks, until it asks nothing.
    fn drive(&mut self, i: usize) -> Result<(), Violation> {
        let mut sends = Vec::new();
        let mut applied: Vec<Applied> = Vec::new();
        let id = self.nodes[i].id;
        {
            let node = &mut self.nodes[i];
            let checker = &mut self.checker;
            let Some(ctl) = node.ctl.as_mut() else {
                return Ok(());
            };
            while let Some(mut out) = ctl.ready() {
                sends.append(&mut out.messages);
                // What the node applied so far is checked before it jumps to a snapshot.
                if let Some(index) = out.installed {
                    checker.applied(id, &applied)?;
                    applied.clear();
                    checker.installed(id, index)?;
                    self.stats.snapshots_installed += 1;
                }
                applied.append(&mut out.applied);
                if let Some(snap) = &out.persist.snapshot {
                    if out.installed.is_none() {
                        self.stats.snapshots_taken += 1;
                    }
                    checker.applied(id, &applied)?;
                    applied.clear();
                    let (md, _) = crate::controller::node::decode_state(&snap.data)
                        .map_err(|e| format!("node {id} wrote a bad snapshot: {e}"))?;
                    checker.snapshot(id, snap.get_metadata().index, &md)?;
                }
                node.disk.write(out.persist.clone());
                let mut after = out.persisted();
                sends.append(&mut after.messages);
                applied.append(&mut after.applied);
                if let Some(commit) = after.commit {
                    let mut hs = node.disk.hard_state.clone();
                    hs.commit = commit;
                    node.disk.write(Persist {
                        entries: Vec::new(),
                        hard_state: Some(hs),
                        must_sync: false,
                        ..Persist::default()
                    });
                }
            }
        }
        for a in &applied {
            use std::hash::Hash;
            (id, a.index, a.term).hash(&mut self.fingerprint);
        }
        self.checker.applied(id, &applied)?;
        if let Some(ctl) = &self.nodes[i].ctl {
            let node = ctl.node();
            self.checker
                .node_state(id, node.applied_index(), node.metadata())?;
            self.stats.max_log_len = self.stats.max_log_len.max(node.log_len());
            if node.is_leader() {
                self.checker.raft_leader(node.term(), id)?;
            }
        }
        for m in sends {
            let to = m.to;
            self.send(Addr::Node(id), Addr::Node(to), Payload::Raft(m));
        }
        Ok(())
    }

    /// Tells node `from` (if it runs) what became of its snapshot to `to`.
    fn report_snapshot(&mut self, from: u64, to: u64, delivered: bool) -> Result<(), Violation> {
        let i = from.wrapping_sub(1) as usize;
        let Some(ctl) = self.nodes.get_mut(i).and_then(|n| n.ctl.as_mut()) else {
            return Ok(());
        };
        if ctl.report_snapshot(to, delivered).is_ok() && delivered {
            self.stats.snapshots_delivered += 1;
        }
        self.drive(i)
    }

    fn send(&mut self, from: Addr, to: Addr, payload: Payload) {
        self.net
            .send(&mut self.rng, self.now, Envelope { from, to, payload });
    }

    fn deliver(&mut self, env: Envelope) -> Result<(), Violation> {
        match env.to {
            Addr::Node(id) => {
                let i = id.wrapping_sub(1) as usize;
                let Some(ctl) = self.nodes.get_mut(i).and_then(|n| n.ctl.as_mut()) else {
                    // A snapshot to a node that is down: the connection fails (some of the
                    // time the sender only learns it by timing out).
                    if let (Payload::Raft(m), Addr::Node(from)) = (&env.payload, env.from) {
                        if m.get_msg_type() == MessageType::MsgSnapshot && self.rng.below(2) == 0 {
                            self.report_snapshot(from, id, false)?;
                        }
                    }
                    return Ok(());
                };
                match env.payload {
                    Payload::Raft(m) => {
                        let snapshot_from =
                            (m.get_msg_type() == MessageType::MsgSnapshot).then_some(m.from);
                        // A refused message (e.g. from an unknown peer) is dropped, as by a lookup.
                        let _ = ctl.step(m);
                        if let Some(from) = snapshot_from {
                            // The transport's word to the sender, as a connection gives it.
                            self.report_snapshot(from, id, true)?;
                        }
                    }
                    Payload::Request(req) => {
                        let reply = ctl.handle(req);
                        self.send(env.to, env.from, Payload::Reply(reply));
                    }
                    Payload::Reply(_) => {}
                }
                self.drive(i)
            }
            Addr::Broker(id, incarnation) => {
                let Some(b) = self.brokers.iter_mut().find(|b| b.id.0 == id) else {
                    return Ok(());
                };
                if !b.up || b.incarnation != incarnation {
                    return Ok(());
                }
                let from = match env.from {
                    Addr::Node(n) => n,
                    Addr::Broker(..) => return Ok(()),
                };
                if let Payload::Reply(reply) = env.payload {
                    on_reply(b, from, reply, self.now, self.params.nodes);
                }
                Ok(())
            }
        }
    }

    fn broker_step(&mut self, i: usize) {
        let now = self.now;
        let nodes = self.params.nodes;
        let b = &mut self.brokers[i];
        if !b.up {
            if b.back_at.is_some_and(|t| now >= t) {
                if self.rng.below(5) == 0 {
                    // Its data path was wiped: a new broker, and the old one is gone for good.
                    self.next_broker_id += 1;
                    b.id = BrokerId(self.params.brokers + self.next_broker_id);
                    b.incarnation = 0;
                    b.held.clear();
                    self.stats.wiped_brokers += 1;
                }
                // Some of its logs lost a suffix (a damaged tail, a reboot without --durable).
                let held = std::mem::take(&mut b.held);
                b.damaged = held
                    .into_iter()
                    .filter(|_| self.rng.below(3) == 0)
                    .collect();
                b.up = true;
                b.incarnation += 1;
                b.back_at = None;
                b.view = None;
                b.last_reply = now;
                b.next_heartbeat = now;
            } else {
                return;
            }
        }
        if now - b.last_reply > 4 * HEARTBEAT_EVERY {
            b.target = b.target % nodes + 1;
            b.last_reply = now;
        }
        let mut requests = Vec::new();
        if now >= b.next_heartbeat {
            b.next_heartbeat = now + HEARTBEAT_EVERY;
            requests.push(BrokerRequest::Heartbeat {
                broker: b.id,
                incarnation: b.incarnation,
                addresses: vec![format!("host{}:4150", b.slot)],
                known: b.view.as_ref().map(|v| v.version),
                damaged: b.damaged.clone(),
            });
        }
        let (from, target) = (b.addr(), b.target);
        // As a topic's leader, change its in-sync set now and then; sometimes from an old epoch
        // or version (the network's delays and duplicates make more such requests).
        if let Some(view) = self.brokers[i].view.clone() {
            let me = view.broker;
            for (name, t) in &view.topics {
                if t.leader != Some(me) || !self.rng.chance(self.alter_pm) {
                    continue;
                }
                let mut isr = t.isr.clone();
                let outside: Vec<BrokerId> = t
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| !isr.contains(r) && view.brokers.get(r).is_some_and(|x| !x.fenced))
                    .collect();
                if !outside.is_empty() && self.rng.below(2) == 0 {
                    isr.push(outside[self.rng.below(outside.len() as u64) as usize]);
                } else {
                    let others: Vec<BrokerId> = isr.iter().copied().filter(|r| *r != me).collect();
                    if others.is_empty() {
                        continue;
                    }
                    let drop = others[self.rng.below(others.len() as u64) as usize];
                    isr.retain(|r| *r != drop);
                }
                // The incarnation whose acks it counted: sometimes an older one (a member that
                // restarted since).
                let incarnations: Vec<(BrokerId, u64)> = isr
                    .iter()
                    .map(|m| {
                        let i = view.brokers.get(m).map_or(0, |x| x.incarnation);
                        let stale = self.rng.below(8) == 0;
                        (*m, if stale { i.saturating_sub(1) } else { i })
                    })
                    .collect();
                self.brokers[i].proposal += 1;
                let proposal = self.brokers[i].proposal;
                let (mut epoch, mut version) = (t.epoch, t.isr_version);
                if self.rng.below(4) == 0 {
                    if self.rng.below(2) == 0 {
                        epoch.0 = epoch.0.saturating_sub(1);
                    } else {
                        version = version.saturating_sub(1);
                    }
                }
                requests.push(BrokerRequest::AlterIsr {
                    broker: me,
                    topic: name.clone(),
                    epoch,
                    isr_version: version,
                    isr,
                    incarnations,
                    proposal,
                });
            }
        }
        for req in requests {
            self.send(from, Addr::Node(target), Payload::Request(req));
        }
    }

    fn check(&mut self) -> Result<(), Violation> {
        for node in &self.nodes {
            if let Some(ctl) = &node.ctl {
                if ctl.node().is_leader() {
                    self.checker.raft_leader(ctl.node().term(), node.id)?;
                }
            }
        }
        for b in &self.brokers {
            if let (true, Some(view)) = (b.up, &b.view) {
                self.checker.view(view)?;
            }
        }
        Ok(())
    }

    /// Whether the cluster is whole again: a leader, every live broker registered and unfenced
    /// and current, every topic with a live in-sync member led by a live broker.
    fn whole(&self) -> Result<(), String> {
        let leader = self
            .nodes
            .iter()
            .filter_map(|n| n.ctl.as_ref())
            .filter(|c| c.node().leads_current())
            .max_by_key(|c| c.node().term())
            .ok_or("no controller leader")?;
        let md = leader.node().metadata();
        let up: Vec<&SimBroker> = self.brokers.iter().filter(|b| b.up).collect();
        for b in &up {
            match md.brokers.get(&b.id) {
                Some(info) if info.incarnation == b.incarnation && !info.fenced => {}
                other => return Err(format!("broker {:?} is {other:?}", b.id)),
            }
            if b.view.as_ref().map(|v| v.version) != Some(md.version) {
                return Err(format!("broker {:?}'s view is behind", b.id));
            }
        }
        for (name, t) in &md.topics {
            let live_in_sync = t
                .isr
                .iter()
                .chain(t.elr.iter())
                .any(|m| up.iter().any(|b| b.id == *m));
            let led_live = t.leader.is_some_and(|l| up.iter().any(|b| b.id == l));
            if live_in_sync && !led_live {
                return Err(format!(
                    "topic {name} has a live in-sync member but no live leader"
                ));
            }
        }
        Ok(())
    }
}

fn on_reply(b: &mut SimBroker, from: u64, reply: BrokerReply, now: u64, nodes: u64) {
    on_reply_inner(b, from, reply, now, nodes);
    let registered = b.view.as_ref().and_then(|v| v.brokers.get(&b.id));
    if registered.is_some_and(|x| x.incarnation == b.incarnation && !x.fenced) {
        b.damaged.clear();
    }
}

fn on_reply_inner(b: &mut SimBroker, from: u64, reply: BrokerReply, now: u64, nodes: u64) {
    match reply {
        BrokerReply::Heartbeat { update } => {
            b.last_reply = now;
            b.target = from;
            match update {
                ViewUpdate::Full(view) => {
                    if b.view.as_ref().is_none_or(|v| view.version >= v.version) {
                        b.view = Some(view);
                    }
                }
                ViewUpdate::Deltas(deltas) => {
                    let gap = b
                        .view
                        .as_mut()
                        .is_some_and(|view| deltas.iter().any(|d| view.apply(d).is_err()));
                    if gap {
                        // Ask for the whole view.
                        b.view = None;
                    }
                }
            }
        }
        BrokerReply::NotLeader { leader } => {
            b.target = if leader != 0 {
                leader
            } else {
                from % nodes + 1
            };
        }
        BrokerReply::Stale { .. }
        | BrokerReply::Proposed
        | BrokerReply::Refused { .. }
        | BrokerReply::Unchanged => {}
    }
}

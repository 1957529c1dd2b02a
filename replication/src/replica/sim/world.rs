//! The simulated cluster: five hosts each running a broker (a replica per topic it holds,
//! over a [`MemLog`] per topic), the controller stand-in ([`Oracle`]), publishing clients,
//! and a network that drops, delays, duplicates, reorders, corrupts and partitions; faults are
//! process crashes (the page cache survives), host crashes (unsynced suffixes lost), wiped
//! data paths (the broker comes back under a new id), damaged tails found at restart, and
//! clock jumps. One seed drives it all:
//! events are ordered by (time, sequence number) and every choice comes from [`Rng`].
//!
//! Faults that lose data (a wiped data path, a damaged tail, a host crash without
//! `--durable`) are injected only while every other holder of the topic's acknowledged records
//! is intact and one exists: the guarantee is "no loss while fewer than `min_insync` replicas
//! fail at once", and the simulation stays inside it. Every other fault (partitions, process
//! crashes, host crashes in durable mode, message loss, clock jumps) is unbounded.
//!
//! A broker restarting after a host crash without `--durable` reports every topic as possibly
//! missing a suffix (in production: the boot id stored in the data path changed, so the page
//! cache was lost); after a process crash it reports nothing (same boot, nothing written lost).

use std::collections::{BTreeMap, BTreeSet};

use super::check::Checker;
use super::oracle::{Effect, Oracle};
use super::rng::Rng;
use crate::ids::{BrokerId, Epoch, Seq};
use crate::replica::{
    MemLog, Millis, Msg, Output, PublishId, Replica, ReplicaConfig, ReplicaLog, TopicState,
};

const HOSTS: usize = 5;
const TOPICS: usize = 3;
const REPLICAS: usize = 3;
const CLIENTS: usize = 3;
const TICK: Millis = 25;
const HEARTBEAT: Millis = 500;
const SESSION_TIMEOUT: Millis = 3_000;
/// A run past these is a message storm, reported as a failure.
const MAX_STEPS: u64 = 2_000_000;
const MAX_QUEUED: usize = 200_000;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) seed: u64,
    /// Faults stop (and everything heals) at this time.
    pub(crate) faults_until: Millis,
    /// The run ends at this time.
    pub(crate) end_at: Millis,
}

/// What a run did.
#[derive(Debug, Default, Clone)]
pub(crate) struct Outcome {
    pub(crate) steps: u64,
    pub(crate) acked: u64,
    pub(crate) failed: u64,
    pub(crate) elections: u64,
    pub(crate) faults: u64,
    pub(crate) durable_runs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Host(usize),
    Ctl,
    Client(usize),
}

#[derive(Debug, Clone)]
enum NetMsg {
    Replica {
        topic: usize,
        from: BrokerId,
        to: BrokerId,
        msg: Msg,
    },
    Heartbeat {
        id: BrokerId,
        incarnation: u64,
        damaged: BTreeSet<usize>,
    },
    AlterIsr {
        topic: usize,
        from: BrokerId,
        epoch: Epoch,
        isr_version: u64,
        isr: Vec<BrokerId>,
        incarnations: Vec<(BrokerId, u64)>,
        proposal: u64,
    },
    Meta {
        id: BrokerId,
        incarnation: u64,
        states: Vec<(usize, TopicState)>,
    },
    AlterIsrAnswer {
        id: BrokerId,
        topic: usize,
        proposal: u64,
        state: TopicState,
    },
    Publish {
        id: PublishId,
        topic: usize,
        count: usize,
    },
    Reply,
}

#[derive(Debug, Clone)]
enum Event {
    Tick(usize),
    CtlTick,
    Deliver {
        from: Node,
        to: Node,
        msg: NetMsg,
    },
    SyncDone {
        host: usize,
        incarnation: u64,
        topic: usize,
    },
    ClientPublish(usize),
    Fault,
    Restart(usize),
    HealCut(usize),
    Heal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// From everyone.
    All,
    /// From the controller only.
    Ctl,
    /// From the other brokers only.
    Peers,
}

#[derive(Debug, Clone, Copy)]
struct Weather {
    drop: f64,
    dup: f64,
    corrupt: f64,
    max_delay: Millis,
    long_delay: f64,
}

impl Weather {
    fn calm() -> Weather {
        Weather {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            max_delay: 5,
            long_delay: 0.0,
        }
    }

    fn random(rng: &mut Rng) -> Weather {
        Weather {
            drop: rng.below(11) as f64 / 100.0,
            dup: rng.below(6) as f64 / 100.0,
            corrupt: rng.below(3) as f64 / 100.0,
            max_delay: rng.range(2, 80),
            long_delay: rng.below(4) as f64 / 100.0,
        }
    }
}

#[derive(Debug)]
struct Host {
    id: BrokerId,
    incarnation: u64,
    up: bool,
    wiped: bool,
    /// A host crash without `--durable` lost its unsynced records; the restart reports it.
    lost: bool,
    logs: BTreeMap<usize, MemLog>,
    replicas: BTreeMap<usize, Replica>,
    /// Topics whose log may miss a suffix (recovery cut one, or the page cache was lost), until
    /// the replica has refetched it; reported with every heartbeat.
    damaged: BTreeSet<usize>,
    pubs: BTreeMap<PublishId, (usize, Seq)>,
    clock: i64,
    syncing: BTreeSet<usize>,
    last_heartbeat: Option<Millis>,
    cut: Option<Cut>,
}

pub(crate) struct World {
    opts: Options,
    rng: Rng,
    now: Millis,
    seq: u64,
    queue: BTreeMap<(Millis, u64), Event>,
    hosts: Vec<Host>,
    oracle: Oracle,
    checker: Checker,
    cfg: ReplicaConfig,
    weather: Weather,
    faults_on: bool,
    next_id: u64,
    next_pub: PublishId,
    out: Outcome,
    acked_after_heal: BTreeMap<usize, u64>,
    /// `SIM_TRACE=1`: every event on stderr (for replaying a failing seed).
    trace: bool,
}

impl World {
    pub(crate) fn new(opts: Options) -> World {
        let mut rng = Rng::new(opts.seed);
        let durable = rng.chance(0.5);
        let cfg = ReplicaConfig {
            min_insync: 2,
            durable,
            lag_time: 2_000,
            publish_timeout: 3_000,
            window: rng.range(1, 4) as usize,
            max_batch: rng.range(1, 16) as usize,
            resend_after: 300,
            heartbeat_every: 100,
            retry_after: 400,
        };
        let ids: Vec<BrokerId> = (1..=HOSTS as u64).map(BrokerId).collect();
        let oracle = Oracle::new(&ids, TOPICS, REPLICAS, 2, SESSION_TIMEOUT, &mut rng);
        let hosts = ids
            .iter()
            .map(|&id| Host {
                id,
                incarnation: 1,
                up: true,
                wiped: false,
                lost: false,
                logs: BTreeMap::new(),
                replicas: BTreeMap::new(),
                damaged: BTreeSet::new(),
                pubs: BTreeMap::new(),
                clock: 0,
                syncing: BTreeSet::new(),
                last_heartbeat: None,
                cut: None,
            })
            .collect();
        let weather = Weather::random(&mut rng);
        let mut w = World {
            opts,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            hosts,
            oracle,
            checker: Checker::default(),
            cfg,
            weather,
            faults_on: true,
            next_id: HOSTS as u64 + 1,
            next_pub: 1,
            out: Outcome {
                durable_runs: u64::from(durable),
                ..Outcome::default()
            },
            acked_after_heal: BTreeMap::new(),
            trace: std::env::var_os("SIM_TRACE").is_some(),
        };
        for h in 0..HOSTS {
            let at = w.rng.below(TICK);
            w.at(at, Event::Tick(h));
        }
        for c in 0..CLIENTS {
            let at = w.rng.range(50, 300);
            w.at(at, Event::ClientPublish(c));
        }
        w.at(100, Event::CtlTick);
        let first_fault = w.rng.range(300, 1_500);
        w.at(first_fault, Event::Fault);
        let heal = w.opts.faults_until;
        w.at(heal, Event::Heal);
        for t in 0..TOPICS {
            w.notify(t);
        }
        w
    }

    fn at(&mut self, time: Millis, ev: Event) {
        self.seq += 1;
        self.queue.insert((time, self.seq), ev);
    }

    fn host_of(&self, id: BrokerId) -> Option<usize> {
        self.hosts.iter().position(|h| h.id == id)
    }

    fn host_now(&self, h: usize) -> Millis {
        let t = self.now as i64 + self.hosts[h].clock;
        t.max(0) as Millis
    }

    /// Runs to the end; the first violation names the seed, the time and the step.
    pub(crate) fn run(mut self) -> Result<Outcome, String> {
        while let Some(((time, _), ev)) = self.queue.pop_first() {
            if time > self.opts.end_at {
                break;
            }
            self.now = time;
            self.out.steps += 1;
            if self.out.steps > MAX_STEPS || self.queue.len() > MAX_QUEUED {
                return Err(format!(
                    "seed {}: t={time}ms: runaway ({} steps, {} events queued)",
                    self.opts.seed,
                    self.out.steps,
                    self.queue.len()
                ));
            }
            let step = self.out.steps;
            if self.trace {
                self.trace_event(&ev);
            }
            self.step(ev)
                .and_then(|()| self.check())
                .map_err(|e| format!("seed {}: t={time}ms step {step}: {e}", self.opts.seed))?;
        }
        self.final_check()
            .map_err(|e| format!("seed {}: at the end: {e}", self.opts.seed))?;
        Ok(self.out)
    }

    fn trace_event(&self, ev: &Event) {
        let t = self.now;
        match ev {
            Event::Tick(_) | Event::CtlTick | Event::ClientPublish(_) => {}
            Event::Deliver {
                msg: NetMsg::Publish { .. } | NetMsg::Reply,
                ..
            } => {}
            Event::Deliver {
                msg:
                    NetMsg::Replica {
                        msg: Msg::Append { batch, .. },
                        ..
                    },
                ..
            } if batch.records.is_empty() => {}
            Event::Deliver { from, to, msg } => {
                match msg {
                    NetMsg::Replica {
                        topic,
                        from: f,
                        to: d,
                        msg:
                            Msg::Append {
                                epoch,
                                hw,
                                base,
                                batch,
                            },
                    } => eprintln!(
                    "{t} {from:?}->{to:?} t{topic} {}->{} append e{} hw{hw} base{base} n{} re{}",
                    f.0, d.0, epoch.0, batch.records.len(), batch.epoch.0
                ),
                    NetMsg::Meta {
                        id,
                        incarnation,
                        states,
                    } => eprintln!(
                        "{t} ctl->{to:?} meta b{} i{incarnation} {:?}",
                        id.0,
                        states
                            .iter()
                            .map(|(i, s)| (
                                i,
                                s.epoch.0,
                                s.leader.map(|l| l.0),
                                s.isr.iter().map(|b| b.0).collect::<Vec<_>>()
                            ))
                            .collect::<Vec<_>>()
                    ),
                    other => eprintln!("{t} {from:?}->{to:?} {other:?}"),
                }
            }
            other => eprintln!("{t} {other:?}"),
        }
        for (h, host) in self.hosts.iter().enumerate() {
            let _ = (h, host);
        }
    }

    fn cut_between(&self, a: Node, b: Node) -> bool {
        let blocks = |n: Node, other: Node| match n {
            Node::Host(h) => match self.hosts[h].cut {
                Some(Cut::All) => true,
                Some(Cut::Ctl) => other == Node::Ctl,
                Some(Cut::Peers) => matches!(other, Node::Host(_)),
                None => false,
            },
            _ => false,
        };
        blocks(a, b) || blocks(b, a)
    }

    fn send(&mut self, from: Node, to: Node, mut msg: NetMsg) {
        if self.cut_between(from, to) || self.rng.chance(self.weather.drop) {
            return;
        }
        if let NetMsg::Replica {
            msg: Msg::Append { batch, .. },
            ..
        } = &mut msg
        {
            if !batch.records.is_empty() && self.rng.chance(self.weather.corrupt) {
                let i = self.rng.below(batch.records.len() as u64) as usize;
                if let Some(r) = batch.records.get_mut(i) {
                    r.bytes.push(0xee);
                }
            }
        }
        let copies = if self.rng.chance(self.weather.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = if self.rng.chance(self.weather.long_delay) {
                self.rng.range(200, 1_500)
            } else {
                self.rng.range(1, self.weather.max_delay)
            };
            let at = self.now + delay;
            self.at(
                at,
                Event::Deliver {
                    from,
                    to,
                    msg: msg.clone(),
                },
            );
        }
    }

    fn notify(&mut self, topic: usize) {
        let state = self.oracle.topics[topic].state.clone();
        let targets: Vec<(usize, BrokerId, u64)> = self
            .oracle
            .sessions
            .iter()
            .map(|(id, s)| (s.host, *id, s.incarnation))
            .collect();
        for (h, id, incarnation) in targets {
            let delay = self.rng.range(5, 200);
            let msg = NetMsg::Meta {
                id,
                incarnation,
                states: vec![(topic, state.clone())],
            };
            if self.cut_between(Node::Ctl, Node::Host(h)) || self.rng.chance(self.weather.drop) {
                continue;
            }
            let at = self.now + delay;
            self.at(
                at,
                Event::Deliver {
                    from: Node::Ctl,
                    to: Node::Host(h),
                    msg,
                },
            );
        }
    }

    fn apply_effects(&mut self, effects: Vec<Effect>) -> Result<(), String> {
        let mut changed = BTreeSet::new();
        for e in effects {
            match e {
                Effect::Changed(t) => {
                    changed.insert(t);
                }
                Effect::Elected { topic, leader } => {
                    self.out.elections += 1;
                    // Checked now unless the elected broker cannot take office under this
                    // election: its data path was wiped (its id never runs again), or it
                    // restarted since its session began (lost records, or not registered yet):
                    // its new incarnation ends the epoch. Every leader is checked again when it
                    // takes office (`check`).
                    let stale = |w: &World, h: usize| {
                        let host = &w.hosts[h];
                        host.wiped || host.lost || (host.up && !w.registered(h))
                    };
                    if let Some(h) = self.host_of(leader).filter(|&h| !stale(self, h)) {
                        let log = self.hosts[h].logs.get(&topic);
                        self.checker.at_election(topic, leader, log)?;
                    }
                }
            }
        }
        for t in changed {
            if self.trace {
                let o = &self.oracle.topics[t];
                eprintln!(
                    "{} ctl topic {t}: epoch {} leader {:?} isr {:?} eligible {:?} replicas {:?}",
                    self.now,
                    o.state.epoch.0,
                    o.state.leader.map(|b| b.0),
                    o.state.isr.iter().map(|b| b.0).collect::<Vec<_>>(),
                    o.elr.iter().map(|b| b.0).collect::<Vec<_>>(),
                    o.state.replicas.iter().map(|b| b.0).collect::<Vec<_>>()
                );
            }
            self.notify(t);
        }
        Ok(())
    }

    fn step(&mut self, ev: Event) -> Result<(), String> {
        match ev {
            Event::Tick(h) => {
                self.at(self.now + TICK, Event::Tick(h));
                if !self.hosts[h].up {
                    return Ok(());
                }
                let now = self.host_now(h);
                self.forget_refetched(h);
                let topics: Vec<usize> = self.hosts[h].replicas.keys().copied().collect();
                for t in topics {
                    let mut outs = Vec::new();
                    let host = &mut self.hosts[h];
                    if let (Some(r), Some(log)) = (host.replicas.get_mut(&t), host.logs.get_mut(&t))
                    {
                        r.tick(log, now, &mut outs);
                    }
                    self.apply_outputs(h, t, outs)?;
                }
                let due = self.hosts[h]
                    .last_heartbeat
                    .is_none_or(|t| self.now.saturating_sub(t) >= HEARTBEAT);
                if due {
                    self.heartbeat(h);
                }
            }
            Event::CtlTick => {
                self.at(self.now + 100, Event::CtlTick);
                let mut eff = Vec::new();
                self.oracle.tick(self.now, &mut self.rng, &mut eff);
                self.apply_effects(eff)?;
            }
            Event::Deliver { from, to, msg } => {
                if self.cut_between(from, to) {
                    return Ok(());
                }
                match to {
                    Node::Host(h) => self.deliver_to_host(h, from, msg)?,
                    Node::Ctl => self.deliver_to_ctl(msg)?,
                    Node::Client(_) => {}
                }
            }
            Event::SyncDone {
                host: h,
                incarnation,
                topic,
            } => {
                let host = &mut self.hosts[h];
                if !host.up || host.incarnation != incarnation {
                    return Ok(());
                }
                host.syncing.remove(&topic);
                if let Some(log) = host.logs.get_mut(&topic) {
                    log.complete_sync();
                }
                let now = self.host_now(h);
                let mut outs = Vec::new();
                let host = &mut self.hosts[h];
                if let (Some(r), Some(log)) =
                    (host.replicas.get_mut(&topic), host.logs.get_mut(&topic))
                {
                    r.on_synced(log, now, &mut outs);
                }
                self.apply_outputs(h, topic, outs)?;
            }
            Event::ClientPublish(c) => {
                let next = self.now + self.rng.range(10, 60);
                self.at(next, Event::ClientPublish(c));
                let topic = self.rng.below(TOPICS as u64) as usize;
                let st = &self.oracle.topics[topic].state;
                let target = match st.leader {
                    Some(l) => Some(l),
                    None => self.rng.pick(&st.replicas),
                };
                if let Some(h) = target.and_then(|id| self.host_of(id)) {
                    let id = self.next_pub;
                    self.next_pub += 1;
                    let count = self.rng.range(1, 3) as usize;
                    self.send(
                        Node::Client(c),
                        Node::Host(h),
                        NetMsg::Publish { id, topic, count },
                    );
                }
            }
            Event::Fault => {
                if self.faults_on {
                    self.fault();
                    let next = self.now + self.rng.range(200, 1_200);
                    self.at(next, Event::Fault);
                }
            }
            Event::Restart(h) => self.restart(h)?,
            Event::HealCut(h) => self.hosts[h].cut = None,
            Event::Heal => {
                self.faults_on = false;
                self.weather = Weather::calm();
                for h in 0..HOSTS {
                    self.hosts[h].cut = None;
                    if !self.hosts[h].up {
                        let at = self.now + 10;
                        self.at(at, Event::Restart(h));
                    }
                }
            }
        }
        Ok(())
    }

    fn heartbeat(&mut self, h: usize) {
        self.hosts[h].last_heartbeat = Some(self.now);
        let host = &self.hosts[h];
        let msg = NetMsg::Heartbeat {
            id: host.id,
            incarnation: host.incarnation,
            damaged: host.damaged.clone(),
        };
        self.send(Node::Host(h), Node::Ctl, msg);
    }

    fn deliver_to_ctl(&mut self, msg: NetMsg) -> Result<(), String> {
        let mut eff = Vec::new();
        match msg {
            NetMsg::Heartbeat {
                id,
                incarnation,
                damaged,
            } => {
                let Some(h) = self.host_of(id) else {
                    return Ok(());
                };
                self.oracle.heartbeat(
                    id,
                    h,
                    incarnation,
                    &damaged,
                    self.now,
                    &mut self.rng,
                    &mut eff,
                );
                self.apply_effects(eff)?;
                let registered = self
                    .oracle
                    .sessions
                    .get(&id)
                    .is_some_and(|s| s.incarnation == incarnation);
                if registered {
                    let states = self.oracle.states();
                    self.send(
                        Node::Ctl,
                        Node::Host(h),
                        NetMsg::Meta {
                            id,
                            incarnation,
                            states,
                        },
                    );
                }
            }
            NetMsg::AlterIsr {
                topic,
                from,
                epoch,
                isr_version,
                isr,
                incarnations,
                proposal,
            } => {
                self.oracle.alter_isr(
                    topic,
                    from,
                    (epoch, isr_version),
                    &isr,
                    &incarnations,
                    proposal,
                    &mut eff,
                );
                self.apply_effects(eff)?;
                if let (Some(h), Some(t)) = (self.host_of(from), self.oracle.topics.get(topic)) {
                    let state = t.state.clone();
                    self.send(
                        Node::Ctl,
                        Node::Host(h),
                        NetMsg::AlterIsrAnswer {
                            id: from,
                            topic,
                            proposal,
                            state,
                        },
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn deliver_to_host(&mut self, h: usize, from: Node, msg: NetMsg) -> Result<(), String> {
        if !self.hosts[h].up {
            return Ok(());
        }
        let now = self.host_now(h);
        match msg {
            NetMsg::Replica {
                topic,
                from: sender,
                to,
                msg,
            } => {
                let mut outs = Vec::new();
                let host = &mut self.hosts[h];
                if host.id != to {
                    return Ok(());
                }
                if let (Some(r), Some(log)) =
                    (host.replicas.get_mut(&topic), host.logs.get_mut(&topic))
                {
                    r.on_message(log, sender, msg, now, &mut outs);
                }
                self.apply_outputs(h, topic, outs)?;
            }
            NetMsg::Meta {
                id,
                incarnation,
                states,
            } => {
                let host = &self.hosts[h];
                if host.id != id || host.incarnation != incarnation {
                    return Ok(());
                }
                for (t, st) in states {
                    let mut outs = Vec::new();
                    let host = &mut self.hosts[h];
                    let me = host.id;
                    if !st.replicas.contains(&me) && !host.replicas.contains_key(&t) {
                        continue;
                    }
                    let damaged = host.damaged.contains(&t);
                    let cfg = self.cfg.clone();
                    let incarnation = host.incarnation;
                    let r = host
                        .replicas
                        .entry(t)
                        .or_insert_with(|| Replica::new(me, incarnation, cfg, damaged));
                    let log = host.logs.entry(t).or_default();
                    r.on_state(log, st, now, &mut outs);
                    self.apply_outputs(h, t, outs)?;
                }
            }
            NetMsg::AlterIsrAnswer {
                id,
                topic,
                proposal,
                state,
            } => {
                let mut outs = Vec::new();
                let host = &mut self.hosts[h];
                if host.id != id {
                    return Ok(());
                }
                if let (Some(r), Some(log)) =
                    (host.replicas.get_mut(&topic), host.logs.get_mut(&topic))
                {
                    r.on_alter_isr_answer(log, proposal, state, now, &mut outs);
                }
                self.apply_outputs(h, topic, outs)?;
            }
            NetMsg::Publish {
                id: sent,
                topic,
                count,
            } => {
                let Node::Client(c) = from else {
                    return Ok(());
                };
                // Every delivered copy is a publish of its own (a duplicate is stored twice).
                let id = self.next_pub;
                self.next_pub += 1;
                let mut outs = Vec::new();
                let host = &mut self.hosts[h];
                let leading = host.replicas.get(&topic).and_then(Replica::leading);
                let (Some(epoch), Some(log)) = (leading, host.logs.get_mut(&topic)) else {
                    self.send(Node::Host(h), Node::Client(c), NetMsg::Reply);
                    return Ok(());
                };
                let payloads = (0..count)
                    .map(|i| format!("t{topic}/p{sent}/{id}/{i}").into_bytes())
                    .collect();
                let end = log
                    .append_new(epoch, payloads)
                    .map_err(|e| format!("leader append failed: {e}"))?;
                host.pubs.insert(id, (topic, end));
                if let Some(r) = host.replicas.get_mut(&topic) {
                    let _ = r.published(log, id, end, now, &mut outs);
                }
                self.apply_outputs(h, topic, outs)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn apply_outputs(&mut self, h: usize, topic: usize, outs: Vec<Output>) -> Result<(), String> {
        for o in outs {
            match o {
                Output::Send { to, msg } => {
                    if let Some(dest) = self.host_of(to) {
                        let from = self.hosts[h].id;
                        self.send(
                            Node::Host(h),
                            Node::Host(dest),
                            NetMsg::Replica {
                                topic,
                                from,
                                to,
                                msg,
                            },
                        );
                    }
                }
                Output::AlterIsr {
                    epoch,
                    isr_version,
                    isr,
                    incarnations,
                    proposal,
                } => {
                    let from = self.hosts[h].id;
                    self.send(
                        Node::Host(h),
                        Node::Ctl,
                        NetMsg::AlterIsr {
                            topic,
                            from,
                            epoch,
                            isr_version,
                            isr,
                            incarnations,
                            proposal,
                        },
                    );
                }
                Output::Acked(id) => {
                    let Some((t, end)) = self.hosts[h].pubs.remove(&id) else {
                        return Err(format!("an unknown publish {id} acknowledged"));
                    };
                    let Some(log) = self.hosts[h].logs.get(&t) else {
                        return Err(format!("publish {id} acknowledged without a log"));
                    };
                    self.checker.on_ack(t, end, log)?;
                    self.out.acked += 1;
                    if !self.faults_on {
                        *self.acked_after_heal.entry(t).or_default() += 1;
                    }
                }
                Output::Failed(id, _) => {
                    self.hosts[h].pubs.remove(&id);
                    self.out.failed += 1;
                }
                Output::Sync => {
                    let host = &mut self.hosts[h];
                    if host.syncing.insert(topic) {
                        let incarnation = host.incarnation;
                        let at = self.now + self.rng.range(1, 40);
                        self.at(
                            at,
                            Event::SyncDone {
                                host: h,
                                incarnation,
                                topic,
                            },
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether broker `b`'s data path is intact: not wiped, and not cut by recovery unless
    /// the controller has taken that in (it then left the damaged topics' sets).
    fn intact(&self, b: BrokerId) -> bool {
        self.host_of(b).is_some_and(|bh| {
            let host = &self.hosts[bh];
            let registered = self
                .oracle
                .sessions
                .get(&b)
                .is_some_and(|s| s.incarnation == host.incarnation);
            !host.wiped && !host.lost && (host.damaged.is_empty() || registered)
        })
    }

    /// Whether host `h` may lose data now: in every topic whose acknowledged records it
    /// holds, no other holder has lost data the controller does not know of yet (fewer than
    /// `min_insync` = 2 such failures at once), and another intact holder exists.
    fn may_lose(&self, h: usize) -> bool {
        let id = self.hosts[h].id;
        (0..TOPICS).all(|t| {
            let holders = self.oracle.holders(t);
            let others: Vec<BrokerId> = holders.iter().copied().filter(|&b| b != id).collect();
            !holders.contains(&id) || (others.iter().all(|&b| self.intact(b)) && !others.is_empty())
        })
    }

    /// Clears the recorded damage of the topics whose replicas have refetched.
    fn forget_refetched(&mut self, h: usize) {
        let host = &mut self.hosts[h];
        let refetched: Vec<usize> = host
            .damaged
            .iter()
            .copied()
            .filter(|t| host.replicas.get(t).is_some_and(|r| !r.damaged()))
            .collect();
        for t in refetched {
            host.damaged.remove(&t);
        }
    }

    /// Stops host `h`; `host_crash`: the machine went down and unsynced records are lost.
    fn crash(&mut self, h: usize, host_crash: bool) {
        self.forget_refetched(h);
        let durable = self.cfg.durable;
        if self.trace {
            let ends: Vec<(usize, Seq, Seq)> = self.hosts[h]
                .logs
                .iter()
                .map(|(t, l)| (*t, l.end(), l.durable_end()))
                .collect();
            eprintln!(
                "{} crash host {h} host_crash={host_crash} logs {ends:?}",
                self.now
            );
        }
        let host = &mut self.hosts[h];
        host.up = false;
        if host_crash {
            for log in host.logs.values_mut() {
                log.crash();
            }
            host.lost |= !durable;
        }
        host.replicas.clear();
        host.syncing.clear();
        let lost = host.pubs.len() as u64;
        host.pubs.clear();
        self.out.failed += lost;
    }

    fn fault(&mut self) {
        self.out.faults += 1;
        let h = self.rng.below(HOSTS as u64) as usize;
        let kind = self.rng.below(100);
        if self.trace {
            eprintln!("{} fault kind {kind} on host {h}", self.now);
        }
        match kind {
            0..=29 => {
                // Without --durable a host crash loses acknowledged records on this replica.
                let host_crash = self.rng.chance(0.5) && (self.cfg.durable || self.may_lose(h));
                if self.hosts[h].up {
                    self.crash(h, host_crash);
                    let at = self.now + self.rng.range(200, 4_000);
                    self.at(at, Event::Restart(h));
                }
            }
            30..=49 => {
                let cut = match self.rng.below(3) {
                    0 => Cut::All,
                    1 => Cut::Ctl,
                    _ => Cut::Peers,
                };
                self.hosts[h].cut = Some(cut);
                let at = self.now + self.rng.range(300, 6_000);
                self.at(at, Event::HealCut(h));
            }
            50..=59 => {
                if self.may_lose(h) {
                    if self.hosts[h].up {
                        self.crash(h, true);
                        let at = self.now + self.rng.range(200, 3_000);
                        self.at(at, Event::Restart(h));
                    }
                    let host = &mut self.hosts[h];
                    host.wiped = true;
                    host.logs.clear();
                }
            }
            60..=79 => {
                let jump = self.rng.range(0, 8_000) as i64 - 3_000;
                self.hosts[h].clock += jump;
            }
            _ => self.weather = Weather::random(&mut self.rng),
        }
    }

    fn restart(&mut self, h: usize) -> Result<(), String> {
        if self.hosts[h].up {
            return Ok(());
        }
        let damage = self.faults_on && self.rng.chance(0.3) && self.may_lose(h);
        let damage_topic = self.rng.below(TOPICS as u64) as usize;
        let damage_len = self.rng.range(1, 6) as usize;
        let host = &mut self.hosts[h];
        host.up = true;
        host.incarnation += 1;
        if host.wiped {
            host.wiped = false;
            host.id = BrokerId(self.next_id);
            self.next_id += 1;
            host.incarnation = 1;
            host.logs.clear();
        }
        if damage {
            if let Some(log) = host.logs.get_mut(&damage_topic) {
                log.damage_tail(damage_len);
            }
        }
        // What a recovery found stays recorded (in the data path, in production) until the
        // replica has refetched it: a restart before the controller heard of it reports it again.
        for (t, log) in host.logs.iter_mut() {
            if log.recover() || host.lost {
                host.damaged.insert(*t);
            }
        }
        host.lost = false;
        host.replicas.clear();
        host.last_heartbeat = None;
        self.heartbeat(h);
        Ok(())
    }

    fn registered(&self, h: usize) -> bool {
        let host = &self.hosts[h];
        host.up
            && self
                .oracle
                .sessions
                .get(&host.id)
                .is_some_and(|s| s.incarnation == host.incarnation)
    }

    /// The invariants, after every step.
    fn check(&mut self) -> Result<(), String> {
        for h in 0..HOSTS {
            if !self.hosts[h].up {
                continue;
            }
            let id = self.hosts[h].id;
            let leads: Vec<(usize, Epoch, Seq)> = self.hosts[h]
                .replicas
                .iter()
                .filter_map(|(t, r)| Some((*t, r.leading()?, r.high_watermark()?)))
                .collect();
            for (t, epoch, hw) in leads {
                let log = self.hosts[h].logs.get(&t);
                self.checker.leader(t, id, epoch, hw, log)?;
                let current = self.oracle.topics[t].state.epoch == epoch;
                if !current {
                    continue;
                }
                let empty = MemLog::new();
                let llog = self.hosts[h].logs.get(&t).unwrap_or(&empty);
                let members: Vec<BrokerId> = self.hosts[h]
                    .replicas
                    .get(&t)
                    .and_then(Replica::leader_isr)
                    .map(<[BrokerId]>::to_vec)
                    .unwrap_or_default();
                for m in members {
                    if m == id {
                        continue;
                    }
                    if let Some(mh) = self.host_of(m) {
                        if self.registered(mh) {
                            let mlog = self.hosts[mh].logs.get(&t).unwrap_or(&empty);
                            Checker::agree_below(t, hw, (id, llog), (m, mlog))?;
                        }
                    }
                }
            }
        }
        for t in 0..TOPICS {
            for b in self.oracle.holders(t) {
                if let Some(h) = self.host_of(b) {
                    if self.registered(h) {
                        self.checker.holder(t, b, self.hosts[h].logs.get(&t))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// After healing: every topic has a running leader from which every acknowledged record
    /// reads back, and publishes were acknowledged again.
    fn final_check(&self) -> Result<(), String> {
        for t in 0..TOPICS {
            let st = &self.oracle.topics[t].state;
            let leader = st
                .leader
                .ok_or_else(|| format!("topic {t} has no leader after healing ({st:?})"))?;
            let h = self
                .host_of(leader)
                .ok_or_else(|| format!("topic {t}: leader {} is not running", leader.0))?;
            let log = self.hosts[h]
                .logs
                .get(&t)
                .ok_or_else(|| format!("topic {t}: leader {} has no log", leader.0))?;
            let (len, _) = self.checker.acked(t);
            let mut read = MemLog::new();
            let mut at = 0;
            while at < len {
                let b = log
                    .read(at, 64)
                    .map_err(|e| format!("topic {t}: reading acknowledged records: {e}"))?;
                let n = b.records.len() as Seq;
                read.append(b.epoch, &b.records)
                    .map_err(|e| format!("topic {t}: {e}"))?;
                at += n.max(1);
            }
            if !self.checker.holds_acked(t, &read) {
                return Err(format!(
                    "topic {t}: the acknowledged records do not read back from leader {}",
                    leader.0
                ));
            }
            if self.acked_after_heal.get(&t).copied().unwrap_or(0) == 0 {
                return Err(format!(
                    "topic {t}: no publish acknowledged after healing ({st:?}, eligible {:?})",
                    self.oracle.topics[t].elr
                ));
            }
        }
        Ok(())
    }
}

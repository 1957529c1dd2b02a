//! The simulated cluster: five hosts each running a broker (a replica per topic it holds,
//! over a [`MemLog`] per topic), the controller ([`Control`]: the real one or the [`Oracle`]),
//! publishing clients,
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
use super::control::{Control, Proposal};
use super::net::{Cut, Event, NetMsg, Node, Weather};
use super::oracle::{Effect, Oracle};
use super::raft_control::RaftControl;
use super::rng::Rng;
use crate::ids::{BrokerId, Seq};
use crate::replica::{MemLog, Millis, Output, PublishId, Replica, ReplicaConfig, ReplicaLog};

pub(super) const HOSTS: usize = 5;
pub(super) const TOPICS: usize = 3;
pub(super) const REPLICAS: usize = 3;
pub(super) const CLIENTS: usize = 3;
pub(super) const TICK: Millis = 25;
pub(super) const HEARTBEAT: Millis = 500;
pub(super) const SESSION_TIMEOUT: Millis = 3_000;
/// A run past these is a message storm, reported as a failure.
pub(super) const MAX_STEPS: u64 = 2_000_000;
pub(super) const MAX_QUEUED: usize = 200_000;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) seed: u64,
    /// Faults stop (and everything heals) at this time.
    pub(crate) faults_until: Millis,
    /// The run ends at this time.
    pub(crate) end_at: Millis,
    /// The real controller (a Raft cluster) instead of the oracle.
    pub(crate) raft: bool,
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
    /// Followers told to begin their log at a leader's start (it had released what they
    /// missed).
    pub(crate) starts: u64,
    pub(crate) ctl_crashes: u64,
    /// Controller snapshots installed from a leader, and restarts from one.
    pub(crate) ctl_installs: u64,
    pub(crate) ctl_snapshot_restarts: u64,
}

#[derive(Debug)]
pub(super) struct Host {
    pub(super) id: BrokerId,
    pub(super) incarnation: u64,
    pub(super) up: bool,
    pub(super) wiped: bool,
    /// The ids its wiped data paths had (each came back under a new id).
    pub(super) former_ids: BTreeSet<BrokerId>,
    /// A host crash without `--durable` lost its unsynced records; the restart reports it.
    pub(super) lost: bool,
    pub(super) logs: BTreeMap<usize, MemLog>,
    pub(super) replicas: BTreeMap<usize, Replica>,
    /// Topics whose log may miss a suffix (recovery cut one, or the page cache was lost), until
    /// the replica has refetched it; reported with every heartbeat.
    pub(super) damaged: BTreeSet<usize>,
    pub(super) pubs: BTreeMap<PublishId, (usize, Seq)>,
    pub(super) clock: i64,
    pub(super) syncing: BTreeSet<usize>,
    pub(super) last_heartbeat: Option<Millis>,
    pub(super) cut: Option<Cut>,
}

pub(crate) struct World {
    pub(super) opts: Options,
    pub(super) rng: Rng,
    pub(super) now: Millis,
    pub(super) seq: u64,
    pub(super) queue: BTreeMap<(Millis, u64), Event>,
    pub(super) hosts: Vec<Host>,
    /// The controller: the oracle or the real one.
    pub(super) ctl: Box<dyn Control>,
    pub(super) checker: Checker,
    pub(super) cfg: ReplicaConfig,
    pub(super) weather: Weather,
    pub(super) faults_on: bool,
    pub(super) next_id: u64,
    pub(super) next_pub: PublishId,
    pub(super) out: Outcome,
    pub(super) acked_after_heal: BTreeMap<usize, u64>,
    /// `SIM_TRACE=1`: every event on stderr (for replaying a failing seed).
    pub(super) trace: bool,
    /// Leaders release what their channels finished (at random, at most the high watermark
    /// and the acknowledged end): followers then begin again at a leader's start.
    pub(super) releases: bool,
}

impl World {
    pub(crate) fn new(opts: Options) -> Result<World, String> {
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
        let ctl: Box<dyn Control> = if opts.raft {
            Box::new(RaftControl::new(&ids, TOPICS, REPLICAS, 2, &mut rng)?)
        } else {
            Box::new(Oracle::new(
                &ids,
                TOPICS,
                REPLICAS,
                2,
                SESSION_TIMEOUT,
                &mut rng,
            ))
        };
        let hosts = ids
            .iter()
            .map(|&id| Host {
                id,
                incarnation: 1,
                up: true,
                wiped: false,
                former_ids: BTreeSet::new(),
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
        let releases = rng.chance(0.5);
        let mut w = World {
            opts,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            hosts,
            ctl,
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
            releases,
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
        Ok(w)
    }

    pub(super) fn at(&mut self, time: Millis, ev: Event) {
        self.seq += 1;
        self.queue.insert((time, self.seq), ev);
    }

    pub(super) fn host_of(&self, id: BrokerId) -> Option<usize> {
        self.hosts.iter().position(|h| h.id == id)
    }

    pub(super) fn host_now(&self, h: usize) -> Millis {
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
        self.out.ctl_crashes = self.ctl.crashes();
        let (installs, restarts, refused) = self.ctl.snapshot_counts();
        if refused > 0 {
            return Err(format!(
                "seed {}: a controller node did not restart from what it wrote",
                self.opts.seed
            ));
        }
        (self.out.ctl_installs, self.out.ctl_snapshot_restarts) = (installs, restarts);
        Ok(self.out)
    }

    pub(super) fn apply_effects(&mut self, effects: Vec<Effect>) -> Result<(), String> {
        let mut changed = BTreeSet::new();
        let mut answers = Vec::new();
        for e in effects {
            match e {
                Effect::Changed(t) => {
                    changed.insert(t);
                }
                Effect::Answered {
                    to,
                    topic,
                    proposal,
                } => answers.push((to, topic, proposal)),
                Effect::Elected { topic, leader } => {
                    self.out.elections += 1;
                    // Checked now unless the elected broker cannot take office under this
                    // election: its data path was wiped (its id never runs again), or it
                    // restarted since its session began (up or down again): its new
                    // incarnation registers before it acts, which ends the epoch and reports
                    // what recovery cut. Every leader is checked again when it takes office.
                    let stale = |w: &World, h: usize| {
                        let host = &w.hosts[h];
                        let session = w.ctl.incarnation(host.id);
                        host.wiped || host.lost || session != Some(host.incarnation)
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
                eprintln!("{} ctl topic {t}: {}", self.now, self.ctl.describe(t));
            }
            self.notify(t);
        }
        for (to, topic, proposal) in answers {
            if let Some(h) = self.host_of(to) {
                let state = self.ctl.state(topic);
                self.send(
                    Node::Ctl,
                    Node::Host(h),
                    NetMsg::AlterIsrAnswer {
                        id: to,
                        topic,
                        proposal,
                        state,
                    },
                );
            }
        }
        Ok(())
    }

    pub(super) fn step(&mut self, ev: Event) -> Result<(), String> {
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
                    if self.releases && self.rng.chance(0.1) {
                        self.release(h, t)?;
                    }
                }
                let due = self.hosts[h]
                    .last_heartbeat
                    .is_none_or(|t| self.now.saturating_sub(t) >= HEARTBEAT);
                if due {
                    self.heartbeat(h);
                }
            }
            Event::CtlTick => {
                self.at(self.now + self.ctl.tick_every(), Event::CtlTick);
                let mut eff = Vec::new();
                self.ctl.tick(self.now, &mut self.rng, &mut eff);
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
                let st = self.ctl.state(topic);
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
                    self.ctl.fault(self.now, &mut self.rng);
                    let next = self.now + self.rng.range(200, 1_200);
                    self.at(next, Event::Fault);
                }
            }
            Event::Restart(h) => self.restart(h)?,
            Event::HealCut(h) => self.hosts[h].cut = None,
            Event::Heal => {
                self.faults_on = false;
                self.weather = Weather::calm();
                self.ctl.heal(self.now);
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

    /// A leader's channels finished a prefix: its log releases it (below the high watermark,
    /// as channels deliver only below it, and below the acknowledged end the checker knows).
    fn release(&mut self, h: usize, t: usize) -> Result<(), String> {
        let host = &self.hosts[h];
        let (Some(hw), Some(log)) = (
            host.replicas.get(&t).and_then(Replica::high_watermark),
            host.logs.get(&t),
        ) else {
            return Ok(());
        };
        let top = hw.min(self.checker.acked(t).0).min(log.end());
        if top <= log.start() {
            return Ok(());
        }
        let at = self.rng.range(log.start() + 1, top);
        self.checker.on_release(t, at)?;
        if let Some(log) = self.hosts[h].logs.get_mut(&t) {
            log.release_below(at);
        }
        if self.trace {
            eprintln!("{} host {h} topic {t}: released below {at}", self.now);
        }
        Ok(())
    }

    pub(super) fn heartbeat(&mut self, h: usize) {
        self.hosts[h].last_heartbeat = Some(self.now);
        let host = &self.hosts[h];
        let msg = NetMsg::Heartbeat {
            id: host.id,
            incarnation: host.incarnation,
            damaged: host.damaged.clone(),
        };
        self.send(Node::Host(h), Node::Ctl, msg);
    }

    pub(super) fn deliver_to_ctl(&mut self, msg: NetMsg) -> Result<(), String> {
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
                let registered = self.ctl.heartbeat(
                    id,
                    h,
                    incarnation,
                    &damaged,
                    self.now,
                    &mut self.rng,
                    &mut eff,
                );
                self.apply_effects(eff)?;
                if registered {
                    let states = (0..TOPICS).map(|t| (t, self.ctl.state(t))).collect();
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
                let p = Proposal {
                    topic,
                    from,
                    base: (epoch, isr_version),
                    isr,
                    incarnations,
                    proposal,
                };
                self.ctl.alter_isr(p, self.now, &mut eff);
                self.apply_effects(eff)?;
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn deliver_to_host(
        &mut self,
        h: usize,
        from: Node,
        msg: NetMsg,
    ) -> Result<(), String> {
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

    pub(super) fn apply_outputs(
        &mut self,
        h: usize,
        topic: usize,
        outs: Vec<Output>,
    ) -> Result<(), String> {
        for o in outs {
            match o {
                Output::Send { to, msg } => {
                    let msg = through_the_wire(topic, msg)?;
                    if matches!(msg, crate::replica::Msg::StartAt { .. }) {
                        self.out.starts += 1;
                    }
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
}

/// `msg` as the peer decodes it from a frame: the codec must give back what was sent.
fn through_the_wire(topic: usize, msg: crate::replica::Msg) -> Result<crate::replica::Msg, String> {
    use crate::wire::{encode, Decoder, Frame, TopicMsg};
    const MAX_FRAME: usize = 1 << 20;
    let sent = Frame::Messages(vec![TopicMsg {
        topic: format!("topic-{topic}"),
        msg: msg.clone(),
    }]);
    let mut bytes = Vec::new();
    encode(&sent, MAX_FRAME, &mut bytes).map_err(|e| format!("encoding {sent:?}: {e}"))?;
    let mut frames = Vec::new();
    Decoder::new(MAX_FRAME)
        .feed(&bytes, &mut frames)
        .map_err(|e| format!("decoding {sent:?}: {e}"))?;
    if frames != [sent.clone()] {
        return Err(format!("the wire changed {sent:?} into {frames:?}"));
    }
    Ok(msg)
}

//! The real controller in the data path's simulation: three [`Controller`] nodes (raft-rs, the
//! metadata state machine, the broker sessions) driven in the world's virtual time. A message
//! between two nodes arrives at the next controller tick; Raft ticks every fifth one. Brokers'
//! requests go to the node that leads (none: the request is lost, as on a network without a
//! leader, and the broker asks again); every decision takes effect only once committed and
//! applied, and the world learns it from the node that has applied the most.
//!
//! Invariants: nothing here decides anything — it carries requests to the nodes and reports
//! what they applied, each committed entry once, in log order. Every choice is deterministic
//! (ordered maps, election timeouts drawn from the seed).

use std::collections::{BTreeMap, BTreeSet};

use raft::eraftpb::Message;

use super::control::{Control, Proposal};
use super::oracle::Effect;
use super::rng::Rng;
use crate::controller::{
    BrokerReply, BrokerRequest, Controller, Durable, Entry, Metadata, NodeConfig, SessionConfig,
};
use crate::ids::{BrokerId, Epoch};
use crate::replica::{Millis, TopicState};

/// Virtual time between controller ticks (and a message's trip between nodes).
const TICK: Millis = 20;
/// Controller ticks per Raft tick (and per session tick).
const RAFT_TICK_EVERY: u64 = 5;
/// Raft ticks without a heartbeat before a broker is fenced: 3 s.
const SESSION_TICKS: u64 = 30;

fn topic_name(t: usize) -> String {
    format!("t{t}")
}

fn topic_index(name: &str) -> Option<usize> {
    name.strip_prefix('t')?.parse().ok()
}

fn address(host: usize) -> Vec<String> {
    vec![format!("host{host}:4150")]
}

struct CtlNode {
    cfg: NodeConfig,
    /// None: crashed.
    ctl: Option<Controller>,
    /// Everything it wrote (each write synced: losing unsynced writes is the controller
    /// simulation's subject).
    disk: Durable,
    /// When a crashed node starts again.
    back_at: Millis,
}

/// A three-node Raft controller cluster.
pub(crate) struct RaftControl {
    nodes: Vec<CtlNode>,
    sessions: SessionConfig,
    now: Millis,
    /// Node crashes so far.
    crashes: u64,
    /// Snapshots installed, restarts from a snapshot, restarts refused.
    snapshots: (u64, u64, u64),
    /// Messages between nodes, due at the next tick.
    inflight: Vec<Message>,
    ticks: u64,
    topics: usize,
    /// The highest log index whose entry was reported.
    reported: u64,
    /// The metadata last reported (of the node that had applied the most).
    known: Metadata,
    /// Proposals sent, by (topic, epoch, number): who proposed.
    pending: BTreeMap<(String, Epoch, u64), BrokerId>,
}

impl RaftControl {
    /// A cluster that has elected a leader and on which brokers `ids[i]` (on host `i`) are
    /// registered and `topics` topics of `replicas` replicas created.
    pub(crate) fn new(
        ids: &[BrokerId],
        topics: usize,
        replicas: usize,
        min_insync: usize,
        rng: &mut Rng,
    ) -> Result<RaftControl, String> {
        let voters: Vec<u64> = vec![1, 2, 3];
        let mut timeouts: Vec<u64> = (10..16).collect();
        for i in (1..timeouts.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            timeouts.swap(i, j);
        }
        let sessions = SessionConfig {
            timeout: SESSION_TICKS,
            retry: 10,
            reassign_after: None,
        };
        // Half the seeds snapshot every few entries (compaction, restarts from a snapshot and
        // installs to a node that was down then happen beside the data path).
        let (snapshot_every, snapshot_margin) = if rng.below(2) == 0 {
            (0, 0)
        } else {
            (rng.range(5, 40), rng.below(8))
        };
        let mut nodes = Vec::new();
        for (i, id) in voters.iter().enumerate() {
            let cfg = NodeConfig {
                id: *id,
                voters: voters.clone(),
                election_tick: timeouts[i] as usize,
                heartbeat_tick: 2,
                snapshot_every,
                snapshot_margin,
            };
            let ctl = Controller::new(&cfg, sessions.clone(), Durable::default())
                .map_err(|e| format!("controller node {id}: {e}"))?;
            nodes.push(CtlNode {
                cfg,
                ctl: Some(ctl),
                disk: Durable::default(),
                back_at: 0,
            });
        }
        let mut c = RaftControl {
            nodes,
            sessions,
            now: 0,
            crashes: 0,
            snapshots: (0, 0, 0),
            inflight: Vec::new(),
            ticks: 0,
            topics,
            reported: 0,
            known: Metadata::default(),
            pending: BTreeMap::new(),
        };
        let mut ignored = Vec::new();
        let mut asked = false;
        for _ in 0..2_000 {
            c.round(&mut ignored);
            let md = &c.known;
            if md.brokers.len() == ids.len() && md.topics.len() == topics {
                return Ok(c);
            }
            if let Some(l) = c.leader() {
                if !asked || c.ticks.is_multiple_of(50) {
                    asked = true;
                    let Some(ctl) = c.nodes[l].ctl.as_mut() else {
                        continue;
                    };
                    for (host, id) in ids.iter().enumerate() {
                        let _ = ctl.handle(BrokerRequest::Heartbeat {
                            broker: *id,
                            incarnation: 1,
                            addresses: address(host),
                            known: None,
                            damaged: Vec::new(),
                        });
                    }
                    if c.known.brokers.len() == ids.len() {
                        for t in 0..topics {
                            let _ = ctl.handle(BrokerRequest::CreateTopic {
                                name: topic_name(t),
                                replicas: replicas as u32,
                                min_insync: min_insync as u32,
                            });
                        }
                    }
                    c.drive(l, &mut ignored);
                }
            }
        }
        Err("the controller cluster did not start".into())
    }

    /// The node leading (and current in its term), if any.
    fn leader(&self) -> Option<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((i, n.ctl.as_ref()?.node())))
            .filter(|(_, n)| n.leads_current())
            .max_by_key(|(_, n)| n.term())
            .map(|(i, _)| i)
    }

    /// One controller tick: messages due arrive, Raft ticks if due, everything is carried out.
    fn round(&mut self, out: &mut Vec<Effect>) {
        self.ticks += 1;
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes[i];
            if n.ctl.is_none() && self.now >= n.back_at {
                match Controller::new(&n.cfg, self.sessions.clone(), n.disk.clone()) {
                    Ok(ctl) => {
                        if ctl.node().snapshot_stats().restarted_from_snapshot {
                            self.snapshots.1 += 1;
                        }
                        n.ctl = Some(ctl);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "controller node did not restart");
                        self.snapshots.2 += 1;
                    }
                }
            }
        }
        for m in std::mem::take(&mut self.inflight) {
            let to = m.to.wrapping_sub(1) as usize;
            if let Some(ctl) = self.nodes.get_mut(to).and_then(|n| n.ctl.as_mut()) {
                // A refused message (e.g. from an unknown peer) is dropped, as by a lookup.
                let _ = ctl.step(m);
            }
        }
        let raft_tick = self.ticks.is_multiple_of(RAFT_TICK_EVERY);
        for i in 0..self.nodes.len() {
            if raft_tick {
                if let Some(ctl) = self.nodes[i].ctl.as_mut() {
                    ctl.tick();
                }
            }
            self.drive(i, out);
        }
    }

    /// Carries out what node `i` asks, then reports what became newly applied anywhere.
    fn drive(&mut self, i: usize, out: &mut Vec<Effect>) {
        let mut applied = Vec::new();
        let n = &mut self.nodes[i];
        let Some(ctl) = n.ctl.as_mut() else {
            return;
        };
        while let Some(mut o) = ctl.ready() {
            self.snapshots.0 += u64::from(o.installed.is_some());
            self.inflight.append(&mut o.messages);
            applied.append(&mut o.applied);
            n.disk.write(&o.persist);
            let after = o.persisted();
            self.inflight.extend(after.messages);
            applied.extend(after.applied);
            if let Some(commit) = after.commit {
                n.disk.hard_state.commit = commit;
            }
        }
        for a in applied {
            if a.index <= self.reported {
                continue;
            }
            self.reported = a.index;
            if let Some(Entry::AlterIsr {
                topic,
                epoch,
                proposal,
                ..
            }) = &a.entry
            {
                let key = (topic.clone(), *epoch, *proposal);
                if let (Some(to), Some(t)) = (self.pending.remove(&key), topic_index(topic)) {
                    out.push(Effect::Answered {
                        to,
                        topic: t,
                        proposal: *proposal,
                    });
                }
            }
        }
        self.report(out);
    }

    /// Reports what changed between the metadata last reported and the most applied one.
    fn report(&mut self, out: &mut Vec<Effect>) {
        let Some(md) = self
            .nodes
            .iter()
            .filter_map(|n| Some(n.ctl.as_ref()?.node()))
            .max_by_key(|n| n.applied_index())
            .map(|n| n.metadata())
        else {
            return;
        };
        if md.version <= self.known.version {
            return;
        }
        let md = md.clone();
        for (name, t) in &md.topics {
            let Some(i) = topic_index(name) else {
                continue;
            };
            let before = self.known.topics.get(name);
            if before == Some(t) {
                continue;
            }
            if let Some(l) = t.leader {
                if before.is_none_or(|b| b.epoch != t.epoch || b.leader != t.leader) {
                    out.push(Effect::Elected {
                        topic: i,
                        leader: l,
                    });
                }
            }
            out.push(Effect::Changed(i));
        }
        self.known = md;
    }
}

impl Control for RaftControl {
    fn tick_every(&self) -> Millis {
        TICK
    }

    fn tick(&mut self, now: Millis, _rng: &mut Rng, out: &mut Vec<Effect>) {
        self.now = now;
        self.round(out);
    }

    fn fault(&mut self, now: Millis, rng: &mut Rng) {
        // A controller node crashes now and then (its leadership moves, brokers' requests to
        // it are lost); it comes back from what it wrote.
        if !rng.chance(0.25) {
            return;
        }
        let i = rng.below(self.nodes.len() as u64) as usize;
        let back = now + rng.range(200, 3_000);
        let n = &mut self.nodes[i];
        if n.ctl.take().is_some() {
            n.back_at = back;
            self.crashes += 1;
        }
    }

    fn crashes(&self) -> u64 {
        self.crashes
    }

    fn snapshot_counts(&self) -> (u64, u64, u64) {
        self.snapshots
    }

    fn heal(&mut self, now: Millis) {
        for n in &mut self.nodes {
            n.back_at = n.back_at.min(now);
        }
    }

    fn heartbeat(
        &mut self,
        id: BrokerId,
        host: usize,
        incarnation: u64,
        damaged: &BTreeSet<usize>,
        _now: Millis,
        _rng: &mut Rng,
        out: &mut Vec<Effect>,
    ) -> bool {
        let Some(l) = self.leader() else {
            return false;
        };
        let Some(ctl) = self.nodes[l].ctl.as_mut() else {
            return false;
        };
        let reply = ctl.handle(BrokerRequest::Heartbeat {
            broker: id,
            incarnation,
            addresses: address(host),
            known: None,
            damaged: damaged.iter().map(|t| topic_name(*t)).collect(),
        });
        self.drive(l, out);
        matches!(reply, BrokerReply::Heartbeat { .. })
            && self
                .known
                .brokers
                .get(&id)
                .is_some_and(|b| b.incarnation == incarnation && !b.fenced)
    }

    fn alter_isr(&mut self, p: Proposal, _now: Millis, out: &mut Vec<Effect>) {
        let Some(l) = self.leader() else {
            return;
        };
        let name = topic_name(p.topic);
        let Some(ctl) = self.nodes[l].ctl.as_mut() else {
            return;
        };
        let reply = ctl.handle(BrokerRequest::AlterIsr {
            broker: p.from,
            topic: name.clone(),
            epoch: p.base.0,
            isr_version: p.base.1,
            isr: p.isr,
            incarnations: p.incarnations,
            proposal: p.proposal,
        });
        match reply {
            BrokerReply::Proposed => {
                self.pending.insert((name, p.base.0, p.proposal), p.from);
                self.drive(l, out);
            }
            // Not the topic's leader (as the controller knows it): answered with the state.
            BrokerReply::Refused { .. } if p.topic < self.topics => out.push(Effect::Answered {
                to: p.from,
                topic: p.topic,
                proposal: p.proposal,
            }),
            _ => {}
        }
    }

    fn state(&self, topic: usize) -> TopicState {
        match self.known.topics.get(&topic_name(topic)) {
            Some(t) => {
                let mut replicas = t.replicas.clone();
                replicas.sort();
                TopicState {
                    epoch: t.epoch,
                    leader: t.leader,
                    isr: t.isr.clone(),
                    isr_version: t.isr_version,
                    replicas,
                }
            }
            None => TopicState {
                epoch: Epoch(0),
                leader: None,
                isr: Vec::new(),
                isr_version: 0,
                replicas: Vec::new(),
            },
        }
    }

    fn elr(&self, topic: usize) -> Vec<BrokerId> {
        self.known
            .topics
            .get(&topic_name(topic))
            .map(|t| t.elr.clone())
            .unwrap_or_default()
    }

    fn incarnation(&self, id: BrokerId) -> Option<u64> {
        if self.known.retired.contains(&id) {
            return None;
        }
        self.known.brokers.get(&id).map(|b| b.incarnation)
    }

    fn registered(&self) -> Vec<(BrokerId, u64)> {
        self.known
            .brokers
            .iter()
            .filter(|(id, _)| !self.known.retired.contains(id))
            .map(|(id, b)| (*id, b.incarnation))
            .collect()
    }
}

//! The simulated network: who talks to whom ([`Node`]), what travels ([`NetMsg`]), the events
//! of the run ([`Event`]), how a broker is cut off ([`Cut`]), and the weather every message goes
//! through (drop, duplicate, delay and so reorder, corrupt a record, replay). Messages to or
//! from a cut broker are lost at sending and again at delivery. Every replica message travels
//! in its wire form (`crate::wire`'s codec), and a heartbeat or plain ack may be replayed a few
//! heartbeat intervals later, as the per-peer link replays its references.

use std::collections::BTreeSet;

use super::rng::Rng;
use super::world::World;
use crate::ids::{BrokerId, Epoch};
use crate::replica::{Millis, Msg, PublishId, TopicState};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Node {
    Host(usize),
    Ctl,
    Client(usize),
}

#[derive(Debug, Clone)]
pub(super) enum NetMsg {
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
pub(super) enum Event {
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
pub(super) enum Cut {
    /// From everyone.
    All,
    /// From the controller only.
    Ctl,
    /// From the other brokers only.
    Peers,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Weather {
    pub(super) drop: f64,
    pub(super) dup: f64,
    pub(super) corrupt: f64,
    pub(super) max_delay: Millis,
    pub(super) long_delay: f64,
    /// Chance that a heartbeat or plain ack is replayed afterwards, as the link does.
    pub(super) replay: f64,
}

/// The spacing of a link's replays (its heartbeat interval).
const REPLAY_EVERY: Millis = 100;

impl Weather {
    pub(super) fn calm() -> Weather {
        Weather {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            max_delay: 5,
            long_delay: 0.0,
            replay: 0.0,
        }
    }

    pub(super) fn random(rng: &mut Rng) -> Weather {
        Weather {
            drop: rng.below(11) as f64 / 100.0,
            dup: rng.below(6) as f64 / 100.0,
            corrupt: rng.below(3) as f64 / 100.0,
            max_delay: rng.range(2, 80),
            long_delay: rng.below(4) as f64 / 100.0,
            replay: rng.below(21) as f64 / 100.0,
        }
    }
}
impl World {
    pub(super) fn trace_event(&self, ev: &Event) {
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

    pub(super) fn cut_between(&self, a: Node, b: Node) -> bool {
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

    pub(super) fn send(&mut self, from: Node, to: Node, mut msg: NetMsg) {
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
        let replayable = matches!(
            &msg,
            NetMsg::Replica {
                msg: Msg::Append { batch, .. },
                ..
            } if batch.records.is_empty()
        ) || matches!(
            &msg,
            NetMsg::Replica {
                msg: Msg::Ack { resend: false, .. },
                ..
            }
        );
        let replays = if replayable && self.rng.chance(self.weather.replay) {
            // The link replays a reference for at most `forget_after` ticks after its replica
            // last refreshed it.
            self.rng.range(1, 6)
        } else {
            0
        };
        for copy in 0..copies + replays {
            let delay = if self.rng.chance(self.weather.long_delay) {
                self.rng.range(200, 1_500)
            } else {
                self.rng.range(1, self.weather.max_delay)
            };
            let replayed_after = copy.saturating_sub(copies - 1) * REPLAY_EVERY;
            let at = self.now + delay + replayed_after;
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

    pub(super) fn notify(&mut self, topic: usize) {
        let state = self.ctl.state(topic);
        let targets: Vec<(usize, BrokerId, u64)> = self
            .ctl
            .registered()
            .into_iter()
            .filter_map(|(id, incarnation)| Some((self.host_of(id)?, id, incarnation)))
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
}

//! The simulated network: every message gets a delivery time (delay, hence reordering), may be
//! dropped or duplicated, and never crosses a partition (checked when sent and when delivered).
//! Delivery order is (time, send order): deterministic.

use std::collections::BTreeMap;

use raft::eraftpb::Message;

use super::rng::Rng;
use crate::controller::metadata::mutation::{self, Mutation};
use crate::controller::{BrokerReply, BrokerRequest};

/// An endpoint: a controller node, or one incarnation of a broker (a restarted broker has new
/// connections: answers meant for the old process never reach it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Addr {
    Node(u64),
    Broker(u64, u64),
}

impl Addr {
    /// The host: partitions cut hosts, whatever the incarnation.
    fn host(self) -> (u8, u64) {
        match self {
            Addr::Node(n) => (0, n),
            Addr::Broker(b, _) => (1, b),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Payload {
    Raft(Message),
    Request(BrokerRequest),
    Reply(BrokerReply),
}

#[derive(Debug, Clone)]
pub(crate) struct Envelope {
    pub(crate) from: Addr,
    pub(crate) to: Addr,
    pub(crate) payload: Payload,
}

/// Fault rates and the messages in flight.
#[derive(Debug, Default)]
pub(crate) struct Net {
    queue: BTreeMap<(u64, u64), Envelope>,
    seq: u64,
    pub(crate) drop_pm: u64,
    pub(crate) dup_pm: u64,
    pub(crate) max_delay: u64,
    pub(crate) long_delay_pm: u64,
    /// Each host's side (hosts not listed: side 0); None: no partition.
    pub(crate) sides: Option<BTreeMap<(u8, u64), u8>>,
    pub(crate) sent: u64,
    pub(crate) dropped: u64,
}

impl Net {
    pub(crate) fn new(drop_pm: u64, dup_pm: u64, max_delay: u64, long_delay_pm: u64) -> Self {
        Self {
            drop_pm,
            dup_pm,
            max_delay,
            long_delay_pm,
            ..Self::default()
        }
    }

    fn cut(&self, a: Addr, b: Addr) -> bool {
        self.sides.as_ref().is_some_and(|s| {
            s.get(&a.host()).copied().unwrap_or(0) != s.get(&b.host()).copied().unwrap_or(0)
        })
    }

    pub(crate) fn send(&mut self, rng: &mut Rng, now: u64, mut env: Envelope) {
        self.sent += 1;
        if mutation::active(Mutation::CorruptEntries) && rng.chance(50_000) {
            if let Payload::Raft(m) = &mut env.payload {
                if let Some(e) = m.entries.iter_mut().find(|e| !e.data.is_empty()) {
                    let mut data = e.data.to_vec();
                    let i = rng.below(data.len() as u64) as usize;
                    data[i] ^= 0x01;
                    e.data = data.into();
                }
            }
        }
        if self.cut(env.from, env.to) || rng.chance(self.drop_pm) {
            self.dropped += 1;
            return;
        }
        let copies = if rng.chance(self.dup_pm) { 2 } else { 1 };
        for _ in 0..copies {
            let mut delay = 1 + rng.below(self.max_delay);
            if rng.chance(self.long_delay_pm) {
                delay += rng.range(10, 60);
            }
            self.seq += 1;
            self.queue.insert((now + delay, self.seq), env.clone());
        }
    }

    /// The messages due by `now`, in delivery order, minus those a partition now cuts.
    pub(crate) fn due(&mut self, now: u64) -> Vec<Envelope> {
        let later = self.queue.split_off(&(now + 1, 0));
        let due = std::mem::replace(&mut self.queue, later);
        due.into_values()
            .filter(|e| {
                let cut = self.cut(e.from, e.to);
                if cut {
                    self.dropped += 1;
                }
                !cut
            })
            .collect()
    }
}

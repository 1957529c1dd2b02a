//! Scenarios of the data path driven by hand (the simulation drives it at random).

use std::collections::VecDeque;

use super::*;

const A: BrokerId = BrokerId(1);
const B: BrokerId = BrokerId(2);
const C: BrokerId = BrokerId(3);

struct Node {
    replica: Replica,
    log: MemLog,
}

/// Three replicas and a lossless, ordered network; the tests step time by hand.
struct Cluster {
    nodes: Vec<Node>,
    now: Millis,
    acked: Vec<PublishId>,
    failed: Vec<(PublishId, PublishError)>,
    proposals: Vec<Vec<BrokerId>>,
}

fn ix(b: BrokerId) -> usize {
    (b.0 - 1) as usize
}

impl Cluster {
    fn new(logs: [MemLog; 3]) -> Cluster {
        let cfg = ReplicaConfig::default();
        let nodes = logs
            .into_iter()
            .enumerate()
            .map(|(i, log)| Node {
                replica: Replica::new(BrokerId(i as u64 + 1), 1, cfg.clone(), false),
                log,
            })
            .collect();
        Cluster {
            nodes,
            now: 0,
            acked: Vec::new(),
            failed: Vec::new(),
            proposals: Vec::new(),
        }
    }

    fn state(epoch: u64, leader: BrokerId, isr: &[BrokerId]) -> TopicState {
        TopicState {
            epoch: Epoch(epoch),
            leader: Some(leader),
            isr: isr.to_vec(),
            isr_version: 1,
            replicas: vec![A, B, C],
        }
    }

    /// Delivers `outs` of `from` and everything they cause, in order.
    fn pump(&mut self, from: BrokerId, outs: Vec<Output>) {
        let mut queue: VecDeque<(BrokerId, Output)> = outs.into_iter().map(|o| (from, o)).collect();
        while let Some((src, o)) = queue.pop_front() {
            match o {
                Output::Send { to, msg } => {
                    let mut next = Vec::new();
                    let n = &mut self.nodes[ix(to)];
                    n.replica
                        .on_message(&mut n.log, src, msg, self.now, &mut next);
                    queue.extend(next.into_iter().map(|o| (to, o)));
                }
                Output::Acked(id) => self.acked.push(id),
                Output::Failed(id, e) => self.failed.push((id, e)),
                Output::AlterIsr { isr, .. } => self.proposals.push(isr),
                Output::Sync => {}
            }
        }
    }

    fn apply(&mut self, state: &TopicState) {
        for b in [A, B, C] {
            let mut outs = Vec::new();
            let n = &mut self.nodes[ix(b)];
            n.replica
                .on_state(&mut n.log, state.clone(), self.now, &mut outs);
            self.pump(b, outs);
        }
    }

    fn publish(&mut self, leader: BrokerId, id: PublishId) {
        let n = &mut self.nodes[ix(leader)];
        let epoch = n.replica.leading();
        assert!(epoch.is_some(), "{leader:?} does not lead");
        let end = n
            .log
            .append_new(epoch.unwrap_or_default(), vec![id.to_le_bytes().to_vec()]);
        let mut outs = Vec::new();
        let res = n
            .replica
            .published(&mut n.log, id, end.unwrap_or(0), self.now, &mut outs);
        assert!(res.is_ok());
        self.pump(leader, outs);
    }

    fn tick(&mut self, by: Millis) {
        self.now += by;
        for b in [A, B, C] {
            let mut outs = Vec::new();
            let n = &mut self.nodes[ix(b)];
            n.replica.tick(&mut n.log, self.now, &mut outs);
            self.pump(b, outs);
        }
    }
}

fn log_of(epochs: &[(u64, usize)], tag: u8) -> MemLog {
    let mut log = MemLog::new();
    for &(e, n) in epochs {
        let payloads = (0..n).map(|i| vec![tag, e as u8, i as u8]).collect();
        assert!(log.append_new(Epoch(e), payloads).is_ok());
    }
    log
}

#[test]
fn an_acknowledgement_waits_for_every_in_sync_member() {
    let mut c = Cluster::new([MemLog::new(), MemLog::new(), MemLog::new()]);
    c.apply(&Cluster::state(1, A, &[A, B, C]));
    c.publish(A, 7);
    assert_eq!(c.acked, vec![7]);
    for b in [B, C] {
        assert_eq!(
            c.nodes[ix(b)].log.range_hash(0, 1),
            c.nodes[ix(A)].log.range_hash(0, 1)
        );
    }
}

#[test]
fn a_publish_the_in_sync_set_cannot_take_fails_at_its_deadline() {
    let mut c = Cluster::new([MemLog::new(), MemLog::new(), MemLog::new()]);
    // Below min_insync (2): stored, never acknowledged, failed in time.
    c.apply(&Cluster::state(1, A, &[A]));
    c.publish(A, 9);
    assert!(c.acked.is_empty());
    c.tick(ReplicaConfig::default().publish_timeout);
    assert_eq!(c.failed, vec![(9, PublishError::Timeout)]);
    // The caught-up followers are proposed back, and only proposed.
    assert!(c.proposals.contains(&vec![A, B, C]));
    assert_eq!(c.nodes[ix(A)].replica.leader_isr(), Some(&[A][..]));
}

#[test]
fn a_follower_truncates_to_where_its_history_leaves_the_leaders() {
    // The follower wrote epochs 1 and 3 as an old leader; the new leader holds epochs 1, 2, 4,
    // with a shorter epoch 1. The follower must end up holding exactly the leader's log, having
    // cut its epoch-1 records past seq 5 although it never saw epoch 2.
    let leader = log_of(&[(1, 5), (2, 3), (4, 4)], 0xa);
    let mut follower = log_of(&[(1, 5)], 0xa);
    let extra: Vec<Vec<u8>> = (0..5).map(|i| vec![0xf, 1, i]).collect();
    assert!(follower.append_new(Epoch(1), extra).is_ok());
    assert!(follower
        .append_new(Epoch(3), vec![vec![0xf, 3, 0]; 2])
        .is_ok());
    let mut c = Cluster::new([leader, follower, MemLog::new()]);
    c.apply(&Cluster::state(5, A, &[A, B, C]));
    c.tick(10);
    let (a, b) = (&c.nodes[ix(A)].log, &c.nodes[ix(B)].log);
    assert_eq!(b.end(), a.end());
    assert_eq!(b.range_hash(0, b.end()), a.range_hash(0, a.end()));
    assert_eq!(b.epochs(), a.epochs());
}

#[test]
fn a_damaged_record_is_refetched_never_stored() {
    let source = log_of(&[(1, 3)], 1);
    let mut batch = source.read(0, 10).unwrap_or(Batch {
        epoch: Epoch(1),
        records: Vec::new(),
    });
    if let Some(r) = batch.records.get_mut(1) {
        r.bytes[0] ^= 1;
    }
    let mut log = MemLog::new();
    let mut follower = Replica::new(C, 1, ReplicaConfig::default(), false);
    let mut outs = Vec::new();
    follower.on_state(&mut log, Cluster::state(1, A, &[A, C]), 0, &mut outs);
    outs.clear();
    let corrupt = Msg::Append {
        epoch: Epoch(1),
        hw: 0,
        base: 0,
        batch,
    };
    follower.on_message(&mut log, A, corrupt, 0, &mut outs);
    assert_eq!(log.end(), 0);
    assert!(outs.iter().any(|o| matches!(
        o,
        Output::Send {
            msg: Msg::Ack {
                resend: true,
                end: 0,
                ..
            },
            ..
        }
    )));
}

#[test]
fn a_deposed_leader_fails_its_pending_publishes() {
    let mut c = Cluster::new([MemLog::new(), MemLog::new(), MemLog::new()]);
    c.apply(&Cluster::state(1, A, &[A, B, C]));
    // B and C stop answering: the next publish stays pending.
    for b in [B, C] {
        let n = &mut c.nodes[ix(b)];
        let mut outs = Vec::new();
        let gone = TopicState {
            replicas: vec![A],
            isr_version: 2,
            ..Cluster::state(1, A, &[A])
        };
        n.replica.on_state(&mut n.log, gone, 0, &mut outs);
    }
    c.publish(A, 3);
    assert!(c.acked.is_empty());
    let n = &mut c.nodes[ix(A)];
    let mut outs = Vec::new();
    n.replica
        .on_state(&mut n.log, Cluster::state(2, B, &[B, C]), 0, &mut outs);
    assert!(outs.contains(&Output::Failed(3, PublishError::NotLeader)));
    assert_eq!(n.replica.following(), Some(B));
}

//! A replicated dead-letter topic's origin records between its replicas
//! (`Forward::DeadLetters`), so that `GET /dead_letters` and `POST /topic/redrive` work on
//! whichever replica leads after a failover.
//!
//! - The leader records a dead letter's origin when it appends the message
//!   (`shard::replicate`; a follower forwards the origins with the bodies). Every
//!   `SEND_EVERY` it sends its followers the records after the last seq it sent; on taking
//!   the lead it sends them all, the first batch as `Replace`. Every `RESEND_EVERY` it sends a
//!   digest (count and crc of the records' seqs and IDs).
//! - A follower takes records from its leader only: it appends those after its last record,
//!   replaces everything on `Replace`, and asks for everything again (`Wanted`) when its
//!   digest differs from the leader's (it restarted, missed a batch, or held records the
//!   leader forgot).
//! - A redrive forgets the records it published back on the replica that ran it, which
//!   tells the others (`Forgotten`): a follower tells its leader, a leader its followers.
//!
//! Invariants: every replica keeps its records in seq order and at most
//! `DEAD_LETTER_RECORDS` of them; once connected, a follower holds its leader's records
//! within a `RESEND_EVERY` of the last change; nothing here runs for a topic that is not
//! replicated or has no records.

use super::Shard;
use crate::storage::meta::DeadLetterMeta;
use crate::topic::{DeadOrigin, Topic};
use replication::ids::BrokerId;
use replication::wire::{self, DeadLetter, DeadLetterOp, Forward, MAX_DEAD_LETTERS};
use std::cell::RefCell;
use std::rc::Rc;
use tracing::{debug, info};

/// A dead letter's origin as it travels.
pub(super) fn to_wire(o: &DeadOrigin) -> wire::DeadOrigin {
    wire::DeadOrigin {
        topic: o.topic.clone(),
        channel: o.channel.clone(),
        id: *o.id.as_bytes(),
        attempts: o.attempts,
        timestamp: o.timestamp,
    }
}

/// A dead letter's origin as it arrived.
pub(super) fn from_wire(o: wire::DeadOrigin) -> DeadOrigin {
    DeadOrigin {
        topic: o.topic,
        channel: o.channel,
        id: protocol::MessageId(o.id),
        attempts: o.attempts,
        timestamp: o.timestamp,
    }
}

/// An ID kept as text, as it travels (`None` for one that is not 16 bytes).
fn wire_id(id: &str) -> Option<wire::Id> {
    id.as_bytes().try_into().ok()
}

fn id_text(id: &wire::Id) -> String {
    protocol::MessageId(*id).to_string()
}

/// A record as it travels (`None` when an ID is not 16 bytes or a name not replicable).
fn record_to_wire(r: &DeadLetterMeta) -> Option<DeadLetter> {
    let origin = wire::DeadOrigin {
        topic: r.origin_topic.clone(),
        channel: r.origin_channel.clone(),
        id: wire_id(&r.origin_id)?,
        attempts: r.attempts,
        timestamp: r.timestamp,
    };
    let id = wire_id(&r.id)?;
    let replicable =
        wire::codec::valid_topic(&origin.topic) && wire::codec::valid_channel(&origin.channel);
    replicable.then(|| DeadLetter {
        id,
        seq: r.seq,
        origin,
        dead_lettered_at: r.dead_lettered_at,
        body_size: r.body_size,
        preview: r.preview.clone(),
    })
}

fn record_from_wire(d: DeadLetter) -> DeadLetterMeta {
    DeadLetterMeta {
        id: id_text(&d.id),
        seq: d.seq,
        origin_topic: d.origin.topic,
        origin_channel: d.origin.channel,
        origin_id: id_text(&d.origin.id),
        attempts: d.origin.attempts,
        timestamp: d.origin.timestamp,
        dead_lettered_at: d.dead_lettered_at,
        body_size: d.body_size,
        preview: d.preview,
    }
}

/// The digest of `t`'s records.
fn digest_of(t: &Topic) -> (u32, u32) {
    wire::digest(t.dead_letter_records().map(|r| (r.seq, r.id.as_bytes())))
}

/// `t`'s records from seq `from` on (all with `None`), as operations of at most
/// [`MAX_DEAD_LETTERS`]; the first one replaces when `from` is `None`.
fn record_ops(t: &Topic, from: Option<u64>) -> Vec<DeadLetterOp> {
    let records: Vec<DeadLetter> = t
        .dead_letter_records()
        .filter(|r| from.is_none_or(|f| r.seq >= f))
        .filter_map(record_to_wire)
        .collect();
    let mut ops: Vec<DeadLetterOp> = records
        .chunks(MAX_DEAD_LETTERS)
        .map(|c| DeadLetterOp::Records(c.to_vec()))
        .collect();
    if from.is_none() {
        match ops.first_mut() {
            Some(first) => {
                if let DeadLetterOp::Records(rs) = first {
                    *first = DeadLetterOp::Replace(std::mem::take(rs));
                }
            }
            None => ops.push(DeadLetterOp::Replace(Vec::new())),
        }
    }
    ops
}

impl Shard {
    /// The leader's side, from `send_channel_positions`: the records from seq `next` on
    /// (`None`: not sent since this replica took the lead, so everything, replacing), and the
    /// digest when `digest` is set. Moves `next` past what it sent.
    pub(super) fn send_dead_letter_records(
        &self,
        t: &Topic,
        followers: &[BrokerId],
        next: &mut Option<u64>,
        digest: bool,
    ) {
        let Some(peers) = self.repl.peers() else {
            return;
        };
        let end = t.dead_letter_records().last().map_or(0, |r| r.seq + 1);
        let mut ops = match *next {
            // Holding none on taking the lead, it replaces nothing: the digest settles it.
            None if end > 0 => record_ops(t, None),
            Some(n) if end > n => record_ops(t, Some(n)),
            _ => Vec::new(),
        };
        *next = Some(next.map_or(end, |n| n.max(end)));
        if digest {
            let (count, crc) = digest_of(t);
            ops.push(DeadLetterOp::Digest { count, crc });
        }
        for op in ops {
            for &to in followers {
                // Without a connection the digest brings it back within a second.
                let _ = peers.send_forward(
                    to,
                    Forward::DeadLetters {
                        topic: t.name.to_string(),
                        op: op.clone(),
                    },
                );
            }
        }
    }

    /// A dead-letter operation from `from` about `topic`'s records.
    pub(super) fn apply_dead_letter_op(&self, from: BrokerId, topic: &str, op: DeadLetterOp) {
        let Some(t) = self.repl.topics.borrow().get(topic).cloned() else {
            return;
        };
        let (leader, followers) = self.replica_roles(&t.borrow());
        let from_leader = leader == Some(from);
        let from_follower = followers.as_ref().is_some_and(|f| f.contains(&from));
        match op {
            DeadLetterOp::Records(rs) if from_leader => {
                let mut tb = t.borrow_mut();
                for r in rs {
                    tb.append_dead_letter_record(record_from_wire(r));
                }
            }
            DeadLetterOp::Replace(rs) if from_leader => {
                let n = rs.len();
                let mut tb = t.borrow_mut();
                tb.clear_dead_letter_records();
                for r in rs {
                    tb.append_dead_letter_record(record_from_wire(r));
                }
                debug!(
                    topic,
                    records = n,
                    leader = from.0,
                    "dead-letter records replaced by the leader's"
                );
            }
            DeadLetterOp::Forgotten(ids) if from_leader || from_follower => {
                let ids: Vec<String> = ids.iter().map(id_text).collect();
                let gone = t.borrow_mut().forget_dead_letters(&ids);
                info!(
                    topic,
                    redriven = gone,
                    from = from.0,
                    "dead letters redriven on a replica"
                );
                if from_follower {
                    self.share_forgotten(&t, &ids);
                }
            }
            DeadLetterOp::Digest { count, crc } if from_leader => {
                if digest_of(&t.borrow()) != (count, crc) {
                    debug!(
                        topic,
                        leader = from.0,
                        "dead-letter records differ from the leader's; asking for them"
                    );
                    self.send_dead_letter_op(from, topic, DeadLetterOp::Wanted);
                }
                return;
            }
            DeadLetterOp::Wanted if from_follower => {
                for op in record_ops(&t.borrow(), None) {
                    self.send_dead_letter_op(from, topic, op);
                }
                return;
            }
            op => {
                debug!(topic, from = from.0, ?op, "replication: a dead-letter operation this replica does not take from that broker; ignored");
                return;
            }
        }
        self.note_meta_change(&t);
    }

    /// After a redrive on this replica forgot `ids`: tells the others (the leader its
    /// followers, a follower its leader).
    pub(super) fn share_forgotten(&self, t: &Rc<RefCell<Topic>>, ids: &[String]) {
        let (leader, followers) = self.replica_roles(&t.borrow());
        let to: Vec<BrokerId> = match (leader, followers) {
            (Some(l), _) => vec![l],
            (None, Some(f)) => f,
            (None, None) => return,
        };
        let name = t.borrow().name.to_string();
        let ids: Vec<wire::Id> = ids.iter().filter_map(|i| wire_id(i)).collect();
        for chunk in ids.chunks(MAX_DEAD_LETTERS) {
            for &b in &to {
                self.send_dead_letter_op(b, &name, DeadLetterOp::Forgotten(chunk.to_vec()));
            }
        }
    }

    /// Who this replica of `t` answers to: its leader while it follows, its followers while
    /// it leads (neither when it is not a replica in either role).
    fn replica_roles(&self, t: &Topic) -> (Option<BrokerId>, Option<Vec<BrokerId>>) {
        let (Some(r), Some(status)) = (t.replica.as_ref(), &self.config.cluster) else {
            return (None, None);
        };
        if let Some(l) = r.replica.following() {
            return (Some(l), None);
        }
        let me = BrokerId(status.identity.broker_id);
        let followers = match (r.replica.leading(), &r.controller) {
            (Some(_), Some(state)) => Some(
                state
                    .replicas
                    .iter()
                    .copied()
                    .filter(|&b| b != me)
                    .collect(),
            ),
            _ => None,
        };
        (None, followers)
    }

    fn send_dead_letter_op(&self, to: BrokerId, topic: &str, op: DeadLetterOp) {
        let Some(peers) = self.repl.peers() else {
            return;
        };
        let f = Forward::DeadLetters {
            topic: topic.to_owned(),
            op,
        };
        if let Err(e) = peers.send_forward(to, f) {
            debug!(
                topic,
                to = to.0,
                "replication: dead-letter records not sent: {e}"
            );
        }
    }
}

//! What one broker keeps for one peer broker on one replication connection: the handshake,
//! the outgoing queue of every topic's replica messages and of the forwards beside them
//! (forwarded publishes, their answers, channel operations; bounded in bytes together,
//! coalesced into frames, in the order they were queued), and the heartbeat compression that
//! makes an idle topic cost nothing on the wire.
//!
//! Heartbeat compression (docs/design/replication.md, "The connection between two brokers"):
//! a replica's heartbeat (an `Append` without records) and a follower's plain ack (an `Ack`
//! without `resend`) go on the wire only when they differ from the last one sent for that topic
//! on this connection, which both ends keep as the topic's *reference*. Once per interval each
//! side sends one `Tick` frame; its receiver hands every reference it holds to the topic's
//! replica again (a *replay*), except one received explicitly since the previous tick. A
//! replica whose heartbeat or ack equals its reference is thus answered as if the message had
//! travelled. A reference the replica has not refreshed for `forget_after` ticks is dropped on
//! both ends: the `Tick` names it.
//!
//! Invariants:
//! - the connection is ordered and each end changes a reference only at the same point of the
//!   stream (the sender when it queues the message or the tick, the receiver when it decodes
//!   it), so both ends hold the same references at the same point; a new connection starts with
//!   none;
//! - a replay repeats a message the peer's replica really sent on this connection, and an ack
//!   is replayed only while the peer's replica keeps sending the same one (for at most
//!   `forget_after` ticks more): a replay is a duplicate delivered later, which the replicas
//!   already tolerate;
//! - the queue never holds more than `queue_limit` bytes of messages: a message over it is
//!   refused with [`SendError::Full`] and not queued (the replicas' resend timers recover it);
//!   ticks are merged while one is still queued, and a tick's forgotten topics fit in one frame;
//! - forwards and messages leave in the order they were queued (consecutive ones of a sort
//!   share a frame) and arrive in that order; a forward is sent once, never compressed nor
//!   replayed: a connection that ends drops it, and its sender's caller times out;
//! - each end keeps at most `max_references` references of each kind, so a peer cannot make
//!   them grow without bound (a topic past it travels in full);
//! - nothing but a `Hello` naming this cluster and the expected peer is accepted first.

use std::collections::{BTreeMap, VecDeque};

use super::codec::{
    check_forward, encode, encoded_len, forward_len, valid_topic, Decoder, Forward, Frame, Hello,
    TopicMsg, WireError, FRAME_OVERHEAD, MAX_ANSWER_TEXT,
};
use crate::ids::BrokerId;
use crate::replica::Msg;

/// A tick frame's bytes besides its forgotten topics: version, kind, seq and two counts.
const TICK_FIXED: usize = 2 + 8 + 4 + 4;

/// A connection's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConfig {
    /// The largest frame sent or accepted (bytes after the length prefix).
    pub max_frame: usize,
    /// The most bytes of messages queued and not yet handed to the socket.
    pub queue_limit: usize,
    /// Ticks without a refresh after which a topic's reference is dropped.
    pub forget_after: u32,
    /// The most references of each kind (heartbeats, acks) kept; a topic past it travels in
    /// full every time.
    pub max_references: usize,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            max_frame: 8 << 20,
            queue_limit: 32 << 20,
            forget_after: 5,
            max_references: 100_000,
        }
    }
}

/// Why a message was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The queue holds `queue_limit` bytes: the message is dropped, as a lost one would be.
    #[error("the queue to the peer is full")]
    Full,
    /// The message alone does not fit in a frame.
    #[error("a message of {0} bytes does not fit in a frame")]
    TooLarge(usize),
    /// Not a topic name that can be replicated.
    #[error("invalid topic name")]
    Topic,
    /// A forward that cannot be encoded (its channel name, or its channel position).
    #[error("invalid forward: {0}")]
    Forward(WireError),
}

/// Why the connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The bytes received are not a valid frame stream.
    #[error("bad frame: {0}")]
    Wire(#[from] WireError),
    /// The first frame was not a handshake.
    #[error("the peer sent a frame before its handshake")]
    NoHello,
    /// A second handshake on the same connection.
    #[error("the peer sent a second handshake")]
    HelloTwice,
    /// The peer belongs to another cluster.
    #[error("the peer belongs to cluster {theirs:?}, not {ours:?}")]
    Cluster {
        /// This broker's cluster.
        ours: String,
        /// The peer's.
        theirs: String,
    },
    /// The peer is not the broker this connection is for.
    #[error("the peer is broker {got:?}, expected {expected:?}")]
    Peer {
        /// The broker this connection is for.
        expected: BrokerId,
        /// The one that answered.
        got: BrokerId,
    },
}

/// What a connection carries to this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// A message for one of this broker's replicas.
    Replica(Delivery),
    /// A forwarded publish, an answer to one, or a channel operation.
    Forward(Forward),
}

/// A message for one of this broker's replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The topic whose replica takes it.
    pub topic: String,
    /// The message, from the peer broker's replica of the same topic.
    pub msg: Msg,
    /// A tick's replay of a reference, not a message read off the wire.
    pub replayed: bool,
}

#[derive(Debug)]
struct OutRef {
    msg: Msg,
    refreshed: bool,
    stale: u32,
}

#[derive(Debug)]
struct InRef {
    msg: Msg,
    /// Received explicitly since the previous tick: the next tick does not replay it.
    fresh: bool,
}

#[derive(Debug)]
enum Item {
    Msg(TopicMsg, usize),
    Forward(Forward, usize),
    Tick {
        seq: u64,
        forget_heartbeats: Vec<String>,
        forget_acks: Vec<String>,
    },
}

/// Which reference a message is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Heartbeat,
    Ack,
    ResendAck,
    Other,
}

fn kind(msg: &Msg) -> Kind {
    match msg {
        Msg::Append { batch, .. } if batch.records.is_empty() => Kind::Heartbeat,
        Msg::Ack { resend: false, .. } => Kind::Ack,
        Msg::Ack { resend: true, .. } => Kind::ResendAck,
        _ => Kind::Other,
    }
}

/// Sets `topic`'s reference unless that would make more than `max`: both ends apply the same
/// rule at the same point of the stream, so they keep the same references.
fn insert_bounded<R>(refs: &mut BTreeMap<String, R>, topic: &str, r: R, max: usize) {
    if let Some(old) = refs.get_mut(topic) {
        *old = r;
    } else if refs.len() < max {
        refs.insert(topic.to_owned(), r);
    }
}

/// One broker's end of the connection to one peer broker.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    me: Hello,
    peer: BrokerId,
    peer_hello: Option<Hello>,
    decoder: Decoder,
    queue: VecDeque<Item>,
    queued: usize,
    out_heartbeats: BTreeMap<String, OutRef>,
    out_acks: BTreeMap<String, OutRef>,
    in_heartbeats: BTreeMap<String, InRef>,
    in_acks: BTreeMap<String, InRef>,
    tick_seq: u64,
    hello_pending: bool,
}

impl Link {
    /// A new connection from `me` to `peer`; its handshake is the first thing sent.
    pub fn new(me: Hello, peer: BrokerId, cfg: LinkConfig) -> Link {
        Link {
            decoder: Decoder::new(cfg.max_frame),
            cfg,
            me,
            peer,
            peer_hello: None,
            queue: VecDeque::new(),
            queued: 0,
            out_heartbeats: BTreeMap::new(),
            out_acks: BTreeMap::new(),
            in_heartbeats: BTreeMap::new(),
            in_acks: BTreeMap::new(),
            tick_seq: 0,
            hello_pending: true,
        }
    }

    /// The peer's handshake, once received.
    pub fn peer_hello(&self) -> Option<&Hello> {
        self.peer_hello.as_ref()
    }

    /// The references this end sent and the ones it received, for tests comparing two ends.
    #[cfg(test)]
    pub(crate) fn references(&self) -> [Vec<(String, Msg)>; 4] {
        let out = |m: &BTreeMap<String, OutRef>| {
            m.iter().map(|(t, r)| (t.clone(), r.msg.clone())).collect()
        };
        let inr = |m: &BTreeMap<String, InRef>| {
            m.iter().map(|(t, r)| (t.clone(), r.msg.clone())).collect()
        };
        [
            out(&self.out_heartbeats),
            out(&self.out_acks),
            inr(&self.in_heartbeats),
            inr(&self.in_acks),
        ]
    }

    /// Bytes of messages queued and not yet handed out by [`Link::poll_transmit`].
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    /// Queues a message of `topic`'s replica for the peer's replica of the same topic; a
    /// heartbeat or plain ack equal to the topic's reference only refreshes it.
    pub fn send(&mut self, topic: &str, msg: Msg) -> Result<(), SendError> {
        if !valid_topic(topic) {
            return Err(SendError::Topic);
        }
        let k = kind(&msg);
        let refs = match k {
            Kind::Heartbeat => Some(&mut self.out_heartbeats),
            Kind::Ack => Some(&mut self.out_acks),
            Kind::ResendAck | Kind::Other => None,
        };
        if let Some(r) = refs.and_then(|refs| refs.get_mut(topic)) {
            if r.msg == msg {
                r.refreshed = true;
                return Ok(());
            }
        }
        let len = encoded_len(topic, &msg);
        if len + FRAME_OVERHEAD + 4 > self.cfg.max_frame {
            return Err(SendError::TooLarge(len));
        }
        if self.queued + len > self.cfg.queue_limit {
            return Err(SendError::Full);
        }
        let reference = OutRef {
            msg: msg.clone(),
            refreshed: true,
            stale: 0,
        };
        let max = self.cfg.max_references;
        match k {
            Kind::Heartbeat => {
                insert_bounded(&mut self.out_heartbeats, topic, reference, max);
            }
            Kind::Ack => {
                insert_bounded(&mut self.out_acks, topic, reference, max);
            }
            Kind::ResendAck => {
                self.out_acks.remove(topic);
            }
            Kind::Other => {}
        }
        self.queued += len;
        self.queue.push_back(Item::Msg(
            TopicMsg {
                topic: topic.to_owned(),
                msg,
            },
            len,
        ));
        Ok(())
    }

    /// Queues a forwarded publish, an answer or a channel operation, after everything queued
    /// before it. An answer's error text over [`MAX_ANSWER_TEXT`] bytes is cut to it.
    pub fn send_forward(&mut self, mut f: Forward) -> Result<(), SendError> {
        if let Forward::Answer {
            result: Err(text), ..
        } = &mut f
        {
            if text.len() > MAX_ANSWER_TEXT {
                let mut end = MAX_ANSWER_TEXT;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
        }
        check_forward(&f).map_err(|e| match e {
            WireError::TopicName => SendError::Topic,
            e => SendError::Forward(e),
        })?;
        let len = forward_len(&f);
        if len + FRAME_OVERHEAD + 4 > self.cfg.max_frame {
            return Err(SendError::TooLarge(len));
        }
        if self.queued + len > self.cfg.queue_limit {
            return Err(SendError::Full);
        }
        self.queued += len;
        self.queue.push_back(Item::Forward(f, len));
        Ok(())
    }

    /// The pair's heartbeat interval elapsed: queues one `Tick` (merged into one still
    /// queued), dropping the references not refreshed for `forget_after` ticks.
    pub fn tick(&mut self) {
        let forget_after = self.cfg.forget_after.max(1);
        let (mut hb, mut acks, mut used) = match self.queue.back_mut() {
            Some(Item::Tick {
                forget_heartbeats,
                forget_acks,
                ..
            }) => {
                let hb = std::mem::take(forget_heartbeats);
                let acks = std::mem::take(forget_acks);
                let used = hb.iter().chain(&acks).map(|t| 1 + t.len()).sum();
                self.queue.pop_back();
                (hb, acks, used)
            }
            _ => (Vec::new(), Vec::new(), 0),
        };
        // A tick is one frame: references past its room are forgotten at a later tick.
        let room = self.cfg.max_frame.saturating_sub(TICK_FIXED);
        for (refs, forget) in [
            (&mut self.out_heartbeats, &mut hb),
            (&mut self.out_acks, &mut acks),
        ] {
            refs.retain(|topic, r| {
                if r.refreshed {
                    r.stale = 0;
                } else {
                    r.stale = r.stale.saturating_add(1);
                }
                r.refreshed = false;
                if r.stale < forget_after || used + 1 + topic.len() > room {
                    return true;
                }
                used += 1 + topic.len();
                forget.push(topic.clone());
                false
            });
        }
        self.tick_seq += 1;
        self.queue.push_back(Item::Tick {
            seq: self.tick_seq,
            forget_heartbeats: hb,
            forget_acks: acks,
        });
    }

    /// Appends frames of what is queued to `out` (the handshake first), messages coalesced
    /// into frames of at most `max_frame` bytes, until `out` has grown by at least
    /// `max_bytes` or the queue is empty. Returns the bytes appended.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>, max_bytes: usize) -> usize {
        let start = out.len();
        if self.hello_pending {
            if let Err(e) = encode(&Frame::Hello(self.me.clone()), self.cfg.max_frame, out) {
                tracing::error!(error = %e, "replication handshake not encodable");
            }
            self.hello_pending = false;
        }
        while out.len() - start < max_bytes {
            let Some(item) = self.queue.pop_front() else {
                break;
            };
            let frame = match item {
                Item::Tick {
                    seq,
                    forget_heartbeats,
                    forget_acks,
                } => Frame::Tick {
                    seq,
                    forget_heartbeats,
                    forget_acks,
                },
                Item::Msg(first, len) => {
                    self.queued -= len;
                    let mut size = FRAME_OVERHEAD + 4 + len;
                    let mut msgs = vec![first];
                    while let Some(Item::Msg(_, len)) = self.queue.front() {
                        if size + len > self.cfg.max_frame {
                            break;
                        }
                        size += len;
                        self.queued -= len;
                        if let Some(Item::Msg(m, _)) = self.queue.pop_front() {
                            msgs.push(m);
                        }
                    }
                    Frame::Messages(msgs)
                }
                Item::Forward(first, len) => {
                    self.queued -= len;
                    let mut size = FRAME_OVERHEAD + 4 + len;
                    let mut fs = vec![first];
                    while let Some(Item::Forward(_, len)) = self.queue.front() {
                        if size + len > self.cfg.max_frame {
                            break;
                        }
                        size += len;
                        self.queued -= len;
                        if let Some(Item::Forward(f, _)) = self.queue.pop_front() {
                            fs.push(f);
                        }
                    }
                    Frame::Forwards(fs)
                }
            };
            if let Err(e) = encode(&frame, self.cfg.max_frame, out) {
                // `send` checked topic and size: a frame failing here is a bug, not input.
                tracing::error!(error = %e, "replication frame not encodable; dropped");
            }
        }
        out.len() - start
    }

    /// Takes bytes read from the connection and appends what they carry for this broker (its
    /// replicas' messages and the forwards), in the order sent, to `out`. An error means the
    /// connection must be closed.
    pub fn receive(&mut self, bytes: &[u8], out: &mut Vec<Inbound>) -> Result<(), LinkError> {
        let mut frames = Vec::new();
        let decoded = self.decoder.feed(bytes, &mut frames);
        for frame in frames {
            self.on_frame(frame, out)?;
        }
        decoded.map_err(LinkError::from)
    }

    fn on_frame(&mut self, frame: Frame, out: &mut Vec<Inbound>) -> Result<(), LinkError> {
        let Some(_) = &self.peer_hello else {
            let Frame::Hello(h) = frame else {
                return Err(LinkError::NoHello);
            };
            if h.cluster_id != self.me.cluster_id {
                return Err(LinkError::Cluster {
                    ours: self.me.cluster_id.clone(),
                    theirs: h.cluster_id,
                });
            }
            if h.broker != self.peer {
                return Err(LinkError::Peer {
                    expected: self.peer,
                    got: h.broker,
                });
            }
            self.peer_hello = Some(h);
            return Ok(());
        };
        match frame {
            Frame::Hello(_) => return Err(LinkError::HelloTwice),
            Frame::Messages(msgs) => {
                for TopicMsg { topic, msg } in msgs {
                    let reference = || InRef {
                        msg: msg.clone(),
                        fresh: true,
                    };
                    let max = self.cfg.max_references;
                    match kind(&msg) {
                        Kind::Heartbeat => {
                            insert_bounded(&mut self.in_heartbeats, &topic, reference(), max);
                        }
                        Kind::Ack => {
                            insert_bounded(&mut self.in_acks, &topic, reference(), max);
                        }
                        Kind::ResendAck => {
                            self.in_acks.remove(&topic);
                        }
                        Kind::Other => {}
                    }
                    out.push(Inbound::Replica(Delivery {
                        topic,
                        msg,
                        replayed: false,
                    }));
                }
            }
            Frame::Tick {
                forget_heartbeats,
                forget_acks,
                ..
            } => {
                for t in &forget_heartbeats {
                    self.in_heartbeats.remove(t);
                }
                for t in &forget_acks {
                    self.in_acks.remove(t);
                }
                for refs in [&mut self.in_heartbeats, &mut self.in_acks] {
                    for (topic, r) in refs.iter_mut() {
                        if std::mem::replace(&mut r.fresh, false) {
                            continue;
                        }
                        out.push(Inbound::Replica(Delivery {
                            topic: topic.clone(),
                            msg: r.msg.clone(),
                            replayed: true,
                        }));
                    }
                }
            }
            Frame::Forwards(fs) => out.extend(fs.into_iter().map(Inbound::Forward)),
        }
        Ok(())
    }
}

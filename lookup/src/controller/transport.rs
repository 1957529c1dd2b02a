//! Raft messages between lookups, over TCP: each frame is a big-endian `u32` length and the
//! raft-rs protobuf message. One outgoing connection per peer, fed by a bounded queue; incoming
//! connections are accepted on the controller address and only ever carry messages in.
//!
//! Invariants:
//! - a frame's length is checked against [`MAX_FRAME`] before anything is allocated for it; an
//!   oversized, undecodable or misaddressed frame (not to this node, not from a voter, or a
//!   message only a node gives itself) closes that connection and nothing else;
//! - the queue to a peer holds at most [`QUEUE`] messages: a message that finds it full is
//!   dropped, as a network may drop it (Raft sends again);
//! - a lost connection is dialled again after a delay that doubles up to [`MAX_BACKOFF`];
//! - a snapshot message (`MsgSnapshot`) is accounted for: written to its peer's connection
//!   (delivered) or dropped on the way (lost), the word is kept, one per peer, until the node
//!   takes it ([`Outbox::snapshot_reports`]), since raft-rs holds that follower's log
//!   replication until it hears either.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::mem;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use tracing::{debug, info, warn};

use super::Hosted;

/// Largest frame taken or sent (raft-rs caps a message's entries at 1 MiB, and a lone entry
/// larger than that goes alone: a metadata entry is a few hundred bytes).
pub const MAX_FRAME: usize = 8 * 1024 * 1024;
/// Messages queued to one peer at most.
pub const QUEUE: usize = 4096;
/// The longest wait before dialling a peer again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const READ_CHUNK: usize = 64 * 1024;

/// The transport's word on snapshots sent, per peer: delivered (true) or lost (false); the
/// latest word stands.
type SnapshotReports = Rc<RefCell<BTreeMap<u64, bool>>>;

fn is_snapshot(msg: &Message) -> bool {
    msg.get_msg_type() == MessageType::MsgSnapshot
}

/// The messages waiting for one peer's connection, and the sender task's waker.
struct Queue {
    peer: u64,
    items: RefCell<VecDeque<Message>>,
    waker: RefCell<Option<Waker>>,
    reports: SnapshotReports,
}

impl Queue {
    fn new(peer: u64, reports: SnapshotReports) -> Queue {
        Queue {
            peer,
            items: RefCell::default(),
            waker: RefCell::default(),
            reports,
        }
    }

    fn report(&self, delivered: bool) {
        self.reports.borrow_mut().insert(self.peer, delivered);
    }

    /// Adds `msg` unless the queue is full (then it is dropped).
    fn push(&self, msg: Message) -> bool {
        let mut items = self.items.borrow_mut();
        if items.len() >= QUEUE {
            if is_snapshot(&msg) {
                self.report(false);
            }
            return false;
        }
        items.push_back(msg);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
        true
    }

    fn try_pop(&self) -> Option<Message> {
        self.items.borrow_mut().pop_front()
    }

    /// The next message, waiting for one if none is queued.
    async fn pop(&self) -> Message {
        std::future::poll_fn(|cx| match self.try_pop() {
            Some(m) => Poll::Ready(m),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    fn clear(&self) {
        let dropped = mem::take(&mut *self.items.borrow_mut());
        if dropped.iter().any(is_snapshot) {
            self.report(false);
        }
    }
}

/// The sending side: a queue per peer.
pub struct Outbox {
    queues: BTreeMap<u64, Rc<Queue>>,
    reports: SnapshotReports,
}

impl Outbox {
    /// Starts a sender task per peer (every voter but `me`).
    pub fn start(me: u64, peers: &BTreeMap<u64, String>) -> Outbox {
        let mut queues = BTreeMap::new();
        let reports = SnapshotReports::default();
        for (&id, address) in peers {
            if id == me {
                continue;
            }
            let queue = Rc::new(Queue::new(id, reports.clone()));
            glommio::spawn_local(send_loop(id, address.clone(), queue.clone())).detach();
            queues.insert(id, queue);
        }
        Outbox { queues, reports }
    }

    /// What became of the snapshots sent since the last call: (peer, delivered).
    pub fn snapshot_reports(&self) -> Vec<(u64, bool)> {
        mem::take(&mut *self.reports.borrow_mut())
            .into_iter()
            .collect()
    }

    /// Queues `msg` for its peer; dropped if the queue is full or the peer unknown.
    pub fn send(&self, msg: Message) {
        match self.queues.get(&msg.to) {
            Some(q) => {
                if !q.push(msg) {
                    debug!("controller: the queue to a peer is full; a Raft message is dropped");
                }
            }
            None => debug!(to = msg.to, "controller: a Raft message to no known peer"),
        }
    }
}

/// Keeps a connection to peer `id` and writes what its queue receives.
async fn send_loop(id: u64, address: String, queue: Rc<Queue>) {
    let mut backoff = nsq_common::backoff::Backoff::new(MIN_BACKOFF, MAX_BACKOFF);
    let mut out = Vec::new();
    loop {
        let stream = match TcpStream::connect_timeout(address.as_str(), CONNECT_TIMEOUT).await {
            Ok(s) => s,
            Err(e) => {
                debug!("controller: cannot reach peer {id} at {address}: {e}");
                // Drain what queued meanwhile (stale by the time a connection is up); Raft
                // sends again what still matters.
                queue.clear();
                glommio::timer::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        info!("controller: connected to peer {id} at {address}");
        backoff.reset();
        let mut stream = stream;
        loop {
            let msg = queue.pop().await;
            out.clear();
            // Whether a snapshot is in this write; one that cannot be framed is lost at once.
            let mut snapshot_in = false;
            let mut take = |m: &Message, out: &mut Vec<u8>| {
                let framed = encode(m, out);
                if is_snapshot(m) {
                    if framed {
                        snapshot_in = true;
                    } else {
                        queue.report(false);
                    }
                }
            };
            take(&msg, &mut out);
            // Coalesce what else is queued into the same write, within one frame's size.
            while out.len() < MAX_FRAME {
                match queue.try_pop() {
                    Some(m) => take(&m, &mut out),
                    None => break,
                }
            }
            if let Err(e) = stream.write_all(&out).await {
                info!("controller: connection to peer {id} lost: {e}");
                if snapshot_in {
                    queue.report(false);
                }
                break;
            }
            if snapshot_in {
                queue.report(true);
            }
        }
        glommio::timer::sleep(backoff.next_delay()).await;
    }
}

/// Appends one frame (true); a message too large to frame is dropped (Raft sends its entries
/// again, in smaller messages; a snapshot that large cannot be sent at all).
fn encode(msg: &Message, out: &mut Vec<u8>) -> bool {
    match msg.write_to_bytes() {
        Ok(bytes) if bytes.len() <= MAX_FRAME => {
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(&bytes);
            true
        }
        Ok(bytes) => {
            warn!(
                "controller: a Raft message of {} bytes is over the frame limit; dropped",
                bytes.len()
            );
            false
        }
        Err(e) => {
            warn!("controller: a Raft message does not encode: {e}");
            false
        }
    }
}

/// Why an incoming connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {0} bytes is over the limit of {MAX_FRAME}")]
    TooBig(usize),
    #[error("a frame is not a Raft message: {0}")]
    Undecodable(protobuf::ProtobufError),
    #[error("a Raft message from {from} to {to} does not belong on this connection")]
    Misaddressed { from: u64, to: u64 },
}

/// Cuts one message off `buf`: `Ok(None)` until a whole frame is there. `me` is this node, and
/// `voters` every node.
pub fn decode(buf: &mut BytesMut, me: u64, voters: &[u64]) -> Result<Option<Message>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooBig(len));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let msg = Message::parse_from_bytes(&buf[4..4 + len]).map_err(FrameError::Undecodable)?;
    buf.advance(4 + len);
    let local = matches!(
        msg.get_msg_type(),
        MessageType::MsgHup
            | MessageType::MsgBeat
            | MessageType::MsgUnreachable
            | MessageType::MsgSnapStatus
            | MessageType::MsgCheckQuorum
    );
    if msg.to != me || msg.from == me || !voters.contains(&msg.from) || local {
        return Err(FrameError::Misaddressed {
            from: msg.from,
            to: msg.to,
        });
    }
    Ok(Some(msg))
}

/// Accepts peers' connections until the listener fails for good.
pub async fn serve(listener: TcpListener, hosted: Rc<RefCell<Hosted>>, me: u64, voters: Vec<u64>) {
    let voters = Rc::new(voters);
    loop {
        match listener.accept().await {
            Ok(stream) => {
                glommio::spawn_local(receive(stream, hosted.clone(), me, voters.clone())).detach();
            }
            Err(e) => {
                warn!("controller: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn receive(
    mut stream: TcpStream,
    hosted: Rc<RefCell<Hosted>>,
    me: u64,
    voters: Rc<Vec<u64>>,
) {
    let remote = stream
        .peer_addr()
        .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
    debug!("controller: peer connection from {remote}");
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut scratch = vec![0u8; READ_CHUNK];
    loop {
        loop {
            match decode(&mut buf, me, &voters) {
                Ok(Some(msg)) => hosted.borrow_mut().step(msg),
                Ok(None) => break,
                Err(e) => {
                    warn!("controller: closing the peer connection from {remote}: {e}");
                    return;
                }
            }
        }
        match stream.read(&mut scratch).await {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&scratch[..n]),
            Err(e) => {
                debug!("controller: peer connection from {remote} ended: {e}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(from: u64, to: u64) -> Message {
        Message {
            msg_type: MessageType::MsgHeartbeat,
            from,
            to,
            term: 3,
            ..Message::default()
        }
    }

    #[test]
    fn frames_decode_in_any_chunking() {
        let mut wire = Vec::new();
        encode(&msg(2, 1), &mut wire);
        encode(&msg(3, 1), &mut wire);
        for step in 1..wire.len() {
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for part in wire.chunks(step) {
                buf.extend_from_slice(part);
                while let Some(m) = decode(&mut buf, 1, &[1, 2, 3]).unwrap() {
                    got.push(m.from);
                }
            }
            assert_eq!(got, [2, 3], "step {step}");
        }
    }

    #[test]
    fn bad_frames_are_refused_before_allocating() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            decode(&mut buf, 1, &[1, 2]),
            Err(FrameError::TooBig(_))
        ));
        let mut buf = BytesMut::from(&[0, 0, 0, 3, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            decode(&mut buf, 1, &[1, 2]),
            Err(FrameError::Undecodable(_))
        ));
        for (from, to) in [(2, 3), (1, 1), (9, 1), (0, 1)] {
            let mut wire = Vec::new();
            encode(&msg(from, to), &mut wire);
            let mut buf = BytesMut::from(&wire[..]);
            assert!(
                matches!(
                    decode(&mut buf, 1, &[1, 2, 3]),
                    Err(FrameError::Misaddressed { .. })
                ),
                "{from} -> {to}"
            );
        }
        let mut wire = Vec::new();
        let mut hup = msg(2, 1);
        hup.msg_type = MessageType::MsgHup;
        encode(&hup, &mut wire);
        let mut buf = BytesMut::from(&wire[..]);
        assert!(decode(&mut buf, 1, &[1, 2]).is_err());
    }

    #[test]
    fn a_snapshot_dropped_on_the_way_is_reported_lost() {
        let reports = SnapshotReports::default();
        let q = Queue::new(2, reports.clone());
        let mut snap = msg(1, 2);
        snap.msg_type = MessageType::MsgSnapshot;
        // Cleared with no snapshot queued: nothing to report.
        assert!(q.push(msg(1, 2)));
        q.clear();
        assert!(reports.borrow().is_empty());
        // Cleared while a snapshot waited (the peer unreachable): lost.
        assert!(q.push(snap.clone()));
        q.clear();
        assert_eq!(reports.borrow_mut().remove(&2), Some(false));
        // A full queue drops it: lost.
        for _ in 0..QUEUE {
            assert!(q.push(msg(1, 2)));
        }
        assert!(!q.push(snap));
        assert_eq!(reports.borrow_mut().remove(&2), Some(false));
        // Other messages dropped by a full queue report nothing.
        assert!(!q.push(msg(1, 2)));
        assert!(reports.borrow().is_empty());
    }
}

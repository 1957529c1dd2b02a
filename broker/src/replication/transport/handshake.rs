//! Who dials whom, and which handshakes the accepting side takes (docs/design/replication.md,
//! "The connection between two brokers").
//!
//! - The broker with the lower id dials; the higher one accepts. Each side thus has at most
//!   one connection per peer: the dialer opens a new one only after its previous one ended, and
//!   the acceptor keeps only the newest it accepted from a peer.
//! - The accepting side reads the dialer's `Hello` before anything else ([`read_hello`]),
//!   holding at most one handshake frame, and takes it ([`admit`]) only from the same cluster,
//!   from a broker of its peer set with a lower id, and in an incarnation no older than the one
//!   it is connected to. A newer (or the same) incarnation replaces the connection it holds:
//!   the dialer has given up on that one, or restarted.
//!
//! The dialing side checks the acceptor's `Hello` in the link itself (`wire::Link` expects the
//! peer it was made for).

use replication::ids::BrokerId;
use replication::wire::{Decoder, Frame, Hello, WireError, MAX_CLUSTER_ID};

/// The longest handshake frame body: version, kind, the cluster id and its length, broker id,
/// incarnation.
pub const HELLO_MAX: usize = 2 + 1 + MAX_CLUSTER_ID + 8 + 8;

/// Whether `me` dials `peer` (the lower id dials).
pub fn dials(me: BrokerId, peer: BrokerId) -> bool {
    me < peer
}

/// Why an accepted connection was closed at its handshake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("bad handshake: {0}")]
    Wire(WireError),
    #[error("the first frame is not a handshake")]
    NoHello,
    #[error("the peer belongs to cluster {theirs:?}, not {ours:?}")]
    Cluster { ours: String, theirs: String },
    #[error("broker {0} is not a peer of this broker")]
    Unknown(u64),
    #[error("broker {peer} has a higher id than this broker {me}: this broker dials it")]
    WrongSide { me: u64, peer: u64 },
    #[error("broker {peer} incarnation {got} is older than its connected incarnation {current}")]
    Stale { peer: u64, got: u64, current: u64 },
}

/// The handshake at the start of `buf`, with its length in bytes, once it has fully arrived.
/// Refuses as soon as the length prefix names a frame longer than any handshake.
pub fn read_hello(buf: &[u8]) -> Result<Option<(Hello, usize)>, Refusal> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > HELLO_MAX {
        return Err(Refusal::Wire(WireError::FrameTooLarge {
            len: len as u64,
            max: HELLO_MAX,
        }));
    }
    let Some(frame) = buf.get(..4 + len) else {
        return Ok(None);
    };
    let mut frames = Vec::with_capacity(1);
    Decoder::new(HELLO_MAX)
        .feed(frame, &mut frames)
        .map_err(Refusal::Wire)?;
    match frames.pop() {
        Some(Frame::Hello(h)) => Ok(Some((h, 4 + len))),
        _ => Err(Refusal::NoHello),
    }
}

/// Whether the acceptor `me` takes the dialer's handshake `hello`: `known` says whether the
/// broker is in its peer set, `current` is the incarnation of the connection it holds from it.
pub fn admit(me: &Hello, hello: &Hello, known: bool, current: Option<u64>) -> Result<(), Refusal> {
    if hello.cluster_id != me.cluster_id {
        return Err(Refusal::Cluster {
            ours: me.cluster_id.clone(),
            theirs: hello.cluster_id.clone(),
        });
    }
    if !known || hello.broker == me.broker {
        return Err(Refusal::Unknown(hello.broker.0));
    }
    if !dials(hello.broker, me.broker) {
        return Err(Refusal::WrongSide {
            me: me.broker.0,
            peer: hello.broker.0,
        });
    }
    if let Some(current) = current.filter(|c| hello.incarnation < *c) {
        return Err(Refusal::Stale {
            peer: hello.broker.0,
            got: hello.incarnation,
            current,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use replication::wire::encode;

    fn hello(cluster: &str, broker: u64, incarnation: u64) -> Hello {
        Hello {
            cluster_id: cluster.to_owned(),
            broker: BrokerId(broker),
            incarnation,
        }
    }

    #[test]
    fn a_handshake_is_read_once_whole_and_a_long_length_is_refused_at_once() {
        let h = hello(&"c".repeat(MAX_CLUSTER_ID), 3, 9);
        let mut buf = Vec::new();
        assert!(encode(&Frame::Hello(h.clone()), HELLO_MAX, &mut buf).is_ok());
        let len = buf.len();
        assert_eq!(
            len,
            4 + HELLO_MAX,
            "the longest handshake is exactly HELLO_MAX"
        );
        buf.extend_from_slice(b"next frame");
        for cut in 0..len {
            assert_eq!(read_hello(&buf[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(read_hello(&buf), Ok(Some((h, len))));
        let long = ((HELLO_MAX + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_hello(&long),
            Err(Refusal::Wire(WireError::FrameTooLarge { .. }))
        ));
        let mut tick = Vec::new();
        let t = Frame::Tick {
            seq: 1,
            forget_heartbeats: vec![],
            forget_acks: vec![],
        };
        assert!(encode(&t, HELLO_MAX, &mut tick).is_ok());
        assert_eq!(read_hello(&tick), Err(Refusal::NoHello));
    }

    #[test]
    fn the_acceptor_takes_only_lower_known_peers_of_its_cluster_not_older() {
        let me = hello("c", 5, 1);
        assert_eq!(admit(&me, &hello("c", 2, 1), true, None), Ok(()));
        assert!(matches!(
            admit(&me, &hello("d", 2, 1), true, None),
            Err(Refusal::Cluster { .. })
        ));
        assert_eq!(
            admit(&me, &hello("c", 2, 1), false, None),
            Err(Refusal::Unknown(2))
        );
        assert_eq!(
            admit(&me, &hello("c", 5, 1), true, None),
            Err(Refusal::Unknown(5))
        );
        assert_eq!(
            admit(&me, &hello("c", 7, 1), true, None),
            Err(Refusal::WrongSide { me: 5, peer: 7 })
        );
        assert_eq!(admit(&me, &hello("c", 2, 4), true, Some(4)), Ok(()));
        assert_eq!(admit(&me, &hello("c", 2, 5), true, Some(4)), Ok(()));
        assert_eq!(
            admit(&me, &hello("c", 2, 3), true, Some(4)),
            Err(Refusal::Stale {
                peer: 2,
                got: 3,
                current: 4
            })
        );
        assert!(dials(BrokerId(1), BrokerId(2)) && !dials(BrokerId(2), BrokerId(1)));
    }
}

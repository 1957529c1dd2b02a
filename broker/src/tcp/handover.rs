//! Moving a connection to the shard that owns its topic (`--move-to-owner`).
//!
//! A connection on another shard than its topic's owner pays a hop to the owner and back for
//! its publishes, and one for every batch of deliveries and of FINs. So a TCP connection moves
//! to the owner of its topic once, at the command that ties it to a topic: its SUB or its
//! first PUB, MPUB or DPUB (why, and what it costs: docs/design/connections.md, "Moving a
//! connection to its topic's owner"). The reader stops before executing that command, the
//! connection's tasks end here (the writer writes what is buffered and leaves the socket
//! open), and the owner adopts a duplicate of the socket with what the reader knew
//! ([`Handover`], mail) and runs the command first.
//!
//! Invariants: a connection moves at most once, and only before it has published or
//! subscribed, so a producer publishing to topics of several owners does not travel between
//! them. Only a connection whose state is all in [`Handover`] moves: not one running TLS or
//! compression (their state lives in this shard's layers), nor one of a broker with AUTH (the
//! authorization state stays here). Nothing of the connection is in flight when it moves: no
//! publish is outstanding, and the new shard starts only after this shard's writer has
//! written its last byte, so the client sees its answers in the order of its commands.

use super::session::Session;
use super::Conn;
use crate::mailbox::Handover;
use crate::shard::Shard;
use bytes::BytesMut;
use protocol::Command;

/// Whether `cmd`, decoded on `conn`, moves the connection to its topic's owner (see the module
/// doc); the owner when it does.
pub(super) fn destination(
    shard: &Shard,
    conn: &Conn,
    session: &Session,
    cmd: &Command,
) -> Option<usize> {
    let topic = match cmd {
        Command::Sub { topic, .. }
        | Command::Pub { topic, .. }
        | Command::Mpub { topic, .. }
        | Command::Dpub { topic, .. } => topic,
        _ => return None,
    };
    if !shard.config.move_to_owner
        || session.moved_in()
        || session.is_layered()
        || session.sub().is_some()
        || shard.config.auth.enabled()
        || shard.is_stopping()
        || conn.pipeline.outstanding() > 0
        || conn.pipeline.has_published()
    {
        return None;
    }
    let owner = shard.config.owner_of(topic);
    (owner != shard.id).then_some(owner)
}

/// What a moving connection takes along (its socket travels beside it, duplicated).
pub(super) fn handover(conn: &Conn, session: &Session, first: Command, rest: BytesMut) -> Handover {
    let out = conn.out.holding();
    Handover {
        first,
        rest,
        info: session.info().clone(),
        heartbeats: session.heartbeats(),
        heartbeat: conn.heartbeat(),
        msg_timeout: session.msg_timeout(),
        output_buffer_size: out.size,
        output_buffer_timeout: out.timeout,
    }
}

//! IDENTIFY: who the client is, and the negotiation of its heartbeat interval, message timeout,
//! sample rate and features against the broker's limits (`Config::identify_limits`).
//!
//! Invariants: a negotiated heartbeat interval takes effect at once for the heartbeat ticker,
//! the write deadline and the reader's read timeout (two intervals). The answer is the JSON of
//! the negotiated settings when the client asked for feature negotiation, else `OK`.

use super::reader::Session;
use super::Conn;
use crate::shard::Shard;
use crate::sys::conn_socket::ReadHalf;
use bytes::Bytes;
use protocol::identify::{IdentifyRequest, IdentifyResponse};
use protocol::ProtocolError;
use std::time::Duration;
use tracing::debug;

pub(super) fn identify(
    shard: &Shard,
    conn: &Conn,
    stream: &mut ReadHalf,
    session: &mut Session,
    body: &Bytes,
) -> Result<(), ProtocolError> {
    let req = IdentifyRequest::parse(body)?;
    let limits = shard.config.identify_limits();
    let n = req.negotiate(&limits)?;
    session.info.client_id = req.client_id.clone();
    session.info.hostname = req.hostname.clone();
    session.info.user_agent = req.user_agent.clone();
    session.info.sample_rate = n.sample_rate;
    session.msg_timeout = Duration::from_millis(n.msg_timeout_ms);
    *conn.info.borrow_mut() = session.info.clone();
    session.heartbeats = n.heartbeat_ms.is_some();
    let hb = n.heartbeat_ms.map(Duration::from_millis);
    conn.heartbeat.set(hb);
    conn.heartbeat_changed.notify();
    stream.set_read_timeout(hb.map(|d| d * 2));
    debug!(client_id = %req.client_id, user_agent = %req.user_agent, "identified");
    if req.feature_negotiation {
        let auth_required = shard.config.auth.enabled();
        let resp = IdentifyResponse::new(&n, &limits, shard.config.max_rdy_count, auth_required);
        conn.push_response(&resp.to_json());
    } else {
        conn.push_response(protocol::OK);
    }
    Ok(())
}

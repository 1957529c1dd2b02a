//! IDENTIFY: who the client is, and the negotiation of its heartbeat interval, message timeout,
//! output buffer, sample rate and features against the broker's limits (`Config::identify_limits`).
//!
//! Invariants: a negotiated heartbeat interval takes effect at once for the heartbeat ticker,
//! the write deadline and the reader's read timeout (two intervals); the negotiated output
//! buffer size and timeout, for the message frames delivered after it (`writer.rs`). The
//! answer is the JSON of the negotiated settings when the client asked for feature
//! negotiation, else `OK`. TLS, snappy and deflate go on right after the answer (nsqd's
//! order: TLS, then the compression, each followed by an `OK` through it); a connection is
//! upgraded once, and a client gets [`TLS_HANDSHAKE_TIMEOUT`] for its handshake.

use super::layers::Layers;
use super::output::OutputBuffer;
use super::session::Session;
use super::Conn;
use crate::shard::Shard;
use crate::sys::conn_socket::ReadHalf;
use bytes::{Bytes, BytesMut};
use protocol::compress::Compression;
use protocol::frame::write_frame;
use protocol::identify::{IdentifyRequest, IdentifyResponse, Negotiated};
use protocol::{ErrorCode, FrameType, ProtocolError};
use std::time::Duration;
use tracing::debug;

/// How long a client has for its TLS handshake (nsqd's).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

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
    session.identified(conn, &req, &n);
    let hb = n.heartbeat_ms.map(Duration::from_millis);
    conn.set_heartbeat(hb);
    stream.set_read_timeout(hb.map(|d| d * 2));
    conn.out.set_holding(OutputBuffer::new(
        n.output_buffer_size,
        n.output_buffer_timeout_ms,
    ));
    debug!(client_id = %req.client_id, user_agent = %req.user_agent, "identified");
    if req.feature_negotiation {
        let auth_required = shard.config.auth.enabled();
        let resp = IdentifyResponse::new(&n, &limits, shard.config.max_rdy_count, auth_required);
        conn.push_response(&resp.to_json());
    } else {
        conn.push_response(protocol::OK);
    }
    if n.tls_v1 || n.snappy || n.deflate {
        upgrade(shard, conn, stream, session, &n)?;
    }
    Ok(())
}

/// Puts on the layers `n` switched on, as nsqd does after the IDENTIFY answer: TLS, then
/// snappy or deflate, each followed by an `OK` sent through it. The answer (already in the
/// output buffer) goes out as it is, ahead of them.
fn upgrade(
    shard: &Shard,
    conn: &Conn,
    stream: &ReadHalf,
    session: &mut Session,
    n: &Negotiated,
) -> Result<(), ProtocolError> {
    let failed = |e: &dyn std::fmt::Display| {
        ProtocolError::fatal(ErrorCode::IdentifyFailed, format!("IDENTIFY failed {e}"))
    };
    if session.is_layered() {
        return Err(failed(&"connection already upgraded"));
    }
    let mut ok = BytesMut::new();
    write_frame(&mut ok, FrameType::Response, protocol::OK);
    let before = conn.out.take_all();
    let mut layers = Box::new(Layers::new(before));
    if n.tls_v1 {
        let config = shard
            .config
            .tls_server
            .as_ref()
            .map(|s| s.get())
            .ok_or_else(|| failed(&"no TLS configuration"))?;
        layers.start_tls(config).map_err(|e| failed(&e))?;
        layers.output(&ok).map_err(|e| failed(&e))?;
        stream.set_read_timeout(Some(TLS_HANDSHAKE_TIMEOUT));
        debug!("upgrading connection to TLS");
    }
    let compression = if n.snappy {
        Some(Compression::Snappy)
    } else if n.deflate {
        Some(Compression::Deflate {
            level: n.deflate_level as u32,
        })
    } else {
        None
    };
    if let Some(c) = compression {
        layers.start_compression(c);
        layers.output(&ok).map_err(|e| failed(&e))?;
        debug!(?c, "upgrading connection to compression");
    }
    conn.put_layers(layers);
    let deflate = !n.snappy && n.deflate;
    session.layers_on(conn, n.tls_v1, n.snappy, deflate);
    conn.out.wake_writer();
    Ok(())
}

//! AUTH on a connection, and the authorization gate in front of PUB, MPUB, DPUB and SUB, with
//! nsqd's checks, codes and texts.
//!
//! - AUTH ([`auth`]): `E_INVALID` "AUTH already set" once the connection holds authorizations;
//!   `E_AUTH_DISABLED` without auth servers; the servers are asked ([`crate::auth::query_any`])
//!   with the client's IP, its TLS state and certificate common name (the connection's
//!   [`super::identity`], set by the TLS layer) and the secret; no usable answer is
//!   `E_AUTH_FAILED` "AUTH failed" (the reason goes to the log only), an answer without
//!   authorizations `E_UNAUTHORIZED` "AUTH no authorizations found"; success answers
//!   `{"identity","identity_url","permission_count"}`. Every error here is fatal.
//! - The gate ([`check`]), with auth servers set: no authorizations yet is `E_AUTH_FIRST`
//!   "AUTH required before PUB"; an expired answer is asked again first (a failure is
//!   `E_AUTH_FAILED`); a topic/channel the answer does not allow is `E_UNAUTHORIZED`
//!   `AUTH failed for PUB on "t" ""`. All fatal.
//!
//! Invariants: a command passes the gate only on an unexpired answer that allows it. The HTTP
//! request runs while this connection's reader waits; the shard serves everything else
//! meanwhile. A gate error is written after the answers of the publishes before it. The
//! client's /stats entry (`authed`, `auth_identity`, `auth_identity_url`) follows the answer
//! held: a new answer is shown on the connection at once, and handed to the session
//! ([`SessionAuth::take_shown`]) for the client's info it keeps.

use super::Conn;
use crate::auth::{auth_response_json, query_any, AuthError, AuthRequest, AuthState};
use crate::channel::ClientAuth;
use crate::shard::Shard;
use bytes::Bytes;
use protocol::{Command, ErrorCode, ProtocolError};
use std::sync::Arc;
use std::time::Instant;
use tracing::warn;

/// A connection's AUTH: its secret and the answer it holds. One pointer until the client
/// sends AUTH (a connection's idle size matters; see ARCHITECTURE.md, "Connections").
#[derive(Debug, Default)]
pub(super) struct SessionAuth(Option<Box<Held>>);

#[derive(Debug, Default)]
struct Held {
    secret: Bytes,
    state: Option<AuthState>,
    /// The last topic a publish was allowed on under `state` (most producers publish to one
    /// topic: its regexes are then not run again for every publish).
    allowed_topic: Option<String>,
    /// A new answer as /stats shows it, not yet taken by the session.
    shown: Option<Arc<ClientAuth>>,
}

impl SessionAuth {
    fn state(&self) -> Option<&AuthState> {
        self.0.as_ref().and_then(|h| h.state.as_ref())
    }

    fn has_authorizations(&self) -> bool {
        self.state().is_some_and(AuthState::has_authorizations)
    }

    fn held(&mut self) -> &mut Held {
        self.0.get_or_insert_with(Box::default)
    }

    fn secret(&self) -> &[u8] {
        self.0.as_ref().map_or(&[][..], |h| &h.secret[..])
    }

    /// A new answer of the auth servers, as /stats shows it, once.
    pub(super) fn take_shown(&mut self) -> Option<Arc<ClientAuth>> {
        self.0.as_mut().and_then(|h| h.shown.take())
    }
}

/// The verb, topic and channel of a command the gate applies to ("" for a publish).
pub(super) fn gated(cmd: &Command) -> Option<(&'static str, &str, &str)> {
    match cmd {
        Command::Pub { topic, .. } => Some(("PUB", topic, "")),
        Command::Mpub { topic, .. } => Some(("MPUB", topic, "")),
        Command::Dpub { topic, .. } => Some(("DPUB", topic, "")),
        Command::Sub { topic, channel } => Some(("SUB", topic, channel)),
        _ => None,
    }
}

/// AUTH with `secret`, from the client at `remote` (its address).
pub(super) async fn auth(
    shard: &Shard,
    conn: &Conn,
    auth: &mut SessionAuth,
    remote: &str,
    secret: Bytes,
) -> Result<(), ProtocolError> {
    if auth.has_authorizations() {
        return Err(ProtocolError::fatal(ErrorCode::Invalid, "AUTH already set"));
    }
    if !shard.config.auth.enabled() {
        return Err(ProtocolError::fatal(
            ErrorCode::AuthDisabled,
            "AUTH disabled",
        ));
    }
    auth.held().secret = secret;
    let state = ask(shard, conn, auth, remote)
        .await
        .map_err(|e| auth_failed(conn, &e))?;
    hold(conn, auth, state);
    let Some(state) = auth.state().filter(|s| s.has_authorizations()) else {
        return Err(ProtocolError::fatal(
            ErrorCode::Unauthorized,
            "AUTH no authorizations found",
        ));
    };
    conn.push_response(&auth_response_json(state));
    Ok(())
}

/// The gate: whether `verb` on `topic`/`channel` may run (see the module's doc). Runs
/// without waiting unless the answer expired (then the servers are asked again) or the
/// command is refused (then the answers before it go out first).
pub(super) async fn check(
    shard: &Shard,
    conn: &Conn,
    auth: &mut SessionAuth,
    remote: &str,
    verb: &'static str,
    topic: &str,
    channel: &str,
) -> Result<(), ProtocolError> {
    let mut result = gate(auth, verb, topic, channel);
    if result.is_none() {
        let renewed = renew_then_gate(shard, conn, auth, remote, verb, topic, channel);
        result = Some(Box::pin(renewed).await);
    }
    let result = result.unwrap_or(Ok(()));
    if result.is_err() {
        // After the answers of the publishes before this command, as on nsqd's wire.
        conn.wait_outstanding(0).await;
    }
    result
}

/// Asks the servers again (the answer expired), then [`gate`]s with the new answer.
async fn renew_then_gate(
    shard: &Shard,
    conn: &Conn,
    auth: &mut SessionAuth,
    remote: &str,
    verb: &'static str,
    topic: &str,
    channel: &str,
) -> Result<(), ProtocolError> {
    let state = ask(shard, conn, auth, remote)
        .await
        .map_err(|e| auth_failed(conn, &e))?;
    hold(conn, auth, state);
    // A fresh answer has not expired: the gate decides now.
    gate(auth, verb, topic, channel).unwrap_or(Ok(()))
}

/// The gate on the answer held: `None` when it expired (ask again first).
fn gate(
    auth: &mut SessionAuth,
    verb: &'static str,
    topic: &str,
    channel: &str,
) -> Option<Result<(), ProtocolError>> {
    if !auth.has_authorizations() {
        return Some(Err(ProtocolError::fatal(
            ErrorCode::AuthFirst,
            format!("AUTH required before {verb}"),
        )));
    }
    let held = auth.held();
    let state = held.state.as_ref()?;
    if state.is_expired(Instant::now()) {
        return None;
    }
    let remembered = channel.is_empty() && held.allowed_topic.as_deref() == Some(topic);
    if !remembered && !state.is_allowed(topic, channel) {
        return Some(Err(ProtocolError::fatal(
            ErrorCode::Unauthorized,
            format!("AUTH failed for {verb} on {topic:?} {channel:?}"),
        )));
    }
    if channel.is_empty() && !remembered {
        held.allowed_topic = Some(topic.to_string());
    }
    Some(Ok(()))
}

/// Asks the auth servers about this connection's secret (`remote`: the client's address).
/// Ends early, as a failure, when the connection is told to stop or closes.
async fn ask(
    shard: &Shard,
    conn: &Conn,
    auth: &SessionAuth,
    remote: &str,
) -> Result<AuthState, AuthError> {
    let remote_ip = remote
        .parse::<std::net::SocketAddr>()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let common_name = conn.identity.common_name().clone();
    let req = AuthRequest {
        remote_ip: &remote_ip,
        tls: conn.identity.over_tls(),
        secret: auth.secret(),
        common_name: &common_name,
    };
    // Boxed: the request's state (stream, buffers) is allocated only while it runs, not
    // carried in every connection's reader.
    let query = Box::pin(query_any(&shard.config.auth, &req));
    futures_lite::future::or(query, async {
        while !conn.stop_requested() && !conn.is_closed() {
            conn.reader_woken().await;
        }
        Err(AuthError("the connection is stopping".into()))
    })
    .await
}

/// Holds `state` as the connection's answer, and shows it in /stats.
fn hold(conn: &Conn, auth: &mut SessionAuth, state: AuthState) {
    let shown = Arc::new(ClientAuth {
        authed: state.has_authorizations(),
        identity: state.identity.clone(),
        identity_url: state.identity_url.clone(),
    });
    conn.identity.show_auth(shown.clone());
    let held = auth.held();
    held.shown = Some(shown);
    held.state = Some(state);
    held.allowed_topic = None;
}

/// `E_AUTH_FAILED`, the reason logged (never told to the client, as nsqd).
fn auth_failed(conn: &Conn, e: &AuthError) -> ProtocolError {
    warn!(conn = conn.id, "AUTH failed: {e}");
    ProtocolError::fatal(ErrorCode::AuthFailed, "AUTH failed")
}

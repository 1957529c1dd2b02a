//! What a connection's reader knows of its connection: its phase, what IDENTIFY negotiated,
//! the client's info, its subscription, the FINs gathered from the current read, its AUTH,
//! and whether it moves to another shard. The session is the one owner of this state: the
//! command modules ([`super::identify`], [`super::auth`], [`super::handover`]) change it
//! through its methods.
//!
//! Invariants: every change to the client's info is shown on the connection
//! ([`super::identity`]) before the command that made it is answered. The FINs gathered are
//! sent before any other command runs ([`super::reader::flush_fins`]).

use super::auth::{self, SessionAuth};
use super::{Conn, Subscription};
use crate::channel::{ClientInfo, ConsumerKey, ConsumerSpec, TlsInfo};
use crate::mailbox::Handover;
use crate::shard::Shard;
use bytes::Bytes;
use protocol::command::{ConnPhase, Limits};
use protocol::identify::{IdentifyRequest, Negotiated};
use protocol::{Command, DecodeContext, MessageId, ProtocolError};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// Most FINs gathered into one mail.
const FIN_BATCH: usize = 512;

/// A connection moving to another shard: the owner, the socket's duplicate, what it takes.
pub(super) type Move = (usize, OwnedFd, Box<Handover>);

/// What the reader knows of its connection.
pub(super) struct Session {
    phase: ConnPhase,
    heartbeats: bool,
    msg_timeout: Duration,
    info: ClientInfo,
    /// The owner shard and the channel this connection consumes, after SUB.
    sub: Option<Subscription>,
    /// FINs decoded from the current read, sent together.
    fins: Vec<MessageId>,
    /// `--tls-required` and TLS not on yet: every command but IDENTIFY is refused.
    tls_required: bool,
    /// TLS or a compression is on: socket bytes go through the layers.
    layered: bool,
    /// IDENTIFY has just put layers on: what follows it in the read buffer is theirs.
    upgraded: bool,
    /// AUTH's secret and answer.
    auth: SessionAuth,
    /// The connection came from another shard: it moves no more.
    moved_in: bool,
    /// The connection is to move to another shard, with this.
    moving: Option<Move>,
}

impl Session {
    /// A connection's session before its first command (`moved_in`: after a move).
    pub(super) fn new(
        info: ClientInfo,
        heartbeats: bool,
        msg_timeout: Duration,
        tls_required: bool,
        moved_in: bool,
    ) -> Session {
        Session {
            phase: ConnPhase::Init,
            heartbeats,
            msg_timeout,
            info,
            sub: None,
            fins: Vec::new(),
            tls_required,
            layered: false,
            upgraded: false,
            auth: Default::default(),
            moved_in,
            moving: None,
        }
    }

    /// What the decoder needs to know of the connection.
    pub(super) fn decode_context(&self, limits: Limits) -> DecodeContext {
        DecodeContext {
            phase: self.phase,
            heartbeats_enabled: self.heartbeats,
            limits,
        }
    }

    pub(super) fn info(&self) -> &ClientInfo {
        &self.info
    }

    pub(super) fn heartbeats(&self) -> bool {
        self.heartbeats
    }

    pub(super) fn msg_timeout(&self) -> Duration {
        self.msg_timeout
    }

    /// `--tls-required` and TLS is not on yet.
    pub(super) fn tls_required(&self) -> bool {
        self.tls_required
    }

    /// TLS or a compression is on.
    pub(super) fn is_layered(&self) -> bool {
        self.layered
    }

    /// The connection came from another shard.
    pub(super) fn moved_in(&self) -> bool {
        self.moved_in
    }

    /// The channel consumed, after SUB.
    pub(super) fn sub(&self) -> Option<&Subscription> {
        self.sub.as_ref()
    }

    /// Gathers a FIN of the current read; true when a mail's worth has gathered.
    pub(super) fn push_fin(&mut self, id: MessageId) -> bool {
        self.fins.push(id);
        self.fins.len() >= FIN_BATCH
    }

    /// The FINs gathered, if any.
    pub(super) fn take_fins(&mut self) -> Option<Vec<MessageId>> {
        (!self.fins.is_empty()).then(|| std::mem::take(&mut self.fins))
    }

    /// CLS: the connection is closing.
    pub(super) fn closing(&mut self) {
        self.phase = ConnPhase::Closing;
    }

    /// What SUB tells the channel's owner of this consumer.
    pub(super) fn consumer_spec(&self, shard: &Shard, conn: &Conn) -> ConsumerSpec {
        ConsumerSpec {
            key: ConsumerKey {
                shard: shard.id,
                conn: conn.id,
            },
            msg_timeout: self.msg_timeout,
            info: Arc::new(self.info.clone()),
            output_window: shard.config.output_window(),
        }
    }

    /// SUB succeeded: the connection consumes `sub`.
    pub(super) fn subscribed(&mut self, conn: &Conn, sub: Subscription) {
        self.phase = ConnPhase::Subscribed;
        conn.consuming.subscribe(sub.clone());
        self.sub = Some(sub);
    }

    /// IDENTIFY `req` negotiated `n`: who the client is, its message timeout and heartbeats.
    pub(super) fn identified(&mut self, conn: &Conn, req: &IdentifyRequest, n: &Negotiated) {
        self.info.client_id = req.client_id.clone();
        self.info.hostname = req.hostname.clone();
        self.info.user_agent = req.user_agent.clone();
        self.info.sample_rate = n.sample_rate;
        self.msg_timeout = Duration::from_millis(n.msg_timeout_ms);
        conn.identity.show(&self.info);
        self.heartbeats = n.heartbeat_ms.is_some();
    }

    /// IDENTIFY put layers on: TLS (`tls`), and snappy or deflate.
    pub(super) fn layers_on(&mut self, conn: &Conn, tls: bool, snappy: bool, deflate: bool) {
        if tls {
            self.tls_required = false;
        }
        self.info.snappy |= snappy;
        self.info.deflate |= deflate;
        conn.identity.show(&self.info);
        self.layered = true;
        self.upgraded = true;
    }

    /// Whether IDENTIFY has just put layers on (asked once).
    pub(super) fn take_upgraded(&mut self) -> bool {
        std::mem::take(&mut self.upgraded)
    }

    /// The TLS handshake is done: `tls` as /stats shows it, the client certificate's
    /// `common_name` as AUTH tells it.
    pub(super) fn tls_done(&mut self, conn: &Conn, tls: Option<TlsInfo>, common_name: String) {
        self.info.tls = tls;
        conn.identity.tls_on(common_name);
        conn.identity.show(&self.info);
    }

    /// The authorization gate in front of `cmd` (see [`super::auth`]), with auth servers set.
    pub(super) async fn authorize(
        &mut self,
        shard: &Shard,
        conn: &Conn,
        cmd: &Command,
    ) -> Result<(), ProtocolError> {
        if !shard.config.auth.enabled() {
            return Ok(());
        }
        let Some((verb, topic, channel)) = auth::gated(cmd) else {
            return Ok(());
        };
        let remote = &self.info.remote_address;
        let result = auth::check(shard, conn, &mut self.auth, remote, verb, topic, channel).await;
        self.show_auth();
        result
    }

    /// AUTH with `secret` (see [`super::auth`]).
    pub(super) async fn auth(
        &mut self,
        shard: &Shard,
        conn: &Conn,
        secret: Bytes,
    ) -> Result<(), ProtocolError> {
        let remote = &self.info.remote_address;
        let result = auth::auth(shard, conn, &mut self.auth, remote, secret).await;
        self.show_auth();
        result
    }

    /// Takes a new answer of the auth servers into the client's info.
    fn show_auth(&mut self) {
        if let Some(shown) = self.auth.take_shown() {
            self.info.auth = Some(shown);
        }
    }

    /// The connection is to move, with `moving` (see [`super::handover`]).
    pub(super) fn move_to(&mut self, moving: Move) {
        self.moving = Some(moving);
    }

    /// The move decided, if any.
    pub(super) fn take_move(&mut self) -> Option<Move> {
        self.moving.take()
    }

    /// The channel consumed, when the connection ends.
    pub(super) fn into_sub(self) -> Option<Subscription> {
        self.sub
    }
}

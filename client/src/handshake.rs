//! The opening of protocol V2 on a new connection, in nsqd's order: the magic and IDENTIFY
//! (with `feature_negotiation` and the features asked for), the answer in the clear; then,
//! as the answer says, the TLS handshake and the `OK` read through TLS; then snappy or
//! deflate and the `OK` read through the compressed stream; then AUTH with the secret when
//! the answer says `auth_required`; then, for a consumer, SUB.
//!
//! [`handshake`] does it over an async stream; [`crate::blocking`] does the same steps on a
//! `TcpStream` with the decisions shared from here ([`Upgrades`], [`parse_auth_answer`]).
//!
//! Invariants: a connection that asked for TLS is never used without it
//! ([`Error::TlsRefused`]); the broker's answer may only turn on what was asked for; bytes
//! read past a frame that switches a layer on are handed to that layer (a compressed `OK`
//! often arrives in the same read as the answer before it), and bytes arriving before the
//! TLS handshake, where the broker must wait for ours, are an error.

use crate::conn::{answer_of, parse_identify_answer, read_more, MAX_FRAME_SIZE};
use crate::error::{Error, Result};
use crate::transport::Transport;
use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use protocol::compress::Compression;
use protocol::identify::{IdentifyRequest, IdentifyResponse};
use protocol::{decode_frame, Command, MAGIC_V2, OK};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use serde::Deserialize;
use std::sync::Arc;

/// What a connection asks for and how it speaks after IDENTIFY.
#[derive(Debug, Clone)]
pub struct HandshakeOptions {
    /// The IDENTIFY body; its `tls_v1`, `snappy`, `deflate` and `deflate_level` say what is
    /// asked for.
    pub identify: IdentifyRequest,
    /// The rustls configuration and the server's name, when `identify.tls_v1`.
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// The deflate level this side writes with (capped by the broker's answer).
    pub deflate_level: u32,
    /// Sent in AUTH when the broker requires it.
    pub auth_secret: Option<String>,
}

impl HandshakeOptions {
    /// The options of a producer or consumer with `features` connecting to `addr`;
    /// `tls_config` is `features.tls_client_config()`, built once per producer or consumer.
    pub fn new(
        identity: &crate::config::Identity,
        features: &crate::config::Features,
        tls_config: Option<&Arc<ClientConfig>>,
        addr: &str,
    ) -> Result<HandshakeOptions> {
        let mut identify = identity.identify_request();
        features.apply(&mut identify);
        let tls = match tls_config {
            Some(cfg) if features.tls_v1 => {
                Some((cfg.clone(), features.tls_config.server_name_for(addr)?))
            }
            _ if features.tls_v1 => return Err(Error::Tls("no TLS configuration".into())),
            _ => None,
        };
        Ok(HandshakeOptions {
            identify,
            tls,
            deflate_level: features.deflate_level,
            auth_secret: features.auth_secret.clone(),
        })
    }
}

/// What the broker told us during [`handshake`].
#[derive(Debug)]
pub struct Handshake {
    /// The most RDY this broker accepts on this connection.
    pub max_rdy_count: u64,
    /// The full negotiation answer; `None` when the broker answered a plain `OK`.
    pub identify: Option<IdentifyResponse>,
    /// What is on: TLS (its version and cipher suite), compression, AUTH's answer.
    pub negotiated: Negotiated,
    /// Bytes read past the handshake's last frame; the driver reads them first.
    pub(crate) read_buf: BytesMut,
}

/// The features a connection ended up with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// TLS protocol version and cipher suite, e.g. `("TLSv1_3", "TLS13_AES_128_GCM_SHA256")`.
    pub tls: Option<(String, String)>,
    pub compression: Option<Compression>,
    /// The broker's answer to AUTH, when it required it.
    pub auth: Option<AuthAnswer>,
}

/// nsqd's answer to a successful AUTH.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct AuthAnswer {
    pub identity: String,
    pub identity_url: String,
    pub permission_count: u64,
}

/// The IDENTIFY answer's feature fields, read leniently (an older broker may lack some).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Flags {
    tls_v1: bool,
    snappy: bool,
    deflate: bool,
    deflate_level: u32,
    auth_required: bool,
}

/// The steps the IDENTIFY answer calls for, checked against what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Upgrades {
    pub tls: bool,
    pub compression: Option<Compression>,
    pub auth: bool,
}

impl Upgrades {
    /// Reads `answer` (the IDENTIFY answer's data) against `asked`.
    pub(crate) fn of(answer: &[u8], asked: &HandshakeOptions) -> Result<Upgrades> {
        let flags: Flags = if answer == OK {
            Flags::default()
        } else {
            serde_json::from_slice(answer)?
        };
        let req = &asked.identify;
        if req.tls_v1 && !flags.tls_v1 {
            return Err(Error::TlsRefused);
        }
        let unasked = (flags.tls_v1 && !req.tls_v1)
            || (flags.snappy && !req.snappy)
            || (flags.deflate && !req.deflate)
            || (flags.snappy && flags.deflate);
        if unasked {
            return Err(Error::UnexpectedResponse(Bytes::copy_from_slice(answer)));
        }
        let compression = if flags.snappy {
            Some(Compression::Snappy)
        } else if flags.deflate {
            let broker = if (1..=9).contains(&flags.deflate_level) {
                flags.deflate_level
            } else {
                asked.deflate_level
            };
            Some(Compression::Deflate {
                level: asked.deflate_level.min(broker).max(1),
            })
        } else {
            None
        };
        if flags.auth_required && asked.auth_secret.is_none() {
            return Err(Error::AuthRequired);
        }
        Ok(Upgrades {
            tls: flags.tls_v1,
            compression,
            auth: flags.auth_required,
        })
    }
}

/// The answer to AUTH: nsqd's JSON (an error frame became an [`Error::Broker`] before).
pub(crate) fn parse_auth_answer(answer: &[u8]) -> Result<AuthAnswer> {
    Ok(serde_json::from_slice(answer)?)
}

/// The answer that must follow a layer switched on: `OK`.
pub(crate) fn expect_ok(answer: Bytes) -> Result<()> {
    if answer == OK {
        Ok(())
    } else {
        Err(Error::UnexpectedResponse(answer))
    }
}

/// A TLS handshake that failed: the connection closing is an I/O error, anything rustls
/// refused (certificate, protocol) is [`Error::Tls`].
pub(crate) fn tls_handshake_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::InvalidData => Error::Tls(format!("handshake: {e}")),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout,
        _ => Error::from(e),
    }
}

/// An error reading the first frame through TLS: the broker's alert for a refused client
/// certificate arrives there (in TLS 1.3 the client's side of the handshake is over before
/// the server has checked its certificate), so what rustls refuses is [`Error::Tls`] here too.
pub(crate) fn after_tls_handshake(e: Error) -> Error {
    match e {
        Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            Error::Tls(format!("after the handshake: {io}"))
        }
        e => e,
    }
}

/// Speaks the opening of protocol V2 on `stream` (see the module doc), and SUB when
/// `subscribe` names a topic and channel. Returns the stream with its layers on. Bound the
/// time it may take with your runtime's timer.
pub async fn handshake<S>(
    stream: S,
    opts: &HandshakeOptions,
    subscribe: Option<(&str, &str)>,
) -> Result<(Transport<S>, Handshake)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut t = Transport::plain(stream);
    let mut out = BytesMut::new();
    out.extend_from_slice(MAGIC_V2);
    let body = serde_json::to_vec(&opts.identify)?;
    Command::Identify(Bytes::from(body)).encode(&mut out);
    send(&mut t, &out).await?;

    let mut buf = BytesMut::new();
    let answer = read_reply(&mut t, &mut buf).await?;
    let (max_rdy_count, identify) = parse_identify_answer(&answer)?;
    let up = Upgrades::of(&answer, opts)?;
    let mut negotiated = Negotiated::default();

    if up.tls {
        let Some((config, name)) = &opts.tls else {
            return Err(Error::TlsRefused);
        };
        if !buf.is_empty() {
            return Err(Error::UnexpectedResponse(buf.split().freeze()));
        }
        let conn = rustls::ClientConnection::new(config.clone(), name.clone())
            .map_err(|e| Error::Tls(e.to_string()))?;
        t = t.start_tls(conn).await.map_err(tls_handshake_error)?;
        expect_ok(
            read_reply(&mut t, &mut buf)
                .await
                .map_err(after_tls_handshake)?,
        )?;
        negotiated.tls = t.tls_session();
    }
    if let Some(c) = up.compression {
        let pending = buf.split();
        t.start_compression(c, &pending)?;
        expect_ok(read_reply(&mut t, &mut buf).await?)?;
        negotiated.compression = Some(c);
    }
    if up.auth {
        let secret = opts.auth_secret.as_deref().ok_or(Error::AuthRequired)?;
        let mut out = BytesMut::new();
        Command::Auth(Bytes::copy_from_slice(secret.as_bytes())).encode(&mut out);
        send(&mut t, &out).await?;
        negotiated.auth = Some(parse_auth_answer(&read_reply(&mut t, &mut buf).await?)?);
    }

    if let Some((topic, channel)) = subscribe {
        let mut out = BytesMut::new();
        Command::Sub {
            topic: topic.to_string(),
            channel: channel.to_string(),
        }
        .encode(&mut out);
        send(&mut t, &out).await?;
        expect_ok(read_reply(&mut t, &mut buf).await?)?;
    }
    Ok((
        t,
        Handshake {
            max_rdy_count,
            identify,
            negotiated,
            read_buf: buf,
        },
    ))
}

async fn send<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) -> Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await?;
    Ok(())
}

/// Reads frames until a response or error that is not a heartbeat; answers heartbeats.
async fn read_reply<S>(stream: &mut S, buf: &mut BytesMut) -> Result<Bytes>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut scratch = [0u8; 4096];
    loop {
        while let Some(frame) = decode_frame(buf, MAX_FRAME_SIZE)? {
            match answer_of(frame) {
                Some(answer) => return answer,
                None => {
                    let mut out = BytesMut::new();
                    Command::Nop.encode(&mut out);
                    send(stream, &out).await?;
                }
            }
        }
        if read_more(stream, buf, &mut scratch).await? == 0 {
            return Err(Error::Closed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(tls: bool, snappy: bool, deflate: bool, secret: Option<&str>) -> HandshakeOptions {
        HandshakeOptions {
            identify: IdentifyRequest {
                tls_v1: tls,
                snappy,
                deflate,
                ..IdentifyRequest::default()
            },
            tls: None,
            deflate_level: 6,
            auth_secret: secret.map(str::to_string),
        }
    }

    #[test]
    fn upgrades_follow_the_answer_and_refuse_what_was_not_asked() {
        let none = Upgrades::of(b"OK", &asked(false, false, false, None)).expect("plain");
        assert_eq!(
            (none.tls, none.compression, none.auth),
            (false, None, false)
        );
        let json = br#"{"max_rdy_count":2500,"tls_v1":true,"deflate":true,"deflate_level":3,"auth_required":true}"#;
        let up = Upgrades::of(json, &asked(true, false, true, Some("s"))).expect("all");
        assert!(up.tls && up.auth);
        assert_eq!(up.compression, Some(Compression::Deflate { level: 3 }));
        // Asked for TLS, answered without: never in the clear.
        let refused = Upgrades::of(br#"{"tls_v1":false}"#, &asked(true, false, false, None));
        assert!(matches!(refused, Err(Error::TlsRefused)));
        assert!(matches!(
            Upgrades::of(b"OK", &asked(true, false, false, None)),
            Err(Error::TlsRefused)
        ));
        // Turned on unasked.
        let unasked = Upgrades::of(br#"{"snappy":true}"#, &asked(false, false, false, None));
        assert!(matches!(unasked, Err(Error::UnexpectedResponse(_))));
        // AUTH required without a secret.
        let auth = Upgrades::of(
            br#"{"auth_required":true}"#,
            &asked(false, false, false, None),
        );
        assert!(matches!(auth, Err(Error::AuthRequired)));
        // A compression not offered stays off.
        let off = Upgrades::of(br#"{"snappy":false}"#, &asked(false, true, false, None));
        assert_eq!(off.expect("no snappy").compression, None);
    }

    #[test]
    fn auth_answer_is_read_leniently() {
        let a = parse_auth_answer(
            br#"{"identity":"bob","identity_url":"http://x","permission_count":2}"#,
        )
        .expect("json");
        assert_eq!((a.identity.as_str(), a.permission_count), ("bob", 2));
        assert!(parse_auth_answer(b"not json").is_err());
    }
}

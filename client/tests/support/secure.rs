//! A fake nsqd that does the server side of TLS, snappy, deflate and AUTH, on plain threads
//! with blocking sockets and the crates' own std wrappers (rustls's `StreamOwned` over a
//! `ServerConnection`, `snap::read::FrameDecoder` / `snap::write::FrameEncoder`,
//! `flate2::read::DeflateDecoder` / `flate2::write::DeflateEncoder`): none of the client's
//! transport code is on this side, so the two only agree if both follow the formats.
//!
//! It answers IDENTIFY as nsqd does (JSON, then each switch followed by an `OK` through the
//! new layer: TLS, then snappy or deflate), AUTH with a fixed secret, PUB/MPUB/DPUB with
//! `OK`, SUB with `OK`, and delivers the messages it was given as RDY allows. A
//! [`Misbehave`] makes it break the stream in one of the ways a client must survive.
//! Certificates come from `test_harness::certs::Pki` (rcgen), written to a scratch directory.

use bytes::{Bytes, BytesMut};
use protocol::frame::{write_frame, write_message_frame, FrameType};
use protocol::{decode_command, Command, ConnPhase, DecodeContext, Message, MessageId};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The secret the fake accepts; [`NO_PERMISSIONS`] is accepted with no authorizations.
pub const SECRET: &str = "s3cret";
pub const NO_PERMISSIONS: &str = "nobody";
/// The only topic an authenticated client may publish to.
pub const ALLOWED_TOPIC: &str = "allowed";

/// One way to break the stream, on the first connection only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehave {
    None,
    /// After switching compression on, raw garbage instead of the compressed `OK`.
    GarbageInsteadOfOk,
    /// The answer to the first publish is garbage under the compression layer.
    CorruptAnswer,
    /// The answer to the first publish is a compressed frame announcing 1 GiB, followed by
    /// megabytes of compressed zeros.
    BombAnswer,
    /// Closes the socket in the middle of the TLS handshake (after reading the ClientHello).
    HangUpMidHandshake,
}

/// What the fake offers and how it behaves.
#[derive(Clone)]
pub struct Settings {
    pub tls: Option<Arc<ServerConfig>>,
    pub snappy: bool,
    pub deflate: bool,
    pub max_deflate_level: u32,
    pub auth_required: bool,
    pub misbehave: Misbehave,
    /// Bodies delivered (in order) once a consumer's RDY allows.
    pub messages: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tls: None,
            snappy: true,
            deflate: true,
            max_deflate_level: 6,
            auth_required: false,
            misbehave: Misbehave::None,
            messages: Vec::new(),
        }
    }
}

/// What one connection negotiated, as the fake saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub tls: bool,
    /// The common name of the client's certificate, if it presented one.
    pub client_cert: bool,
    pub snappy: bool,
    pub deflate: Option<u32>,
    pub authed: bool,
    pub commands: Vec<Command>,
}

/// A running fake; its threads end with their connections.
pub struct SecureFake {
    pub addr: String,
    conns: Arc<Mutex<Vec<Seen>>>,
}

impl SecureFake {
    pub fn start(settings: Settings) -> SecureFake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let conns: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = conns.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let idx = {
                    let mut l = log.lock().expect("log");
                    l.push(Seen::default());
                    l.len() - 1
                };
                let first = accepted.fetch_add(1, Ordering::SeqCst) == 0;
                let mut settings = settings.clone();
                if !first {
                    settings.misbehave = Misbehave::None;
                }
                let log = log.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &settings, &log, idx);
                });
            }
        });
        SecureFake { addr, conns }
    }

    /// What connection `idx` negotiated and sent so far.
    pub fn seen(&self, idx: usize) -> Seen {
        self.conns
            .lock()
            .expect("log")
            .get(idx)
            .cloned()
            .unwrap_or_default()
    }

    pub fn connections(&self) -> usize {
        self.conns.lock().expect("log").len()
    }
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn note(log: &Log, idx: usize, f: impl FnOnce(&mut Seen)) {
    if let Some(s) = log.lock().expect("log").get_mut(idx) {
        f(s);
    }
}

fn frame(kind: FrameType, data: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_frame(&mut b, kind, data);
    b.to_vec()
}

/// The socket, or TLS over it; shared by the reading and the writing wrapper above it (one
/// thread, one at a time).
enum Lower {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

#[derive(Clone)]
struct Shared(Rc<RefCell<Lower>>);

impl Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut *self.0.borrow_mut() {
            Lower::Plain(s) => s.read(buf),
            Lower::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut *self.0.borrow_mut() {
            Lower::Plain(s) => s.write(buf),
            Lower::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut *self.0.borrow_mut() {
            Lower::Plain(s) => s.flush(),
            Lower::Tls(t) => t.flush(),
        }
    }
}

/// Reads until one whole command is decoded. The chunk is larger than anything inflate can
/// hold back: flate2's reader only hands out output it holds back after reading more input,
/// which a client waiting for its answer never sends.
fn next_command(
    r: &mut dyn Read,
    buf: &mut BytesMut,
    ctx: &DecodeContext,
) -> std::io::Result<Option<Command>> {
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        match decode_command(buf, ctx) {
            Ok(Some(c)) => return Ok(Some(c)),
            Ok(None) => {}
            Err(_) => return Ok(None),
        }
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn serve(tcp: TcpStream, settings: &Settings, log: &Log, idx: usize) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(Duration::from_secs(20)))?;
    // The wrappers write a chunk's header and body apart: without this, Nagle holds the
    // second part for the client's delayed ACK.
    tcp.set_nodelay(true)?;
    let mut plain = tcp;
    let hello = match test_harness::handshake::read_identify(&mut plain) {
        Ok(h) => h,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Ok(()),
        Err(e) => return Err(e),
    };
    let body = Bytes::from(hello.body);
    let mut buf = BytesMut::new();
    let mut ctx = DecodeContext::default();
    note(log, idx, |s| {
        s.commands.push(Command::Identify(body.clone()))
    });
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let asked = |k: &str| req[k].as_bool().unwrap_or(false);
    let tls = settings.tls.is_some() && asked("tls_v1");
    let snappy = settings.snappy && asked("snappy");
    let deflate = settings.deflate && asked("deflate");
    let level = match req["deflate_level"].as_u64() {
        Some(l) if l > 0 => l as u32,
        _ => 6,
    }
    .min(settings.max_deflate_level);
    if snappy && deflate {
        plain.write_all(&frame(
            FrameType::Error,
            b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
        ))?;
        return Ok(());
    }
    let answer = serde_json::json!({
        "max_rdy_count": 2500, "version": "1.3.0", "max_msg_timeout": 900000,
        "msg_timeout": 60000, "tls_v1": tls, "deflate": deflate, "deflate_level": level,
        "max_deflate_level": settings.max_deflate_level, "snappy": snappy, "sample_rate": 0,
        "auth_required": settings.auth_required, "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
    });
    plain.write_all(&frame(FrameType::Response, answer.to_string().as_bytes()))?;

    let lower = if tls {
        let Some(config) = settings.tls.clone() else {
            return Ok(());
        };
        if settings.misbehave == Misbehave::HangUpMidHandshake {
            let mut hello = [0u8; 64];
            let _ = plain.read(&mut hello)?;
            return Ok(());
        }
        let conn = ServerConnection::new(config).map_err(std::io::Error::other)?;
        let mut t = StreamOwned::new(conn, plain);
        while t.conn.is_handshaking() {
            t.conn.complete_io(&mut t.sock)?;
        }
        let client_cert = t.conn.peer_certificates().is_some_and(|c| !c.is_empty());
        note(log, idx, |s| {
            s.tls = true;
            s.client_cert = client_cert;
        });
        t.write_all(&frame(FrameType::Response, b"OK"))?;
        t.flush()?;
        Lower::Tls(Box::new(t))
    } else {
        Lower::Plain(plain)
    };
    let shared = Shared(Rc::new(RefCell::new(lower)));
    let mut raw = shared.clone();

    let (mut r, mut w): (Box<dyn Read>, Box<dyn Write>) = if snappy {
        note(log, idx, |s| s.snappy = true);
        (
            Box::new(snap::read::FrameDecoder::new(shared.clone())),
            Box::new(snap::write::FrameEncoder::new(shared.clone())),
        )
    } else if deflate {
        note(log, idx, |s| s.deflate = Some(level));
        (
            Box::new(flate2::read::DeflateDecoder::new(shared.clone())),
            Box::new(flate2::write::DeflateEncoder::new(
                shared.clone(),
                flate2::Compression::new(level),
            )),
        )
    } else {
        (Box::new(shared.clone()), Box::new(shared.clone()))
    };
    if snappy || deflate {
        if settings.misbehave == Misbehave::GarbageInsteadOfOk {
            raw.write_all(&[0xff; 64])?;
            raw.flush()?;
            std::thread::sleep(Duration::from_millis(200));
            return Ok(());
        }
        w.write_all(&frame(FrameType::Response, b"OK"))?;
        w.flush()?;
    }

    let mut queue: std::collections::VecDeque<String> = settings.messages.clone().into();
    let mut rdy = 0u64;
    let mut in_flight = 0u64;
    let mut next_id = 1u64;
    let mut authed = false;
    loop {
        let Some(cmd) = next_command(&mut r, &mut buf, &ctx)? else {
            return Ok(());
        };
        note(log, idx, |s| s.commands.push(cmd.clone()));
        let mut out = BytesMut::new();
        let mut close = false;
        match &cmd {
            Command::Auth(secret) => {
                if secret.as_ref() == SECRET.as_bytes() {
                    authed = true;
                    note(log, idx, |s| s.authed = true);
                    let answer = r#"{"identity":"alice","identity_url":"https://auth.example/alice","permission_count":1}"#;
                    write_frame(&mut out, FrameType::Response, answer.as_bytes());
                } else if secret.as_ref() == NO_PERMISSIONS.as_bytes() {
                    write_frame(
                        &mut out,
                        FrameType::Error,
                        b"E_UNAUTHORIZED AUTH no authorizations found",
                    );
                    close = true;
                } else {
                    write_frame(&mut out, FrameType::Error, b"E_AUTH_FAILED AUTH failed");
                    close = true;
                }
            }
            Command::Pub { topic, .. }
            | Command::Mpub { topic, .. }
            | Command::Dpub { topic, .. } => {
                if settings.auth_required && !authed {
                    write_frame(&mut out, FrameType::Error, b"E_AUTH_FIRST AUTH required");
                    close = true;
                } else if settings.auth_required && topic != ALLOWED_TOPIC {
                    let text = format!("E_UNAUTHORIZED AUTH failed for PUB on {topic:?} \"\"");
                    write_frame(&mut out, FrameType::Error, text.as_bytes());
                    close = true;
                } else {
                    match settings.misbehave {
                        Misbehave::CorruptAnswer => {
                            raw.write_all(&[0x03; 40])?;
                            raw.flush()?;
                            std::thread::sleep(Duration::from_millis(200));
                            return Ok(());
                        }
                        Misbehave::BombAnswer => {
                            let mut header = (1u32 << 30).to_be_bytes().to_vec();
                            header.extend_from_slice(&0u32.to_be_bytes());
                            w.write_all(&header)?;
                            let zeros = vec![0u8; 1 << 20];
                            for _ in 0..32 {
                                if w.write_all(&zeros).and_then(|_| w.flush()).is_err() {
                                    return Ok(());
                                }
                            }
                            std::thread::sleep(Duration::from_millis(200));
                            return Ok(());
                        }
                        _ => write_frame(&mut out, FrameType::Response, b"OK"),
                    }
                }
            }
            Command::Sub { .. } => {
                if settings.auth_required && !authed {
                    write_frame(&mut out, FrameType::Error, b"E_AUTH_FIRST AUTH required");
                    close = true;
                } else {
                    ctx.phase = ConnPhase::Subscribed;
                    write_frame(&mut out, FrameType::Response, b"OK");
                }
            }
            Command::Rdy(n) => rdy = *n,
            Command::Fin(_) => in_flight = in_flight.saturating_sub(1),
            Command::Cls => {
                ctx.phase = ConnPhase::Closing;
                write_frame(&mut out, FrameType::Response, b"CLOSE_WAIT");
            }
            _ => {}
        }
        while in_flight < rdy {
            let Some(body) = queue.pop_front() else { break };
            write_message_frame(
                &mut out,
                &Message {
                    id: MessageId::from_u64(next_id),
                    timestamp: 1,
                    attempts: 1,
                    body: Bytes::from(body),
                },
            );
            next_id += 1;
            in_flight += 1;
        }
        if !out.is_empty() {
            w.write_all(&out)?;
            w.flush()?;
        }
        if close {
            std::thread::sleep(Duration::from_millis(50));
            return Ok(());
        }
    }
}

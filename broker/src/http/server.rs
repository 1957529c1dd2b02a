//! The HTTP and HTTPS listeners of one shard and the loop that serves one connection.
//!
//! A connection reads into a reused buffer, cuts every complete request off it
//! (`http1::RequestDecoder`), answers them in order into one output buffer, and writes
//! that buffer once per read: pipelined requests cost one write. After writing answers it reads
//! the socket once itself before waiting through the reactor ([`crate::sys::eager_read`]). HTTP/1.1
//! connections stay open unless the client says `Connection: close`; once the broker is
//! shutting down every answer says `Connection: close`.
//!
//! The loop is generic over what lies between the socket and the decoder
//! ([`super::conn_io`]): nothing on `--http-address`, TLS on `--https-address`; each is
//! compiled for its own, so plain HTTP pays nothing for HTTPS. With `--tls-required` (true,
//! not `tcp-https`) the plain listener answers every request as nsqd does: 403 with
//! `{"message": "TLS_REQUIRED", "https_port": N}`.
//!
//! A request that cannot be framed (bad head, body over `--max-body-size`) is answered, then the
//! connection is closed; what the client is still sending is read and dropped for a short while
//! first, so that it gets the answer rather than a reset.

use super::api_error::ApiError;
use super::conn_io::{Plain, Tls, Transport};
use super::routes::{self, Answer};
use crate::shard::Shard;
use crate::sys::eager_read::EagerRead;
use crate::sys::listen::{ListenAddr, Steering};
use crate::sys::send_batch;
use bytes::BytesMut;
use futures_lite::AsyncReadExt;
use glommio::net::{TcpListener, TcpStream};
use http1::{Decoded, HttpError, Limits, RequestDecoder, Version, CONTINUE_RESPONSE};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Read buffer per connection; requests larger than this grow it.
const READ_BUF: usize = 8 * 1024;
/// An idle keep-alive connection is closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// A client that does not take its answer for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests between two looks at the CPU a connection's client sends from.
const CPU_CHECK_EVERY: u64 = 64;
/// After refusing a request, how long (and how much) to keep reading before closing.
const DRAIN_TIME: Duration = Duration::from_millis(500);
const DRAIN_BYTES: usize = 16 * 1024 * 1024;

/// What the plain listener answers every request with `--tls-required` (`true`): nsqd's 403.
type Refusal = Option<Rc<http1::Response>>;

/// Takes this shard's HTTP listener and, when the API is also served over TLS, its HTTPS one
/// (bound and listening, see [`crate::sys::listen`]), and spawns their accept loops.
pub fn start(shard: &Rc<Shard>, http: Option<OwnedFd>, https: Option<OwnedFd>) {
    let config = &shard.config;
    crate::stats::start_time();
    crate::stats::configure_e2e(
        &config.e2e_processing_latency_percentiles,
        config.e2e_processing_latency_window_time,
    );
    let refusal: Refusal = (config.tls_required == crate::tls::TlsRequired::Yes).then(|| {
        let port = config.https_address.map_or(0, |a| a.port());
        Rc::new(tls_required(port))
    });
    // A unix socket's listener is shard 0's alone.
    let mut acceptors: Vec<_> = http
        .map(|fd| spawn_acceptor(shard, fd, Accept::Plain(refusal.clone())))
        .into_iter()
        .collect();
    if let Some(https) = https {
        acceptors.push(spawn_acceptor(shard, https, Accept::Tls));
    }
    glommio::spawn_local(adopter(shard.clone(), refusal.clone())).detach();
    let watcher = shard.clone();
    glommio::spawn_local(async move {
        // Dropping the accept task is the one way to interrupt a pending accept; do it once,
        // at shutdown (woken, never polled: an idle shard must not tick).
        watcher.http_stop.notified().await;
        drop(acceptors);
        info!(shard = watcher.id, "HTTP: stopped accepting");
    })
    .detach();
}

/// nsqd's answer on the plain listener when TLS is required: `https_port` is the port the
/// HTTPS listener is bound to (0 when there is none).
fn tls_required(https_port: u16) -> http1::Response {
    ApiError::TlsRequired { https_port }.response()
}

/// What a listener's connections are served with.
enum Accept {
    Plain(Refusal),
    Tls,
}

fn spawn_acceptor(shard: &Rc<Shard>, fd: OwnedFd, accept: Accept) -> glommio::Task<()> {
    // SAFETY: the fd is a bound, listening socket (TCP, or a unix socket, whose connections
    // glommio's TcpStream reads and writes alike) this shard now owns alone.
    let listener = unsafe { TcpListener::from_raw_fd(fd.into_raw_fd()) };
    glommio::spawn_local(accept_loop(shard.clone(), listener, accept))
}

async fn accept_loop(shard: Rc<Shard>, listener: TcpListener, accept: Accept) {
    let what = match accept {
        Accept::Plain(_) => "HTTP",
        Accept::Tls => "HTTPS",
    };
    let mut limit = crate::sys::accept_limit::AcceptLimit::new(shard.id, what);
    // A unix socket is shard 0's alone: its connections are dealt to the shards in turn.
    // (HTTPS is TCP only, on every shard.)
    let deal = matches!(accept, Accept::Plain(_))
        && matches!(shard.config.http_address, ListenAddr::Unix(_));
    let mut turn = 0usize;
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => match limit.admit(stream) {
                Some(stream) => stream,
                None => continue,
            },
            Err(e) => {
                limit.on_error(&listener, e).await;
                continue;
            }
        };
        if deal {
            turn = turn.wrapping_add(1);
            let to = turn % shard.config.shards;
            if to != shard.id {
                give(&shard, stream, to);
                continue;
            }
        }
        match &accept {
            Accept::Plain(refusal) => {
                let served = serve(shard.clone(), stream, Plain, refusal.clone());
                glommio::spawn_local(served).detach();
            }
            Accept::Tls => {
                // The configuration in force now: a SIGHUP's reload reaches new connections.
                let Some(config) = shard.config.tls_server.as_ref().map(|s| s.get()) else {
                    warn!("HTTPS connection refused: no TLS configuration");
                    continue;
                };
                match Tls::new(config) {
                    Ok(tls) => {
                        glommio::spawn_local(serve(shard.clone(), stream, tls, None)).detach();
                    }
                    Err(e) => warn!("HTTPS connection refused: {e}"),
                }
            }
        }
    }
}

fn limits(shard: &Shard) -> Limits {
    Limits {
        // /pub takes up to --max-msg-size, /mpub up to --max-body-size (each checks its own).
        max_body: shard.config.max_body_size.max(shard.config.max_msg_size) as usize,
        ..Limits::default()
    }
}

/// Serves one connection until it closes.
async fn serve<T: Transport>(
    shard: Rc<Shard>,
    mut stream: TcpStream,
    mut transport: T,
    refusal: Refusal,
) {
    let counter = &shard.admin.http_connections;
    counter.set(counter.get() + 1);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(T::HANDSHAKE_TIMEOUT.unwrap_or(IDLE_TIMEOUT)));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let served = serve_requests(&shard, &mut stream, &mut transport, refusal.as_deref()).await;
    match served {
        Ok(End::Close) => {}
        Ok(End::Drain) => drain(&mut stream).await,
        Ok(End::Move(to)) => {
            counter.set(counter.get().saturating_sub(1));
            hand_over(&shard, stream, to);
            return;
        }
        Err(e) => debug!("HTTP connection ended: {e}"),
    }
    let _ = stream.shutdown(std::net::Shutdown::Both).await;
    counter.set(counter.get().saturating_sub(1));
    crate::sys::mem_trim::connection_closed();
}

enum End {
    /// Close now.
    Close,
    /// A request was refused mid-stream: read what is still coming, then close.
    Drain,
    /// Between two requests: the client now sends from shard `.0`'s CPU; serve it there.
    Move(usize),
}

/// Gives the connection to shard `to`: a duplicate of its socket travels in the mail, and
/// this shard's stream is dropped (closing only this shard's descriptor). On failure the
/// connection simply closes, as an idle keep-alive connection may.
fn hand_over(shard: &Shard, stream: TcpStream, to: usize) {
    if give(shard, stream, to) {
        debug!(
            to,
            "HTTP connection handed over to the shard of its client's CPU"
        );
        let moved = &shard.admin.http_handovers;
        moved.set(moved.get() + 1);
    }
}

/// Sends a connection to shard `to` (a duplicate of its socket in the mail; this shard's
/// stream is dropped); false when the duplicate failed and the connection closed.
fn give(shard: &Shard, stream: TcpStream, to: usize) -> bool {
    let fd = crate::sys::listen::dup_socket(stream.as_raw_fd());
    drop(stream);
    match fd {
        Ok(fd) => {
            shard.route(to, crate::mailbox::Mail::HttpConn { fd });
            true
        }
        Err(e) => {
            debug!("HTTP connection not handed over: dup failed ({e})");
            false
        }
    }
}

/// Serves the connections handed over to this shard (moved by their client's CPU, or dealt
/// from shard 0's unix socket), as the plain listener's: refused with `refusal` when TLS is
/// required.
async fn adopter(shard: Rc<Shard>, refusal: Refusal) {
    loop {
        shard.wake_adopter.notified().await;
        let fds = std::mem::take(&mut *shard.http_adopted.borrow_mut());
        for fd in fds {
            // SAFETY: the descriptor is a connected TCP socket this shard now owns alone.
            let stream = unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) };
            // Only plain connections move.
            glommio::spawn_local(serve(shard.clone(), stream, Plain, refusal.clone())).detach();
        }
    }
}

/// The shard a connection should be served by: the one pinned to the CPU its client's
/// packets last arrived on (`SO_INCOMING_CPU`; on loopback, the client's CPU), when that is
/// another shard's and connections are steered by CPU at all.
fn shard_of_client_cpu(shard: &Shard, stream: &TcpStream) -> Option<usize> {
    if shard.config.connection_steering != Steering::Cpu {
        return None;
    }
    let mut cpu: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: cpu and len are valid for writing, len says cpu's size.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&mut cpu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 || cpu < 0 {
        return None;
    }
    let cpus = &shard.config.cpus;
    let shards = shard.config.shards;
    // Only a CPU that exactly one shard is pinned to names a shard.
    let mut on_cpu = (0..shards).filter(|&i| cpus[i % cpus.len()] == cpu as usize);
    let target = on_cpu.next()?;
    if on_cpu.next().is_some() || target == shard.id {
        return None;
    }
    Some(target)
}

async fn serve_requests<T: Transport>(
    shard: &Rc<Shard>,
    stream: &mut TcpStream,
    transport: &mut T,
    refusal: Option<&http1::Response>,
) -> std::io::Result<End> {
    let mut decoder = RequestDecoder::new(limits(shard));
    let mut rbuf = BytesMut::with_capacity(READ_BUF);
    let mut scratch = vec![0u8; READ_BUF];
    let mut out = BytesMut::with_capacity(READ_BUF);
    let mut eager = EagerRead::default();
    // Requests answered, and when to look at the client's CPU next; a move needs two looks
    // in a row naming the same other shard.
    let mut served: u64 = 0;
    let mut next_cpu_check: u64 = CPU_CHECK_EVERY;
    let mut moving_to: Option<usize> = None;
    // The peer ended its TLS session: answer what came before, then close.
    let mut peer_closed = false;
    loop {
        let mut end = None;
        loop {
            match decoder.decode(&mut rbuf) {
                Ok(Decoded::Request(req)) => {
                    let requests = &shard.admin.http_requests;
                    requests.set(requests.get() + 1);
                    served += 1;
                    let keep_alive = req.head.keep_alive && !shard.is_stopping();
                    match refusal {
                        Some(refused) => write_response(refused, &req.head, keep_alive, &mut out),
                        None => {
                            let answer = routes::handle(shard, &req).await;
                            write_answer(answer, &req.head, keep_alive, &mut out);
                        }
                    }
                    if !keep_alive {
                        end = Some(End::Close);
                        break;
                    }
                }
                Ok(Decoded::Incomplete) => break,
                Ok(Decoded::SendContinue) => out.extend_from_slice(CONTINUE_RESPONSE),
                Err(e) => {
                    debug!("HTTP request refused: {e}");
                    let resp = match &e {
                        HttpError::BodyTooLarge(head) => routes::body_too_large(head),
                        _ => e.to_response(),
                    };
                    resp.write_to(&mut out, false, false);
                    end = Some(End::Drain);
                    break;
                }
            }
        }
        if end.is_none() && peer_closed {
            end = Some(End::Close);
        }
        let mut answered = false;
        if !out.is_empty() || transport.has_output() || end.is_some() {
            let wire = transport.seal(out, end.is_some())?;
            answered = !wire.is_empty();
            let sent = if answered {
                send_batch::send_all(&shard.sends, stream, wire).await?
            } else {
                wire
            };
            out = transport.recycle(sent);
        }
        if let Some(end) = end {
            return Ok(end);
        }
        // Now and then, between requests: has the client moved to another shard's CPU? (A
        // refusing listener's clients do not stay long enough to matter.)
        if T::MOVABLE
            && refusal.is_none()
            && served >= next_cpu_check
            && rbuf.is_empty()
            && decoder.is_idle()
        {
            next_cpu_check = served + CPU_CHECK_EVERY;
            match shard_of_client_cpu(shard, stream) {
                Some(to) if moving_to == Some(to) => return Ok(End::Move(to)),
                other => moving_to = other,
            }
        }
        // A client on this CPU ran as that write woke it; its next request may be here. The
        // yield lets the shard's other tasks (and, when due, its reactor) run first, so a
        // client answered this way cannot hold the shard.
        let mut eagerly = None;
        if answered && eager.wanted() {
            futures_lite::future::yield_now().await;
            eagerly = eager.read(stream.as_raw_fd(), &mut scratch).await;
        }
        let n = match eagerly {
            Some(got) => got?,
            None => stream.read(&mut scratch).await?,
        };
        if n == 0 {
            return Ok(End::Close);
        }
        match transport.input(&scratch[..n], &mut rbuf) {
            Ok(input) => {
                if input.handshake_done {
                    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
                }
                peer_closed = input.closed;
            }
            Err(e) => {
                // A TLS alert for the peer, if the socket takes it; then the end.
                if transport.has_output() {
                    if let Ok(alert) = transport.seal(BytesMut::new(), false) {
                        let _ = send_batch::send_all(&shard.sends, stream, alert).await;
                    }
                }
                return Err(e);
            }
        }
    }
}

/// `HTTP/1.1 200 OK` with nsqd's headers and `OK`: the answer to every successful publish.
const PUB_OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nX-NSQ-Content-Type: nsq; version=1.0\r\nContent-Length: 2\r\n\r\nOK";

fn write_answer(answer: Answer, head: &http1::RequestHead, keep_alive: bool, out: &mut BytesMut) {
    match answer {
        Answer::PubOk if keep_alive && head.version == Version::Http11 => {
            out.extend_from_slice(PUB_OK);
        }
        Answer::PubOk => write_response(&routes::pub_ok(), head, keep_alive, out),
        Answer::Response(r) => write_response(&r, head, keep_alive, out),
    }
}

fn write_response(
    r: &http1::Response,
    head: &http1::RequestHead,
    keep_alive: bool,
    out: &mut BytesMut,
) {
    if keep_alive {
        r.write_for(head, out);
    } else {
        r.write_closing(head, out);
    }
}

/// Reads and drops what the client still sends, bounded in time and bytes.
async fn drain(stream: &mut TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write).await;
    let _ = stream.set_read_timeout(Some(DRAIN_TIME));
    let deadline = Instant::now() + DRAIN_TIME;
    let mut scratch = vec![0u8; READ_BUF];
    let mut total = 0usize;
    while Instant::now() < deadline && total < DRAIN_BYTES {
        match stream.read(&mut scratch).await {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}

//! The trivial broker that `raw` measures against: the ceiling of what the client and the
//! framing can do over loopback, with no broker work in between.
//!
//! It speaks just enough protocol V2, with the same codec the broker uses
//! ([`protocol::decode_command`], [`protocol::frame`]): IDENTIFY gets a negotiation answer,
//! every PUB / MPUB / DPUB an `OK` (bodies are parsed, then dropped), SUB an `OK`, after which
//! it sends stamped messages as fast as the consumer's RDY allows and counts FINs back. One
//! task per connection reads, answers, writes, and reads again: no queues, no storage.
//!
//! With a data path ([`start_at`]'s `keep`), every published body is also kept on disk
//! ([`crate::keep`]) before its `OK`: the ceiling of a broker that keeps a topic on disk
//! (and, answering after the write, of one under `--mem-queue-size 0`).
//!
//! With `relay`, a subscriber gets no more messages than were published on its executor and
//! not yet delivered (what a broker can deliver: what it is sent), instead of as many as its
//! RDY allows.
//!
//! It runs on one executor, or ([`Placement::PerCpu`]) on one pinned executor per CPU, the
//! first accepting and giving connection i to executor i mod N (a duplicate of the socket,
//! through a channel): what a runtime of that many executors makes when every
//! connection has an executor of its own, independent of where the kernel would steer it.

use crate::error::{BenchError, Result};
use crate::keep::{KeepTo, Keeper};
use crate::payload;
use bytes::{Bytes, BytesMut};
use client::conn::read_more;
use futures_lite::future;
use futures_lite::io::AsyncWriteExt;
use glommio::channels::shared_channel::{self, SharedReceiver};
use glommio::net::{TcpListener, TcpStream};
use glommio::{LocalExecutorBuilder, Placement as GlommioPlacement};
use nsq_common::local_sync::Notify;
use protocol::frame::{write_frame, write_message_frame};
use protocol::identify::{IdentifyLimits, IdentifyRequest, IdentifyResponse};
use protocol::{decode_command, Command, ConnPhase, DecodeContext, FrameType, Message, MessageId};
use std::cell::Cell;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

const READ_CHUNK: usize = 64 * 1024;
/// The `max_rdy_count` the sink announces.
const MAX_RDY_COUNT: u64 = 2500;

/// nsqd's answer to an IDENTIFY that asks for nothing, under nsqd's default settings: the sink
/// negotiates nothing.
fn identify_answer() -> Vec<u8> {
    let limits = IdentifyLimits::default();
    match IdentifyRequest::parse(b"{}").and_then(|req| req.negotiate(&limits)) {
        Ok(n) => IdentifyResponse::new(&n, &limits, MAX_RDY_COUNT, false).to_json(),
        Err(e) => e.to_string().into_bytes(),
    }
}

/// A running sink; stops when dropped.
pub struct Sink {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

/// Where a sink's executors run.
#[derive(Clone, Copy, Debug)]
pub enum Placement {
    /// One executor, pinned to this CPU if given.
    One(Option<usize>),
    /// This many executors, pinned to CPUs 0, 1, ...; the first accepts.
    PerCpu(usize),
}

/// Starts a sink on 127.0.0.1 (an ephemeral port), sending message bodies of `size` bytes.
pub fn start(placement: Placement, size: usize) -> Result<Sink> {
    start_at(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        placement,
        size,
        None,
        false,
    )
}

/// How many connections may wait for an executor that has not taken them yet.
const HANDOVER_DEPTH: usize = 64;

/// [`start`] on `addr`; with `keep`, each executor keeps what it is sent in files in its
/// directory (created if missing), answering as it says; with `relay`, it delivers only what
/// was published.
pub fn start_at(
    addr: SocketAddr,
    placement: Placement,
    size: usize,
    keep: Option<KeepTo>,
    relay: bool,
) -> Result<Sink> {
    if let Some(k) = &keep {
        std::fs::create_dir_all(&k.dir).map_err(|source| BenchError::File {
            path: k.dir.clone(),
            source,
        })?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (first_cpu, executors) = match placement {
        Placement::One(cpu) => (cpu, 1),
        Placement::PerCpu(n) => (Some(0), n),
    };
    let mut peers = Vec::new();
    for cpu in 1..executors {
        let (tx, rx) = shared_channel::new_bounded::<RawFd>(HANDOVER_DEPTH);
        peers.push(tx);
        let keep = keep.clone();
        LocalExecutorBuilder::new(GlommioPlacement::Fixed(cpu))
            .name("bench-sink")
            .spawn(move || async move {
                let shared = Shared::of(keep.as_ref(), relay, cpu);
                serve_handed_over(rx, size, shared).await
            })
            .map_err(|e| BenchError::Executor(e.to_string()))?;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let stop_flag = stop.clone();
    LocalExecutorBuilder::new(first_cpu.map_or(GlommioPlacement::Unbound, GlommioPlacement::Fixed))
        .name("bench-sink")
        .spawn(move || async move {
            let listener = match TcpListener::bind(addr) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = tx.send(listener.local_addr().map_err(|e| e.to_string()));
            let mut connected = Vec::with_capacity(peers.len());
            for peer in peers {
                connected.push(peer.connect().await);
            }
            let shared = Shared::of(keep.as_ref(), relay, 0);
            accept_until_stopped(listener, stop_flag, size, connected, shared).await;
        })
        .map_err(|e| BenchError::Executor(e.to_string()))?;
    let addr = rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| BenchError::Executor("the sink did not start".into()))?
        .map_err(BenchError::Executor)?;
    Ok(Sink { addr, stop })
}

/// What the connections of one executor share.
#[derive(Clone, Default)]
struct Shared {
    /// Its disk, when the sink keeps what it is sent.
    keeper: Option<Rc<Keeper>>,
    /// What its publishers sent and its subscribers did not get yet, when it relays.
    relay: Option<Rc<Relay>>,
}

impl Shared {
    fn of(keep: Option<&KeepTo>, relay: bool, executor: usize) -> Shared {
        Shared {
            keeper: keep.map(|k| Keeper::start(&k.dir, executor, k.ack)),
            relay: relay.then(|| Rc::new(Relay::default())),
        }
    }
}

/// Messages published on an executor and not yet delivered.
#[derive(Default)]
struct Relay {
    owed: Cell<u64>,
    /// Notified at each publish.
    published: Notify,
}

/// An executor other than the first: serves the connections the first hands it, until the
/// first stops (and with it the channel).
async fn serve_handed_over(rx: SharedReceiver<RawFd>, size: usize, shared: Shared) {
    let rx = rx.connect().await;
    while let Some(fd) = rx.recv().await {
        // SAFETY: the first executor made this duplicate for us alone and kept no copy.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        let shared = shared.clone();
        glommio::spawn_local(async move {
            let _ = serve(stream, size, shared).await;
        })
        .detach();
    }
}

async fn accept_until_stopped(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    size: usize,
    peers: Vec<shared_channel::ConnectedSender<RawFd>>,
    shared: Shared,
) {
    let mut next = 0usize;
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            while !stop.load(Relaxed) {
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            None
        })
        .await;
        match accepted {
            Some(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                // Connection i to executor i mod N; executor 0 is this one.
                let turn = next % (peers.len() + 1);
                next = next.wrapping_add(1);
                if turn == 0 {
                    let shared = shared.clone();
                    glommio::spawn_local(async move {
                        let _ = serve(stream, size, shared).await;
                    })
                    .detach();
                } else {
                    // The executor gets a duplicate; this one's stream closes its own.
                    // SAFETY: dup of a descriptor the stream holds open.
                    let fd = unsafe { libc::dup(stream.as_raw_fd()) };
                    drop(stream);
                    if fd >= 0 && peers[turn - 1].send(fd).await.is_err() {
                        // SAFETY: not delivered, so the duplicate is still ours alone.
                        unsafe { libc::close(fd) };
                    }
                }
            }
            Some(Err(_)) => glommio::timer::sleep(Duration::from_millis(10)).await,
            None => return,
        }
    }
}

/// A subscription's delivery state.
#[derive(Default)]
struct Delivery {
    subscribed: bool,
    rdy: u64,
    in_flight: u64,
    next_id: u64,
}

async fn serve(mut stream: TcpStream, size: usize, shared: Shared) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut scratch = vec![0u8; READ_CHUNK];
    while buf.len() < 4 {
        if read_more(&mut stream, &mut buf, &mut scratch).await? == 0 {
            return Ok(());
        }
    }
    let _magic = buf.split_to(4);
    let mut ctx = DecodeContext::default();
    let mut out = BytesMut::with_capacity(READ_CHUNK);
    let mut delivery = Delivery::default();
    loop {
        loop {
            match decode_command(&mut buf, &ctx) {
                Ok(Some(cmd)) => {
                    if let Some(bodies) = published(&cmd) {
                        if let Some(keeper) = &shared.keeper {
                            keeper.keep(bodies).await?;
                        }
                        if let Some(relay) = &shared.relay {
                            relay.owed.set(relay.owed.get() + bodies.len() as u64);
                            relay.published.notify();
                        }
                    }
                    answer(cmd, &mut ctx, &mut delivery, &mut out)
                }
                Ok(None) => break,
                Err(e) => {
                    write_frame(&mut out, FrameType::Error, e.to_string().as_bytes());
                    stream.write_all(&out).await?;
                    return Ok(());
                }
            }
        }
        deliver(&mut delivery, size, shared.relay.as_deref(), &mut out);
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        // A relay's subscriber with room gets what is published meanwhile, whether or not it
        // sends anything (bench_reader holds its FINs until most of its RDY has come). The
        // read only waits for the socket to be readable, so giving it up loses nothing.
        let room = delivery.subscribed && delivery.rdy > delivery.in_flight;
        let read = match &shared.relay {
            Some(relay) if room => {
                future::or(
                    async { Some(read_more(&mut stream, &mut buf, &mut scratch).await) },
                    async {
                        while relay.owed.get() == 0 {
                            relay.published.changed().await;
                        }
                        None
                    },
                )
                .await
            }
            _ => Some(read_more(&mut stream, &mut buf, &mut scratch).await),
        };
        if read.transpose()? == Some(0) {
            return Ok(());
        }
    }
}

/// The bodies a command publishes.
fn published(cmd: &Command) -> Option<&[Bytes]> {
    match cmd {
        Command::Pub { body, .. } | Command::Dpub { body, .. } => Some(std::slice::from_ref(body)),
        Command::Mpub { bodies, .. } => Some(bodies),
        _ => None,
    }
}

fn answer(cmd: Command, ctx: &mut DecodeContext, d: &mut Delivery, out: &mut BytesMut) {
    let ok = |out: &mut BytesMut| write_frame(out, FrameType::Response, protocol::OK);
    match cmd {
        Command::Identify(_) => write_frame(out, FrameType::Response, &identify_answer()),
        Command::Pub { .. } | Command::Mpub { .. } | Command::Dpub { .. } => ok(out),
        Command::Sub { .. } => {
            d.subscribed = true;
            ctx.phase = ConnPhase::Subscribed;
            ok(out)
        }
        Command::Rdy(n) => d.rdy = n,
        Command::Fin(_) | Command::Req { .. } => d.in_flight = d.in_flight.saturating_sub(1),
        Command::Touch(_) | Command::Nop => {}
        Command::Cls => {
            d.subscribed = false;
            ctx.phase = ConnPhase::Closing;
            write_frame(out, FrameType::Response, protocol::CLOSE_WAIT);
        }
        Command::Auth(_) => write_frame(out, FrameType::Error, b"E_AUTH_DISABLED AUTH disabled"),
    }
}

/// Fills the consumer's RDY with messages stamped now (one body shared by the whole burst);
/// with a relay, with no more than it is owed.
fn deliver(d: &mut Delivery, size: usize, relay: Option<&Relay>, out: &mut BytesMut) {
    if !d.subscribed || d.in_flight >= d.rdy {
        return;
    }
    let mut room = d.rdy - d.in_flight;
    if let Some(relay) = relay {
        room = room.min(relay.owed.get());
        relay.owed.set(relay.owed.get() - room);
    }
    if room == 0 {
        return;
    }
    let now = payload::now_ns();
    let body: Bytes = payload::bodies(size, 1, now).pop().expect("one body");
    for _ in 0..room {
        d.next_id += 1;
        let msg = Message {
            id: MessageId::from_u64(d.next_id),
            timestamp: now as i64,
            attempts: 1,
            body: body.clone(),
        };
        write_message_frame(out, &msg);
        d.in_flight += 1;
    }
}

//! Test doubles: a fake nsqd that speaks enough protocol V2 (through the protocol crate's
//! `decode_command` and `frame`) to observe what a client sends, and a fake lookup that
//! answers `/lookup` with whatever the test sets. Both run on the test's glommio executor.
//!
//! [`real`] starts the real `broker` and `lookup` binaries instead, and reads their HTTP APIs.

#![allow(dead_code)]

pub mod real;
pub mod secure;

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpListener;
use protocol::frame::{write_frame, write_message_frame, FrameType};
use protocol::identify::{IdentifyLimits, IdentifyRequest, IdentifyResponse};
use protocol::{
    decode_command, Command, ConnPhase, DecodeContext, Message, MessageId, CLOSE_WAIT, HEARTBEAT,
    MAGIC_V2, OK,
};
use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Runs `f` on a fresh glommio executor in its own thread and waits for it.
pub fn run<F, Fut>(f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .expect("executor starts")
        .join()
        .expect("test body panicked");
}

/// Polls `cond` every few milliseconds until it holds or `timeout` passes.
pub async fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

pub const WAIT: Duration = Duration::from_secs(5);

/// How the fake answers the next PUB, MPUB or DPUB.
#[derive(Debug, Clone)]
pub enum PubReply {
    Ok,
    /// An error frame, then the connection is closed (publishing errors are fatal).
    Fatal(&'static str),
    /// A stray non-fatal error frame first, then OK.
    NonFatalThenOk,
    /// No answer at all.
    Silence,
}

#[derive(Default)]
struct ConnState {
    out: BytesMut,
    rdy: u64,
    in_flight: BTreeSet<MessageId>,
    closing: bool,
    /// Set to make the connection task drop the socket.
    kill: bool,
    dead: bool,
}

#[derive(Default)]
struct State {
    log: Vec<(usize, Command)>,
    conns: Vec<ConnState>,
    queue: VecDeque<Message>,
    next_id: u64,
    max_rdy_count: u64,
    pub_replies: VecDeque<PubReply>,
}

/// A fake nsqd on 127.0.0.1 and an ephemeral port.
#[derive(Clone)]
pub struct FakeNsqd {
    pub addr: String,
    state: Rc<RefCell<State>>,
}

impl FakeNsqd {
    pub fn start() -> FakeNsqd {
        Self::start_with_max_rdy(2500)
    }

    pub fn start_with_max_rdy(max_rdy_count: u64) -> FakeNsqd {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let state = Rc::new(RefCell::new(State {
            max_rdy_count,
            next_id: 1,
            ..State::default()
        }));
        let st = state.clone();
        glommio::spawn_local(async move {
            while let Ok(stream) = listener.accept().await {
                let idx = {
                    let mut s = st.borrow_mut();
                    s.conns.push(ConnState::default());
                    s.conns.len() - 1
                };
                glommio::spawn_local(serve(st.clone(), idx, stream)).detach();
            }
        })
        .detach();
        FakeNsqd { addr, state }
    }

    /// Queues a message for delivery; `attempts_so_far` deliveries are assumed to have
    /// happened already (the delivery will carry one more).
    pub fn push_message(&self, body: &str, attempts_so_far: u16) -> MessageId {
        let mut s = self.state.borrow_mut();
        let id = MessageId::from_u64(s.next_id);
        s.next_id += 1;
        s.queue.push_back(Message {
            id,
            timestamp: 1,
            attempts: attempts_so_far,
            body: Bytes::copy_from_slice(body.as_bytes()),
        });
        drop(s);
        deliver_all(&self.state);
        id
    }

    pub fn set_pub_replies(&self, replies: Vec<PubReply>) {
        self.state.borrow_mut().pub_replies = replies.into();
    }

    pub fn commands(&self) -> Vec<(usize, Command)> {
        self.state.borrow().log.clone()
    }

    /// Commands seen on connection `idx`, in order.
    pub fn commands_on(&self, idx: usize) -> Vec<Command> {
        self.state
            .borrow()
            .log
            .iter()
            .filter(|(i, _)| *i == idx)
            .map(|(_, c)| c.clone())
            .collect()
    }

    pub fn count(&self, pred: impl Fn(&Command) -> bool) -> usize {
        self.state
            .borrow()
            .log
            .iter()
            .filter(|(_, c)| pred(c))
            .count()
    }

    pub fn connections(&self) -> usize {
        self.state.borrow().conns.len()
    }

    pub fn is_dead(&self, idx: usize) -> bool {
        self.state.borrow().conns.get(idx).is_some_and(|c| c.dead)
    }

    pub fn send_heartbeat(&self, idx: usize) {
        if let Some(c) = self.state.borrow_mut().conns.get_mut(idx) {
            write_frame(&mut c.out, FrameType::Response, HEARTBEAT);
        }
    }

    /// Drops connection `idx` as a crashing broker would.
    pub fn kill(&self, idx: usize) {
        if let Some(c) = self.state.borrow_mut().conns.get_mut(idx) {
            c.kill = true;
        }
    }

    pub fn rdy_of(&self, idx: usize) -> u64 {
        self.state.borrow().conns.get(idx).map_or(0, |c| c.rdy)
    }
}

fn deliver_all(state: &Rc<RefCell<State>>) {
    let mut s = state.borrow_mut();
    let n = s.conns.len();
    for idx in 0..n {
        loop {
            let c = &s.conns[idx];
            if c.dead || c.closing || c.in_flight.len() as u64 >= c.rdy || s.queue.is_empty() {
                break;
            }
            let Some(mut m) = s.queue.pop_front() else {
                break;
            };
            m.attempts += 1;
            let c = &mut s.conns[idx];
            c.in_flight.insert(m.id);
            write_message_frame(&mut c.out, &m);
        }
    }
}

async fn serve(state: Rc<RefCell<State>>, idx: usize, stream: glommio::net::TcpStream) {
    let (mut r, mut w) = futures_lite::io::split(stream);
    let writer_state = state.clone();
    glommio::spawn_local(async move {
        loop {
            let (out, stop) = {
                let mut s = writer_state.borrow_mut();
                let c = &mut s.conns[idx];
                (c.out.split(), c.kill || c.dead)
            };
            if !out.is_empty() && w.write_all(&out).await.is_err() {
                break;
            }
            if stop {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(2)).await;
        }
        let _ = w.close().await;
        writer_state.borrow_mut().conns[idx].dead = true;
    })
    .detach();

    let mut magic = [0u8; 4];
    if r.read_exact(&mut magic).await.is_err() || &magic != MAGIC_V2 {
        state.borrow_mut().conns[idx].dead = true;
        return;
    }
    let mut buf = BytesMut::new();
    let mut ctx = DecodeContext::default();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        loop {
            match decode_command(&mut buf, &ctx) {
                Ok(Some(cmd)) => {
                    if !handle(&state, idx, &mut ctx, cmd) {
                        state.borrow_mut().conns[idx].kill = true;
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let mut s = state.borrow_mut();
                    let c = &mut s.conns[idx];
                    write_frame(&mut c.out, FrameType::Error, e.frame_text().as_bytes());
                    c.kill = true;
                    return;
                }
            }
        }
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                state.borrow_mut().conns[idx].kill = true;
                return;
            }
            Ok(n) => n,
        };
        if state.borrow().conns[idx].kill {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Answers one command; false closes the connection.
fn handle(state: &Rc<RefCell<State>>, idx: usize, ctx: &mut DecodeContext, cmd: Command) -> bool {
    let mut s = state.borrow_mut();
    s.log.push((idx, cmd.clone()));
    let max_rdy = s.max_rdy_count;
    let mut keep = true;
    match &cmd {
        Command::Identify(body) => {
            let req = IdentifyRequest::parse(body).unwrap_or_default();
            let limits = IdentifyLimits::default();
            let negotiated = req.negotiate(&limits);
            let c = &mut s.conns[idx];
            match negotiated {
                Ok(n) => {
                    let resp = IdentifyResponse::new(&n, &limits, max_rdy, false);
                    write_frame(&mut c.out, FrameType::Response, &resp.to_json());
                }
                Err(e) => {
                    write_frame(&mut c.out, FrameType::Error, e.frame_text().as_bytes());
                    keep = false;
                }
            }
        }
        Command::Sub { .. } => {
            ctx.phase = ConnPhase::Subscribed;
            write_frame(&mut s.conns[idx].out, FrameType::Response, OK);
        }
        Command::Pub { .. } | Command::Mpub { .. } | Command::Dpub { .. } => {
            let reply = s.pub_replies.pop_front().unwrap_or(PubReply::Ok);
            let c = &mut s.conns[idx];
            match reply {
                PubReply::Ok => write_frame(&mut c.out, FrameType::Response, OK),
                PubReply::Fatal(text) => {
                    write_frame(&mut c.out, FrameType::Error, text.as_bytes());
                    keep = false;
                }
                PubReply::NonFatalThenOk => {
                    write_frame(&mut c.out, FrameType::Error, b"E_FIN_FAILED FIN x failed");
                    write_frame(&mut c.out, FrameType::Response, OK);
                }
                PubReply::Silence => {}
            }
        }
        Command::Rdy(n) => s.conns[idx].rdy = *n,
        Command::Fin(id) => {
            let c = &mut s.conns[idx];
            if !c.in_flight.remove(id) {
                let text = format!("E_FIN_FAILED FIN {id} failed ID not in flight");
                write_frame(&mut c.out, FrameType::Error, text.as_bytes());
            }
        }
        Command::Req { id, .. } => {
            // Not redelivered: tests read the delay from the log and push what they need.
            s.conns[idx].in_flight.remove(id);
        }
        Command::Cls => {
            ctx.phase = ConnPhase::Closing;
            let c = &mut s.conns[idx];
            c.closing = true;
            write_frame(&mut c.out, FrameType::Response, CLOSE_WAIT);
        }
        Command::Touch(_) | Command::Nop | Command::Auth(_) => {}
    }
    drop(s);
    deliver_all(state);
    keep
}

/// A fake lookup: answers every `GET /lookup` with the producers currently set.
#[derive(Clone)]
pub struct FakeLookupd {
    pub addr: String,
    producers: Rc<RefCell<Vec<String>>>,
    pub queries: Rc<RefCell<usize>>,
}

impl FakeLookupd {
    pub fn start() -> FakeLookupd {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let producers: Rc<RefCell<Vec<String>>> = Rc::default();
        let queries: Rc<RefCell<usize>> = Rc::default();
        let (p, q) = (producers.clone(), queries.clone());
        glommio::spawn_local(async move {
            while let Ok(mut stream) = listener.accept().await {
                let p = p.clone();
                let q = q.clone();
                glommio::spawn_local(async move {
                    let mut req = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&chunk[..n]),
                        }
                    }
                    *q.borrow_mut() += 1;
                    let list: Vec<String> = p
                        .borrow()
                        .iter()
                        .map(|a| {
                            let (host, port) = a.rsplit_once(':').unwrap_or((a, "0"));
                            format!(
                                r#"{{"remote_address":"{a}","hostname":"fake","broadcast_address":"{host}","tcp_port":{port},"http_port":1,"version":"1.3.0"}}"#
                            )
                        })
                        .collect();
                    let body = format!(r#"{{"channels":["ch"],"producers":[{}]}}"#, list.join(","));
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(resp.as_bytes()).await;
                    let _ = stream.close().await;
                })
                .detach();
            }
        })
        .detach();
        FakeLookupd {
            addr,
            producers,
            queries,
        }
    }

    pub fn set_producers(&self, addrs: &[&str]) {
        *self.producers.borrow_mut() = addrs.iter().map(|s| s.to_string()).collect();
    }
}

//! One connection to one broker, over any stream that implements futures-lite's
//! `AsyncRead + AsyncWrite`.
//!
//! A connection's life:
//!
//! 1. [`crate::handshake::handshake`] writes the magic `"  V2"` and IDENTIFY (with
//!    `feature_negotiation`), reads the answer (JSON, or `OK` from a broker without
//!    negotiation), switches on TLS and compression as negotiated, sends AUTH when the broker
//!    requires it, and, for a consumer, SUBs; it returns the stream with its layers
//!    ([`crate::transport::Transport`]).
//! 2. [`Conn::start`] splits the stream and returns a [`Conn`] handle plus a *driver* future.
//!    The driver runs the reader and the writer until the connection ends; whoever owns the
//!    connection spawns or awaits it on whatever executor they use. This module names no
//!    runtime.
//! 3. The reader cuts frames with [`protocol::decode_frame`] and routes them:
//!    - `_heartbeat_` is answered with `NOP` at once (the guide's convention);
//!    - other responses and errors complete the oldest command still waiting for one
//!      ([`Conn::request`]): the broker answers in order, so replies match commands FIFO and
//!      several commands may be outstanding (pipelining);
//!    - `E_FIN_FAILED`, `E_REQ_FAILED` and `E_TOUCH_FAILED` answer commands that expect no
//!      reply, so they never complete a waiting command; they go to the event callback, as do
//!      messages and anything nobody waits for;
//!    - any other error is fatal (the broker closes after it), so the connection stops
//!      accepting commands at once and callers move on to a new one.
//! 4. The writer sends whatever [`Conn::send`] and [`Conn::request`] queued, batching what
//!    piled up while the previous write was in flight.
//! 5. When the driver ends, for whatever reason, every waiting command fails with the cause
//!    and later commands fail with [`Error::Closed`].

use crate::error::{Error, Result};
pub use crate::handshake::{handshake, Handshake};
use bytes::{Bytes, BytesMut};
use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use nsq_common::local_sync::{oneshot, Receiver, Sender};
use protocol::identify::IdentifyResponse;
use protocol::{decode_frame, Command, ErrorCode, Frame, Message, HEARTBEAT, OK};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Largest frame accepted from a broker: a guard against a peer that is not one.
pub const MAX_FRAME_SIZE: u32 = 64 * 1024 * 1024;
/// What nsqd allows when it does not say (no feature negotiation), per the client guide.
pub const DEFAULT_MAX_RDY_COUNT: u64 = 2500;
const READ_CHUNK: usize = 64 * 1024;

/// Something the reader saw that no command was waiting for.
#[derive(Debug)]
pub enum Event {
    /// A message for this connection's subscription.
    Message(Message),
    /// A non-fatal error (`E_FIN_FAILED`, `E_REQ_FAILED`, `E_TOUCH_FAILED`), or an error frame
    /// that answered no waiting command.
    Error(Error),
    /// A response frame that answered no waiting command.
    Response(Bytes),
}

/// What a frame read while waiting for the answer to a command means: `None` for a heartbeat
/// (answer it with `NOP` and read on), else the answer or the broker's error. Shared by
/// [`crate::handshake`] and [`crate::blocking`].
pub(crate) fn answer_of(frame: Frame) -> Option<Result<Bytes>> {
    match frame {
        Frame::Response(data) if data == HEARTBEAT => None,
        Frame::Response(data) => Some(Ok(data)),
        Frame::Error(data) => Some(Err(Error::from_error_frame(&data))),
        Frame::Message(_) => Some(Err(Error::UnexpectedResponse(Bytes::from_static(
            b"message frame where an answer was expected",
        )))),
    }
}

/// Reads what the socket has into `scratch`, then onto the end of `buf`; 0 means end of
/// stream. Reading through a scratch buffer zeroed once costs a copy of what arrived, where
/// growing `buf` by a zeroed chunk before every read costs a memset of the whole chunk for each
/// answer of a few bytes a synchronous publisher reads. Public for shard-bench's sink, which
/// reads its connections the same way.
pub async fn read_more<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    scratch: &mut [u8],
) -> std::io::Result<usize> {
    let n = r.read(scratch).await?;
    buf.extend_from_slice(&scratch[..n]);
    Ok(n)
}

/// The IDENTIFY answer: `OK` (no negotiation) or JSON. A JSON answer from an older broker may
/// lack fields, so only `max_rdy_count` is required of it.
pub(crate) fn parse_identify_answer(answer: &[u8]) -> Result<(u64, Option<IdentifyResponse>)> {
    if answer == OK {
        return Ok((DEFAULT_MAX_RDY_COUNT, None));
    }
    if let Ok(full) = serde_json::from_slice::<IdentifyResponse>(answer) {
        return Ok((full.max_rdy_count, Some(full)));
    }
    let v: serde_json::Value = serde_json::from_slice(answer)?;
    let max = v
        .get("max_rdy_count")
        .and_then(|m| m.as_u64())
        .unwrap_or(DEFAULT_MAX_RDY_COUNT);
    Ok((max, None))
}

/// A handle on a running connection. Cheap to clone; all clones talk to the same socket.
#[derive(Clone)]
pub struct Conn {
    shared: Rc<RefCell<Shared>>,
}

struct Shared {
    /// Encoded commands not yet handed to the socket.
    out: BytesMut,
    writer_waker: Option<Waker>,
    /// Commands that expect a response, oldest first.
    pending: VecDeque<Sender<Result<Bytes>>>,
    /// Set by [`Conn::close`]: flush `out`, then shut the write side.
    closing: bool,
    /// Set once the driver has ended.
    closed: bool,
}

/// The answer to one [`Conn::request`]: the response frame's data, or the error.
pub struct Reply(Receiver<Result<Bytes>>);

impl Future for Reply {
    type Output = Result<Bytes>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Bytes>> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

impl Conn {
    /// Starts the connection on a stream that went through [`handshake`]. `on_event` is called
    /// by the reader, in order, for every [`Event`]; it must not block. The returned future is
    /// the driver: it must be polled (spawned or awaited) for anything to move, and it ends
    /// with `Ok(())` after [`Conn::close`] or with the error that ended the connection.
    pub fn start<S, F>(
        stream: S,
        handshake: Handshake,
        on_event: F,
    ) -> (Conn, impl Future<Output = Result<()>>)
    where
        S: AsyncRead + AsyncWrite + Unpin + 'static,
        F: FnMut(&Conn, Event) + 'static,
    {
        let conn = Conn {
            shared: Rc::new(RefCell::new(Shared {
                out: BytesMut::new(),
                writer_waker: None,
                pending: VecDeque::new(),
                closing: false,
                closed: false,
            })),
        };
        let (r, w) = futures_lite::io::split(stream);
        let reader = read_loop(conn.clone(), r, handshake.read_buf, on_event);
        let writer = write_loop(conn.clone(), w);
        let guard = conn.clone();
        let driver = async move {
            let result = future::or(reader, writer).await;
            guard.shut_down(result.as_ref().err().cloned().unwrap_or(Error::Closed));
            result
        };
        (conn, driver)
    }

    /// Queues a command that expects no response (RDY, FIN, REQ, TOUCH, NOP).
    pub fn send(&self, cmd: &Command) -> Result<()> {
        let waker = {
            let mut s = self.shared.borrow_mut();
            if s.closing || s.closed {
                return Err(Error::Closed);
            }
            cmd.encode(&mut s.out);
            s.writer_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Queues a command that expects a response (PUB, MPUB, DPUB, CLS) and returns the future
    /// of that response. Responses are matched to requests in the order they were queued.
    pub fn request(&self, cmd: &Command) -> Result<Reply> {
        let (tx, rx) = oneshot();
        let waker = {
            let mut s = self.shared.borrow_mut();
            if s.closing || s.closed {
                return Err(Error::Closed);
            }
            cmd.encode(&mut s.out);
            s.pending.push_back(tx);
            s.writer_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(Reply(rx))
    }

    /// Asks the driver to write out what is queued, shut the write side and end.
    pub fn close(&self) {
        let waker = {
            let mut s = self.shared.borrow_mut();
            s.closing = true;
            s.writer_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// True once [`Conn::close`] was called or the driver ended.
    pub fn is_closed(&self) -> bool {
        let s = self.shared.borrow();
        s.closing || s.closed
    }

    /// Number of commands waiting for a response.
    pub fn pending_requests(&self) -> usize {
        self.shared.borrow().pending.len()
    }

    /// True when both handles talk to the same connection.
    pub fn same_as(&self, other: &Conn) -> bool {
        Rc::ptr_eq(&self.shared, &other.shared)
    }

    fn shut_down(&self, cause: Error) {
        let pending = {
            let mut s = self.shared.borrow_mut();
            s.closed = true;
            s.out.clear();
            std::mem::take(&mut s.pending)
        };
        for tx in pending {
            tx.send(Err(cause.clone()));
        }
    }

    fn complete_oldest(&self, reply: Result<Bytes>) -> Option<Result<Bytes>> {
        let tx = self.shared.borrow_mut().pending.pop_front();
        match tx {
            Some(tx) => {
                tx.send(reply);
                None
            }
            None => Some(reply),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Whoever still waits learns the connection is gone (their Sender drops → Closed).
        self.pending.clear();
    }
}

async fn read_loop<R, F>(conn: Conn, mut r: R, mut buf: BytesMut, mut on_event: F) -> Result<()>
where
    R: AsyncRead + Unpin,
    F: FnMut(&Conn, Event),
{
    let mut scratch = vec![0u8; READ_CHUNK];
    loop {
        crate::clock::for_one_read(|| -> Result<()> {
            while let Some(frame) = decode_frame(&mut buf, MAX_FRAME_SIZE)? {
                route_frame(&conn, frame, &mut on_event);
            }
            Ok(())
        })?;
        if read_more(&mut r, &mut buf, &mut scratch).await? == 0 {
            return Err(Error::Closed);
        }
    }
}

fn route_frame<F: FnMut(&Conn, Event)>(conn: &Conn, frame: Frame, on_event: &mut F) {
    match frame {
        Frame::Message(m) => on_event(conn, Event::Message(m)),
        Frame::Response(data) if data == HEARTBEAT => {
            // A closing connection cannot send; the broker will drop it soon anyway.
            let _ = conn.send(&Command::Nop);
        }
        Frame::Response(data) => {
            if let Some(Ok(data)) = conn.complete_oldest(Ok(data)) {
                on_event(conn, Event::Response(data));
            }
        }
        Frame::Error(data) => {
            let err = Error::from_error_frame(&data);
            let non_fatal = matches!(
                err.code(),
                Some(ErrorCode::FinFailed | ErrorCode::ReqFailed | ErrorCode::TouchFailed)
            );
            if non_fatal {
                on_event(conn, Event::Error(err));
                return;
            }
            // Every other error is fatal: the broker closes the connection after it. Stop
            // queueing commands on it now, so the next one goes to a fresh connection.
            conn.close();
            if let Some(Err(err)) = conn.complete_oldest(Err(err)) {
                on_event(conn, Event::Error(err));
            }
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(conn: Conn, mut w: W) -> Result<()> {
    loop {
        let next = future::poll_fn(|cx| {
            let mut s = conn.shared.borrow_mut();
            if !s.out.is_empty() {
                return Poll::Ready(Some(s.out.split().freeze()));
            }
            if s.closing || s.closed {
                return Poll::Ready(None);
            }
            s.writer_waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        match next {
            Some(bytes) => {
                w.write_all(&bytes).await?;
                w.flush().await?;
            }
            None => {
                // Best effort: the peer may already be gone.
                let _ = w.close().await;
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_answer_forms() {
        assert_eq!(parse_identify_answer(b"OK").unwrap(), (2500, None));
        let (max, full) = parse_identify_answer(br#"{"max_rdy_count":50,"version":"0.2.20"}"#)
            .expect("old-style answer");
        assert_eq!((max, full), (50, None));
        let json = br#"{"max_rdy_count":7,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#;
        let (max, full) = parse_identify_answer(json).expect("full answer");
        assert_eq!(max, 7);
        assert_eq!(full.map(|f| f.msg_timeout), Some(60000));
        assert!(parse_identify_answer(b"{nope").is_err());
    }
}

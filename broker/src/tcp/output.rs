//! A connection's output buffer: the frames waiting for the writer (responses, error frames,
//! heartbeats, the message frames delivered to it), when they are due, and the writer's
//! wake-up.
//!
//! Invariants: frames stay in the order they were buffered: the reader sends due frames
//! itself ([`Output::send_now`]) only while the writer has taken nothing it has not written.
//! A frame that is not a message is due at once and takes every frame buffered before it
//! along. Message frames are due at once when the consumer can take no more, when holding is
//! off or when the buffer reached its size; else they are held, and due
//! [`OutputBuffer::timeout`] after the first of them was buffered. Taking the buffer
//! ([`Output::drain`]) leaves nothing held or due.

use bytes::BytesMut;
use nsq_common::local_sync::{Notified, Notify};
use protocol::frame::write_frame;
use protocol::FrameType;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

/// How a connection holds message frames (IDENTIFY's negotiated `output_buffer_size` and
/// `output_buffer_timeout`, or the broker's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OutputBuffer {
    /// Write once this many bytes are buffered.
    pub size: usize,
    /// Longest a message frame is held; `None`: never held (timeout -1, size -1, or 0).
    pub timeout: Option<Duration>,
}

impl OutputBuffer {
    /// From negotiated values: a timeout of 0 ms (IDENTIFY's -1) or a size of 1 (its -1)
    /// hold nothing.
    pub fn new(size: u64, timeout_ms: u64) -> OutputBuffer {
        let holds = timeout_ms > 0 && size > 1;
        OutputBuffer {
            size: usize::try_from(size).unwrap_or(usize::MAX),
            timeout: holds.then(|| Duration::from_millis(timeout_ms)),
        }
    }
}

/// The frames a connection's writer is to write, and when.
pub(super) struct Output {
    buf: RefCell<BytesMut>,
    /// How message frames are held in `buf`.
    holding: Cell<OutputBuffer>,
    /// Something in `buf` is to be written at once (a response, or the consumer is full).
    flush_now: Cell<bool>,
    /// When the oldest message frame held in `buf` was buffered (`None`: nothing held).
    held_since: Cell<Option<Instant>>,
    /// Bytes of message frames in `buf`, not yet taken by the writer.
    unsent_deliveries: Cell<u64>,
    wake_writer: Notify,
    /// The writer has taken bytes it has not finished writing.
    writing: Cell<bool>,
}

impl Output {
    pub(super) fn new(holding: OutputBuffer) -> Output {
        Output {
            buf: RefCell::new(BytesMut::new()),
            holding: Cell::new(holding),
            flush_now: Cell::new(false),
            held_since: Cell::new(None),
            unsent_deliveries: Cell::new(0),
            wake_writer: Notify::new(),
            writing: Cell::new(false),
        }
    }

    /// How message frames are held.
    pub(super) fn holding(&self) -> OutputBuffer {
        self.holding.get()
    }

    /// Holds the message frames delivered from now on as `holding` says (IDENTIFY).
    pub(super) fn set_holding(&self, holding: OutputBuffer) {
        self.holding.set(holding);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.buf.borrow().is_empty()
    }

    /// Wakes the writer (something is due, the layers have output, or the connection closed).
    pub(super) fn wake_writer(&self) {
        self.wake_writer.notify();
    }

    /// The writer's wake-up.
    pub(super) fn writer_woken(&self) -> Notified<'_> {
        self.wake_writer.notified()
    }

    /// Buffers a frame that is not a message: due at once, with whatever was held before it.
    pub(super) fn push_frame(&self, kind: FrameType, data: &[u8]) {
        write_frame(&mut self.buf.borrow_mut(), kind, data);
        self.flush_now.set(true);
        self.wake_writer.notify();
    }

    /// Makes held message frames due at once (the client sent RDY 0: it takes no more).
    pub(super) fn flush_held(&self) {
        if self.held_since.get().is_some() && !self.flush_now.get() {
            self.flush_now.set(true);
            self.wake_writer.notify();
        }
    }

    /// Buffers message frames (see the module doc for when they are due). An empty buffer is
    /// replaced by the frames' buffer instead of copied into.
    pub(super) fn deliver(&self, frames: BytesMut, full: bool) {
        self.unsent_deliveries
            .set(self.unsent_deliveries.get() + frames.len() as u64);
        let buffered = {
            let mut out = self.buf.borrow_mut();
            if out.is_empty() {
                *out = frames;
            } else {
                out.extend_from_slice(&frames);
            }
            out.len()
        };
        let ob = self.holding.get();
        if full || ob.timeout.is_none() || buffered >= ob.size {
            if !self.flush_now.replace(true) {
                self.wake_writer.notify();
            }
        } else if self.held_since.get().is_none() {
            // The first frame held: the writer arms its timer. (Held already: it waits for
            // that deadline and needs no wake-up.)
            self.held_since.set(Some(Instant::now()));
            self.wake_writer.notify();
        }
    }

    /// Whether the buffer is due at `now`: a frame is to go at once, `layered` (the layers
    /// have output of their own), or the held frames' timeout passed.
    pub(super) fn due(&self, now: Instant, layered: impl FnOnce() -> bool) -> bool {
        if self.flush_now.get() || layered() {
            return true;
        }
        match (self.held_since.get(), self.holding.get().timeout) {
            (Some(since), Some(timeout)) => now >= since + timeout,
            // Frames nobody holds (cannot happen: every push sets one or the other).
            _ => !self.buf.borrow().is_empty(),
        }
    }

    /// When the held message frames must be written, if any are held.
    pub(super) fn hold_deadline(&self) -> Option<Instant> {
        let since = self.held_since.get()?;
        Some(since + self.holding.get().timeout?)
    }

    /// The writer takes the buffer: `take` gets it (and leaves in it what is not taken),
    /// and nothing is held or due any more.
    pub(super) fn drain<R>(&self, take: impl FnOnce(&mut BytesMut) -> R) -> R {
        let taken = take(&mut self.buf.borrow_mut());
        self.flush_now.set(false);
        self.held_since.set(None);
        taken
    }

    /// The writer took bytes and is writing them (`true`), or is done (`false`).
    pub(super) fn set_writing(&self, writing: bool) {
        self.writing.set(writing);
    }

    /// Gives what is due to `send` (one non-blocking send, which returns the bytes that went)
    /// when the writer is not writing and no message frame is buffered: what `send` does not
    /// take stays, in order, for the writer (already woken by the frame that made it due).
    /// Whether all of it went.
    pub(super) fn send_now(&self, send: impl FnOnce(&[u8]) -> Option<usize>) -> bool {
        if self.writing.get() || !self.flush_now.get() || self.unsent_deliveries.get() > 0 {
            return false;
        }
        let (sent, len) = {
            let buf = self.buf.borrow();
            if buf.is_empty() {
                return false;
            }
            (send(&buf).unwrap_or(0), buf.len())
        };
        if sent >= len {
            self.drain(|buf| buf.clear());
            return true;
        }
        bytes::Buf::advance(&mut *self.buf.borrow_mut(), sent);
        false
    }

    /// Bytes of message frames the writer took since it last asked.
    pub(super) fn take_unsent_deliveries(&self) -> u64 {
        self.unsent_deliveries.replace(0)
    }

    /// Everything buffered, taken out whole (the layers going on take it as their first
    /// plaintext).
    pub(super) fn take_all(&self) -> BytesMut {
        std::mem::take(&mut *self.buf.borrow_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output() -> Output {
        Output::new(OutputBuffer::new(16 * 1024, 250))
    }

    fn frame(kind: FrameType, data: &[u8]) -> Vec<u8> {
        let mut b = BytesMut::new();
        write_frame(&mut b, kind, data);
        b.to_vec()
    }

    /// A send that takes at most `room` bytes and records them in `sent`.
    fn socket<'a>(sent: &'a mut Vec<u8>, room: usize) -> impl FnOnce(&[u8]) -> Option<usize> + 'a {
        move |bytes| {
            let n = bytes.len().min(room);
            sent.extend_from_slice(&bytes[..n]);
            (n > 0).then_some(n)
        }
    }

    #[test]
    fn send_now_sends_a_due_response_and_leaves_nothing_due() {
        let out = output();
        out.push_frame(FrameType::Response, b"OK");
        let mut sent = Vec::new();
        assert!(out.send_now(socket(&mut sent, usize::MAX)));
        assert_eq!(sent, frame(FrameType::Response, b"OK"));
        assert!(out.is_empty());
        assert!(!out.due(Instant::now(), || false));
    }

    #[test]
    fn send_now_leaves_the_buffer_to_a_writer_that_is_writing() {
        let out = output();
        out.set_writing(true);
        out.push_frame(FrameType::Response, b"OK");
        let mut sent = Vec::new();
        assert!(!out.send_now(socket(&mut sent, usize::MAX)));
        assert!(sent.is_empty(), "sent past the writer");
        out.set_writing(false);
        assert!(out.send_now(socket(&mut sent, usize::MAX)));
        assert_eq!(sent, frame(FrameType::Response, b"OK"));
    }

    #[test]
    fn send_now_never_sends_message_frames() {
        let out = output();
        out.deliver(
            BytesMut::from(&frame(FrameType::Message, b"a message")[..]),
            true,
        );
        out.push_frame(FrameType::Response, b"OK");
        let mut sent = Vec::new();
        assert!(!out.send_now(socket(&mut sent, usize::MAX)));
        assert!(sent.is_empty());
        assert!(
            out.due(Instant::now(), || false),
            "still due for the writer"
        );
    }

    #[test]
    fn what_the_socket_does_not_take_stays_in_order_for_the_writer() {
        let out = output();
        out.push_frame(FrameType::Response, b"OK");
        out.push_frame(FrameType::Error, b"E_INVALID x");
        let whole = [
            frame(FrameType::Response, b"OK"),
            frame(FrameType::Error, b"E_INVALID x"),
        ]
        .concat();
        // Nothing taken: all of it stays.
        let mut sent = Vec::new();
        assert!(!out.send_now(socket(&mut sent, 0)));
        assert!(sent.is_empty());
        // Part taken: the rest stays, due, in order.
        assert!(!out.send_now(socket(&mut sent, 7)));
        assert!(out.due(Instant::now(), || false), "the rest is due");
        let rest = out.drain(|b| b.to_vec());
        assert_eq!([sent, rest].concat(), whole);
    }
}

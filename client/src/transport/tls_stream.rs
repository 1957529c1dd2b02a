//! rustls driven over any futures-lite `AsyncRead + AsyncWrite` stream: [`TlsStream`]
//! decrypts what it reads and encrypts what it writes, with rustls used sans-IO
//! (`read_tls` / `process_new_packets` / `reader`, `writer` / `write_tls`).
//!
//! Invariants:
//! - plaintext already decrypted is handed out before the socket is read again, so rustls's
//!   receive buffer never fills;
//! - a write drains the records queued by the previous one before it accepts more
//!   (backpressure), and queues at most rustls's buffer limit;
//! - reading never writes to the socket (a reader and a writer may poll the same stream from
//!   two tasks); what a read makes rustls want to send (e.g. a key update) leaves with the
//!   next write or flush;
//! - a TLS error (bad record, failed certificate check) is an `InvalidData` error and the
//!   alert rustls queued for it is sent if the socket takes it without waiting.

use futures_lite::io::{AsyncRead, AsyncWrite};
use rustls::ClientConnection;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A client-side TLS session on `S`.
pub struct TlsStream<S> {
    io: S,
    tls: ClientConnection,
    /// close_notify is queued (once, however often `poll_close` is polled).
    closing: bool,
}

/// Lends a polled stream to rustls's synchronous `read_tls` / `write_tls`: `Pending` becomes
/// `WouldBlock` (the waker is registered by the poll).
struct Polled<'a, 'b, S> {
    io: &'a mut S,
    cx: &'a mut Context<'b>,
}

impl<S: AsyncRead + Unpin> Read for Polled<'_, '_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_read(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncWrite + Unpin> Write for Polled<'_, '_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.io).poll_flush(self.cx) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    /// Runs the handshake on `io` (the server's `OK` that follows it is read through the
    /// returned stream).
    pub async fn connect(io: S, tls: ClientConnection) -> io::Result<TlsStream<S>> {
        let mut s = TlsStream {
            io,
            tls,
            closing: false,
        };
        futures_lite::future::poll_fn(|cx| s.poll_handshake(cx)).await?;
        Ok(s)
    }

    /// The negotiated protocol version and cipher suite, e.g. `("TLSv1_3",
    /// "TLS13_AES_256_GCM_SHA384")`.
    pub fn session(&self) -> (String, String) {
        super::session_of(&self.tls)
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.tls.wants_write() {
                match self.poll_send(cx) {
                    Poll::Ready(Ok(())) => {}
                    other => return other,
                }
            }
            if !self.tls.is_handshaking() {
                return Pin::new(&mut self.io).poll_flush(cx);
            }
            let n = match self.tls.read_tls(&mut Polled {
                io: &mut self.io,
                cx,
            }) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            };
            if n == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed during the TLS handshake",
                )));
            }
            if let Err(e) = self.tls.process_new_packets() {
                // Tell the server why, if the socket takes it now.
                let _ = self.poll_send(cx);
                return Poll::Ready(Err(tls_error(e)));
            }
        }
    }

    /// Writes every queued TLS record; `Pending` while the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut Polled {
                io: &mut self.io,
                cx,
            }) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match this.tls.reader().read(buf) {
                // 0: the server's close_notify, a clean end.
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // UnexpectedEof: the socket ended without close_notify.
                Err(e) => return Poll::Ready(Err(e)),
            }
            match this.tls.read_tls(&mut Polled {
                io: &mut this.io,
                cx,
            }) {
                // End of the socket: rustls now reports it from `reader()`.
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
            if let Err(e) = this.tls.process_new_packets() {
                return Poll::Ready(Err(tls_error(e)));
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(Err(e)) = this.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        if this.tls.wants_write() {
            return Poll::Pending;
        }
        let n = this.tls.writer().write(buf)?;
        // Start sending now; what the socket does not take leaves with the next call.
        if let Poll::Ready(Err(e)) = this.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.tls.writer().flush()?;
        match this.poll_send(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.io).poll_flush(cx),
            other => other,
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            this.closing = true;
            this.tls.send_close_notify();
        }
        match this.poll_send(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.io).poll_close(cx),
            other => other,
        }
    }
}

//! What sits between the socket and the V2 frames once IDENTIFY negotiated it: TLS, then
//! compression on top of it (nsqd's order: the TLS handshake and its `OK`, then snappy or
//! deflate and their `OK` through the compressed stream).
//!
//! [`Transport`] is the async stream the connection code reads and writes: the socket, or
//! [`TlsStream`] over it, optionally with a [`Codec`] on top. [`sync`] is the same stack on
//! blocking std I/O for [`crate::blocking`]. Both compress with `protocol::compress`, as the
//! broker does.
//!
//! Invariants:
//! - with no layer on, a read or write goes straight to the socket (one `match`);
//! - a compressed read decompresses at most the caller's buffer from what one socket read
//!   brought, and reads the socket only when the decoder has nothing left to give, so memory
//!   stays bounded whatever the stream decompresses to;
//! - a compressed write encodes all it is given at once (one flushed block per write) and
//!   drains that before encoding the next;
//! - a corrupt compressed or TLS stream is an `InvalidData` error; a stream cut inside a
//!   compressed chunk is `UnexpectedEof`; nothing panics on what the peer sends.

pub mod sync;
mod tls_stream;

pub use tls_stream::TlsStream;

use futures_lite::io::{AsyncRead, AsyncWrite};
use protocol::compress::{Compression, Compressor, Decompressor};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// How much a compressed stream reads from the layer below at once.
const COMPRESSED_READ: usize = 64 * 1024;

/// The protocol version and cipher suite of a TLS session, as rustls names them.
pub(crate) fn session_of(tls: &rustls::ClientConnection) -> (String, String) {
    let version = tls
        .protocol_version()
        .map_or_else(String::new, |v| format!("{v:?}"));
    let suite = tls
        .negotiated_cipher_suite()
        .map_or_else(String::new, |s| format!("{:?}", s.suite()));
    (version, suite)
}

/// The socket, or TLS over it.
pub enum Lower<S> {
    Plain(S),
    Tls(Box<TlsStream<S>>),
}

/// The compression state of one connection: both directions, the encoded bytes not yet
/// written, and where reads from below land.
pub(crate) struct Codec {
    pub(crate) compression: Compression,
    pub(crate) enc: Compressor,
    pub(crate) dec: Decompressor,
    /// Encoded output; `out[out_pos..]` is not written yet.
    pub(crate) out: Vec<u8>,
    pub(crate) out_pos: usize,
    pub(crate) scratch: Box<[u8]>,
}

impl Codec {
    /// A codec whose decoder starts with `pending`: bytes read from below past the frame
    /// that switched compression on (the peer's compressed `OK` may come in the same read).
    pub(crate) fn new(compression: Compression, pending: &[u8]) -> io::Result<Codec> {
        let mut dec = Decompressor::new(compression);
        dec.feed(pending)?;
        Ok(Codec {
            compression,
            enc: Compressor::new(compression),
            dec,
            out: Vec::new(),
            out_pos: 0,
            scratch: vec![0; COMPRESSED_READ].into_boxed_slice(),
        })
    }

    /// After the decoder gave nothing: what a read of `m` bytes from below means.
    pub(crate) fn took(&mut self, m: usize) -> io::Result<()> {
        if m == 0 {
            return Ok(());
        }
        let (scratch, dec) = (&self.scratch, &mut self.dec);
        Ok(dec.feed(&scratch[..m])?)
    }

    /// Decompresses into `buf`; 0: more input is needed, or the stream ended.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(self.dec.read(buf)?)
    }

    /// The end of the stream below: clean, or cut inside a compressed chunk.
    pub(crate) fn end(&self) -> io::Result<usize> {
        if self.dec.buffered() > 0 {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside a compressed chunk",
            ))
        } else {
            Ok(0)
        }
    }

    /// Encodes `buf` into `out` (which must be drained).
    pub(crate) fn encode(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.clear();
        self.out_pos = 0;
        Ok(self.enc.compress(buf, &mut self.out)?)
    }

    pub(crate) fn drained(&self) -> bool {
        self.out_pos >= self.out.len()
    }
}

/// The stream a connection speaks V2 over.
pub struct Transport<S> {
    lower: Lower<S>,
    codec: Option<Box<Codec>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Transport<S> {
    /// The bare socket.
    pub fn plain(io: S) -> Transport<S> {
        Transport {
            lower: Lower::Plain(io),
            codec: None,
        }
    }

    /// Runs the TLS handshake over the socket (the first layer: nothing else may be on).
    pub async fn start_tls(self, tls: rustls::ClientConnection) -> io::Result<Transport<S>> {
        match (self.lower, self.codec) {
            (Lower::Plain(io), None) => Ok(Transport {
                lower: Lower::Tls(Box::new(TlsStream::connect(io, tls).await?)),
                codec: None,
            }),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TLS must be the first layer",
            )),
        }
    }

    /// Switches compression on; `pending` are bytes already read from the layer below past
    /// the last frame read in the clear.
    pub fn start_compression(&mut self, c: Compression, pending: &[u8]) -> io::Result<()> {
        if self.codec.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "compression is already on",
            ));
        }
        self.codec = Some(Box::new(Codec::new(c, pending)?));
        Ok(())
    }

    /// The TLS version and cipher suite, when TLS is on.
    pub fn tls_session(&self) -> Option<(String, String)> {
        match &self.lower {
            Lower::Tls(t) => Some(t.session()),
            Lower::Plain(_) => None,
        }
    }

    /// The compression on, if any.
    pub fn compression(&self) -> Option<Compression> {
        self.codec.as_ref().map(|c| c.compression)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Lower<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Lower::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Lower::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lower<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Lower::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Lower::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Lower::Plain(s) => Pin::new(s).poll_flush(cx),
            Lower::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Lower::Plain(s) => Pin::new(s).poll_close(cx),
            Lower::Tls(t) => Pin::new(t.as_mut()).poll_close(cx),
        }
    }
}

/// Writes `codec.out[out_pos..]` to `lower`.
fn poll_drain<S: AsyncRead + AsyncWrite + Unpin>(
    lower: &mut Lower<S>,
    codec: &mut Codec,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    while !codec.drained() {
        let n = ready!(Pin::new(&mut *lower).poll_write(cx, &codec.out[codec.out_pos..]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        codec.out_pos += n;
    }
    Poll::Ready(Ok(()))
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Transport<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let Some(codec) = this.codec.as_deref_mut() else {
            return Pin::new(&mut this.lower).poll_read(cx, buf);
        };
        loop {
            let n = codec.read(buf)?;
            if n > 0 || buf.is_empty() || codec.dec.ended() {
                return Poll::Ready(Ok(n));
            }
            let m = ready!(Pin::new(&mut this.lower).poll_read(cx, &mut codec.scratch))?;
            if m == 0 {
                return Poll::Ready(codec.end());
            }
            codec.took(m)?;
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Transport<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let Some(codec) = this.codec.as_deref_mut() else {
            return Pin::new(&mut this.lower).poll_write(cx, buf);
        };
        ready!(poll_drain(&mut this.lower, codec, cx))?;
        codec.encode(buf)?;
        // Start sending now; the rest leaves with the next write or flush.
        if let Poll::Ready(Err(e)) = poll_drain(&mut this.lower, codec, cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(codec) = this.codec.as_deref_mut() {
            ready!(poll_drain(&mut this.lower, codec, cx))?;
        }
        Pin::new(&mut this.lower).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(codec) = this.codec.as_deref_mut() {
            ready!(poll_drain(&mut this.lower, codec, cx))?;
        }
        Pin::new(&mut this.lower).poll_close(cx)
    }
}

//! The transport stack on blocking std I/O, for [`crate::blocking`]: a `TcpStream`, or
//! rustls's `StreamOwned` over it, optionally with a [`Codec`] on top. Same layers, same
//! order and same invariants as the async [`super::Transport`]; a read or write that the
//! socket's timeout or non-blocking mode cuts short returns that error with nothing lost
//! (rustls and the decoder keep what they were given).

use super::Codec;
use protocol::compress::Compression;
use rustls::{ClientConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::TcpStream;

/// The socket, or TLS over it.
enum Lower {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

/// A blocking connection's stream.
pub struct BlockingTransport {
    lower: Lower,
    codec: Option<Box<Codec>>,
}

impl BlockingTransport {
    pub fn plain(tcp: TcpStream) -> BlockingTransport {
        BlockingTransport {
            lower: Lower::Plain(tcp),
            codec: None,
        }
    }

    /// The socket underneath, for timeouts, non-blocking mode and shutdown.
    pub fn tcp(&self) -> &TcpStream {
        match &self.lower {
            Lower::Plain(s) => s,
            Lower::Tls(t) => &t.sock,
        }
    }

    /// Runs the TLS handshake over the socket (the first layer), bounded by the socket's
    /// timeouts.
    pub fn start_tls(self, mut tls: ClientConnection) -> io::Result<BlockingTransport> {
        let (Lower::Plain(mut tcp), None) = (self.lower, self.codec) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TLS must be the first layer",
            ));
        };
        while tls.is_handshaking() {
            let (read, _) = tls.complete_io(&mut tcp)?;
            if read == 0 && tls.is_handshaking() && !tls.wants_write() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed during the TLS handshake",
                ));
            }
        }
        while tls.wants_write() {
            tls.write_tls(&mut tcp)?;
        }
        Ok(BlockingTransport {
            lower: Lower::Tls(Box::new(StreamOwned::new(tls, tcp))),
            codec: None,
        })
    }

    /// The TLS version and cipher suite, when TLS is on.
    pub fn tls_session(&self) -> Option<(String, String)> {
        match &self.lower {
            Lower::Tls(t) => Some(super::session_of(&t.conn)),
            Lower::Plain(_) => None,
        }
    }

    /// Switches compression on; `pending` are bytes already read past the last clear frame.
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
}

impl Read for Lower {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Lower::Plain(s) => s.read(buf),
            Lower::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Lower {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Lower::Plain(s) => s.write(buf),
            Lower::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Lower::Plain(s) => s.flush(),
            Lower::Tls(t) => t.flush(),
        }
    }
}

fn drain(lower: &mut Lower, codec: &mut Codec) -> io::Result<()> {
    while !codec.drained() {
        let n = lower.write(&codec.out[codec.out_pos..])?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        codec.out_pos += n;
    }
    Ok(())
}

impl Read for BlockingTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(codec) = self.codec.as_deref_mut() else {
            return self.lower.read(buf);
        };
        loop {
            let n = codec.read(buf)?;
            if n > 0 || buf.is_empty() || codec.dec.ended() {
                return Ok(n);
            }
            let m = self.lower.read(&mut codec.scratch)?;
            if m == 0 {
                return codec.end();
            }
            codec.took(m)?;
        }
    }
}

impl Write for BlockingTransport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(codec) = self.codec.as_deref_mut() else {
            return self.lower.write(buf);
        };
        drain(&mut self.lower, codec)?;
        codec.encode(buf)?;
        drain(&mut self.lower, codec)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(codec) = self.codec.as_deref_mut() {
            drain(&mut self.lower, codec)?;
        }
        self.lower.flush()
    }
}

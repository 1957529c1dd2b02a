//! The layers IDENTIFY can put between a connection's socket and its V2 codec: TLS (rustls,
//! sans-IO `ServerConnection`) and one compression (snappy or deflate,
//! `protocol::compress`), stacked as nsqd stacks them:
//!
//! ```text
//! reader:  socket ─► scratch ─► [TLS: read_tls, decrypt] ─► [decompress, by budget] ─► rbuf ─► decode_command
//! writer:  out (frames) ─► [compress, sync flush] ─► [TLS: encrypt] ─► pending ─► socket
//! ```
//!
//! A plaintext connection has no [`Layers`] at all: its reader appends socket bytes to its
//! read buffer and its writer writes its output buffer as they did before, with no extra copy.
//!
//! Invariants: the writer sends [`Layers::pending`] in order, and its first bytes are the
//! plaintext that was in the output buffer when the layers went on (the IDENTIFY answer);
//! everything after goes through the layers. Input is decoded only as fast as the reader
//! takes it: [`Layers::pull`] yields at most its budget per call and the reader reads the
//! socket again only once the layers have nothing more to give, so what a decompression
//! bomb expands to never exceeds the command decoder's limits plus one budget. Any error
//! (a failed handshake, a corrupt record or stream) is final: the connection closes after
//! the writer sent what is pending (a TLS alert).

use crate::channel::TlsInfo;
use bytes::BytesMut;
use protocol::compress::{CompressError, Compressor, Decompressor};
use rustls::ServerConnection;
use std::io::{Read, Write};
use std::sync::Arc;

/// Largest TLS plaintext taken out of rustls at a time.
const PLAIN_CHUNK: usize = 16 * 1024;

/// Why a layered connection ends.
#[derive(Debug, thiserror::Error)]
pub(super) enum LayerError {
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("TLS: {0}")]
    TlsIo(std::io::Error),
    #[error("{0}")]
    Compress(#[from] CompressError),
}

/// What [`Layers::input`] saw besides plaintext.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct InputEvents {
    /// The peer closed TLS cleanly (close_notify): end of stream.
    pub closed: bool,
    /// TLS has bytes to send (handshake, alerts, tickets): the writer should run.
    pub wants_write: bool,
    /// The TLS handshake finished during this input.
    pub handshake_done: bool,
}

/// The compression IDENTIFY switched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Compression {
    Snappy,
    Deflate { level: u32 },
}

/// The TLS and compression state of one connection, shared by its reader and writer.
pub(super) struct Layers {
    tls: Option<ServerConnection>,
    decompress: Option<Decompressor>,
    compress: Option<Compressor>,
    /// Bytes for the socket, in order (see the module's invariants).
    pending: Vec<u8>,
    /// Compressed output on its way into TLS.
    staged: Vec<u8>,
    /// TLS plaintext on its way out of rustls.
    plain: Vec<u8>,
    handshaking: bool,
}

impl Layers {
    /// Layers with nothing on yet; `before` is what must reach the socket unchanged first.
    pub(super) fn new(before: BytesMut) -> Layers {
        Layers {
            tls: None,
            decompress: None,
            compress: None,
            pending: before.to_vec(),
            staged: Vec::new(),
            plain: Vec::new(),
            handshaking: false,
        }
    }

    /// Puts TLS on: from now on input is TLS records and output is encrypted (held until
    /// the handshake is done).
    pub(super) fn start_tls(
        &mut self,
        config: Arc<rustls::ServerConfig>,
    ) -> Result<(), LayerError> {
        let mut tls = ServerConnection::new(config)?;
        // Our own output window bounds what is written; rustls must not refuse part of it.
        tls.set_buffer_limit(None);
        self.tls = Some(tls);
        self.handshaking = true;
        Ok(())
    }

    /// Puts a compression on, inside TLS if that is on.
    pub(super) fn start_compression(&mut self, c: Compression) {
        let (dec, enc) = match c {
            Compression::Snappy => (Decompressor::snappy(), Compressor::snappy()),
            Compression::Deflate { level } => (Decompressor::deflate(), Compressor::deflate(level)),
        };
        self.decompress = Some(dec);
        self.compress = Some(enc);
    }

    /// The negotiated TLS, for /stats (after the handshake).
    pub(super) fn tls_info(&self) -> Option<TlsInfo> {
        let tls = self.tls.as_ref()?;
        Some(TlsInfo {
            version: tls
                .protocol_version()
                .map(crate::tls::version_name)
                .unwrap_or_default(),
            cipher_suite: tls
                .negotiated_cipher_suite()
                .map(|s| crate::tls::cipher_suite_name(s.suite()))
                .unwrap_or_default(),
            negotiated_protocol: tls
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default(),
        })
    }

    /// Takes bytes read from the socket. TLS is decrypted at once (rustls holds little);
    /// what comes out goes to the decompressor (decoded later, by [`Self::pull`]) or, with no
    /// compression, straight onto `rbuf`.
    pub(super) fn input(
        &mut self,
        mut data: &[u8],
        rbuf: &mut BytesMut,
    ) -> Result<InputEvents, LayerError> {
        let mut events = InputEvents::default();
        let Some(tls) = self.tls.as_mut() else {
            self.plain_input(data, rbuf)?;
            return Ok(events);
        };
        if self.plain.len() < PLAIN_CHUNK {
            self.plain.resize(PLAIN_CHUNK, 0);
        }
        while !data.is_empty() {
            tls.read_tls(&mut data).map_err(LayerError::TlsIo)?;
            let state = match tls.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    // The alert is in rustls's output: the writer sends it on close.
                    return Err(e.into());
                }
            };
            let readable = state.plaintext_bytes_to_read();
            let peer_closed = state.peer_has_closed();
            let mut left = readable;
            while left > 0 {
                let want = left.min(self.plain.len());
                let n = tls
                    .reader()
                    .read(&mut self.plain[..want])
                    .map_err(LayerError::TlsIo)?;
                if n == 0 {
                    break;
                }
                left -= n;
                match self.decompress.as_mut() {
                    Some(d) => d.feed(&self.plain[..n])?,
                    None => rbuf.extend_from_slice(&self.plain[..n]),
                }
            }
            if peer_closed {
                events.closed = true;
                break;
            }
        }
        if self.handshaking && !tls.is_handshaking() {
            self.handshaking = false;
            events.handshake_done = true;
        }
        events.wants_write = tls.wants_write();
        Ok(events)
    }

    /// Plaintext bytes (no TLS) into the codec's side: the decompressor, or `rbuf`.
    fn plain_input(&mut self, data: &[u8], rbuf: &mut BytesMut) -> Result<(), LayerError> {
        match self.decompress.as_mut() {
            Some(d) => d.feed(data)?,
            None => rbuf.extend_from_slice(data),
        }
        Ok(())
    }

    /// Decodes at most `budget` more bytes of compressed input onto `rbuf`; 0 when there is
    /// nothing more to decode until more input arrives.
    pub(super) fn pull(&mut self, rbuf: &mut BytesMut, budget: usize) -> Result<usize, LayerError> {
        match self.decompress.as_mut() {
            Some(d) => Ok(d.decompress(rbuf, budget)?),
            None => Ok(0),
        }
    }

    /// Sends `frames` (plaintext V2 frames) through the layers onto [`Self::pending`].
    pub(super) fn output(&mut self, frames: &[u8]) -> Result<(), LayerError> {
        let data: &[u8] = match (self.compress.as_mut(), self.tls.is_some()) {
            (Some(c), true) => {
                self.staged.clear();
                c.compress(frames, &mut self.staged)?;
                &self.staged
            }
            (Some(c), false) => {
                c.compress(frames, &mut self.pending)?;
                return Ok(());
            }
            (None, _) => frames,
        };
        match self.tls.as_mut() {
            Some(tls) => tls.writer().write_all(data).map_err(LayerError::TlsIo)?,
            None => self.pending.extend_from_slice(data),
        }
        Ok(())
    }

    /// Whether anything waits for the socket.
    pub(super) fn has_output(&self) -> bool {
        !self.pending.is_empty() || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Everything for the socket, in order, swapped into `into` (which must be empty).
    pub(super) fn take_output(&mut self, into: &mut Vec<u8>) -> Result<(), LayerError> {
        if let Some(tls) = self.tls.as_mut() {
            while tls.wants_write() {
                tls.write_tls(&mut self.pending)
                    .map_err(LayerError::TlsIo)?;
            }
        }
        std::mem::swap(&mut self.pending, into);
        Ok(())
    }

    /// Queues TLS's close_notify (a clean end the peer can tell from a cut connection).
    pub(super) fn close(&mut self) {
        if let Some(tls) = self.tls.as_mut() {
            if !self.handshaking {
                tls.send_close_notify();
            }
        }
    }
}

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
//! read buffer and its writer writes its output buffer as it is, with no extra copy.
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
use protocol::compress::{CompressError, Compression, Compressor, Decompressor};
use rustls::ServerConnection;
use std::io::{BufRead, Write};
use std::sync::Arc;

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

/// The TLS and compression state of one connection, shared by its reader and writer.
pub(super) struct Layers {
    tls: Option<ServerConnection>,
    decompress: Option<Decompressor>,
    compress: Option<Compressor>,
    /// Bytes for the socket, in order (see the module's invariants).
    pending: Vec<u8>,
    /// Compressed output on its way into TLS.
    staged: Vec<u8>,
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
        self.decompress = Some(Decompressor::new(c));
        self.compress = Some(Compressor::new(c));
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

    /// The subject common name of the certificate the client presented ("" without one), for
    /// the auth servers (after the handshake).
    pub(super) fn peer_common_name(&self) -> String {
        self.tls
            .as_ref()
            .and_then(|tls| tls.peer_certificates())
            .and_then(|chain| chain.first())
            .map(crate::tls::subject_common_name)
            .unwrap_or_default()
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
        while !data.is_empty() {
            tls.read_tls(&mut data).map_err(LayerError::TlsIo)?;
            // On an error the alert is in rustls's output: the writer sends it on close.
            let state = tls.process_new_packets()?;
            let peer_closed = state.peer_has_closed();
            // Decrypted records are copied once, from rustls's buffer to their next stop.
            let mut plain = tls.reader();
            loop {
                let chunk = match plain.fill_buf() {
                    Ok(chunk) if !chunk.is_empty() => chunk,
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(LayerError::TlsIo(e)),
                };
                let n = chunk.len();
                match self.decompress.as_mut() {
                    Some(d) => d.feed(chunk)?,
                    None => rbuf.extend_from_slice(chunk),
                }
                plain.consume(n);
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

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::ClientConnection;
    use std::io::Read;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn server_config() -> Arc<rustls::ServerConfig> {
        let cert = CertificateDer::from_pem_slice(include_bytes!("testdata/server.pem"))
            .expect("test certificate");
        let key =
            PrivateKeyDer::from_pem_slice(include_bytes!("testdata/server.key")).expect("test key");
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
        Arc::new(config)
    }

    fn client() -> ClientConnection {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(include_bytes!("testdata/ca.pem")).expect("CA"))
            .expect("root");
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").expect("name");
        ClientConnection::new(Arc::new(config), name).expect("client")
    }

    /// Moves bytes both ways until neither side has anything more to send.
    fn pump(client: &mut ClientConnection, layers: &mut Layers, rbuf: &mut BytesMut) {
        for _ in 0..20 {
            let mut to_server = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut to_server).expect("client write_tls");
            }
            if !to_server.is_empty() {
                layers.input(&to_server, rbuf).expect("server input");
            }
            let mut to_client = Vec::new();
            layers.take_output(&mut to_client).expect("server output");
            let mut rest = &to_client[..];
            while !rest.is_empty() {
                client.read_tls(&mut rest).expect("client read_tls");
                client.process_new_packets().expect("client process");
            }
            if to_server.is_empty() && to_client.is_empty() {
                return;
            }
        }
    }

    fn client_plaintext(client: &mut ClientConnection) -> Vec<u8> {
        let mut plain = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = client.reader().read(&mut buf) {
            if n == 0 {
                break;
            }
            plain.extend_from_slice(&buf[..n]);
        }
        plain
    }

    #[test]
    fn tls_then_deflate_stack_in_nsqds_order_and_input_comes_out_by_the_budget() {
        let mut layers = Layers::new(BytesMut::from(&b"answer"[..]));
        layers.start_tls(server_config()).expect("tls");
        layers.output(b"OK1").expect("through TLS");
        layers.start_compression(Compression::Deflate { level: 6 });
        layers.output(b"OK2").expect("through deflate and TLS");
        // Before the handshake only the plaintext answer goes out.
        let mut first = Vec::new();
        layers.take_output(&mut first).expect("output");
        assert_eq!(first, b"answer");

        let mut client = client();
        let mut rbuf = BytesMut::new();
        pump(&mut client, &mut layers, &mut rbuf);
        assert!(!client.is_handshaking());
        let info = layers.tls_info().expect("tls info");
        assert!(info.version.starts_with("TLS1."), "{info:?}");
        // The first OK through TLS alone, then the second deflated inside it.
        let plain = client_plaintext(&mut client);
        assert_eq!(&plain[..3], b"OK1");
        let mut inflate = Decompressor::deflate();
        inflate.feed(&plain[3..]).expect("feed");
        let mut ok2 = BytesMut::new();
        inflate.decompress(&mut ok2, 100).expect("inflate");
        assert_eq!(&ok2[..], b"OK2");

        // 16 MiB of zeros, deflated, through TLS: decoded only as the reader pulls.
        let mut bomb = Vec::new();
        Compressor::deflate(9)
            .compress(&vec![0u8; 16 << 20], &mut bomb)
            .expect("compress");
        client.writer().write_all(&bomb).expect("client write");
        pump(&mut client, &mut layers, &mut rbuf);
        assert!(rbuf.is_empty(), "nothing decoded before a pull");
        assert_eq!(layers.pull(&mut rbuf, 4096).expect("pull"), 4096);
        assert_eq!(rbuf.len(), 4096);
    }

    #[test]
    fn garbage_instead_of_a_handshake_fails_with_an_alert_to_send() {
        let mut layers = Layers::new(BytesMut::new());
        layers.start_tls(server_config()).expect("tls");
        let garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(layers.input(garbage, &mut BytesMut::new()).is_err());
        assert!(layers.has_output(), "an alert for the peer");
    }

    #[test]
    fn snappy_alone_and_a_corrupt_stream() {
        let mut layers = Layers::new(BytesMut::new());
        layers.start_compression(Compression::Snappy);
        let mut wire = Vec::new();
        Compressor::snappy()
            .compress(b"PUB t\n\0\0\0\x01x", &mut wire)
            .expect("compress");
        let mut rbuf = BytesMut::new();
        layers.input(&wire, &mut rbuf).expect("input");
        assert_eq!(layers.pull(&mut rbuf, 1 << 20).expect("pull"), 11);
        assert_eq!(&rbuf[..], b"PUB t\n\0\0\0\x01x");
        let last = wire.len() - 1;
        wire[last] ^= 0xff;
        // The stream identifier again (allowed), then a chunk whose checksum fails.
        layers.input(&wire, &mut rbuf).expect("input");
        assert!(layers.pull(&mut rbuf, 1 << 20).is_err());
    }
}

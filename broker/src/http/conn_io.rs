//! What lies between an HTTP connection's socket and its request decoder: nothing on
//! `--http-address` ([`Plain`]), TLS on `--https-address` ([`Tls`]: rustls's sans-IO
//! `ServerConnection`, the configuration of the TCP side, so the same certificate, SIGHUP
//! reload and client-certificate policy).
//!
//! The connection loop (`server.rs`) is generic over [`Transport`], so a plaintext
//! connection pays nothing for TLS: its input is appended to the read buffer, its answers'
//! buffer is the buffer sent, no dynamic dispatch and no copy. A TLS connection decrypts what the socket gave into the read buffer, and encrypts
//! its answers into a second buffer that goes to the socket the same way (the shard's send
//! batch, eager reads after it).
//!
//! Invariants: [`Transport::seal`] and [`Transport::recycle`] alternate: the buffer `seal`
//! returns is sent, then handed back to `recycle`, which returns the answers' buffer (empty).
//! A TLS error is final: the alert rustls queued is sent if the socket takes it, and the
//! connection closes. Only a [`Plain`] connection may move to another shard (a TLS one's state
//! is more than its socket).

use bytes::{BufMut, BytesMut};
use rustls::ServerConnection;
use std::io::{self, BufRead, Write};
use std::time::Duration;

/// What [`Transport::input`] saw besides request bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Input {
    /// The peer ended TLS cleanly (close_notify): nothing more will come.
    pub closed: bool,
    /// The TLS handshake finished with this input.
    pub handshake_done: bool,
}

/// The layer between an HTTP connection's socket and its request decoder.
pub(super) trait Transport {
    /// Whether the connection's whole state is its socket, so that it may move to another
    /// shard between two requests.
    const MOVABLE: bool;
    /// How long the first bytes may take (the handshake), when shorter than an idle
    /// connection's wait.
    const HANDSHAKE_TIMEOUT: Option<Duration>;

    /// Takes bytes read from the socket; what they carry goes onto `rbuf`.
    fn input(&mut self, data: &[u8], rbuf: &mut BytesMut) -> io::Result<Input>;

    /// Whether the layer has bytes of its own for the socket (a handshake, an alert).
    fn has_output(&self) -> bool;

    /// The bytes for the socket: the answers in `out`, as they go on the wire, and with
    /// `last` the end of the session (TLS close_notify) after them.
    fn seal(&mut self, out: BytesMut, last: bool) -> io::Result<BytesMut>;

    /// Takes back the buffer [`Self::seal`] returned, once sent; returns the answers' buffer,
    /// empty.
    fn recycle(&mut self, sent: BytesMut) -> BytesMut;
}

/// Plain HTTP: the socket's bytes are the requests, the answers are the socket's bytes.
pub(super) struct Plain;

impl Transport for Plain {
    const MOVABLE: bool = true;
    const HANDSHAKE_TIMEOUT: Option<Duration> = None;

    #[inline]
    fn input(&mut self, data: &[u8], rbuf: &mut BytesMut) -> io::Result<Input> {
        rbuf.extend_from_slice(data);
        Ok(Input::default())
    }

    #[inline]
    fn has_output(&self) -> bool {
        false
    }

    #[inline]
    fn seal(&mut self, out: BytesMut, _last: bool) -> io::Result<BytesMut> {
        Ok(out)
    }

    #[inline]
    fn recycle(&mut self, mut sent: BytesMut) -> BytesMut {
        sent.clear();
        sent
    }
}

/// A client has this long for its TLS handshake (as on TCP connections, nsqd's 5 s).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTPS: the socket carries TLS records.
pub(super) struct Tls {
    conn: ServerConnection,
    /// TLS records for the socket, built by [`Transport::seal`].
    wire: BytesMut,
    /// The answers' buffer while `wire` is out being sent.
    spare: BytesMut,
    handshaking: bool,
}

impl Tls {
    /// A server session with `config` (the one in force when the connection was accepted).
    pub(super) fn new(config: std::sync::Arc<rustls::ServerConfig>) -> Result<Tls, rustls::Error> {
        let mut conn = ServerConnection::new(config)?;
        // The answers written are bounded by the requests read; rustls must take all of them.
        conn.set_buffer_limit(None);
        Ok(Tls {
            conn,
            wire: BytesMut::new(),
            spare: BytesMut::new(),
            handshaking: true,
        })
    }
}

impl Transport for Tls {
    const MOVABLE: bool = false;
    const HANDSHAKE_TIMEOUT: Option<Duration> = Some(TLS_HANDSHAKE_TIMEOUT);

    fn input(&mut self, mut data: &[u8], rbuf: &mut BytesMut) -> io::Result<Input> {
        let mut input = Input::default();
        while !data.is_empty() {
            self.conn.read_tls(&mut data)?;
            // On an error the alert is in rustls's output: the loop sends it before closing.
            let state = self
                .conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut plain = self.conn.reader();
            loop {
                let chunk = match plain.fill_buf() {
                    Ok(chunk) if !chunk.is_empty() => chunk,
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                };
                let n = chunk.len();
                rbuf.extend_from_slice(chunk);
                plain.consume(n);
            }
            if state.peer_has_closed() {
                input.closed = true;
                break;
            }
        }
        if self.handshaking && !self.conn.is_handshaking() {
            self.handshaking = false;
            input.handshake_done = true;
        }
        Ok(input)
    }

    fn has_output(&self) -> bool {
        self.conn.wants_write()
    }

    fn seal(&mut self, mut out: BytesMut, last: bool) -> io::Result<BytesMut> {
        let written = if out.is_empty() {
            Ok(())
        } else {
            self.conn.writer().write_all(&out)
        };
        out.clear();
        self.spare = out;
        written?;
        // After the answers: rustls writes nothing once close_notify is queued.
        if last && !self.handshaking {
            self.conn.send_close_notify();
        }
        let mut wire = std::mem::take(&mut self.wire).writer();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut wire)?;
        }
        Ok(wire.into_inner())
    }

    fn recycle(&mut self, mut sent: BytesMut) -> BytesMut {
        sent.clear();
        self.wire = sent;
        std::mem::take(&mut self.spare)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::ClientConnection;
    use std::io::Read;
    use std::sync::Arc;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn server() -> Tls {
        let cert = CertificateDer::from_pem_slice(include_bytes!("../tcp/testdata/server.pem"))
            .expect("test certificate");
        let key = PrivateKeyDer::from_pem_slice(include_bytes!("../tcp/testdata/server.key"))
            .expect("test key");
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
        Tls::new(Arc::new(config)).expect("session")
    }

    fn client() -> ClientConnection {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(
                CertificateDer::from_pem_slice(include_bytes!("../tcp/testdata/ca.pem"))
                    .expect("CA"),
            )
            .expect("root");
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").expect("name");
        ClientConnection::new(Arc::new(config), name).expect("client")
    }

    /// Moves bytes both ways (the server's through seal/recycle, as the connection loop does)
    /// until neither side has anything to send; what the server's input gave, and whether its
    /// handshake finished.
    fn pump(client: &mut ClientConnection, server: &mut Tls, rbuf: &mut BytesMut) -> bool {
        let mut done = false;
        for _ in 0..20 {
            let mut to_server = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut to_server).expect("client write_tls");
            }
            if !to_server.is_empty() {
                done |= server
                    .input(&to_server, rbuf)
                    .expect("input")
                    .handshake_done;
            }
            let mut to_client = BytesMut::new();
            if server.has_output() {
                to_client = server.seal(BytesMut::new(), false).expect("seal");
            }
            let mut rest = &to_client[..];
            while !rest.is_empty() {
                client.read_tls(&mut rest).expect("client read_tls");
                client.process_new_packets().expect("client process");
            }
            let _ = server.recycle(to_client.clone());
            if to_server.is_empty() && to_client.is_empty() {
                break;
            }
        }
        done
    }

    #[test]
    fn a_request_in_and_its_answer_out_through_tls() {
        let mut server = server();
        let mut client = client();
        let mut rbuf = BytesMut::new();
        assert!(pump(&mut client, &mut server, &mut rbuf), "handshake done");
        client
            .writer()
            .write_all(b"GET /ping HTTP/1.1\r\n\r\n")
            .expect("client write");
        pump(&mut client, &mut server, &mut rbuf);
        assert_eq!(&rbuf[..], b"GET /ping HTTP/1.1\r\n\r\n");

        let wire = server
            .seal(BytesMut::from(&b"HTTP/1.1 200 OK\r\n\r\n"[..]), false)
            .expect("seal");
        assert!(!wire.is_empty() && !wire.starts_with(b"HTTP"), "encrypted");
        let mut rest = &wire[..];
        while !rest.is_empty() {
            client.read_tls(&mut rest).expect("read_tls");
        }
        client.process_new_packets().expect("process");
        let mut answer = vec![0u8; 64];
        let n = client.reader().read(&mut answer).expect("plaintext");
        assert_eq!(&answer[..n], b"HTTP/1.1 200 OK\r\n\r\n");
        // The answers' buffer comes back empty; the wire buffer is kept for the next seal.
        let out = server.recycle(wire);
        assert!(out.is_empty());

        // A clean end from the client is the end of the stream.
        client.send_close_notify();
        let mut bytes = Vec::new();
        client.write_tls(&mut bytes).expect("close_notify");
        assert!(server.input(&bytes, &mut rbuf).expect("input").closed);
    }

    #[test]
    fn garbage_instead_of_a_handshake_is_an_error_with_an_alert_to_send() {
        let mut server = server();
        let err = server
            .input(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", &mut BytesMut::new())
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(server.has_output(), "an alert for the peer");
        assert!(!server
            .seal(BytesMut::new(), false)
            .expect("alert")
            .is_empty());
    }

    #[test]
    fn plain_is_the_identity() {
        let mut rbuf = BytesMut::new();
        assert_eq!(Plain.input(b"GET", &mut rbuf).unwrap(), Input::default());
        assert_eq!(&rbuf[..], b"GET");
        let out = Plain.seal(BytesMut::from(&b"answer"[..]), true).unwrap();
        assert_eq!(&out[..], b"answer");
        assert!(Plain.recycle(out).is_empty());
    }
}

//! A synchronous producer on `std::net::TcpStream`, for code that runs outside any async
//! runtime: scripts, command-line tools, a worker thread that publishes and waits.
//!
//! Each publish writes its command and reads until the broker answers it: one round trip,
//! one `write` and (usually) one `read`, no executor, no task. Heartbeats that arrive while it
//! waits are answered with `NOP`. Between publishes nobody reads the socket, so a producer
//! idle for two heartbeat intervals is closed by the broker; a publish after an idle spell
//! (half an interval or more) first reads what arrived without blocking, answers heartbeats,
//! and on finding the connection closed opens a new one before it sends anything, so the
//! command itself is never in doubt. The thread blocks in `read`, so the wake-up that brings the
//! answer is the only scheduling a publish costs; where round trips dominate (one message at a
//! time over loopback) this is the cheapest way to publish, and shard-bench uses it for that.
//!
//! Failure handling is the async [`crate::Producer`]'s: any error frame, timeout or socket
//! error drops the connection (NSQ closes a connection after a publishing error, and a late
//! answer would be matched to the wrong command), and the next publish opens a new one. A
//! publish is never retried behind the caller's back.

use crate::config::ProducerConfig;
use crate::conn::{answer_of, MAX_FRAME_SIZE};
use crate::error::{Error, Result};
use crate::handshake::{
    after_tls_handshake, expect_ok, parse_auth_answer, tls_handshake_error, HandshakeOptions,
    Negotiated, Upgrades,
};
use crate::producer::check_topic;
use crate::transport::sync::BlockingTransport;
use bytes::{Bytes, BytesMut};
use protocol::{decode_frame, Command, MAGIC_V2, OK};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Publishes to one broker from the calling thread. Not shared between threads: give each
/// thread its own (each has its own connection).
pub struct Producer {
    addr: String,
    config: ProducerConfig,
    /// Built once from `config.features` (reads the certificate files).
    tls: Option<Arc<rustls::ClientConfig>>,
    conn: Option<Connection>,
}

struct Connection {
    stream: BlockingTransport,
    negotiated: Negotiated,
    /// Bytes read and not yet cut into frames.
    buf: BytesMut,
    /// The command being written (reused between publishes).
    out: BytesMut,
    /// When the last answer was read; after [`Connection::idle_check`] of silence the next
    /// publish looks for heartbeats and a close first.
    last_read: Instant,
    idle_check: Duration,
    /// Where reads land before they join `buf` (zeroed once, not before every read).
    scratch: Box<[u8]>,
}

impl Producer {
    /// Connects to the broker at `addr` (`host:port`) with default settings.
    pub fn connect(addr: impl Into<String>) -> Result<Producer> {
        Self::connect_with(addr, ProducerConfig::default())
    }

    /// Connects to the broker at `addr` with `config`. The connection is opened (magic,
    /// IDENTIFY) before this returns, so a wrong address shows up here.
    pub fn connect_with(addr: impl Into<String>, config: ProducerConfig) -> Result<Producer> {
        config.validate()?;
        let tls = config.features.tls_client_config()?;
        let mut producer = Producer {
            addr: addr.into(),
            config,
            tls,
            conn: None,
        };
        producer.connection()?;
        Ok(producer)
    }

    /// The broker address this producer publishes to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// True while a connection is open (it may still fail at the next publish).
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// What the open connection negotiated: TLS, compression, AUTH's answer.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.conn.as_ref().map(|c| &c.negotiated)
    }

    /// Publishes one message (`PUB`).
    pub fn publish(&mut self, topic: &str, body: impl Into<Bytes>) -> Result<()> {
        check_topic(topic)?;
        self.round_trip(&Command::Pub {
            topic: topic.to_string(),
            body: body.into(),
        })
    }

    /// Publishes several messages at once (`MPUB`): all are accepted or none.
    pub fn multi_publish(&mut self, topic: &str, bodies: Vec<Bytes>) -> Result<()> {
        check_topic(topic)?;
        if bodies.is_empty() {
            return Err(Error::InvalidConfig(
                "multi_publish needs at least one message",
            ));
        }
        self.round_trip(&Command::Mpub {
            topic: topic.to_string(),
            bodies,
        })
    }

    /// Publishes one message that becomes visible to consumers after `delay` (`DPUB`).
    pub fn deferred_publish(
        &mut self,
        topic: &str,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<()> {
        check_topic(topic)?;
        self.round_trip(&Command::Dpub {
            topic: topic.to_string(),
            defer_ms: delay.as_millis() as u64,
            body: body.into(),
        })
    }

    /// Closes the connection; the next publish opens a new one.
    pub fn close(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = conn.stream.tcp().shutdown(std::net::Shutdown::Both);
        }
    }

    fn round_trip(&mut self, cmd: &Command) -> Result<()> {
        let conn = self.connection()?;
        let outcome = conn.request(cmd);
        match outcome {
            Ok(answer) if answer == OK => Ok(()),
            Ok(other) => {
                self.close();
                Err(Error::UnexpectedResponse(other))
            }
            Err(e) => {
                self.close();
                Err(e)
            }
        }
    }

    fn connection(&mut self) -> Result<&mut Connection> {
        if let Some(conn) = &mut self.conn {
            if conn.last_read.elapsed() >= conn.idle_check && !conn.catch_up()? {
                self.close();
            }
        }
        if self.conn.is_none() {
            let opts = HandshakeOptions::new(
                &self.config.identity,
                &self.config.features,
                self.tls.as_ref(),
                &self.addr,
            )?;
            self.conn = Some(Connection::open(&self.addr, &self.config, &opts)?);
        }
        self.conn.as_mut().ok_or(Error::Closed)
    }
}

impl Connection {
    /// Connects and runs the handshake of [`crate::handshake`]: IDENTIFY, TLS and its `OK`,
    /// compression and its `OK`, AUTH.
    fn open(addr: &str, config: &ProducerConfig, opts: &HandshakeOptions) -> Result<Self> {
        let stream = connect_tcp(addr, config.connect_timeout)?;
        stream.set_nodelay(true)?;
        // The handshake is bounded by the connect timeout, publishes by the response timeout.
        stream.set_read_timeout(Some(config.connect_timeout))?;
        stream.set_write_timeout(Some(config.connect_timeout))?;
        let mut conn = Connection {
            stream: BlockingTransport::plain(stream),
            negotiated: Negotiated::default(),
            buf: BytesMut::with_capacity(4096),
            out: BytesMut::with_capacity(4096),
            last_read: Instant::now(),
            idle_check: config.identity.heartbeat_interval / 2,
            scratch: vec![0; 4096].into_boxed_slice(),
        };
        conn.out.extend_from_slice(MAGIC_V2);
        Command::Identify(Bytes::from(serde_json::to_vec(&opts.identify)?)).encode(&mut conn.out);
        conn.write_out()?;
        let answer = conn.read_reply()?;
        let up = Upgrades::of(&answer, opts)?;
        if up.tls {
            let Some((tls, name)) = &opts.tls else {
                return Err(Error::TlsRefused);
            };
            if !conn.buf.is_empty() {
                return Err(Error::UnexpectedResponse(conn.buf.split().freeze()));
            }
            let session = rustls::ClientConnection::new(tls.clone(), name.clone())
                .map_err(|e| Error::Tls(e.to_string()))?;
            // The plain transport is consumed by the upgrade; a duplicate of the socket holds
            // its place meanwhile (dropped on success, the connection's on failure).
            let stand_in = BlockingTransport::plain(conn.stream.tcp().try_clone()?);
            let plain = std::mem::replace(&mut conn.stream, stand_in);
            conn.stream = plain.start_tls(session).map_err(tls_handshake_error)?;
            expect_ok(conn.read_reply().map_err(after_tls_handshake)?)?;
            conn.negotiated.tls = conn.stream.tls_session();
        }
        if let Some(c) = up.compression {
            let pending = conn.buf.split();
            conn.stream.start_compression(c, &pending)?;
            expect_ok(conn.read_reply()?)?;
            conn.negotiated.compression = Some(c);
        }
        if up.auth {
            let secret = opts.auth_secret.as_deref().ok_or(Error::AuthRequired)?;
            let answer = conn.request(&Command::Auth(Bytes::copy_from_slice(secret.as_bytes())))?;
            conn.negotiated.auth = Some(parse_auth_answer(&answer)?);
        }
        let tcp = conn.stream.tcp();
        tcp.set_read_timeout(Some(config.response_timeout))?;
        tcp.set_write_timeout(Some(config.response_timeout))?;
        Ok(conn)
    }

    fn request(&mut self, cmd: &Command) -> Result<Bytes> {
        self.out.clear();
        cmd.encode(&mut self.out);
        self.write_out()?;
        let answer = self.read_reply();
        self.last_read = Instant::now();
        answer
    }

    /// After an idle spell: reads whatever arrived without blocking and answers heartbeats.
    /// `Ok(false)` when the broker has closed the connection (or sent anything but a
    /// heartbeat, which on an idle producer means an error it closes after).
    fn catch_up(&mut self) -> Result<bool> {
        self.stream.tcp().set_nonblocking(true)?;
        let open = loop {
            match self.read_more() {
                Ok(0) => break false,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break true,
                Err(_) => break false,
            }
        };
        self.stream.tcp().set_nonblocking(false)?;
        if !open {
            return Ok(false);
        }
        while let Some(frame) = decode_frame(&mut self.buf, MAX_FRAME_SIZE)? {
            if answer_of(frame).is_some() || self.answer_heartbeat().is_err() {
                return Ok(false);
            }
        }
        self.last_read = Instant::now();
        Ok(true)
    }

    fn write_out(&mut self) -> Result<()> {
        self.stream.write_all(&self.out).map_err(io_error)?;
        self.out.clear();
        Ok(())
    }

    fn answer_heartbeat(&mut self) -> Result<()> {
        self.out.clear();
        Command::Nop.encode(&mut self.out);
        self.write_out()
    }

    /// Reads what the socket has onto the end of `buf`; 0 means end of stream. A read
    /// interrupted by a signal is retried: a read on a socket with a receive timeout is not
    /// restarted by the kernel, and a glommio executor's thread (where the handshake runs
    /// under shard-bench) gets io_uring's task-work notifications.
    fn read_more(&mut self) -> std::io::Result<usize> {
        loop {
            match self.stream.read(&mut self.scratch) {
                Ok(n) => {
                    self.buf.extend_from_slice(&self.scratch[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads frames until a response or error that is not a heartbeat; answers heartbeats.
    fn read_reply(&mut self) -> Result<Bytes> {
        loop {
            while let Some(frame) = decode_frame(&mut self.buf, MAX_FRAME_SIZE)? {
                match answer_of(frame) {
                    Some(answer) => return answer,
                    None => self.answer_heartbeat()?,
                }
            }
            if self.read_more().map_err(io_error)? == 0 {
                return Err(Error::Closed);
            }
        }
    }
}

/// A socket timeout surfaces as `WouldBlock` or `TimedOut` depending on the platform.
fn io_error(e: std::io::Error) -> Error {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout,
        _ => Error::from(e),
    }
}

/// Connects to the first address `addr` resolves to that answers within `timeout`.
fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let mut last = None;
    for sock_addr in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&sock_addr, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => io_error(e),
        None => Error::from(std::io::Error::new(
            ErrorKind::NotFound,
            format!("{addr} resolves to no address"),
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A fake broker: accepts one connection, reads the magic and IDENTIFY, answers `OK`,
    /// then answers each command with the next of `answers` (raw frames, written as given).
    fn fake_broker(answers: Vec<Vec<u8>>) -> (String, thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let handle = thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut seen = test_harness::handshake::read_identify(&mut s)
                .expect("magic and IDENTIFY")
                .raw;
            let mut buf = [0u8; 4096];
            s.write_all(&frame(0, b"OK")).expect("write");
            for answer in answers {
                let n = s.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                s.write_all(&answer).expect("write");
            }
            seen
        });
        (addr, handle)
    }

    fn frame(kind: u32, data: &[u8]) -> Vec<u8> {
        let mut f = ((data.len() + 4) as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&kind.to_be_bytes());
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn publishes_and_answers_a_heartbeat_while_waiting() {
        let mut with_heartbeat = frame(0, protocol::HEARTBEAT);
        with_heartbeat.extend_from_slice(&frame(0, b"OK"));
        let (addr, broker) = fake_broker(vec![frame(0, b"OK"), with_heartbeat]);
        let mut p = Producer::connect(addr).expect("connect");
        p.publish("t", "one").expect("first publish");
        p.publish("t", "two").expect("publish across a heartbeat");
        p.close();
        let seen = broker.join().expect("broker thread");
        let text = String::from_utf8_lossy(&seen);
        assert!(text.contains("PUB t\n\0\0\0\x03one"), "{text:?}");
        assert!(text.contains("PUB t\n\0\0\0\x03two"), "{text:?}");
    }

    #[test]
    fn an_error_frame_fails_the_publish_and_drops_the_connection() {
        let (addr, broker) = fake_broker(vec![frame(1, b"E_BAD_MESSAGE PUB invalid message")]);
        let mut p = Producer::connect(addr).expect("connect");
        let err = p.publish("t", "x").expect_err("the broker refused it");
        assert_eq!(err.code(), Some(protocol::ErrorCode::BadMessage), "{err}");
        assert!(!p.is_connected());
        broker.join().expect("broker thread");
    }

    #[test]
    fn bad_names_and_empty_batches_fail_before_any_io() {
        let (addr, broker) = fake_broker(vec![]);
        let mut p = Producer::connect(addr).expect("connect");
        assert!(matches!(
            p.publish("bad topic!", "x"),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            p.multi_publish("t", vec![]),
            Err(Error::InvalidConfig(_))
        ));
        assert!(p.is_connected());
        p.close();
        broker.join().expect("broker thread");
    }

    #[test]
    fn a_silent_broker_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let config = ProducerConfig::new().connect_timeout(Duration::from_millis(200));
        let err = Producer::connect_with(addr, config)
            .err()
            .expect("no IDENTIFY answer");
        assert!(matches!(err, Error::Timeout), "{err}");
        drop(listener);
    }

    #[test]
    fn nothing_listening_is_a_connection_error() {
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        let err = Producer::connect(addr).err().expect("refused");
        assert!(err.is_connection_error(), "{err}");
    }
}

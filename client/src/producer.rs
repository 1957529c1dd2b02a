//! Publishing: one connection to one broker, shared by every task that publishes through a
//! [`Producer`] handle.
//!
//! Each publish queues its command and waits for its own answer; several publishes may be
//! outstanding at once and the broker's answers are matched to them in order (see
//! [`crate::conn`]). Heartbeats are answered by the connection's reader.
//!
//! Failure handling: the broker closes the connection after any publishing error (they are
//! all fatal in NSQ), and a socket can fail at any time. Either way the publishes waiting on
//! that connection fail, and the next publish opens a new connection. A publish is never
//! retried behind the caller's back: after a connection error it may or may not have been
//! accepted, and only the caller knows whether a duplicate is acceptable.

use crate::config::ProducerConfig;
use crate::conn::{Conn, Event};
use crate::error::{Error, Result};
use crate::handshake::{handshake, HandshakeOptions, Negotiated};
use crate::rt;
use bytes::Bytes;
use protocol::names::is_valid_topic_name;
use protocol::{Command, OK};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Publishes to one broker. Clone it to share between tasks; clones share the connection.
#[derive(Clone)]
pub struct Producer {
    inner: Rc<Inner>,
}

struct Inner {
    addr: String,
    config: ProducerConfig,
    /// Built once from `config.features` (reads the certificate files).
    tls: Option<Arc<rustls::ClientConfig>>,
    conn: RefCell<Option<Conn>>,
    /// What the current connection negotiated.
    negotiated: RefCell<Negotiated>,
    /// One connection attempt at a time: set while one runs; the others wait for
    /// `connected` and look again.
    connecting: std::cell::Cell<bool>,
    connected: nsq_common::local_sync::Notify,
    stopped: std::cell::Cell<bool>,
}

impl Producer {
    /// Connects to the broker at `addr` (`host:port`) with default settings.
    pub async fn connect(addr: impl Into<String>) -> Result<Producer> {
        Self::connect_with(addr, ProducerConfig::default()).await
    }

    /// Connects to the broker at `addr` with `config`. The connection is opened (magic,
    /// IDENTIFY) before this returns, so a wrong address shows up here.
    pub async fn connect_with(addr: impl Into<String>, config: ProducerConfig) -> Result<Producer> {
        config.validate()?;
        let tls = config.features.tls_client_config()?;
        let producer = Producer {
            inner: Rc::new(Inner {
                addr: addr.into(),
                config,
                tls,
                conn: RefCell::new(None),
                negotiated: RefCell::default(),
                connecting: std::cell::Cell::new(false),
                connected: nsq_common::local_sync::Notify::new(),
                stopped: std::cell::Cell::new(false),
            }),
        };
        producer.connection().await?;
        Ok(producer)
    }

    /// The broker address this producer publishes to.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Publishes one message (`PUB`).
    pub async fn publish(&self, topic: &str, body: impl Into<Bytes>) -> Result<()> {
        check_topic(topic)?;
        self.round_trip(Command::Pub {
            topic: topic.to_string(),
            body: body.into(),
        })
        .await
    }

    /// Publishes several messages at once (`MPUB`): all are accepted or none.
    pub async fn multi_publish(&self, topic: &str, bodies: Vec<Bytes>) -> Result<()> {
        check_topic(topic)?;
        if bodies.is_empty() {
            return Err(Error::InvalidConfig(
                "multi_publish needs at least one message",
            ));
        }
        self.round_trip(Command::Mpub {
            topic: topic.to_string(),
            bodies,
        })
        .await
    }

    /// Publishes one message that becomes visible to consumers after `delay` (`DPUB`).
    pub async fn deferred_publish(
        &self,
        topic: &str,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<()> {
        check_topic(topic)?;
        self.round_trip(Command::Dpub {
            topic: topic.to_string(),
            defer_ms: delay.as_millis() as u64,
            body: body.into(),
        })
        .await
    }

    /// What the last connection opened negotiated: TLS, compression, AUTH's answer.
    pub fn negotiated(&self) -> Negotiated {
        self.inner.negotiated.borrow().clone()
    }

    /// True while a connection is open (it may still fail at the next publish).
    pub fn is_connected(&self) -> bool {
        self.inner
            .conn
            .borrow()
            .as_ref()
            .is_some_and(|c| !c.is_closed())
    }

    /// Closes the connection after what is queued is written; later publishes fail with
    /// [`Error::Closed`].
    pub fn stop(&self) {
        self.inner.stopped.set(true);
        if let Some(conn) = self.inner.conn.borrow_mut().take() {
            conn.close();
        }
    }

    async fn round_trip(&self, cmd: Command) -> Result<()> {
        let conn = self.connection().await?;
        let reply = conn.request(&cmd)?;
        match rt::with_timeout(self.inner.config.response_timeout, reply).await {
            Ok(answer) if answer == OK => Ok(()),
            Ok(other) => Err(Error::UnexpectedResponse(other)),
            Err(Error::Timeout) => {
                // A late answer would be matched to the wrong command: start afresh.
                conn.close();
                Err(Error::Timeout)
            }
            Err(e) => Err(e),
        }
    }

    /// The open connection, opening one if there is none.
    async fn connection(&self) -> Result<Conn> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        while self.inner.connecting.get() {
            self.inner.connected.changed().await;
            // Someone else may have connected while we waited.
            if let Some(conn) = self.current() {
                return Ok(conn);
            }
            if self.inner.stopped.get() {
                return Err(Error::Closed);
            }
        }
        let _attempt = Attempt::start(&self.inner);
        let (conn, negotiated) = open(
            &self.inner.addr,
            &self.inner.config,
            self.inner.tls.as_ref(),
        )
        .await?;
        *self.inner.conn.borrow_mut() = Some(conn.clone());
        *self.inner.negotiated.borrow_mut() = negotiated;
        Ok(conn)
    }

    fn current(&self) -> Option<Conn> {
        if self.inner.stopped.get() {
            return None;
        }
        self.inner
            .conn
            .borrow()
            .as_ref()
            .filter(|c| !c.is_closed())
            .cloned()
    }
}

/// The one connection attempt running: ends (waking those who wait) when dropped, also when
/// the attempt's future is dropped half-way.
struct Attempt<'a>(&'a Inner);

impl<'a> Attempt<'a> {
    fn start(inner: &'a Inner) -> Attempt<'a> {
        inner.connecting.set(true);
        Attempt(inner)
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        self.0.connecting.set(false);
        self.0.connected.notify();
    }
}

pub(crate) fn check_topic(topic: &str) -> Result<()> {
    if is_valid_topic_name(topic) {
        Ok(())
    } else {
        Err(Error::InvalidName {
            what: "topic",
            name: topic.to_string(),
        })
    }
}

async fn open(
    addr: &str,
    config: &ProducerConfig,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<(Conn, Negotiated)> {
    let opts = HandshakeOptions::new(&config.identity, &config.features, tls, addr)?;
    let (stream, hs) = rt::with_timeout(config.connect_timeout, async {
        let stream = rt::connect_tcp(addr, config.connect_timeout).await?;
        handshake(stream, &opts, None).await
    })
    .await?;
    let negotiated = hs.negotiated.clone();
    let addr_for_log = addr.to_string();
    let (conn, driver) = Conn::start(stream, hs, move |_, event| match event {
        Event::Error(e) => tracing::warn!(addr = %addr_for_log, error = %e, "broker error"),
        other => tracing::debug!(addr = %addr_for_log, ?other, "unexpected frame on a producer"),
    });
    let addr = addr.to_string();
    rt::spawn(async move {
        if let Err(e) = driver.await {
            tracing::debug!(%addr, error = %e, "producer connection ended");
        }
    });
    Ok((conn, negotiated))
}

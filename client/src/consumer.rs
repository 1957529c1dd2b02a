//! Consuming: one subscription (topic, channel) over one connection per broker, fed by direct
//! addresses, by lookups, or both.
//!
//! How the pieces fit:
//!
//! - every known broker address has a task ([`Inner::run_address`]) that connects (magic,
//!   IDENTIFY, SUB), registers the connection with the RDY state machine ([`crate::rdy`]),
//!   drives it until it ends, and then either reconnects with exponential backoff (direct
//!   addresses) or leaves it to the next lookup poll (discovered addresses);
//! - the connection's reader hands each message to [`Inner::on_message`], which updates RDY
//!   and runs the handler (inline; it becomes a task only if it has to wait); when the
//!   handler returns (or a deferred handler gives its [`Pending`] answer: [`deferred`]), FIN
//!   or REQ is sent and the outcome is fed to RDY and to [`crate::backoff`], whose pause
//!   timer is a task of its own;
//! - a ticker drives redistribution and probe retries ([`RdyState::tick`]); a poller asks
//!   the lookups and connects to new brokers / retires vanished ones;
//! - retiring a connection (vanished from lookups, or [`Consumer::stop`]) sends CLS, waits for
//!   `CLOSE_WAIT` and for its messages in flight to be answered, then closes it.
//!
//! All mutable state lives in one `RefCell<State>`; every borrow is taken and dropped inside a
//! synchronous stretch of code, never across an `.await`. RDY commands computed under the
//! borrow are sent after it is released.

use crate::backoff::{Action, Backoff, Outcome};
use crate::config::ConsumerConfig;
use crate::conn::{Conn, Event};
use crate::error::{Error, Result};
use crate::handshake::{handshake, HandshakeOptions, Negotiated};
use crate::lookup;
use crate::message::{HandlerResult, Message};
use crate::rdy::{ConnId, RdyState, RdyUpdate};
use crate::rt;
use futures_lite::future;
use nsq_common::local_sync::Notify;
use protocol::Command;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

type HandlerFn = dyn Fn(Message) -> Pin<Box<dyn Future<Output = HandlerResult>>>;
type GiveUpFn = dyn Fn(&Message);

mod deferred;
pub use deferred::{answer_all, Pending};

/// The two kinds of handler: one that answers by returning (a future per message), and one
/// that is handed the message's [`Pending`] answer to give whenever it is done.
enum Handler {
    Returning(Box<HandlerFn>),
    Deferred(Box<dyn Fn(Message, Pending)>),
}

/// Counters of one consumer, for monitoring and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Connections subscribed right now.
    pub connections: usize,
    pub messages_received: u64,
    pub messages_finished: u64,
    pub messages_requeued: u64,
    pub messages_given_up: u64,
    /// Messages a deferred handler released unanswered ([`Pending::release`]).
    pub messages_released: u64,
    /// Handlers running right now.
    pub in_flight: u64,
    /// Sum of the RDY counts last sent.
    pub total_rdy: u64,
}

/// A subscription to one topic and channel. Clone it to share; clones are the same consumer.
///
/// Must be used from inside a glommio executor or a tokio `LocalSet` (it spawns local tasks and
/// uses the runtime's timers).
#[derive(Clone)]
pub struct Consumer {
    inner: Rc<Inner>,
}

struct Inner {
    config: ConsumerConfig,
    /// Built once from `config.features` (reads the certificate files).
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    handler: Handler,
    give_up: RefCell<Rc<GiveUpFn>>,
    state: RefCell<State>,
    /// Poked whenever a handler ends or a connection comes or goes.
    changed: Notify,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Direct,
    Lookup,
}

struct AddressState {
    source: Source,
    /// False once the address should no longer be connected (vanished from lookups).
    wanted: bool,
}

struct Live {
    addr: String,
    conn: Conn,
    /// What its handshake switched on.
    negotiated: Negotiated,
    retiring: bool,
    close_wait: bool,
}

struct State {
    next_conn_id: ConnId,
    conns: BTreeMap<ConnId, Live>,
    addresses: BTreeMap<String, AddressState>,
    lookupds: Vec<String>,
    rdy: RdyState,
    backoff: Backoff,
    stopping: bool,
    ticker_running: bool,
    poller_running: bool,
    stats: ConsumerStats,
}

impl Consumer {
    /// A consumer for `config`, handing each message to `handler`. Nothing connects until
    /// [`Consumer::connect_to_nsqd`] or [`Consumer::connect_to_lookupd`].
    pub fn new<F, Fut>(config: ConsumerConfig, handler: F) -> Result<Consumer>
    where
        F: Fn(Message) -> Fut + 'static,
        Fut: Future<Output = HandlerResult> + 'static,
    {
        Consumer::with_handler(
            config,
            Handler::Returning(Box::new(move |m| Box::pin(handler(m)))),
        )
    }

    /// A consumer whose handler answers later: called (synchronously, no task) with each
    /// message and its [`Pending`] answer, which it gives when done ([`Pending::finish`],
    /// [`answer_all`] for a batch). Until then the message is in flight (RDY, `stop` waits).
    pub fn new_deferred<F>(config: ConsumerConfig, handler: F) -> Result<Consumer>
    where
        F: Fn(Message, Pending) + 'static,
    {
        Consumer::with_handler(config, Handler::Deferred(Box::new(handler)))
    }

    fn with_handler(config: ConsumerConfig, handler: Handler) -> Result<Consumer> {
        config.validate()?;
        let tls = config.features.tls_client_config()?;
        let rdy = RdyState::new(config.max_in_flight, config.low_rdy_idle_timeout);
        let backoff = Backoff::new(config.backoff_multiplier, config.max_backoff_duration);
        let give_up: Rc<GiveUpFn> = Rc::new(|m: &Message| {
            tracing::warn!(id = %m.id(), attempts = m.attempts(), "giving up on message");
        });
        Ok(Consumer {
            inner: Rc::new(Inner {
                config,
                tls,
                handler,
                give_up: RefCell::new(give_up),
                state: RefCell::new(State {
                    next_conn_id: 0,
                    conns: BTreeMap::new(),
                    addresses: BTreeMap::new(),
                    lookupds: Vec::new(),
                    rdy,
                    backoff,
                    stopping: false,
                    ticker_running: false,
                    poller_running: false,
                    stats: ConsumerStats::default(),
                }),
                changed: Notify::default(),
            }),
        })
    }

    /// Replaces what happens to a message delivered more than `max_attempts` times (by
    /// default: a warning in the log). The message is finished after the callback returns.
    pub fn on_give_up(&self, f: impl Fn(&Message) + 'static) {
        *self.inner.give_up.borrow_mut() = Rc::new(f);
    }

    /// Subscribes on the broker at `addr` (`host:port`) and keeps doing so: if the connection
    /// fails, it is retried with exponential backoff until [`Consumer::stop`]. Returns once
    /// the first attempt succeeded, or with its error (retries go on regardless).
    pub async fn connect_to_nsqd(&self, addr: impl Into<String>) -> Result<()> {
        let addr = addr.into();
        if self.inner.state.borrow().stopping {
            return Err(Error::Closed);
        }
        let first = self.inner.add_address(&addr, Source::Direct);
        self.inner.ensure_ticker();
        match first {
            Some(first) => first.await.unwrap_or(Err(Error::Closed)),
            None => Ok(()),
        }
    }

    /// Subscribes on every broker in `addrs`; the first error is returned after all were
    /// tried.
    pub async fn connect_to_nsqds<I, S>(&self, addrs: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut first_err = None;
        for addr in addrs {
            if let Err(e) = self.connect_to_nsqd(addr).await {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Adds a lookup (`host:port` of its HTTP side) to poll for brokers of the topic. The
    /// first poll of it happens before this returns (its error, if any, is returned; polling
    /// goes on regardless), then every `lookupd_poll_interval` plus jitter.
    pub async fn connect_to_lookupd(&self, addr: impl Into<String>) -> Result<()> {
        let addr = addr.into();
        {
            let mut st = self.inner.state.borrow_mut();
            if st.stopping {
                return Err(Error::Closed);
            }
            if !st.lookupds.contains(&addr) {
                st.lookupds.push(addr.clone());
            }
        }
        self.inner.ensure_ticker();
        let result = self.inner.poll_lookups().await;
        self.inner.ensure_poller();
        result
    }

    /// The guide's `is_starved`: some connection has at least 85% of its RDY in flight, so
    /// handlers that batch should process their batch now.
    pub fn is_starved(&self) -> bool {
        self.inner.state.borrow().rdy.is_starved()
    }

    /// True while backing off after failures.
    pub fn in_backoff(&self) -> bool {
        self.inner.state.borrow().backoff.in_backoff()
    }

    /// Changes `max_in_flight` at run time (0 stops message flow).
    pub fn set_max_in_flight(&self, max_in_flight: u64) {
        let ups = self
            .inner
            .state
            .borrow_mut()
            .rdy
            .set_max_in_flight(max_in_flight, Instant::now());
        self.inner.send_rdy(&ups);
    }

    pub fn stats(&self) -> ConsumerStats {
        let st = self.inner.state.borrow();
        ConsumerStats {
            connections: st.conns.values().filter(|l| !l.retiring).count(),
            in_flight: st.rdy.total_in_flight(),
            total_rdy: st.rdy.total_rdy(),
            ..st.stats
        }
    }

    /// What each subscribed connection negotiated (TLS, compression, AUTH's answer), by
    /// broker address.
    pub fn negotiated(&self) -> Vec<(String, Negotiated)> {
        self.inner
            .state
            .borrow()
            .conns
            .values()
            .filter(|l| !l.retiring)
            .map(|l| (l.addr.clone(), l.negotiated.clone()))
            .collect()
    }

    /// Stops consuming: CLS on every connection, then waits (at most `stop_timeout`) for
    /// running handlers to answer their messages, then closes the connections.
    pub async fn stop(&self) {
        let ids: Vec<ConnId> = {
            let mut st = self.inner.state.borrow_mut();
            st.stopping = true;
            st.conns.keys().copied().collect()
        };
        for id in ids {
            self.inner.retire(id);
        }
        let deadline = Instant::now() + self.inner.config.stop_timeout;
        loop {
            let done = self.inner.state.borrow().conns.is_empty();
            let now = Instant::now();
            if done || now >= deadline {
                break;
            }
            let wait = self.inner.changed.changed();
            future::or(wait, rt::sleep(deadline - now)).await;
        }
        let leftovers: Vec<Conn> = self
            .inner
            .state
            .borrow()
            .conns
            .values()
            .map(|l| l.conn.clone())
            .collect();
        for conn in leftovers {
            conn.close();
        }
        self.inner.changed.notify();
    }

    /// Waits until at least `n` connections are subscribed, at most `timeout`.
    pub async fn wait_for_connections(&self, n: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stats().connections >= n {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout);
            }
            future::or(self.inner.changed.changed(), rt::sleep(deadline - now)).await;
        }
    }
}

impl Inner {
    /// Registers `addr` and starts its task unless it is known already; the receiver reports
    /// the first connection attempt.
    fn add_address(
        self: &Rc<Self>,
        addr: &str,
        source: Source,
    ) -> Option<nsq_common::local_sync::Receiver<Result<()>>> {
        {
            let mut st = self.state.borrow_mut();
            if let Some(known) = st.addresses.get_mut(addr) {
                known.wanted = true;
                if source == Source::Direct {
                    known.source = Source::Direct;
                }
                return None;
            }
            st.addresses.insert(
                addr.to_string(),
                AddressState {
                    source,
                    wanted: true,
                },
            );
        }
        let (tx, rx) = nsq_common::local_sync::oneshot();
        rt::spawn(self.clone().run_address(addr.to_string(), tx));
        Some(rx)
    }

    /// The life of one broker address: connect, run, reconnect or give up.
    async fn run_address(
        self: Rc<Self>,
        addr: String,
        first: nsq_common::local_sync::Sender<Result<()>>,
    ) {
        let mut first = Some(first);
        let mut failures: u32 = 0;
        loop {
            match self.connect(&addr).await {
                Ok((id, driver)) => {
                    if let Some(tx) = first.take() {
                        tx.send(Ok(()));
                    }
                    failures = 0;
                    if let Err(e) = driver.await {
                        tracing::info!(%addr, error = %e, "connection ended");
                    }
                    self.connection_gone(id);
                }
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "cannot subscribe");
                    failures = failures.saturating_add(1);
                    if let Some(tx) = first.take() {
                        tx.send(Err(e));
                    }
                }
            }
            let retry = {
                let mut st = self.state.borrow_mut();
                let retry = !st.stopping
                    && st
                        .addresses
                        .get(&addr)
                        .is_some_and(|a| a.wanted && a.source == Source::Direct);
                if !retry {
                    // A discovered broker comes back only if a later poll lists it again.
                    st.addresses.remove(&addr);
                }
                retry
            };
            if !retry {
                return;
            }
            rt::sleep(self.reconnect_delay(failures)).await;
        }
    }

    fn reconnect_delay(&self, failures: u32) -> Duration {
        let base = self.config.reconnect_delay;
        nsq_common::backoff::doubled(
            base,
            failures.saturating_sub(1),
            self.config.max_reconnect_delay.max(base),
        )
    }

    /// Connects, subscribes and registers one connection; returns its driver to run.
    async fn connect(
        self: &Rc<Self>,
        addr: &str,
    ) -> Result<(ConnId, impl Future<Output = Result<()>>)> {
        let cfg = &self.config;
        let opts = HandshakeOptions::new(&cfg.identity, &cfg.features, self.tls.as_ref(), addr)?;
        let (stream, hs) = rt::with_timeout(cfg.connect_timeout, async {
            let stream = rt::connect_tcp(addr, cfg.connect_timeout).await?;
            handshake(stream, &opts, Some((&cfg.topic, &cfg.channel))).await
        })
        .await?;
        let max_rdy = hs.max_rdy_count;
        let negotiated = hs.negotiated.clone();
        let id = {
            let mut st = self.state.borrow_mut();
            st.next_conn_id += 1;
            st.next_conn_id
        };
        let weak: Weak<Inner> = Rc::downgrade(self);
        let (conn, driver) = Conn::start(stream, hs, move |conn, event| {
            if let Some(inner) = weak.upgrade() {
                inner.on_event(id, conn, event);
            }
        });
        let ups = {
            let mut st = self.state.borrow_mut();
            if st.stopping {
                None
            } else {
                st.conns.insert(
                    id,
                    Live {
                        addr: addr.to_string(),
                        conn: conn.clone(),
                        negotiated,
                        retiring: false,
                        close_wait: false,
                    },
                );
                Some(st.rdy.add_conn(id, max_rdy, Instant::now()))
            }
        };
        let Some(ups) = ups else {
            conn.close();
            return Err(Error::Closed);
        };
        tracing::debug!(%addr, id, max_rdy, "subscribed");
        self.send_rdy(&ups);
        self.changed.notify();
        Ok((id, driver))
    }

    fn connection_gone(&self, id: ConnId) {
        let ups = {
            let mut st = self.state.borrow_mut();
            st.conns.remove(&id);
            st.rdy.remove_conn(id, Instant::now())
        };
        self.send_rdy(&ups);
        self.changed.notify();
    }

    fn on_event(self: &Rc<Self>, id: ConnId, conn: &Conn, event: Event) {
        match event {
            Event::Message(m) => self.on_message(id, conn, m),
            Event::Error(e) => tracing::warn!(id, error = %e, "broker error"),
            Event::Response(r) => tracing::debug!(id, response = ?r, "unexpected response"),
        }
    }

    fn on_message(self: &Rc<Self>, id: ConnId, conn: &Conn, m: protocol::Message) {
        let ups = {
            let mut st = self.state.borrow_mut();
            st.stats.messages_received += 1;
            st.rdy.on_message(id, crate::clock::now())
        };
        self.send_rdy(&ups);
        let msg = Message::new(m, conn.clone());
        let max = self.config.max_attempts;
        if max > 0 && msg.attempts() > max {
            self.give_up_on(id, msg);
            return;
        }
        match &self.handler {
            Handler::Returning(_) => rt::run_or_spawn(self.clone().handle(id, msg)),
            Handler::Deferred(handler) => {
                let pending = Pending::new(Rc::downgrade(self), id, &msg);
                handler(msg, pending);
            }
        }
    }

    /// A message delivered more than `max_attempts` times: the give-up callback, then FIN.
    fn give_up_on(self: &Rc<Self>, id: ConnId, msg: Message) {
        let give_up = self.give_up.borrow().clone();
        give_up(&msg);
        let _ = msg.conn_handle().send(&Command::Fin(msg.id()));
        self.state.borrow_mut().stats.messages_given_up += 1;
        self.handled(id, Outcome::Neutral);
    }

    /// Runs a returning handler and answers the broker.
    async fn handle(self: Rc<Self>, id: ConnId, msg: Message) {
        let Handler::Returning(handler) = &self.handler else {
            return;
        };
        let (attempts, msg_id, conn) = (msg.attempts(), msg.id(), msg.conn_handle());
        let result = handler(msg).await;
        let outcome = self.answer(&conn, msg_id, attempts, result);
        self.handled(id, outcome);
    }

    /// Sends FIN or REQ for `result` and counts it; what it means for backoff.
    fn answer(
        &self,
        conn: &Conn,
        msg_id: protocol::MessageId,
        attempts: u16,
        result: HandlerResult,
    ) -> Outcome {
        match result {
            HandlerResult::Finish => {
                let _ = conn.send(&Command::Fin(msg_id));
                self.state.borrow_mut().stats.messages_finished += 1;
                Outcome::Success
            }
            HandlerResult::Requeue { delay, backoff } => {
                let delay = delay.unwrap_or_else(|| self.config.requeue_delay_for(attempts));
                let _ = conn.send(&Command::Req {
                    id: msg_id,
                    delay_ms: delay.as_millis() as u64,
                });
                self.state.borrow_mut().stats.messages_requeued += 1;
                if backoff {
                    Outcome::Failure
                } else {
                    Outcome::Neutral
                }
            }
        }
    }

    /// Books a handled message (see [`Inner::book`]) and tells whoever waits for a change.
    fn handled(self: &Rc<Self>, id: ConnId, outcome: Outcome) {
        self.book(id, outcome, crate::clock::now());
        self.changed.notify();
    }

    /// Books an answered message: RDY, backoff, and closing a retired connection once empty.
    /// The caller pokes `changed` (once for a batch).
    fn book(self: &Rc<Self>, id: ConnId, outcome: Outcome, now: Instant) {
        let (ups, action, close) = {
            let mut st = self.state.borrow_mut();
            let mut ups = st.rdy.on_message_done(id, now);
            let action = st.backoff.on_result(outcome);
            match action {
                Action::Pause { .. } => ups.extend(st.rdy.pause()),
                Action::Resume => ups.extend(st.rdy.resume(now)),
                Action::Probe | Action::Nothing => {}
            }
            let close = retired_and_drained(&st, id);
            (ups, action, close)
        };
        self.send_rdy(&ups);
        if let Action::Pause { duration, window } = action {
            tracing::info!(?duration, "backing off");
            let inner = self.clone();
            rt::spawn(async move {
                rt::sleep(duration).await;
                inner.backoff_timer(window);
            });
        }
        if let Some(conn) = close {
            conn.close();
        }
    }

    fn backoff_timer(&self, window: u64) {
        let ups = {
            let mut st = self.state.borrow_mut();
            match st.backoff.on_timer(window) {
                Action::Probe => st.rdy.probe(Instant::now(), &mut rt::random_below),
                _ => Vec::new(),
            }
        };
        self.send_rdy(&ups);
    }

    /// Sends CLS on `id`; the connection closes once the broker confirmed and its messages
    /// in flight are answered.
    fn retire(self: &Rc<Self>, id: ConnId) {
        let (conn, ups) = {
            let mut st = self.state.borrow_mut();
            let Some(live) = st.conns.get_mut(&id) else {
                return;
            };
            if live.retiring {
                return;
            }
            live.retiring = true;
            let conn = live.conn.clone();
            (conn, st.rdy.retire_conn(id, Instant::now()))
        };
        self.send_rdy(&ups);
        match conn.request(&Command::Cls) {
            Ok(reply) => {
                let inner = self.clone();
                rt::spawn(async move {
                    // No CLOSE_WAIT in time: close anyway, the broker requeues what it sent.
                    let _ = rt::with_timeout(inner.config.connect_timeout, reply).await;
                    inner.close_wait(id);
                });
            }
            Err(_) => conn.close(),
        }
        self.changed.notify();
    }

    fn close_wait(&self, id: ConnId) {
        let close = {
            let mut st = self.state.borrow_mut();
            if let Some(live) = st.conns.get_mut(&id) {
                live.close_wait = true;
            }
            retired_and_drained(&st, id)
        };
        if let Some(conn) = close {
            conn.close();
        }
    }

    fn send_rdy(&self, ups: &[RdyUpdate]) {
        if ups.is_empty() {
            return;
        }
        let targets: Vec<(Conn, u64)> = {
            let st = self.state.borrow();
            ups.iter()
                .filter_map(|u| st.conns.get(&u.conn).map(|l| (l.conn.clone(), u.count)))
                .collect()
        };
        for (conn, count) in targets {
            // A closed connection needs no RDY; its removal follows.
            let _ = conn.send(&Command::Rdy(count));
        }
    }

    fn ensure_ticker(self: &Rc<Self>) {
        {
            let mut st = self.state.borrow_mut();
            if st.ticker_running {
                return;
            }
            st.ticker_running = true;
        }
        let period = (self.config.low_rdy_idle_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(5));
        let weak = Rc::downgrade(self);
        rt::spawn(async move {
            loop {
                rt::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                let ups = {
                    let mut st = inner.state.borrow_mut();
                    if st.stopping {
                        return;
                    }
                    st.rdy.tick(Instant::now(), &mut rt::random_below)
                };
                inner.send_rdy(&ups);
            }
        });
    }

    fn ensure_poller(self: &Rc<Self>) {
        {
            let mut st = self.state.borrow_mut();
            if st.poller_running {
                return;
            }
            st.poller_running = true;
        }
        let weak = Rc::downgrade(self);
        let interval = self.config.lookupd_poll_interval;
        let jitter = self.config.lookupd_poll_jitter;
        rt::spawn(async move {
            loop {
                rt::sleep(rt::jittered(interval, jitter)).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.state.borrow().stopping {
                    return;
                }
                if let Err(e) = inner.poll_lookups().await {
                    tracing::warn!(error = %e, "lookup poll failed");
                }
            }
        });
    }

    /// Asks every lookup, connects to brokers that appeared and retires the ones that
    /// vanished. Lookups that fail are left out; if all fail, nothing is retired.
    async fn poll_lookups(self: &Rc<Self>) -> Result<()> {
        let lookupds = self.state.borrow().lookupds.clone();
        let mut answers = Vec::new();
        let mut last_err = None;
        for l in &lookupds {
            match lookup::query(l, &self.config.topic, self.config.connect_timeout).await {
                Ok(a) => answers.push(a),
                Err(e) => {
                    tracing::warn!(lookupd = %l, error = %e, "lookup failed");
                    last_err = Some(e);
                }
            }
        }
        if answers.is_empty() {
            return last_err.map_or(Ok(()), Err);
        }
        let found = lookup::broker_addresses(&answers);
        if self.state.borrow().stopping {
            return Err(Error::Closed);
        }
        self.reconcile(&found);
        last_err.map_or(Ok(()), Err)
    }

    fn reconcile(self: &Rc<Self>, found: &BTreeSet<String>) {
        for addr in found {
            // The first attempt's outcome is logged by the address task.
            let _ = self.add_address(addr, Source::Lookup);
        }
        let vanished: Vec<ConnId> = {
            let mut st = self.state.borrow_mut();
            let mut gone = Vec::new();
            for (addr, a) in st.addresses.iter_mut() {
                if a.source == Source::Lookup && !found.contains(addr) {
                    a.wanted = false;
                    gone.push(addr.clone());
                }
            }
            st.conns
                .iter()
                .filter(|(_, l)| gone.contains(&l.addr))
                .map(|(&id, _)| id)
                .collect()
        };
        for id in vanished {
            tracing::info!(id, "broker no longer listed by lookups; retiring");
            self.retire(id);
        }
    }
}

/// The connection to close, if `id` is retiring, confirmed CLS and has nothing in flight.
fn retired_and_drained(st: &State, id: ConnId) -> Option<Conn> {
    let live = st.conns.get(&id)?;
    let drained = st.rdy.in_flight_of(id).unwrap_or(0) == 0;
    (live.retiring && live.close_wait && drained).then(|| live.conn.clone())
}

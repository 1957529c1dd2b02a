//! The running lookup: its settings, its database and its two listeners.
//!
//! Everything runs on one glommio executor, so the state is shared by `Rc` and the database
//! sits in a `RefCell`. Borrows of it are taken inside plain functions and never held across an
//! `.await`: request handling and command execution do not wait on anything.

use crate::config::Config;
use crate::controller::Hosted;
use crate::db::{PeerId, RegistrationDb};
use glommio::net::TcpListener;
use protocol::lookup::PeerInfo;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use tracing::{info, warn};

/// State shared by every connection.
#[derive(Debug)]
pub struct Lookup {
    pub config: Config,
    pub db: RefCell<RegistrationDb>,
    /// The port the TCP listener got (differs from the flag when it asked for port 0).
    pub tcp_port: u16,
    /// The port the HTTP listener got.
    pub http_port: u16,
    /// The replication controller, with `--controller-id` only.
    pub controller: Option<Rc<RefCell<Hosted>>>,
    next_peer: Cell<PeerId>,
}

impl Lookup {
    pub fn new(
        config: Config,
        tcp_port: u16,
        http_port: u16,
        controller: Option<Rc<RefCell<Hosted>>>,
    ) -> Self {
        Lookup {
            config,
            db: RefCell::new(RegistrationDb::new()),
            tcp_port,
            http_port,
            controller,
            next_peer: Cell::new(1),
        }
    }

    /// A fresh id for a new TCP connection.
    pub fn next_peer_id(&self) -> PeerId {
        let id = self.next_peer.get();
        self.next_peer.set(id + 1);
        id
    }

    /// What IDENTIFY answers about this lookup.
    pub fn identity(&self) -> PeerInfo {
        PeerInfo {
            broadcast_address: self.config.broadcast_address.clone(),
            hostname: self.config.hostname.clone(),
            http_port: self.http_port,
            tcp_port: self.tcp_port,
            version: protocol::NSQD_COMPAT_VERSION.to_owned(),
        }
    }
}

/// Why the lookup could not start.
#[derive(Debug)]
pub enum StartError {
    Bind {
        what: &'static str,
        address: std::net::SocketAddr,
        source: glommio::GlommioError<()>,
    },
    Controller(crate::controller::StartError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Bind {
                what,
                address,
                source,
            } => write!(f, "cannot listen on {what} address {address}: {source}"),
            StartError::Controller(e) => write!(f, "controller: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// How long a restart waits for the listener of a process that has exited to be released.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A listener on `address` as nsqlookupd's Go listener is: SO_REUSEADDR (a restart binds over
/// the last run's lingering connections), and no SO_REUSEPORT, so that a second lookup started
/// on the same port fails with "Address already in use" instead of silently sharing the port
/// (glommio's own `TcpListener::bind` sets SO_REUSEPORT, made for one listener per executor).
pub(crate) fn listen(address: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::os::fd::{FromRawFd, IntoRawFd};
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    // A lookup that has just died (its io_uring accept keeps the listener alive for some
    // milliseconds after exit) is waited for; a live process's listener is refused at once.
    nsq_common::port_holder::bind_when_released(
        address,
        RELEASE_WAIT,
        || socket.bind(&address.into()),
        || {
            warn!(
                "{address}: the port is still held by a listening socket of a process that has \
                 exited; waiting up to {}s for the kernel to release it",
                RELEASE_WAIT.as_secs()
            )
        },
    )
    .map_err(|(e, holder)| match holder {
        Some(holder) => std::io::Error::new(e.kind(), format!("{e} ({holder})")),
        None => e,
    })?;
    // The backlog glommio's own listeners get (std's 128 is short for a burst of brokers and
    // readers reconnecting at once after a lookup restart).
    socket.listen(1024)?;
    // SAFETY: the descriptor is a bound, listening TCP socket that `into_raw_fd` gave up, so
    // the glommio listener is its only owner.
    Ok(unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) })
}

/// Binds both listeners, then serves until the process is stopped.
pub async fn run(config: Config) -> Result<(), StartError> {
    let bind = |what, address| {
        listen(address).map_err(|source| StartError::Bind {
            what,
            address,
            source: source.into(),
        })
    };
    // The controller first: a data path it refuses stops the start before anything listens.
    let controller = match &config.controller {
        Some(cfg) => Some(crate::controller::start(cfg).map_err(StartError::Controller)?),
        None => None,
    };
    let tcp = bind("TCP", config.tcp_address)?;
    let http = bind("HTTP", config.http_address)?;
    let port = |l: &TcpListener, fallback: std::net::SocketAddr| l.local_addr().unwrap_or(fallback);
    let tcp_addr = port(&tcp, config.tcp_address);
    let http_addr = port(&http, config.http_address);
    info!("TCP: listening on {tcp_addr}");
    info!("HTTP: listening on {http_addr}");
    let lookup = Rc::new(Lookup::new(
        config,
        tcp_addr.port(),
        http_addr.port(),
        controller,
    ));
    let tcp_task = glommio::spawn_local(crate::tcp::serve(tcp, lookup.clone()));
    crate::http_api::serve(http, lookup).await;
    tcp_task.await;
    Ok(())
}

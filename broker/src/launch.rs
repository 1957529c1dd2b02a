//! Launching the broker: parse nsqd's flags, check RLIMIT_MEMLOCK, claim the listen
//! addresses and lock the data path, start one pinned executor per shard plus the control
//! thread, all joined by the mailbox mesh, watch them start (`crate::startup`), then wait for
//! them to finish (after SIGTERM/SIGINT) and give the exit status. See ARCHITECTURE.md.

use crate::admin_ops;
use crate::config::Config;
use crate::startup::StartError;
use crate::sys::listen::{ListenAddr, ListenError};
use crate::sys::{listen, rlimit};
use crate::{control, shard, startup};
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement, PoolPlacement};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// Batches a mailbox ring holds before its sender waits.
const MAILBOX_CAPACITY: usize = 1024;
/// After a shard failed to start, the longest the others may take to stop before the process
/// exits anyway.
const START_FAILURE_STOP_LIMIT: Duration = Duration::from_secs(30);

/// Runs the broker with the process's command line until it stops; the exit status.
pub fn run() -> ExitCode {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some(crate::nsqd_import::cli::COMMAND) {
        return crate::nsqd_import::cli::main(args.collect());
    }
    crate::sys::malloc_tuning::tune();
    let mut config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            // Before logging starts: the text alone. (--help and --version exit 0 from the
            // parser, on stdout.)
            let e = StartError::from(e);
            let text = e.to_string();
            eprint!("{text}");
            if !text.ends_with('\n') {
                eprintln!();
            }
            return ExitCode::from(e.exit_code());
        }
    };
    init_logging(&config.log_level);
    exit_on_panic();
    for note in &config.without_effect {
        warn!("flag accepted without effect: {note}");
    }
    for key in &config.ignored_keys {
        warn!("config file key accepted without effect: {key} (an nsqd option the broker has no use for)");
    }
    config.tls_server = match crate::tls::server_config(config.tls.as_ref()) {
        Ok(server) => server.map(|s| Arc::new(crate::tls::Reloadable::new(s))),
        Err(e) => return start_failed(e.into()),
    };
    if let (Some(server), Some(settings)) = (&config.tls_server, &config.tls) {
        if let Err(e) = crate::tls::reload_on_sighup(server.clone(), settings.clone()) {
            return start_failed(StartError::Signals(e));
        }
    }
    if let Err(e) = rlimit::ensure_memlock(config.shards) {
        return start_failed(e.into());
    }
    // Held until exit: port-0 reservations and address claims (see claim_ports).
    let _reserved_ports = match claim_ports(&mut config) {
        Ok(r) => r,
        Err(e) => return start_failed(e),
    };
    // Held until exit: the lock on --data-path (see lock_data_path).
    let _data_lock = match lock_data_path(&config.data_path) {
        Ok(l) => l,
        Err(e) => return start_failed(e),
    };
    // An nsqd data directory becomes the broker's own before any shard opens a topic.
    if let Err(e) = crate::nsqd_import::at_startup(&config.data_path, config.max_bytes_per_file) {
        return start_failed(e.into());
    }
    // A replication member: a new incarnation, durable before anything serves.
    if let Some(address) = config.replication_address.clone() {
        let identity = match crate::cluster::identity::start(&config.data_path) {
            Ok(i) => i,
            Err(e) => return start_failed(e.into()),
        };
        info!(
            broker_id = identity.broker_id,
            incarnation = identity.incarnation,
            first_start = identity.first_start,
            boot_changed = identity.boot_changed,
            replication_address = %address,
            "replication: this broker's identity"
        );
        if config.lookupd_tcp_addresses.is_empty() {
            warn!(
                "--replication-address without --lookupd-tcp-address: no controller to talk to \
                 until PUT /config/nsqlookupd_tcp_addresses names the lookups"
            );
        }
        config.cluster = Some(Arc::new(crate::cluster::Status::new(identity, address)));
    }
    let signals = match control::install_signals() {
        Ok(s) => s,
        Err(e) => return start_failed(StartError::Signals(e)),
    };
    let config = Arc::new(config);
    let shards = config.shards;
    info!(
        tcp = %config.tcp_address,
        shards,
        cpus = ?config.cpus,
        data_path = %config.data_path.display(),
        version = env!("CARGO_PKG_VERSION"),
        "broker starting"
    );

    let shard_cpus: Vec<usize> = (0..shards)
        .map(|i| config.cpus[i % config.cpus.len()])
        .collect();
    // Held until exit: unix socket files, removed at the end (a clean stop, or a failed start).
    let (listeners, steered, _socket_files) = match listen::open(
        &config.tcp_address,
        &config.http_address,
        config.https_address,
        &shard_cpus,
        config.connection_steering,
    ) {
        Ok(l) => l,
        Err(e) => return start_failed(e.into()),
    };
    let mut listeners = listeners.into_iter();

    // Shards are peers 0..shards; the control thread is the last peer.
    let mesh = MeshBuilder::full(shards + 1, MAILBOX_CAPACITY);
    // Each shard says whether it got as far as serving (its topics loaded, accepting).
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<bool>();
    // Shards that ended with an error: the control thread's shutdown does not wait for them.
    let failed_shards = Arc::new(AtomicUsize::new(0));
    // Who has reached which start-up step, for the watchdog below.
    let progress = Arc::new(startup::StartProgress::new(shards));
    let mut handles = Vec::new();
    for i in 0..shards {
        let cpu = config.cpus[i % config.cpus.len()];
        let cfg = config.clone();
        let mesh = mesh.clone();
        let listeners = listeners.next();
        let ready = ready_tx.clone();
        let failed = failed_shards.clone();
        let steps = progress.clone();
        let mut builder =
            LocalExecutorBuilder::new(Placement::Fixed(cpu)).name(&format!("shard-{i}"));
        if !config.spin_before_park.is_zero() {
            builder = builder.spin_before_park(config.spin_before_park);
        }
        let spawned = builder
            .io_memory(rlimit::IO_MEMORY_PER_SHARD)
            .spawn(move || async move {
                let result = shard::run(
                    i,
                    cfg,
                    mesh,
                    shards,
                    shard::FrontEnds {
                        listeners,
                        start: start_front_ends,
                    },
                    &ready,
                    &steps,
                )
                .await;
                if let Err(e) = &result {
                    error!("{e}");
                    steps.set(i, startup::Step::Failed);
                    failed.fetch_add(1, Ordering::SeqCst);
                    let _ = ready.send(false);
                }
                result
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(source) => {
                return start_failed(StartError::SpawnShard {
                    shard: i,
                    cpu,
                    source,
                })
            }
        }
    }
    let control_config = config.clone();
    let control_failed = failed_shards.clone();
    let control_steps = progress.clone();
    let control = LocalExecutorBuilder::new(Placement::Unbound)
        .name("control")
        // Two blocking threads: `control::run` keeps one for the whole run, waiting for the
        // first signal; with a single one (glommio's default) every later `spawn_blocking` of
        // the control thread queued behind it for ever: resolving a lookup given by name
        // (`lookup-1.internal:4160`, as deploy/broker.env has it) when reconnecting to it, or
        // to ask it for a new topic's channels. The broker then never reconnected to a lookup
        // that had restarted or been unreachable, and held every new topic's first PUB 1 s.
        .blocking_thread_pool_placement(PoolPlacement::Unbound(2))
        .io_memory(rlimit::IO_MEMORY_CONTROL)
        .spawn(move || async move {
            control::run(
                control_config,
                mesh,
                shards,
                signals,
                control_failed,
                &control_steps,
            )
            .await
        });
    let control = match control {
        Ok(h) => h,
        Err(e) => return start_failed(StartError::SpawnControl(e)),
    };
    drop(ready_tx);
    // "Listening" once every shard serves: the sockets take connections from the start, but a
    // shard answers them only after loading its topics (and clearing a stop's leftovers). The
    // watchdog names whoever is slow, and ends a start stuck where no work can take long.
    let serving = progress.watch(&ready_rx, shards);
    if serving {
        info!(tcp = %config.tcp_address, shards, steering = if steered { "cpu" } else { "hash" }, "TCP: listening");
        info!(http = %config.http_address, shards, "HTTP: listening");
        if let Some(https) = config.https_address {
            info!(https = %https, shards, "HTTPS: listening");
        }
        if config.tls_required == crate::tls::TlsRequired::Yes && config.https_address.is_none() {
            warn!(
                "--tls-required with --https-address \"\": the HTTP API answers every request \
                 403 TLS_REQUIRED and is served over TLS nowhere (as nsqd)"
            );
        }
    } else if failed_shards.load(Ordering::SeqCst) < shards {
        // Some shards serve, but the topics of the failed ones cannot be reached: stop the
        // others the clean way (what they accepted meanwhile is handed over to storage).
        stop_after_start_failure();
    }

    let mut failed = false;
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(())) => {}
            // Logged by the shard's thread as it ended.
            Ok(Err(_)) => failed = true,
            Err(e) => {
                error!("shard {i} failed: {e}");
                failed = true;
            }
        }
    }
    if failed {
        // Every shard has ended, some with an error (a start-up failure such as an unusable
        // --data-path, or a shutdown that lost data): exit with it. The control thread may
        // still wait for shards that never reached the mesh; returning ends it.
        return ExitCode::from(1);
    }
    let _ = control.join();
    info!("broker stopped");
    ExitCode::SUCCESS
}

/// Logs why the broker does not start; the exit status to end with.
fn start_failed(e: StartError) -> ExitCode {
    error!("{e}");
    ExitCode::from(e.exit_code())
}

/// Starts the normal shutdown (as SIGTERM does) after a shard failed to start, with a bound: a
/// shard that failed before joining the mailbox mesh leaves the others waiting in their join,
/// where they have served nothing, so exiting then loses nothing.
fn stop_after_start_failure() {
    error!("a shard failed to start; stopping the others");
    // SAFETY: kill(2) on our own pid with a signal whose handler signal-hook installed.
    unsafe {
        libc::kill(std::process::id() as libc::pid_t, libc::SIGTERM);
    }
    let _ = std::thread::Builder::new()
        .name("start-failure".into())
        .spawn(|| {
            std::thread::sleep(START_FAILURE_STOP_LIMIT);
            error!("the shards did not stop within {START_FAILURE_STOP_LIMIT:?} of a start-up failure; exiting");
            std::process::exit(1);
        });
}

/// Checks the TCP, HTTP and HTTPS addresses are free, and resolves port 0 to one real port every
/// shard then shares (each shard binds it with SO_REUSEPORT). Returns what the process must
/// hold until it exits.
///
/// An explicit port is probed with a bound socket (SO_REUSEADDR, no SO_REUSEPORT, never
/// listening), which fails if anything listens on the port, then released for the shards. A
/// listener that only a process which has exited still holds (its io_uring not yet torn down:
/// a restart right after a crash) is waited for, bounded ([`listen::RELEASE_WAIT`]).
/// Between the probe and the shards' binds a second broker started at the same moment could
/// pass its own probe and join the same SO_REUSEPORT group (each would then answer half of
/// the connections), so the address is also claimed by name: an abstract unix socket
/// `nsq-broker-listen-<addr>`, which only one process can bind and the kernel releases when
/// the process ends, however it ends.
///
/// A port-0 address is resolved by a bound, never-listening SO_REUSEPORT socket that the
/// process keeps: the kernel then hands that port to no other `bind(0)`, and the shards join
/// it.
fn claim_ports(config: &mut Config) -> Result<Vec<std::os::fd::OwnedFd>, StartError> {
    let mut held = Vec::new();
    let claim = |flag, addr: &ListenAddr, held: &mut Vec<std::os::fd::OwnedFd>| match addr {
        ListenAddr::Tcp(a) => claim_port(flag, *a, held).map(ListenAddr::Tcp),
        // A path is checked when its socket is made (`sys::unix_listen`).
        ListenAddr::Unix(_) => Ok(addr.clone()),
    };
    let tcp = claim("--tcp-address", &config.tcp_address, &mut held)?;
    let http = claim("--http-address", &config.http_address, &mut held)?;
    let https = match config.https_address {
        Some(addr) => Some(claim_port("--https-address", addr, &mut held)?),
        None => None,
    };
    config.tcp_address = tcp;
    config.http_address = http;
    config.https_address = https;
    Ok(held)
}

fn claim_port(
    flag: &'static str,
    addr: std::net::SocketAddr,
    held: &mut Vec<std::os::fd::OwnedFd>,
) -> Result<std::net::SocketAddr, StartError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let fail = |e: std::io::Error| ListenError::new(flag, addr, e);
    let sock =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(fail)?;
    if addr.port() != 0 {
        // SO_REUSEADDR, as nsqd's Go listeners have it: without it, the connections of the
        // broker's previous run still in TIME_WAIT or FIN_WAIT on the port (a restart right
        // after a stop with clients connected) would refuse the bind for up to a minute. A
        // socket listening on the port still refuses it.
        sock.set_reuse_address(true).map_err(fail)?;
        // Bound, never listening: fails if anything listens on the port, and no client can
        // connect to the probe and take it for the broker before the shards listen. A port
        // held only by the listener of a broker that has just died (its io_uring is torn down
        // after it exits) is waited for; a live process's is refused at once.
        nsq_common::port_holder::bind_when_released(
            addr,
            listen::RELEASE_WAIT,
            || sock.bind(&addr.into()),
            || {
                warn!(
                    "{flag} {addr}: the port is still held by a listening socket of a process \
                     that has exited; waiting up to {}s for the kernel to release it",
                    listen::RELEASE_WAIT.as_secs()
                )
            },
        )
        .map_err(|(e, holder)| ListenError::with_holder(flag, addr, e, holder))?;
        held.push(claim_by_name(flag, addr)?);
        drop(sock);
        return Ok(addr);
    }
    sock.set_reuse_port(true).map_err(fail)?;
    sock.bind(&addr.into()).map_err(fail)?;
    let actual = sock
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .ok_or(StartError::NoLocalAddress { flag, addr })?;
    held.push(sock.into());
    Ok(actual)
}

/// Binds the abstract unix socket that names `addr` as this broker's (see [`claim_ports`]).
fn claim_by_name(
    flag: &'static str,
    addr: std::net::SocketAddr,
) -> Result<std::os::fd::OwnedFd, StartError> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("nsq-broker-listen-{addr}");
    let claim = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|a| std::os::unix::net::UnixListener::bind_addr(&a));
    match claim {
        Ok(listener) => Ok(listener.into()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            Err(StartError::AddressClaimed { flag, addr })
        }
        Err(source) => Err(StartError::ClaimFailed { flag, addr, source }),
    }
}

/// Takes an exclusive lock (`flock`) on the data directory for the life of the process, as
/// nsqd does: two brokers writing one directory would overwrite each other's segments and
/// metadata (each believes it owns every topic there), and acknowledged messages of one are
/// lost at the next start. The kernel drops the lock when the process ends, however it ends.
///
/// The directory must exist (a missing one is a typo, or a mount not there yet: starting an
/// empty store there would hide the real data) and this user must be able to create files in
/// it (otherwise the broker would look healthy and refuse every publish).
fn lock_data_path(path: &std::path::Path) -> Result<std::fs::File, StartError> {
    use crate::sys::dir_lock::LockError;
    let owned = || path.to_path_buf();
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(StartError::DataPathNotDirectory { path: owned() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StartError::DataPathMissing { path: owned() })
        }
        Err(source) => {
            return Err(StartError::DataPathOpen {
                path: owned(),
                source,
            })
        }
    }
    let dir = match crate::sys::dir_lock::lock(path) {
        Ok(dir) => dir,
        Err(LockError::Held) => return Err(StartError::DataPathInUse { path: owned() }),
        Err(LockError::Io(source)) => {
            return Err(StartError::DataPathLock {
                path: owned(),
                source,
            })
        }
    };
    check_writable(path)?;
    Ok(dir)
}

/// Creates (or opens, one a killed run left) and removes a file in `path`: what every topic
/// directory and segment needs.
fn check_writable(path: &std::path::Path) -> Result<(), StartError> {
    let probe = path.join(format!(".write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|source| StartError::DataPathNotWritable {
            path: path.to_path_buf(),
            source,
        })
}

/// A panic is a bug, and a shard thread that dies of one leaves its connections hanging and its
/// topics unowned while the process still looks alive (seen while developing: a RefCell borrow
/// in the flusher stopped every publish, with the process up at 0% CPU). So a panic anywhere
/// ends the whole process, as one ends nsqd: after the usual message and backtrace, an error
/// log and exit code 101, and the supervisor (`deploy/broker.service`, `Restart=on-failure`)
/// starts it again, to recover as after a kill -9.
fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        let current = std::thread::current();
        let thread = current.name().unwrap_or("unnamed");
        error!(thread, "panic: {info}; the broker exits");
        std::process::exit(101);
    }));
}

fn init_logging(level: &str) {
    let level = match level {
        "fatal" => "error",
        l => l,
    };
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Behind a reload layer, so that PUT /config/log_level takes effect.
    let (filter, reload) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false),
        )
        .init();
    admin_ops::set_log_level_setter(Box::new(move |l: &str| {
        let l = if l == "fatal" { "error" } else { l };
        reload
            .modify(|f| *f = tracing_subscriber::EnvFilter::new(l))
            .map_err(|e| admin_ops::LogLevelError(e.to_string()))
    }));
}

/// Starts a shard's servers: the TCP acceptor (its task is returned) and the HTTP server (and
/// HTTPS, on its own listener).
fn start_front_ends(
    shard: &std::rc::Rc<shard::Shard>,
    listeners: crate::sys::listen::ShardListeners,
) -> glommio::Task<()> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the fd is a bound, listening socket (TCP, or a unix socket, whose connections
    // glommio's TcpStream reads and writes alike) this shard now owns alone.
    let listener = listeners
        .tcp
        .map(|fd| unsafe { glommio::net::TcpListener::from_raw_fd(fd.into_raw_fd()) });
    crate::http::start(shard, listeners.http, listeners.https);
    let accept_shard = shard.clone();
    glommio::spawn_local(async move { crate::tcp::accept_loop(accept_shard, listener).await })
}

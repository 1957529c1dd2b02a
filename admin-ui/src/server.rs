//! The listener and each connection's request loop: a thread per browser connection (an admin
//! UI has a handful), keep-alive, requests decoded with `http1`, answers from
//! [`crate::api`].

use crate::api::{self, App};
use crate::audit::Audit;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::live_config::LiveConfig;
use crate::pages::Pages;
use crate::upstream::Upstream;
use bytes::BytesMut;
use http1::{Decoded, Limits, RequestDecoder, CONTINUE_RESPONSE};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Connections served at once; more are closed at once (each is a thread).
const MAX_CONNECTIONS: usize = 256;
/// A keep-alive connection with no request for this long is closed.
const IDLE: Duration = Duration::from_secs(60);

/// Listens on `--http-address` and serves until the process is stopped; `set_log_level`
/// changes the level of the running process (`PUT /config/log_level`).
pub fn run(
    config: Config,
    set_log_level: Box<dyn Fn(tracing::Level) + Send + Sync>,
) -> Result<(), String> {
    let upstream = Arc::new(Upstream::new(
        crate::tls::client_config(&config.tls)?,
        config.timeouts,
    ));
    let listener = TcpListener::bind(config.http_address).map_err(|e| {
        format!(
            "cannot listen on --http-address {}: {e}",
            config.http_address
        )
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    info!("HTTP: listening on {local}");
    info!(lookups = ?config.lookups, brokers = ?config.brokers, "reading the cluster from");
    if !config.base_path.is_empty() {
        info!("serving under the base path {}", config.base_path);
    }
    let cluster = Arc::new(Cluster::new(
        config.lookups,
        config.brokers,
        upstream.clone(),
    ));
    let rates = if config.sample_interval.is_zero() {
        info!("rates: --sample-interval 0, the sampler is off");
        None
    } else {
        Some(crate::sampler::start(
            cluster.clone(),
            config.sample_interval,
        )?)
    };
    let app = Arc::new(App {
        rates,
        audit: Audit {
            admin_users: config.admin_users,
            acl_http_header: config.acl_http_header,
            notify: config.notification_http_endpoint,
            hostname: nsq_common::hostname(),
            upstream,
        },
        pages: Pages::new(&config.base_path, &config.graphite, config.dev_static_dir),
        graphite: config.graphite,
        live: LiveConfig {
            options: std::sync::RwLock::new(config.options),
            allow: config.allow_config_from,
            cluster: cluster.clone(),
            set_log_level,
        },
        base_path: config.base_path,
        cluster,
    });
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                warn!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::Relaxed);
            warn!("{MAX_CONNECTIONS} connections open; one more refused");
            continue;
        }
        let (app, open) = (app.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("admin-conn".into())
            .spawn(move || {
                let peer = conn.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                if let Err(e) = serve(conn, &app, &peer) {
                    debug!(client = %peer, "connection ended: {e}");
                }
                open.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            warn!("cannot start a connection thread: {e}");
        }
    }
    Ok(())
}

/// One connection: requests answered in order until the client closes or asks to.
fn serve(mut conn: TcpStream, app: &App, peer: &str) -> std::io::Result<()> {
    conn.set_read_timeout(Some(IDLE))?;
    let _ = conn.set_nodelay(true);
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut chunk = [0u8; 8 * 1024];
    loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Request(req)) => {
                    let resp = api::handle(app, &req, peer);
                    debug!("{} {} {}", resp.status, req.head.method(), req.head.path());
                    let mut out = BytesMut::new();
                    resp.write_for(&req.head, &mut out);
                    conn.write_all(&out)?;
                    if !req.head.keep_alive {
                        return Ok(());
                    }
                }
                Ok(Decoded::SendContinue) => conn.write_all(CONTINUE_RESPONSE)?,
                Ok(Decoded::Incomplete) => break,
                Err(e) => {
                    let mut out = BytesMut::new();
                    e.to_response().write_to(&mut out, false, false);
                    conn.write_all(&out)?;
                    return Ok(());
                }
            }
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

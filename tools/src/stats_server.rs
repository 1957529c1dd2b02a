//! `--stats-address host:port`: a small HTTP/1.1 listener on the tool's executor serving
//! `GET /metrics` ([`Metrics::render`], Prometheus text format) and `GET /ping`; anything
//! else is a 404 (405 for another method). One request per connection (answered with
//! `Connection: close`); requests are read with the workspace's `http1::RequestDecoder`.
//!
//! Invariant: a bad request, a broken connection or one silent for [`READ_TIMEOUT`] ends that
//! connection only (logged at debug); the tool never stops for it.

use crate::metrics::Metrics;
use bytes::BytesMut;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use http1::{Decoded, Limits, RequestDecoder, Response};
use std::rc::Rc;
use std::time::Duration;

/// How long a connection may take between two reads of its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` (an error names it) and serves `metrics` there until the process ends.
pub fn start(addr: &str, metrics: Rc<Metrics>) -> Result<(), String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("--stats-address {addr}: {e}"))?;
    if let Ok(local) = listener.local_addr() {
        tracing::info!(address = %local, "serving /metrics");
    }
    glommio::spawn_local(async move {
        loop {
            match listener.accept().await {
                Ok(stream) => {
                    let m = metrics.clone();
                    glommio::spawn_local(async move {
                        if let Err(e) = serve(stream, &m).await {
                            tracing::debug!(error = %e, "stats connection ended");
                        }
                    })
                    .detach();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "stats listener: accept failed");
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
    .detach();
    Ok(())
}

async fn serve(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let limits = Limits {
        max_header_bytes: 64 * 1024,
        max_body: 64 * 1024,
        ..Limits::default()
    };
    let mut decoder = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; 8192];
    let mut out = BytesMut::new();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Decoded::Request(req)) => {
                let resp = match (req.head.method(), req.head.path()) {
                    ("GET" | "HEAD", "/metrics") => Response::empty(200)
                        .with_header("Content-Type", "text/plain; version=0.0.4")
                        .with_body(metrics.render()),
                    ("GET" | "HEAD", "/ping") => Response::text(200, "OK"),
                    (_, "/metrics" | "/ping") => Response::error(405, "METHOD_NOT_ALLOWED"),
                    _ => Response::error(404, "NOT_FOUND"),
                };
                resp.write_closing(&req.head, &mut out);
                break;
            }
            Ok(Decoded::Incomplete) => {}
            Ok(Decoded::SendContinue) => {
                stream.write_all(http1::CONTINUE_RESPONSE).await?;
            }
            Err(e) => {
                e.to_response().write_to(&mut out, false, false);
                break;
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    stream.write_all(&out).await?;
    stream.close().await
}

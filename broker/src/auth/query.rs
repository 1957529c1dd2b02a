//! Asking the auth servers, on the shard's executor: [`query_any`] tries each server in turn,
//! from a random one (as nsqd, so clients spread over the servers), until one gives a valid
//! answer.
//!
//! One attempt: resolve the host (glommio's blocking pool for a name, at once for an IP),
//! connect (a glommio `TcpStream`, within the connect timeout), send the request and read the
//! answer with `http1::client::exchange`, all within the request timeout; then status `200`
//! and a valid body ([`AuthState::from_answer`]).
//!
//! Invariants: an attempt never outlives the request timeout and never holds more than
//! [`ANSWER_LIMITS`] of answer; every failure is an [`AuthError`] naming the server.

use super::{AuthError, AuthRequest, AuthServer, AuthSettings, AuthState};
use glommio::net::TcpStream;
use http1::client::exchange;
use http1::Limits;
use nsq_common::timeout::with_timeout;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Bounds on an auth server's answer: 64 KiB of head, 1 MiB of body (thousands of
/// authorizations).
pub const ANSWER_LIMITS: Limits = Limits {
    max_header_bytes: 64 * 1024,
    max_headers: 64,
    max_body: 1024 * 1024,
};

/// Asks the servers of `settings` in turn, from a random one, until one answers validly.
/// `Err` lists every server's failure (for the log).
pub async fn query_any(
    settings: &AuthSettings,
    req: &AuthRequest<'_>,
) -> Result<AuthState, AuthError> {
    let n = settings.servers.len();
    if n == 0 {
        return Err(AuthError("no auth server configured".into()));
    }
    let start = random_index(n);
    let mut failures = Vec::new();
    for i in 0..n {
        let server = &settings.servers[(start + i) % n];
        match query_one(server, settings, req).await {
            Ok(state) => return Ok(state),
            Err(e) => failures.push(format!(
                "failed to auth against {} - {}",
                server.address, e.0
            )),
        }
    }
    Err(AuthError(failures.join("; ")))
}

/// A number in `0..n` that differs from call to call (std's per-call random hasher keys).
fn random_index(n: usize) -> usize {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(clock_nanos());
    (h.finish() % n as u64) as usize
}

fn clock_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One attempt on one server, bounded by the request timeout.
pub async fn query_one(
    server: &AuthServer,
    settings: &AuthSettings,
    req: &AuthRequest<'_>,
) -> Result<AuthState, AuthError> {
    let deadline = Instant::now() + settings.request_timeout;
    let attempt = async {
        let addr = resolve(server).await?;
        let connect_within = settings
            .connect_timeout
            .min(deadline.saturating_duration_since(Instant::now()))
            .max(Duration::from_millis(1));
        let mut stream = TcpStream::connect_timeout(addr, connect_within)
            .await
            .map_err(|e| AuthError(format!("connect {addr}: {e}")))?;
        let request = server.request(settings.method, req);
        let answer = exchange(&mut stream, &request, &ANSWER_LIMITS)
            .await
            .map_err(|e| AuthError(e.to_string()))?;
        if answer.status != 200 {
            let body = String::from_utf8_lossy(&answer.body);
            let body: String = body.chars().take(256).collect();
            return Err(AuthError(format!(
                "got response {} {body:?}",
                answer.status
            )));
        }
        AuthState::from_answer(&answer.body, Instant::now())
    };
    match with_timeout(settings.request_timeout, attempt).await {
        Some(result) => result,
        None => Err(AuthError(format!(
            "no answer within {:?} (--http-client-request-timeout)",
            settings.request_timeout
        ))),
    }
}

/// The server's address: parsed at once for an IP, else resolved off the executor's thread
/// (DNS may block).
async fn resolve(server: &AuthServer) -> Result<SocketAddr, AuthError> {
    if let Ok(ip) = server.host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, server.port));
    }
    let target = server.connect_address();
    let owned = target.clone();
    let resolved = glommio::executor()
        .spawn_blocking(move || {
            use std::net::ToSocketAddrs;
            owned.to_socket_addrs().map(|mut i| i.next())
        })
        .await;
    match resolved {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(AuthError(format!("{target} resolves to no address"))),
        Err(e) => Err(AuthError(format!("cannot resolve {target}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_index_stays_in_range_and_varies() {
        let seen: std::collections::BTreeSet<usize> = (0..200).map(|_| random_index(4)).collect();
        assert!(seen.iter().all(|&i| i < 4));
        assert!(seen.len() > 1, "{seen:?}");
        assert_eq!(random_index(1), 0);
    }
}

//! The client on tokio: its tasks are `spawn_local` ones, so it runs inside a
//! `tokio::task::LocalSet` (on a current-thread runtime, or one thread of a multi-thread one:
//! `LocalSet::run_until`, `LocalSet::block_on`); the socket is tokio's, seen through
//! tokio-util's compat layer as a futures-io stream.

use super::TcpStream;
use crate::error::{Error, Result};
use std::future::Future;
use std::time::Duration;
use tokio_util::compat::TokioAsyncReadCompatExt;

/// True when the current thread runs inside a tokio runtime.
#[cfg(feature = "glommio")]
pub(super) fn entered() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

pub(super) async fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let stream = super::with_timeout(timeout, async {
        tokio::net::TcpStream::connect(addr)
            .await
            .map_err(Error::from)
    })
    .await?;
    let _ = stream.set_nodelay(true);
    Ok(TcpStream::Tokio(stream.compat()))
}

/// Spawns `fut` on the current `LocalSet`. Outside one, tokio panics (its message names
/// `LocalSet`): the crate's documentation says where the client runs.
pub(super) fn spawn(fut: impl Future<Output = ()> + 'static) {
    drop(tokio::task::spawn_local(fut));
}

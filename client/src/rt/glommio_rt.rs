//! The client on glommio: TCP connect (names resolved with the blocking system resolver:
//! glommio has no async one, and its own connect panics on a name that resolves to nothing).

use super::TcpStream;
use crate::error::{Error, Result};
use std::net::ToSocketAddrs;
use std::time::Duration;

pub(super) async fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let sock_addr = addr.to_socket_addrs()?.next().ok_or_else(|| {
        Error::from(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{addr} resolves to no address"),
        ))
    })?;
    let stream = super::with_timeout(timeout, async {
        glommio::net::TcpStream::connect(sock_addr)
            .await
            .map_err(|e| Error::from(std::io::Error::from(e)))
    })
    .await?;
    let _ = stream.set_nodelay(true);
    Ok(TcpStream::Glommio(stream))
}

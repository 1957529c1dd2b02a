//! The TCP side: brokers connect, IDENTIFY, REGISTER and UNREGISTER their topics and channels,
//! and PING to stay active; with the replication controller, they send it `CONTROLLER`
//! requests on the same connection.
//!
//! One task per connection. It checks the `"  V1"` magic, then decodes commands with
//! [`protocol::lookup::decode_lookup_command`], applies each to the database ([`execute`], no
//! I/O, no await) and writes the replies once per read. Any error is answered, then the
//! connection is closed, as nsqlookupd does. However the task ends (EOF, error, socket failure),
//! a guard removes the peer from every registration.

use crate::controller::RequestError;
use crate::db::{Peer, PeerId, Registration, Stamp};
use crate::server::Lookup;
use bytes::{Buf, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use protocol::lookup::{
    decode_lookup_command, write_error_reply, write_reply, LookupCommand, BAD_PROTOCOL_REPLY,
};
use protocol::names::is_ephemeral;
use protocol::{ErrorCode, ProtocolError};
use std::rc::Rc;
use tracing::{debug, info, warn};

/// Size of each socket read.
const READ_CHUNK: usize = 16 * 1024;

/// Accepts peers until the listener fails for good.
pub async fn serve(listener: TcpListener, lookup: Rc<Lookup>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let id = lookup.next_peer_id();
                glommio::spawn_local(handle_peer(stream, id, lookup.clone())).detach();
            }
            Err(e) => {
                // Out of descriptors and the like: wait rather than spin.
                warn!("TCP: accept failed: {e}");
                glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Removes the peer's registrations when its connection task ends, however it ends.
struct PeerGuard {
    id: PeerId,
    remote: String,
    lookup: Rc<Lookup>,
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        let removed = self.lookup.db.borrow_mut().remove_peer(self.id);
        for r in removed {
            info!(
                "DB: client({}) UNREGISTER category:{} key:{} subkey:{}",
                self.remote,
                r.category.as_str(),
                r.key,
                r.sub_key
            );
        }
    }
}

async fn handle_peer(mut stream: TcpStream, id: PeerId, lookup: Rc<Lookup>) {
    let remote = stream
        .peer_addr()
        .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
    info!("TCP: new client({remote})");
    let _guard = PeerGuard {
        id,
        remote: remote.clone(),
        lookup: lookup.clone(),
    };
    match serve_peer(&mut stream, id, &remote, &lookup).await {
        Ok(()) => debug!("TCP: client({remote}) closed"),
        Err(e) => debug!("TCP: client({remote}) ended: {e}"),
    }
    info!("PROTOCOL(V1): [{remote}] exiting ioloop");
}

async fn serve_peer(
    stream: &mut TcpStream,
    id: PeerId,
    remote: &str,
    lookup: &Lookup,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut scratch = vec![0u8; READ_CHUNK];
    let mut out = BytesMut::new();
    while buf.len() < 4 {
        if !read_more(stream, &mut buf, &mut scratch).await? {
            return Ok(());
        }
    }
    if &buf[..4] != protocol::MAGIC_V1 {
        warn!(
            "client({remote}) bad protocol magic {:?}",
            String::from_utf8_lossy(&buf[..4])
        );
        write_reply(&mut out, BAD_PROTOCOL_REPLY);
        return stream.write_all(&out).await;
    }
    buf.advance(4);
    let mut identified = false;
    loop {
        loop {
            match decode_lookup_command(&mut buf, identified) {
                Ok(Some(LookupCommand::Controller(body))) => {
                    match controller_request(lookup, &body) {
                        Ok(answer) => write_reply(&mut out, &answer),
                        Err(e) => {
                            warn!("[{remote}] - {e}");
                            write_error_reply(&mut out, &e);
                            if e.fatal {
                                return stream.write_all(&out).await;
                            }
                        }
                    }
                }
                Ok(Some(command)) => {
                    identified |= matches!(command, LookupCommand::Identify(_));
                    let reply = execute(lookup, id, remote, command, Stamp::now());
                    write_reply(&mut out, &reply);
                }
                Ok(None) => break,
                Err(e) => {
                    warn!("[{remote}] - {e}");
                    write_error_reply(&mut out, &e);
                    return stream.write_all(&out).await;
                }
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if !read_more(stream, &mut buf, &mut scratch).await? {
            return Ok(());
        }
    }
}

/// Appends what the socket has to `buf`; false at end of stream.
async fn read_more(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    scratch: &mut [u8],
) -> std::io::Result<bool> {
    let n = stream.read(scratch).await?;
    buf.extend_from_slice(&scratch[..n]);
    Ok(n > 0)
}

/// Answers a `CONTROLLER` request: the controller's JSON answer, a non-fatal error when this
/// lookup runs no controller (or it stopped), a fatal one when the body is not a request.
fn controller_request(lookup: &Lookup, body: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    let Some(controller) = &lookup.controller else {
        return Err(ProtocolError::non_fatal(
            ErrorCode::Invalid,
            "CONTROLLER this lookup runs no replication controller (see --controller-id)",
        ));
    };
    controller.borrow_mut().request(body).map_err(|e| match e {
        RequestError::BadBody(why) => ProtocolError::fatal(
            ErrorCode::BadBody,
            format!("CONTROLLER failed to decode JSON body: {why}"),
        ),
        RequestError::Stopped(why) => ProtocolError::non_fatal(
            ErrorCode::Invalid,
            format!("CONTROLLER the controller has stopped: {why}"),
        ),
    })
}

/// Applies one decoded command to the database and returns the reply data. Decoding already
/// enforced the order of commands (IDENTIFY first and once).
pub fn execute(
    lookup: &Lookup,
    id: PeerId,
    remote: &str,
    command: LookupCommand,
    now: Stamp,
) -> Vec<u8> {
    let mut db = lookup.db.borrow_mut();
    match command {
        LookupCommand::Identify(info) => {
            info!(
                "CLIENT({remote}): IDENTIFY Address:{} TCP:{} HTTP:{} Version:{}",
                info.broadcast_address, info.tcp_port, info.http_port, info.version
            );
            db.add_peer(Peer {
                id,
                remote_address: remote.to_owned(),
                info,
                last_update: now,
            });
            lookup.identity().to_json()
        }
        LookupCommand::Ping => {
            db.touch_peer(id, now);
            protocol::OK.to_vec()
        }
        LookupCommand::Register { topic, channel } => {
            if let Some(channel) = &channel {
                if db.add_producer(Registration::channel(&topic, channel), id) {
                    info!("DB: client({remote}) REGISTER category:channel key:{topic} subkey:{channel}");
                }
            }
            if db.add_producer(Registration::topic(&topic), id) {
                info!("DB: client({remote}) REGISTER category:topic key:{topic} subkey:");
            }
            protocol::OK.to_vec()
        }
        LookupCommand::Unregister {
            topic,
            channel: Some(channel),
        } => {
            let key = Registration::channel(&topic, &channel);
            let (removed, left) = db.remove_producer(&key, id);
            if removed {
                info!(
                    "DB: client({remote}) UNREGISTER category:channel key:{topic} subkey:{channel}"
                );
            }
            if left == 0 && is_ephemeral(&channel) {
                db.remove_registration(&key);
            }
            protocol::OK.to_vec()
        }
        LookupCommand::Unregister {
            topic,
            channel: None,
        } => {
            // A topic going away takes this peer's channels of it along.
            for key in db.channel_registrations(&topic) {
                if db.remove_producer(&key, id).0 {
                    warn!(
                        "client({remote}) unexpected UNREGISTER category:channel key:{topic} subkey:{}",
                        key.sub_key
                    );
                }
            }
            let key = Registration::topic(&topic);
            let (removed, left) = db.remove_producer(&key, id);
            if removed {
                info!("DB: client({remote}) UNREGISTER category:topic key:{topic} subkey:");
            }
            if left == 0 && is_ephemeral(&topic) {
                db.remove_registration(&key);
            }
            protocol::OK.to_vec()
        }
        // Answered by `controller_request` before it gets here.
        LookupCommand::Controller(_) => Vec::new(),
    }
}

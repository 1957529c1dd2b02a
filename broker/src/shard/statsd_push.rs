//! Pushing metrics to statsd (`--statsd-address`): every `--statsd-interval` each shard sends
//! nsqd's metric lines (`crate::statsd`) for the topics it owns, so every topic's figures come
//! whole from its owner, never as parts from several shards under one name; shard 0 also sends
//! the process's `mem.*` lines. UDP, one packet per `--statsd-udp-packet-size` bytes of lines,
//! sent at once (nsqd spreads its packets over the interval less one second, which fails at a
//! 1 s interval; here any interval works).
//!
//! Invariants: the task runs only when statsd is configured; a failed resolve or send is
//! logged (once per run of failures) and the next push tries again; nothing here blocks the
//! shard (the address is resolved on a blocking thread).

use super::Shard;
use crate::admin_ops::StatsQuery;
use crate::config::StatsdConfig;
use crate::statsd::{mem_lines, packets, topic_lines, MemFigures, Previous};
use glommio::net::UdpSocket;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use tracing::{info, warn};

impl Shard {
    /// Starts the push task when `--statsd-address` is given.
    pub(super) fn start_statsd(self: &Rc<Self>) {
        if let Some(cfg) = self.config.statsd.clone() {
            glommio::spawn_local(self.clone().push_statsd(cfg)).detach();
        }
    }

    async fn push_statsd(self: Rc<Self>, cfg: StatsdConfig) {
        let http_port = match self.config.broadcast_http_port {
            0 => self.config.http_address.port(),
            p => p,
        };
        let prefix = cfg.prefix_for(&self.config.broadcast_address, http_port);
        if self.id == 0 {
            info!(address = %cfg.address, prefix = %prefix, interval = ?cfg.interval, "STATSD: pushing stats");
        }
        let mut previous = Previous::default();
        let mut socket: Option<(UdpSocket, bool)> = None;
        let mut failing = false;
        loop {
            glommio::timer::sleep(cfg.interval).await;
            if self.is_stopping() {
                return;
            }
            let stats = self.shard_stats(&StatsQuery::default());
            let (mut lines, next) =
                topic_lines(&stats.topics, &previous, &prefix, cfg.exclude_ephemeral);
            previous = next;
            if self.id == 0 && cfg.mem_stats {
                lines.extend(mem_lines(&prefix, &mem_figures()));
            }
            if lines.is_empty() {
                continue;
            }
            let sent = self.send_lines(&cfg, &lines, &mut socket).await;
            match sent {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    warn!(shard = self.id, address = %cfg.address, "STATSD: cannot push stats: {e}");
                }
                Err(_) => {}
            }
        }
    }

    /// Resolves the address (on a blocking thread, as it may ask DNS) and sends the lines,
    /// packed, from a socket of the address's family (kept between pushes).
    async fn send_lines(
        &self,
        cfg: &StatsdConfig,
        lines: &[String],
        socket: &mut Option<(UdpSocket, bool)>,
    ) -> std::io::Result<()> {
        let address = cfg.address.clone();
        let resolved = glommio::executor()
            .spawn_blocking(move || address.to_socket_addrs().map(|mut a| a.next()))
            .await?;
        let Some(to) = resolved else {
            return Err(std::io::Error::other("the address resolves to nothing"));
        };
        let v6 = to.is_ipv6();
        if socket.as_ref().is_none_or(|(_, was_v6)| *was_v6 != v6) {
            let local: SocketAddr = if v6 {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            };
            let s = UdpSocket::bind(local).map_err(|e| std::io::Error::other(e.to_string()))?;
            *socket = Some((s, v6));
        }
        let Some((s, _)) = socket.as_ref() else {
            return Ok(());
        };
        for packet in packets(lines, cfg.udp_packet_size) {
            s.send_to(&packet, to)
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        Ok(())
    }
}

/// The allocator's figures for the `mem.*` lines (glibc's `mallinfo2`: bytes in use, free in
/// the heap, and kept by the allocator's top chunk that it can give back).
fn mem_figures() -> MemFigures {
    // SAFETY: mallinfo2 only reads the allocator's statistics; it takes no pointers.
    let m = unsafe { libc::mallinfo2() };
    MemFigures {
        in_use_bytes: (m.uordblks + m.hblkhd) as u64,
        idle_bytes: m.fordblks as u64,
        released_bytes: m.keepcost as u64,
    }
}

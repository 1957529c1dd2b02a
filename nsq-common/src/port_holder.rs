//! Who holds a TCP port that a bind refused with `EADDRINUSE`, and binding once the listening
//! socket of a process that has exited is released ([`bind_when_released`]).
//!
//! A program that accepts through io_uring leaves its listening sockets listening for a moment
//! after it has exited: an accept pending in a ring holds a reference to its socket, and the
//! kernel tears the ring down on a worker thread after the process is gone. A supervisor that
//! restarts such a program at once (after a crash, a kill -9) meets its own previous run's
//! listener for some milliseconds. Such a socket is in no process's descriptor table, which is
//! how it is told apart from a live listener: [`holder`] reads the listening sockets on the port
//! (`/proc/net/tcp`, `/proc/net/tcp6`) and looks for their inodes under `/proc/<pid>/fd`.
//!
//! Invariant: a port is only waited for when no process can be holding it. A listener whose
//! owner cannot be looked for (a process of the socket's user whose descriptors this process
//! may not read) counts as live, so the answer is "refuse at once" whenever in doubt; only
//! listeners no process holds are waited for, and for a bounded time.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

/// What holds a TCP address that a bind found in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A live process has a listening socket on the port: `pid` and its command name.
    Process { pid: u32, name: String },
    /// A listening socket on the port whose owner this process may not look for (a process of
    /// the socket's user whose descriptors it cannot read): taken to be live.
    Unseen,
    /// Listening sockets on the port that no process holds: left by a process that has exited,
    /// released by the kernel shortly.
    Exited,
    /// Nothing listens on the port: something else holds it (a socket bound but not
    /// listening, a connection made without `SO_REUSEADDR`).
    NotListening,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Process { pid, name } => write!(f, "process {pid} ({name}) listens on it"),
            Holder::Unseen => write!(f, "a process this user may not inspect listens on it"),
            Holder::Exited => write!(
                f,
                "a listening socket of a process that has exited still holds it"
            ),
            Holder::NotListening => write!(f, "a socket that is not listening holds it"),
        }
    }
}

/// A listening socket from `/proc/net/tcp*`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listener {
    addr: SocketAddr,
    uid: u32,
    inode: u64,
}

/// What holds `addr`, as far as `/proc` shows (see the module's doc).
pub fn holder(addr: SocketAddr) -> Holder {
    look(addr, &HashSet::new()).0
}

/// [`holder`], where the listening sockets whose inodes are in `exited` were found in no
/// process by an earlier look (no process takes such a socket back: only the scan of the
/// descriptor tables for the others is needed). Also returns the inodes of the listeners
/// found.
fn look(addr: SocketAddr, exited: &HashSet<u64>) -> (Holder, HashSet<u64>) {
    let listeners: Vec<Listener> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|text| parse_listeners(&text))
        .filter(|l| conflicts(l.addr, addr))
        .collect();
    let inodes: HashSet<u64> = listeners.iter().map(|l| l.inode).collect();
    if listeners.is_empty() {
        return (Holder::NotListening, inodes);
    }
    if inodes.is_subset(exited) {
        return (Holder::Exited, inodes);
    }
    (owner(&listeners), inodes)
}

/// Who holds one of `listeners`: a process that has one in its descriptor table, or none
/// (`Exited`), or perhaps one we may not look into (`Unseen`).
fn owner(listeners: &[Listener]) -> Holder {
    let inodes: HashSet<u64> = listeners.iter().map(|l| l.inode).collect();
    let uids: HashSet<u32> = listeners.iter().map(|l| l.uid).collect();
    let mut unseen = false;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Holder::Unseen;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let fds = match std::fs::read_dir(entry.path().join("fd")) {
            Ok(fds) => fds,
            // Gone meanwhile, or a kernel thread: holds nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => {
                // A process whose descriptors are hidden from us may hold a socket of its user.
                if entry.metadata().is_ok_and(|m| uids.contains(&m.uid())) {
                    unseen = true;
                }
                continue;
            }
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|target| socket_inode(&target.to_string_lossy()))
                .is_some_and(|inode| inodes.contains(&inode))
        });
        if holds {
            let name = std::fs::read_to_string(entry.path().join("comm"))
                .map(|c| c.trim_end().to_string())
                .unwrap_or_else(|_| "?".to_string());
            return Holder::Process { pid, name };
        }
    }
    if unseen {
        Holder::Unseen
    } else {
        Holder::Exited
    }
}

/// Runs `bind` until it succeeds, or fails otherwise than on a port held only by a listening
/// socket of an exited process ([`Holder::Exited`]); such a port is tried again every few
/// milliseconds for at most `limit`, and `on_wait` is called once, when the waiting starts.
/// `Err` holds the last error and what held the port then (`None` for an error that is not
/// `EADDRINUSE`).
pub fn bind_when_released<T>(
    addr: SocketAddr,
    limit: Duration,
    mut bind: impl FnMut() -> std::io::Result<T>,
    on_wait: impl FnOnce(),
) -> Result<T, (std::io::Error, Option<Holder>)> {
    /// Between tries: the release usually takes a few milliseconds.
    const RETRY: Duration = Duration::from_millis(10);
    let started = Instant::now();
    let mut on_wait = Some(on_wait);
    let mut previous = None;
    let mut exited = HashSet::new();
    loop {
        let e = match bind() {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => e,
            Err(e) => return Err((e, None)),
        };
        let (held, inodes) = look(addr, &exited);
        if held == Holder::Exited {
            exited = inodes;
        }
        match held {
            Holder::Exited if started.elapsed() < limit => {
                if let Some(f) = on_wait.take() {
                    f();
                }
                std::thread::sleep(RETRY);
            }
            // The listener that refused the bind may have been released before it was looked
            // for: one more try tells.
            Holder::NotListening if previous != Some(Holder::NotListening) => {}
            _ => return Err((e, Some(held))),
        }
        previous = Some(held);
    }
}

/// Whether a listener on `listening` stops a bind of `wanted`: same port, and the same address
/// or either one unspecified (IPv4-mapped IPv6 addresses compared as IPv4).
fn conflicts(listening: SocketAddr, wanted: SocketAddr) -> bool {
    let plain = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (a, b) = (plain(listening.ip()), plain(wanted.ip()));
    listening.port() == wanted.port() && (a == b || a.is_unspecified() || b.is_unspecified())
}

/// The inode of a descriptor's link target `socket:[123]`.
fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The listening sockets of a `/proc/net/tcp` or `/proc/net/tcp6` table.
fn parse_listeners(text: &str) -> Vec<Listener> {
    /// `TCP_LISTEN` in the `st` column.
    const LISTEN: &str = "0A";
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&LISTEN) {
                return None;
            }
            Some(Listener {
                addr: parse_addr(f.get(1)?)?,
                uid: f.get(7)?.parse().ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): the address as the kernel prints
/// it, each 32-bit word in the host's byte order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tables_are_read_in_host_byte_order() {
        let lo = u32::from_ne_bytes([127, 0, 0, 1]);
        let v6_word = |b: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(b));
        let v6_loopback = format!(
            "{}{}{}{}",
            v6_word([0, 0, 0, 0]),
            v6_word([0, 0, 0, 0]),
            v6_word([0, 0, 0, 0]),
            v6_word([0, 0, 0, 1])
        );
        let text = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             \x20  0: {lo:08X}:1036 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0\n\
             \x20  1: {lo:08X}:1036 {lo:08X}:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0\n\
             \x20  2: {v6_loopback}:0FA0 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0\n"
        );
        assert_eq!(
            parse_listeners(&text),
            [
                Listener {
                    addr: "127.0.0.1:4150".parse().unwrap(),
                    uid: 1000,
                    inode: 4242
                },
                Listener {
                    addr: "[::1]:4000".parse().unwrap(),
                    uid: 0,
                    inode: 77
                }
            ]
        );
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[4242]"), None);
    }

    #[test]
    fn a_listener_conflicts_on_its_port_and_overlapping_addresses() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(conflicts(a("127.0.0.1:1"), a("127.0.0.1:1")));
        assert!(conflicts(a("0.0.0.0:1"), a("127.0.0.1:1")));
        assert!(conflicts(a("127.0.0.1:1"), a("0.0.0.0:1")));
        assert!(conflicts(a("[::]:1"), a("127.0.0.1:1")));
        assert!(conflicts(a("[::ffff:127.0.0.1]:1"), a("127.0.0.1:1")));
        assert!(!conflicts(a("127.0.0.1:1"), a("127.0.0.1:2")));
        assert!(!conflicts(a("127.0.0.2:1"), a("127.0.0.1:1")));
    }

    #[test]
    fn a_live_listener_is_found_in_its_process() {
        // A child holds the listener, as a process other than the one binding would.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let sock = std::os::fd::AsRawFd::as_raw_fd(&listener);
        // `sleep` inherits the listening socket (std's sockets are close-on-exec: clear it).
        // SAFETY: fcntl on a descriptor this test owns.
        unsafe { libc::fcntl(sock, libc::F_SETFD, 0) };
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        drop(listener);
        let found = holder(addr);
        let mut waited = false;
        let bound = bind_when_released(
            addr,
            Duration::from_secs(5),
            || std::net::TcpListener::bind(addr),
            || waited = true,
        );
        let _ = child.kill();
        let _ = child.wait();
        match bound {
            Err((e, Some(Holder::Process { pid, .. }))) => {
                assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
                assert_eq!(pid, child.id());
            }
            other => panic!("a live listener must be refused at once: {other:?}"),
        }
        assert!(!waited, "a live listener is not waited for");
        assert_eq!(
            found,
            Holder::Process {
                pid: child.id(),
                name: "sleep".to_string()
            }
        );
        let nothing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free = nothing.local_addr().unwrap();
        drop(nothing);
        assert_eq!(holder(free), Holder::NotListening);
    }
}

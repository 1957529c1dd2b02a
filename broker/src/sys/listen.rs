//! The listening sockets: every shard's TCP, HTTP and (with a certificate) HTTPS listener, opened by the main thread in a
//! fixed order before the shards start, and the steering program that picks which shard's
//! listener takes a new connection.
//!
//! All shards listen on the same address with SO_REUSEPORT. By default the kernel spreads new
//! connections by a hash of their addresses. With `--connection-steering cpu` (the default) a
//! classic BPF program (SO_ATTACH_REUSEPORT_CBPF) gives a connection to a shard pinned to the
//! CPU that processed its SYN instead: the CPU of the NIC queue that received it (RSS), or on
//! loopback the CPU the client runs on. Packets, the wake-up of the shard and the client then
//! stay on one core, where a hash would send about half of them to another core through an
//! inter-processor interrupt (expensive everywhere, very expensive in a VM). A CPU that has
//! several shards picks one of them at random; a CPU without a shard (or a program the kernel
//! refuses) falls back to the hash.
//!
//! The program returns an index into the reuseport group, which is the order in which the
//! sockets started listening: that is why the main thread opens them, in the order it sorts
//! shards by CPU, rather than each shard binding its own.
//!
//! An address may also be a unix socket path ([`ListenAddr::Unix`], nsqd 1.3): one socket for
//! the path (see [`super::unix_listen`]), given to shard 0 alone, not steered.
//!
//! Also [`dup_socket`], the one way the broker takes a second descriptor of a connection.

use super::unix_listen::{self, SocketFile, UnixListenError};
use nsq_common::port_holder::Holder;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// Where `--tcp-address` or `--http-address` listens: `host:port`, or a unix socket path (an
/// address Go's `net.SplitHostPort` refuses, as nsqd 1.3 decides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl ListenAddr {
    /// The TCP port; 0 for a unix socket (what nsqd's broadcast ports keep then: lookups,
    /// statsd's host key).
    pub fn port(&self) -> u16 {
        match self {
            ListenAddr::Tcp(a) => a.port(),
            ListenAddr::Unix(_) => 0,
        }
    }

    /// The port as nsqd's `/info` reports it: -1 for a unix socket.
    pub fn info_port(&self) -> i32 {
        match self {
            ListenAddr::Tcp(a) => i32::from(a.port()),
            ListenAddr::Unix(_) => -1,
        }
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => a.fmt(f),
            ListenAddr::Unix(p) => p.display().fmt(f),
        }
    }
}

/// How a new connection picks its shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Steering {
    /// The shard on the CPU that received the connection (falls back to `hash`).
    Cpu,
    /// The kernel's hash of the connection's addresses.
    Hash,
}

/// One shard's listeners, bound and listening, handed to the shard's thread. A unix socket's
/// listener is shard 0's alone (`None` on the others).
pub struct ShardListeners {
    pub tcp: Option<OwnedFd>,
    pub http: Option<OwnedFd>,
    /// `--https-address`'s, when the HTTP API is also served over TLS.
    pub https: Option<OwnedFd>,
}

/// Why a listening socket could not be opened on `addr`, named by its flag (`--tcp-address`,
/// `--http-address`, `--https-address`).
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Something else holds the address: a process listening on the port, most often;
    /// `holder` says what, when it was looked for.
    #[error("cannot listen on {flag} {addr}: {source}; {}", in_use_advice(holder.as_ref()))]
    InUse {
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
        holder: Option<Holder>,
    },
    #[error("cannot listen on {flag} {addr}: {source}")]
    Failed {
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Unix(#[from] UnixListenError),
}

/// What to tell the operator about a port in use, given what holds it.
fn in_use_advice(holder: Option<&Holder>) -> String {
    match holder {
        Some(h @ Holder::Process { .. }) => {
            format!("{h}; stop it, or choose another address")
        }
        Some(h @ Holder::Exited) => format!(
            "{h} after waiting {}s for the kernel to release it",
            RELEASE_WAIT.as_secs()
        ),
        _ => "another process holds the port (`ss -tlnp` lists the listening ones), or choose \
              another address"
            .to_string(),
    }
}

/// How long start-up waits for a port held only by a listening socket of a process that has
/// exited (see [`nsq_common::port_holder`]): the kernel releases it in milliseconds, later
/// when the exited process's io_uring still had I/O running.
pub const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl ListenError {
    /// `source`, met opening a socket on `flag`'s `addr`.
    pub fn new(flag: &'static str, addr: SocketAddr, source: std::io::Error) -> ListenError {
        ListenError::with_holder(flag, addr, source, None)
    }

    /// `source`, met opening a socket on `flag`'s `addr`, and what held the port when that was
    /// looked for.
    pub fn with_holder(
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
        holder: Option<Holder>,
    ) -> ListenError {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            ListenError::InUse {
                flag,
                addr,
                source,
                holder,
            }
        } else {
            ListenError::Failed { flag, addr, source }
        }
    }
}

/// Opens `cpus.len()` TCP, HTTP and (when `https` is given) HTTPS listeners (shard i pinned to
/// `cpus[i]`) and installs the steering program on each group; a unix socket address gets one
/// listener, shard 0's. Returns them indexed by shard, whether steering by CPU took effect, and
/// the socket files made (removed when dropped).
pub fn open(
    tcp: &ListenAddr,
    http: &ListenAddr,
    https: Option<SocketAddr>,
    cpus: &[usize],
    steering: Steering,
) -> Result<(Vec<ShardListeners>, bool, Vec<SocketFile>), ListenError> {
    // Group order: shards sorted by CPU, so that one CPU's shards sit side by side.
    let mut order: Vec<usize> = (0..cpus.len()).collect();
    order.sort_by_key(|&i| (cpus[i], i));
    let mut files = Vec::new();
    let tcp_group = open_any("--tcp-address", tcp, &order, &mut files)?;
    let http_group = open_any("--http-address", http, &order, &mut files)?;
    let https_group = match https {
        Some(addr) => Group::Tcp(open_group("--https-address", addr, &order)?),
        None => Group::None,
    };
    let mut steered = false;
    if steering == Steering::Cpu {
        let program = cpu_program(&order.iter().map(|&i| cpus[i]).collect::<Vec<_>>());
        let firsts = [&tcp_group, &http_group, &https_group]
            .into_iter()
            .filter_map(|g| match g {
                Group::Tcp(socks) => socks.first(),
                _ => None,
            });
        match firsts
            .map(|s| attach(s, &program))
            .collect::<Result<Vec<()>, _>>()
        {
            Ok(attached) => steered = !attached.is_empty(),
            Err(e) => {
                tracing::warn!("connection steering by CPU unavailable, hashing instead: {e}");
            }
        }
    }
    // Back from group order to shard order.
    let mut tcp_socks = tcp_group.by_shard(&order);
    let mut http_socks = http_group.by_shard(&order);
    let mut https_socks = https_group.by_shard(&order);
    let listeners = (0..cpus.len())
        .map(|shard| ShardListeners {
            tcp: tcp_socks[shard].take(),
            http: http_socks[shard].take(),
            https: https_socks[shard].take(),
        })
        .collect();
    Ok((listeners, steered, files))
}

/// The listeners of one address: one per shard (TCP), one for shard 0 (a unix socket), or none.
enum Group {
    Tcp(Vec<Socket>),
    Unix(OwnedFd),
    None,
}

impl Group {
    /// Each shard's listener, by shard index (`order` is the group order of [`open`]).
    fn by_shard(self, order: &[usize]) -> Vec<Option<OwnedFd>> {
        let mut out: Vec<Option<OwnedFd>> = order.iter().map(|_| None).collect();
        match self {
            Group::Tcp(socks) => {
                for (&shard, s) in order.iter().zip(socks) {
                    out[shard] = Some(s.into());
                }
            }
            Group::Unix(fd) => out[0] = Some(fd),
            Group::None => {}
        }
        out
    }
}

fn open_any(
    flag: &'static str,
    addr: &ListenAddr,
    order: &[usize],
    files: &mut Vec<SocketFile>,
) -> Result<Group, ListenError> {
    match addr {
        ListenAddr::Tcp(a) => Ok(Group::Tcp(open_group(flag, *a, order)?)),
        ListenAddr::Unix(path) => {
            let (fd, file) = unix_listen::open(flag, path)?;
            files.push(file);
            Ok(Group::Unix(fd))
        }
    }
}

/// One listener per shard on `addr`, listening in group order.
fn open_group(
    flag: &'static str,
    addr: SocketAddr,
    order: &[usize],
) -> Result<Vec<Socket>, ListenError> {
    let fail = |e: std::io::Error| ListenError::new(flag, addr, e);
    order
        .iter()
        .map(|_| {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
                .map_err(fail)?;
            // SO_REUSEADDR: a restart binds over the previous run's lingering connections
            // (see `claim_port` in launch.rs).
            s.set_reuse_address(true).map_err(fail)?;
            s.set_reuse_port(true).map_err(fail)?;
            s.bind(&addr.into()).map_err(fail)?;
            s.listen(1024).map_err(fail)?;
            Ok(s)
        })
        .collect()
}

// Classic BPF, as in <linux/filter.h>.
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP (5) | BPF_JEQ (0x10) | BPF_K (0)
const BPF_MOD_K: u16 = 0x94; // BPF_ALU (4) | BPF_MOD (0x90) | BPF_K (0)
const BPF_ADD_K: u16 = 0x04; // BPF_ALU (4) | BPF_ADD (0) | BPF_K (0)
const BPF_RET_A: u16 = 0x16; // BPF_RET (6) | BPF_A (0x10)
const BPF_RET_K: u16 = 0x06; // BPF_RET (6) | BPF_K (0)
const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
const SKF_AD_CPU: u32 = 36;
const SKF_AD_RANDOM: u32 = 56;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The program for a group whose i-th socket belongs to a shard on `group_cpus[i]` (sorted):
/// for each CPU, `if cpu == c { return base + random % count }`; otherwise an index past the
/// group, which makes the kernel fall back to its hash.
fn cpu_program(group_cpus: &[usize]) -> Vec<libc::sock_filter> {
    let mut prog = vec![insn(BPF_LD_W_ABS, 0, 0, SKF_AD_OFF + SKF_AD_CPU)];
    let mut base = 0usize;
    while base < group_cpus.len() {
        let cpu = group_cpus[base];
        let count = group_cpus[base..].iter().take_while(|&&c| c == cpu).count();
        if count == 1 {
            prog.push(insn(BPF_JEQ_K, 0, 1, cpu as u32));
            prog.push(insn(BPF_RET_K, 0, 0, base as u32));
        } else {
            prog.push(insn(BPF_JEQ_K, 0, 4, cpu as u32));
            prog.push(insn(BPF_LD_W_ABS, 0, 0, SKF_AD_OFF + SKF_AD_RANDOM));
            prog.push(insn(BPF_MOD_K, 0, 0, count as u32));
            prog.push(insn(BPF_ADD_K, 0, 0, base as u32));
            prog.push(insn(BPF_RET_A, 0, 0, 0));
        }
        base += count;
    }
    prog.push(insn(BPF_RET_K, 0, 0, u32::MAX));
    prog
}

fn attach(sock: &Socket, prog: &[libc::sock_filter]) -> std::io::Result<()> {
    let len = u16::try_from(prog.len()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "steering program too long",
        )
    })?;
    let fprog = libc::sock_fprog {
        len,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points at `prog`, which outlives the call; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A second descriptor of the open socket `fd` (close-on-exec), owned by the caller: a
/// connection's writer, the send ring and a hand-over to another shard each hold their own,
/// so that the socket stays open until the last of them is done with it.
pub fn dup_socket(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: the caller's socket is open for the duration of this call, which only
    // duplicates it (F_DUPFD_CLOEXEC).
    unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(prog: &[libc::sock_filter], cpu: u32, random: u32) -> u32 {
        // A tiny interpreter for the instructions cpu_program emits.
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            match i.code {
                BPF_LD_W_ABS if i.k == SKF_AD_OFF + SKF_AD_CPU => a = cpu,
                BPF_LD_W_ABS if i.k == SKF_AD_OFF + SKF_AD_RANDOM => a = random,
                BPF_JEQ_K => {
                    pc += usize::from(if a == i.k { i.jt } else { i.jf });
                }
                BPF_MOD_K => a %= i.k,
                BPF_ADD_K => a += i.k,
                BPF_RET_A => return a,
                BPF_RET_K => return i.k,
                c => panic!("unexpected instruction {c:#x}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn one_shard_per_cpu_maps_cpu_to_its_socket() {
        let p = cpu_program(&[0, 1, 2]);
        assert_eq!(run(&p, 0, 7), 0);
        assert_eq!(run(&p, 1, 7), 1);
        assert_eq!(run(&p, 2, 7), 2);
        assert_eq!(
            run(&p, 3, 7),
            u32::MAX,
            "no shard there: fall back to the hash"
        );
    }

    #[test]
    fn several_shards_on_a_cpu_share_its_connections() {
        // Shards on CPUs [0, 1, 0, 1] sort to group order [0, 0, 1, 1].
        let p = cpu_program(&[0, 0, 1, 1]);
        assert_eq!(run(&p, 0, 4), 0);
        assert_eq!(run(&p, 0, 5), 1);
        assert_eq!(run(&p, 1, 4), 2);
        assert_eq!(run(&p, 1, 7), 3);
        assert_eq!(run(&p, 5, 7), u32::MAX);
    }

    #[test]
    fn every_shard_gets_listening_sockets_and_the_kernel_takes_the_program() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        // Port 0 would give every socket its own port: hold one port of each kind (kept open,
        // so nothing else takes it) and open the shards' groups on those ports.
        let held_t = open_group("--tcp-address", any, &[0]).unwrap();
        let held_h = open_group("--http-address", any, &[0]).unwrap();
        let port = |s: &Socket| s.local_addr().unwrap().as_socket().unwrap().port();
        let tcp = SocketAddr::from(([127, 0, 0, 1], port(&held_t[0])));
        let http = SocketAddr::from(([127, 0, 0, 1], port(&held_h[0])));
        let held_s = open_group("--https-address", any, &[0]).unwrap();
        let https = SocketAddr::from(([127, 0, 0, 1], port(&held_s[0])));
        let (tcp, http) = (ListenAddr::Tcp(tcp), ListenAddr::Tcp(http));
        let (shards, steered, _) =
            open(&tcp, &http, Some(https), &[1, 0, 1], Steering::Cpu).unwrap();
        // The kernel checks a classic BPF program when it is attached: a malformed one is
        // refused, and the broker would fall back to hashing.
        assert!(steered, "SO_ATTACH_REUSEPORT_CBPF refused the program");
        assert_eq!(shards.len(), 3);
        for l in shards {
            let fds = [l.tcp, l.http, l.https].map(|fd| fd.expect("a listener of each kind"));
            let [t, h, s] = fds;
            for (fd, want) in [(t, &tcp), (h, &http), (s, &ListenAddr::Tcp(https))] {
                let sock = Socket::from(fd);
                assert_eq!(
                    sock.local_addr()
                        .unwrap()
                        .as_socket()
                        .map(ListenAddr::Tcp)
                        .as_ref(),
                    Some(want)
                );
                assert!(sock.is_listener().unwrap(), "{want} is not listening");
            }
        }
        let (shards, steered, _) = open(&tcp, &http, None, &[0], Steering::Hash).unwrap();
        assert!(!steered);
        assert!(shards[0].https.is_none());
        // A unix socket: one listener, shard 0's; TCP still on every shard.
        let path = std::env::temp_dir().join(format!("listen-test-{}.sock", std::process::id()));
        let unix = ListenAddr::Unix(path.clone());
        let (shards, _, files) = open(&tcp, &unix, None, &[1, 0], Steering::Hash).unwrap();
        assert!(shards[0].http.is_some() && shards[1].http.is_none());
        assert!(shards.iter().all(|l| l.tcp.is_some()));
        assert!(path.exists());
        drop(files);
        assert!(!path.exists());
    }
}

//! Unix-socket listeners, as nsqd 1.3 opens them: an address that Go's `net.SplitHostPort`
//! refuses (no port, too many colons, ...) is a path, and the broker listens on a unix stream
//! socket there ([`is_path`]).
//!
//! One listening socket per path, whatever the number of shards (SO_REUSEPORT has no meaning
//! for unix sockets): [`open`] binds it once, before the shards start. Before binding, a file
//! already at the path is removed only when it is a socket nobody listens on (a connect is
//! refused: a broker that was killed left it); a socket something keeps answering on for a
//! second, or a file that is no socket, is refused with a clear error, as is a path whose directory does not exist. The
//! socket's permissions are the umask's, as nsqd leaves them. [`SocketFile`] removes the file
//! when dropped (a clean stop), if it is still the one this process made.

use socket2::{Domain, SockAddr, Socket, Type};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Whether `addr` is a path rather than `host:port`: exactly when Go's `net.SplitHostPort`
/// fails on it (nsqd's `util.TypeOfAddr`).
pub fn is_path(addr: &str) -> bool {
    !splits_host_port(addr)
}

/// Go's `net.SplitHostPort` succeeds on `s` (the port may be empty or a service name).
fn splits_host_port(s: &str) -> bool {
    let Some(i) = s.rfind(':') else {
        return false; // missing port
    };
    let (mut j, mut k) = (0, 0);
    if s.starts_with('[') {
        let Some(end) = s.find(']') else {
            return false; // missing ']'
        };
        if end + 1 != i {
            return false; // missing port, or too many colons
        }
        (j, k) = (1, end + 1);
    } else if s[..i].contains(':') {
        return false; // too many colons
    }
    !s[j..].contains('[') && !s[k..].contains(']')
}

/// Why a unix socket could not be listened on.
#[derive(Debug, thiserror::Error)]
pub enum UnixListenError {
    #[error("cannot listen on {flag} {path}: the directory {dir} does not exist")]
    NoDirectory {
        flag: &'static str,
        path: PathBuf,
        dir: PathBuf,
    },
    #[error(
        "cannot listen on {flag} {path}: something is listening there (another broker?); stop \
         it or choose another path"
    )]
    InUse { flag: &'static str, path: PathBuf },
    #[error("cannot listen on {flag} {path}: a file that is not a socket is there; remove it or choose another path")]
    NotASocket { flag: &'static str, path: PathBuf },
    #[error("cannot listen on {flag} {path}: {source}")]
    Failed {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The socket file a listener made; removed when dropped if it is still that file.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino);
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), "socket file not removed: {e}");
            }
        }
    }
}

/// Binds and listens on a unix stream socket at `path` (`flag` names it in errors), after
/// removing a stale socket file there.
pub fn open(flag: &'static str, path: &Path) -> Result<(OwnedFd, SocketFile), UnixListenError> {
    let failed = |source: std::io::Error| UnixListenError::Failed {
        flag,
        path: path.to_path_buf(),
        source,
    };
    remove_stale(flag, path)?;
    let addr = SockAddr::unix(path).map_err(failed)?;
    let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(failed)?;
    if let Err(e) = sock.bind(&addr) {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        return Err(match dir {
            Some(dir) if e.kind() == std::io::ErrorKind::NotFound && !dir.exists() => {
                UnixListenError::NoDirectory {
                    flag,
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                }
            }
            _ if e.kind() == std::io::ErrorKind::AddrInUse => UnixListenError::InUse {
                flag,
                path: path.to_path_buf(),
            },
            _ => failed(e),
        });
    }
    let meta = std::fs::symlink_metadata(path).map_err(failed)?;
    let file = SocketFile {
        path: path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    sock.listen(1024).map_err(failed)?;
    Ok((sock.into(), file))
}

/// Removes a socket file at `path` that nothing listens on; refuses one that answers, or a
/// file that is no socket.
fn remove_stale(flag: &'static str, path: &Path) -> Result<(), UnixListenError> {
    let failed = |source: std::io::Error| UnixListenError::Failed {
        flag,
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(failed(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(UnixListenError::NotASocket {
            flag,
            path: path.to_path_buf(),
        });
    }
    // A process that just died may still hold its socket for a moment (the kernel tears its
    // io_uring down after it exits, and an accept pending there keeps the socket listening):
    // only a socket that keeps answering for a second is someone's.
    for _ in 0..STALE_TRIES {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => std::thread::sleep(STALE_WAIT),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing a stale socket file (nothing listens on it)");
                return std::fs::remove_file(path).map_err(failed);
            }
            Err(e) => return Err(failed(e)),
        }
    }
    Err(UnixListenError::InUse {
        flag,
        path: path.to_path_buf(),
    })
}

/// How often, and how far apart, a socket file found at start-up is tried before it counts
/// as someone's.
const STALE_TRIES: u32 = 20;
const STALE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_what_go_cannot_split() {
        for tcp in [
            "127.0.0.1:4150",
            ":4150",
            "0.0.0.0:0",
            "[::1]:4150",
            "localhost:",
            "host:http",
        ] {
            assert!(!is_path(tcp), "{tcp}");
        }
        for path in [
            "/run/nsqd.sock",
            "nsqd.sock",
            "localhost",
            "::1",
            "a:b:c",
            "[::1]",
            "[::1]x:4150",
            "",
        ] {
            assert!(is_path(path), "{path}");
        }
    }

    #[test]
    fn a_stale_socket_is_replaced_a_live_one_refused_and_the_file_removed_at_the_end() {
        let dir = std::env::temp_dir().join(format!("unix-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.sock");
        // A stale file: a socket bound and closed, nothing listening.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let (fd, file) = open("--tcp-address", &path).unwrap();
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        let err = open("--tcp-address", &path).unwrap_err();
        assert!(matches!(err, UnixListenError::InUse { .. }), "{err}");
        drop(fd);
        drop(file);
        assert!(!path.exists(), "removed at a clean stop");

        std::fs::write(&path, b"not a socket").unwrap();
        let err = open("--tcp-address", &path).unwrap_err();
        assert!(matches!(err, UnixListenError::NotASocket { .. }), "{err}");
        std::fs::remove_file(&path).unwrap();

        let err = open("--http-address", &dir.join("missing/h.sock")).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! What the workspace's programs (broker, lookup, admin UI, client library, bench) share that is
//! not the wire protocol:
//!
//! - [`hostname`]: this machine's name, as Go's `os.Hostname` gives it;
//! - [`host_of`]: the host of a `host:port` address (IPv6 brackets removed);
//! - [`backoff`]: delays doubling up to a cap (reconnections, consumer backoff);
//! - [`timeout`] (feature `glommio`): a future raced against a glommio timer;
//! - [`local_sync`]: single-threaded wake-ups (a [`local_sync::oneshot`] for replies and a
//!   [`local_sync::Notify`]) that need no particular executor;
//! - [`config_file`] (feature `cli`): `--config FILE`, NSQ's TOML config files as flags.
//! - [`flags_doc`] (feature `cli`): the flags reference `docs/flags.md`, generated from each
//!   binary's clap definition and checked against it by each binary's tests.
//! - [`memlock`] (feature `cli`): RLIMIT_MEMLOCK raised for, or refused with what to set by,
//!   the programs that run glommio executors (broker, lookup, the tools).
//! - [`cli`] (feature `cli`): the binaries' command-line conventions, NSQ's Go programs' own
//!   (single-dash long flags, nsqd's log level names, SIGTERM as a clean end).
//! - [`port_holder`] (feature `cli`): what holds a TCP port a bind found in use, and binding
//!   once a listener left by an exited process is released (a restart right after a crash).
//! - [`tls`] (feature `tls`): what the broker, the client library and admin-ui share of TLS
//!   (PEM files, the crypto provider, the accept-any-certificate verifier).
//!
//! The version reported on the wire is the codec's: `protocol::NSQD_COMPAT_VERSION`.

mod addr;
pub mod backoff;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
pub mod config_file;
#[cfg(feature = "cli")]
pub mod flags_doc;
mod host;
pub mod local_sync;
#[cfg(feature = "cli")]
pub mod memlock;
#[cfg(feature = "cli")]
pub mod port_holder;
#[cfg(feature = "glommio")]
pub mod timeout;
#[cfg(feature = "tls")]
pub mod tls;

pub use addr::host_of;
pub use host::hostname;

//! OS glue: thin wrappers over Linux facilities (sockets, io_uring, rlimits, malloc), the
//! bottom layer of the broker.
//!
//! Nothing here holds broker state or knows of shards, topics or mail: each module takes what
//! it needs as arguments and depends on no other module of the crate. Its errors are its own
//! types; [`crate::startup::StartError`] says what they mean to the operator.
//!
//! - [`listen`]: every shard's listening sockets (SO_REUSEPORT) and the CPU steering program;
//! - [`unix_listen`]: a listener on a unix socket path (nsqd 1.3's non-`host:port` addresses);
//! - [`accept_limit`]: accepting at the descriptor limit;
//! - [`dir_lock`]: the exclusive lock on a data directory;
//! - [`conn_socket`]: one connected socket shared by a connection's reader and writer;
//! - [`eager_read`]: a non-blocking read of a request that has probably arrived;
//! - [`send_batch`]: many connections' answers in one io_uring submission;
//! - [`mem_trim`]: giving closed connections' memory back to the system;
//! - [`malloc_tuning`]: glibc malloc's thresholds, fixed at start-up;
//! - [`rlimit`]: RLIMIT_MEMLOCK for io_uring.

pub mod accept_limit;
pub mod conn_socket;
pub mod dir_lock;
pub mod eager_read;
pub mod listen;
pub mod malloc_tuning;
pub mod mem_trim;
pub mod rlimit;
pub mod send_batch;
pub mod unix_listen;

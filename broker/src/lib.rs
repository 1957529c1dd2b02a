//! The broker as a library: an NSQ-compatible message broker (a drop-in nsqd) with one
//! glommio shard per core. `main.rs` only calls [`run`]; tests reach the modules in-process.
//! The layers, each depending only on those below, are listed in ARCHITECTURE.md.

mod accept_limit;
mod admin;
mod channel;
mod config;
mod conn;
mod conn_socket;
mod control;
mod deadlines;
mod eager_read;
mod http;
mod id_table;
mod ids;
mod latency;
mod launch;
mod listen;
mod lookup_reg;
mod mailbox;
mod mem_trim;
#[cfg(test)]
mod owner_sim;
mod rlimit;
mod send_batch;
mod shard;
mod startup;
mod stats;
mod storage;
mod timer;
mod topic;
mod work_set;

pub use launch::run;

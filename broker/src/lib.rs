//! The broker as a library: an NSQ-compatible message broker (a drop-in nsqd) with one
//! glommio shard per core. `main.rs` only calls [`run`]; tests reach the modules in-process.
//! The layers, each depending only on those below, are listed in ARCHITECTURE.md.

mod admin_ops;
mod auth;
mod channel;
mod civil_time;
mod cluster;
mod config;
mod control;
mod controller_session;
mod deadlines;
mod http;
mod id_table;
mod ids;
mod latency;
mod launch;
mod lookup_reg;
mod mailbox;
mod nsqd_import;
#[cfg(test)]
mod owner_sim;
mod placement;
// Not started by the broker yet: the shards' wiring is the next step of issue 43.
#[allow(dead_code)]
mod replication;
mod shard;
mod startup;
mod stats;
mod statsd;
mod storage;
mod sys;
mod tcp;
mod timer;
mod tls;
mod topic;
mod work_set;

pub use launch::run;

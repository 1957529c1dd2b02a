//! Topic and channel administration and statistics, as the HTTP API asks for them: the
//! requests that travel to a topic's owner shard (create, delete, empty, pause) or to every
//! shard (stats), and how a shard answers them.
//!
//! Placeholder until the HTTP API lands: every operation answers `Unsupported`.

use crate::shard::Shard;

/// A request from the HTTP API to a shard.
#[derive(Debug)]
pub enum AdminOp {
    Ping,
}

/// A shard's answer to an [`AdminOp`].
#[derive(Debug)]
pub enum AdminResult {
    Unsupported,
}

impl Shard {
    pub(crate) fn handle_admin(&self, op: AdminOp) -> AdminResult {
        match op {
            AdminOp::Ping => AdminResult::Unsupported,
        }
    }
}

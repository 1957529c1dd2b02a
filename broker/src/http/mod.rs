//! nsqd's HTTP API, served by every shard on `--http-address` (SO_REUSEPORT).
//!
//! Placeholder until the HTTP API lands: no listener is started.

use crate::shard::Shard;
use std::rc::Rc;

/// Starts this shard's HTTP listener.
pub fn start(_shard: &Rc<Shard>) -> Result<(), String> {
    Ok(())
}

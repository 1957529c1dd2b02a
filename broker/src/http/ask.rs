//! Requests from an HTTP handler to the shards: one topic's owner, or every shard at once.

use crate::admin_ops::{AdminOp, AdminResult};
use crate::mailbox::{Mail, Reply};
use crate::shard::Shard;
use std::rc::Rc;

/// Sends `op` to the owner of `topic` and waits for its answer; `None` if the broker is
/// shutting down and no answer will come.
pub async fn owner(shard: &Rc<Shard>, topic: &str, op: AdminOp) -> Option<AdminResult> {
    let to = shard.config.owner_of(topic);
    match shard.request(to, |reply| Mail::Admin { op, reply }).await {
        Some(Reply::Admin(r)) => Some(r),
        _ => None,
    }
}

/// Sends `make()` to every shard (all at once) and collects their answers in shard order.
pub async fn every_shard(shard: &Rc<Shard>, make: impl Fn() -> AdminOp) -> Vec<AdminResult> {
    let pending: Vec<_> = (0..shard.config.shards)
        .map(|to| shard.request(to, |reply| Mail::Admin { op: make(), reply }))
        .collect();
    let mut out = Vec::with_capacity(pending.len());
    for rx in pending {
        if let Some(Reply::Admin(r)) = rx.await {
            out.push(r);
        }
    }
    out
}

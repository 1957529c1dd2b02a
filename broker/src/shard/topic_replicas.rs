//! `POST /topic/config?replicas=N` on the topic's owner shard: the topic's replica count, set
//! through the replication controller (`BrokerRequest::SetReplicas`), which grows or shrinks a
//! replicated topic's replicas, or creates an unknown topic with N; the controller's Raft log
//! keeps it, and /stats, /metrics and admin-ui show it.
//!
//! Invariants: a topic holding messages published before it was replicated is never made
//! replicated (its records have no epoch): asking more than one replica of it is refused with
//! why; without replication (no `--replication-address`) only 1 is accepted; every request is
//! answered once, with the controller's refusal as the reason when it refuses.

use super::Shard;
use crate::admin_ops::{AdminResult, Failure, Refusal};
use crate::mailbox::{Reply, ReplyTo};
use replication::controller::{BrokerReply, BrokerRequest};
use tracing::info;

impl Shard {
    /// Sets `topic`'s replica count to `replicas`; the answer comes once the controller took it
    /// (the new replicas then catch up on their own).
    pub(super) fn set_topic_replicas(
        &self,
        topic: &str,
        replicas: u32,
        reply: ReplyTo,
    ) -> Option<AdminResult> {
        let refused = |why: String| Some(AdminResult::Refused(Refusal::Replicas(why)));
        let local = self.topics.borrow().get(topic).cloned();
        let replicated = local.as_ref().is_some_and(|t| t.borrow().replica.is_some());
        if self.config.cluster.is_none() {
            return match (replicas, &local) {
                (1, Some(_)) => Some(AdminResult::Done),
                (1, None) => Some(AdminResult::TopicNotFound),
                _ => refused(format!(
                    "replicas {replicas}: this broker runs without replication (start it with \
                     --replication-address and lookups running the controller)"
                )),
            };
        }
        if let Some(t) = local.as_ref().filter(|_| !replicated) {
            let tb = t.borrow();
            if tb.ephemeral && replicas > 1 {
                return refused(format!(
                    "topic {topic} is #ephemeral: it is never replicated"
                ));
            }
            if tb.log.borrow().head() > 0 && replicas > 1 {
                return refused(format!(
                    "topic {topic} holds messages published before it was replicated; replicas \
                     apply to a new or never published topic"
                ));
            }
        }
        let min_insync = if replicas == self.config.replicas {
            self.config.min_insync_replicas
        } else {
            replicas / 2 + 1
        };
        let request = BrokerRequest::SetReplicas {
            topic: topic.to_string(),
            replicas,
            min_insync,
        };
        let name = topic.to_string();
        let me = self.me.clone();
        glommio::spawn_local(async move {
            let Some(shard) = me.upgrade() else {
                return;
            };
            let answer = match shard.ask_controller(request).await {
                Ok(BrokerReply::Proposed) => {
                    info!(topic = %name, replicas, "topic replica count set");
                    AdminResult::Done
                }
                Ok(BrokerReply::Unchanged) => AdminResult::Done,
                Ok(BrokerReply::Refused { reason }) => {
                    AdminResult::Refused(Refusal::Replicas(reason))
                }
                Ok(other) => {
                    AdminResult::Failed(Failure::Controller(format!("it answered {other:?}")))
                }
                Err(why) => AdminResult::Failed(Failure::Controller(why)),
            };
            shard.reply(reply, Reply::Admin(answer));
        })
        .detach();
        None
    }
}

//! A shard's requests to the replication controller (`CreateTopic` by a replicated topic's
//! creator, `AlterIsr` by its leader), carried by the control thread's session
//! (`Mail::ControllerRequest`, answered with `Reply::Controller`).
//!
//! Invariant: every call ends with the controller leader's answer or the text of why there is
//! none; the session bounds each request, so no call waits without end.

use super::Shard;
use crate::mailbox::{Mail, Reply};
use replication::controller::{BrokerReply, BrokerRequest};

impl Shard {
    /// The controller leader's answer to `request`, or why there is none (no
    /// `--replication-address`, the session's queue full, no leader answered, stopping).
    // Called by the replicas' wiring in the owner shards.
    #[allow(dead_code)]
    pub(crate) async fn ask_controller(
        &self,
        request: BrokerRequest,
    ) -> Result<BrokerReply, String> {
        let answer = self
            .request(self.control, |reply| Mail::ControllerRequest {
                request,
                reply,
            })
            .await;
        match answer {
            Some(Reply::Controller(result)) => result,
            Some(other) => Err(format!(
                "unexpected answer from the control thread: {other:?}"
            )),
            None => Err("the control thread is gone (stopping)".into()),
        }
    }
}

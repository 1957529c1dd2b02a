//! Storing what producers publish: stamping IDs, appending to the topic's log, handing the
//! messages to the channels, and answering. The answer is given at once, or (when answers wait
//! for the disk, or a topic's unwritten backlog is over [`WRITE_BACKLOG_LIMIT`], half that for
//! a topic with no channel) once the flusher has written or fsynced the records
//! ([`Shard::answer_disk_acks`]).
//!
//! Invariant: a publish that was stored is never answered with an error (a retry would be a
//! duplicate); only publishes refused before anything is stored get `E_PUB_FAILED`.

use super::topics::{publish_refused, ParkedPublish};
use super::Shard;
use crate::ids::now_nanos;
use crate::mailbox::{Reply, ReplyTo};
use crate::storage::log::MAX_WRITE;
use crate::topic::{DeadOrigin, Topic};
use bytes::Bytes;
use protocol::{ErrorCode, Message, ProtocolError};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Unwritten bytes a topic may hold before publishes wait for the disk (backpressure for
/// publishers faster than the disk without --durable; memory stays bounded).
const WRITE_BACKLOG_LIMIT: usize = 4 << 20;

/// A topic with this much unwritten cuts the coalescing short, so fast publishers get large
/// writes at once and never come near [`WRITE_BACKLOG_LIMIT`]. Not less: the later the flusher
/// plans, the more records every channel has finished, which it need not write
/// (docs/benchmarks.md#publish-and-consume-at-once).
const WRITE_EARLY: usize = 2 << 20;

/// [`WRITE_BACKLOG_LIMIT`] and [`WRITE_EARLY`] of a topic with no channel. Nothing can finish
/// its records before they are written, so waiting gains no write and only holds the bodies
/// (and the publishers' read buffers they point into) longer: a write starts at one write's
/// worth, and publishes wait once two are unwritten (docs/benchmarks.md#mpub-ingest,
/// "Peak memory during ingest").
const WRITE_BACKLOG_LIMIT_UNREAD: usize = 2 * MAX_WRITE;
const WRITE_EARLY_UNREAD: usize = MAX_WRITE;

/// What a topic's unwritten backlog asks of a publish that added to it.
#[derive(Debug, PartialEq, Eq)]
struct DiskPressure {
    /// Cut the flusher's coalescing short.
    write_now: bool,
    /// Answer the publish once its records are written.
    wait: bool,
}

impl DiskPressure {
    fn of(unwritten: usize, has_channels: bool) -> DiskPressure {
        let (early, limit) = if has_channels {
            (WRITE_EARLY, WRITE_BACKLOG_LIMIT)
        } else {
            (WRITE_EARLY_UNREAD, WRITE_BACKLOG_LIMIT_UNREAD)
        };
        DiskPressure {
            write_now: unwritten >= early,
            wait: unwritten > limit,
        }
    }
}

/// A publish answered once the log reached `end` on disk (written, or fsynced if `synced`).
pub(super) struct DiskAck {
    topic: Rc<RefCell<Topic>>,
    end: u64,
    synced: bool,
    reply: ReplyTo,
}

/// What a publish's answer is, as the owner handles it.
#[derive(Debug)]
pub(super) enum Answer {
    /// Answer now with this.
    Now(Result<(), ProtocolError>),
    /// Answered later, by whoever holds its `ReplyTo`: the flusher once the records are on
    /// disk ([`DiskAck`]), or the lookups' answer for a new topic it was parked behind.
    Later,
}

impl Answer {
    /// A refusal: nothing was stored.
    pub(super) fn refused(reason: String) -> Answer {
        Answer::Now(Err(ProtocolError::fatal(ErrorCode::PubFailed, reason)))
    }

    /// What a stored publish is answered while the owner's storage is failing (`unhealthy`):
    /// it stays stored, but an answer given now is an error that stops the sender's early OKs.
    pub(super) fn after_storing(self, unhealthy: Option<String>) -> Answer {
        match (self, unhealthy) {
            (Answer::Now(Ok(())), Some(reason)) => Answer::refused(reason),
            (answer, _) => answer,
        }
    }
}

impl Shard {
    /// Stores published messages. When answers wait for the disk the reply waits for the write
    /// or fsync covering them ([`Answer::Later`]).
    pub(super) fn publish_here(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
        defer: Duration,
        acked: bool,
        reply: ReplyTo,
        origins: Vec<DeadOrigin>,
    ) -> Answer {
        let unhealthy = self.admin.health();
        if let (Some(reason), false) = (&unhealthy, acked) {
            return Answer::refused(reason.clone());
        }
        if let Some(leader) = self.routed_leader(topic) {
            return self.publish_to_leader(leader, topic, bodies, defer, origins, reply);
        }
        if self.publish_waits_for_controller(topic) {
            return self.park_for_controller(
                topic,
                ParkedPublish {
                    bodies,
                    defer,
                    acked,
                    reply,
                    origins,
                },
            );
        }
        let t = match self.topic_or_create(topic) {
            Ok(t) => t,
            Err(reason) => {
                return Answer::Now(Err(publish_refused(topic, bodies.len(), acked, &reason)))
            }
        };
        if let Some(p) = self.pending_topics.borrow_mut().get_mut(topic) {
            p.publishes.push(ParkedPublish {
                bodies,
                defer,
                acked,
                reply,
                origins,
            });
            return Answer::Later;
        }
        // Kept (the client may have its OK already), but the sender must stop acknowledging
        // early while storage fails.
        self.store_published(&t, bodies, defer, reply, origins)
            .after_storing(unhealthy)
    }

    /// Stamps and stores published messages in `t`; [`Answer::Later`] when the answer waits for
    /// the disk.
    pub(super) fn store_published(
        &self,
        t: &Rc<RefCell<Topic>>,
        bodies: Vec<Bytes>,
        defer: Duration,
        reply: ReplyTo,
        origins: Vec<DeadOrigin>,
    ) -> Answer {
        if t.borrow().replica.is_some() {
            return self.store_replicated(t, bodies, defer, reply, origins);
        }
        let timestamp = now_nanos();
        let msgs: Vec<Message> = t.borrow_mut().stamp(bodies, timestamp);
        // Dead letters: the IDs and bodies their origin records describe.
        let dead = (!origins.is_empty()).then(|| {
            msgs.iter()
                .map(|m| (m.id, m.body.clone()))
                .collect::<Vec<_>>()
        });
        let defer_until = if defer.is_zero() {
            0
        } else {
            timestamp + defer.as_nanos() as i64
        };
        let (end, touched) = t.borrow_mut().publish(msgs, defer_until);
        if let Some(dead) = dead {
            self.record_dead_letters(t, dead, origins, end);
        }
        let persistent = t.borrow().log.borrow().is_persistent();
        if persistent {
            self.queue_flush(t);
        }
        for ch in touched {
            self.dispatch(&ch);
        }
        if persistent {
            let pressure = {
                let t = t.borrow();
                let unwritten = t.log.borrow().unwritten_bytes();
                DiskPressure::of(unwritten, t.channel_count() > 0)
            };
            if pressure.write_now {
                self.flusher.write_now();
            }
            if self.config.acks_wait_for_disk() || pressure.wait {
                self.disk_acks.borrow_mut().push(DiskAck {
                    topic: t.clone(),
                    end,
                    synced: self.config.durable,
                    reply,
                });
                return Answer::Later;
            }
        }
        Answer::Now(Ok(()))
    }

    /// Answers the publishes whose records the disk now holds (written, or fsynced for
    /// `--durable`). A publish whose records are stored but not yet on disk is never answered
    /// with an error, even while writes fail: its records stay in the log and are written when
    /// the disk takes them again (the flusher retries every second), so an error would make
    /// the client's retry a duplicate. It waits for that write instead, and only publishes
    /// that arrive while storage is failing are refused (before anything is stored). A
    /// publish to a topic deleted meanwhile is answered OK: it was taken, and the delete
    /// dropped it with the rest of the topic.
    pub(super) fn answer_disk_acks(&self) {
        let waiting = std::mem::take(&mut *self.disk_acks.borrow_mut());
        let mut still = Vec::new();
        for ack in waiting {
            let done = {
                let t = ack.topic.borrow();
                let log = t.log.borrow();
                log.is_destroyed()
                    || if ack.synced {
                        log.synced_end >= ack.end
                    } else {
                        log.written_end() >= ack.end
                    }
            };
            if done {
                self.reply(ack.reply, Reply::Publish(Ok(())));
            } else {
                still.push(ack);
            }
        }
        self.disk_acks.borrow_mut().extend(still);
    }
}

#[cfg(test)]
mod tests {
    use super::DiskPressure;

    fn of(mib: f64, has_channels: bool) -> (bool, bool) {
        let p = DiskPressure::of((mib * (1 << 20) as f64) as usize, has_channels);
        (p.write_now, p.wait)
    }

    #[test]
    fn a_topic_with_channels_coalesces_to_two_mib_and_holds_up_to_four() {
        assert_eq!(of(1.5, true), (false, false));
        assert_eq!(of(2.0, true), (true, false));
        assert_eq!(of(4.0, true), (true, false));
        assert_eq!(of(4.01, true), (true, true));
    }

    #[test]
    fn a_topic_with_no_channel_writes_at_one_write_and_holds_two() {
        assert_eq!(of(0.5, false), (false, false));
        assert_eq!(of(1.0, false), (true, false));
        assert_eq!(of(2.0, false), (true, false));
        assert_eq!(of(2.01, false), (true, true));
    }
}

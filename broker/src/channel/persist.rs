//! A channel's metadata in the topic's `meta.json`: what it saves ([`Channel::to_meta`]) and
//! restores at start-up ([`Channel::restore`]). After a clean stop it saves its cursor and
//! every message it owes (in-flight ones as requeued, deferred ones with the delay left), so a
//! restart delivers them again with their attempts; otherwise its floor, from which the restart
//! delivers everything again. The stretches of the log that are other channels' own (an
//! nsqd import) are kept either way.

use super::{Channel, Requeued, TimerQueue};
use crate::storage::log::{DiskHint, Read, TopicLog};
use crate::storage::meta::{ChannelMeta, PendingMeta};
use std::time::{Duration, Instant};

impl Channel {
    /// What to persist. Clean: the cursor and every owed message (in flight ones as requeued,
    /// deferred ones with the delay left). Otherwise a floor to restart from.
    pub fn to_meta(&self, clean: bool, now: Instant) -> ChannelMeta {
        if !clean {
            return ChannelMeta {
                name: self.name.to_string(),
                paused: self.paused,
                cursor: self.floor(),
                pending: Vec::new(),
                max_attempts: self.dead.own_max,
                dead_letter_topic: self.dead.topic.as_deref().map(str::to_owned),
                foreign: self.foreign_meta(),
            };
        }
        let mut pending: Vec<PendingMeta> = self
            .requeued
            .iter()
            .map(|r| (&r.msg, r.msg.msg.attempts, 0))
            .chain(self.deferred.values().map(|d| {
                (
                    &d.msg,
                    d.msg.msg.attempts,
                    d.at.saturating_duration_since(now).as_millis() as u64,
                )
            }))
            .map(|(s, attempts, delay_ms)| PendingMeta {
                seq: s.seq,
                attempts,
                delay_ms,
            })
            .collect();
        // What a delivery in flight owes itself (`owes.rs`), as requeued.
        pending.extend(self.in_flight.values().filter_map(|f| {
            self.owed_by(f).map(|attempts| PendingMeta {
                seq: f.msg.seq,
                attempts,
                delay_ms: 0,
            })
        }));
        // What the dead-letter topic has not stored yet, with its attempts (set aside again at
        // start while they reach the limit).
        pending.extend(self.dead.sending.values().map(|s| PendingMeta {
            seq: s.seq,
            attempts: s.msg.attempts,
            delay_ms: 0,
        }));
        pending.sort_by_key(|p| p.seq);
        ChannelMeta {
            name: self.name.to_string(),
            paused: self.paused,
            cursor: self.cursor,
            pending,
            max_attempts: self.dead.own_max,
            dead_letter_topic: self.dead.topic.as_deref().map(str::to_owned),
            foreign: self.foreign_meta(),
        }
    }

    /// Every foreign stretch, passed or not: a rewind may bring the cursor back before one.
    fn foreign_meta(&self) -> Vec<[u64; 2]> {
        self.foreign.iter().map(|&(from, to)| [from, to]).collect()
    }

    /// Restores from persisted metadata; returns how many owed messages came back.
    pub fn restore(
        &mut self,
        meta: &ChannelMeta,
        clean: bool,
        log: &TopicLog,
        now: Instant,
        timers: &TimerQueue,
    ) -> usize {
        self.paused = meta.paused;
        // Just created by the topic, the channel holds the flag's limit.
        let default_max = self.dead.max;
        self.set_dead_letters(
            default_max,
            meta.max_attempts,
            meta.dead_letter_topic.as_deref().map(std::sync::Arc::from),
        );
        self.cursor = meta.cursor.clamp(log.start(), log.head());
        self.hint = DiskHint::default();
        // Stretches the log no longer holds are nothing to pass over.
        self.foreign = meta
            .foreign
            .iter()
            .filter(|&&[from, to]| from < to && to > log.start())
            .map(|&[from, to]| (from, to))
            .collect();
        self.foreign.sort_unstable();
        self.next_foreign = 0;
        if !clean {
            return 0;
        }
        let mut restored = 0;
        for p in &meta.pending {
            if p.seq >= self.cursor {
                // In flight when the channel was rewound below it: the log gives it again.
                continue;
            }
            let Read::Msg(mut s, _) = log.read_blocking(p.seq) else {
                continue;
            };
            if s.seq != p.seq {
                // The record was lost to corruption; nothing to deliver.
                continue;
            }
            s.msg.attempts = p.attempts;
            if self.dead.in_force() && s.msg.attempts >= self.dead.max {
                // Taken for the dead-letter topic and not stored there by the stop.
                self.set_aside(s);
            } else if p.delay_ms > 0 {
                s.detach_body();
                self.defer(s, now + Duration::from_millis(p.delay_ms), timers);
            } else {
                self.requeued.push_back(Requeued { after: 0, msg: s });
            }
            restored += 1;
        }
        restored
    }
}

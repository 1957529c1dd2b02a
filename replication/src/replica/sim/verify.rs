//! The invariants as the world checks them: after every step over every running broker
//! ([`Checker`] holds the acknowledged history), and at the end, after healing.

use super::check::Checker;
use super::world::{World, HOSTS, TOPICS};
use crate::ids::{BrokerId, Epoch, Seq};
use crate::replica::{MemLog, Replica, ReplicaLog};

impl World {
    /// The invariants, after every step.
    pub(super) fn check(&mut self) -> Result<(), String> {
        for h in 0..HOSTS {
            if !self.hosts[h].up {
                continue;
            }
            let id = self.hosts[h].id;
            let leads: Vec<(usize, Epoch, Seq)> = self.hosts[h]
                .replicas
                .iter()
                .filter_map(|(t, r)| Some((*t, r.leading()?, r.high_watermark()?)))
                .collect();
            for (t, epoch, hw) in leads {
                let log = self.hosts[h].logs.get(&t);
                self.checker.leader(t, id, epoch, hw, log)?;
                let current = self.ctl.state(t).epoch == epoch;
                if !current {
                    continue;
                }
                let empty = MemLog::new();
                let llog = self.hosts[h].logs.get(&t).unwrap_or(&empty);
                let members: Vec<BrokerId> = self.hosts[h]
                    .replicas
                    .get(&t)
                    .and_then(Replica::leader_isr)
                    .map(<[BrokerId]>::to_vec)
                    .unwrap_or_default();
                for m in members {
                    if m == id {
                        continue;
                    }
                    if let Some(mh) = self.host_of(m) {
                        if self.registered(mh) {
                            let mlog = self.hosts[mh].logs.get(&t).unwrap_or(&empty);
                            Checker::agree_below(t, hw, (id, llog), (m, mlog))?;
                        }
                    }
                }
            }
        }
        for t in 0..TOPICS {
            for b in self.ctl.holders(t) {
                if let Some(h) = self.host_of(b) {
                    if self.registered(h) {
                        self.checker.holder(t, b, self.hosts[h].logs.get(&t))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// After healing: every topic has a running leader from which every acknowledged record
    /// reads back, every replica is in sync again (a new or wiped one caught up, even past
    /// what the leader released), and publishes were acknowledged again.
    pub(super) fn final_check(&self) -> Result<(), String> {
        for t in 0..TOPICS {
            let st = &self.ctl.state(t);
            let leader = st
                .leader
                .ok_or_else(|| format!("topic {t} has no leader after healing ({st:?})"))?;
            let h = self
                .host_of(leader)
                .ok_or_else(|| format!("topic {t}: leader {} is not running", leader.0))?;
            let log = self.hosts[h]
                .logs
                .get(&t)
                .ok_or_else(|| format!("topic {t}: leader {} has no log", leader.0))?;
            let (len, _) = self.checker.acked(t);
            let mut read = MemLog::new();
            let mut at = log.start().min(len);
            read.start_at(at).map_err(|e| format!("topic {t}: {e}"))?;
            while at < len {
                let b = log
                    .read(at, 64)
                    .map_err(|e| format!("topic {t}: reading acknowledged records: {e}"))?;
                let n = b.records.len() as Seq;
                read.append(b.epoch, &b.records)
                    .map_err(|e| format!("topic {t}: {e}"))?;
                at += n.max(1);
            }
            if !self.checker.holds_acked(t, &read) {
                return Err(format!(
                    "topic {t}: the acknowledged records do not read back from leader {}",
                    leader.0
                ));
            }
            if st.isr != st.replicas {
                return Err(format!(
                    "topic {t}: not every replica is back in sync after healing ({st:?})"
                ));
            }
            if self.acked_after_heal.get(&t).copied().unwrap_or(0) == 0 {
                return Err(format!(
                    "topic {t}: no publish acknowledged after healing ({st:?}, eligible {:?})",
                    self.ctl.elr(t)
                ));
            }
        }
        Ok(())
    }
}

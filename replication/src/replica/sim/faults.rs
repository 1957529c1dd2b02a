//! The faults of a run and the budget of those that lose data: a data-losing fault (a wiped
//! data path, a damaged tail, a host crash without `--durable`) hits a broker only while every
//! other replica and holder of its topics' acknowledged records is intact and a holder exists.

use super::net::{Cut, Event, Weather};
use super::world::{World, HOSTS, TOPICS};
use crate::ids::{BrokerId, Seq};
use crate::replica::ReplicaLog;

impl World {
    /// Whether broker `b`'s data path is intact: not wiped, and not cut by recovery unless
    /// the controller has taken that in (it then left the damaged topics' sets).
    pub(super) fn intact(&self, b: BrokerId) -> bool {
        self.host_of(b).is_some_and(|bh| {
            let host = &self.hosts[bh];
            let registered = self.ctl.incarnation(b) == Some(host.incarnation);
            !host.wiped && !host.lost && (host.damaged.is_empty() || registered)
        })
    }

    /// Whether host `h` may lose data now: in every topic it is a replica or holder of, no
    /// other replica or holder has lost data the controller does not know of yet (fewer than
    /// `min_insync` = 2 such failures at once), and another holder exists. Every replica
    /// counts, not only the holders the controller has committed: a leader's proposal in
    /// flight may still add a follower to the in-sync set on acknowledgements it sent before
    /// it lost data (the controller cannot tell until that broker registers again).
    pub(super) fn may_lose(&self, h: usize) -> bool {
        let id = self.hosts[h].id;
        (0..TOPICS).all(|t| {
            let holders = self.ctl.holders(t);
            let mut exposed = self.ctl.state(t).replicas;
            exposed.extend(holders.iter().copied());
            exposed.sort();
            exposed.dedup();
            !exposed.contains(&id)
                || (exposed.iter().all(|&b| {
                    b == id || self.intact(b) || (!holders.contains(&b) && self.reregistered(b))
                }) && holders.iter().any(|&b| b != id))
        })
    }

    /// Whether `old`'s wiped data path came back under a new id the controller registered:
    /// the controller then knows `old` is gone (a replica that is no holder then counts as
    /// reported, as a registered damaged broker does).
    fn reregistered(&self, old: BrokerId) -> bool {
        (0..HOSTS).any(|h| self.hosts[h].former_ids.contains(&old) && self.registered(h))
    }

    /// Clears the recorded damage of the topics whose replicas have refetched.
    pub(super) fn forget_refetched(&mut self, h: usize) {
        let host = &mut self.hosts[h];
        let refetched: Vec<usize> = host
            .damaged
            .iter()
            .copied()
            .filter(|t| host.replicas.get(t).is_some_and(|r| !r.damaged()))
            .collect();
        for t in refetched {
            host.damaged.remove(&t);
        }
    }

    /// Stops host `h`; `host_crash`: the machine went down and unsynced records are lost.
    pub(super) fn crash(&mut self, h: usize, host_crash: bool) {
        self.forget_refetched(h);
        let durable = self.cfg.durable;
        if self.trace {
            let ends: Vec<(usize, Seq, Seq)> = self.hosts[h]
                .logs
                .iter()
                .map(|(t, l)| (*t, l.end(), l.durable_end()))
                .collect();
            eprintln!(
                "{} crash host {h} host_crash={host_crash} logs {ends:?}",
                self.now
            );
        }
        let host = &mut self.hosts[h];
        host.up = false;
        if host_crash {
            for log in host.logs.values_mut() {
                log.crash();
            }
            host.lost |= !durable;
        }
        host.replicas.clear();
        host.syncing.clear();
        let lost = host.pubs.len() as u64;
        host.pubs.clear();
        self.out.failed += lost;
    }

    pub(super) fn fault(&mut self) {
        self.out.faults += 1;
        let h = self.rng.below(HOSTS as u64) as usize;
        let kind = self.rng.below(100);
        if self.trace {
            eprintln!("{} fault kind {kind} on host {h}", self.now);
        }
        match kind {
            0..=29 => {
                // Without --durable a host crash loses acknowledged records on this replica.
                let host_crash = self.rng.chance(0.5) && (self.cfg.durable || self.may_lose(h));
                if self.hosts[h].up {
                    self.crash(h, host_crash);
                    let at = self.now + self.rng.range(200, 4_000);
                    self.at(at, Event::Restart(h));
                }
            }
            30..=49 => {
                let cut = match self.rng.below(3) {
                    0 => Cut::All,
                    1 => Cut::Ctl,
                    _ => Cut::Peers,
                };
                self.hosts[h].cut = Some(cut);
                let at = self.now + self.rng.range(300, 6_000);
                self.at(at, Event::HealCut(h));
            }
            50..=59 => {
                if self.may_lose(h) {
                    if self.hosts[h].up {
                        self.crash(h, true);
                        let at = self.now + self.rng.range(200, 3_000);
                        self.at(at, Event::Restart(h));
                    }
                    let host = &mut self.hosts[h];
                    host.wiped = true;
                    host.logs.clear();
                }
            }
            60..=79 => {
                let jump = self.rng.range(0, 8_000) as i64 - 3_000;
                self.hosts[h].clock += jump;
            }
            _ => self.weather = Weather::random(&mut self.rng),
        }
    }

    pub(super) fn restart(&mut self, h: usize) -> Result<(), String> {
        if self.hosts[h].up {
            return Ok(());
        }
        let damage = self.faults_on && self.rng.chance(0.3) && self.may_lose(h);
        let damage_topic = self.rng.below(TOPICS as u64) as usize;
        let damage_len = self.rng.range(1, 6) as usize;
        let host = &mut self.hosts[h];
        host.up = true;
        host.incarnation += 1;
        if host.wiped {
            host.wiped = false;
            let old = host.id;
            host.former_ids.insert(old);
            host.id = BrokerId(self.next_id);
            self.next_id += 1;
            host.incarnation = 1;
            host.logs.clear();
        }
        if damage {
            if let Some(log) = host.logs.get_mut(&damage_topic) {
                log.damage_tail(damage_len);
            }
        }
        // What a recovery found stays recorded (in the data path, in production) until the
        // replica has refetched it: a restart before the controller heard of it reports it again.
        for (t, log) in host.logs.iter_mut() {
            if log.recover() || host.lost {
                host.damaged.insert(*t);
            }
        }
        host.lost = false;
        host.replicas.clear();
        host.last_heartbeat = None;
        self.heartbeat(h);
        Ok(())
    }

    pub(super) fn registered(&self, h: usize) -> bool {
        let host = &self.hosts[h];
        host.up && self.ctl.incarnation(host.id) == Some(host.incarnation)
    }
}

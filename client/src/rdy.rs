//! RDY distribution over a consumer's connections, as a pure state machine: events go in
//! (a connection came or went, a message arrived or was handled, time passed, backoff paused
//! or resumed), RDY commands come out as [`RdyUpdate`]s. No sockets, no clock (callers pass
//! `now`), no randomness (callers pass a `pick` function), so every rule is unit tested.
//!
//! The guide's rules and where they live:
//!
//! 1. *Bootstrap*: a new connection starts at RDY 1 ([`RdyState::add_conn`]) so the first
//!    connections are not favoured while the number of connections is still unknown.
//! 2. *Even distribution*: each connection's target is `max(1, max_in_flight / connections)`,
//!    never above that connection's `max_rdy_count` from IDENTIFY. Connections above target
//!    are lowered as soon as another joins; below target they are raised as budget frees up.
//! 3. *Never exceed max_in_flight*: a connection *commits* `max(last RDY sent, in flight)`
//!    (the broker may deliver until in-flight reaches RDY, and messages already in flight stay
//!    even when RDY is lowered). A raise is only sent when the sum of commitments stays within
//!    `max_in_flight`, so neither the sum of RDY nor the number of messages in flight can pass
//!    it.
//! 4. *Refresh*: RDY counts down as messages arrive; when what is left falls to 25% of the
//!    last value sent (or to 0), the target is sent again ([`RdyState::on_message`],
//!    [`RdyState::on_message_done`]).
//! 5. *Redistribution* when `max_in_flight` is below the number of connections: on each
//!    [`RdyState::tick`], a connection holding RDY that received nothing for the idle timeout
//!    drops to 0, and the freed RDY goes to connections at 0 chosen by `pick`.
//! 6. *Backoff* ([`crate::backoff`] decides when): [`RdyState::pause`] sends RDY 0 everywhere,
//!    [`RdyState::probe`] RDY 1 on one connection, [`RdyState::resume`] the targets again. No
//!    refresh happens while paused or probing.
//! 7. *Starvation*: [`RdyState::is_starved`] is true when some connection has at least 85% of
//!    its last RDY in flight.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Identifies one connection of a consumer.
pub type ConnId = u64;

/// "Send `RDY count` on connection `conn`."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdyUpdate {
    pub conn: ConnId,
    pub count: u64,
}

#[derive(Debug, Clone)]
struct ConnRdy {
    max_rdy: u64,
    /// Last RDY value sent.
    last_rdy: u64,
    /// `last_rdy` minus the messages received since it was sent.
    remaining: u64,
    in_flight: u64,
    /// Last message received, or last time RDY was raised from 0: what "idle" is measured from.
    last_activity: Instant,
    /// Leaving (CLS sent or lookup dropped it): gets no RDY, still counts its in-flight.
    retiring: bool,
}

impl ConnRdy {
    fn commitment(&self) -> u64 {
        self.last_rdy.max(self.in_flight)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Normal,
    Paused,
    /// Backoff test: RDY 1 on `conn` (None: not sent yet, budget was short).
    Probing {
        conn: Option<ConnId>,
    },
}

/// RDY state of every connection of one consumer.
#[derive(Debug, Clone)]
pub struct RdyState {
    max_in_flight: u64,
    idle_timeout: Duration,
    conns: BTreeMap<ConnId, ConnRdy>,
    mode: Mode,
}

type Updates = Vec<RdyUpdate>;

impl RdyState {
    pub fn new(max_in_flight: u64, idle_timeout: Duration) -> RdyState {
        RdyState {
            max_in_flight,
            idle_timeout,
            conns: BTreeMap::new(),
            mode: Mode::Normal,
        }
    }

    /// A connection finished its handshake and SUB; `max_rdy` is its broker's limit.
    pub fn add_conn(&mut self, id: ConnId, max_rdy: u64, now: Instant) -> Updates {
        self.conns.insert(
            id,
            ConnRdy {
                max_rdy,
                last_rdy: 0,
                remaining: 0,
                in_flight: 0,
                last_activity: now,
                retiring: false,
            },
        );
        let mut out = Vec::new();
        if self.mode == Mode::Normal {
            self.lower_to_targets(&mut out);
            self.raise(id, 1, now, &mut out);
        }
        if let Mode::Probing { conn: None } = self.mode {
            self.send_probe(id, now, &mut out);
        }
        out
    }

    /// A connection is gone (closed or failed). Its budget goes back to the others.
    pub fn remove_conn(&mut self, id: ConnId, now: Instant) -> Updates {
        self.conns.remove(&id);
        let mut out = Vec::new();
        match self.mode {
            Mode::Normal => self.raise_to_targets(now, &mut out),
            Mode::Probing { conn: Some(c) } if c == id => {
                self.mode = Mode::Probing { conn: None };
            }
            _ => {}
        }
        out
    }

    /// A connection is leaving: it gets no more RDY (the caller sends CLS, after which the
    /// broker delivers nothing), but its messages in flight still count until handled.
    pub fn retire_conn(&mut self, id: ConnId, now: Instant) -> Updates {
        if let Some(c) = self.conns.get_mut(&id) {
            c.retiring = true;
            c.last_rdy = 0;
            c.remaining = 0;
        }
        let mut out = Vec::new();
        if self.mode == Mode::Normal {
            self.raise_to_targets(now, &mut out);
        }
        out
    }

    /// A message arrived on `id`.
    pub fn on_message(&mut self, id: ConnId, now: Instant) -> Updates {
        let Some(c) = self.conns.get_mut(&id) else {
            return Vec::new();
        };
        c.in_flight += 1;
        c.remaining = c.remaining.saturating_sub(1);
        c.last_activity = now;
        self.refresh_if_low(id, now)
    }

    /// A message of `id` was finished or requeued.
    pub fn on_message_done(&mut self, id: ConnId, now: Instant) -> Updates {
        let Some(c) = self.conns.get_mut(&id) else {
            return Vec::new();
        };
        c.in_flight = c.in_flight.saturating_sub(1);
        let mut out = Vec::new();
        let held = c.last_rdy > 0;
        // Budget freed up: a connection below target may grow. One that redistribution left
        // at 0 stays there; tick decides who gets RDY then.
        if self.mode == Mode::Normal && (held || !self.needs_redistribution()) {
            if let Some(c) = self.conns.get(&id) {
                let target = self.target_of(c);
                self.raise(id, target, now, &mut out);
            }
        }
        out
    }

    /// Periodic work: move RDY away from idle connections when there are more connections
    /// than `max_in_flight`, keep everyone at target otherwise, and retry a probe that found
    /// no budget. `pick(n)` returns an index below `n` (random in production).
    pub fn tick(&mut self, now: Instant, pick: &mut dyn FnMut(usize) -> usize) -> Updates {
        let mut out = Vec::new();
        match self.mode {
            Mode::Paused => {}
            Mode::Probing { conn: Some(_) } => {}
            Mode::Probing { conn: None } => self.probe_one(now, pick, &mut out),
            Mode::Normal => {
                self.lower_to_targets(&mut out);
                if self.needs_redistribution() {
                    self.redistribute(now, pick, &mut out);
                } else {
                    self.raise_to_targets(now, &mut out);
                }
            }
        }
        out
    }

    /// Backoff started: RDY 0 everywhere.
    pub fn pause(&mut self) -> Updates {
        self.mode = Mode::Paused;
        let mut out = Vec::new();
        for (&id, c) in self.conns.iter_mut() {
            if c.last_rdy > 0 {
                c.last_rdy = 0;
                c.remaining = 0;
                out.push(RdyUpdate { conn: id, count: 0 });
            }
        }
        out
    }

    /// Backoff pause over: RDY 1 on a single connection chosen by `pick`.
    pub fn probe(&mut self, now: Instant, pick: &mut dyn FnMut(usize) -> usize) -> Updates {
        // Anything still holding RDY (there should be nothing) goes to 0 first.
        let mut out = self.pause();
        self.mode = Mode::Probing { conn: None };
        self.probe_one(now, pick, &mut out);
        out
    }

    /// Backoff over: every connection back to its target.
    pub fn resume(&mut self, now: Instant) -> Updates {
        self.mode = Mode::Normal;
        let mut out = Vec::new();
        self.lower_to_targets(&mut out);
        self.raise_to_targets(now, &mut out);
        out
    }

    /// Changes `max_in_flight` (0 stops message flow); takes effect at once.
    pub fn set_max_in_flight(&mut self, max_in_flight: u64, now: Instant) -> Updates {
        self.max_in_flight = max_in_flight;
        let mut out = Vec::new();
        self.lower_to_targets(&mut out);
        self.shed_excess(&mut out);
        if self.mode == Mode::Normal {
            self.raise_to_targets(now, &mut out);
        }
        out
    }

    /// The guide's `is_starved`: some connection has at least 85% of its last RDY in flight.
    pub fn is_starved(&self) -> bool {
        self.conns
            .values()
            .any(|c| c.in_flight > 0 && c.in_flight * 100 >= c.last_rdy * 85)
    }

    /// Sum of the last RDY sent on every connection.
    pub fn total_rdy(&self) -> u64 {
        self.conns.values().map(|c| c.last_rdy).sum()
    }

    /// Messages in flight over all connections.
    pub fn total_in_flight(&self) -> u64 {
        self.conns.values().map(|c| c.in_flight).sum()
    }

    /// Last RDY sent on `id`.
    pub fn rdy_of(&self, id: ConnId) -> Option<u64> {
        self.conns.get(&id).map(|c| c.last_rdy)
    }

    /// Messages in flight on `id`.
    pub fn in_flight_of(&self, id: ConnId) -> Option<u64> {
        self.conns.get(&id).map(|c| c.in_flight)
    }

    pub fn max_in_flight(&self) -> u64 {
        self.max_in_flight
    }

    fn active_count(&self) -> u64 {
        self.conns.values().filter(|c| !c.retiring).count() as u64
    }

    fn needs_redistribution(&self) -> bool {
        self.max_in_flight < self.active_count()
    }

    /// The even share of one connection, before its own `max_rdy` cap.
    fn share(&self) -> u64 {
        let n = self.active_count();
        if n == 0 || self.max_in_flight == 0 {
            return 0;
        }
        (self.max_in_flight / n).max(1)
    }

    fn target_of(&self, c: &ConnRdy) -> u64 {
        if c.retiring {
            0
        } else {
            self.share().min(c.max_rdy)
        }
    }

    fn committed_except(&self, id: ConnId) -> u64 {
        self.conns
            .iter()
            .filter(|(&k, _)| k != id)
            .map(|(_, c)| c.commitment())
            .sum()
    }

    /// Most RDY `id` may have without the sum of commitments passing `max_in_flight`.
    fn room_for(&self, id: ConnId) -> u64 {
        self.max_in_flight.saturating_sub(self.committed_except(id))
    }

    fn send(&mut self, id: ConnId, count: u64, now: Instant, out: &mut Updates) {
        if let Some(c) = self.conns.get_mut(&id) {
            if c.last_rdy == 0 && count > 0 {
                c.last_activity = now;
            }
            c.last_rdy = count;
            c.remaining = count;
            out.push(RdyUpdate { conn: id, count });
        }
    }

    /// Raises `id` towards `want` as far as the budget allows; sends nothing if that is no
    /// raise at all.
    fn raise(&mut self, id: ConnId, want: u64, now: Instant, out: &mut Updates) {
        let Some(c) = self.conns.get(&id) else { return };
        if c.retiring {
            return;
        }
        let count = want.min(c.max_rdy).min(self.room_for(id));
        if count > c.last_rdy {
            self.send(id, count, now, out);
        }
    }

    fn lower_to_targets(&mut self, out: &mut Updates) {
        let lower: Vec<(ConnId, u64)> = self
            .conns
            .iter()
            .filter_map(|(&id, c)| {
                let cap = match self.mode {
                    Mode::Normal => self.target_of(c),
                    // While probing only the probe may hold RDY, and only 1.
                    _ => u64::from(self.mode == Mode::Probing { conn: Some(id) })
                        .min(self.max_in_flight),
                };
                (c.last_rdy > cap).then_some((id, cap))
            })
            .collect();
        for (id, count) in lower {
            if let Some(c) = self.conns.get_mut(&id) {
                c.last_rdy = count;
                c.remaining = c.remaining.min(count);
                out.push(RdyUpdate { conn: id, count });
            }
        }
    }

    /// After `max_in_flight` shrank, lowers RDY until the commitments fit again (as far as
    /// messages already in flight allow).
    fn shed_excess(&mut self, out: &mut Updates) {
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            let total: u64 = self.conns.values().map(ConnRdy::commitment).sum();
            let excess = total.saturating_sub(self.max_in_flight);
            if excess == 0 {
                return;
            }
            if let Some(c) = self.conns.get_mut(&id) {
                let count = c.last_rdy.saturating_sub(excess);
                if count < c.last_rdy {
                    c.last_rdy = count;
                    c.remaining = c.remaining.min(count);
                    out.push(RdyUpdate { conn: id, count });
                }
            }
        }
    }

    fn raise_to_targets(&mut self, now: Instant, out: &mut Updates) {
        if self.needs_redistribution() {
            // Only so much to go round: redistribution on tick decides who gets it.
            return;
        }
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.conns.get(&id) {
                let target = self.target_of(c);
                self.raise(id, target, now, out);
            }
        }
    }

    /// The 25% rule: resend the target when what is left of the last RDY runs low.
    fn refresh_if_low(&mut self, id: ConnId, now: Instant) -> Updates {
        let mut out = Vec::new();
        if self.mode != Mode::Normal {
            return out;
        }
        let Some(c) = self.conns.get(&id) else {
            return out;
        };
        if c.retiring || c.remaining * 4 > c.last_rdy {
            return out;
        }
        if self.needs_redistribution() && c.last_rdy == 0 {
            // At 0 because the RDY went elsewhere: only redistribution brings it back.
            return out;
        }
        let target = self.target_of(c);
        let count = target.min(self.room_for(id));
        if count > 0 {
            self.send(id, count, now, &mut out);
        }
        out
    }

    fn redistribute(
        &mut self,
        now: Instant,
        pick: &mut dyn FnMut(usize) -> usize,
        out: &mut Updates,
    ) {
        let idle: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.last_rdy > 0
                    && now.saturating_duration_since(c.last_activity) >= self.idle_timeout
            })
            .map(|(&id, _)| id)
            .collect();
        for &id in &idle {
            if let Some(c) = self.conns.get_mut(&id) {
                c.last_rdy = 0;
                c.remaining = 0;
                out.push(RdyUpdate { conn: id, count: 0 });
            }
        }
        loop {
            let mut candidates: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(id, c)| {
                    !c.retiring && c.last_rdy == 0 && c.max_rdy > 0 && !idle.contains(id)
                })
                .map(|(&id, _)| id)
                .collect();
            if candidates.is_empty() {
                // Everyone else is busy: an idle connection may have its RDY back.
                candidates = idle
                    .iter()
                    .copied()
                    .filter(|id| self.conns.get(id).is_some_and(|c| c.last_rdy == 0))
                    .collect();
            }
            if candidates.is_empty() {
                return;
            }
            let id = candidates[pick(candidates.len()) % candidates.len()];
            if self.room_for(id) < 1 {
                return;
            }
            self.send(id, 1, now, out);
        }
    }

    fn probe_one(&mut self, now: Instant, pick: &mut dyn FnMut(usize) -> usize, out: &mut Updates) {
        let candidates: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(&id, c)| !c.retiring && c.max_rdy > 0 && self.room_for(id) >= 1)
            .map(|(&id, _)| id)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let id = candidates[pick(candidates.len()) % candidates.len()];
        self.send_probe(id, now, out);
    }

    fn send_probe(&mut self, id: ConnId, now: Instant, out: &mut Updates) {
        if self.room_for(id) >= 1 && self.conns.get(&id).is_some_and(|c| !c.retiring) {
            self.mode = Mode::Probing { conn: Some(id) };
            self.send(id, 1, now, out);
        }
    }
}

#[cfg(test)]
mod tests;

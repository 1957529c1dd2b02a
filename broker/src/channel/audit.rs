//! (Tests.) Where every message a channel owes is, with the bookkeeping that ties the places
//! together checked ([`Channel::audit`]), for the owner simulation (`crate::owner_sim`), which
//! compares it with its own model after every step.

use super::{Channel, ConsumerKey, Owes};
use crate::storage::log::{DiskHint, Read, TopicLog};
use protocol::MessageId;

impl Channel {
    /// Where every message the channel owes is, checking the bookkeeping that ties the places
    /// together (for the owner simulation, `crate::owner_sim`).
    pub(crate) fn audit(&self, log: &TopicLog) -> Result<Audit, String> {
        let mut a = Audit::default();
        let mut seq = self.cursor;
        while seq < self.visible_end {
            match self.skip {
                Some((from, to)) if seq >= from && seq < to => {
                    seq = to;
                    continue;
                }
                _ => {}
            }
            match log.read(seq, DiskHint::default()) {
                Read::Msg(s, _) if s.seq < self.visible_end => {
                    a.waiting.push(s.msg.id);
                    seq = s.seq + 1;
                }
                Read::Msg(..) | Read::End => break,
                Read::Skip(next) if next > seq => seq = next,
                Read::Skip(_) | Read::Wait => return Err(format!("log unreadable at {seq}")),
            }
        }
        a.requeued = self.requeued.iter().map(|r| r.msg.msg.id).collect();
        a.deferred = self.deferred.keys().copied().collect();
        for f in self.in_flight.values() {
            a.in_flight
                .push((f.msg.msg.id, f.consumer, f.msg.msg.attempts));
            a.owes.push((f.msg.msg.id, f.owes));
            if f.msg.seq >= self.cursor && f.owes != Owes::Replayed {
                return Err(format!(
                    "{:?} in flight at or after the cursor, marked {:?}",
                    f.msg.msg.id, f.owes
                ));
            }
        }
        if a.in_flight.len() != self.in_flight.len() {
            return Err("the in-flight table's count disagrees with its entries".into());
        }
        for c in &self.consumers {
            let owned = a.in_flight.iter().filter(|f| f.1 == c.spec.key).count() as u64;
            if owned != c.in_flight {
                return Err(format!(
                    "consumer {:?} counts {} in flight, owns {owned}",
                    c.spec.key, c.in_flight
                ));
            }
        }
        if let Some(f) = a
            .in_flight
            .iter()
            .find(|f| !self.consumers.iter().any(|c| c.spec.key == f.1))
        {
            return Err(format!("{:?} in flight to a consumer that left", f.0));
        }
        if self.deferred_order.len() != self.deferred.len()
            || self
                .deferred_order
                .iter()
                .any(|(at, id)| self.deferred.get(id).is_none_or(|d| d.at != *at))
        {
            return Err("deferred order and deferred set disagree".into());
        }
        if let (Some(first), Some(armed)) = (self.deferred_order.first(), self.armed_deferred) {
            if armed > first.0 {
                return Err("the deferred timer is armed after the earliest deferral".into());
            }
        }
        if let (Some(first), armed) = (self.in_flight_order.first(), self.armed_in_flight) {
            if armed.is_none_or(|a| a > first) {
                return Err("the in-flight timer is not armed for the earliest deadline".into());
            }
        }
        Ok(a)
    }
}

/// Where a channel's owed messages are (see [`Channel::audit`]).
#[derive(Debug, Default)]
pub(crate) struct Audit {
    /// In the log at or after the cursor, not taken yet.
    pub waiting: Vec<MessageId>,
    pub requeued: Vec<MessageId>,
    pub deferred: Vec<MessageId>,
    /// With the consumer holding it and its attempts.
    pub in_flight: Vec<(MessageId, ConsumerKey, u16)>,
    /// What each delivery in flight owes when it ends.
    pub owes: Vec<(MessageId, Owes)>,
}

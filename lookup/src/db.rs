//! The registration database: which peers (brokers) produce which topics and channels.
//!
//! It keeps nsqlookupd's model, because its HTTP answers depend on its quirks:
//! - A registration is `(category, key, sub_key)`: `("client", "", "")` holds every identified
//!   peer, `("topic", t, "")` the producers of topic t, `("channel", t, c)` those of channel c.
//! - Removing a producer leaves the registration in place, even with no producers left: a topic
//!   stays listed by /topics after its broker is gone, until deleted over HTTP. The exception is
//!   an UNREGISTER that leaves an `#ephemeral` topic or channel without producers: that one goes.
//! - A tombstone belongs to one producer of one registration. It hides that producer from
//!   /lookup for the tombstone lifetime, and lasts until the producer is removed from that
//!   registration.
//! - Peers are never expired: one that has not PINGed within the inactivity timeout is only
//!   left out of /lookup and /nodes.
//!
//! All time comes in as arguments (`now`), so the rules can be tested without waiting.

use protocol::lookup::PeerInfo;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

/// Identifies one peer connection for its lifetime.
pub type PeerId = u64;

/// What a registration is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    Client,
    Topic,
    Channel,
}

impl Category {
    /// The name nsqlookupd uses (in /debug).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Client => "client",
            Category::Topic => "topic",
            Category::Channel => "channel",
        }
    }
}

/// A key of the database.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Registration {
    pub category: Category,
    pub key: String,
    pub sub_key: String,
}

impl Registration {
    /// The registration holding every identified peer.
    pub fn client() -> Self {
        Registration {
            category: Category::Client,
            key: String::new(),
            sub_key: String::new(),
        }
    }

    pub fn topic(topic: &str) -> Self {
        Registration {
            category: Category::Topic,
            key: topic.to_owned(),
            sub_key: String::new(),
        }
    }

    pub fn channel(topic: &str, channel: &str) -> Self {
        Registration {
            category: Category::Channel,
            key: topic.to_owned(),
            sub_key: channel.to_owned(),
        }
    }
}

/// A moment, kept both ways: monotonic for the rules, wall-clock for /debug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub at: Instant,
    pub wall: SystemTime,
}

impl Stamp {
    pub fn now() -> Self {
        Stamp {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// Nanoseconds since the Unix epoch, as Go's `UnixNano`.
    pub fn unix_nanos(&self) -> i64 {
        self.wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

/// An identified peer.
#[derive(Debug, Clone)]
pub struct Peer {
    pub id: PeerId,
    /// `ip:port` of the peer's connection; also its id in /debug, as in nsqlookupd.
    pub remote_address: String,
    pub info: PeerInfo,
    /// Last IDENTIFY or PING.
    pub last_update: Stamp,
}

/// One peer's place in one registration.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProducerState {
    pub tombstoned_at: Option<Stamp>,
}

impl ProducerState {
    /// True while a tombstone set less than `lifetime` ago holds.
    pub fn is_tombstoned(&self, lifetime: Duration, now: Instant) -> bool {
        self.tombstoned_at
            .is_some_and(|t| now.saturating_duration_since(t.at) < lifetime)
    }
}

/// The whole database. Sorted maps keep every listing in a stable order.
#[derive(Debug, Default)]
pub struct RegistrationDb {
    peers: HashMap<PeerId, Peer>,
    registrations: BTreeMap<Registration, BTreeMap<PeerId, ProducerState>>,
}

impl RegistrationDb {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an IDENTIFIED peer and adds it to the client registration.
    pub fn add_peer(&mut self, peer: Peer) {
        let id = peer.id;
        self.peers.insert(id, peer);
        self.add_producer(Registration::client(), id);
    }

    /// Marks a peer active (a PING).
    pub fn touch_peer(&mut self, id: PeerId, now: Stamp) {
        if let Some(peer) = self.peers.get_mut(&id) {
            peer.last_update = now;
        }
    }

    /// Forgets a peer that disconnected: it leaves every registration (which stay).
    pub fn remove_peer(&mut self, id: PeerId) -> Vec<Registration> {
        let mut left = Vec::new();
        for (registration, producers) in &mut self.registrations {
            if producers.remove(&id).is_some() {
                left.push(registration.clone());
            }
        }
        self.peers.remove(&id);
        left
    }

    #[cfg(test)]
    pub fn peer(&self, id: PeerId) -> Option<&Peer> {
        self.peers.get(&id)
    }

    /// Ensures a registration exists (HTTP create). Returns true if it is new.
    pub fn add_registration(&mut self, registration: Registration) -> bool {
        let mut added = false;
        self.registrations.entry(registration).or_insert_with(|| {
            added = true;
            BTreeMap::new()
        });
        added
    }

    /// Deletes a registration with all its producers. Returns true if it existed.
    pub fn remove_registration(&mut self, registration: &Registration) -> bool {
        self.registrations.remove(registration).is_some()
    }

    /// Adds a producer to a registration, creating it. Returns true if the producer is new
    /// there (an existing one keeps its tombstone).
    pub fn add_producer(&mut self, registration: Registration, id: PeerId) -> bool {
        let producers = self.registrations.entry(registration).or_default();
        if producers.contains_key(&id) {
            return false;
        }
        producers.insert(id, ProducerState::default());
        true
    }

    /// Removes a producer from a registration: whether it was there, and how many producers
    /// the registration has left.
    pub fn remove_producer(&mut self, registration: &Registration, id: PeerId) -> (bool, usize) {
        match self.registrations.get_mut(registration) {
            Some(producers) => (producers.remove(&id).is_some(), producers.len()),
            None => (false, 0),
        }
    }

    pub fn has_registration(&self, registration: &Registration) -> bool {
        self.registrations.contains_key(registration)
    }

    /// Every registration of a category, sorted.
    pub fn registrations_of(&self, category: Category) -> impl Iterator<Item = &Registration> {
        self.registrations
            .keys()
            .filter(move |r| r.category == category)
    }

    /// Names of every topic registration (with or without producers).
    pub fn topics(&self) -> Vec<String> {
        self.registrations_of(Category::Topic)
            .map(|r| r.key.clone())
            .collect()
    }

    /// The channel registrations of a topic.
    pub fn channel_registrations(&self, topic: &str) -> Vec<Registration> {
        self.registrations_of(Category::Channel)
            .filter(|r| r.key == topic)
            .cloned()
            .collect()
    }

    /// Names of a topic's channel registrations.
    pub fn channels(&self, topic: &str) -> Vec<String> {
        self.channel_registrations(topic)
            .into_iter()
            .map(|r| r.sub_key)
            .collect()
    }

    /// The producers of a registration with their state there.
    pub fn producers(&self, registration: &Registration) -> Vec<(&Peer, ProducerState)> {
        self.registrations
            .get(registration)
            .into_iter()
            .flatten()
            .filter_map(|(id, state)| self.peers.get(id).map(|p| (p, *state)))
            .collect()
    }

    /// The topics a peer produces, sorted.
    pub fn topics_of_peer(&self, id: PeerId) -> Vec<(String, ProducerState)> {
        self.registrations
            .iter()
            .filter(|(r, _)| r.category == Category::Topic)
            .filter_map(|(r, producers)| producers.get(&id).map(|s| (r.key.clone(), *s)))
            .collect()
    }

    /// Tombstones the producers of `topic` whose `<broadcast_address>:<http_port>` is `node`.
    /// Returns how many.
    pub fn tombstone(&mut self, topic: &str, node: &str, now: Stamp) -> usize {
        let Some(producers) = self.registrations.get_mut(&Registration::topic(topic)) else {
            return 0;
        };
        let mut count = 0;
        for (id, state) in producers.iter_mut() {
            let Some(peer) = self.peers.get(id) else {
                continue;
            };
            if format!("{}:{}", peer.info.broadcast_address, peer.info.http_port) == node {
                state.tombstoned_at = Some(now);
                count += 1;
            }
        }
        count
    }

    /// Every registration with its producers, for /debug.
    pub fn all(&self) -> impl Iterator<Item = (&Registration, Vec<(&Peer, ProducerState)>)> {
        self.registrations.keys().map(|r| (r, self.producers(r)))
    }
}

/// True when a peer has IDENTIFIED or PINGed within `timeout` (nsqlookupd drops it only past
/// the timeout, not at it).
pub fn is_active(peer: &Peer, timeout: Duration, now: Instant) -> bool {
    now.saturating_duration_since(peer.last_update.at) <= timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: PeerId, addr: &str, http_port: u16, now: Stamp) -> Peer {
        Peer {
            id,
            remote_address: format!("127.0.0.1:{}", 50000 + id),
            info: PeerInfo {
                broadcast_address: addr.into(),
                hostname: "h".into(),
                http_port,
                tcp_port: 4150,
                version: protocol::NSQD_COMPAT_VERSION.into(),
            },
            last_update: now,
        }
    }

    #[test]
    fn removing_a_peer_keeps_the_registrations() {
        let now = Stamp::now();
        let mut db = RegistrationDb::new();
        db.add_peer(peer(1, "a", 1, now));
        db.add_producer(Registration::topic("t"), 1);
        db.add_producer(Registration::channel("t", "c"), 1);
        assert_eq!(db.producers(&Registration::topic("t")).len(), 1);
        let left = db.remove_peer(1);
        assert_eq!(left.len(), 3);
        assert!(db.producers(&Registration::topic("t")).is_empty());
        assert_eq!(db.topics(), ["t"]);
        assert_eq!(db.channels("t"), ["c"]);
        assert!(db.peer(1).is_none());
    }

    #[test]
    fn tombstones_match_node_and_expire() {
        let now = Stamp::now();
        let mut db = RegistrationDb::new();
        db.add_peer(peer(1, "a", 1, now));
        db.add_peer(peer(2, "b", 1, now));
        db.add_producer(Registration::topic("t"), 1);
        db.add_producer(Registration::topic("t"), 2);
        assert_eq!(db.tombstone("t", "a:1", now), 1);
        assert_eq!(db.tombstone("t", "a:2", now), 0);
        assert_eq!(db.tombstone("u", "a:1", now), 0);
        let states: Vec<_> = db
            .producers(&Registration::topic("t"))
            .into_iter()
            .map(|(p, s)| (p.id, s.is_tombstoned(Duration::from_secs(1), now.at)))
            .collect();
        assert_eq!(states, [(1, true), (2, false)]);
        let later = now.at + Duration::from_secs(1);
        let (_, s) = db.producers(&Registration::topic("t"))[0];
        assert!(!s.is_tombstoned(Duration::from_secs(1), later));
        // a second REGISTER keeps the tombstone
        assert!(!db.add_producer(Registration::topic("t"), 1));
        assert!(db.producers(&Registration::topic("t"))[0]
            .1
            .tombstoned_at
            .is_some());
    }

    #[test]
    fn activity_is_judged_past_the_timeout() {
        let now = Stamp::now();
        let p = peer(1, "a", 1, now);
        let t = Duration::from_secs(5);
        assert!(is_active(&p, t, now.at + t));
        assert!(!is_active(&p, t, now.at + t + Duration::from_millis(1)));
    }
}

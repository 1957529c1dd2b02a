//! The broker as a member of a replication cluster (`--replication-address`;
//! docs/design/replication.md): its identity in the data path ([`identity`]), which lookup its
//! session with the controller asks ([`steering`]), the addresses of its shards and of its
//! peers' ([`peers`]), the shards' requests to the controller ([`requests`]), and the session's
//! state as every shard may read it ([`Status`]). The session itself runs on the control thread
//! (`crate::controller_session`). Without the flag nothing here is constructed.
//!
//! Invariants: [`Status`] is written only by the session and read by anyone (`/stats`), but for
//! the start-up damage report, which each shard writes once after loading its topics and the
//! session reads before its first heartbeat; its identity is fixed for the run.

pub mod identity;
pub mod peers;
pub mod requests;
pub mod steering;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

pub use identity::{Identity, IdentityError};

/// The session as `/stats` shows it; shared by the control thread (writer) and the shards.
#[derive(Debug)]
pub struct Status {
    pub identity: Identity,
    /// The broker-to-broker address registered with the controller.
    pub address: String,
    /// The controller node that last answered as leader (0: none yet).
    controller_leader: AtomicU64,
    /// The metadata version of the view ([`NO_VIEW`]: none yet).
    view_version: AtomicU64,
    /// The view says this broker is registered and not fenced.
    live: AtomicBool,
    /// What the shards found at start-up (see [`Status::shard_loaded`]).
    damage: Mutex<Damage>,
}

/// The replicated topics whose log on this broker may miss a suffix, as the shards report them
/// after loading their topics.
#[derive(Debug, Default)]
struct Damage {
    /// Shards that have reported.
    shards: usize,
    topics: BTreeSet<String>,
}

/// [`Status::view_version`] before the first view.
const NO_VIEW: u64 = u64::MAX;

impl Status {
    pub fn new(identity: Identity, address: String) -> Self {
        Self {
            identity,
            address,
            controller_leader: AtomicU64::new(0),
            view_version: AtomicU64::new(NO_VIEW),
            live: AtomicBool::new(false),
            damage: Mutex::new(Damage::default()),
        }
    }

    /// A shard loaded its topics; `damaged` names those of them that were replicated and whose
    /// log may miss a suffix.
    pub fn shard_loaded(&self, damaged: impl IntoIterator<Item = String>) {
        // A poisoned lock only means another shard panicked while holding it: the set is
        // still the union of complete reports.
        let mut d = self.damage.lock().unwrap_or_else(|e| e.into_inner());
        d.shards += 1;
        d.topics.extend(damaged);
    }

    /// Once all `shards` have loaded their topics, the damaged ones (sorted); `None` before.
    pub fn damaged_topics(&self, shards: usize) -> Option<Vec<String>> {
        let d = self.damage.lock().unwrap_or_else(|e| e.into_inner());
        (d.shards >= shards).then(|| d.topics.iter().cloned().collect())
    }

    pub fn controller_leader(&self) -> u64 {
        self.controller_leader.load(Ordering::Relaxed)
    }

    pub fn view_version(&self) -> Option<u64> {
        Some(self.view_version.load(Ordering::Relaxed)).filter(|v| *v != NO_VIEW)
    }

    pub fn live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }

    /// The leader answered; the view is at `version`, and says `live`.
    pub fn heard(&self, leader: u64, version: Option<u64>, live: bool) {
        self.controller_leader.store(leader, Ordering::Relaxed);
        self.view_version
            .store(version.unwrap_or(NO_VIEW), Ordering::Relaxed);
        self.live.store(live, Ordering::Relaxed);
    }
}

//! The broker as a member of a replication cluster (`--replication-address`;
//! docs/design/replication.md): its identity in the data path ([`identity`]), which lookup its
//! session with the controller asks ([`steering`]), the addresses of its shards and of its
//! peers' ([`peers`]), the shards' requests to the controller ([`requests`]), and the session's
//! state as every shard may read it ([`Status`]). The session itself runs on the control thread
//! (`crate::controller_session`). Without the flag nothing here is constructed.
//!
//! Invariants: [`Status`] is written only by the session and read by anyone (`/stats`); its
//! identity is fixed for the run.

pub mod identity;
pub mod peers;
pub mod requests;
pub mod steering;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
        }
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

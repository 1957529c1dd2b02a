//! Identities shared by the controller and the replicas.
//!
//! A broker's id is stored in its data path: a wiped data path is a new broker, never an old
//! one that forgot its log. An epoch numbers a topic's leaderships; it only grows, and every
//! record a leader ships carries the epoch it was written under. A seq is a record's position
//! in its topic's log, as the broker's storage numbers it.

use serde::{Deserialize, Serialize};

/// A broker of the cluster (stored in its data path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BrokerId(pub u64);

/// A topic's leadership number: one leader per epoch, epochs only grow.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Epoch(pub u64);

/// A record's position in its topic's log.
pub type Seq = u64;

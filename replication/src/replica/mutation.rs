//! Deliberate protocol breaks the simulation's tests switch on, to show that each invariant
//! check can fail. Outside `cfg(test)` no mutation is ever active.

/// A deliberate break of the protocol.
#[allow(dead_code)] // constructed by the simulation's tests only
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// The leader acknowledges a publish once its own log holds it.
    AckBeforeIsr,
    /// A follower of a new epoch truncates to the high watermark it remembers.
    TruncateToLocalHw,
    /// A follower of a new epoch keeps its log as it is.
    SkipTruncation,
    /// A follower stores records without checking their crcs.
    SkipCrc,
    /// The leader counts log ends, not durable ends, in durable mode.
    CountUnsynced,
    /// The controller elects any live replica, in sync or not.
    ElectOutsideIsr,
    /// The controller names a new leader without a new epoch.
    ReuseEpoch,
    /// The leader sets its high watermark to the lowest end it counts, even when lower.
    HwFollowsAcks,
    /// The leader tells a follower behind its start to begin at the log's end instead.
    StartAtEnd,
    /// The leader never tells a follower behind its start where the log begins (it waits
    /// for records it no longer has).
    NoStartAt,
}

#[cfg(test)]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutation>> = const { std::cell::Cell::new(None) };
}

/// Whether `m` is switched on (on this thread).
#[cfg(test)]
pub(crate) fn on(m: Mutation) -> bool {
    ACTIVE.with(|a| a.get() == Some(m))
}

/// Whether `m` is switched on: never outside tests.
#[cfg(not(test))]
pub(crate) fn on(_m: Mutation) -> bool {
    false
}

/// Switches `m` on for this thread (`None`: the protocol as written).
#[cfg(test)]
pub(crate) fn set(m: Option<Mutation>) {
    ACTIVE.with(|a| a.set(m));
}

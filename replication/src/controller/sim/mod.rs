//! The controller's seeded deterministic simulation: three or five controller nodes, fake
//! brokers that register, heartbeat, crash and come back, and change their topics' in-sync sets
//! as leaders; a network that drops, delays, duplicates, reorders and partitions; node crashes
//! that lose what was not synced; clock jumps (a node's ticks paused or bunched). One u64 seed
//! drives everything; a failing seed is printed and replays exactly:
//!
//! `SIM_SEED=<seed> cargo test --release -p replication controller::sim`
//!
//! `SIM_SEEDS=<n>` runs n seeds instead of the default (the long form, outside CI), from
//! `SIM_SEED_START` (0); `SIM_STEPS` sets the steps of faults per seed.
//! After the faults, everything heals and the cluster must be whole again within a bound.

mod check;
mod net;
mod rng;
mod world;

use std::time::Instant;

use super::metadata::mutation::{self, Mutation};
use world::{Params, Stats, World};

/// Seeds the ordinary test runs.
const DEFAULT_SEEDS: u64 = 300;

fn params(seed: u64, chaos_steps: u64) -> Params {
    Params {
        nodes: if seed.is_multiple_of(2) { 3 } else { 5 },
        brokers: 5,
        chaos_steps,
        heal_bound: 1_000,
        storm: seed % 4 == 3,
        // Two seeds in three snapshot every few entries and keep a small margin, so that
        // compaction, restarts from a snapshot and installs to lagging nodes all happen often.
        snapshot_every: match seed % 3 {
            0 => 0,
            1 => 4 + seed / 3 % 13,
            _ => 20 + seed / 3 % 41,
        },
        snapshot_margin: seed / 7 % 9,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs one seed; a panic inside (raft-rs asserts its own invariants) is a violation too.
fn run_seed(seed: u64, chaos_steps: u64) -> Result<Stats, String> {
    run(seed, params(seed, chaos_steps))
}

fn run(seed: u64, p: Params) -> Result<Stats, String> {
    std::panic::catch_unwind(|| World::new(seed, p).and_then(World::run)).unwrap_or_else(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(format!("panicked: {msg}"))
    })
}

fn chaos_steps() -> u64 {
    env_u64("SIM_STEPS").unwrap_or(1_500)
}

#[test]
fn controller_simulation() {
    mutation::set(None);
    let steps = chaos_steps();
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let start = env_u64("SIM_SEED_START").unwrap_or(0);
            (start..start + env_u64("SIM_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect()
        }
    };
    let started = Instant::now();
    let mut total = Stats::default();
    let mut max_heal = 0;
    for &seed in &seeds {
        match run_seed(seed, steps) {
            Ok(s) => {
                total.steps += s.steps;
                total.applied += s.applied;
                total.terms += s.terms;
                total.leader_changes += s.leader_changes;
                total.node_crashes += s.node_crashes;
                total.broker_crashes += s.broker_crashes;
                total.wiped_brokers += s.wiped_brokers;
                total.partitions += s.partitions;
                total.clock_jumps += s.clock_jumps;
                total.messages += s.messages;
                total.dropped += s.dropped;
                total.snapshots_taken += s.snapshots_taken;
                total.snapshots_installed += s.snapshots_installed;
                total.snapshot_restarts += s.snapshot_restarts;
                total.snapshots_delivered += s.snapshots_delivered;
                total.snapshots_lost += s.snapshots_lost;
                total.max_log_len = total.max_log_len.max(s.max_log_len);
                max_heal = max_heal.max(s.heal_steps);
                for (k, (a, r)) in s.entries {
                    let t = total.entries.entry(k).or_default();
                    t.0 += a;
                    t.1 += r;
                }
            }
            Err(v) => panic!(
                "controller simulation: seed {seed} violated: {v}\nreplay: SIM_SEED={seed} SIM_STEPS={steps} cargo test --release -p replication controller::sim -- --nocapture"
            ),
        }
    }
    println!(
        "controller simulation: {} seeds, {} steps, {:.1} s, 0 violations; {} entries applied, {} Raft terms, {} topic leader changes, {} node crashes, {} broker crashes ({} wiped), {} partitions, {} clock jumps, {} messages ({} dropped); longest heal {} steps",
        seeds.len(),
        total.steps,
        started.elapsed().as_secs_f64(),
        total.applied,
        total.terms,
        total.leader_changes,
        total.node_crashes,
        total.broker_crashes,
        total.wiped_brokers,
        total.partitions,
        total.clock_jumps,
        total.messages,
        total.dropped,
        max_heal,
    );
    println!("entries (applied, refused): {:?}", total.entries);
    println!(
        "snapshots: {} taken, {} installed from a leader ({} sends reported delivered, {} given up as lost), {} restarts from a snapshot; at most {} log entries held by a node",
        total.snapshots_taken,
        total.snapshots_installed,
        total.snapshots_delivered,
        total.snapshots_lost,
        total.snapshot_restarts,
        total.max_log_len,
    );
    // Enough seeds must take every path of compaction, or the run proves nothing about it.
    if seeds.len() >= 100 {
        assert!(
            total.snapshots_taken > 0
                && total.snapshots_installed > 0
                && total.snapshot_restarts > 0
                && total.snapshots_delivered > 0
                && total.snapshots_lost > 0,
            "a snapshot path was never taken: {total:?}"
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    mutation::set(None);
    let a = run_seed(7, 600).map(|s| (s.fingerprint, s.steps, s.messages));
    let b = run_seed(7, 600).map(|s| (s.fingerprint, s.steps, s.messages));
    assert!(a.is_ok(), "{a:?}");
    assert_eq!(a, b);
    let c = run_seed(8, 600).map(|s| s.fingerprint);
    assert_ne!(a.map(|x| x.0), c);
}

/// Each deliberate bug must be caught within this many seeds.
const MUTATION_SEEDS: u64 = 200;

#[test]
fn every_invariant_catches_its_bug() {
    let mut report = Vec::new();
    // Each bug, and what the check meant for it says (any of them).
    let cases: [(Mutation, &[&str]); 19] = [
        (
            Mutation::AlterIsrIgnoresVersion,
            &["stale AlterIsr applied"],
        ),
        (
            Mutation::ElectOutsideIsr,
            &["elected", "outside the in-sync set"],
        ),
        (Mutation::ElectFenced, &["fenced at election", "is fenced"]),
        (Mutation::ElectKeepsEpoch, &["led by", "within epoch"]),
        (
            Mutation::FenceKeepsLeader,
            &["is fenced", "outside the in-sync set"],
        ),
        (Mutation::ForgetVote, &["two Raft leaders in term"]),
        (
            Mutation::CorruptEntries,
            &["where another applied", "differs from the others'"],
        ),
        (Mutation::ViewIgnoresBrokerChanges, &["view at version"]),
        (Mutation::NoEligible, &["without becoming eligible"]),
        (Mutation::IgnoreIncarnations, &["AlterIsr added"]),
        (Mutation::RefusalUnanswered, &["left unanswered"]),
        (
            Mutation::ProposalCopiesApply,
            &["a copy of an answered AlterIsr"],
        ),
        (
            Mutation::RestartKeepsLeader,
            &["restarted and still leads", "in incarnations"],
        ),
        (Mutation::IgnoreDamaged, &["with a damaged log"]),
        (Mutation::KeepWipedId, &["not retired"]),
        (
            Mutation::SnapshotWrongIndex,
            &["snapshot at index", "differs from the others'"],
        ),
        (
            Mutation::RestartIgnoresSnapshot,
            &["differs from the others'"],
        ),
        (
            Mutation::InstallKeepsMetadata,
            &["differs from the others'"],
        ),
        // raft-rs itself may notice first that a node lost entries it acknowledged.
        (
            Mutation::IgnoreSync,
            &["two Raft leaders", "where another applied", "out of range"],
        ),
    ];
    for (m, expected) in cases {
        mutation::set(Some(m));
        let caught = (0..MUTATION_SEEDS).find_map(|seed| {
            // A lost vote needs a crash between the vote and the next synced write, and a
            // rival candidate in the same term: the crash storm makes that common.
            let storm = m == Mutation::ForgetVote;
            run(
                seed,
                Params {
                    storm,
                    ..params(seed, 800)
                },
            )
            .err()
            .filter(|v| expected.iter().any(|x| v.contains(x)))
            .map(|v| (seed, v))
        });
        mutation::set(None);
        let Some((seed, v)) = caught else {
            panic!("{m:?}: not caught as {expected:?} within {MUTATION_SEEDS} seeds");
        };
        report.push(format!("{m:?}: caught at seed {seed}: {v}"));
    }
    println!("{}", report.join("\n"));
}

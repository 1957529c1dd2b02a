//! The seeded deterministic simulation of the data path: five brokers, three topics of three
//! replicas, a controller (`control`: the real one, a three-node Raft cluster in
//! `raft_control`, or the fast reference `oracle`), clients, a faulty network, crashes, wiped
//! data paths, damaged tails and clock jumps (`world`), with the invariants checked after every
//! step (`check`). One u64 seed drives a run, the controller's nodes included; a failing seed
//! is printed and replays exactly: `SIM_SEED=<seed> cargo test --release -p replication
//! simulation_with_the_real_controller` (the oracle: `simulation_holds`; add `SIM_TRACE=1` for
//! its events on stderr). The long form, outside CI: `SIM_SEEDS=100000 SIM_RAFT=1
//! [SIM_FIRST=<seed>] cargo test --release -p replication simulation_long -- --ignored
//! --nocapture` (without `SIM_RAFT=1`: the oracle; progress every 1,000 seeds, violations as
//! they happen).
//!
//! The mutation tests switch on a deliberate protocol break, of the data path or of the real
//! controller, and assert that the simulation catches it within a bounded number of seeds:
//! each invariant check can fail.

mod check;
mod control;
mod faults;
mod net;
mod oracle;
mod raft_control;
mod rng;
mod verify;
mod world;

use std::time::Instant;

use super::mutation::{self, Mutation};
use world::{Options, Outcome, World};

fn run(seed: u64) -> Result<Outcome, String> {
    run_with(seed, false)
}

/// One seed; `raft`: with the real controller in place of the oracle.
fn run_with(seed: u64, raft: bool) -> Result<Outcome, String> {
    World::new(Options {
        seed,
        faults_until: 20_000,
        end_at: 36_000,
        raft,
    })?
    .run()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs `seeds` seeds from `first` (`raft`: with the real controller); panics with every
/// failing seed.
fn run_seeds(first: u64, seeds: u64, raft: bool) {
    let started = Instant::now();
    let mut total = Outcome::default();
    let mut failures = Vec::new();
    for seed in first..first + seeds {
        match run_with(seed, raft) {
            Ok(o) => {
                total.steps += o.steps;
                total.acked += o.acked;
                total.failed += o.failed;
                total.elections += o.elections;
                total.faults += o.faults;
                total.durable_runs += o.durable_runs;
                total.starts += o.starts;
                total.ctl_crashes += o.ctl_crashes;
                total.ctl_installs += o.ctl_installs;
                total.ctl_snapshot_restarts += o.ctl_snapshot_restarts;
            }
            Err(e) => {
                println!("violation: {e}");
                failures.push(e);
            }
        }
        let done = seed - first + 1;
        if seeds > 1_000 && done.is_multiple_of(1_000) {
            println!(
                "progress: {done} seeds, {} steps, {} violations, {:.1?}",
                total.steps,
                failures.len(),
                started.elapsed()
            );
        }
    }
    println!(
        "simulation ({}): {seeds} seeds from {first}, {} steps, {} publishes acknowledged, {} failed, \
         {} elections, {} faults ({} controller node crashes; {} restarts from a snapshot, {} \
         snapshots installed), {} runs durable, {} followers begun at a leader's start, \
         {:.1?}, {} violations",
        if raft { "real controller" } else { "oracle" },
        total.steps,
        total.acked,
        total.failed,
        total.elections,
        total.faults,
        total.ctl_crashes,
        total.ctl_snapshot_restarts,
        total.ctl_installs,
        total.durable_runs,
        total.starts,
        started.elapsed(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failing seeds (replay one with SIM_SEED=<seed>{}):\n{}",
        failures.len(),
        if raft { " SIM_RAFT=1" } else { "" },
        failures.join("\n")
    );
}

/// `SIM_RAFT=1`: the single seed or the long form runs with the real controller.
fn raft_from_env() -> bool {
    env_u64("SIM_RAFT").is_some_and(|v| v != 0)
}

/// Seeds the ordinary test runs with the oracle (a fast reference; the real controller runs
/// more).
const ORACLE_SEEDS: u64 = 100;

#[test]
fn simulation_holds_the_invariants() {
    match env_u64("SIM_SEED") {
        Some(seed) => run_seeds(seed, 1, raft_from_env()),
        None => run_seeds(1, ORACLE_SEEDS, false),
    }
}

/// Seeds the ordinary test runs with the real controller.
const RAFT_SEEDS: u64 = 200;

#[test]
fn simulation_with_the_real_controller_holds_the_invariants() {
    match env_u64("SIM_SEED") {
        Some(seed) => run_seeds(seed, 1, true),
        None => run_seeds(1, RAFT_SEEDS, true),
    }
}

#[test]
#[ignore = "long form, outside CI: SIM_SEEDS=100000 [SIM_RAFT=1]"]
fn simulation_long() {
    let first = env_u64("SIM_FIRST").unwrap_or(1_000_000);
    run_seeds(
        first,
        env_u64("SIM_SEEDS").unwrap_or(100_000),
        raft_from_env(),
    );
}

#[test]
fn a_seed_replays_exactly() {
    let a = run(42).map(|o| (o.steps, o.acked, o.failed, o.elections));
    let b = run(42).map(|o| (o.steps, o.acked, o.failed, o.elections));
    assert_eq!(a, b);
}

/// The first seed in `1..=within` the simulation fails with `m` switched on, and its error.
fn caught(m: Mutation, within: u64) -> Option<(u64, String)> {
    mutation::set(Some(m));
    let found = (1..=within).find_map(|seed| run(seed).err().map(|e| (seed, e)));
    mutation::set(None);
    if let Some((seed, e)) = &found {
        println!("{m:?} caught at seed {seed}: {e}");
    }
    found
}

/// Asserts that the simulation fails with `m` within 50 seeds, by a check whose message
/// contains one of `checks`.
fn assert_caught(m: Mutation, checks: &[&str]) {
    match caught(m, 50) {
        Some((_, e)) => assert!(
            checks.iter().any(|c| e.contains(c)),
            "{m:?} caught by another check: {e}"
        ),
        None => panic!("{m:?} not caught within 50 seeds"),
    }
}

const LACKS: &str = "lacks the acknowledged prefix";
const ELECTED: &str = "elected without the acknowledged prefix";
const DISAGREES: &str = "disagrees with leader";

#[test]
fn acknowledging_before_the_in_sync_set_has_it_is_caught() {
    assert_caught(Mutation::AckBeforeIsr, &[LACKS]);
}

#[test]
fn truncating_to_a_remembered_position_is_caught() {
    assert_caught(Mutation::TruncateToLocalHw, &[LACKS]);
}

#[test]
fn keeping_a_divergent_suffix_is_caught() {
    assert_caught(Mutation::SkipTruncation, &[DISAGREES, LACKS]);
}

#[test]
fn storing_a_damaged_record_is_caught() {
    assert_caught(Mutation::SkipCrc, &[DISAGREES]);
}

#[test]
fn counting_unsynced_records_in_durable_mode_is_caught() {
    assert_caught(Mutation::CountUnsynced, &[ELECTED, LACKS]);
}

#[test]
fn electing_outside_the_in_sync_set_is_caught() {
    assert_caught(Mutation::ElectOutsideIsr, &[ELECTED]);
}

#[test]
fn two_leaders_in_one_epoch_are_caught() {
    assert_caught(Mutation::ReuseEpoch, &["both lead epoch"]);
}

#[test]
fn beginning_a_follower_past_what_was_released_is_caught() {
    assert_caught(Mutation::StartAtEnd, &[LACKS, ELECTED]);
}

#[test]
fn a_follower_left_behind_a_released_prefix_is_caught() {
    assert_caught(Mutation::NoStartAt, &["back in sync"]);
}

#[test]
fn a_falling_high_watermark_is_caught() {
    assert_caught(Mutation::HwFollowsAcks, &["high watermark fell"]);
}

/// The first seed in `1..=within` the simulation with the real controller fails with the
/// controller's `m` switched on, and its error.
fn caught_with_controller_bug(
    m: crate::controller::metadata::mutation::Mutation,
    within: u64,
) -> Option<(u64, String)> {
    use crate::controller::metadata::mutation as ctl;
    ctl::set(Some(m));
    let found = (1..=within).find_map(|seed| run_with(seed, true).err().map(|e| (seed, e)));
    ctl::set(None);
    if let Some((seed, e)) = &found {
        println!("controller {m:?} caught at seed {seed}: {e}");
    }
    found
}

/// Each bug of the real controller that breaks a rule the data path needs is caught by the data
/// path's own checks (the controller's simulation catches each of them, and the rest, itself).
#[test]
fn the_data_path_catches_a_real_controller_that_breaks_its_rules() {
    use crate::controller::metadata::mutation::Mutation as M;
    for m in [
        M::ElectOutsideIsr,
        M::ElectKeepsEpoch,
        M::FenceKeepsLeader,
        M::NoEligible,
        M::RestartKeepsLeader,
        M::IgnoreDamaged,
        M::KeepWipedId,
    ] {
        assert!(
            caught_with_controller_bug(m, 50).is_some(),
            "controller {m:?} not caught within 50 seeds"
        );
    }
}

//! The replicated partitions under faults, seed after seed (`corelog_sim::scenario::run`).
//! CI runs `SIM_SEEDS` seeds (default 2,000, under two minutes) from `SIM_FIRST_SEED`
//! (default 1); a failure names its seed, and `SIM_FIRST_SEED=<seed> SIM_SEEDS=1`
//! replays it exactly (`SIM_TRACE=1` prints its events). A seed that once failed joins
//! `FAILED_ONCE`, with what it found, and is replayed on every run.

use corelog_sim::scenario::{run, Scenario};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn replication_keeps_its_promises_under_faults() {
    let first = env("SIM_FIRST_SEED", 1);
    let seeds = env("SIM_SEEDS", 2_000);
    let mut failed = Vec::new();
    let mut total = [0usize; 6];
    for seed in first..first + seeds {
        match run(seed, Scenario::default()) {
            Ok(o) => {
                for (t, n) in total.iter_mut().zip([
                    o.acked,
                    o.acked_by_leader,
                    o.crashes,
                    o.disk_faults,
                    o.transactions_committed,
                    o.transactions_aborted,
                ]) {
                    *t += n;
                }
            }
            Err(v) => {
                eprintln!("seed {seed} failed:\n  {}", v.join("\n  "));
                failed.push(seed);
            }
        }
    }
    let [all, leader, crashes, disk, committed, aborted] = total;
    eprintln!(
        "{seeds} seeds from {first}: {all} records acknowledged at acks=all, {leader} at acks=1; \
         {crashes} crashes, {disk} disk faults; {committed} transactions committed, {aborted} aborted"
    );
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

/// Seeds that once found a bug: the seed, the scenario it failed in (partitions, and
/// whether transactions were played), and the bug. A change to the scenario changes
/// what a seed plays, so each is kept for as long as it still reaches its fault.
const FAILED_ONCE: &[(u64, i32, bool, &str)] = &[
    (1350, 1, false, INDEX_BEFORE_SYNC),
    (159, 2, true, INDEX_BEFORE_SYNC),
    // Bugs fixed before the simulator, put back by hand to show it finds them.
    (
        3,
        2,
        true,
        "a follower reported a fetch offset past what it had synced",
    ),
    (
        762,
        2,
        true,
        "a new epoch's first batch reached the file before the checkpoint naming the epoch",
    ),
];

const INDEX_BEFORE_SYNC: &str = "a crash kept an offset-index entry written before the log \
     was synced past it, and recovery trusted a torn batch before it (fixed: index \
     entries wait for the sync)";

#[test]
fn seeds_that_once_failed_pass() {
    for (seed, partitions, transactions, bug) in FAILED_ONCE {
        let scenario = Scenario {
            transactions: *transactions,
            partitions: *partitions,
            ..Scenario::default()
        };
        if let Err(v) = run(*seed, scenario) {
            panic!("seed {seed} ({bug}) fails again:\n  {}", v.join("\n  "));
        }
    }
}

/// A compacted topic under the same faults: every replica's cleaner runs below its high
/// watermark; `SIM_COMPACTED_SEEDS` seeds (default 500) from `SIM_FIRST_SEED`.
#[test]
fn compaction_keeps_the_last_record_of_every_key_under_faults() {
    let first = env("SIM_FIRST_SEED", 1);
    let seeds = env("SIM_COMPACTED_SEEDS", 500);
    let scenario = Scenario {
        compacted: true,
        transactions: false,
        partitions: 1,
        ..Scenario::default()
    };
    let mut failed = Vec::new();
    let (mut passes, mut acked) = (0, 0);
    for seed in first..first + seeds {
        match run(seed, scenario) {
            Ok(o) => {
                passes += o.cleaner_passes;
                acked += o.acked;
            }
            Err(v) => {
                eprintln!("compacted seed {seed} failed:\n  {}", v.join("\n  "));
                failed.push(seed);
            }
        }
    }
    eprintln!("{seeds} compacted seeds from {first}: {passes} cleaner passes, {acked} records acknowledged at acks=all");
    assert!(failed.is_empty(), "failing compacted seeds: {failed:?}");
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 17] {
        let a = run(seed, Scenario::default());
        let b = run(seed, Scenario::default());
        assert_eq!(a, b, "seed {seed}");
    }
}

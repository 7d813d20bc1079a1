//! The replicated partitions under faults, seed after seed (`corelog_sim::scenario::run`).
//! CI runs `SIM_SEEDS` seeds (default 2,000, under two minutes) from `SIM_FIRST_SEED`
//! (default 1); a failure names its seed, and `SIM_FIRST_SEED=<seed> SIM_SEEDS=1`
//! replays it exactly (`SIM_TRACE=1` prints its events). A seed that once failed joins
//! `FAILED_ONCE`, with what it found, and is replayed on every run. `SIM_LOG` (a tracing
//! filter, e.g. `corelog_storage=debug`) prints the engine's own log lines too.

use corelog_sim::scenario::{run, Scenario};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The engine's log lines on stderr, filtered by `SIM_LOG`, when it is set.
fn log_if_asked() {
    if let Ok(filter) = std::env::var("SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .without_time()
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .try_init();
    }
}

#[test]
fn replication_keeps_its_promises_under_faults() {
    log_if_asked();
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
    // Seeds 1350 (one partition) and 159 found it first; the scenario has changed since,
    // and these reach it now (5 of 4,000 seeds with the fix reverted).
    (666, 2, true, INDEX_BEFORE_SYNC),
    (1130, 2, true, INDEX_BEFORE_SYNC),
    (
        3734,
        2,
        true,
        "two follower cuts in a row deleted every producer snapshot, and the replay of the \
         last two segments missed a transaction opened before them: read_committed was given \
         its aborted records (fixed: a snapshot per roll, the whole log replayed without one)",
    ),
    (
        9181,
        2,
        true,
        "a reopen from a snapshot taken after a marker the high watermark had not passed \
         forgot that marker, and the replica leading next gave read_committed the \
         transaction's records (fixed: snapshots keep such transactions)",
    ),
    // Seeds 7021, 8919, 11555, 14410, 15470 (and compacted 4221, 5857) found a failed
    // log's flusher waiting for space that wrote on once space returned, over what the
    // next open had recovered. The simulator's crash now kills a process's tasks, as a
    // real one does, so these seeds no longer reach it; `storage_faults`'s
    // `a_log_failed_while_waiting_for_space_writes_nothing_when_space_returns` does.
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
    (
        4,
        2,
        true,
        "a failed coordinator's late marker taken after the next coordinator's (the \
         coordinator-epoch fence in ProducerState::check_marker removed)",
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

//! The replicated partition under faults, seed after seed (`corelog_sim::replication`).
//! CI runs `SIM_SEEDS` seeds (default 2,000, a few seconds) from `SIM_FIRST_SEED` (default 1); a failure
//! names its seed, and `SIM_FIRST_SEED=<seed> SIM_SEEDS=1` replays it exactly.

use corelog_sim::replication::{run, Scenario};

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
    for seed in first..first + seeds {
        if let Err(v) = run(seed, Scenario::default()) {
            eprintln!("seed {seed} failed:\n  {}", v.join("\n  "));
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 17] {
        let a = run(seed, Scenario::default());
        let b = run(seed, Scenario::default());
        assert_eq!(a, b, "seed {seed}");
    }
}

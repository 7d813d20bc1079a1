//! One seed's run: the replicated worlds of `replication`, with `transactions` played on
//! them when the scenario asks for it. The entry point of the simulator's tests.

use crate::replication::{self, Workload};
use crate::transactions::Txns;
use std::rc::Rc;

pub use crate::replication::{Outcome, Scenario};

/// Runs one seed of `scenario`: `Ok` with what it saw, or `Err` with every breach.
pub fn run(seed: u64, scenario: Scenario) -> Result<Outcome, Vec<String>> {
    let workload: Option<Rc<dyn Workload>> = if scenario.transactions {
        Some(Rc::new(Txns::new(seed)))
    } else {
        None
    };
    replication::run_with(seed, scenario, workload)
}

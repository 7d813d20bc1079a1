//! The simulator's executor: every task on one thread (a `futures` `LocalPool`), time
//! standing still while any task can run, and moved to the next timer when none can.
//!
//! Invariants: a run polls its tasks in one order for one seed (the pool is FIFO and
//! every wake-up comes from a task or from `SimTime::advance_to`, which wakes timers in
//! deadline order); simulated time never passes the limit a run was given.

use corelog_storage::runtime::{Runtime, SimTime};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use std::future::Future;
use std::time::Duration;

/// The wall clock a simulated run starts at (2026-01-01), whatever the host's.
pub const WALL_START_MS: i64 = 1_767_225_600_000;

pub struct Executor {
    pool: LocalPool,
    time: SimTime,
}

/// How a run stopped before its goal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// Nothing could run and no timer was set: every task waits on something that will
    /// never come.
    Deadlock,
    /// Simulated time reached the limit.
    TimeLimit,
}

impl Default for Executor {
    fn default() -> Self {
        Executor::new()
    }
}

impl Executor {
    pub fn new() -> Executor {
        let pool = LocalPool::new();
        let spawner = pool.spawner();
        let time = SimTime::new(WALL_START_MS, move |task| {
            spawner
                .spawn_local(task)
                .expect("the pool outlives its tasks");
        });
        Executor { pool, time }
    }

    pub fn time(&self) -> &SimTime {
        &self.time
    }

    /// The runtime the engine under test is handed.
    pub fn runtime(&self) -> Runtime {
        Runtime::Sim(self.time.clone())
    }

    pub fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.time.spawn(Box::pin(task));
    }

    /// Runs every task until `done` says so, moving time to the next timer whenever
    /// nothing can run, for at most `limit` of simulated time from now.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), Stopped> {
        let end = self.time.now() + limit;
        loop {
            self.pool.run_until_stalled();
            if done() {
                return Ok(());
            }
            let next = self.time.next_deadline().ok_or(Stopped::Deadlock)?;
            if next > end {
                self.time.advance_to(end);
                self.pool.run_until_stalled();
                return if done() {
                    Ok(())
                } else {
                    Err(Stopped::TimeLimit)
                };
            }
            self.time.advance_to(next);
        }
    }

    /// Runs for `d` of simulated time.
    pub fn run_for(&mut self, d: Duration) {
        let _ = self.run_until(d, || false);
    }
}

//! What the producer and consumer tasks of one executor share: the run-wide `Shared`
//! state (atomics only, the one thing shared across cores) and the executor's own
//! `ExecCtx`, and the rule that says when consumers are done.
//!
//! Invariants: nothing here is shared between executors but `Shared`; `ExecCtx` lives
//! on one executor (`Rc`), so its recorder is borrowed, never locked.

use crate::cli::{Config, Mode, Stop};
use crate::stats::{Clock, Recorder};
use corelog_kafka_client::cluster::Cluster;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long e2e consumers keep reading after the producers finish, for messages still
/// in flight; after that, what is missing is missing.
const E2E_DRAIN_GRACE: Duration = Duration::from_secs(10);
/// How many refused produces / fetch errors are printed in full; the rest are counted.
pub const ERRORS_PRINTED_MAX: u32 = 5;

/// Run-wide state shared by all executors. Only atomics.
pub struct Shared {
    pub interrupted: Arc<AtomicBool>,
    pub stop: AtomicBool,
    pub acked: AtomicU64,
    pub consumed: AtomicU64,
    pub producers_running: AtomicUsize,
    pub producers_done_at_us: AtomicU64,
    pub errors_printed: AtomicU32,
}

impl Shared {
    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.interrupted.load(Ordering::Relaxed)
    }

    /// Prints `msg` if fewer than `ERRORS_PRINTED_MAX` errors were printed so far.
    pub fn print_error(&self, msg: impl FnOnce() -> String) {
        let n = self.errors_printed.fetch_add(1, Ordering::Relaxed);
        if n < ERRORS_PRINTED_MAX {
            eprintln!("error: {}", msg());
        } else if n == ERRORS_PRINTED_MAX {
            eprintln!("error: (further errors are counted, not printed)");
        }
    }
}

/// One executor's context, shared by its producer and consumer tasks.
pub struct ExecCtx {
    pub cfg: Arc<Config>,
    pub shared: Arc<Shared>,
    pub cluster: Cluster,
    pub rec: RefCell<Recorder>,
    pub clock: Clock,
    /// Run start: the rate schedule's origin.
    pub start: Instant,
    /// When producers stop (start + warmup + duration), if the run is timed.
    pub deadline: Option<Instant>,
    /// Per partition, the offset consumers start from.
    pub start_offsets: Arc<Vec<i64>>,
}

/// Whether a consumer is done, given the mode and run-wide counts.
pub fn consumers_done(ctx: &ExecCtx) -> bool {
    let s = &ctx.shared;
    if s.should_stop() {
        return true;
    }
    if let Some(d) = ctx.deadline {
        if ctx.cfg.mode == Mode::Consume && Instant::now() >= d {
            return true;
        }
    }
    match ctx.cfg.mode {
        Mode::Consume => match ctx.cfg.stop {
            Stop::Messages(n) => s.consumed.load(Ordering::Relaxed) >= n,
            Stop::Duration(_) => false,
        },
        Mode::E2e => {
            if s.producers_running.load(Ordering::Relaxed) > 0 {
                return false;
            }
            if s.consumed.load(Ordering::Relaxed) >= s.acked.load(Ordering::Relaxed) {
                return true;
            }
            let done_at = s.producers_done_at_us.load(Ordering::Relaxed);
            ctx.clock.now_us() >= done_at + E2E_DRAIN_GRACE.as_micros() as u64
        }
        Mode::Produce => true,
    }
}

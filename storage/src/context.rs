//! What a log is handed by its owner instead of reaching for process-wide state: the wall
//! clock, an observer of what it measures, and the cache of open segment files it shares
//! with the owner's other logs.
//!
//! The engine reads wall time for record timestamps it stamps (`LogAppendTime`), for the
//! `message.timestamp.difference.max.ms` rule and for idempotent producers' last-write
//! times; it never reads the system clock itself, so a test can hand it any clock.
//! Latencies are measured on the monotonic clock (`Instant`) and reported, not kept.

use crate::file_cache::FileCache;
use crate::runtime::Runtime;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock time in milliseconds since the Unix epoch.
pub trait Clock {
    fn now_ms(&self) -> i64;
}

/// The system's wall clock; 0 when it reads before the epoch.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// The simulator's wall clock: its start's plus the simulated time elapsed.
impl Clock for crate::runtime::SimTime {
    fn now_ms(&self) -> i64 {
        crate::runtime::SimTime::now_ms(self)
    }
}

/// A stage of the write path whose latency the engine reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// One flusher round: the direct-I/O write of the pending batches.
    Append,
    /// One group-commit `fdatasync`.
    Fsync,
    /// On a leader, an acks=all batch from its own sync to the high watermark passing
    /// it (the partition layer reports it).
    ReplicationWait,
    /// On a follower, one fetch response's batches from their append to their sync (the
    /// partition layer reports it).
    FollowerAppend,
}

/// Receives the engine's observations. Called on the log's own thread, on the write path:
/// implementations must be cheap and must not block.
pub trait Observer {
    fn stage(&self, stage: Stage, latency: Duration);
    /// An idempotent producer's retry was answered with the offsets it already had.
    fn duplicate_batch(&self);
    /// A leader's append (a producer's batches or a coordinator's records) took
    /// `records` new offsets; duplicates, markers and replicated appends are not told.
    fn appended(&self, records: u64) {
        let _ = records;
    }
    /// The log in `dir` failed for good (a write or sync error): it refuses appends until
    /// it is opened again.
    fn log_failed(&self, dir: &std::path::Path, error: &crate::error::StorageError) {
        let _ = (dir, error);
    }
}

/// Discards every observation.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn stage(&self, _: Stage, _: Duration) {}
    fn duplicate_batch(&self) {}
}

/// The clocks, observer, open-file cache and task spawner every log of one owner shares.
#[derive(Clone)]
pub struct LogContext {
    /// The wall clock.
    pub clock: Rc<dyn Clock>,
    pub observer: Rc<dyn Observer>,
    /// The descriptors of every segment file of the owner's logs (`file_cache`).
    pub files: Rc<FileCache>,
    /// The monotonic clock, sleeps and background tasks (`runtime`).
    pub runtime: Runtime,
}

impl LogContext {
    /// The system clock, no observer and a default-sized file cache (tools and tests).
    pub fn system() -> LogContext {
        LogContext {
            clock: Rc::new(SystemClock),
            observer: Rc::new(NoObserver),
            files: FileCache::new(crate::file_cache::DEFAULT_CAPACITY),
            runtime: Runtime::Glommio,
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

impl std::fmt::Debug for LogContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogContext")
    }
}

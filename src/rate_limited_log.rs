//! A log line that may be written at most once per interval (per shard: each shard
//! keeps its own), with the count of those suppressed since: a connection or login
//! flood must not become a log flood. A leaf module, so that any other may use it.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// At most one warning per interval per shard, with the count of those suppressed: a
/// connection flood must not become a log flood.
pub struct RateLimitedLog {
    interval: Duration,
    last: Cell<Option<Instant>>,
    suppressed: Cell<u64>,
}

impl RateLimitedLog {
    pub fn new(interval: Duration) -> RateLimitedLog {
        RateLimitedLog {
            interval,
            last: Cell::new(None),
            suppressed: Cell::new(0),
        }
    }

    /// `Some(n)` when a line may be written now (`n` lines were suppressed since the
    /// last one); `None` when this one is suppressed.
    pub fn allow(&self, now: Instant) -> Option<u64> {
        match self.last.get() {
            Some(t) if now.saturating_duration_since(t) < self.interval => {
                self.suppressed.set(self.suppressed.get().saturating_add(1));
                None
            }
            _ => {
                self.last.set(Some(now));
                Some(self.suppressed.replace(0))
            }
        }
    }
}

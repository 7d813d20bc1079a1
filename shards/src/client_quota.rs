//! The per-shard usage reports that shards exchange so a client is held to its quota
//! across cores, and the quota overrides of the cluster metadata (re-exported from the
//! controller crate, whose state machine holds them).
//!
//! The broker's `quota` module resolves overrides (Kafka's precedence) and measures
//! rates; this module only holds the data, because the mesh lives here.

pub use corelog_controller::client_quotas::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

/// Which quota a sensor measures: produce or fetch bytes, or request handling time
/// (microseconds, for `request_percentage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKind {
    Produce,
    Fetch,
    Request,
}

impl QuotaKind {
    pub const ALL: [QuotaKind; 3] = [QuotaKind::Produce, QuotaKind::Fetch, QuotaKind::Request];

    pub fn index(self) -> usize {
        match self {
            QuotaKind::Produce => 0,
            QuotaKind::Fetch => 1,
            QuotaKind::Request => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
            QuotaKind::Request => "request",
        }
    }
}

/// One shard's bytes (µs for `Request`) per active sensor in one completed window, sent to
/// every other shard once a window (no reply). `sensor` is the resolved quota entity's
/// sensor name, the same string on every shard.
#[derive(Debug, Clone)]
pub struct UsageReport {
    pub from_shard: usize,
    /// Index of the window (since the process-wide quota epoch) the bytes fell in.
    pub window: u64,
    pub entries: Vec<(QuotaKind, Arc<str>, u64)>,
}

/// Reports received from other shards, waiting for the quota manager's next tick.
/// Bounded: if the manager falls behind, the oldest reports are dropped (a rate
/// measured a little low for a second, never unbounded memory).
pub struct UsageInbox {
    reports: RefCell<VecDeque<Arc<UsageReport>>>,
    capacity: usize,
}

impl UsageInbox {
    pub fn new(shard_count: usize) -> UsageInbox {
        UsageInbox {
            reports: RefCell::new(VecDeque::new()),
            capacity: shard_count.saturating_mul(4).max(4),
        }
    }

    pub fn push(&self, report: Arc<UsageReport>) {
        let mut q = self.reports.borrow_mut();
        while q.len() >= self.capacity {
            q.pop_front();
        }
        q.push_back(report);
    }

    pub fn is_empty(&self) -> bool {
        self.reports.borrow().is_empty()
    }

    pub fn drain(&self) -> Vec<Arc<UsageReport>> {
        self.reports.borrow_mut().drain(..).collect()
    }
}

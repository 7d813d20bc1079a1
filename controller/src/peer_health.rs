//! What an operator reads of a controller peer's reachability: its loss once, then at
//! most once per `repeat_after` while it lasts (with how long and how many calls failed),
//! and its return once. openraft itself would log every failed call (every 500 ms per
//! unreachable peer); the broker's log filter drops those, and these reports stand in.
//!
//! `Reachability` decides what to report from the calls' outcomes and the time it is
//! given, so tests drive it without a clock; `PeerHealth` shares one among all of a
//! node's peer clients (openraft makes one client per replication stream and per
//! election) and writes its reports to the log.
//!
//! Invariants: a peer is in `down` exactly while its last call failed; every loss is
//! followed by exactly one return report if the peer is reached again; repeats of one
//! loss are at least `repeat_after` apart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type NodeId = u64;

/// How often a peer that stays unreachable is reported again, by default.
pub const REPORT_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// One line for the operator about one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The first failed call after the peer was reachable (or never tried).
    Lost,
    /// The peer is still unreachable, `down` after it was lost.
    StillDown { down: Duration, failed_calls: u64 },
    /// A call succeeded after `down` of failures.
    Back { down: Duration, failed_calls: u64 },
}

struct PeerDown {
    since: Instant,
    reported: Instant,
    failed_calls: u64,
}

/// The peers whose last call failed, and when each was last reported.
pub struct Reachability {
    repeat_after: Duration,
    down: HashMap<NodeId, PeerDown>,
}

impl Reachability {
    pub fn new(repeat_after: Duration) -> Reachability {
        Reachability {
            repeat_after,
            down: HashMap::new(),
        }
    }

    /// A call to `peer` failed at `now`: what to report, if anything.
    pub fn call_failed(&mut self, peer: NodeId, now: Instant) -> Option<Report> {
        match self.down.get_mut(&peer) {
            None => {
                self.down.insert(
                    peer,
                    PeerDown {
                        since: now,
                        reported: now,
                        failed_calls: 1,
                    },
                );
                Some(Report::Lost)
            }
            Some(d) => {
                d.failed_calls += 1;
                if now.saturating_duration_since(d.reported) < self.repeat_after {
                    return None;
                }
                d.reported = now;
                Some(Report::StillDown {
                    down: now.saturating_duration_since(d.since),
                    failed_calls: d.failed_calls,
                })
            }
        }
    }

    /// A call to `peer` succeeded at `now`: a report if it had been lost.
    pub fn call_succeeded(&mut self, peer: NodeId, now: Instant) -> Option<Report> {
        self.down.remove(&peer).map(|d| Report::Back {
            down: now.saturating_duration_since(d.since),
            failed_calls: d.failed_calls,
        })
    }
}

/// One `Reachability` shared by a node's peer clients, reporting to the log.
#[derive(Clone)]
pub struct PeerHealth(Arc<Mutex<Reachability>>);

impl Default for PeerHealth {
    fn default() -> PeerHealth {
        PeerHealth::reporting_every(REPORT_AGAIN_AFTER)
    }
}

impl PeerHealth {
    pub fn reporting_every(repeat_after: Duration) -> PeerHealth {
        PeerHealth(Arc::new(Mutex::new(Reachability::new(repeat_after))))
    }

    pub fn down(&self, peer: NodeId, addr: &str, error: &dyn std::fmt::Display) {
        let report = self.lock().call_failed(peer, Instant::now());
        match report {
            Some(Report::Lost) => {
                tracing::warn!(peer, addr, error = %error, "controller peer is unreachable")
            }
            Some(Report::StillDown { down, failed_calls }) => tracing::warn!(
                peer,
                addr,
                down_s = down.as_secs(),
                failed_calls,
                error = %error,
                "controller peer is still unreachable"
            ),
            Some(Report::Back { .. }) | None => {}
        }
    }

    pub fn up(&self, peer: NodeId, addr: &str) {
        let report = self.lock().call_succeeded(peer, Instant::now());
        if let Some(Report::Back { down, failed_calls }) = report {
            tracing::info!(
                peer,
                addr,
                down_ms = down.as_millis() as u64,
                failed_calls,
                "controller peer is reachable again"
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reachability> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);
    const HALF_SECOND: Duration = Duration::from_millis(500);

    #[test]
    fn a_lost_peer_is_reported_once_then_once_a_minute_with_how_long() {
        let mut r = Reachability::new(MINUTE);
        let t0 = Instant::now();
        assert_eq!(r.call_failed(2, t0), Some(Report::Lost));
        // openraft retries every 500 ms: 119 more failures within the first minute.
        let mut reports = Vec::new();
        for i in 1..=300u32 {
            if let Some(rep) = r.call_failed(2, t0 + HALF_SECOND * i) {
                reports.push((i, rep));
            }
        }
        // 150 s of failures: reported again at 60 s and 120 s, and at no other time.
        assert_eq!(
            reports,
            vec![
                (
                    120,
                    Report::StillDown {
                        down: MINUTE,
                        failed_calls: 121
                    }
                ),
                (
                    240,
                    Report::StillDown {
                        down: 2 * MINUTE,
                        failed_calls: 241
                    }
                ),
            ]
        );
    }

    #[test]
    fn a_return_is_reported_once_and_a_new_loss_starts_over() {
        let mut r = Reachability::new(MINUTE);
        let t0 = Instant::now();
        assert_eq!(r.call_succeeded(3, t0), None, "never lost: nothing to say");
        r.call_failed(3, t0);
        r.call_failed(3, t0 + HALF_SECOND);
        assert_eq!(
            r.call_succeeded(3, t0 + 4 * HALF_SECOND),
            Some(Report::Back {
                down: 4 * HALF_SECOND,
                failed_calls: 2
            })
        );
        assert_eq!(r.call_succeeded(3, t0 + 5 * HALF_SECOND), None);
        assert_eq!(r.call_failed(3, t0 + 6 * HALF_SECOND), Some(Report::Lost));
    }

    #[test]
    fn peers_are_reported_independently() {
        let mut r = Reachability::new(MINUTE);
        let t0 = Instant::now();
        assert_eq!(r.call_failed(1, t0), Some(Report::Lost));
        assert_eq!(r.call_failed(2, t0 + MINUTE / 2), Some(Report::Lost));
        assert!(matches!(
            r.call_failed(1, t0 + MINUTE),
            Some(Report::StillDown { .. })
        ));
        assert_eq!(r.call_failed(2, t0 + MINUTE), None, "peer 2 lost 30 s ago");
        assert!(r.call_succeeded(2, t0 + MINUTE).is_some());
        assert_eq!(r.call_failed(1, t0 + MINUTE + HALF_SECOND), None);
    }

    #[test]
    fn the_repeat_interval_is_the_one_given() {
        let mut r = Reachability::new(Duration::from_secs(5));
        let t0 = Instant::now();
        r.call_failed(4, t0);
        assert_eq!(r.call_failed(4, t0 + Duration::from_millis(4_999)), None);
        assert!(matches!(
            r.call_failed(4, t0 + Duration::from_secs(5)),
            Some(Report::StillDown {
                failed_calls: 3,
                ..
            })
        ));
    }
}

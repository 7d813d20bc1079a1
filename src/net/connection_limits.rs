//! Broker-wide connection limits: the total (Kafka's `max.connections`) and per client
//! IP (`max.connections.per.ip`, `max.connections.per.ip.overrides`).
//!
//! Connections arrive on every shard (SO_REUSEPORT), so the counts are process-wide and
//! this is the one structure shared by all shards' acceptors (`Arc`). It is touched only
//! when a connection is accepted or closed, never per request.
//!
//! - **Total**: one `AtomicUsize`, taken with a compare-and-swap that never goes past the
//!   limit. An acceptor that finds no free slot holds the socket it just accepted (at
//!   most one per shard) and stops accepting until a slot frees; further clients wait in
//!   the kernel's listen backlog — "the connection waits", as in Kafka, whose acceptor
//!   blocks in `ConnectionQuotas.inc` the same way. A close wakes waiting acceptors
//!   through a cross-thread `Event`; a short timer is the backstop.
//! - **Per IP**: a `Mutex<HashMap<IpAddr, usize>>`, only when a per-IP limit or an
//!   override is configured (by default there is none and the mutex is never built).
//!   Why a lock and not per-shard budgets: the kernel spreads one IP's connections over
//!   shards by a hash of the 4-tuple, so a split budget would refuse an IP long before it
//!   reached its limit, or need cross-shard borrowing that is a lock in disguise. The
//!   critical section is a map lookup, taken once at accept and once at close: not the
//!   request path. An IP over its limit is accepted and closed at once (Kafka does the
//!   same: its `TooManyConnectionsException` closes the new socket).
//!
//! Invariants: `open <= total_max` at every instant (the CAS never exceeds it); the map
//! holds exactly the IPs with at least one counted connection (entries at zero are
//! removed, so the map is bounded by the open connections); every count taken is given
//! back exactly once, by the permit's `Drop`.
//!
//! Defaults (see `default_max_connections`): the total is half the process's
//! RLIMIT_NOFILE (raised to its hard limit at start-up, `kernel.rs`), leaving the other
//! half for partition logs (three files per segment), the listeners and io_uring; so a
//! flood of clients cannot exhaust descriptors the logs need. Per IP is unlimited, as in
//! Kafka: a sensible per-IP value depends on how many clients share an address (NAT,
//! proxies), which only the operator knows.
//!
//! Not here: idle-connection reaping (Kafka's `connections.max.idle.ms`) and rate limits
//! on new connections (`max.connection.creation.rate`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::limits::ConnectionLimitsConfig;
use crate::limits::MAX_CONNECTIONS_MIN;

/// How often an acceptor waiting for a slot looks again even without a wake-up (the
/// cross-thread `Event` normally wakes it at once).
const SLOT_RECHECK_MS: u64 = 20;

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{ip} already has {limit} connections (max.connections.per.ip)")]
pub struct PerIpExceeded {
    pub ip: IpAddr,
    pub limit: usize,
}

pub struct ConnectionLimits {
    total_max: usize,
    open: AtomicUsize,
    slot_freed: event_listener::Event,
    per_ip: Option<PerIp>,
}

struct PerIp {
    default_max: Option<usize>,
    overrides: HashMap<IpAddr, usize>,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerIp {
    fn limit_of(&self, ip: &IpAddr) -> Option<usize> {
        self.overrides.get(ip).copied().or(self.default_max)
    }
}

impl ConnectionLimits {
    pub fn new(config: &ConnectionLimitsConfig) -> Arc<ConnectionLimits> {
        assert!(config.total_max >= MAX_CONNECTIONS_MIN);
        let per_ip =
            (config.per_ip_max.is_some() || !config.per_ip_overrides.is_empty()).then(|| PerIp {
                default_max: config.per_ip_max,
                overrides: config.per_ip_overrides.clone(),
                open: Mutex::new(HashMap::new()),
            });
        Arc::new(ConnectionLimits {
            total_max: config.total_max,
            open: AtomicUsize::new(0),
            slot_freed: event_listener::Event::new(),
            per_ip,
        })
    }

    pub fn total_max(&self) -> usize {
        self.total_max
    }

    /// Connections holding a slot of the total now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Counts one more connection from `ip`, or refuses it if `ip` is at its limit.
    pub fn admit_ip(self: &Arc<Self>, ip: IpAddr) -> Result<IpPermit, PerIpExceeded> {
        let Some(per_ip) = &self.per_ip else {
            return Ok(IpPermit {
                limits: self.clone(),
                ip: None,
            });
        };
        let Some(limit) = per_ip.limit_of(&ip) else {
            // Unlimited for this IP (no default, no override): not counted.
            return Ok(IpPermit {
                limits: self.clone(),
                ip: None,
            });
        };
        // A poisoned lock means a panic elsewhere while counting; the counts themselves
        // are still consistent (each update is one statement), so go on with them.
        let mut open = per_ip.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= limit {
            if *n == 0 {
                open.remove(&ip);
            }
            return Err(PerIpExceeded { ip, limit });
        }
        *n += 1;
        debug_assert!(*n <= limit);
        Ok(IpPermit {
            limits: self.clone(),
            ip: Some(ip),
        })
    }

    /// Takes a slot of the total if one is free.
    pub fn try_acquire(self: &Arc<Self>) -> Option<TotalPermit> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.total_max).then_some(n + 1)
            })
            .ok()
            .map(|_| TotalPermit {
                limits: self.clone(),
            })
    }

    /// Waits until a slot of the total is free and takes it. Cancel-safe: dropping the
    /// future takes nothing.
    pub async fn acquire(self: &Arc<Self>) -> TotalPermit {
        loop {
            // Listen before trying, so a release between the try and the wait is seen.
            let freed = self.slot_freed.listen();
            if let Some(p) = self.try_acquire() {
                return p;
            }
            futures_lite::future::or(
                freed,
                glommio::timer::sleep(Duration::from_millis(SLOT_RECHECK_MS)),
            )
            .await;
        }
    }

    fn release_total(&self) {
        let before = self.open.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a total slot given back twice");
        self.slot_freed.notify(usize::MAX);
    }

    fn release_ip(&self, ip: IpAddr) {
        let Some(per_ip) = &self.per_ip else {
            unreachable!("an IP was counted without per-IP limits");
        };
        let mut open = per_ip.open.lock().unwrap_or_else(|p| p.into_inner());
        match open.get_mut(&ip) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                open.remove(&ip);
            }
            None => panic!("connection count of {ip} given back twice"),
        }
    }

    #[cfg(test)]
    fn ip_count(&self, ip: IpAddr) -> usize {
        self.per_ip
            .as_ref()
            .and_then(|p| p.open.lock().ok()?.get(&ip).copied())
            .unwrap_or(0)
    }
}

/// One connection's place in its IP's count; given back when dropped.
pub struct IpPermit {
    limits: Arc<ConnectionLimits>,
    /// `None` when this IP is not counted (no limit applies to it).
    ip: Option<IpAddr>,
}

impl Drop for IpPermit {
    fn drop(&mut self) {
        if let Some(ip) = self.ip {
            self.limits.release_ip(ip);
        }
    }
}

/// One connection's slot of the broker-wide total; given back when dropped.
pub struct TotalPermit {
    limits: Arc<ConnectionLimits>,
}

impl Drop for TotalPermit {
    fn drop(&mut self) {
        self.limits.release_total();
    }
}

pub use crate::rate_limited_log::RateLimitedLog;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::parse_overrides;
    use corelog_storage::test_executor::run;
    use std::time::Instant;

    fn limits(total: usize, per_ip: Option<usize>, overrides: &str) -> Arc<ConnectionLimits> {
        ConnectionLimits::new(&ConnectionLimitsConfig {
            total_max: total,
            per_ip_max: per_ip,
            per_ip_overrides: parse_overrides(overrides).expect("overrides parse"),
        })
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn total_never_exceeds_the_limit_and_slots_come_back() {
        let l = limits(3, None, "");
        let held: Vec<_> = (0..3).map(|_| l.try_acquire().expect("slot")).collect();
        assert_eq!(l.open(), 3);
        assert!(l.try_acquire().is_none());
        assert_eq!(l.open(), 3, "a refused try takes nothing");
        drop(held);
        assert_eq!(l.open(), 0);
        assert!(l.try_acquire().is_some());
        assert_eq!(l.open(), 0, "the permit was dropped at once");
    }

    #[test]
    fn total_is_shared_across_threads() {
        let l = limits(100, None, "");
        let taken: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let l = l.clone();
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        while let Some(p) = l.try_acquire() {
                            mine.push(p);
                        }
                        let n = mine.len();
                        std::mem::forget(mine); // keep the slots counted
                        n
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("join")).sum()
        });
        assert_eq!(taken, 100);
        assert_eq!(l.open(), 100);
    }

    #[test]
    fn acquire_waits_for_a_release() {
        run(|| async {
            let l = limits(1, None, "");
            let first = l.try_acquire().expect("slot");
            let l2 = l.clone();
            let waiter = glommio::spawn_local(async move { l2.acquire().await });
            glommio::timer::sleep(Duration::from_millis(5)).await;
            assert_eq!(l.open(), 1);
            drop(first);
            let second = waiter.await;
            assert_eq!(l.open(), 1);
            drop(second);
            assert_eq!(l.open(), 0);
        });
    }

    #[test]
    fn per_ip_limit_with_override() {
        let l = limits(100, Some(2), "127.0.0.2:4, ::1:0");
        let a = ip("127.0.0.1");
        let b = ip("127.0.0.2");
        let p1 = l.admit_ip(a).expect("1st");
        let _p2 = l.admit_ip(a).expect("2nd");
        assert_eq!(l.admit_ip(a).err(), Some(PerIpExceeded { ip: a, limit: 2 }));
        let bs: Vec<_> = (0..4).map(|_| l.admit_ip(b).expect("override")).collect();
        assert!(l.admit_ip(b).is_err());
        assert!(
            l.admit_ip(ip("::1")).is_err(),
            "an override of 0 refuses all"
        );
        assert_eq!(l.ip_count(ip("::1")), 0, "refusals leave no entry");
        drop(p1);
        assert_eq!(l.ip_count(a), 1);
        assert!(l.admit_ip(a).is_ok());
        drop(bs);
        assert_eq!(l.ip_count(b), 0, "entries at zero are removed");
    }

    #[test]
    fn per_ip_unlimited_by_default_is_not_counted() {
        let l = limits(10, None, "10.0.0.1:1");
        let held: Vec<_> = (0..50)
            .map(|_| l.admit_ip(ip("10.0.0.2")).expect("ok"))
            .collect();
        assert_eq!(l.ip_count(ip("10.0.0.2")), 0);
        assert!(l.admit_ip(ip("10.0.0.1")).is_ok());
        drop(held);
        let none = limits(10, None, "");
        assert!(
            none.per_ip.is_none(),
            "no per-IP state without a per-IP limit"
        );
    }

    #[test]
    fn overrides_parse() {
        let o = parse_overrides("127.0.0.1:5,[::1]:7 , fe80::1:2").expect("parse");
        assert_eq!(o.get(&ip("127.0.0.1")), Some(&5));
        assert_eq!(o.get(&ip("::1")), Some(&7));
        assert_eq!(o.get(&ip("fe80::1")), Some(&2));
        assert!(parse_overrides("").expect("empty").is_empty());
        assert!(parse_overrides("localhost:5").is_err());
        assert!(parse_overrides("127.0.0.1").is_err());
        assert!(parse_overrides("127.0.0.1:-1").is_err());
        assert!(parse_overrides("127.0.0.1:1,127.0.0.1:2").is_err());
    }

    #[test]
    fn rate_limited_log_counts_suppressed_lines() {
        let log = RateLimitedLog::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(log.allow(t0), Some(0));
        for _ in 0..100 {
            assert_eq!(log.allow(t0 + Duration::from_millis(10)), None);
        }
        assert_eq!(log.allow(t0 + Duration::from_secs(2)), Some(100));
    }
}

//! Replication throttles (Kafka's KIP-73): a byte rate per broker for the replication of
//! the replicas a topic names, so that moving a partition leaves producers and in-sync
//! followers alone.
//!
//! - `leader.replication.throttled.rate` / `follower.replication.throttled.rate`: dynamic
//!   broker configs (this broker's layer, else the cluster-wide default; unset or
//!   `Long.MAX_VALUE`: no throttle), in bytes per second.
//! - `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`:
//!   topic configs, `*` or `partition:broker,…`. The leader list names the brokers that
//!   throttle what they send as leader of that partition; the follower list, the brokers
//!   that throttle what they fetch as its follower (`kafka-reassign-partitions
//!   --throttle` puts the current replicas in the first and the new ones in the second).
//!
//! Kafka's rule, kept here: the bytes of every replica named are counted, but only a
//! replica outside the ISR is ever held back — an in-sync follower is never slowed, so
//! acks=all produce latency does not depend on the throttle. A leader holds a partition
//! back by answering it with its position and no records; a follower, by leaving it out
//! of its next fetch.
//!
//! `replica.alter.log.dirs.io.max.bytes.per.second` (dynamic broker config, the same
//! layers) paces the copies of AlterReplicaLogDirs, moving replicas between this
//! broker's own log directories (`dir_copy`), with a bucket of its own.
//!
//! One token bucket per direction for the whole broker, shared by its shards: tokens
//! refill at the rate, up to one second's worth; a replica is held back while the
//! bucket is in debt, and otherwise reads at most what the bucket holds. Only throttled
//! replication touches it (a mutex taken once per partition per fetch, never per
//! record), so the shared-nothing hot path is not involved. A read may still overshoot
//! by one batch (a fetch always returns a whole one) or by reads that run at once; the
//! debt is paid back before the next, so the long-run rate is the configured one.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const LEADER_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
pub const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
pub const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";
pub const LOG_DIR_MOVE_RATE: &str = "replica.alter.log.dirs.io.max.bytes.per.second";

/// Kafka's default rate: `Long.MAX_VALUE`, no throttle.
pub const UNLIMITED: i64 = i64::MAX;

/// Which end of replication a throttle holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// What this broker sends, as leader, to followers outside the ISR.
    Leader,
    /// What this broker fetches, as a follower outside the ISR.
    Follower,
}

impl Side {
    pub fn rate_key(self) -> &'static str {
        match self {
            Side::Leader => LEADER_RATE,
            Side::Follower => FOLLOWER_RATE,
        }
    }

    pub fn replicas_key(self) -> &'static str {
        match self {
            Side::Leader => LEADER_REPLICAS,
            Side::Follower => FOLLOWER_REPLICAS,
        }
    }

    fn index(self) -> usize {
        match self {
            Side::Leader => 0,
            Side::Follower => 1,
        }
    }
}

/// A throttled-replicas list in its stored form (items trimmed, `*` alone), or why the
/// value is not one (Kafka's `ThrottledReplicaListValidator` wording).
pub fn normalize_replicas(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value == "*" || value.is_empty() {
        return Ok(value.to_string());
    }
    let mut items = Vec::new();
    for item in value.split(',').map(str::trim) {
        let ok = item.split_once(':').is_some_and(|(p, b)| {
            p.trim().parse::<i32>().is_ok_and(|p| p >= 0)
                && b.trim().parse::<i32>().is_ok_and(|b| b >= 0)
        });
        if !ok {
            return Err(
                "must be the literal '*' or a list of replicas in the following format: \
                 [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                    .into(),
            );
        }
        let (p, b) = item.split_once(':').expect("checked above");
        items.push(format!("{}:{}", p.trim(), b.trim()));
    }
    Ok(items.join(","))
}

/// Whether a stored throttled-replicas list names replica `broker` of `partition`.
/// Walks the string: no allocation.
pub fn names(list: &str, partition: i32, broker: i32) -> bool {
    if list == "*" {
        return true;
    }
    list.split(',').any(|item| {
        item.split_once(':').is_some_and(|(p, b)| {
            p.parse::<i32>() == Ok(partition) && b.parse::<i32>() == Ok(broker)
        })
    })
}

/// The dynamic broker layers of the cluster metadata: "" (every broker) and node ids.
pub type BrokerLayers = BTreeMap<String, BTreeMap<String, String>>;

/// The rate of `side` in force on node `node_id`: this node's dynamic layer, else the
/// cluster-wide one; `None` when unset or unlimited.
pub fn configured_rate(layers: &BrokerLayers, node_id: i32, side: Side) -> Option<u64> {
    configured_rate_of(layers, node_id, side.rate_key())
}

/// The rate broker config `key` sets on node `node_id`: this node's dynamic layer, else
/// the cluster-wide one; `None` when unset or unlimited.
pub fn configured_rate_of(layers: &BrokerLayers, node_id: i32, key: &str) -> Option<u64> {
    let node = layers
        .iter()
        .find(|(name, _)| name.parse::<i32>() == Ok(node_id))
        .and_then(|(_, layer)| layer.get(key));
    let value = node.or_else(|| layers.get("").and_then(|l| l.get(key)))?;
    match value.trim().parse::<i64>() {
        Ok(v) if (0..UNLIMITED).contains(&v) => Some(v as u64),
        _ => None,
    }
}

/// A token bucket: `tokens` refill at `rate` bytes per second up to one second's worth;
/// recorded bytes take them, into debt if need be.
#[derive(Debug)]
struct Bucket {
    rate: u64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Brings the bucket to `now` under `rate` (a changed rate starts full).
    fn refill(&mut self, rate: u64, now: Instant) {
        if rate != self.rate {
            self.rate = rate;
            self.tokens = rate as f64;
            self.last = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate as f64).min(rate as f64);
        self.last = now;
    }
}

/// The broker's two buckets, shared by its shards (see the module doc).
#[derive(Debug)]
pub struct ReplicationThrottles {
    /// Leader, follower, and log directory moves.
    buckets: [Mutex<Bucket>; 3],
}

impl Default for ReplicationThrottles {
    fn default() -> Self {
        let bucket = || {
            Mutex::new(Bucket {
                rate: 0,
                tokens: 0.0,
                last: Instant::now(),
            })
        };
        ReplicationThrottles {
            buckets: [bucket(), bucket(), bucket()],
        }
    }
}

impl ReplicationThrottles {
    fn with<T>(&self, side: Side, rate: u64, now: Instant, f: impl FnOnce(&mut Bucket) -> T) -> T {
        self.with_bucket(side.index(), rate, now, f)
    }

    fn with_bucket<T>(
        &self,
        index: usize,
        rate: u64,
        now: Instant,
        f: impl FnOnce(&mut Bucket) -> T,
    ) -> T {
        // A poisoned lock only means another shard panicked mid-update of two numbers.
        let mut b = self.buckets[index]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        b.refill(rate, now);
        f(&mut b)
    }

    /// What a replica outside the ISR may move now: `Ok` with the bytes the bucket holds
    /// (at least 1: a read still returns one whole batch), or `Err` with how long to
    /// wait while it is in debt (at most a second, after which it asks again).
    pub fn allowance(&self, side: Side, rate: u64, now: Instant) -> Result<usize, Duration> {
        self.with(side, rate, now, |b| {
            if b.tokens >= 0.0 {
                Ok((b.tokens as usize).max(1))
            } else if rate == 0 {
                Err(Duration::from_secs(1))
            } else {
                Err(Duration::from_secs_f64((-b.tokens / rate as f64).min(1.0)))
            }
        })
    }

    /// How long a replica outside the ISR waits before it may move again: zero unless
    /// the bucket is in debt.
    pub fn held_for(&self, side: Side, rate: u64, now: Instant) -> Duration {
        self.allowance(side, rate, now)
            .err()
            .unwrap_or(Duration::ZERO)
    }

    /// Counts `bytes` a log directory move wrote under `rate`; returns how long the mover
    /// waits before it writes more (the debt, at `rate`).
    pub fn log_dir_move(&self, rate: u64, bytes: u64, now: Instant) -> Duration {
        self.with_bucket(2, rate, now, |b| {
            b.tokens -= bytes as f64;
            if b.tokens >= 0.0 {
                Duration::ZERO
            } else if rate == 0 {
                Duration::from_secs(1)
            } else {
                Duration::from_secs_f64(-b.tokens / rate as f64)
            }
        })
    }

    /// Counts `bytes` of throttled replication.
    pub fn record(&self, side: Side, rate: u64, bytes: usize, now: Instant) {
        if bytes == 0 {
            return;
        }
        // Debt is not capped: a read larger than the bucket is paid back in full, or
        // fetches of a partition's maximum would beat any smaller rate.
        self.with(side, rate, now, |b| b.tokens -= bytes as f64);
    }
}

/// Whether `side`'s throttle counts replica `broker` of `partition` of a topic whose
/// configs are `configs`, on a broker whose rate is `rate`: the rate when it does.
pub fn applies(
    rate: Option<u64>,
    configs: Option<&BTreeMap<String, String>>,
    side: Side,
    partition: i32,
    broker: i32,
) -> Option<u64> {
    let rate = rate?;
    let list = configs?.get(side.replicas_key())?;
    names(list, partition, broker).then_some(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_star_or_partition_broker_pairs() {
        assert_eq!(normalize_replicas(" * ").expect("valid"), "*");
        assert_eq!(normalize_replicas("").expect("valid"), "");
        assert_eq!(normalize_replicas("0:1, 1 : 2").expect("valid"), "0:1,1:2");
        for bad in ["x", "0:", ":1", "0:1,*", "-1:2", "0:1:2", "0;1"] {
            assert!(normalize_replicas(bad).is_err(), "{bad}");
        }
        assert!(names("*", 7, 3));
        assert!(names("0:1,7:3", 7, 3));
        assert!(!names("0:1,7:3", 7, 1));
        assert!(!names("", 0, 0));
    }

    #[test]
    fn a_bucket_in_debt_holds_replicas_back_until_it_refills() {
        let t = ReplicationThrottles::default();
        let start = Instant::now();
        let rate = 1000;
        assert_eq!(t.allowance(Side::Leader, rate, start), Ok(1000));
        t.record(Side::Leader, rate, 1500, start);
        let held = t.held_for(Side::Leader, rate, start);
        assert!(held > Duration::from_millis(400) && held <= Duration::from_millis(500));
        // The other direction has its own bucket.
        assert_eq!(t.held_for(Side::Follower, rate, start), Duration::ZERO);
        let later = start + Duration::from_millis(600);
        assert_eq!(t.held_for(Side::Leader, rate, later), Duration::ZERO);
        // A read far larger than the bucket is paid back in full, waited for at most a
        // second at a time.
        t.record(Side::Leader, rate, 3_000, later);
        assert_eq!(
            t.held_for(Side::Leader, rate, later),
            Duration::from_secs(1)
        );
        let paid = later + Duration::from_millis(2100);
        assert!(t.held_for(Side::Leader, rate, paid) > Duration::ZERO);
        let paid = later + Duration::from_millis(3100);
        assert_eq!(t.held_for(Side::Leader, rate, paid), Duration::ZERO);
        let later = paid;
        // Tokens never pile up past one second.
        let much_later = later + Duration::from_secs(60);
        t.record(Side::Leader, rate, 1001, much_later);
        assert!(t.held_for(Side::Leader, rate, much_later) > Duration::ZERO);
    }
}

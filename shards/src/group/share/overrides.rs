//! A share group's own configs (Kafka 4's GROUP config resource, KIP-932): each
//! overrides one of the broker's `group.share.*` settings for one share group.
//! `share.session.timeout.ms` and `share.heartbeat.interval.ms` are the coordinator's
//! (`group::coordinator::share`); the others are the partition leaders'
//! (`share::leader`): `share.record.lock.duration.ms`, `share.delivery.count.limit`,
//! `share.partition.max.record.locks`, `share.isolation.level`,
//! `share.auto.offset.reset` and `share.renew.acknowledge.enable`.
//!
//! The bounds are the broker's `group.share.min.*` and `group.share.max.*`
//! (`ShareGroupConfig::bounds`).
//!
//! Invariants (checked by [`check`] and [`check_layer`] before anything is stored):
//! every stored value parses and lies within its bounds, and the heartbeat interval the
//! group gets stays below its session timeout; [`membership`] and [`delivery`] therefore
//! apply every stored value as it is.

use super::group::ShareGroupConfig;
use super::reset::{AutoOffsetReset, AUTO_OFFSET_RESET};
use std::collections::BTreeMap;

pub const SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
pub const HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
pub const RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const DELIVERY_COUNT_LIMIT: &str = "share.delivery.count.limit";
pub const PARTITION_MAX_RECORD_LOCKS: &str = "share.partition.max.record.locks";
pub const ISOLATION_LEVEL: &str = "share.isolation.level";
pub const RENEW_ACKNOWLEDGE_ENABLE: &str = "share.renew.acknowledge.enable";

/// Every share group config.
pub const KEYS: &[&str] = &[
    SESSION_TIMEOUT_MS,
    HEARTBEAT_INTERVAL_MS,
    RECORD_LOCK_DURATION_MS,
    DELIVERY_COUNT_LIMIT,
    PARTITION_MAX_RECORD_LOCKS,
    ISOLATION_LEVEL,
    AUTO_OFFSET_RESET,
    RENEW_ACKNOWLEDGE_ENABLE,
];

/// How a share group's partitions are delivered: the broker's settings, or one group's
/// with its configs applied ([`delivery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// `share.record.lock.duration.ms`.
    pub record_lock_duration_ms: i64,
    /// `share.delivery.count.limit`.
    pub delivery_count_limit: u16,
    /// `share.partition.max.record.locks`.
    pub partition_max_record_locks: i64,
    /// `share.isolation.level=read_committed`: records up to the last stable offset,
    /// aborted transactions' records never delivered.
    pub read_committed: bool,
    /// `share.auto.offset.reset`.
    pub auto_offset_reset: AutoOffsetReset,
    /// `share.renew.acknowledge.enable`: whether RENEW acknowledgements (KIP-1222) are
    /// taken.
    pub renew_enabled: bool,
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery {
            record_lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            partition_max_record_locks: 2_000,
            read_committed: false,
            auto_offset_reset: AutoOffsetReset::Latest,
            renew_enabled: true,
        }
    }
}

/// The broker's share-group settings a group's configs override.
#[derive(Debug, Clone, Copy)]
pub struct ShareDefaults<'a> {
    pub group: &'a ShareGroupConfig,
    pub delivery: Delivery,
}

/// Whether `key` names a share group config (refused as unknown otherwise).
pub fn is_share_key(key: &str) -> bool {
    key.starts_with("share.")
}

/// Checks one share group config against the broker's settings, returning the value
/// as it is stored, or why it is refused (INVALID_CONFIG at the edge).
pub fn check(key: &str, value: &str, broker: &ShareDefaults<'_>) -> Result<String, String> {
    let v = value.trim();
    match key {
        AUTO_OFFSET_RESET => {
            AutoOffsetReset::parse(v)?;
            Ok(v.to_string())
        }
        ISOLATION_LEVEL => match v {
            "read_committed" | "read_uncommitted" => Ok(v.to_string()),
            _ => Err(format!(
                "{key} must be read_committed or read_uncommitted, not {value:?}"
            )),
        },
        RENEW_ACKNOWLEDGE_ENABLE => match v.to_ascii_lowercase().as_str() {
            b @ ("true" | "false") => Ok(b.to_string()),
            _ => Err(format!("{key} must be true or false, not {value:?}")),
        },
        _ => {
            let (min, max, min_name, max_name) = bounds(key, broker)?;
            let n: i64 = v
                .parse()
                .ok()
                .filter(|n| i32::try_from(*n).is_ok())
                .ok_or_else(|| format!("{key} must be an integer, not {value:?}"))?;
            if n < min {
                return Err(format!("{key} must be at least {min_name} ({min})"));
            }
            if n > max {
                return Err(format!("{key} must be at most {max_name} ({max})"));
            }
            Ok(n.to_string())
        }
    }
}

/// Checks a whole layer of group configs: the heartbeat interval the group would get
/// stays below its session timeout.
pub fn check_layer(
    layer: &BTreeMap<String, String>,
    broker: &ShareDefaults<'_>,
) -> Result<(), String> {
    let m = membership(broker.group, layer);
    if m.heartbeat_interval_ms >= m.session_timeout_ms {
        return Err(format!(
            "{HEARTBEAT_INTERVAL_MS} ({}) must be below {SESSION_TIMEOUT_MS} ({})",
            m.heartbeat_interval_ms, m.session_timeout_ms
        ));
    }
    Ok(())
}

/// The coordinator's settings for one share group: the broker's with the group's
/// session timeout and heartbeat interval applied.
pub fn membership(broker: &ShareGroupConfig, layer: &BTreeMap<String, String>) -> ShareGroupConfig {
    let get = |key: &str| layer.get(key).and_then(|v| v.parse::<i32>().ok());
    let mut c = broker.clone();
    if let Some(v) = get(SESSION_TIMEOUT_MS) {
        c.session_timeout_ms = v;
    }
    if let Some(v) = get(HEARTBEAT_INTERVAL_MS) {
        c.heartbeat_interval_ms = v;
    }
    c
}

/// The partition leaders' settings for one share group: the broker's with the group's
/// configs applied.
pub fn delivery(broker: Delivery, layer: &BTreeMap<String, String>) -> Delivery {
    let int = |key: &str| layer.get(key).and_then(|v| v.parse::<i64>().ok());
    let mut d = broker;
    if let Some(v) = int(RECORD_LOCK_DURATION_MS) {
        d.record_lock_duration_ms = v;
    }
    if let Some(v) = int(DELIVERY_COUNT_LIMIT).and_then(|v| u16::try_from(v).ok()) {
        d.delivery_count_limit = v;
    }
    if let Some(v) = int(PARTITION_MAX_RECORD_LOCKS) {
        d.partition_max_record_locks = v;
    }
    if let Some(v) = layer.get(ISOLATION_LEVEL) {
        d.read_committed = v == "read_committed";
    }
    if let Some(v) = layer
        .get(AUTO_OFFSET_RESET)
        .and_then(|v| AutoOffsetReset::parse(v).ok())
    {
        d.auto_offset_reset = v;
    }
    if let Some(v) = layer.get(RENEW_ACKNOWLEDGE_ENABLE) {
        d.renew_enabled = v == "true";
    }
    d
}

/// A numeric key's bounds and the broker settings that name them.
fn bounds(
    key: &str,
    broker: &ShareDefaults<'_>,
) -> Result<(i64, i64, &'static str, &'static str), String> {
    let b = &broker.group.bounds;
    let ((min, max), min_name, max_name) = match key {
        SESSION_TIMEOUT_MS => (
            b.session_timeout_ms,
            "group.share.min.session.timeout.ms",
            "group.share.max.session.timeout.ms",
        ),
        HEARTBEAT_INTERVAL_MS => (
            b.heartbeat_interval_ms,
            "group.share.min.heartbeat.interval.ms",
            "group.share.max.heartbeat.interval.ms",
        ),
        RECORD_LOCK_DURATION_MS => (
            b.record_lock_duration_ms,
            "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms",
        ),
        DELIVERY_COUNT_LIMIT => (
            b.delivery_count_limit,
            "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit",
        ),
        PARTITION_MAX_RECORD_LOCKS => (
            b.partition_max_record_locks,
            "group.share.min.partition.max.record.locks",
            "group.share.max.partition.max.record.locks",
        ),
        k => return Err(format!("{k} is not a group config")),
    };
    Ok((min, max, min_name, max_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(group: &ShareGroupConfig) -> ShareDefaults<'_> {
        ShareDefaults {
            group,
            delivery: Delivery::default(),
        }
    }

    #[test]
    fn values_are_checked_against_kafkas_bounds() {
        let g = ShareGroupConfig::default();
        let b = defaults(&g);
        assert_eq!(check(SESSION_TIMEOUT_MS, " 50000 ", &b).unwrap(), "50000");
        assert!(check(SESSION_TIMEOUT_MS, "1000", &b)
            .unwrap_err()
            .contains("group.share.min.session.timeout.ms"));
        assert!(check(HEARTBEAT_INTERVAL_MS, "16000", &b)
            .unwrap_err()
            .contains("group.share.max.heartbeat.interval.ms"));
        assert!(check(RECORD_LOCK_DURATION_MS, "1000", &b)
            .unwrap_err()
            .contains("group.share.min.record.lock.duration.ms"));
        assert!(check(DELIVERY_COUNT_LIMIT, "1", &b).is_err());
        assert!(check(DELIVERY_COUNT_LIMIT, "11", &b).is_err());
        assert!(check(PARTITION_MAX_RECORD_LOCKS, "99", &b).is_err());
        assert!(check(PARTITION_MAX_RECORD_LOCKS, "5000000000", &b)
            .unwrap_err()
            .contains("integer"));
        assert!(check(ISOLATION_LEVEL, "read_commit", &b).is_err());
        assert!(check(RENEW_ACKNOWLEDGE_ENABLE, "1", &b).is_err());
        assert_eq!(
            check(RENEW_ACKNOWLEDGE_ENABLE, "FALSE", &b).unwrap(),
            "false"
        );
        assert!(check(AUTO_OFFSET_RESET, "oldest", &b).is_err());
        assert!(check("share.nope", "1", &b).is_err());
    }

    #[test]
    fn the_bounds_are_the_brokers() {
        let g = ShareGroupConfig {
            bounds: super::super::group::ShareBounds {
                record_lock_duration_ms: (500, 2_000),
                ..Default::default()
            },
            ..ShareGroupConfig::default()
        };
        let b = defaults(&g);
        assert!(check(RECORD_LOCK_DURATION_MS, "500", &b).is_ok());
        assert!(check(RECORD_LOCK_DURATION_MS, "499", &b).is_err());
        assert!(check(RECORD_LOCK_DURATION_MS, "2001", &b)
            .unwrap_err()
            .contains("group.share.max.record.lock.duration.ms (2000)"));
    }

    #[test]
    fn a_layer_applies_and_keeps_the_interval_below_the_timeout() {
        let g = ShareGroupConfig::default();
        let b = defaults(&g);
        let mut layer = BTreeMap::new();
        layer.insert(HEARTBEAT_INTERVAL_MS.to_string(), "15000".to_string());
        layer.insert(SESSION_TIMEOUT_MS.to_string(), "45000".to_string());
        assert!(check_layer(&layer, &b).is_ok());
        let m = membership(&g, &layer);
        assert_eq!(
            (m.session_timeout_ms, m.heartbeat_interval_ms),
            (45_000, 15_000)
        );

        let g2 = ShareGroupConfig {
            session_timeout_ms: 10_000,
            heartbeat_interval_ms: 2_000,
            ..ShareGroupConfig::default()
        };
        let mut only_interval = BTreeMap::new();
        only_interval.insert(HEARTBEAT_INTERVAL_MS.to_string(), "12000".to_string());
        assert!(check_layer(&only_interval, &defaults(&g2))
            .unwrap_err()
            .contains("must be below"));

        layer.insert(ISOLATION_LEVEL.to_string(), "read_committed".to_string());
        layer.insert(DELIVERY_COUNT_LIMIT.to_string(), "3".to_string());
        layer.insert(RECORD_LOCK_DURATION_MS.to_string(), "20000".to_string());
        layer.insert(PARTITION_MAX_RECORD_LOCKS.to_string(), "100".to_string());
        layer.insert(RENEW_ACKNOWLEDGE_ENABLE.to_string(), "false".to_string());
        layer.insert(AUTO_OFFSET_RESET.to_string(), "earliest".to_string());
        let d = delivery(Delivery::default(), &layer);
        assert_eq!(
            d,
            Delivery {
                record_lock_duration_ms: 20_000,
                delivery_count_limit: 3,
                partition_max_record_locks: 100,
                read_committed: true,
                auto_offset_reset: AutoOffsetReset::Earliest,
                renew_enabled: false,
            }
        );
        assert_eq!(
            delivery(Delivery::default(), &BTreeMap::new()),
            Delivery::default()
        );
    }
}

//! A group's own configs (Kafka 4's GROUP config resource, `kafka-configs
//! --entity-type groups`): `consumer.session.timeout.ms` and
//! `consumer.heartbeat.interval.ms` override the broker's `group.consumer.*` for one
//! consumer group; the `share.*` keys are a share group's (`group::share::overrides`).
//! They are stored in the cluster metadata, so every coordinator and partition leader
//! the group meets applies them.
//!
//! Invariants (Kafka's `GroupConfig` checks, made by [`edit`] before anything is
//! stored): each value is an integer within the broker's bounds
//! (`group.consumer.min/max.session.timeout.ms`, `…heartbeat.interval.ms`), and the
//! group's heartbeat interval stays below its session timeout; [`effective`] therefore
//! never yields an interval at or above the timeout for a stored layer.

use super::group::ConsumerGroupConfig;
use crate::group::share::overrides::{self as share, ShareDefaults};
use std::collections::BTreeMap;

pub const SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";

/// One change to a group's configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    Set(String, String),
    /// Back to the broker's value.
    Delete(String),
}

/// The group's configs after `edits` (applied in order to `stored`), or why they are
/// refused (INVALID_CONFIG at the edge).
pub fn edit(
    stored: &BTreeMap<String, String>,
    edits: &[Edit],
    broker: &ConsumerGroupConfig,
    share_broker: &ShareDefaults<'_>,
) -> Result<BTreeMap<String, String>, String> {
    let mut layer = stored.clone();
    for e in edits {
        match e {
            Edit::Set(key, value) if share::is_share_key(key) => {
                let v = share::check(key, value, share_broker)?;
                layer.insert(key.clone(), v);
            }
            Edit::Delete(key) if share::is_share_key(key) => {
                if !share::KEYS.contains(&key.as_str()) {
                    return Err(format!("{key} is not a group config"));
                }
                layer.remove(key);
            }
            Edit::Set(key, value) => {
                let (min, max, min_name, max_name) = bounds(key, broker)?;
                let v: i32 = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("{key} must be an integer, not {value:?}"))?;
                if v < min {
                    return Err(format!("{key} must be at least {min_name} ({min})"));
                }
                if v > max {
                    return Err(format!("{key} must be at most {max_name} ({max})"));
                }
                layer.insert(key.clone(), v.to_string());
            }
            Edit::Delete(key) => {
                bounds(key, broker)?;
                layer.remove(key);
            }
        }
    }
    let e = effective(broker, &layer);
    if e.heartbeat_interval_ms >= e.session_timeout_ms {
        return Err(format!(
            "{HEARTBEAT_INTERVAL_MS} ({}) must be below {SESSION_TIMEOUT_MS} ({})",
            e.heartbeat_interval_ms, e.session_timeout_ms
        ));
    }
    share::check_layer(&layer, share_broker)?;
    Ok(layer)
}

/// The broker's settings with a group's configs applied.
pub fn effective(
    broker: &ConsumerGroupConfig,
    overrides: &BTreeMap<String, String>,
) -> ConsumerGroupConfig {
    let get = |key: &str| overrides.get(key).and_then(|v| v.parse::<i32>().ok());
    let mut c = broker.clone();
    if let Some(v) = get(SESSION_TIMEOUT_MS) {
        c.session_timeout_ms = v;
    }
    if let Some(v) = get(HEARTBEAT_INTERVAL_MS) {
        c.heartbeat_interval_ms = v;
    }
    c
}

/// A key's bounds and the broker settings that set them.
fn bounds(
    key: &str,
    broker: &ConsumerGroupConfig,
) -> Result<(i32, i32, &'static str, &'static str), String> {
    match key {
        SESSION_TIMEOUT_MS => Ok((
            broker.min_session_timeout_ms,
            broker.max_session_timeout_ms,
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        )),
        HEARTBEAT_INTERVAL_MS => Ok((
            broker.min_heartbeat_interval_ms,
            broker.max_heartbeat_interval_ms,
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        )),
        k => Err(format!("{k} is not a group config")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::share::reset::AUTO_OFFSET_RESET;

    fn set(k: &str, v: &str) -> Edit {
        Edit::Set(k.into(), v.into())
    }

    fn edit(
        stored: &BTreeMap<String, String>,
        edits: &[Edit],
        broker: &ConsumerGroupConfig,
    ) -> Result<BTreeMap<String, String>, String> {
        let group = crate::group::share::group::ShareGroupConfig::default();
        let share = ShareDefaults {
            group: &group,
            delivery: share::Delivery::default(),
        };
        super::edit(stored, edits, broker, &share)
    }

    #[test]
    fn values_are_checked_against_the_brokers_bounds() {
        let broker = ConsumerGroupConfig::default();
        let none = BTreeMap::new();
        let layer = edit(&none, &[set(SESSION_TIMEOUT_MS, "50000")], &broker).expect("in bounds");
        assert_eq!(effective(&broker, &layer).session_timeout_ms, 50_000);
        assert!(edit(&none, &[set(SESSION_TIMEOUT_MS, "1000")], &broker)
            .unwrap_err()
            .contains("group.consumer.min.session.timeout.ms"));
        assert!(edit(&none, &[set(HEARTBEAT_INTERVAL_MS, "99999")], &broker)
            .unwrap_err()
            .contains("group.consumer.max.heartbeat.interval.ms"));
        assert!(edit(&none, &[set(SESSION_TIMEOUT_MS, "x")], &broker).is_err());
        // Share groups' keys go to their own checks.
        assert!(edit(&none, &[set("share.session.timeout.ms", "45000")], &broker).is_ok());
        assert!(edit(&none, &[set("share.session.timeout.ms", "4500")], &broker).is_err());
        assert!(edit(&none, &[Edit::Delete("share.nope".into())], &broker).is_err());
        assert!(edit(&none, &[set("consumer.nope", "1")], &broker).is_err());
        // Share groups' start.
        let reset = edit(
            &none,
            &[set(AUTO_OFFSET_RESET, "by_duration:PT1H")],
            &broker,
        )
        .expect("ok");
        assert_eq!(reset[AUTO_OFFSET_RESET], "by_duration:PT1H");
        assert!(edit(&none, &[set(AUTO_OFFSET_RESET, "oldest")], &broker).is_err());
        assert!(edit(
            &none,
            &[set(AUTO_OFFSET_RESET, "by_duration:-PT1H")],
            &broker
        )
        .is_err());
        // Deleting goes back to the broker's value.
        let back = edit(&layer, &[Edit::Delete(SESSION_TIMEOUT_MS.into())], &broker).expect("ok");
        assert!(back.is_empty());
    }

    #[test]
    fn the_interval_stays_below_the_timeout() {
        let broker = ConsumerGroupConfig {
            min_session_timeout_ms: 1_000,
            min_heartbeat_interval_ms: 1_000,
            ..ConsumerGroupConfig::default()
        };
        let none = BTreeMap::new();
        assert!(edit(
            &none,
            &[
                set(SESSION_TIMEOUT_MS, "6000"),
                set(HEARTBEAT_INTERVAL_MS, "6000")
            ],
            &broker
        )
        .unwrap_err()
        .contains("must be below"));
        let ok = edit(
            &none,
            &[
                set(SESSION_TIMEOUT_MS, "6000"),
                set(HEARTBEAT_INTERVAL_MS, "2000"),
            ],
            &broker,
        )
        .expect("below");
        let e = effective(&broker, &ok);
        assert_eq!(
            (e.session_timeout_ms, e.heartbeat_interval_ms),
            (6_000, 2_000)
        );
    }
}

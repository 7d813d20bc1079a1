//! Topic configuration: the keys a topic may override, how each is parsed, validated,
//! applied to a [`LogConfig`] and described back to clients.
//!
//! One table, [`DEFS`], is the whole vocabulary. Every key in it is applied by
//! [`set`] and shown by [`get`]; a key not in it is refused with `INVALID_CONFIG`, so a
//! typo never silently does nothing. The broker-wide value of a key is its
//! `broker_name` synonym (`retention.ms` ↔ `log.retention.ms`), the same pairing
//! Kafka's DescribeConfigs reports.
//!
//! Invariants: [`resolve`] either applies every override or returns the first error and
//! applies none (callers persist only configs that resolve); `get(&c, k)` parses back
//! with `set` to the same value for every key in `DEFS`.

use corelog_storage::config::{CleanupPolicy, CompressionType, LogConfig, TimestampType};
use std::collections::BTreeMap;

pub use crate::config_type::ConfigType;

/// Kafka's `ConfigSource` codes (DescribeConfigs v1+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    TopicConfig = 1,
    /// Set for this broker by IncrementalAlterConfigs / AlterConfigs on BROKER "<id>".
    DynamicBrokerConfig = 2,
    /// Set for every broker by IncrementalAlterConfigs / AlterConfigs on BROKER "".
    DynamicDefaultBrokerConfig = 3,
    StaticBrokerConfig = 4,
    DefaultConfig = 5,
    /// Set for one group by IncrementalAlterConfigs / AlterConfigs on GROUP "<id>"
    /// (Kafka's DYNAMIC_GROUP_CONFIG).
    DynamicGroupConfig = 8,
}

/// One topic-level key.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    /// The broker-wide key that supplies the default (Kafka's synonym); `None` for a key
    /// that only topics set (the throttled-replica lists).
    pub broker_name: Option<&'static str>,
    pub config_type: ConfigType,
    pub doc: &'static str,
}

macro_rules! def {
    ($name:literal, $broker:literal, $ty:ident, $doc:literal) => {
        ConfigDef {
            name: $name,
            broker_name: Some($broker),
            config_type: ConfigType::$ty,
            doc: $doc,
        }
    };
    ($name:literal, $ty:ident, $doc:literal) => {
        ConfigDef {
            name: $name,
            broker_name: None,
            config_type: ConfigType::$ty,
            doc: $doc,
        }
    };
}

pub const DEFS: &[ConfigDef] = &[
    def!(
        "cleanup.policy",
        "log.cleanup.policy",
        List,
        "delete (remove old segments), compact (keep the last record per key), or both"
    ),
    def!(
        "compression.type",
        "compression.type",
        String,
        "codec batches are stored with: producer, uncompressed, gzip, snappy, lz4 or zstd"
    ),
    def!(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        Long,
        "how long a tombstone survives compaction"
    ),
    def!(
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        Long,
        "how long a deleted segment's files stay before they are unlinked"
    ),
    def!(
        "flush.messages",
        "log.flush.interval.messages",
        Long,
        "a produce leaving this many offsets unsynced waits for fdatasync before its ack (1: every produce); the default leaves it to the broker's --durability"
    ),
    def!(
        "flush.ms",
        "log.flush.interval.ms",
        Long,
        "unsynced data is synced at least this often (the background sync runs at the smaller of this and --flush-interval-ms)"
    ),
    def!(
        "follower.replication.throttled.replicas",
        List,
        "replicas (partition:broker, or * for all) whose broker throttles fetching them as a follower outside the ISR, to follower.replication.throttled.rate"
    ),
    def!(
        "index.interval.bytes",
        "log.index.interval.bytes",
        Int,
        "log bytes between two sparse offset-index entries"
    ),
    def!(
        "leader.replication.throttled.replicas",
        List,
        "replicas (partition:broker, or * for all) whose broker throttles what it sends as their leader to followers outside the ISR, to leader.replication.throttled.rate"
    ),
    def!(
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        Long,
        "a record older than this is compacted even below the dirty ratio"
    ),
    def!(
        "max.message.bytes",
        "message.max.bytes",
        Int,
        "largest record batch accepted"
    ),
    def!(
        "message.timestamp.difference.max.ms",
        "log.message.timestamp.difference.max.ms",
        Long,
        "largest distance between a CreateTime timestamp and the broker clock"
    ),
    def!(
        "message.timestamp.type",
        "log.message.timestamp.type",
        String,
        "CreateTime (producer's clock) or LogAppendTime (broker's clock)"
    ),
    def!(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        Double,
        "dirty share of the cleanable log at which compaction starts"
    ),
    def!(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        Long,
        "records younger than this are never compacted"
    ),
    def!(
        "min.insync.replicas",
        "min.insync.replicas",
        Int,
        "in-sync replicas acks=all needs, and the high watermark waits for"
    ),
    def!(
        "retention.bytes",
        "log.retention.bytes",
        Long,
        "largest size of a partition's log before old segments are deleted; -1: unlimited"
    ),
    def!(
        "retention.ms",
        "log.retention.ms",
        Long,
        "age after which a segment is deleted; -1: unlimited"
    ),
    def!(
        "segment.bytes",
        "log.segment.bytes",
        Int,
        "size at which the active segment rolls"
    ),
    def!(
        "segment.index.bytes",
        "log.index.size.max.bytes",
        Int,
        "offset-index size at which the active segment rolls"
    ),
    def!(
        "segment.ms",
        "log.roll.ms",
        Long,
        "age at which the active segment rolls"
    ),
    def!(
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        Boolean,
        "a replica outside the ISR may lead when no ISR member is alive, losing what only the ISR held"
    ),
];

/// Smallest `segment.bytes`: one direct-I/O block (Kafka allows 14, but every segment
/// here is written in 4 KiB blocks).
pub const SEGMENT_BYTES_MIN: i64 = 4096;

/// A refused key or value; the edge answers INVALID_CONFIG with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

fn invalid(key: &str, value: &str, why: impl std::fmt::Display) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: format!("Invalid value {value} for configuration {key}: {why}"),
    }
}

pub fn def(name: &str) -> Option<&'static ConfigDef> {
    DEFS.iter().find(|d| d.name == name)
}

/// The topic key whose broker-wide synonym is `broker_name`.
pub fn def_by_broker_name(broker_name: &str) -> Option<&'static ConfigDef> {
    DEFS.iter().find(|d| d.broker_name == Some(broker_name))
}

/// A dynamic broker key with no topic synonym.
#[derive(Debug)]
pub struct BrokerOnlyDef {
    pub name: &'static str,
    pub config_type: ConfigType,
    pub doc: &'static str,
    /// Kafka's default, as described.
    pub default: &'static str,
}

/// The dynamic broker keys that no topic key inherits. They live in the same dynamic
/// layers as the topic defaults and are read where they act (`replication_throttle`).
pub const BROKER_ONLY_DEFS: &[BrokerOnlyDef] = &[
    BrokerOnlyDef {
        name: corelog_controller::image::DECOMMISSION_KEY,
        config_type: ConfigType::Boolean,
        doc: "true on a broker's own resource: the active controller moves every replica off it and places none there (corelog admin decommission); false or deleted: it takes replicas again",
        default: "false",
    },
    BrokerOnlyDef {
        name: crate::replication_throttle::FOLLOWER_RATE,
        config_type: ConfigType::Long,
        doc: "bytes per second this broker fetches, as a follower outside the ISR, of the replicas topics name in follower.replication.throttled.replicas",
        default: "9223372036854775807",
    },
    BrokerOnlyDef {
        name: crate::replication_throttle::LOG_DIR_MOVE_RATE,
        config_type: ConfigType::Long,
        doc: "bytes per second this broker copies when it moves replicas between its own log directories (AlterReplicaLogDirs, kafka-reassign-partitions --replica-alter-log-dirs-throttle)",
        default: "9223372036854775807",
    },
    BrokerOnlyDef {
        name: crate::replication_throttle::LEADER_RATE,
        config_type: ConfigType::Long,
        doc: "bytes per second this broker sends, as leader, to followers outside the ISR of the replicas topics name in leader.replication.throttled.replicas",
        default: "9223372036854775807",
    },
];

pub fn broker_only_def(name: &str) -> Option<&'static BrokerOnlyDef> {
    BROKER_ONLY_DEFS.iter().find(|d| d.name == name)
}

/// Whether `name` may be set dynamically on a BROKER resource.
pub fn is_dynamic_broker_key(name: &str) -> bool {
    def_by_broker_name(name).is_some() || broker_only_def(name).is_some()
}

/// Checks a value of a broker-only key.
fn check_broker_only(d: &BrokerOnlyDef, value: &str) -> Result<(), ConfigError> {
    match d.config_type {
        ConfigType::Boolean => match value.trim().to_ascii_lowercase().as_str() {
            "true" | "false" => Ok(()),
            _ => Err(invalid(d.name, value, "not one of true, false")),
        },
        _ => {
            debug_assert_eq!(d.config_type, ConfigType::Long);
            long_in(d.name, value, 0, i64::MAX).map(|_| ())
        }
    }
}

fn long_in(key: &str, value: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, "not a number"))?;
    if v < min || v > max {
        let range = if max == i64::MAX {
            format!("value must be at least {min}")
        } else {
            format!("value must be between {min} and {max}")
        };
        return Err(invalid(key, value, range));
    }
    Ok(v)
}

fn int_in(key: &str, value: &str, min: i64) -> Result<i64, ConfigError> {
    long_in(key, value, min, i64::from(i32::MAX))
}

fn parse_cleanup(key: &str, value: &str) -> Result<CleanupPolicy, ConfigError> {
    let mut policy = CleanupPolicy {
        delete: false,
        compact: false,
    };
    for item in value.split(',').map(str::trim) {
        match item {
            "delete" => policy.delete = true,
            "compact" => policy.compact = true,
            other => {
                return Err(invalid(
                    key,
                    value,
                    format!("'{other}' is not one of delete, compact"),
                ))
            }
        }
    }
    Ok(policy)
}

/// Applies one key to `config`. Unknown keys and bad values are errors and leave
/// `config` unchanged.
pub fn set(config: &mut LogConfig, key: &str, value: &str) -> Result<(), ConfigError> {
    let c = config;
    match key {
        "cleanup.policy" => c.cleanup = parse_cleanup(key, value)?,
        "compression.type" => {
            c.compression = match value.trim() {
                "producer" => CompressionType::Producer,
                "uncompressed" => CompressionType::Uncompressed,
                "gzip" => CompressionType::Gzip,
                "snappy" => CompressionType::Snappy,
                "lz4" => CompressionType::Lz4,
                "zstd" => CompressionType::Zstd,
                _ => {
                    return Err(invalid(
                        key,
                        value,
                        "not one of producer, uncompressed, gzip, snappy, lz4, zstd",
                    ))
                }
            }
        }
        "delete.retention.ms" => c.delete_retention_ms = long_in(key, value, 0, i64::MAX)?,
        "file.delete.delay.ms" => c.file_delete_delay_ms = long_in(key, value, 0, i64::MAX)?,
        "flush.messages" => c.flush_messages = long_in(key, value, 1, i64::MAX)?,
        "flush.ms" => c.flush_ms = long_in(key, value, 0, i64::MAX)?,
        "index.interval.bytes" => c.index_interval_bytes = int_in(key, value, 0)? as u32,
        "max.compaction.lag.ms" => c.max_compaction_lag_ms = long_in(key, value, 1, i64::MAX)?,
        "max.message.bytes" => c.max_batch_bytes = int_in(key, value, 0)? as usize,
        "message.timestamp.difference.max.ms" => {
            c.timestamp_difference_max_ms = long_in(key, value, 0, i64::MAX)?
        }
        "message.timestamp.type" => {
            c.timestamp_type = match value.trim() {
                "CreateTime" => TimestampType::CreateTime,
                "LogAppendTime" => TimestampType::LogAppendTime,
                _ => return Err(invalid(key, value, "not one of CreateTime, LogAppendTime")),
            }
        }
        "min.cleanable.dirty.ratio" => {
            let v: f64 = value
                .trim()
                .parse()
                .map_err(|_| invalid(key, value, "not a number"))?;
            if !(0.0..=1.0).contains(&v) {
                return Err(invalid(key, value, "value must be between 0 and 1"));
            }
            c.min_cleanable_dirty_ratio = v;
        }
        "min.compaction.lag.ms" => c.min_compaction_lag_ms = long_in(key, value, 0, i64::MAX)?,
        "min.insync.replicas" => c.min_insync_replicas = int_in(key, value, 1)? as i32,
        "follower.replication.throttled.replicas" => {
            c.follower_replication_throttled_replicas =
                crate::replication_throttle::normalize_replicas(value)
                    .map_err(|why| invalid(key, value, why))?
        }
        "leader.replication.throttled.replicas" => {
            c.leader_replication_throttled_replicas =
                crate::replication_throttle::normalize_replicas(value)
                    .map_err(|why| invalid(key, value, why))?
        }
        "unclean.leader.election.enable" => {
            c.unclean_leader_election_enable = match value.trim().to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(invalid(key, value, "not one of true, false")),
            }
        }
        "retention.bytes" => c.retention_bytes = long_in(key, value, -1, i64::MAX)?,
        "retention.ms" => c.retention_ms = long_in(key, value, -1, i64::MAX)?,
        "segment.bytes" => c.segment_bytes = int_in(key, value, SEGMENT_BYTES_MIN)? as u64,
        "segment.index.bytes" => c.segment_index_bytes = int_in(key, value, 8)? as u32,
        "segment.ms" => c.segment_ms = long_in(key, value, 1, i64::MAX)? as u64,
        _ => {
            return Err(ConfigError {
                key: key.to_string(),
                message: format!("Unknown topic config name: {key}"),
            })
        }
    }
    Ok(())
}

/// The value of `key` in `config`, as DescribeConfigs shows it; `None` for unknown keys.
pub fn get(c: &LogConfig, key: &str) -> Option<String> {
    Some(match key {
        "cleanup.policy" => match (c.cleanup.delete, c.cleanup.compact) {
            (true, true) => "compact,delete".into(),
            (false, true) => "compact".into(),
            (true, false) => "delete".into(),
            (false, false) => String::new(),
        },
        "compression.type" => match c.compression {
            CompressionType::Producer => "producer",
            CompressionType::Uncompressed => "uncompressed",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        }
        .into(),
        "delete.retention.ms" => c.delete_retention_ms.to_string(),
        "file.delete.delay.ms" => c.file_delete_delay_ms.to_string(),
        "flush.messages" => c.flush_messages.to_string(),
        "flush.ms" => c.flush_ms.to_string(),
        "index.interval.bytes" => c.index_interval_bytes.to_string(),
        "max.compaction.lag.ms" => c.max_compaction_lag_ms.to_string(),
        "max.message.bytes" => c.max_batch_bytes.to_string(),
        "message.timestamp.difference.max.ms" => c.timestamp_difference_max_ms.to_string(),
        "message.timestamp.type" => match c.timestamp_type {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
        .into(),
        "min.cleanable.dirty.ratio" => c.min_cleanable_dirty_ratio.to_string(),
        "min.compaction.lag.ms" => c.min_compaction_lag_ms.to_string(),
        "min.insync.replicas" => c.min_insync_replicas.to_string(),
        "follower.replication.throttled.replicas" => {
            c.follower_replication_throttled_replicas.clone()
        }
        "leader.replication.throttled.replicas" => c.leader_replication_throttled_replicas.clone(),
        "unclean.leader.election.enable" => c.unclean_leader_election_enable.to_string(),
        "retention.bytes" => c.retention_bytes.to_string(),
        "retention.ms" => c.retention_ms.to_string(),
        "segment.bytes" => c.segment_bytes.to_string(),
        "segment.index.bytes" => c.segment_index_bytes.to_string(),
        "segment.ms" => c.segment_ms.to_string(),
        _ => return None,
    })
}

/// Checks that hold between keys (Kafka's own cross-checks).
fn check_combination(c: &LogConfig) -> Result<(), ConfigError> {
    if c.min_compaction_lag_ms > c.max_compaction_lag_ms {
        return Err(ConfigError {
            key: "min.compaction.lag.ms".into(),
            message: format!(
                "conflict topic config setting min.compaction.lag.ms ({}) > max.compaction.lag.ms ({})",
                c.min_compaction_lag_ms, c.max_compaction_lag_ms
            ),
        });
    }
    Ok(())
}

/// `defaults` with every override applied: all or nothing.
pub fn resolve(
    defaults: &LogConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<LogConfig, ConfigError> {
    let mut c = defaults.clone();
    for (k, v) in overrides {
        set(&mut c, k, v)?;
    }
    check_combination(&c)?;
    Ok(c)
}

/// One described key (DescribeConfigs), with its synonyms strongest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub name: String,
    /// `None` for a key with no value (Kafka's null, e.g. an unset `broker.rack`).
    pub value: Option<String>,
    pub source: ConfigSource,
    pub config_type: ConfigType,
    pub doc: &'static str,
    /// (name, value, source): the topic override, then the broker value, then Kafka's
    /// default.
    pub synonyms: Vec<(String, String, ConfigSource)>,
    /// A possible secret: described with no value, in itself and its synonyms.
    pub sensitive: bool,
}

/// The broker-wide value of every topic key, in layers from weakest to strongest:
/// Kafka's default, the start-up config, the dynamic cluster-wide default (BROKER
/// resource ""), this broker's dynamic config (BROKER resource "<id>"). The dynamic
/// layers are keyed by broker name (`log.retention.ms`) and were validated before they
/// were stored.
#[derive(Debug, Clone, Copy)]
pub struct BrokerDefaults<'a> {
    pub static_config: &'a LogConfig,
    pub cluster_default: &'a BTreeMap<String, String>,
    pub node: &'a BTreeMap<String, String>,
}

impl BrokerDefaults<'_> {
    /// The start-up config with both dynamic layers applied: what a topic without
    /// overrides runs with. A stored value that no longer applies (a data directory from
    /// another version) is skipped with a warning.
    pub fn effective(&self) -> LogConfig {
        let mut c = self.static_config.clone();
        for layer in [self.cluster_default, self.node] {
            for (name, value) in layer {
                let applied = match def_by_broker_name(name) {
                    Some(d) => set(&mut c, d.name, value),
                    // Read where it acts, not by topics.
                    None if broker_only_def(name).is_some() => Ok(()),
                    // Taken and described, not acted on.
                    None => {
                        crate::kafka_broker_keys::note_not_acted_on(name, "dynamic broker config");
                        Ok(())
                    }
                };
                if let Err(e) = applied {
                    tracing::warn!(key = %name, error = %e, "stored dynamic broker config ignored");
                }
            }
        }
        c
    }

    /// Where the broker-wide value of `d` comes from.
    fn source(&self, d: &ConfigDef) -> ConfigSource {
        let Some(broker_name) = d.broker_name else {
            return ConfigSource::DefaultConfig;
        };
        if self.node.contains_key(broker_name) {
            ConfigSource::DynamicBrokerConfig
        } else if self.cluster_default.contains_key(broker_name) {
            ConfigSource::DynamicDefaultBrokerConfig
        } else if get(self.static_config, d.name) != get(&LogConfig::default(), d.name) {
            ConfigSource::StaticBrokerConfig
        } else {
            ConfigSource::DefaultConfig
        }
    }

    /// Every layer that sets `d`, strongest first, ending with Kafka's default.
    fn synonyms(&self, d: &ConfigDef) -> Vec<(String, String, ConfigSource)> {
        let mut out = Vec::with_capacity(4);
        let Some(broker_name) = d.broker_name else {
            return out;
        };
        let name = broker_name.to_string();
        if let Some(v) = self.node.get(broker_name) {
            out.push((name.clone(), v.clone(), ConfigSource::DynamicBrokerConfig));
        }
        if let Some(v) = self.cluster_default.get(broker_name) {
            out.push((
                name.clone(),
                v.clone(),
                ConfigSource::DynamicDefaultBrokerConfig,
            ));
        }
        let default = get(&LogConfig::default(), d.name).unwrap_or_default();
        let configured = get(self.static_config, d.name).unwrap_or_default();
        if configured != default {
            out.push((name.clone(), configured, ConfigSource::StaticBrokerConfig));
        }
        out.push((name, default, ConfigSource::DefaultConfig));
        out
    }
}

/// The value DescribeConfigs shows for `d`: as it was set, where it was set (the
/// strongest synonym), so list items keep their order (`delete,compact` after an APPEND)
/// as Kafka shows them; Kafka's default as `effective` renders it.
fn shown_value(
    synonyms: &[(String, String, ConfigSource)],
    effective: &LogConfig,
    d: &ConfigDef,
) -> String {
    match synonyms.first() {
        Some((_, v, src)) if *src != ConfigSource::DefaultConfig => stored(v),
        _ => get(effective, d.name).unwrap_or_default(),
    }
}

/// A stored value as described: list items trimmed, in their order.
fn stored(value: &str) -> String {
    if value.contains(',') {
        value
            .split(',')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(",")
    } else {
        value.trim().to_string()
    }
}

/// Checks a change to a dynamic broker layer: every value of a topic key's broker name,
/// a broker-only key or another of Kafka's keys must parse; keys outside Kafka's
/// vocabulary are taken as they are. Returns the first refusal.
pub fn check_broker_layer(layer: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let mut c = LogConfig::default();
    for (name, value) in layer {
        if let Some(d) = broker_only_def(name) {
            check_broker_only(d, value)?;
            continue;
        }
        let Some(d) = def_by_broker_name(name) else {
            // Kafka's other keys as Kafka parses them; keys outside its vocabulary as
            // they are (Kafka takes them too).
            if let Some(key) = crate::kafka_broker_keys::lookup(name) {
                crate::kafka_broker_keys::check_value(key, value).map_err(|message| {
                    ConfigError {
                        key: name.clone(),
                        message,
                    }
                })?;
            }
            continue;
        };
        set(&mut c, d.name, value).map_err(|e| ConfigError {
            key: name.clone(),
            message: e.message.replace(d.name, name),
        })?;
    }
    Ok(())
}

/// Every topic key of a topic with `overrides` on a broker with defaults `broker`.
/// `overrides` are assumed valid (they were resolved before they were stored).
pub fn describe_topic(
    broker: &BrokerDefaults<'_>,
    overrides: &BTreeMap<String, String>,
) -> Vec<Described> {
    let defaults = broker.effective();
    let effective = resolve(&defaults, overrides).unwrap_or_else(|_| defaults.clone());
    DEFS.iter()
        .map(|d| {
            let mut synonyms = Vec::with_capacity(4);
            let source = if let Some(v) = overrides.get(d.name) {
                synonyms.push((d.name.to_string(), v.clone(), ConfigSource::TopicConfig));
                ConfigSource::TopicConfig
            } else {
                broker.source(d)
            };
            synonyms.extend(broker.synonyms(d));
            let value = shown_value(&synonyms, &effective, d);
            Described {
                name: d.name.to_string(),
                value: Some(value),
                source,
                config_type: d.config_type,
                doc: d.doc,
                synonyms,
                sensitive: false,
            }
        })
        .collect()
}

/// The broker-wide keys (the topic defaults under their broker names, then the
/// broker-only keys), every one alterable dynamically.
pub fn describe_broker(broker: &BrokerDefaults<'_>) -> Vec<Described> {
    let effective = broker.effective();
    let topic_defaults = DEFS.iter().filter_map(|d| {
        let name = d.broker_name?;
        let synonyms = broker.synonyms(d);
        let value = shown_value(&synonyms, &effective, d);
        Some(Described {
            name: name.to_string(),
            value: Some(value),
            source: broker.source(d),
            config_type: d.config_type,
            doc: d.doc,
            synonyms,
            sensitive: false,
        })
    });
    let broker_only = BROKER_ONLY_DEFS.iter().map(|d| {
        let mut synonyms = Vec::with_capacity(3);
        if let Some(v) = broker.node.get(d.name) {
            synonyms.push((
                d.name.to_string(),
                v.clone(),
                ConfigSource::DynamicBrokerConfig,
            ));
        }
        if let Some(v) = broker.cluster_default.get(d.name) {
            synonyms.push((
                d.name.to_string(),
                v.clone(),
                ConfigSource::DynamicDefaultBrokerConfig,
            ));
        }
        synonyms.push((
            d.name.to_string(),
            d.default.to_string(),
            ConfigSource::DefaultConfig,
        ));
        let (_, value, source) = synonyms[0].clone();
        Described {
            name: d.name.to_string(),
            value: Some(stored(&value)),
            source,
            config_type: d.config_type,
            doc: d.doc,
            synonyms,
            sensitive: false,
        }
    });
    topic_defaults.chain(broker_only).collect()
}

/// The keys set in the cluster-wide dynamic layer only: what Kafka describes for the
/// BROKER resource "".
pub fn describe_cluster_default(broker: &BrokerDefaults<'_>) -> Vec<Described> {
    let topic_defaults = DEFS
        .iter()
        .filter_map(|d| Some((d.broker_name?, d.config_type, d.doc)));
    let broker_only = BROKER_ONLY_DEFS
        .iter()
        .map(|d| (d.name, d.config_type, d.doc));
    topic_defaults
        .chain(broker_only)
        .filter_map(|(name, config_type, doc)| {
            let value = broker.cluster_default.get(name)?;
            Some(Described {
                name: name.to_string(),
                value: Some(value.clone()),
                source: ConfigSource::DynamicDefaultBrokerConfig,
                config_type,
                doc,
                synonyms: vec![(
                    name.to_string(),
                    value.clone(),
                    ConfigSource::DynamicDefaultBrokerConfig,
                )],
                sensitive: false,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_round_trips_through_get_and_set() {
        let base = LogConfig::default();
        for d in DEFS {
            let shown = get(&base, d.name).expect("every defined key is shown");
            let mut c = base.clone();
            set(&mut c, d.name, &shown).unwrap_or_else(|e| panic!("{}: {e}", d.name));
            assert_eq!(c, base, "{} round-trips", d.name);
            if let Some(b) = d.broker_name {
                assert!(def_by_broker_name(b).is_some());
            }
        }
    }

    #[test]
    fn overrides_apply_and_bad_ones_change_nothing() {
        let base = LogConfig::default();
        let mut o = BTreeMap::new();
        o.insert("retention.ms".to_string(), "1000".to_string());
        o.insert("cleanup.policy".to_string(), "compact, delete".to_string());
        let c = resolve(&base, &o).expect("valid");
        assert_eq!(c.retention_ms, 1000);
        assert!(c.cleanup.compact && c.cleanup.delete);
        assert_eq!(get(&c, "cleanup.policy").as_deref(), Some("compact,delete"));

        for (k, v) in [
            ("retention.ms", "-2"),
            ("retention.ms", "soon"),
            ("segment.bytes", "100"),
            ("segment.bytes", "99999999999"),
            ("cleanup.policy", "forever"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("message.timestamp.type", "createtime"),
            ("compression.type", "brotli"),
            ("min.insync.replicas", "0"),
            ("no.such.key", "1"),
        ] {
            let mut bad = o.clone();
            bad.insert(k.to_string(), v.to_string());
            let e = resolve(&base, &bad).expect_err(&format!("{k}={v} is refused"));
            assert_eq!(e.key, k);
        }
        let mut lag = BTreeMap::new();
        lag.insert("min.compaction.lag.ms".to_string(), "10".to_string());
        lag.insert("max.compaction.lag.ms".to_string(), "5".to_string());
        assert!(resolve(&base, &lag).is_err());
    }

    #[test]
    fn describe_reports_sources_and_synonyms() {
        let mut broker = LogConfig::default();
        broker.retention_ms = 5000;
        let mut o = BTreeMap::new();
        o.insert("segment.bytes".to_string(), "65536".to_string());
        let none = BTreeMap::new();
        let layers = BrokerDefaults {
            static_config: &broker,
            cluster_default: &none,
            node: &none,
        };
        let all = describe_topic(&layers, &o);
        assert_eq!(all.len(), DEFS.len());
        let find = |n: &str| all.iter().find(|d| d.name == n).cloned().expect(n);
        let seg = find("segment.bytes");
        assert_eq!(seg.value.as_deref(), Some("65536"));
        assert_eq!(seg.source, ConfigSource::TopicConfig);
        assert_eq!(seg.synonyms.len(), 2);
        let ret = find("retention.ms");
        assert_eq!(ret.value.as_deref(), Some("5000"));
        assert_eq!(ret.source, ConfigSource::StaticBrokerConfig);
        assert_eq!(ret.synonyms[0].0, "log.retention.ms");
        assert_eq!(ret.synonyms[1].1, "604800000");
        let comp = find("compression.type");
        assert_eq!(comp.source, ConfigSource::DefaultConfig);
        assert_eq!(comp.value.as_deref(), Some("producer"));
        let b = describe_broker(&layers);
        assert!(b
            .iter()
            .any(|d| d.name == "log.retention.ms" && d.value.as_deref() == Some("5000")));
    }

    #[test]
    fn dynamic_layers_override_the_static_config_in_order() {
        let mut broker = LogConfig::default();
        broker.retention_ms = 5000;
        let mut cluster = BTreeMap::new();
        cluster.insert("log.retention.ms".to_string(), "6000".to_string());
        cluster.insert("log.segment.bytes".to_string(), "65536".to_string());
        let mut node = BTreeMap::new();
        node.insert("log.retention.ms".to_string(), "7000".to_string());
        let layers = BrokerDefaults {
            static_config: &broker,
            cluster_default: &cluster,
            node: &node,
        };
        let c = layers.effective();
        assert_eq!((c.retention_ms, c.segment_bytes), (7000, 65536));
        let b = describe_broker(&layers);
        let ret = b
            .iter()
            .find(|d| d.name == "log.retention.ms")
            .expect("described");
        assert_eq!(ret.source, ConfigSource::DynamicBrokerConfig);
        let sources: Vec<_> = ret.synonyms.iter().map(|s| (s.1.as_str(), s.2)).collect();
        assert_eq!(
            sources,
            [
                ("7000", ConfigSource::DynamicBrokerConfig),
                ("6000", ConfigSource::DynamicDefaultBrokerConfig),
                ("5000", ConfigSource::StaticBrokerConfig),
                ("604800000", ConfigSource::DefaultConfig),
            ]
        );
        let t = describe_topic(&layers, &BTreeMap::new());
        let seg = t
            .iter()
            .find(|d| d.name == "segment.bytes")
            .expect("described");
        assert_eq!(seg.source, ConfigSource::DynamicDefaultBrokerConfig);
        assert_eq!(describe_cluster_default(&layers).len(), 2);

        let mut bad = BTreeMap::new();
        bad.insert("log.retention.ms".to_string(), "soon".to_string());
        assert!(check_broker_layer(&bad)
            .unwrap_err()
            .message
            .contains("log.retention.ms"));
        bad.clear();
        // Kafka's other keys parse as Kafka parses them (which of them may change while
        // running is the edge's check).
        bad.insert("num.partitions".to_string(), "three".to_string());
        assert!(check_broker_layer(&bad).is_err());
        bad.insert("num.partitions".to_string(), "3".to_string());
        assert!(check_broker_layer(&bad).is_ok());
        assert!(check_broker_layer(&cluster).is_ok());
    }

    #[test]
    fn replication_throttles_are_broker_only_keys_and_topic_only_lists() {
        let mut node = BTreeMap::new();
        node.insert(
            crate::replication_throttle::LEADER_RATE.to_string(),
            "1048576".to_string(),
        );
        assert!(check_broker_layer(&node).is_ok());
        let base = LogConfig::default();
        let none = BTreeMap::new();
        let layers = BrokerDefaults {
            static_config: &base,
            cluster_default: &none,
            node: &node,
        };
        // Not a topic default: it changes no topic's config.
        assert_eq!(layers.effective(), base);
        let b = describe_broker(&layers);
        let rate = |name: &str| b.iter().find(|d| d.name == name).cloned().expect(name);
        let leader = rate(crate::replication_throttle::LEADER_RATE);
        assert_eq!(
            (leader.value.as_deref().unwrap_or_default(), leader.source),
            ("1048576", ConfigSource::DynamicBrokerConfig)
        );
        let follower = rate(crate::replication_throttle::FOLLOWER_RATE);
        assert_eq!(
            (
                follower.value.as_deref().unwrap_or_default(),
                follower.source
            ),
            ("9223372036854775807", ConfigSource::DefaultConfig)
        );
        let mut bad = node.clone();
        bad.insert(
            crate::replication_throttle::FOLLOWER_RATE.to_string(),
            "-1".to_string(),
        );
        assert!(check_broker_layer(&bad).is_err());

        // The replica lists are topic keys with no broker synonym.
        let d = def("leader.replication.throttled.replicas").expect("defined");
        assert_eq!(d.broker_name, None);
        let mut o = BTreeMap::new();
        o.insert(d.name.to_string(), " 0:1 , 1:2".to_string());
        let c = resolve(&base, &o).expect("valid");
        assert_eq!(c.leader_replication_throttled_replicas, "0:1,1:2");
        o.insert(d.name.to_string(), "0-1".to_string());
        assert!(resolve(&base, &o).is_err());
        let t = describe_topic(&layers, &BTreeMap::new());
        let shown = t.iter().find(|x| x.name == d.name).expect("described");
        assert_eq!(
            (shown.value.as_deref().unwrap_or_default(), shown.source),
            ("", ConfigSource::DefaultConfig)
        );
    }
}

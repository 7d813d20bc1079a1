//! Kafka's broker keys in the start-up configuration: which of them corelog reads (and so
//! cannot change while running), which it takes without acting on them, and the
//! non-secret security values DescribeConfigs shows.
//!
//! A configuration file converted from Kafka's `server.properties` names many keys
//! corelog has no use for (`num.network.threads`, `socket.send.buffer.bytes`, ...). Kafka
//! takes every key of its vocabulary; so does corelog: each such key is checked as Kafka
//! parses its type, kept for DescribeConfigs, and logged once as not acted on. A key
//! outside Kafka's vocabulary and corelog's own stays an error, so a typo in a file never
//! silently falls back to a default.
//!
//! Invariants: a key is in at most one of `read_at_start` and `not_acted_on`; a value of
//! a secret key is never kept here.

use corelog_shards::kafka_broker_keys::{self, KafkaKey};
use corelog_shards::topic_config;
use std::collections::{BTreeMap, BTreeSet};

/// What the start-up configuration says about Kafka's broker keys.
#[derive(Debug, Clone, Default)]
pub struct KafkaSettings {
    /// Kafka's keys that corelog's own configuration reads, under Kafka's names.
    read_at_start: BTreeSet<&'static str>,
    /// Kafka's keys given at start that corelog takes but does not act on.
    pub not_acted_on: BTreeMap<String, String>,
    /// Kafka's keys corelog reads at start, as the file gave them by Kafka's names.
    pub given: BTreeMap<String, String>,
    /// `controller.listener.names` as resolved (the one listener of the controller port).
    pub controller_listener: Option<String>,
    /// The broker-wide security settings given at start, for DescribeConfigs (secrets are
    /// described without their values, so they may be here).
    pub security: BTreeMap<String, String>,
}

impl KafkaSettings {
    /// The settings of a start-up configuration whose fields take the keys `file_takes`
    /// says, whose security keys are `security` and whose Kafka keys outside corelog's own
    /// are `not_acted_on`.
    pub fn new(
        file_takes: impl Fn(&str) -> bool,
        security: BTreeMap<String, String>,
        not_acted_on: BTreeMap<String, String>,
        file: &toml::Table,
        controller_listener: Option<String>,
    ) -> KafkaSettings {
        let read_at_start: BTreeSet<&'static str> = kafka_broker_keys::all()
            .iter()
            .map(|k| k.name)
            .filter(|k| crate::security_config::KEYS.contains(k) || file_takes(k))
            // The topic defaults and broker-only keys change while running.
            .filter(|k| {
                topic_config::def_by_broker_name(k).is_none()
                    && topic_config::broker_only_def(k).is_none()
            })
            .collect();
        debug_assert!(not_acted_on
            .keys()
            .all(|k| !read_at_start.contains(k.as_str())));
        for key in not_acted_on.keys() {
            kafka_broker_keys::note_not_acted_on(key, "configuration file");
        }
        let given = file
            .iter()
            .filter(|(k, _)| read_at_start.contains(k.as_str()))
            .filter_map(|(k, v)| Some((k.clone(), text(v)?)))
            .collect();
        KafkaSettings {
            read_at_start,
            not_acted_on,
            given,
            controller_listener,
            security,
        }
    }

    /// Whether corelog reads Kafka's key `name` only at start.
    pub fn read_at_start(&self, name: &str) -> bool {
        self.read_at_start.contains(name)
    }
}

/// A file's value as Kafka's text (`true`, `5`, `a,b`).
pub fn text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Array(items) => items
            .iter()
            .map(text)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(",")),
        toml::Value::Datetime(_) | toml::Value::Table(_) => None,
    }
}

/// What a file's key outside corelog's own fields is.
pub enum FileKey {
    /// A topic default under its broker name: `--topic-default topic.key=value`.
    TopicDefault(String),
    /// Kafka's key, taken and not acted on.
    NotActedOn(&'static KafkaKey, String),
}

/// Sorts a top-level file key that the configuration's fields do not take; an error
/// names what is wrong with it.
pub fn sort_file_key(name: &str, value: &toml::Value) -> anyhow::Result<FileKey> {
    let text = text(value)
        .ok_or_else(|| anyhow::anyhow!("{name}: a value Kafka's settings cannot take"))?;
    if let Some(d) = topic_config::def_by_broker_name(name) {
        return Ok(FileKey::TopicDefault(format!("{}={text}", d.name)));
    }
    if topic_config::broker_only_def(name).is_some() {
        anyhow::bail!("{name} is set while running (kafka-configs --alter), not in the file");
    }
    let key =
        kafka_broker_keys::lookup(name).ok_or_else(|| anyhow::anyhow!("unknown key {name:?}"))?;
    kafka_broker_keys::check_value(key, &text).map_err(anyhow::Error::msg)?;
    Ok(FileKey::NotActedOn(key, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_and_security_keys_are_read_at_start_but_not_the_dynamic_ones() {
        let file_takes = |k: &str| k == "num.partitions" || k == "log.retention.ms";
        let s = KafkaSettings::new(
            file_takes,
            BTreeMap::new(),
            BTreeMap::new(),
            &toml::Table::new(),
            None,
        );
        for own in [
            "num.partitions",
            "sasl.enabled.mechanisms",
            "connections.max.reauth.ms",
        ] {
            assert!(s.read_at_start(own), "{own}");
        }
        for other in [
            "num.network.threads",
            "log.retention.ms",
            "leader.replication.throttled.rate",
        ] {
            assert!(!s.read_at_start(other), "{other}");
        }
    }

    #[test]
    fn file_keys_sort_as_kafka_takes_them() {
        let v = |s: &str| toml::Value::String(s.into());
        assert!(matches!(
            sort_file_key("log.cleanup.policy", &v("compact")).unwrap(),
            FileKey::TopicDefault(t) if t == "cleanup.policy=compact"
        ));
        assert!(matches!(
            sort_file_key("num.network.threads", &toml::Value::Integer(8)).unwrap(),
            FileKey::NotActedOn(k, t) if k.name == "num.network.threads" && t == "8"
        ));
        assert!(sort_file_key("num.network.threads", &v("eight")).is_err());
        assert!(sort_file_key("num.netwrok.threads", &v("8")).is_err());
        assert!(sort_file_key("leader.replication.throttled.rate", &v("8")).is_err());
    }
}

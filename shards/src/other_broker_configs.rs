//! The broker keys corelog takes but does not act on, as DescribeConfigs shows them:
//! Kafka's other keys (with their values where set, else Kafka's defaults) and keys
//! outside Kafka's vocabulary that an operator stored.
//!
//! Invariants: a key that corelog describes itself (the caller's `acted_on`) is never
//! described here, so no name is listed twice; a possible secret (Kafka's PASSWORD
//! keys, and every key outside its vocabulary, as Kafka treats them) is described with
//! no value; a value's source is the strongest layer that sets it, as Kafka reports it.

use crate::kafka_broker_keys::{self, Update};
use crate::topic_config::{BrokerDefaults, ConfigSource, ConfigType, Described};
use std::collections::{BTreeMap, BTreeSet};

/// Every key not in `acted_on` for this broker's own resource: Kafka's whole vocabulary
/// and every stored key outside it, with whether it is read-only (Kafka's update mode, or
/// `read_at_start`: corelog reads it only at start; keys outside the vocabulary are, as
/// Kafka shows them). `static_values` are the ones from the start-up configuration.
pub fn describe_broker(
    broker: &BrokerDefaults<'_>,
    static_values: &BTreeMap<String, String>,
    acted_on: impl Fn(&str) -> bool,
    read_at_start: impl Fn(&str) -> bool,
) -> Vec<(Described, bool)> {
    let names: BTreeSet<&str> = kafka_broker_keys::all()
        .iter()
        .map(|k| k.name)
        .chain(broker.node.keys().map(String::as_str))
        .chain(broker.cluster_default.keys().map(String::as_str))
        .chain(static_values.keys().map(String::as_str))
        .filter(|n| !acted_on(n))
        .collect();
    names
        .into_iter()
        .map(|name| {
            let layers = [
                (broker.node.get(name), ConfigSource::DynamicBrokerConfig),
                (
                    broker.cluster_default.get(name),
                    ConfigSource::DynamicDefaultBrokerConfig,
                ),
                (static_values.get(name), ConfigSource::StaticBrokerConfig),
            ];
            let key = kafka_broker_keys::lookup(name);
            let default = key.and_then(|k| k.default).map(str::to_string);
            let mut synonyms: Vec<(String, String, ConfigSource)> = layers
                .into_iter()
                .filter_map(|(v, source)| Some((name.to_string(), v?.clone(), source)))
                .collect();
            if let Some(d) = default {
                synonyms.push((name.to_string(), d, ConfigSource::DefaultConfig));
            }
            let own = read_at_start(name);
            let mut described = row(name, key, synonyms);
            if own {
                described.doc = kafka_broker_keys::READ_AT_START_DOC;
            }
            let read_only = own || key.is_none_or(|k| k.update == Update::ReadOnly);
            (described, read_only)
        })
        .collect()
}

/// The keys of the cluster-wide default layer (BROKER resource "") not in `acted_on`.
pub fn describe_cluster_default(
    broker: &BrokerDefaults<'_>,
    acted_on: impl Fn(&str) -> bool,
) -> Vec<Described> {
    broker
        .cluster_default
        .iter()
        .filter(|(name, _)| !acted_on(name))
        .map(|(name, value)| {
            let synonyms = vec![(
                name.clone(),
                value.clone(),
                ConfigSource::DynamicDefaultBrokerConfig,
            )];
            row(name, kafka_broker_keys::lookup(name), synonyms)
        })
        .collect()
}

/// A row from its synonyms, strongest first.
fn row(
    name: &str,
    key: Option<&kafka_broker_keys::KafkaKey>,
    synonyms: Vec<(String, String, ConfigSource)>,
) -> Described {
    let sensitive = key.is_none_or(|k| k.sensitive());
    let (value, source) = match synonyms.first() {
        Some((_, v, source)) => (Some(v.clone()), *source),
        None => (None, ConfigSource::DefaultConfig),
    };
    Described {
        name: name.to_string(),
        value: if sensitive { None } else { value },
        source,
        config_type: key.map_or(ConfigType::String, |k| k.config_type),
        doc: if key.is_some() {
            kafka_broker_keys::NOT_ACTED_ON_DOC
        } else {
            kafka_broker_keys::UNKNOWN_DOC
        },
        synonyms,
        sensitive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_storage::LogConfig;

    fn layer(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn kafkas_keys_are_described_from_the_strongest_layer() {
        let log = LogConfig::default();
        let node = layer(&[("sasl.kerberos.min.time.before.relogin", "70000")]);
        let cluster = layer(&[("num.network.threads", "5"), ("plugin.secret", "s3cret")]);
        let broker = BrokerDefaults {
            static_config: &log,
            cluster_default: &cluster,
            node: &node,
        };
        let file = layer(&[("num.io.threads", "16")]);
        let rows = describe_broker(&broker, &file, |n| n == "node.id", |_| false);
        let find = |n: &str| rows.iter().find(|(d, _)| d.name == n).cloned();
        assert!(
            find("node.id").is_none(),
            "corelog's own keys are not repeated"
        );
        let (relogin, ro) = find("sasl.kerberos.min.time.before.relogin").unwrap();
        assert_eq!(relogin.value.as_deref(), Some("70000"));
        assert_eq!(relogin.source, ConfigSource::DynamicBrokerConfig);
        assert_eq!(
            relogin.synonyms.len(),
            2,
            "the dynamic value, then Kafka's default"
        );
        assert!(!ro);
        let (threads, _) = find("num.network.threads").unwrap();
        assert_eq!(threads.source, ConfigSource::DynamicDefaultBrokerConfig);
        let (io, _) = find("num.io.threads").unwrap();
        assert_eq!(
            (io.value.as_deref(), io.source),
            (Some("16"), ConfigSource::StaticBrokerConfig)
        );
        let (reauth, ro) = find("connections.max.reauth.ms").unwrap();
        assert_eq!(
            (reauth.value.as_deref(), reauth.source),
            (Some("0"), ConfigSource::DefaultConfig)
        );
        assert!(ro);
        let (password, _) = find("ssl.key.password").unwrap();
        assert!(password.sensitive && password.value.is_none() && password.synonyms.is_empty());
        let (plugin, ro) = find("plugin.secret").unwrap();
        assert!(plugin.sensitive && plugin.value.is_none() && ro);
        let unlisted = describe_cluster_default(&broker, |_| false);
        assert_eq!(
            unlisted.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["num.network.threads", "plugin.secret"]
        );
    }
}

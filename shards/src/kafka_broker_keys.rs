//! Apache Kafka's broker config vocabulary, for the keys corelog takes but does not act on.
//!
//! Kafka accepts every key of its broker `ConfigDef` (in `server.properties`, and through
//! AlterConfigs where the key is dynamic) and describes every one of them. corelog acts
//! on a subset (the topic defaults, the replication throttles, the settings its own
//! configuration reads); the rest are taken, stored, described with their values and
//! Kafka's defaults, and logged once as not acted on, so tools that set or read them work
//! as they do against Kafka. Keys outside Kafka's vocabulary are taken too, as Kafka takes
//! them (plugins read their own keys): described with no value, as possibly secret.
//!
//! [`table`] is generated from Kafka's own `ConfigDef` (tools/kafka-keys); nothing here
//! is written by hand but the rules of [`check_update`] and [`check_value`], which
//! follow Kafka's `DynamicBrokerConfig.validateConfigs` in order and wording.
//!
//! Invariants: `TABLE` is sorted by name (so [`lookup`] is a binary search); a key's
//! [`Update`] is Kafka's, never loosened here; the first refusal is the one Kafka gives.

#[rustfmt::skip]
mod table;

use crate::config_type::ConfigType;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// How Kafka lets a key change without a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Only in the start-up configuration.
    ReadOnly,
    /// On one broker's resource only.
    PerBroker,
    /// On one broker's resource or the cluster-wide default ("").
    ClusterWide,
}

/// One of Kafka's broker keys.
#[derive(Debug)]
pub struct KafkaKey {
    pub name: &'static str,
    pub config_type: ConfigType,
    /// Kafka's default as its DescribeConfigs renders it; `None` where it has none (or
    /// the key is a password).
    pub default: Option<&'static str>,
    pub update: Update,
}

impl KafkaKey {
    /// Whether a value of this key is a secret (Kafka's PASSWORD type): never described.
    pub fn sensitive(&self) -> bool {
        self.config_type == ConfigType::Password
    }
}

/// The Kafka release the table comes from.
pub const KAFKA_VERSION: &str = table::KAFKA_VERSION;

/// The documentation DescribeConfigs gives for a key corelog takes but does not act on.
pub const NOT_ACTED_ON_DOC: &str =
    "Apache Kafka's broker setting: corelog accepts and describes it but does not act on it";

/// The documentation for one of Kafka's keys corelog reads at start, described with the
/// value it was given there (docs/configuration.md names corelog's own setting).
pub const READ_AT_START_DOC: &str =
    "read at start by corelog (see its configuration reference); described as given";

/// The documentation for a key outside Kafka's vocabulary.
pub const UNKNOWN_DOC: &str =
    "not a Kafka broker setting: stored and described (as possibly secret), not acted on";

/// Every key, sorted by name.
pub fn all() -> &'static [KafkaKey] {
    table::TABLE
}

/// Kafka's key `name`, if it is one.
pub fn lookup(name: &str) -> Option<&'static KafkaKey> {
    table::TABLE
        .binary_search_by(|k| k.name.cmp(name))
        .ok()
        .map(|i| &table::TABLE[i])
}

const LISTENER_PREFIX: &str = "listener.name.";

/// The key a `listener.name.<listener>.<key>` name sets for one listener, if it is one.
fn listener_suffix(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(LISTENER_PREFIX)?;
    let (_listener, key) = rest.split_once('.')?;
    Some(key)
}

/// A security key Kafka changes only per listener (`listener.name.x.ssl.keystore.location`).
fn listener_only(name: &str) -> bool {
    table::LISTENER_ONLY.contains(&name)
}

/// Kafka's refusal of a dynamic update, with its error message; the caller answers it
/// as INVALID_REQUEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// Kafka's checks on a dynamic update of `names` (with their values, where set) on the
/// cluster-wide default (`cluster_wide`) or one broker, for keys corelog does not act on,
/// in Kafka's order: keys that change only at start-up (`read_only` adds corelog's own,
/// which it reads only at start), security keys set without a listener prefix, values of
/// the wrong type, per-broker keys on the default. Deleted keys pass `None` as value.
pub fn check_update<'a>(
    changes: impl Iterator<Item = (&'a str, Option<&'a str>)> + Clone,
    cluster_wide: bool,
    read_only: impl Fn(&str) -> bool,
) -> Result<(), Refusal> {
    let listed = |pick: &dyn Fn(&str) -> bool, message: &str| -> Result<(), Refusal> {
        let names: BTreeSet<&str> = changes
            .clone()
            .map(|(k, _)| k)
            .filter(|k| pick(k))
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = names.into_iter().collect();
        Err(Refusal(format!("{message}: [{}]", names.join(", "))))
    };
    listed(
        &|k| read_only(k) || lookup(k).is_some_and(|d| d.update == Update::ReadOnly),
        "Cannot update these configs dynamically",
    )?;
    listed(
        &listener_only,
        "These security configs can be dynamically updated only per-listener using the listener prefix",
    )?;
    for (name, value) in changes.clone() {
        if let (Some(key), Some(value)) = (lookup(name), value) {
            check_value(key, value).map_err(Refusal)?;
        }
    }
    if cluster_wide {
        listed(
            &|k| {
                lookup(k).is_some_and(|d| d.update == Update::PerBroker)
                    || listener_suffix(k).is_some_and(listener_only)
            },
            "Cannot update these configs at default cluster level, broker id must be specified",
        )?;
    }
    Ok(())
}

/// Parses `value` as Kafka parses a value of `key`'s type (`ConfigDef.parseType`): text
/// trimmed, booleans `true`/`false` in any case, whole numbers in range. Returns Kafka's
/// message on failure.
pub fn check_value(key: &KafkaKey, value: &str) -> Result<(), String> {
    let v = value.trim();
    let ok = match key.config_type {
        ConfigType::Boolean => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
        ConfigType::Short => v.parse::<i16>().is_ok(),
        ConfigType::Int => v.parse::<i32>().is_ok(),
        ConfigType::Long => v.parse::<i64>().is_ok(),
        ConfigType::Double => v.parse::<f64>().is_ok(),
        ConfigType::String | ConfigType::List | ConfigType::Class | ConfigType::Password => true,
    };
    if ok {
        return Ok(());
    }
    let expected = match key.config_type {
        ConfigType::Boolean => "Expected value to be either true or false".to_string(),
        other => format!("Not a number of type {}", other.kafka_name()),
    };
    Err(format!(
        "Invalid value {value} for configuration {}: {expected}",
        key.name
    ))
}

/// Logs, once per process and key, that a setting is taken but not acted on.
pub fn note_not_acted_on(name: &str, origin: &str) {
    static NOTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = NOTED
        .lock()
        .map(|mut noted| noted.insert(name.to_string()))
        .unwrap_or(false);
    if !first {
        return;
    }
    if lookup(name).is_some() {
        tracing::info!(key = %name, origin, "Kafka broker setting accepted; corelog does not act on it");
    } else {
        tracing::warn!(key = %name, origin, "not a Kafka broker setting: stored, not acted on");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_holds_what_operators_set() {
        assert!(all().windows(2).all(|w| w[0].name < w[1].name));
        assert!(all().len() > 300, "Kafka's whole broker vocabulary");
        let relogin = lookup("sasl.kerberos.min.time.before.relogin").unwrap();
        assert_eq!(relogin.update, Update::PerBroker);
        assert_eq!(relogin.config_type, ConfigType::Long);
        let reauth = lookup("connections.max.reauth.ms").unwrap();
        assert_eq!(
            (reauth.update, reauth.default),
            (Update::ReadOnly, Some("0"))
        );
        assert!(lookup("ssl.key.password").unwrap().sensitive());
        assert_eq!(lookup("ssl.key.password").unwrap().default, None);
        assert!(lookup("no.such.key").is_none());
    }

    fn check(changes: &[(&str, Option<&str>)], cluster_wide: bool) -> Result<(), Refusal> {
        check_update(changes.iter().copied(), cluster_wide, |k| k == "node.id")
    }

    fn refused(message: &str) -> Result<(), Refusal> {
        Err(Refusal(message.to_string()))
    }

    #[test]
    fn updates_are_refused_in_kafkas_order_and_words() {
        assert_eq!(
            check(
                &[("sasl.kerberos.min.time.before.relogin", Some("70000"))],
                false
            ),
            Ok(())
        );
        assert_eq!(
            check(&[("sasl.kerberos.min.time.before.relogin", Some("70000"))], true),
            refused("Cannot update these configs at default cluster level, broker id must be specified: [sasl.kerberos.min.time.before.relogin]")
        );
        assert_eq!(check(&[("num.network.threads", Some("5"))], true), Ok(()));
        // Read-only comes first, even with a value of the wrong type.
        assert_eq!(
            check(
                &[("log.cleaner.enable", Some("yes")), ("node.id", Some("3"))],
                false
            ),
            refused("Cannot update these configs dynamically: [log.cleaner.enable, node.id]")
        );
        assert_eq!(
            check(&[("num.io.threads", Some("abc"))], false),
            refused("Invalid value abc for configuration num.io.threads: Not a number of type INT")
        );
        assert_eq!(
            check(&[("ssl.key.password", Some("x"))], false),
            refused("These security configs can be dynamically updated only per-listener using the listener prefix: [ssl.key.password]")
        );
        assert_eq!(
            check(
                &[("listener.name.a.ssl.keystore.location", Some("/k"))],
                false
            ),
            Ok(())
        );
        assert!(check(
            &[("listener.name.a.ssl.keystore.location", Some("/k"))],
            true
        )
        .is_err());
        // Keys outside Kafka's vocabulary pass, as Kafka lets them; deletes carry no value.
        assert_eq!(check(&[("plugin.own.key", Some("anything"))], true), Ok(()));
        assert_eq!(check(&[("num.io.threads", None)], false), Ok(()));
    }

    #[test]
    fn values_parse_as_kafka_parses_them() {
        let key = |n| lookup(n).unwrap();
        assert!(check_value(key("auto.create.topics.enable"), " TRUE ").is_ok());
        assert!(check_value(key("auto.create.topics.enable"), "yes").is_err());
        assert!(check_value(key("num.io.threads"), "2147483648").is_err());
        assert!(check_value(key("log.cleaner.backoff.ms"), "2147483648").is_ok());
        assert_eq!(
            check_value(key("log.cleaner.backoff.ms"), "x"),
            Err("Invalid value x for configuration log.cleaner.backoff.ms: Not a number of type LONG".into())
        );
    }
}

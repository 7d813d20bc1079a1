//! Kafka's security settings as a `server.properties` holds them: the `ssl.*` and
//! `sasl.*` keys (and the mechanisms' `<mechanism>.sasl.jaas.config`), each of which a listener may override as `listener.name.<name>.<key>` (the name in
//! lower case, as Kafka writes it). They come from the config file (quoted dotted keys,
//! or a `[listener.name.<name>]` table) and from `--security KEY=VALUE` flags, which win.
//!
//! Invariants of a [`SecurityConfig`]: every key is one this broker knows (a typo is
//! refused at start-up, not ignored), and a listener override names a key that may be
//! overridden. Values are kept as given; what they mean is decided where they are used
//! (`tls_config.rs`). Nothing here is logged: key material may be inline.

use std::collections::BTreeMap;

/// The keys served, each a Kafka broker key with Kafka's meaning.
pub const KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules",
    "sasl.enabled.mechanisms",
    "plain.sasl.jaas.config",
    "scram-sha-256.sasl.jaas.config",
    "scram-sha-512.sasl.jaas.config",
    "sasl.jaas.config",
    "oauthbearer.sasl.jaas.config",
    "oauthbearer.sasl.server.callback.handler.class",
    "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol",
    "connection.failed.authentication.delay.ms",
    "connections.max.reauth.ms",
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.clock.skew.seconds",
];

/// The prefix of a listener's overrides.
const LISTENER_PREFIX: &str = "listener.name.";

/// Security keys, global and per listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityConfig {
    global: BTreeMap<String, String>,
    /// (listener name, upper case) → key → value.
    per_listener: BTreeMap<String, BTreeMap<String, String>>,
}

/// A key this broker does not know, or a malformed entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecurityConfigError(String);

impl SecurityConfig {
    /// From `(key, value)` pairs in order; a later pair for the same key wins.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<SecurityConfig, SecurityConfigError> {
        let mut c = SecurityConfig::default();
        for (key, value) in pairs {
            let key = key.trim();
            let (listener, key) = match key.strip_prefix(LISTENER_PREFIX) {
                Some(rest) => {
                    let (name, key) = rest.split_once('.').ok_or_else(|| {
                        SecurityConfigError(format!("{key} names no key after the listener"))
                    })?;
                    (Some(name.to_ascii_uppercase()), key)
                }
                None => (None, key),
            };
            if !KEYS.contains(&key) {
                return Err(SecurityConfigError(format!(
                    "unknown security setting {key} (served: {})",
                    KEYS.join(", ")
                )));
            }
            let map = match listener {
                Some(name) => c.per_listener.entry(name).or_default(),
                None => &mut c.global,
            };
            map.insert(key.to_string(), value.to_string());
        }
        Ok(c)
    }

    /// `key` for `listener`: its override, else the broker-wide value.
    pub fn get(&self, listener: &str, key: &str) -> Option<&str> {
        debug_assert!(KEYS.contains(&key), "{key} is declared in KEYS");
        self.per_listener
            .get(listener)
            .and_then(|m| m.get(key))
            .or_else(|| self.global.get(key))
            .map(String::as_str)
    }

    /// Listener names that have overrides (to check they name real listeners).
    pub fn overridden_listeners(&self) -> impl Iterator<Item = &str> {
        self.per_listener.keys().map(String::as_str)
    }
}

/// Takes the security keys out of a parsed config file: quoted dotted keys at the top
/// level (`"ssl.keystore.location" = …`) and tables under `listener` (TOML's
/// `[listener.name.external]` with dotted keys inside). What is left is the rest of
/// the file. Values must be strings, numbers or booleans.
pub fn take_from_file(
    table: &mut toml::Table,
) -> Result<Vec<(String, String)>, SecurityConfigError> {
    let mut out = Vec::new();
    let keys: Vec<String> = table
        .keys()
        .filter(|k| {
            KEYS.contains(&k.as_str()) || k.starts_with(LISTENER_PREFIX) || *k == "listener"
        })
        .cloned()
        .collect();
    for key in keys {
        if let Some(value) = table.remove(&key) {
            flatten(&key, value, &mut out)?;
        }
    }
    Ok(out)
}

fn flatten(
    key: &str,
    value: toml::Value,
    out: &mut Vec<(String, String)>,
) -> Result<(), SecurityConfigError> {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                flatten(&format!("{key}.{k}"), v, out)?;
            }
        }
        toml::Value::String(s) => out.push((key.to_string(), s)),
        toml::Value::Integer(i) => out.push((key.to_string(), i.to_string())),
        toml::Value::Boolean(b) => out.push((key.to_string(), b.to_string())),
        _ => {
            return Err(SecurityConfigError(format!(
                "{key} must be a string, a number or a boolean"
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_override_wins_over_the_broker_wide_key() {
        let c = SecurityConfig::from_pairs([
            ("ssl.client.auth", "none"),
            ("listener.name.external.ssl.client.auth", "required"),
        ])
        .expect("known keys");
        assert_eq!(c.get("EXTERNAL", "ssl.client.auth"), Some("required"));
        assert_eq!(c.get("INTERNAL", "ssl.client.auth"), Some("none"));
        assert_eq!(c.get("INTERNAL", "ssl.keystore.location"), None);
        assert_eq!(c.overridden_listeners().collect::<Vec<_>>(), ["EXTERNAL"]);
    }

    #[test]
    fn unknown_keys_and_empty_overrides_are_refused() {
        for bad in [
            "ssl.keystore.locaton",
            "listener.name.x",
            "listener.name.x.num.partitions",
        ] {
            assert!(SecurityConfig::from_pairs([(bad, "v")]).is_err(), "{bad}");
        }
    }

    #[test]
    fn file_keys_are_taken_quoted_or_as_listener_tables() {
        let mut t: toml::Table = toml::from_str(
            "\"num.partitions\" = 3\n\
             \"ssl.client.auth\" = \"required\"\n\
             \"listener.name.a.ssl.keystore.type\" = \"PEM\"\n\
             [listener.name.b]\n\
             \"ssl.keystore.location\" = \"/k.pem\"\n",
        )
        .expect("toml");
        let mut got = take_from_file(&mut t).expect("taken");
        got.sort();
        assert_eq!(
            got,
            [
                ("listener.name.a.ssl.keystore.type".into(), "PEM".into()),
                (
                    "listener.name.b.ssl.keystore.location".into(),
                    "/k.pem".into()
                ),
                ("ssl.client.auth".into(), "required".into()),
            ]
        );
        assert_eq!(t.keys().collect::<Vec<_>>(), ["num.partitions"]);
    }
}

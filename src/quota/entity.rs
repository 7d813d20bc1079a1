//! Quota entities and Kafka's precedence: which configured quota applies to a
//! connection, and which sensor (the "metric tags") its bytes are counted in.
//!
//! For a request from user `U` (always `ANONYMOUS`: corelog has no authentication,
//! and that is Kafka's principal on PLAINTEXT) and client id `C`, the first of these
//! entities that sets the quota key wins (Kafka's `DefaultQuotaCallback` order):
//!
//! 1. user=U, client-id=C        5. user=<default>, client-id=<default>
//! 2. user=U, client-id=<default> 6. user=<default>
//! 3. user=U                      7. client-id=C
//! 4. user=<default>, client-id=C 8. client-id=<default>
//!
//! The sensor keeps the dimensions of the winning entity with the *actual* names, as
//! Kafka's metric tags do: a `<default>` client-id quota gives every client id its own
//! sensor (each is held to the default), while a user quota puts all of that user's
//! clients in one sensor (they share it).
//!
//! Resolution is per quota key, so a client's produce and fetch quotas may come from
//! different entities. Pure functions; no state.

pub use corelog_shards::client_quota::{ClientQuotas, EntityName, QuotaEntity};

/// The user principal of every corelog connection.
pub const ANONYMOUS_USER: &str = "ANONYMOUS";

/// The quota keys Kafka accepts for user / client-id entities.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";

/// Whether a quota key's value must be a whole number (Kafka's LONG-typed keys).
pub fn key_is_integral(key: &str) -> Option<bool> {
    match key {
        PRODUCER_BYTE_RATE | CONSUMER_BYTE_RATE => Some(true),
        REQUEST_PERCENTAGE | CONTROLLER_MUTATION_RATE => Some(false),
        _ => None,
    }
}

/// The applicable quota: its value and the sensor its bytes are counted in.
#[derive(Debug, Clone, PartialEq)]
pub struct Applicable {
    pub quota: f64,
    pub sensor: String,
}

fn named(s: &str) -> Option<EntityName> {
    Some(EntityName::Named(s.to_string()))
}

/// The eight candidate entities in precedence order, with whether the sensor keeps
/// the user and the client-id dimension.
fn candidates(user: &str, client_id: &str) -> [(QuotaEntity, bool, bool); 8] {
    let d = || Some(EntityName::Default);
    let e = |u: Option<EntityName>, c: Option<EntityName>| QuotaEntity {
        user: u,
        client_id: c,
    };
    [
        (e(named(user), named(client_id)), true, true),
        (e(named(user), d()), true, true),
        (e(named(user), None), true, false),
        (e(d(), named(client_id)), true, true),
        (e(d(), d()), true, true),
        (e(d(), None), true, false),
        (e(None, named(client_id)), false, true),
        (e(None, d()), false, true),
    ]
}

/// The quota `key` that applies to (`user`, `client_id`), or `None` (unlimited).
pub fn resolve(
    quotas: &ClientQuotas,
    key: &str,
    user: &str,
    client_id: &str,
) -> Option<Applicable> {
    if quotas.entries.is_empty() {
        return None;
    }
    for (entity, keep_user, keep_client) in candidates(user, client_id) {
        if let Some(v) = quotas.get(&entity).and_then(|values| values.get(key)) {
            // Sensor names are unambiguous: user and client id are length-prefixed.
            let sensor = match (keep_user, keep_client) {
                (true, true) => format!("u{}:{user}c{}:{client_id}", user.len(), client_id.len()),
                (true, false) => format!("u{}:{user}", user.len()),
                _ => format!("c{}:{client_id}", client_id.len()),
            };
            return Some(Applicable { quota: *v, sensor });
        }
    }
    None
}

/// Why a quota entity, filter or operation is refused (all INVALID_REQUEST at the
/// edge, except `Storage`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuotaError {
    #[error("Invalid empty client quota entity")]
    EmptyEntity,
    #[error("Unknown entity type: {0}")]
    UnknownEntityType(String),
    #[error("Duplicate entity type: {0}")]
    DuplicateEntityType(String),
    #[error("Entity type {0} is not supported by corelog (user and client-id quotas only)")]
    UnsupportedEntityType(String),
    #[error("The entity is named more than once in the request")]
    DuplicateEntity,
    #[error("Unknown quota key: {0}")]
    UnknownKey(String),
    #[error("Duplicate quota key: {0}")]
    DuplicateKey(String),
    #[error("Invalid value {value} for quota {key}: {reason}")]
    InvalidValue {
        key: String,
        value: f64,
        reason: &'static str,
    },
    #[error("Invalid filter: {0}")]
    InvalidFilter(String),
    #[error("storing the quotas failed: {0}")]
    Storage(String),
    /// The cluster's bound on quota entities would be passed.
    #[error("{0}")]
    TooMany(String),
}

pub const ENTITY_USER: &str = "user";
pub const ENTITY_CLIENT_ID: &str = "client-id";
pub const ENTITY_IP: &str = "ip";

/// Builds an entity from wire components `(type, name; None = <default>)`.
pub fn entity_from<'a>(
    components: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, QuotaError> {
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    let mut any = false;
    for (kind, name) in components {
        any = true;
        let slot = match kind {
            ENTITY_USER => &mut entity.user,
            ENTITY_CLIENT_ID => &mut entity.client_id,
            ENTITY_IP => return Err(QuotaError::UnsupportedEntityType(kind.to_string())),
            other => return Err(QuotaError::UnknownEntityType(other.to_string())),
        };
        if slot.is_some() {
            return Err(QuotaError::DuplicateEntityType(kind.to_string()));
        }
        *slot = Some(match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        });
    }
    if !any {
        return Err(QuotaError::EmptyEntity);
    }
    Ok(entity)
}

/// Validates one AlterClientQuotas operation (Kafka: a known key; a set value finite
/// and above zero, whole for the byte rates; a removal's value is ignored).
pub fn op_from(
    key: &str,
    value: f64,
    remove: bool,
) -> Result<corelog_shards::client_quota::QuotaOp, QuotaError> {
    use corelog_shards::client_quota::QuotaOp;
    let integral = key_is_integral(key).ok_or_else(|| QuotaError::UnknownKey(key.to_string()))?;
    if remove {
        return Ok(QuotaOp::Remove(key.to_string()));
    }
    let bad = |reason| QuotaError::InvalidValue {
        key: key.to_string(),
        value,
        reason,
    };
    if !value.is_finite() {
        return Err(bad("not a finite number"));
    }
    if value <= 0.0 {
        return Err(bad("must be greater than 0"));
    }
    if integral && (value.fract() != 0.0 || value > i64::MAX as f64) {
        return Err(bad("must be a whole number of bytes per second"));
    }
    Ok(QuotaOp::Set(key.to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_shards::client_quota::{QuotaAlteration, QuotaOp};
    use proptest::prelude::*;

    fn set(q: &mut ClientQuotas, user: Option<EntityName>, client: Option<EntityName>, v: f64) {
        q.apply(&QuotaAlteration {
            entity: QuotaEntity {
                user,
                client_id: client,
            },
            ops: vec![QuotaOp::Set(PRODUCER_BYTE_RATE.into(), v)],
        });
    }

    #[test]
    fn precedence_and_sensors() {
        let mut q = ClientQuotas::default();
        assert_eq!(resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "a"), None);
        set(&mut q, None, Some(EntityName::Default), 8.0);
        let r = resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "a").expect("default client");
        assert_eq!(r.quota, 8.0);
        // Each client id has its own sensor under a default client-id quota.
        assert_ne!(
            r.sensor,
            resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "b")
                .expect("b")
                .sensor
        );
        set(&mut q, None, named("a"), 7.0);
        assert_eq!(
            resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "a").map(|r| r.quota),
            Some(7.0)
        );
        set(&mut q, Some(EntityName::Default), None, 6.0);
        let r = resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "a").expect("default user");
        assert_eq!(r.quota, 6.0);
        // A user quota is shared by all the user's clients.
        assert_eq!(
            r.sensor,
            resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "b")
                .expect("b")
                .sensor
        );
        set(&mut q, named("ANONYMOUS"), named("a"), 1.0);
        assert_eq!(
            resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "a").map(|r| r.quota),
            Some(1.0)
        );
        assert_eq!(
            resolve(&q, PRODUCER_BYTE_RATE, "ANONYMOUS", "b").map(|r| r.quota),
            Some(6.0)
        );
        // Another key is resolved on its own.
        assert_eq!(resolve(&q, CONSUMER_BYTE_RATE, "ANONYMOUS", "a"), None);
    }

    #[test]
    fn validation() {
        let e = |v: Vec<(&'static str, Option<&'static str>)>| entity_from(v.into_iter());
        assert_eq!(e(vec![]), Err(QuotaError::EmptyEntity));
        assert!(matches!(
            e(vec![("group", Some("x"))]),
            Err(QuotaError::UnknownEntityType(_))
        ));
        assert!(matches!(
            e(vec![("user", None), ("user", Some("a"))]),
            Err(QuotaError::DuplicateEntityType(_))
        ));
        assert!(matches!(
            e(vec![("ip", None)]),
            Err(QuotaError::UnsupportedEntityType(_))
        ));
        assert_eq!(
            e(vec![("client-id", Some("a")), ("user", None)]),
            Ok(QuotaEntity {
                user: Some(EntityName::Default),
                client_id: named("a")
            })
        );
        assert!(op_from(PRODUCER_BYTE_RATE, 1024.0, false).is_ok());
        assert!(op_from(PRODUCER_BYTE_RATE, -1.0, true).is_ok());
        assert!(matches!(
            op_from("bogus", 1.0, false),
            Err(QuotaError::UnknownKey(_))
        ));
        for bad in [0.0, -5.0, f64::NAN, f64::INFINITY, 1.5] {
            assert!(matches!(
                op_from(CONSUMER_BYTE_RATE, bad, false),
                Err(QuotaError::InvalidValue { .. })
            ));
        }
        assert!(op_from(REQUEST_PERCENTAGE, 12.5, false).is_ok());
    }

    proptest! {
        /// With any subset of the eight levels configured, the winner is the first
        /// configured level in Kafka's order.
        #[test]
        fn first_configured_level_wins(mask in 1u8..=255, client in "[a-z]{1,4}") {
            let mut q = ClientQuotas::default();
            let levels = candidates(ANONYMOUS_USER, &client);
            for (i, (entity, _, _)) in levels.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    set(&mut q, entity.user.clone(), entity.client_id.clone(), (i + 1) as f64);
                }
            }
            let expected = (0..8).find(|i| mask & (1 << i) != 0).map(|i| (i + 1) as f64);
            let got = resolve(&q, PRODUCER_BYTE_RATE, ANONYMOUS_USER, &client).map(|a| a.quota);
            prop_assert_eq!(got, expected);
        }
    }
}

//! Client quota overrides as the cluster metadata holds them (AlterClientQuotas).
//!
//! Invariants: `ClientQuotas::entries` is sorted by entity and holds each entity at
//! most once; no entry has an empty `values` map (removing the last key removes the
//! entry); an entity has at least one component. Values are validated at the protocol
//! edge (known key, finite, positive) before they are proposed; applying re-checks only
//! what keeps the invariants and the entity bound.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One component of a quota entity: Kafka's `<default>` (a null name on the wire) or
/// a specific name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    Default,
    Named(String),
}

/// A quota entity: a user, a client id, or both (ip quotas are not supported).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.client_id.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaEntry {
    pub entity: QuotaEntity,
    /// Quota key (`producer_byte_rate`, ...) → value.
    pub values: BTreeMap<String, f64>,
}

/// Most quota entities the cluster keeps (each is persisted with the metadata).
pub const QUOTA_ENTITIES_MAX: usize = 10_000;

/// Every client quota override of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientQuotas {
    pub entries: Vec<QuotaEntry>,
}

/// One change to one key of an entity's quotas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum QuotaOp {
    Set(String, f64),
    Remove(String),
}

/// AlterClientQuotas' entry, validated: one entity and its operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaAlteration {
    pub entity: QuotaEntity,
    pub ops: Vec<QuotaOp>,
}

impl ClientQuotas {
    /// The quotas set on exactly `entity`.
    pub fn get(&self, entity: &QuotaEntity) -> Option<&BTreeMap<String, f64>> {
        self.entries
            .binary_search_by(|e| e.entity.cmp(entity))
            .ok()
            .and_then(|i| self.entries.get(i))
            .map(|e| &e.values)
    }

    /// Applies `alt` in place, keeping the invariants (sorted, unique, no empty entry).
    pub fn apply(&mut self, alt: &QuotaAlteration) {
        let i = match self.entries.binary_search_by(|e| e.entity.cmp(&alt.entity)) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(
                    i,
                    QuotaEntry {
                        entity: alt.entity.clone(),
                        values: BTreeMap::new(),
                    },
                );
                i
            }
        };
        if let Some(entry) = self.entries.get_mut(i) {
            for op in &alt.ops {
                match op {
                    QuotaOp::Set(k, v) => {
                        entry.values.insert(k.clone(), *v);
                    }
                    QuotaOp::Remove(k) => {
                        entry.values.remove(k);
                    }
                }
            }
            if entry.values.is_empty() {
                self.entries.remove(i);
            }
        }
        debug_assert!(self.entries.windows(2).all(|w| match w {
            [a, b] => a.entity < b.entity,
            _ => true,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(c: &str) -> QuotaEntity {
        QuotaEntity {
            user: None,
            client_id: Some(EntityName::Named(c.into())),
        }
    }

    #[test]
    fn apply_keeps_sorted_unique_and_drops_empty_entries() {
        let mut q = ClientQuotas::default();
        for c in ["b", "a", "c", "a"] {
            q.apply(&QuotaAlteration {
                entity: client(c),
                ops: vec![QuotaOp::Set("producer_byte_rate".into(), 10.0)],
            });
        }
        assert_eq!(q.entries.len(), 3);
        assert!(q.get(&client("a")).is_some());
        q.apply(&QuotaAlteration {
            entity: client("a"),
            ops: vec![QuotaOp::Remove("producer_byte_rate".into())],
        });
        assert!(q.get(&client("a")).is_none());
        assert_eq!(q.entries.len(), 2);
        // Removing from an absent entity leaves nothing behind.
        q.apply(&QuotaAlteration {
            entity: client("zz"),
            ops: vec![QuotaOp::Remove("producer_byte_rate".into())],
        });
        assert_eq!(q.entries.len(), 2);
    }
}

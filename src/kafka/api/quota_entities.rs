//! What the client-quota APIs share: filters, entity names and entry validation. It
//! serves no API itself.
//!
//! DescribeClientQuotas (v0–v1) and AlterClientQuotas (v0–v1): Kafka's
//! `kafka-configs --entity-type users|clients` over the wire.
//!
//! Describe reads the metadata snapshot on this shard (no mesh hop). A filter
//! component matches an entity type exactly (a name), its `<default>` (match type 1),
//! or any value of that type (match type 2); `strict` excludes entities with other
//! types. An invalid filter fails the whole request (top-level INVALID_REQUEST, no
//! entries), as in Kafka.
//!
//! Alter validates every entry here (entity, keys, values; see `quota::entity`), each
//! entry failing on its own; valid entries go to the admin shard in one message and are
//! persisted in one metadata write, unless `validate_only`. ip entities are refused
//! (INVALID_REQUEST): corelog has no connection-rate quotas.

use crate::quota::entity::{QuotaError, ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER};
use corelog_shards::client_quota::EntityName;
use kafka_protocol::messages::DescribeClientQuotasRequest;
use kafka_protocol::protocol::StrBytes;
use std::collections::HashSet;

/// What one filter component asks of an entity's component.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Match {
    Exact(String),
    Default,
    Any,
}

/// A validated Describe filter: per entity type, what must match (ip filters match
/// nothing, since no ip quotas are ever stored).
#[derive(Debug, Default)]
pub(super) struct Filter {
    pub(super) user: Option<Match>,
    pub(super) client_id: Option<Match>,
    pub(super) ip: bool,
    pub(super) strict: bool,
}

pub(super) fn filter_from(req: &DescribeClientQuotasRequest) -> Result<Filter, QuotaError> {
    let mut f = Filter {
        strict: req.strict,
        ..Filter::default()
    };
    let mut seen = HashSet::new();
    for c in &req.components {
        let kind = c.entity_type.as_str();
        if !seen.insert(kind) {
            return Err(QuotaError::InvalidFilter(format!(
                "Duplicate {kind} filter component entity type"
            )));
        }
        let m = match (c.match_type, c._match.as_deref()) {
            (0, Some(name)) => Match::Exact(name.to_string()),
            (0, None) => {
                return Err(QuotaError::InvalidFilter(
                    "Unexpected null match for an exact match type".into(),
                ))
            }
            (1, None) => Match::Default,
            (2, None) => Match::Any,
            (1 | 2, Some(_)) => {
                return Err(QuotaError::InvalidFilter(format!(
                    "Unexpected match for match type {}",
                    c.match_type
                )))
            }
            (t, _) => {
                return Err(QuotaError::InvalidFilter(format!(
                    "Unexpected match type {t}"
                )))
            }
        };
        match kind {
            ENTITY_USER => f.user = Some(m),
            ENTITY_CLIENT_ID => f.client_id = Some(m),
            ENTITY_IP => f.ip = true,
            other => {
                return Err(QuotaError::InvalidFilter(format!(
                    "Unknown entity type: {other}"
                )))
            }
        }
    }
    if f.ip && (f.user.is_some() || f.client_id.is_some()) {
        return Err(QuotaError::InvalidFilter(
            "an ip filter component cannot be combined with user or client-id".into(),
        ));
    }
    Ok(f)
}

pub(super) fn component_matches(
    m: &Option<Match>,
    have: &Option<EntityName>,
    strict: bool,
) -> bool {
    match (m, have) {
        (None, None) => true,
        (None, Some(_)) => !strict,
        (Some(_), None) => false,
        (Some(Match::Any), Some(_)) => true,
        (Some(Match::Default), Some(n)) => *n == EntityName::Default,
        (Some(Match::Exact(want)), Some(EntityName::Named(n))) => want == n,
        (Some(Match::Exact(_)), Some(EntityName::Default)) => false,
    }
}

pub(super) fn wire_name(n: &EntityName) -> Option<StrBytes> {
    match n {
        EntityName::Default => None,
        EntityName::Named(s) => Some(StrBytes::from_string(s.clone())),
    }
}

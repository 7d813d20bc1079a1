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
//! entry failing on its own; valid entries go to the controller in one message and are
//! persisted in one metadata write, unless `validate_only`. ip entities are refused
//! (INVALID_REQUEST): corelog has no connection-rate quotas.

use super::admin::ask_controller;
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::{decode_body, encode_response, FrameError, RequestFrame};
use crate::quota::entity::{
    entity_from, op_from, QuotaError, ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER,
};
use bytes::BytesMut;
use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest,
    AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use shards::client_quota::{EntityName, QuotaAlteration, QuotaEntity};
use shards::mesh::{ControllerRequest, TopicError};
use std::collections::HashSet;

/// What one filter component asks of an entity's component.
#[derive(Debug, Clone, PartialEq)]
enum Match {
    Exact(String),
    Default,
    Any,
}

/// A validated Describe filter: per entity type, what must match (ip filters match
/// nothing, since no ip quotas are ever stored).
#[derive(Debug, Default)]
struct Filter {
    user: Option<Match>,
    client_id: Option<Match>,
    ip: bool,
    strict: bool,
}

fn filter_from(req: &DescribeClientQuotasRequest) -> Result<Filter, QuotaError> {
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

fn component_matches(m: &Option<Match>, have: &Option<EntityName>, strict: bool) -> bool {
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

fn wire_name(n: &EntityName) -> Option<StrBytes> {
    match n {
        EntityName::Default => None,
        EntityName::Named(s) => Some(StrBytes::from_string(s.clone())),
    }
}

pub fn describe(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: DescribeClientQuotasRequest = decode_body(frame)?;
    let mut body = DescribeClientQuotasResponse::default();
    match filter_from(&req) {
        Err(e) => {
            body.error_code = error_code::quota(&e).code();
            body.error_message = Some(StrBytes::from_string(e.to_string()));
            body.entries = None;
        }
        Ok(f) => {
            // The codec's default is an empty string; success is a null message.
            body.error_message = None;
            let meta = ctx.shard.metadata.snapshot();
            let mut entries = Vec::new();
            for entry in meta.client_quotas.entries.iter().filter(|_| !f.ip) {
                let e = &entry.entity;
                if !component_matches(&f.user, &e.user, f.strict)
                    || !component_matches(&f.client_id, &e.client_id, f.strict)
                {
                    continue;
                }
                let mut out = describe_client_quotas_response::EntryData::default();
                for (kind, name) in [(ENTITY_USER, &e.user), (ENTITY_CLIENT_ID, &e.client_id)] {
                    if let Some(n) = name {
                        let mut d = describe_client_quotas_response::EntityData::default();
                        d.entity_type = StrBytes::from_static_str(kind);
                        d.entity_name = wire_name(n);
                        out.entity.push(d);
                    }
                }
                for (k, v) in &entry.values {
                    let mut d = describe_client_quotas_response::ValueData::default();
                    d.key = StrBytes::from_string(k.clone());
                    d.value = *v;
                    out.values.push(d);
                }
                entries.push(out);
            }
            body.entries = Some(entries);
        }
    }
    error_code::count(ApiKey::DescribeClientQuotas, body.error_code);
    encode_response(
        ApiKey::DescribeClientQuotas,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

fn validate_entry(
    entry: &kafka_protocol::messages::alter_client_quotas_request::EntryData,
) -> Result<QuotaAlteration, QuotaError> {
    let entity: QuotaEntity = entity_from(
        entry
            .entity
            .iter()
            .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())),
    )?;
    let mut keys = HashSet::new();
    let mut ops = Vec::with_capacity(entry.ops.len());
    for op in &entry.ops {
        let key = op.key.as_str();
        if !keys.insert(key) {
            return Err(QuotaError::DuplicateKey(key.to_string()));
        }
        ops.push(op_from(key, op.value, op.remove)?);
    }
    Ok(QuotaAlteration { entity, ops })
}

pub async fn alter(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: AlterClientQuotasRequest = decode_body(frame)?;
    let mut outcomes: Vec<Result<Option<QuotaAlteration>, QuotaError>> = req
        .entries
        .iter()
        .map(|e| validate_entry(e).map(Some))
        .collect();
    // An entity named by two entries is refused in both (the order of two changes to
    // one entity would otherwise decide silently).
    let mut counts = std::collections::HashMap::new();
    for a in outcomes.iter().flatten().flatten() {
        *counts.entry(a.entity.clone()).or_insert(0usize) += 1;
    }
    for o in outcomes.iter_mut() {
        if let Ok(Some(a)) = o {
            if counts.get(&a.entity).copied().unwrap_or(0) > 1 {
                *o = Err(QuotaError::DuplicateEntity);
            }
        }
    }
    if !req.validate_only {
        let valid: Vec<(usize, QuotaAlteration)> = outcomes
            .iter_mut()
            .enumerate()
            .filter_map(|(i, o)| match o {
                Ok(a) => a.take().map(|a| (i, a)),
                Err(_) => None,
            })
            .collect();
        let (slots, alterations): (Vec<usize>, Vec<QuotaAlteration>) = valid.into_iter().unzip();
        let results = ask_controller(ctx, alterations.len(), |reply| {
            ControllerRequest::AlterClientQuotas { alterations, reply }
        })
        .await;
        for (i, r) in slots.into_iter().zip(results) {
            if let (Some(slot), Err(e)) = (outcomes.get_mut(i), r) {
                *slot = Err(match e {
                    TopicError::Storage(m) => QuotaError::Storage(m),
                    TopicError::InvalidConfig(m) => QuotaError::TooMany(m),
                    other => QuotaError::Storage(other.to_string()),
                });
            }
        }
    }
    let mut body = AlterClientQuotasResponse::default();
    for (entry, outcome) in req.entries.iter().zip(outcomes) {
        let mut out = alter_client_quotas_response::EntryData::default();
        out.error_message = None; // the codec's default is "", success is null
        for e in &entry.entity {
            let mut d = alter_client_quotas_response::EntityData::default();
            d.entity_type = e.entity_type.clone();
            d.entity_name = e.entity_name.clone();
            out.entity.push(d);
        }
        if let Err(e) = outcome {
            out.error_code = error_code::quota(&e).code();
            out.error_message = Some(StrBytes::from_string(e.to_string()));
        }
        error_code::count(ApiKey::AlterClientQuotas, out.error_code);
        body.entries.push(out);
    }
    encode_response(
        ApiKey::AlterClientQuotas,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

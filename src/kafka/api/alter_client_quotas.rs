//! AlterClientQuotas (v0–v1): each entry validated here (see `quota_entities`), the
//! valid ones persisted by the controller in one metadata write unless `validate_only`.

use super::admin_change::send_admin_change;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use crate::quota::entity::{entity_from, op_from, QuotaError};
use corelog_shards::client_quota::{QuotaAlteration, QuotaEntity};
use corelog_shards::mesh::{AdminChange, TopicError};
use kafka_protocol::messages::{
    alter_client_quotas_response, AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::HashSet;

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

pub struct AlterClientQuotas;

impl Handler for AlterClientQuotas {
    const KEY: ApiKey = ApiKey::AlterClientQuotas;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = AlterClientQuotasRequest;
    type Response = AlterClientQuotasResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
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
        // ALTER_CONFIGS on the cluster, else every entry is refused.
        let allowed = Access::new(ctx, call).allows_cluster(Op::AlterConfigs);
        if !req.validate_only && allowed {
            let valid: Vec<(usize, QuotaAlteration)> = outcomes
                .iter_mut()
                .enumerate()
                .filter_map(|(i, o)| match o {
                    Ok(a) => a.take().map(|a| (i, a)),
                    Err(_) => None,
                })
                .collect();
            let (slots, alterations): (Vec<usize>, Vec<QuotaAlteration>) =
                valid.into_iter().unzip();
            let results = send_admin_change(ctx, alterations.len(), |reply| {
                AdminChange::AlterClientQuotas { alterations, reply }
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
            if !allowed {
                out.error_code = ResponseError::ClusterAuthorizationFailed.code();
                out.error_message =
                    Some(StrBytes::from_static_str("Cluster authorization failed."));
            } else if let Err(e) = outcome {
                out.error_code = error_code::quota(&e).code();
                out.error_message = Some(StrBytes::from_string(e.to_string()));
            }
            body.entries.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for e in &r.entries {
            each(e.error_code);
        }
    }
}

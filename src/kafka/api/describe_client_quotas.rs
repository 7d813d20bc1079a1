//! DescribeClientQuotas (v0–v1): quotas matching a filter, read from the metadata
//! snapshot on this shard (see `quota_entities` for the matching rules).

use super::handler::{Call, Handler};
use super::quota_entities::{component_matches, filter_from, wire_name};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use crate::quota::entity::{ENTITY_CLIENT_ID, ENTITY_USER};
use kafka_protocol::messages::{
    describe_client_quotas_response, ApiKey, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct DescribeClientQuotas;

impl Handler for DescribeClientQuotas {
    const KEY: ApiKey = ApiKey::DescribeClientQuotas;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = DescribeClientQuotasRequest;
    type Response = DescribeClientQuotasResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DescribeClientQuotasResponse::default();
        // DESCRIBE_CONFIGS on the cluster.
        if !Access::new(ctx, call).allows_cluster(Op::DescribeConfigs) {
            body.error_code = ResponseError::ClusterAuthorizationFailed.code();
            body.error_message = Some(StrBytes::from_static_str("Cluster authorization failed."));
            body.entries = None;
            return Ok(body);
        }
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
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

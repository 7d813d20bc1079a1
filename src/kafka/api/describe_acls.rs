//! DescribeAcls (v0–v3): the ACLs a filter selects (`AclFilter::matches`: a MATCH
//! filter with a name gives the ACLs that apply to that resource), grouped by resource
//! pattern, from this broker's metadata image. The caller needs DESCRIBE on the cluster;
//! a filter Kafka calls UNKNOWN is INVALID_REQUEST; without an authorizer the answer is
//! SECURITY_DISABLED.

use super::acl_requests::{filter, gate};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::Op;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{ApiKey, DescribeAclsRequest, DescribeAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

pub struct DescribeAcls;

impl Handler for DescribeAcls {
    const KEY: ApiKey = ApiKey::DescribeAcls;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = DescribeAclsRequest;
    type Response = DescribeAclsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DescribeAclsResponse::default();
        let checked = gate(ctx, call, Op::Describe)
            .map_err(|(code, message)| (code, message.to_string()))
            .and_then(|()| {
                filter(
                    call.version,
                    req.resource_type_filter,
                    req.resource_name_filter.as_deref(),
                    req.pattern_type_filter,
                    req.principal_filter.as_deref(),
                    req.host_filter.as_deref(),
                    req.operation,
                    req.permission_type,
                )
                .map_err(|m| (ResponseError::InvalidRequest, m))
            });
        let filter = match checked {
            Ok(f) => f,
            Err((code, message)) => {
                body.error_code = code.code();
                body.error_message = Some(StrBytes::from_string(message));
                return Ok(body);
            }
        };
        body.error_message = None;
        let meta = ctx.shard.metadata.snapshot();
        let mut by_pattern: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
        for b in meta.acls.matching(&filter) {
            by_pattern
                .entry((
                    b.resource_type.wire(),
                    &b.resource_name,
                    b.pattern_type.wire(),
                ))
                .or_default()
                .push(
                    AclDescription::default()
                        .with_principal(StrBytes::from_string(b.principal.clone()))
                        .with_host(StrBytes::from_string(b.host.clone()))
                        .with_operation(b.operation.wire())
                        .with_permission_type(b.permission.wire()),
                );
        }
        body.resources = by_pattern
            .into_iter()
            .map(|((t, name, p), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(t)
                    .with_resource_name(StrBytes::from_string(name.to_string()))
                    .with_pattern_type(p)
                    .with_acls(acls)
            })
            .collect();
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

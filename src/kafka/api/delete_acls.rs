//! DeleteAcls (v0–v3): every ACL any filter selects is removed through the metadata
//! quorum, in one command; each filter's result lists the ACLs it selected (matched
//! against the ACLs as they were before the request, as Kafka does). A filter Kafka
//! calls UNKNOWN is INVALID_REQUEST for that filter alone. The caller needs ALTER on the
//! cluster; without an authorizer the answer is SECURITY_DISABLED.

use super::acl_requests::{filter, gate};
use super::admin_change::ask_admin_shard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::Op;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_controller::acl::AclFilter;
use corelog_shards::mesh::{AdminChange, TopicError};
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{ApiKey, DeleteAclsRequest, DeleteAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct DeleteAcls;

impl Handler for DeleteAcls {
    const KEY: ApiKey = ApiKey::DeleteAcls;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = DeleteAclsRequest;
    type Response = DeleteAclsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DeleteAclsResponse::default();
        if let Err((code, message)) = gate(ctx, call, Op::Alter) {
            body.filter_results = req
                .filters
                .iter()
                .map(|_| failed(code, message.into()))
                .collect();
            return Ok(body);
        }
        let checked: Vec<Result<AclFilter, String>> = req
            .filters
            .iter()
            .map(|f| {
                filter(
                    call.version,
                    f.resource_type_filter,
                    f.resource_name_filter.as_deref(),
                    f.pattern_type_filter,
                    f.principal_filter.as_deref(),
                    f.host_filter.as_deref(),
                    f.operation,
                    f.permission_type,
                )
            })
            .collect();
        let valid: Vec<AclFilter> = checked
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let deleted = if valid.is_empty() {
            Ok(Vec::new())
        } else {
            ask_admin_shard(ctx, |reply| AdminChange::DeleteAcls {
                filters: valid,
                reply,
            })
            .await
            .unwrap_or_else(|| Err(TopicError::Storage("the controller is unavailable".into())))
        };
        let mut deleted = match deleted {
            Ok(v) => v.into_iter().map(Ok).collect::<Vec<_>>().into_iter(),
            Err(e) => vec![Err(e); checked.len()].into_iter(),
        };
        body.filter_results = checked
            .into_iter()
            .map(|r| match r {
                Err(message) => failed(ResponseError::InvalidRequest, message),
                Ok(_) => match deleted.next() {
                    Some(Ok(bindings)) => DeleteAclsFilterResult::default()
                        .with_error_message(None)
                        .with_matching_acls(
                            bindings
                                .into_iter()
                                .map(|b| {
                                    DeleteAclsMatchingAcl::default()
                                        .with_error_message(None)
                                        .with_resource_type(b.resource_type.wire())
                                        .with_resource_name(StrBytes::from_string(b.resource_name))
                                        .with_pattern_type(b.pattern_type.wire())
                                        .with_principal(StrBytes::from_string(b.principal))
                                        .with_host(StrBytes::from_string(b.host))
                                        .with_operation(b.operation.wire())
                                        .with_permission_type(b.permission.wire())
                                })
                                .collect(),
                        ),
                    Some(Err(e)) => failed(error_code::topic(&e), e.to_string()),
                    None => failed(ResponseError::UnknownServerError, "no result".into()),
                },
            })
            .collect();
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        r.filter_results.iter().for_each(|x| each(x.error_code));
    }
}

fn failed(code: ResponseError, message: String) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default()
        .with_error_code(code.code())
        .with_error_message(Some(StrBytes::from_string(message)))
}

//! CreateAcls (v0–v3): ACLs committed through the metadata quorum. Each creation is
//! checked first (Kafka's rules and messages: `corelog_controller::acl`); the valid ones
//! are committed as one command and answered once this broker has applied it, so the
//! next request on any connection is decided by them. The caller needs ALTER on the
//! cluster (CLUSTER_AUTHORIZATION_FAILED for every creation); without an authorizer the
//! answer is SECURITY_DISABLED.

use super::acl_requests::{gate, pattern_type};
use super::admin_change::send_admin_change;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::Op;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_controller::acl::{AclBinding, AclOperation, AclPermission, ResourceType};
use corelog_shards::mesh::AdminChange;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{ApiKey, CreateAclsRequest, CreateAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct CreateAcls;

impl Handler for CreateAcls {
    const KEY: ApiKey = ApiKey::CreateAcls;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = CreateAclsRequest;
    type Response = CreateAclsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = CreateAclsResponse::default();
        if let Err((code, message)) = gate(ctx, call, Op::Alter) {
            body.results = req
                .creations
                .iter()
                .map(|_| failed(code, message.into()))
                .collect();
            return Ok(body);
        }
        let checked: Vec<Result<AclBinding, String>> = req
            .creations
            .iter()
            .map(|c| {
                AclBinding::validate(
                    ResourceType::from_wire(c.resource_type),
                    &c.resource_name,
                    pattern_type(call.version, c.resource_pattern_type),
                    &c.principal,
                    &c.host,
                    AclOperation::from_wire(c.operation),
                    AclPermission::from_wire(c.permission_type),
                )
                .map_err(|e| e.0)
            })
            .collect();
        let valid: Vec<AclBinding> = checked
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let mut committed = send_admin_change(ctx, valid.len(), |reply| AdminChange::CreateAcls {
            bindings: valid,
            reply,
        })
        .await
        .into_iter();
        body.results = checked
            .into_iter()
            .map(|r| match r {
                Err(message) => failed(ResponseError::InvalidRequest, message),
                Ok(_) => match committed.next() {
                    Some(Ok(())) => AclCreationResult::default().with_error_message(None),
                    Some(Err(e)) => failed(error_code::topic(&e), e.to_string()),
                    None => failed(ResponseError::UnknownServerError, "no result".into()),
                },
            })
            .collect();
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        r.results.iter().for_each(|x| each(x.error_code));
    }
}

fn failed(code: ResponseError, message: String) -> AclCreationResult {
    AclCreationResult::default()
        .with_error_code(code.code())
        .with_error_message(Some(StrBytes::from_string(message)))
}

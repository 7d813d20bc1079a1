//! What CreateAcls, DescribeAcls and DeleteAcls share: who may send them (an authorizer
//! must be configured — SECURITY_DISABLED otherwise — and the principal needs `op` on
//! the cluster) and a filter from its wire fields (v0 has no pattern type: LITERAL). It
//! serves no API itself.

use super::handler::Call;
use super::Ctx;
use crate::kafka::access::{Access, Op};
use corelog_controller::acl::{AclFilter, AclOperation, AclPermission, PatternType, ResourceType};
use kafka_protocol::ResponseError;

/// `Err`: the code and Kafka's message every item of the request is answered with.
pub(super) fn gate(
    ctx: &Ctx,
    call: &Call<'_>,
    op: Op,
) -> Result<(), (ResponseError, &'static str)> {
    let access = Access::new(ctx, call);
    if !access.enabled() {
        return Err((
            ResponseError::SecurityDisabled,
            "No Authorizer is configured.",
        ));
    }
    if !access.allows_cluster(op) {
        return Err((
            ResponseError::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        ));
    }
    Ok(())
}

/// The pattern type a request of `version` names (v0: every ACL is LITERAL).
pub(super) fn pattern_type(version: i16, wire: i8) -> Option<PatternType> {
    if version == 0 {
        Some(PatternType::Literal)
    } else {
        PatternType::from_wire(wire)
    }
}

/// A DescribeAcls or DeleteAcls filter; `Err` is INVALID_REQUEST's message.
#[allow(clippy::too_many_arguments)]
pub(super) fn filter(
    version: i16,
    resource_type: i8,
    resource_name: Option<&str>,
    pattern: i8,
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, String> {
    AclFilter::validate(
        ResourceType::from_wire(resource_type),
        resource_name,
        pattern_type(version, pattern),
        principal,
        host,
        AclOperation::from_wire(operation),
        AclPermission::from_wire(permission),
    )
    .map_err(|e| e.0)
}

//! DescribeGroups (v0–v5): state, protocol and members of each group, with KIP-430
//! authorized operations (v3+).

use super::group_routing::{ask_coordinator, s, sb};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct DescribeGroups;

impl Handler for DescribeGroups {
    const KEY: ApiKey = ApiKey::DescribeGroups;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = DescribeGroupsRequest;
    type Response = DescribeGroupsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let mut body = DescribeGroupsResponse::default();
        let access = Access::new(ctx, call);
        for g in &req.groups {
            let group = s(&g.0);
            let mut out = DescribedGroup::default();
            out.group_id = g.clone();
            if !access.allows(Op::Describe, Resource::Group, &group) {
                out.error_code = ResponseError::GroupAuthorizationFailed.code();
                body.groups.push(out);
                continue;
            }
            if v >= 3 {
                out.authorized_operations = crate::kafka::authorized_operations::if_requested(
                    req.include_authorized_operations,
                    access.operations(
                        crate::kafka::authorized_operations::GROUP,
                        Resource::Group,
                        &group,
                    ),
                );
            }
            match ask_coordinator(
                ctx,
                &group,
                GroupOp::Describe {
                    group: group.clone(),
                },
            )
            .await
            {
                Ok(GroupAnswer::Described(d)) => {
                    out.group_state = sb(d.state);
                    out.protocol_type = sb(d.protocol_type);
                    out.protocol_data = sb(d.protocol);
                    out.members = d
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut dm = DescribedGroupMember::default();
                            dm.member_id = sb(m.member_id);
                            if v >= 4 {
                                dm.group_instance_id = m.group_instance_id.map(sb);
                            }
                            dm.client_id = sb(m.client_id);
                            dm.client_host = sb(m.client_host);
                            dm.member_metadata = m.metadata;
                            dm.member_assignment = m.assignment;
                            dm
                        })
                        .collect();
                }
                Err(e) => out.error_code = crate::kafka::error_code::group(&e).code(),
                _ => out.error_code = ResponseError::CoordinatorNotAvailable.code(),
            }
            body.groups.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for g in &r.groups {
            each(g.error_code);
        }
    }
}

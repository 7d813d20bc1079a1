//! JoinGroup (v0–v9) of the classic group protocol, answered by the group's coordinator
//! shard (`group_routing`): member ids, static members (v5+) and KIP-394's required known
//! member id (v4+).

use super::group_routing::{ask_coordinator_to_read, code, s, sb, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::*;

pub struct JoinGroup;

impl Handler for JoinGroup {
    const KEY: ApiKey = ApiKey::JoinGroup;
    const VERSIONS: (i16, i16) = (0, 9);
    type Request = JoinGroupRequest;
    type Response = JoinGroupResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let group = s(&req.group_id.0);
        let op = GroupOp::Join(JoinRequest {
            group: group.clone(),
            member_id: s(&req.member_id),
            group_instance_id: req.group_instance_id.as_ref().map(s),
            client_id: call.header.client_id.as_ref().map(s).unwrap_or_default(),
            client_host: format!("/{}", call.peer.ip()),
            session_timeout_ms: req.session_timeout_ms,
            // v0 has no rebalance timeout: it is the session timeout.
            rebalance_timeout_ms: if v >= 1 {
                req.rebalance_timeout_ms
            } else {
                req.session_timeout_ms
            },
            protocol_type: s(&req.protocol_type),
            protocols: req
                .protocols
                .iter()
                .map(|p| Protocol {
                    name: s(&p.name),
                    metadata: p.metadata.clone(),
                })
                .collect(),
            require_known_member_id: v >= 4,
        });
        let answer = match ask_coordinator_to_read(ctx, call, &group, op).await {
            Ok(GroupAnswer::Join(a)) => a,
            Err(e) => JoinAnswer::error(e, s(&req.member_id)),
            _ => JoinAnswer::error(unavailable(), s(&req.member_id)),
        };
        let mut body = JoinGroupResponse::default();
        body.error_code = code(&answer.error);
        body.generation_id = answer.generation;
        if v >= 9 {
            body.skip_assignment = answer.skip_assignment;
        }
        if v >= 7 {
            body.protocol_type = answer.protocol_type.map(sb);
        }
        body.protocol_name = if v >= 7 {
            answer.protocol_name.map(sb)
        } else {
            // Before v7 the field is not nullable.
            Some(sb(answer.protocol_name.unwrap_or_default()))
        };
        body.leader = sb(answer.leader);
        body.member_id = sb(answer.member_id);
        body.members = answer
            .members
            .into_iter()
            .map(|m| {
                let mut out = JoinGroupResponseMember::default();
                out.member_id = sb(m.member_id);
                if v >= 5 {
                    out.group_instance_id = m.group_instance_id.map(sb);
                }
                out.metadata = m.metadata;
                out
            })
            .collect();
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

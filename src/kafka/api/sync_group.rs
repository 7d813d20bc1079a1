//! SyncGroup (v0–v5): the leader's assignment handed to every member by the coordinator
//! shard; v5 names the protocol type and name.

use super::group_routing::{ask_coordinator_to_read, code, s, sb, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::*;

pub struct SyncGroup;

impl Handler for SyncGroup {
    const KEY: ApiKey = ApiKey::SyncGroup;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = SyncGroupRequest;
    type Response = SyncGroupResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let group = s(&req.group_id.0);
        let op = GroupOp::Sync(SyncRequest {
            group: group.clone(),
            generation: req.generation_id,
            member_id: s(&req.member_id),
            group_instance_id: req.group_instance_id.as_ref().map(s),
            protocol_type: req.protocol_type.as_ref().map(s),
            protocol_name: req.protocol_name.as_ref().map(s),
            assignments: req
                .assignments
                .iter()
                .map(|a| (s(&a.member_id), a.assignment.clone()))
                .collect(),
        });
        let answer = match ask_coordinator_to_read(ctx, call, &group, op).await {
            Ok(GroupAnswer::Sync(a)) => a,
            Err(e) => SyncAnswer::error(e),
            _ => SyncAnswer::error(unavailable()),
        };
        let mut body = SyncGroupResponse::default();
        body.error_code = code(&answer.error);
        if v >= 5 {
            body.protocol_type = answer.protocol_type.map(sb);
            body.protocol_name = answer.protocol_name.map(sb);
        }
        body.assignment = answer.assignment;
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

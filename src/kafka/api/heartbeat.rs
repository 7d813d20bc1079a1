//! Heartbeat (v0–v4): keeps a member's session alive and tells it of a rebalance.

use super::group_routing::{ask_coordinator_to_read, code, s, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::*;

pub struct Heartbeat;

impl Handler for Heartbeat {
    const KEY: ApiKey = ApiKey::Heartbeat;
    const VERSIONS: (i16, i16) = (0, 4);
    type Request = kafka_protocol::messages::HeartbeatRequest;
    type Response = HeartbeatResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let group = s(&req.group_id.0);
        let op = GroupOp::Heartbeat(corelog_shards::group::types::HeartbeatRequest {
            group: group.clone(),
            generation: req.generation_id,
            member_id: s(&req.member_id),
            group_instance_id: req.group_instance_id.as_ref().map(s),
        });
        let result = match ask_coordinator_to_read(ctx, call, &group, op).await {
            Ok(GroupAnswer::Done(r)) => r,
            Err(e) => Err(e),
            _ => Err(unavailable()),
        };
        let mut body = HeartbeatResponse::default();
        body.error_code = code(&result.err());
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

//! LeaveGroup (v0–v5): one member (v0–v2) or a batch of members (v3+, KIP-345) leave,
//! each with its own error.

use super::group_routing::{ask_coordinator_to_read, code, s, sb, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::*;

pub struct LeaveGroup;

impl Handler for LeaveGroup {
    const KEY: ApiKey = ApiKey::LeaveGroup;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = LeaveGroupRequest;
    type Response = LeaveGroupResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let group = s(&req.group_id.0);
        // v0–v2 name one member; v3+ a batch (KIP-345).
        let members: Vec<LeavingMember> = if v >= 3 {
            req.members
                .iter()
                .map(|m| LeavingMember {
                    member_id: s(&m.member_id),
                    group_instance_id: m.group_instance_id.as_ref().map(s),
                })
                .collect()
        } else {
            vec![LeavingMember {
                member_id: s(&req.member_id),
                group_instance_id: None,
            }]
        };
        let answer = match ask_coordinator_to_read(
            ctx,
            call,
            &group,
            GroupOp::Leave {
                group: group.clone(),
                members: members.clone(),
            },
        )
        .await
        {
            Ok(GroupAnswer::Leave(r)) => r,
            Err(e) => Err(e),
            _ => Err(unavailable()),
        };
        let mut body = LeaveGroupResponse::default();
        match answer {
            Err(e) => body.error_code = error_code::group(&e).code(),
            Ok(per_member) => {
                if v >= 3 {
                    for (m, r) in members.into_iter().zip(per_member) {
                        let mut out = MemberResponse::default();
                        out.member_id = sb(m.member_id);
                        out.group_instance_id = m.group_instance_id.map(sb);
                        out.error_code = code(&r.err());
                        body.members.push(out);
                    }
                } else if let Some(Err(e)) = per_member.into_iter().next() {
                    body.error_code = error_code::group(&e).code();
                }
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for m in &r.members {
            each(m.error_code);
        }
    }
}

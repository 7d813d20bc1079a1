//! DeleteGroups (v0–v2): empty groups only (NON_EMPTY_GROUP otherwise), offsets included;
//! for a share group (KIP-932), the share coordinator's state of its partitions first.

use super::group_routing::{ask_coordinator, code, s};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct DeleteGroups;

impl Handler for DeleteGroups {
    const KEY: ApiKey = ApiKey::DeleteGroups;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DeleteGroupsRequest;
    type Response = DeleteGroupsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DeleteGroupsResponse::default();
        let access = Access::new(ctx, call);
        for g in &req.groups_names {
            let group = s(&g.0);
            let mut out = DeletableGroupResult::default();
            out.group_id = g.clone();
            if !access.allows(Op::Delete, Resource::Group, &group) {
                out.error_code = ResponseError::GroupAuthorizationFailed.code();
                body.results.push(out);
                continue;
            }
            // A share group's state goes first (Kafka's order): a group whose state
            // cannot be deleted stays, with that error.
            if let Ok(scope) = super::share_admin::scope(ctx, &group).await {
                if !scope.empty {
                    out.error_code = ResponseError::NonEmptyGroup.code();
                    body.results.push(out);
                    continue;
                }
                if let Err(code) =
                    super::share_admin::delete_state(ctx, &group, &scope.partitions).await
                {
                    out.error_code = code;
                    body.results.push(out);
                    continue;
                }
            }
            out.error_code = match ask_coordinator(
                ctx,
                &group,
                GroupOp::Delete {
                    group: group.clone(),
                },
            )
            .await
            {
                Ok(GroupAnswer::Done(r)) => code(&r.err()),
                Err(e) => crate::kafka::error_code::group(&e).code(),
                _ => ResponseError::CoordinatorNotAvailable.code(),
            };
            body.results.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for g in &r.results {
            each(g.error_code);
        }
    }
}

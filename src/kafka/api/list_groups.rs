//! ListGroups (v0–v5): every shard's groups, filtered by state (v4+) and type (v5:
//! "classic", or "consumer" for the groups of KIP-848's protocol).

use super::group_routing::{s, sb};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource, CLUSTER_NAME};
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use corelog_shards::mesh::ShardMessage;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct ListGroups;

impl Handler for ListGroups {
    const KEY: ApiKey = ApiKey::ListGroups;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = ListGroupsRequest;
    type Response = ListGroupsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let calls = ctx.shard.peers.call_each(|reply| ShardMessage::Group {
            op: Box::new(GroupOp::List),
            reply,
        });
        let filter: Vec<String> = req
            .states_filter
            .iter()
            .map(|x| s(x).to_ascii_lowercase())
            .collect();
        // v5 (KIP-848) filters by group type.
        let types: Vec<String> = req
            .types_filter
            .iter()
            .map(|x| s(x).to_ascii_lowercase())
            .collect();
        // DESCRIBE on the cluster lists every group; else those the principal may
        // describe (Kafka's rule, without a refusal).
        let access = Access::new(ctx, call);
        let all_groups = access.may(Op::Describe, Resource::Cluster, CLUSTER_NAME);
        let mut body = ListGroupsResponse::default();
        for answer in calls.await {
            match answer {
                Some(GroupAnswer::Listed(groups)) => {
                    for g in groups {
                        if (!types.is_empty() && !types.iter().any(|t| t == g.group_type))
                            || (!filter.is_empty()
                                && !filter.contains(&g.state.to_ascii_lowercase()))
                            || !(all_groups || access.may(Op::Describe, Resource::Group, &g.group))
                        {
                            continue;
                        }
                        let mut out = ListedGroup::default();
                        out.group_id = GroupId(sb(g.group));
                        out.protocol_type = sb(g.protocol_type);
                        if v >= 4 {
                            out.group_state = sb(g.state);
                        }
                        if v >= 5 {
                            out.group_type = sb(g.group_type.to_string());
                        }
                        body.groups.push(out);
                    }
                }
                _ => body.error_code = ResponseError::CoordinatorNotAvailable.code(),
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

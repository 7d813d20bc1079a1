//! ShareGroupDescribe (v1, KIP-932): each share group's state, epochs, assignor and
//! members, with the partitions each reads.
//!
//! As Kafka: UNSUPPORTED_VERSION per group while the cluster's `share.version` is 0;
//! DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED otherwise); a group that does not
//! exist or is of another type is GROUP_ID_NOT_FOUND, state Dead; partitions are named
//! by topic id and name, the name as the cluster metadata has it (a topic deleted
//! meanwhile is left out).

use super::group_routing::{ask_coordinator, s, sb};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::group::consumer::assignment::Assignment;
use corelog_shards::group::types::{GroupAnswer, GroupError, GroupOp};
use corelog_shards::metadata::ClusterMetadata;
use kafka_protocol::messages::share_group_describe_response::{
    Assignment as WireAssignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct ShareGroupDescribe;

impl Handler for ShareGroupDescribe {
    const KEY: ApiKey = ApiKey::ShareGroupDescribe;
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = ShareGroupDescribeRequest;
    type Response = ShareGroupDescribeResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ShareGroupDescribeResponse::default();
        let access = Access::new(ctx, call);
        let enabled = super::share_groups_enabled(ctx);
        for g in &req.group_ids {
            let group = s(&g.0);
            let mut out = DescribedGroup::default();
            out.group_id = g.clone();
            if !enabled {
                out.error_code = ResponseError::UnsupportedVersion.code();
                body.groups.push(out);
                continue;
            }
            if !access.allows(Op::Describe, Resource::Group, &group) {
                out.error_code = ResponseError::GroupAuthorizationFailed.code();
                body.groups.push(out);
                continue;
            }
            out.authorized_operations = crate::kafka::authorized_operations::if_requested(
                req.include_authorized_operations,
                access.operations(
                    crate::kafka::authorized_operations::GROUP,
                    Resource::Group,
                    &group,
                ),
            );
            let op = GroupOp::ShareDescribe {
                group: group.clone(),
            };
            let answer = match ask_coordinator(ctx, &group, op).await {
                Ok(GroupAnswer::ShareDescribed(r)) => r,
                Err(e) => Err(e),
                _ => Err(GroupError::CoordinatorNotAvailable),
            };
            match answer {
                Ok(d) => {
                    let meta = ctx.shard.metadata.snapshot();
                    out.group_state = sb(d.state);
                    out.group_epoch = d.epoch;
                    out.assignment_epoch = d.assignment_epoch;
                    out.assignor_name = sb(d.assignor);
                    out.members = d
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut w = Member::default();
                            w.member_id = sb(m.member_id);
                            w.rack_id = m.rack_id.map(sb);
                            w.member_epoch = m.epoch;
                            w.client_id = sb(m.client_id);
                            w.client_host = sb(m.client_host);
                            w.subscribed_topic_names =
                                m.subscribed.into_iter().map(|t| TopicName(sb(t))).collect();
                            w.assignment = wire(&meta, &m.assigned);
                            w
                        })
                        .collect();
                }
                Err(e) => {
                    out.error_code = crate::kafka::error_code::group(&e).code();
                    out.group_state = sb("Dead");
                    if e == GroupError::GroupIdNotFound {
                        out.error_message =
                            Some(sb(format!("Group {group} is not a share group.")));
                    }
                }
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

fn wire(meta: &ClusterMetadata, a: &Assignment) -> WireAssignment {
    let mut w = WireAssignment::default();
    w.topic_partitions = a
        .topics()
        .iter()
        .filter_map(|(id, ps)| {
            let t = meta.topic_by_id(*id)?;
            let mut tp = TopicPartitions::default();
            tp.topic_id = *id;
            tp.topic_name = TopicName(sb(t.name.clone()));
            tp.partitions = ps.iter().copied().collect();
            Some(tp)
        })
        .collect();
    w
}

//! ConsumerGroupDescribe (v0–v1, KIP-848): each consumer-protocol group's state, epochs,
//! assignor and members, with what each holds and what its target gives it.
//!
//! As Kafka: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED otherwise); a group that
//! does not exist or is a classic one is GROUP_ID_NOT_FOUND (the AdminClient then asks
//! DescribeGroups); partitions are named by topic id and name, the name as the cluster
//! metadata has it (a topic deleted meanwhile is left out).

use super::group_routing::{ask_coordinator, s, sb};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::group::consumer::assignment::Assignment;
use corelog_shards::group::types::{GroupAnswer, GroupError, GroupOp};
use corelog_shards::metadata::ClusterMetadata;
use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as WireAssignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

/// Kafka's `member_type` (v1) of a member that speaks the consumer protocol, and of one
/// that speaks the classic protocol inside a consumer group (a migration under way).
const MEMBER_TYPE_CONSUMER: i8 = 1;
const MEMBER_TYPE_CLASSIC: i8 = 0;

pub struct ConsumerGroupDescribe;

impl Handler for ConsumerGroupDescribe {
    const KEY: ApiKey = ApiKey::ConsumerGroupDescribe;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = ConsumerGroupDescribeRequest;
    type Response = ConsumerGroupDescribeResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ConsumerGroupDescribeResponse::default();
        let access = Access::new(ctx, call);
        for g in &req.group_ids {
            let group = s(&g.0);
            let mut out = DescribedGroup::default();
            out.group_id = g.clone();
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
            let op = GroupOp::ConsumerDescribe {
                group: group.clone(),
            };
            let answer = match ask_coordinator(ctx, &group, op).await {
                Ok(GroupAnswer::ConsumerDescribed(r)) => r,
                Err(e) => Err(e),
                _ => Err(GroupError::CoordinatorNotAvailable),
            };
            match answer {
                Ok(d) => {
                    let meta = ctx.shard.metadata.snapshot();
                    out.group_state = sb(d.state.name());
                    out.group_epoch = d.epoch;
                    out.assignment_epoch = d.assignment_epoch;
                    out.assignor_name = sb(d.assignor);
                    out.members = d
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut w = Member::default();
                            let md = m.metadata;
                            w.member_id = sb(m.member_id);
                            w.instance_id = md.instance_id.map(sb);
                            w.rack_id = md.rack_id.map(sb);
                            w.member_epoch = m.member_epoch;
                            w.client_id = sb(md.client_id);
                            w.client_host = sb(md.client_host);
                            w.subscribed_topic_names = md
                                .subscribed_topic_names
                                .into_iter()
                                .map(|t| TopicName(sb(t)))
                                .collect();
                            w.member_type = if md.classic.is_some() {
                                MEMBER_TYPE_CLASSIC
                            } else {
                                MEMBER_TYPE_CONSUMER
                            };
                            w.subscribed_topic_regex = md.subscribed_topic_regex.map(sb);
                            w.assignment = wire(&meta, &m.assignment);
                            w.target_assignment = wire(&meta, &m.target);
                            w
                        })
                        .collect();
                }
                Err(e) => {
                    out.error_code = crate::kafka::error_code::group(&e).code();
                    out.group_state = sb("Dead");
                    if e == GroupError::GroupIdNotFound {
                        out.error_message =
                            Some(sb(format!("Group {group} is not a consumer group.")));
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

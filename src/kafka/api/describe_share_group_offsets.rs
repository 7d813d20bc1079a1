//! DescribeShareGroupOffsets (v0, KIP-932; `kafka-share-groups --describe`): each share
//! partition's start offset (everything before it delivered and done) and the leader
//! epoch that wrote it, from the share coordinator.
//!
//! As Kafka: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) and on each topic
//! (TOPIC_AUTHORIZATION_FAILED for its partitions); a missing group, or one of another
//! type, is GROUP_ID_NOT_FOUND; no topics named means every share partition the group
//! has state for; a partition without state, of an unknown topic, or whose share
//! coordinator cannot answer now has start offset -1 without an error, as OffsetFetch
//! answers an offset never committed.

use super::group_routing::{s, sb};
use super::handler::{Call, Handler};
use super::share_admin;
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::share::coordinator::StateOp;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup as GroupOut,
    DescribeShareGroupOffsetsResponsePartition as PartitionOut,
    DescribeShareGroupOffsetsResponseTopic as TopicOut,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct DescribeShareGroupOffsets;

impl Handler for DescribeShareGroupOffsets {
    const KEY: ApiKey = ApiKey::DescribeShareGroupOffsets;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DescribeShareGroupOffsetsRequest;
    type Response = DescribeShareGroupOffsetsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DescribeShareGroupOffsetsResponse::default();
        let access = Access::new(ctx, call);
        for g in &req.groups {
            let group = s(&g.group_id.0);
            let mut out = GroupOut::default().with_group_id(g.group_id.clone());
            let refused = if !super::share_groups_enabled(ctx) {
                Some(ResponseError::UnsupportedVersion.code())
            } else if !access.allows(Op::Describe, Resource::Group, &group) {
                Some(ResponseError::GroupAuthorizationFailed.code())
            } else {
                None
            };
            if let Some(code) = refused {
                out.error_code = code;
                body.groups.push(out);
                continue;
            }
            let scope = match share_admin::scope(ctx, &group).await {
                Ok(s) => s,
                Err(e) => {
                    out.error_code = crate::kafka::error_code::group(&e).code();
                    body.groups.push(out);
                    continue;
                }
            };
            let meta = ctx.shard.metadata.snapshot();
            // (name, id, partitions) asked: the named ones, or all the group has.
            let asked: Vec<(String, uuid::Uuid, Vec<i32>)> = match &g.topics {
                Some(topics) => topics
                    .iter()
                    .map(|t| {
                        let name = s(&t.topic_name.0);
                        let id = meta.topic(&name).map(|m| m.id).unwrap_or_default();
                        (name, id, t.partitions.clone())
                    })
                    .collect(),
                None => scope
                    .partitions
                    .iter()
                    .map(|(id, name, ps)| (name.clone(), *id, ps.clone()))
                    .collect(),
            };
            for (name, id, partitions) in asked {
                let mut t = TopicOut::default()
                    .with_topic_name(TopicName(sb(name.clone())))
                    .with_topic_id(id);
                let allowed = access.allows(Op::Describe, Resource::Topic, &name);
                for p in partitions {
                    let mut po = PartitionOut::default()
                        .with_partition_index(p)
                        .with_start_offset(-1)
                        .with_leader_epoch(-1);
                    if !allowed {
                        po.error_code = ResponseError::TopicAuthorizationFailed.code();
                    } else if !id.is_nil() {
                        let op = StateOp::ReadSummary { leader_epoch: -1 };
                        if let Ok(Some(v)) = share_admin::state(ctx, &group, id, p, op).await {
                            po.start_offset = v.start_offset;
                            po.leader_epoch = v.leader_epoch;
                        }
                    }
                    t.partitions.push(po);
                }
                out.topics.push(t);
            }
            body.groups.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for g in &r.groups {
            each(g.error_code);
            g.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| each(p.error_code));
        }
    }
}

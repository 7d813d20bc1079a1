//! OffsetCommit (v0–v9; v9 is v8 sent by consumer-protocol members, whose generation is
//! their member epoch): offsets written to the group's `__consumer_offsets` partition
//! by its coordinator shard, acknowledged once durable.

use super::group_routing::{ask_coordinator, code, s, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct OffsetCommit;

impl Handler for OffsetCommit {
    const KEY: ApiKey = ApiKey::OffsetCommit;
    const VERSIONS: (i16, i16) = (0, 9);
    type Request = OffsetCommitRequest;
    type Response = OffsetCommitResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let group = s(&req.group_id.0);
        let meta = ctx.shard.metadata.snapshot();
        let mut offsets = Vec::new();
        // Refused up front, as Kafka does: everything without READ on the group, the
        // partitions of topics without READ, and those of unknown topics.
        let access = Access::new(ctx, call);
        let group_readable = access.allows(Op::Read, Resource::Group, &group);
        let mut refused: Vec<Vec<Option<ResponseError>>> = Vec::with_capacity(req.topics.len());
        for t in &req.topics {
            let topic = s(&t.name.0);
            let topic_readable = group_readable && access.allows(Op::Read, Resource::Topic, &topic);
            let mut k = Vec::with_capacity(t.partitions.len());
            for p in &t.partitions {
                let refusal = if !group_readable {
                    Some(ResponseError::GroupAuthorizationFailed)
                } else if !topic_readable {
                    Some(ResponseError::TopicAuthorizationFailed)
                } else if !meta.has_partition(&topic, p.partition_index) {
                    Some(ResponseError::UnknownTopicOrPartition)
                } else {
                    None
                };
                if refusal.is_none() {
                    offsets.push((
                        topic.clone(),
                        p.partition_index,
                        p.committed_offset,
                        if v >= 6 { p.committed_leader_epoch } else { -1 },
                        p.committed_metadata.as_ref().map(s).unwrap_or_default(),
                    ));
                }
                k.push(refusal);
            }
            refused.push(k);
        }
        let n = offsets.len();
        let results: Vec<Result<(), GroupError>> = if n == 0 {
            Vec::new()
        } else {
            let op = GroupOp::Commit(CommitRequest {
                group: group.clone(),
                // v0 carries no generation: a commit from outside the group protocol.
                generation: if v >= 1 {
                    req.generation_id_or_member_epoch
                } else {
                    -1
                },
                member_id: if v >= 1 {
                    s(&req.member_id)
                } else {
                    String::new()
                },
                group_instance_id: req.group_instance_id.as_ref().map(s),
                offsets,
            });
            match ask_coordinator(ctx, &group, op).await {
                Ok(GroupAnswer::Commit(r)) => r,
                Err(e) => vec![Err(e); n],
                _ => vec![Err(unavailable()); n],
            }
        };
        let mut results = results.into_iter();
        let mut body = OffsetCommitResponse::default();
        for (t, k) in req.topics.iter().zip(refused) {
            let mut tr = OffsetCommitResponseTopic::default();
            tr.name = t.name.clone();
            for (p, refusal) in t.partitions.iter().zip(k) {
                let mut pr = OffsetCommitResponsePartition::default();
                pr.partition_index = p.partition_index;
                pr.error_code = match refusal {
                    Some(e) => e.code(),
                    None => code(&results.next().and_then(|r| r.err())),
                };
                tr.partitions.push(pr);
            }
            body.topics.push(tr);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.topics {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

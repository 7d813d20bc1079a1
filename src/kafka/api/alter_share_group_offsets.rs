//! AlterShareGroupOffsets (v0, KIP-932; `kafka-share-groups --reset-offsets`): an empty
//! share group starts its partitions afresh at given offsets.
//!
//! As Kafka: READ on the group (GROUP_AUTHORIZATION_FAILED) and on each topic
//! (TOPIC_AUTHORIZATION_FAILED for its partitions); NON_EMPTY_GROUP while the group has
//! members; a group of another type is GROUP_ID_NOT_FOUND; a partition the cluster does
//! not have is UNKNOWN_TOPIC_OR_PARTITION. Each partition's state is initialized at the
//! new start with a state epoch newer than both the group's epoch and the one stored,
//! so a partition leader still holding the old state is fenced (FENCED_STATE_EPOCH) at
//! its next write and loads the new one; a group never seen is made, empty.

use super::group_routing::{s, sb};
use super::handler::{Call, Handler};
use super::share_admin;
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::GroupError;
use corelog_shards::share::coordinator::StateOp;
use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition as PartitionOut,
    AlterShareGroupOffsetsResponseTopic as TopicOut,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct AlterShareGroupOffsets;

impl Handler for AlterShareGroupOffsets {
    const KEY: ApiKey = ApiKey::AlterShareGroupOffsets;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = AlterShareGroupOffsetsRequest;
    type Response = AlterShareGroupOffsetsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = AlterShareGroupOffsetsResponse::default();
        let group = s(&req.group_id.0);
        let access = Access::new(ctx, call);
        if !super::share_groups_enabled(ctx) {
            body.error_code = ResponseError::UnsupportedVersion.code();
            return Ok(body);
        }
        if !access.allows(Op::Read, Resource::Group, &group) {
            body.error_code = ResponseError::GroupAuthorizationFailed.code();
            return Ok(body);
        }
        let epoch = match share_admin::scope(ctx, &group).await {
            Ok(scope) if !scope.empty => {
                body.error_code = ResponseError::NonEmptyGroup.code();
                return Ok(body);
            }
            Ok(scope) => scope.epoch,
            Err(GroupError::GroupIdNotFound) => 0,
            Err(e) => {
                body.error_code = error_code::group(&e).code();
                return Ok(body);
            }
        };
        let meta = ctx.shard.metadata.snapshot();
        let mut reset = Vec::new();
        for t in &req.topics {
            let name = s(&t.topic_name.0);
            let topic = meta.topic(&name);
            let id = topic.map(|m| m.id).unwrap_or_default();
            let mut out = TopicOut::default()
                .with_topic_name(TopicName(sb(name.clone())))
                .with_topic_id(id);
            let allowed = access.allows(Op::Read, Resource::Topic, &name);
            let mut done = Vec::new();
            for p in &t.partitions {
                let i = p.partition_index;
                let exists =
                    topic.is_some_and(|m| usize::try_from(i).is_ok_and(|i| i < m.partitions.len()));
                let code = if !allowed {
                    ResponseError::TopicAuthorizationFailed.code()
                } else if !exists || p.start_offset < 0 {
                    ResponseError::UnknownTopicOrPartition.code()
                } else {
                    match initialize(ctx, &group, id, i, epoch, p.start_offset).await {
                        Ok(()) => {
                            done.push(i);
                            0
                        }
                        Err(code) => code,
                    }
                };
                out.partitions.push(
                    PartitionOut::default()
                        .with_partition_index(i)
                        .with_error_code(code),
                );
            }
            if !done.is_empty() {
                reset.push((id, name, done));
            }
            body.responses.push(out);
        }
        if !reset.is_empty() {
            if let Err(e) = share_admin::record(ctx, &group, reset, Vec::new()).await {
                body.error_code = error_code::group(&e).code();
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        r.responses
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| each(p.error_code));
    }
}

/// Starts one share partition afresh at `start`, under a state epoch past the group's
/// and the stored one.
async fn initialize(
    ctx: &Ctx,
    group: &str,
    topic: uuid::Uuid,
    partition: i32,
    group_epoch: i32,
    start: i64,
) -> Result<(), i16> {
    let code = |e: &_| super::share_state_routing::code(e);
    let stored = share_admin::state(
        ctx,
        group,
        topic,
        partition,
        StateOp::ReadSummary { leader_epoch: -1 },
    )
    .await
    .map_err(|e| code(&e))?
    .map_or(0, |v| v.state_epoch);
    let op = StateOp::Initialize {
        state_epoch: group_epoch.max(stored.saturating_add(1)),
        start_offset: start,
    };
    share_admin::state(ctx, group, topic, partition, op)
        .await
        .map(drop)
        .map_err(|e| code(&e))
}

//! What the group APIs share: the route of a group request to its coordinator shard
//! (the owner of its `__consumer_offsets` partition) and the conversions between wire
//! and coordinator types. It serves no API itself.
//!
//! The classic consumer-group protocol at the edge: FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups,
//! ListGroups, DeleteGroups, OffsetDelete; and TxnOffsetCommit, a transactional
//! producer's commit of a group's offsets.
//!
//! Each handler decodes the request into the coordinator's domain types
//! (`corelog_shards::group::types`), sends it to the group's coordinator shard — the owner of
//! partition `hash(group) % 50` of `__consumer_offsets` — over the mesh, and encodes the
//! answer. ListGroups asks every shard. FindCoordinator names the broker leading that
//! partition; a group request that reaches another broker gets NOT_COORDINATOR.

use super::Ctx;
use crate::kafka::error_code;
use corelog_shards::group::types::*;
use corelog_shards::mesh::ShardMessage;
use futures::channel::oneshot;
use kafka_protocol::protocol::StrBytes;

pub(super) fn s(v: &StrBytes) -> String {
    v.as_str().to_string()
}

pub(super) fn sb(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub(super) fn code(e: &Option<GroupError>) -> i16 {
    e.as_ref().map(|e| error_code::group(e).code()).unwrap_or(0)
}

/// Sends `op` to `group`'s coordinator shard, if this broker coordinates the group: it
/// leads the group's `__consumer_offsets` partition (NOT_COORDINATOR when another broker
/// does; COORDINATOR_NOT_AVAILABLE while none does).
/// [`ask_coordinator`] for a principal that needs READ on the group (the membership
/// APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup); GROUP_AUTHORIZATION_FAILED,
/// before anything is asked, when an ACL refuses it.
pub(super) async fn ask_coordinator_to_read(
    ctx: &Ctx,
    call: &super::handler::Call<'_>,
    group: &str,
    op: GroupOp,
) -> Result<GroupAnswer, GroupError> {
    use crate::kafka::access::{Access, Op, Resource};
    if !Access::new(ctx, call).allows(Op::Read, Resource::Group, group) {
        return Err(GroupError::AuthorizationFailed);
    }
    ask_coordinator(ctx, group, op).await
}

pub(super) async fn ask_coordinator(
    ctx: &Ctx,
    group: &str,
    op: GroupOp,
) -> Result<GroupAnswer, GroupError> {
    let partition = ctx.shard.groups.offsets_partition(group);
    // A client that skipped FindCoordinator still finds the topic made.
    if let Err(e) = super::admin_change::ensure_offsets_topic(ctx).await {
        tracing::warn!(error = %e, "creating {}", corelog_shards::group::OFFSETS_TOPIC);
    }
    let meta = ctx.shard.metadata.snapshot();
    match meta.check_leader(
        ctx.config.node_id,
        corelog_shards::group::OFFSETS_TOPIC,
        partition,
    ) {
        Ok(()) => {}
        Err(corelog_shards::metadata::NotServed::NotLeader { leader, .. }) if leader >= 0 => {
            return Err(GroupError::NotCoordinator)
        }
        Err(_) => return Err(GroupError::CoordinatorNotAvailable),
    }
    let target = ctx.shard.coordinator_of(group);
    let (tx, rx) = oneshot::channel();
    ctx.shard
        .peers
        .call(
            target,
            ShardMessage::Group {
                op: Box::new(op),
                reply: tx,
            },
            rx,
        )
        .await
        .ok_or(GroupError::CoordinatorNotAvailable)
}

pub(super) fn unavailable() -> GroupError {
    GroupError::CoordinatorNotAvailable
}

//! What the group APIs share: the route of a group request to its coordinator shard
//! (the owner of its `__consumer_offsets` partition) and the conversions between wire
//! and coordinator types. It serves no API itself.
//!
//! The classic consumer-group protocol at the edge: FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups,
//! ListGroups, DeleteGroups, OffsetDelete.
//!
//! Each handler decodes the request into the coordinator's domain types
//! (`shards::group::types`), sends it to the group's coordinator shard — the owner of
//! partition `hash(group) % 50` of `__consumer_offsets` — over the mesh, and encodes the
//! answer. ListGroups asks every shard. This is a single node, so FindCoordinator always
//! names this broker; the routing to the right core happens inside.

use super::Ctx;
use crate::kafka::error_code;
use futures::channel::oneshot;
use kafka_protocol::protocol::StrBytes;
use shards::group::types::*;
use shards::mesh::ShardMessage;

pub(super) fn s(v: &StrBytes) -> String {
    v.as_str().to_string()
}

pub(super) fn sb(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub(super) fn code(e: &Option<GroupError>) -> i16 {
    e.as_ref().map(|e| error_code::group(e).code()).unwrap_or(0)
}

/// Sends `op` to `group`'s coordinator shard.
pub(super) async fn ask_coordinator(ctx: &Ctx, group: &str, op: GroupOp) -> Option<GroupAnswer> {
    let target = ctx.shard.coordinator_of(group);
    let (tx, rx) = oneshot::channel();
    ctx.shard
        .peers
        .call(target, ShardMessage::Group { op, reply: tx }, rx)
        .await
}

pub(super) fn unavailable() -> GroupError {
    GroupError::CoordinatorNotAvailable
}

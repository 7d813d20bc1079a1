//! What the share-group administration APIs share (DescribeShareGroupOffsets,
//! AlterShareGroupOffsets, DeleteShareGroupOffsets, and DeleteGroups of a share group;
//! KIP-932): the group's scope from its coordinator (empty or not, its epoch, the share
//! partitions whose state it may have) and the share coordinator's state of those
//! partitions, reached through this shard's persister. It serves no API itself.

use super::group_routing::ask_coordinator;
use super::Ctx;
use corelog_shards::group::share::records::TopicPartitions;
use corelog_shards::group::types::{GroupAnswer, GroupError, GroupOp, ShareScope};
use corelog_shards::shard::share_requests::ShardPersister;
use corelog_shards::share::coordinator::{StateFailure, StateOp, StateView};
use corelog_shards::share::leader::Persister;
use corelog_shards::share::records::ShareKey;
use uuid::Uuid;

/// The share group's scope; GROUP_ID_NOT_FOUND for a missing group or one of another
/// type.
pub async fn scope(ctx: &Ctx, group: &str) -> Result<ShareScope, GroupError> {
    let op = GroupOp::ShareScope {
        group: group.to_string(),
    };
    match ask_coordinator(ctx, group, op).await? {
        GroupAnswer::ShareScope(r) => r,
        _ => Err(GroupError::CoordinatorNotAvailable),
    }
}

/// Records partitions reset (`add`) or topics deleted (`forget`) in the group.
pub async fn record(
    ctx: &Ctx,
    group: &str,
    add: Vec<TopicPartitions>,
    forget: Vec<Uuid>,
) -> Result<(), GroupError> {
    let op = GroupOp::ShareStatePartitions {
        group: group.to_string(),
        add,
        forget,
    };
    match ask_coordinator(ctx, group, op).await? {
        GroupAnswer::Done(r) => r,
        _ => Err(GroupError::CoordinatorNotAvailable),
    }
}

/// One state operation on one share partition, through the share coordinator.
pub async fn state(
    ctx: &Ctx,
    group: &str,
    topic: Uuid,
    partition: i32,
    op: StateOp,
) -> Result<Option<StateView>, StateFailure> {
    super::share_session::ensure_state_topic(ctx).await;
    let key = ShareKey {
        group: group.to_string(),
        topic,
        partition,
    };
    ShardPersister(ctx.shard.clone()).call(key, op).await
}

/// Deletes the state of `partitions` of `group`; the first failure's error code.
pub async fn delete_state(
    ctx: &Ctx,
    group: &str,
    partitions: &[TopicPartitions],
) -> Result<(), i16> {
    for (id, _, ps) in partitions {
        for p in ps {
            state(ctx, group, *id, *p, StateOp::Delete)
                .await
                .map_err(|e| super::share_state_routing::code(&e))?;
        }
    }
    Ok(())
}

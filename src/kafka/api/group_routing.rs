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
use kafka_protocol::ResponseError;
use shards::group::types::*;
use shards::mesh::ShardMessage;
use std::collections::BTreeMap;

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
        .call(target, ShardMessage::Group { op, reply: tx }, rx)
        .await
}

pub(super) fn unavailable() -> GroupError {
    GroupError::CoordinatorNotAvailable
}

/// FindCoordinator's key types: 0 a group, 1 a transactional id. Transactions are not
/// implemented, so a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the
/// code InitProducerId and Produce give it too. It is fatal for librdkafka and the Java
/// client alike, so a transactional producer fails at once with an error that says what
/// is refused, instead of retrying the retriable COORDINATOR_NOT_AVAILABLE until its
/// own timeout. Any other key type is INVALID_REQUEST, as Kafka answers.
pub(super) fn coordinator_key_error(key_type: i8) -> Option<ResponseError> {
    match key_type {
        0 => None,
        1 => Some(ResponseError::TransactionalIdAuthorizationFailed),
        _ => Some(ResponseError::InvalidRequest),
    }
}

pub(super) fn coordinator_message(e: ResponseError) -> String {
    match e {
        ResponseError::TransactionalIdAuthorizationFailed => {
            "transactions are not supported by this broker".to_owned()
        }
        _ => "unknown coordinator key type".to_owned(),
    }
}

/// One group's offsets as the OffsetFetch answer needs them.
pub(super) async fn fetch_group_offsets(
    ctx: &Ctx,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
) -> Result<Vec<(String, i32, Option<Committed>)>, GroupError> {
    let op = GroupOp::FetchOffsets {
        group: group.to_string(),
        topics,
    };
    match ask_coordinator(ctx, group, op).await {
        Some(GroupAnswer::Offsets(r)) => r,
        _ => Err(unavailable()),
    }
}

/// One topic's committed offsets: (partition, committed or none).
type TopicOffsets = (String, Vec<(i32, Option<Committed>)>);

/// Groups (topic, partition, committed) by topic, keeping first-seen order.
pub(super) fn by_topic(rows: Vec<(String, i32, Option<Committed>)>) -> Vec<TopicOffsets> {
    let mut order: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<(i32, Option<Committed>)>> = BTreeMap::new();
    for (t, p, c) in rows {
        if !map.contains_key(&t) {
            order.push(t.clone());
        }
        map.entry(t).or_default().push((p, c));
    }
    order
        .into_iter()
        .map(|t| {
            let v = map.remove(&t).unwrap_or_default();
            (t, v)
        })
        .collect()
}

/// Kafka's name of the classic group protocol's type (ListGroups v5).
pub(super) const CLASSIC_GROUP_TYPE: &str = "classic";

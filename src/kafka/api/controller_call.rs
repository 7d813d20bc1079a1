//! What the topic APIs share: requests to the controller on shard 0, and the creation
//! of topics (also by Metadata and Produce auto-creation). It serves no API itself.
//!
//! CreateTopics (v0–v7), DeleteTopics (v0–v6), CreatePartitions (v0–v3).
//!
//! All three go to the controller on shard 0, which persists the change and has every
//! owning shard open (or drop) its partitions before answering. This is a single-node
//! broker: a replication factor other than 1 (or -1, "default") is
//! INVALID_REPLICATION_FACTOR, and explicit replica assignments must name this node.

use super::Ctx;
use futures::channel::oneshot;
use kafka_protocol::protocol::StrBytes;
use shards::mesh::{ControllerRequest, NewTopic, Reply, ShardMessage, TopicError};
use shards::routing::CONTROLLER_SHARD;

/// Sends a topic change about `n` topics to the controller (shard 0) and returns one
/// outcome per topic; every one is a storage error if the controller cannot be reached
/// (shutdown). The one way the edge asks for a metadata change.
pub async fn ask_controller(
    ctx: &Ctx,
    n: usize,
    request: impl FnOnce(Reply<Vec<Result<(), TopicError>>>) -> ControllerRequest,
) -> Vec<Result<(), TopicError>> {
    if n == 0 {
        return Vec::new();
    }
    let (tx, rx) = oneshot::channel();
    let msg = ShardMessage::Controller(request(tx));
    ctx.shard
        .peers
        .call(CONTROLLER_SHARD, msg, rx)
        .await
        .unwrap_or_else(|| {
            (0..n)
                .map(|_| Err(TopicError::Storage("the controller is unavailable".into())))
                .collect()
        })
}

pub(super) async fn create_or_validate(
    ctx: &Ctx,
    topics: Vec<NewTopic>,
    validate_only: bool,
) -> Vec<Result<(), TopicError>> {
    ask_controller(ctx, topics.len(), |reply| ControllerRequest::CreateTopics {
        topics,
        validate_only,
        reply,
    })
    .await
}

pub async fn create_via_controller(
    ctx: &Ctx,
    topics: Vec<NewTopic>,
) -> Vec<Result<(), TopicError>> {
    create_or_validate(ctx, topics, false).await
}

pub(super) fn message(e: &TopicError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.to_string()))
}

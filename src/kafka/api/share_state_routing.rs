//! What the share-group state APIs share (InitializeShareGroupState,
//! ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState,
//! ReadShareGroupStateSummary, KIP-932): the route of each share partition's operation to
//! its share coordinator — the shard leading its `__share_group_state` partition
//! (`corelog_shards::share::coordinator`) — and the error codes of the answers. It serves
//! no API itself.
//!
//! These are requests between brokers (a partition leader's persister, the group
//! coordinator): the principal needs CLUSTER_ACTION on the cluster
//! (CLUSTER_AUTHORIZATION_FAILED for every partition otherwise). The state topic is
//! created by the first request that needs it. A share partition of a topic the cluster
//! does not have is UNKNOWN_TOPIC_OR_PARTITION; one whose state partition another broker
//! leads is NOT_COORDINATOR, one without a leader COORDINATOR_NOT_AVAILABLE. A request's
//! partitions are served concurrently and answered in request order.

use super::handler::Call;
use super::Ctx;
use crate::kafka::access::{Access, Op};
use corelog_shards::mesh::ShardMessage;
use corelog_shards::share::coordinator::{StateFailure, StateOp, StateView, SHARE_STATE_TOPIC};
use corelog_shards::share::records::ShareKey;
use corelog_shards::share::state::StateError;
use futures::channel::oneshot;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

/// A partition's answer: its view (reads), or its error code and message.
pub(super) type Answer = Result<Option<StateView>, (i16, Option<StrBytes>)>;

/// Serves `items` (topic id, partition, operation) of `group`'s share partitions, in
/// order.
pub(super) async fn serve(
    ctx: &Ctx,
    call: &Call<'_>,
    group: &str,
    items: Vec<(Uuid, i32, StateOp)>,
) -> Vec<Answer> {
    if !Access::new(ctx, call).allows_cluster(Op::ClusterAction) {
        let denied = ResponseError::ClusterAuthorizationFailed.code();
        return items.iter().map(|_| Err((denied, None))).collect();
    }
    if let Err(e) = super::admin_change::ensure_share_state_topic(ctx).await {
        tracing::warn!(error = %e, "creating {SHARE_STATE_TOPIC}");
    }
    let asks = items.into_iter().map(|(topic, partition, op)| {
        let key = ShareKey {
            group: group.to_string(),
            topic,
            partition,
        };
        async move { ask(ctx, key, op).await.map_err(|e| (code(&e), message(&e))) }
    });
    futures::future::join_all(asks).await
}

async fn ask(ctx: &Ctx, key: ShareKey, op: StateOp) -> Result<Option<StateView>, StateFailure> {
    let meta = ctx.shard.metadata.snapshot();
    let known = meta
        .topic_by_id(key.topic)
        .is_some_and(|t| key.partition >= 0 && (key.partition as usize) < t.partitions.len());
    if !known {
        return Err(StateFailure::UnknownTopicOrPartition);
    }
    let state_partition = ctx.shard.share_state.partition_of(&key);
    match meta.check_leader(ctx.config.node_id, SHARE_STATE_TOPIC, state_partition) {
        Ok(()) => {}
        Err(corelog_shards::metadata::NotServed::NotLeader { leader, .. }) if leader >= 0 => {
            return Err(StateFailure::NotCoordinator)
        }
        Err(_) => return Err(StateFailure::CoordinatorNotAvailable),
    }
    let target = ctx.shard.share_coordinator_of(&key);
    let (tx, rx) = oneshot::channel();
    let message = ShardMessage::ShareState {
        key,
        op: Box::new(op),
        reply: tx,
    };
    ctx.shard
        .peers
        .call(target, message, rx)
        .await
        .unwrap_or(Err(StateFailure::CoordinatorNotAvailable))
}

/// Kafka's error code for a share coordinator's refusal.
pub(super) fn code(e: &StateFailure) -> i16 {
    match e {
        StateFailure::NotCoordinator => ResponseError::NotCoordinator,
        StateFailure::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        StateFailure::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        StateFailure::Fenced(StateError::FencedLeaderEpoch(..)) => ResponseError::FencedLeaderEpoch,
        StateFailure::Fenced(StateError::FencedStateEpoch(..)) => ResponseError::FencedStateEpoch,
        StateFailure::Fenced(StateError::Uninitialized) | StateFailure::InvalidRequest(_) => {
            ResponseError::InvalidRequest
        }
        StateFailure::Storage(_) => ResponseError::KafkaStorageError,
    }
    .code()
}

fn message(e: &StateFailure) -> Option<StrBytes> {
    match e {
        StateFailure::Fenced(_) | StateFailure::InvalidRequest(_) => {
            Some(StrBytes::from_string(e.to_string()))
        }
        _ => None,
    }
}

/// A request's topics (topic id, partitions) with their operations, flattened for
/// [`serve`].
pub(super) fn flatten(topics: &[(Uuid, Vec<(i32, StateOp)>)]) -> Vec<(Uuid, i32, StateOp)> {
    topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |(p, op)| (*t, *p, op.clone())))
        .collect()
}

/// `answers`, in request order, given back to their topics: (topic id, [(partition,
/// answer)]).
pub(super) fn by_topic(
    topics: &[(Uuid, Vec<(i32, StateOp)>)],
    answers: Vec<Answer>,
) -> Vec<(Uuid, Vec<(i32, Answer)>)> {
    let mut answers = answers.into_iter();
    topics
        .iter()
        .map(|(t, ps)| {
            let got = ps.iter().map(|(p, _)| *p).zip(answers.by_ref()).collect();
            (*t, got)
        })
        .collect()
}

/// Serves a request's topics (topic id, [(partition, operation)]) and builds its
/// response's: `partition` makes a partition's result from its index, error code,
/// message and view; `topic` a topic's from its id and partition results.
pub(super) async fn respond<T, P>(
    ctx: &Ctx,
    call: &Call<'_>,
    group: &str,
    topics: Vec<(Uuid, Vec<(i32, StateOp)>)>,
    mut partition: impl FnMut(i32, i16, Option<StrBytes>, Option<StateView>) -> P,
    mut topic: impl FnMut(Uuid, Vec<P>) -> T,
) -> Vec<T> {
    let answers = serve(ctx, call, group, flatten(&topics)).await;
    by_topic(&topics, answers)
        .into_iter()
        .map(|(id, ps)| {
            let results = ps
                .into_iter()
                .map(|(p, answer)| match answer {
                    Ok(view) => partition(p, 0, None, view),
                    Err((code, message)) => partition(p, code, message, None),
                })
                .collect();
            topic(id, results)
        })
        .collect()
}

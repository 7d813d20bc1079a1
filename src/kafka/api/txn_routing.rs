//! What the transaction APIs share: the route of a request to its transactional id's
//! coordinator shard (the owner of the id's `__transaction_state` partition, on the
//! broker that leads it) and the conversions to the coordinator's types. It serves no
//! API itself.
//!
//! The transaction APIs at the edge: FindCoordinator (key type 1), InitProducerId (with a
//! transactional id), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions
//! and ListTransactions; WriteTxnMarkers is the partition leader's side and goes to the
//! partitions' shards. Each handler authorizes, decodes into
//! `corelog_shards::txn::types`, asks the coordinator shard over the mesh, and encodes
//! the answer with the codes of `error_code::txn`.

use super::Ctx;
use corelog_shards::mesh::ShardMessage;
use corelog_shards::metadata::NotServed;
use corelog_shards::txn::rules::TxnError;
use corelog_shards::txn::types::{TxnAnswer, TxnOp};
use corelog_shards::txn::TRANSACTION_TOPIC;
use futures::channel::oneshot;

/// Sends `op` to its transactional id's coordinator shard, if this broker coordinates
/// the id: it leads the id's `__transaction_state` partition (NOT_COORDINATOR when
/// another broker does, COORDINATOR_NOT_AVAILABLE while none does or the topic is not
/// there yet).
pub(super) async fn ask_coordinator(ctx: &Ctx, op: TxnOp) -> Result<TxnAnswer, TxnError> {
    let Some(id) = op.transactional_id().map(str::to_owned) else {
        return Err(TxnError::InvalidRequest);
    };
    let partition = ctx.shard.txns.partition_of(&id);
    let meta = ctx.shard.metadata.snapshot();
    match meta.check_leader(ctx.config.node_id, TRANSACTION_TOPIC, partition) {
        Ok(()) => {}
        Err(NotServed::NotLeader { leader, .. }) if leader >= 0 => {
            return Err(TxnError::NotCoordinator)
        }
        Err(_) => return Err(TxnError::CoordinatorNotAvailable),
    }
    ask_shard(ctx, ctx.shard.txn_coordinator_of(&id), op).await
}

/// Sends `op` to shard `target` and waits for its answer.
pub(super) async fn ask_shard(ctx: &Ctx, target: usize, op: TxnOp) -> Result<TxnAnswer, TxnError> {
    let (tx, rx) = oneshot::channel();
    ctx.shard
        .peers
        .call(target, ShardMessage::Txn { op, reply: tx }, rx)
        .await
        .ok_or(TxnError::CoordinatorNotAvailable)
}

/// The producer-id answer of an InitProducerId or EndTxn.
pub(super) fn producer(
    answer: Result<TxnAnswer, TxnError>,
) -> Result<corelog_shards::txn::rules::ProducerIdEpoch, TxnError> {
    match answer? {
        TxnAnswer::Producer(r) => r,
        _ => Err(TxnError::UnknownServerError),
    }
}

/// The answer of an add (AddPartitionsToTxn from a client, AddOffsetsToTxn).
pub(super) fn added(answer: Result<TxnAnswer, TxnError>) -> Result<(), TxnError> {
    match answer? {
        TxnAnswer::Added(r) => r,
        _ => Err(TxnError::UnknownServerError),
    }
}

//! What DescribeLogDirs and DescribeProducers share: one `DescribePartitions` message
//! per owning shard. It serves no API itself.
//!
//! DescribeLogDirs (v1–v4) and DescribeProducers (v0): what each partition's owning
//! shard knows of it, gathered with one `DescribePartitions` message per shard.
//!
//! DescribeLogDirs: the broker has one log directory, the data directory; each partition
//! is reported with its size (bytes of its segments), offset lag 0 (nothing is moving
//! between directories) and never as a future replica; v4 adds the filesystem's total
//! and usable bytes. Asking for topics or partitions that do not exist leaves them out,
//! as Kafka does for partitions it does not host.
//!
//! DescribeProducers: the idempotent producers each partition remembers (the state its
//! sequence checks use), with the epoch, the last sequence written and the largest
//! timestamp of its last batch (-1 when only an older snapshot knew it). There are no
//! transactions, so no coordinator epoch or open transaction (-1). An unknown partition is
//! UNKNOWN_TOPIC_OR_PARTITION.

use super::fan_out::PerShard;
use super::Ctx;
use shards::mesh::{PartitionDescription, PartitionError, PartitionRequest, TopicPartition};

/// Asks the owning shards about `partitions`; answers in the same order.
pub(super) async fn describe(
    ctx: &Ctx,
    partitions: &[TopicPartition],
    with_producers: bool,
) -> Vec<Result<PartitionDescription, PartitionError>> {
    let mut per_shard = PerShard::new(ctx.shard.shard_count());
    for (i, tp) in partitions.iter().enumerate() {
        per_shard.push(
            ctx.shard.owner_of(&tp.topic, tp.partition),
            (i, 0),
            tp.clone(),
        );
    }
    let mut out: Vec<Result<PartitionDescription, PartitionError>> = partitions
        .iter()
        .map(|_| Err(PartitionError::ShuttingDown))
        .collect();
    let answers = per_shard
        .call(&ctx.shard, |partitions, reply| {
            PartitionRequest::DescribePartitions {
                partitions,
                with_producers,
                reply,
            }
        })
        .await;
    for ((i, _), answer) in answers {
        if let (Some(slot), Some(answer)) = (out.get_mut(i), answer) {
            *slot = answer;
        }
    }
    out
}

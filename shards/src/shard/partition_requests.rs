//! The small per-partition requests a shard serves for the edge: ListOffsets,
//! OffsetForLeaderEpoch, DescribeLogDirs/DescribeProducers' descriptions, DeleteRecords,
//! and the long poll's wait for new data.
//!
//! Invariants: answers are in input order, one per input; a partition this shard does
//! not hold is UNKNOWN_TOPIC_OR_PARTITION; a current leader epoch is checked before
//! anything is read.

use super::Shard;
use crate::mesh::{
    EpochQuery, FoundOffset, ListOffsetsInput, OffsetsOutput, PartitionDescription, PartitionError,
    TopicPartition,
};
use corelog_partition::Partition;
use std::rc::Rc;
use std::time::Instant;

impl Shard {
    pub(super) async fn list_offsets(&self, inputs: Vec<ListOffsetsInput>) -> Vec<OffsetsOutput> {
        let mut out = Vec::with_capacity(inputs.len());
        for input in inputs {
            out.push(OffsetsOutput {
                result: self.list_offset(&input).await,
            });
        }
        out
    }

    /// ListOffsets: `timestamp` is a time in ms or one of the special values
    /// `corelog_partition::*_TIMESTAMP`.
    async fn list_offset(&self, input: &ListOffsetsInput) -> Result<FoundOffset, PartitionError> {
        let partition = self
            .partition(&input.tp)
            .ok_or(PartitionError::UnknownTopicOrPartition)?;
        partition.check_leader_epoch(input.current_leader_epoch)?;
        Ok(partition
            .find_offset(input.timestamp, input.isolation)
            .await?)
    }

    /// OffsetForLeaderEpoch: where each queried epoch ends.
    pub(super) fn epoch_end_offsets(
        &self,
        queries: &[EpochQuery],
    ) -> Vec<Result<(i32, i64), PartitionError>> {
        queries
            .iter()
            .map(|q| {
                let p = self
                    .partition(&q.tp)
                    .ok_or(PartitionError::UnknownTopicOrPartition)?;
                p.check_leader_epoch(q.current_leader_epoch)?;
                Ok(p.end_offset_for_epoch(q.leader_epoch))
            })
            .collect()
    }

    /// Each partition's size and, when asked, its idempotent producers.
    pub(super) fn describe_partitions(
        &self,
        partitions: &[TopicPartition],
        with_producers: bool,
    ) -> Vec<Result<PartitionDescription, PartitionError>> {
        partitions
            .iter()
            .map(|tp| {
                let log = self
                    .partition(tp)
                    .ok_or(PartitionError::UnknownTopicOrPartition)?;
                let log_dir = self.log_dir_index(&log).unwrap_or(0);
                let moving_to = self
                    .moves
                    .borrow()
                    .get(tp)
                    .map(|m| (m.dest, m.copied.load(std::sync::atomic::Ordering::Acquire)));
                let log = log.log();
                Ok(PartitionDescription {
                    size_bytes: log.size_bytes(),
                    log_dir,
                    moving_to,
                    producers: if with_producers {
                        log.active_producers()
                    } else {
                        Vec::new()
                    },
                })
            })
            .collect()
    }

    /// DeleteRecords: each partition's new log start, checkpointed before the answer.
    pub(super) async fn delete_records(
        &self,
        partitions: Vec<(TopicPartition, i64)>,
    ) -> Vec<Result<i64, PartitionError>> {
        let mut out = Vec::with_capacity(partitions.len());
        for (tp, offset) in partitions {
            out.push(match self.partition(&tp) {
                None => Err(PartitionError::UnknownTopicOrPartition),
                Some(log) => log
                    .delete_records(offset)
                    .await
                    .map_err(PartitionError::from),
            });
        }
        out
    }

    /// Completes when any listed partition's high watermark (for a replica: its written
    /// end) passes its offset, or at the deadline.
    pub(super) async fn wait_for_data(
        &self,
        partitions: Vec<(TopicPartition, i64)>,
        deadline: Instant,
        replica: bool,
    ) {
        let logs: Vec<(Rc<Partition>, i64)> = partitions
            .iter()
            .filter_map(|(tp, off)| self.partition(tp).map(|l| (l, *off)))
            .collect();
        if logs.is_empty() {
            let now = Instant::now();
            if deadline > now {
                glommio::timer::sleep(deadline - now).await;
            }
            return;
        }
        let waits = logs.iter().map(|(log, off)| {
            Box::pin(async move {
                if replica {
                    log.wait_beyond_log_end(*off, deadline).await
                } else {
                    log.wait_beyond(*off, deadline).await
                }
            })
        });
        futures::future::select_all(waits).await;
    }
}

//! The one place a mesh message addressed to this shard is taken apart and handed to
//! the code that serves it; every reply is sent here, whatever the serving code
//! returns (a requester that has gone away is not an error).

use super::Shard;
use crate::group::coordinator::offsets_tp;
use crate::group::types::GroupOp;
use crate::mesh::{PartitionRequest, ShardMessage, ShareRequest};
use crate::share::coordinator::share_state_tp;
use std::rc::Rc;

impl Shard {
    /// Handles one message addressed to this shard.
    pub async fn handle(self: Rc<Self>, msg: ShardMessage) {
        match msg {
            ShardMessage::Partition(PartitionRequest::Produce {
                acks,
                timeout_ms,
                partitions,
                transaction,
                reply,
            }) => {
                let out = self
                    .produce(acks, timeout_ms, partitions, transaction)
                    .await;
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::WriteMarkers {
                timeout_ms,
                markers,
                reply,
            }) => {
                let out = self.write_markers(timeout_ms, markers).await;
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::Fetch {
                partitions,
                budget,
                reader,
                reply,
            }) => {
                let out = self.fetch(partitions, budget, reader).await;
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::WaitForData {
                partitions,
                deadline,
                replica,
                reply,
            }) => {
                self.wait_for_data(partitions, deadline, replica).await;
                let _ = reply.send(());
            }
            ShardMessage::Partition(PartitionRequest::ListOffsets { partitions, reply }) => {
                let _ = reply.send(self.list_offsets(partitions).await);
            }
            ShardMessage::Partition(PartitionRequest::EpochEndOffsets { partitions, reply }) => {
                let _ = reply.send(self.epoch_end_offsets(&partitions));
            }
            ShardMessage::Partition(PartitionRequest::DescribePartitions {
                partitions,
                with_producers,
                reply,
            }) => {
                let _ = reply.send(self.describe_partitions(&partitions, with_producers));
            }
            ShardMessage::Partition(PartitionRequest::HighWatermarks { partitions, reply }) => {
                let _ = reply.send(self.high_watermarks(&partitions));
            }
            ShardMessage::Partition(PartitionRequest::AlterLogDirs { moves, reply }) => {
                let out = moves
                    .into_iter()
                    .map(|(tp, dest)| self.alter_log_dir(tp, dest))
                    .collect();
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::DeleteRecords { partitions, reply }) => {
                let _ = reply.send(self.delete_records(partitions).await);
            }
            ShardMessage::Housekeeping(m) => self.housekeeping.handle(m, &self.peers).await,
            ShardMessage::AdminChange(req) => match &self.admin_changes {
                Some(c) => c.handle(req).await,
                None => tracing::error!(
                    shard = self.id,
                    "admin change sent to a shard that is not the admin shard"
                ),
            },
            ShardMessage::Group { op, reply } => match *op {
                GroupOp::TxnCommit(req) => {
                    let _ = reply.send(self.txn_commit_verified(req).await);
                }
                op => {
                    let shard = self.clone();
                    let topics =
                        super::topic_catalog::MetadataCatalog::new(self.metadata.snapshot());
                    let answer = self
                        .groups
                        .handle(op, &topics, move |p| shard.partition(&offsets_tp(p)))
                        .await;
                    let _ = reply.send(answer);
                }
            },
            ShardMessage::ShareState { key, op, reply } => {
                let shard = self.clone();
                let answer = self
                    .share_state
                    .handle(key, *op, move |p| shard.partition(&share_state_tp(p)))
                    .await;
                let _ = reply.send(answer);
            }
            ShardMessage::Share(ShareRequest::Fetch {
                group,
                member,
                partitions,
                limits,
                reply,
            }) => {
                let _ = reply.send(self.share_fetch(&group, &member, partitions, limits).await);
            }
            ShardMessage::Share(ShareRequest::Acknowledge {
                group,
                member,
                partitions,
                reply,
            }) => {
                let _ = reply.send(self.share_acknowledge(&group, &member, partitions).await);
            }
            ShardMessage::Share(ShareRequest::Release {
                group,
                member,
                partitions,
                reply,
            }) => {
                self.share_release(&group, &member, partitions).await;
                let _ = reply.send(());
            }
            ShardMessage::Share(ShareRequest::Wait {
                partitions,
                since,
                deadline,
                reply,
            }) => {
                let records = self.wait_for_data(partitions, deadline, false);
                let available = self.share_leader.wait_available(since, deadline);
                futures::future::select(Box::pin(records), Box::pin(available)).await;
                let _ = reply.send(());
            }
            ShardMessage::Txn { op, reply } => {
                let answer = self.txns.handle(op).await;
                let _ = reply.send(answer);
            }
            ShardMessage::Metrics { reply } => {
                let _ = reply.send(self.metrics_snapshot());
            }
            ShardMessage::Shutdown { reply } => {
                self.close_all().await;
                let _ = reply.send(());
            }
            ShardMessage::QuotaUsage(report) => self.quota_usage.push(report),
        }
    }

    /// This shard's metrics, with its segment files and replication counted now.
    fn metrics_snapshot(&self) -> corelog_metrics::MetricsSnapshot {
        let mut snapshot = corelog_metrics::snapshot(self.id);
        let files = self.open_files().stats();
        snapshot.segment_files = corelog_metrics::SegmentFileCounters {
            open: files.open as u64,
            capacity: files.capacity as u64,
            opens: files.opens,
            evictions: files.evictions,
            exhausted: files.exhausted,
        };
        snapshot.replication = self.replication_metrics(snapshot.replication);
        (snapshot.share.partitions, snapshot.share.in_flight) = self.share_leader.gauges();
        snapshot.log_bytes = self
            .partitions
            .borrow()
            .values()
            .map(|p| p.log().size_bytes())
            .sum();
        snapshot.produce_refused_disk = self.produce_refused().is_some();
        let max = corelog_metrics::GROUP_LAG_PARTITIONS_MAX / self.config.shard_count.max(1);
        snapshot.group_offsets = self.groups.committed_offsets(max.max(1));
        snapshot
    }

    /// Each partition's high watermark where this shard holds a replica of it (a
    /// leader's own, a follower's as its leader last told it), for the consumer-lag
    /// metric; `None` where it holds none.
    pub fn high_watermarks(&self, partitions: &[crate::mesh::TopicPartition]) -> Vec<Option<i64>> {
        partitions
            .iter()
            .map(|tp| self.partition(tp).map(|p| p.high_watermark()))
            .collect()
    }
}

//! DescribeLogDirs (v1–v4): the broker's one log directory with each partition's size,
//! gathered with one `DescribePartitions` message per owning shard.
//!
//! The broker has one log directory, the data directory; each partition is reported
//! with its size (bytes of its segments), offset lag 0 (nothing is moving between
//! directories) and never as a future replica; v4 adds the filesystem's total and
//! usable bytes. Asking for topics or partitions that do not exist leaves them out, as
//! Kafka does for partitions it does not host.

use super::fan_out::PerShard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{
    PartitionDescription, PartitionError, PartitionRequest, TopicPartition,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct DescribeLogDirs;

impl Handler for DescribeLogDirs {
    const KEY: ApiKey = ApiKey::DescribeLogDirs;
    const VERSIONS: (i16, i16) = (1, 4);
    type Request = DescribeLogDirsRequest;
    type Response = DescribeLogDirsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        // DESCRIBE on the cluster (v3+ answers CLUSTER_AUTHORIZATION_FAILED; before, an
        // empty answer, as Kafka gives).
        if !Access::new(ctx, call).allows_cluster(Op::Describe) {
            let mut body = DescribeLogDirsResponse::default();
            if call.version >= 3 {
                body.error_code = ResponseError::ClusterAuthorizationFailed.code();
            }
            return Ok(body);
        }
        // Existing partitions asked for (all when the topic list is null), in name order.
        let mut wanted: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        match &req.topics {
            None => {
                for t in meta.topics.values() {
                    wanted.insert(t.name.clone(), (0..t.partition_count()).collect());
                }
            }
            Some(topics) => {
                for t in topics {
                    let name = t.topic.0.as_str();
                    let list = wanted.entry(name.to_string()).or_default();
                    list.extend(
                        t.partitions
                            .iter()
                            .filter(|p| meta.has_partition(name, **p)),
                    );
                    list.sort_unstable();
                    list.dedup();
                }
                wanted.retain(|_, parts| !parts.is_empty());
            }
        }
        let partitions: Vec<TopicPartition> = wanted
            .iter()
            .flat_map(|(name, parts)| {
                let topic: Arc<str> = name.as_str().into();
                parts.iter().map(move |p| TopicPartition {
                    topic: topic.clone(),
                    partition: *p,
                })
            })
            .collect();
        let described = describe(ctx, &partitions).await;

        let mut result = DescribeLogDirsResult::default();
        result.log_dir = StrBytes::from_string(ctx.config.data_dir.display().to_string());
        let mut topics: BTreeMap<Arc<str>, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
        for (tp, d) in partitions.iter().zip(described) {
            // A partition deleted meanwhile is no longer hosted: left out.
            let Ok(d) = d else { continue };
            let mut p = DescribeLogDirsPartition::default();
            p.partition_index = tp.partition;
            p.partition_size = i64::try_from(d.size_bytes).unwrap_or(i64::MAX);
            p.offset_lag = 0;
            p.is_future_key = false;
            topics.entry(tp.topic.clone()).or_default().push(p);
        }
        result.topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                let mut t = DescribeLogDirsTopic::default();
                t.name =
                    kafka_protocol::messages::TopicName(StrBytes::from_string(name.to_string()));
                t.partitions = partitions;
                t
            })
            .collect();
        if call.version >= 4 {
            match corelog_shards::housekeeping::filesystem_space(&ctx.config.data_dir) {
                Some((total, usable)) => {
                    result.total_bytes = i64::try_from(total).unwrap_or(i64::MAX);
                    result.usable_bytes = i64::try_from(usable).unwrap_or(i64::MAX);
                }
                // Kafka's "unknown" for both.
                None => (result.total_bytes, result.usable_bytes) = (-1, -1),
            }
        }
        let mut body = DescribeLogDirsResponse::default();
        body.results = vec![result];
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for d in &r.results {
            each(d.error_code);
        }
    }
}

/// Asks the owning shards about `partitions`; answers in the same order.
async fn describe(
    ctx: &Ctx,
    partitions: &[TopicPartition],
) -> Vec<Result<PartitionDescription, PartitionError>> {
    let mut per_shard = PerShard::new(ctx.shard.shard_count());
    for (i, tp) in partitions.iter().enumerate() {
        per_shard.push(ctx.shard.owner_of(&tp.topic, tp.partition), i, tp.clone());
    }
    let mut out: Vec<Result<PartitionDescription, PartitionError>> = partitions
        .iter()
        .map(|_| Err(PartitionError::ShuttingDown))
        .collect();
    let make = |partitions, reply| PartitionRequest::DescribePartitions {
        partitions,
        with_producers: false,
        reply,
    };
    for (i, answer) in per_shard.call(&ctx.shard, make).await {
        if let (Some(slot), Some(answer)) = (out.get_mut(i), answer) {
            *slot = answer;
        }
    }
    out
}

//! DescribeLogDirs (v1–v4): the broker's log directories (`log.dirs`), each with the
//! partitions it holds and their sizes, gathered with one `DescribePartitions` message
//! per owning shard (`fan_out`).
//!
//! Every log directory has a result, in `log.dirs` order, empty ones too; each
//! partition is reported under the directory holding it, with its size (bytes of its
//! segments), offset lag 0 (nothing is moving between directories) and never as a
//! future replica; v4 adds each directory's filesystem total and usable bytes. Asking for topics or partitions that do not exist leaves them out, as
//! Kafka does for partitions it does not host.

use super::fan_out::{FanOut, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{PartitionDescription, PartitionRequest, TopicPartition};
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
        let described = describe(ctx, &wanted).await;

        // One result per log directory, each partition under the one holding it.
        let dirs = &ctx.config.log_dirs;
        let mut by_dir: Vec<BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
            vec![BTreeMap::new(); dirs.len()];
        for (name, partitions) in wanted.into_keys().zip(described) {
            // A partition deleted meanwhile is no longer hosted: left out, and a topic
            // with none left with it.
            for (entry, dir, future) in partitions.into_iter().filter_map(|h| h.0) {
                let dir = dir.min(dirs.len() - 1);
                by_dir[dir].entry(name.clone()).or_default().push(entry);
                if let Some((f, to)) = future {
                    let to = to.min(dirs.len() - 1);
                    by_dir[to].entry(name.clone()).or_default().push(f);
                }
            }
        }
        let mut body = DescribeLogDirsResponse::default();
        body.results = dirs
            .iter()
            .zip(by_dir)
            .enumerate()
            .map(|(i, (dir, topics))| {
                let mut result = DescribeLogDirsResult::default();
                result.log_dir = StrBytes::from_string(dir.display().to_string());
                // An offline directory (its disk failed): Kafka's answer, the error and
                // nothing else.
                if ctx.shard.data_dir.is_failed(i) {
                    result.error_code = ResponseError::KafkaStorageError.code();
                    (result.total_bytes, result.usable_bytes) = (-1, -1);
                    return result;
                }
                result.topics = topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        let mut t = DescribeLogDirsTopic::default();
                        t.name = kafka_protocol::messages::TopicName(StrBytes::from_string(name));
                        t.partitions = partitions;
                        t
                    })
                    .collect();
                if call.version >= 4 {
                    match corelog_shards::housekeeping::filesystem_space(dir) {
                        Some((total, usable)) => {
                            result.total_bytes = i64::try_from(total).unwrap_or(i64::MAX);
                            result.usable_bytes = i64::try_from(usable).unwrap_or(i64::MAX);
                        }
                        // Kafka's "unknown" for both.
                        None => (result.total_bytes, result.usable_bytes) = (-1, -1),
                    }
                }
                result
            })
            .collect();
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for d in &r.results {
            each(d.error_code);
        }
    }
}

/// A partition's entry until its owning shard has described it: `None`, left out of the
/// answer, when the shard could not (the partition was deleted meanwhile, or the shard is
/// shutting down), as Kafka leaves out partitions it does not host.
/// A partition as its shard described it: its entry and directory, and its future
/// replica's (a move in progress) in its own directory.
struct Hosted(
    Option<(
        DescribeLogDirsPartition,
        usize,
        Option<(DescribeLogDirsPartition, usize)>,
    )>,
);

impl PartitionAnswer for Hosted {
    fn set_error(&mut self, _: ResponseError) {
        self.0 = None;
    }
}

/// Asks the owning shards about the `wanted` partitions; each topic's entries in the
/// same order, a partition's size filled in where its shard described it.
async fn describe(ctx: &Ctx, wanted: &BTreeMap<String, Vec<i32>>) -> Vec<Vec<Hosted>> {
    let mut fan = FanOut::new(ctx, wanted.len());
    for (name, parts) in wanted {
        let topic: Arc<str> = name.as_str().into();
        fan.next_topic(parts.len());
        for p in parts {
            let mut entry = DescribeLogDirsPartition::default();
            entry.partition_index = *p;
            entry.offset_lag = 0;
            entry.is_future_key = false;
            let tp = TopicPartition {
                topic: topic.clone(),
                partition: *p,
            };
            fan.ask(name, *p, Hosted(Some((entry, 0, None))), tp);
        }
    }
    let make = |partitions, reply| PartitionRequest::DescribePartitions {
        partitions,
        with_producers: false,
        reply,
    };
    let fill = |h: &mut Hosted, d: PartitionDescription| {
        if let Some((entry, dir, future)) = &mut h.0 {
            entry.partition_size = i64::try_from(d.size_bytes).unwrap_or(i64::MAX);
            *dir = d.log_dir;
            // Kafka's future replica: in its destination, flagged, with what is left to
            // copy as its lag (bytes here: a copy moves files, not offsets).
            *future = d.moving_to.map(|(to, copied)| {
                let mut f = entry.clone();
                f.is_future_key = true;
                f.partition_size = i64::try_from(copied).unwrap_or(i64::MAX);
                f.offset_lag =
                    i64::try_from(d.size_bytes.saturating_sub(copied)).unwrap_or(i64::MAX);
                (f, to)
            });
        }
    };
    fan.call(make, fill).await
}

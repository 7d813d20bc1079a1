//! AlterReplicaLogDirs (v1–v2): moves replicas between this broker's log directories
//! (`kafka-reassign-partitions` with `log_dirs`, `kafka-log-dirs`' counterpart).
//!
//! Kafka's answers: a path that is not one of `log.dirs` is LOG_DIR_NOT_FOUND, an
//! offline one KAFKA_STORAGE_ERROR, a partition the cluster does not have
//! UNKNOWN_TOPIC_OR_PARTITION; a replica this broker does not hold yet is
//! REPLICA_NOT_AVAILABLE, and the directory is kept for when it is created (the tool
//! retries until the reassignment has created it). The owning shard moves the replica
//! (`shard::log_dir_moves`); the answer comes once the move has started. ALTER on the
//! cluster, as Kafka asks.

use super::fan_out::{FanOut, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{PartitionRequest, TopicPartition};
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, ApiKey, TopicName,
};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

impl PartitionAnswer for AlterReplicaLogDirPartitionResult {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }
}

pub struct AlterReplicaLogDirs;

impl Handler for AlterReplicaLogDirs {
    const KEY: ApiKey = ApiKey::AlterReplicaLogDirs;
    const VERSIONS: (i16, i16) = (1, 2);
    type Request = AlterReplicaLogDirsRequest;
    type Response = AlterReplicaLogDirsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        // Each partition with the directory asked for it (the last, if asked twice), by
        // topic in name order.
        let mut asked: BTreeMap<String, BTreeMap<i32, String>> = BTreeMap::new();
        for dir in &req.dirs {
            for t in &dir.topics {
                let by_partition = asked.entry(t.name.0.to_string()).or_default();
                for p in &t.partitions {
                    by_partition.insert(*p, dir.path.to_string());
                }
            }
        }
        let allowed = Access::new(ctx, call).allows_cluster(Op::Alter);
        let meta = ctx.shard.metadata.snapshot();
        let dirs = &ctx.config.log_dirs;
        let mut fan = FanOut::new(ctx, asked.len());
        for (name, partitions) in &asked {
            let topic: Arc<str> = name.as_str().into();
            fan.next_topic(partitions.len());
            for (p, path) in partitions {
                let mut out = AlterReplicaLogDirPartitionResult::default();
                out.partition_index = *p;
                let dest = dirs.iter().position(|d| same_dir(d, path));
                let refused = if !allowed {
                    Err(ResponseError::ClusterAuthorizationFailed)
                } else if dest.is_none() {
                    Err(ResponseError::LogDirNotFound)
                } else if dest.is_some_and(|i| ctx.shard.data_dir.is_failed(i)) {
                    Err(ResponseError::KafkaStorageError)
                } else if !meta.has_partition(name, *p) {
                    Err(ResponseError::UnknownTopicOrPartition)
                } else {
                    Ok(dest.unwrap_or_default())
                };
                match refused {
                    Err(e) => fan.refuse(out, e),
                    Ok(dest) => {
                        let tp = TopicPartition {
                            topic: topic.clone(),
                            partition: *p,
                        };
                        fan.ask(name, *p, out, (tp, dest));
                    }
                }
            }
        }
        let make = |moves, reply| PartitionRequest::AlterLogDirs { moves, reply };
        let answers = fan.call(make, |_: &mut _, ()| {}).await;
        let mut body = AlterReplicaLogDirsResponse::default();
        for (name, partitions) in asked.keys().zip(answers) {
            let mut t = AlterReplicaLogDirTopicResult::default();
            t.topic_name = TopicName(name.clone().into());
            t.partitions = partitions;
            body.results.push(t);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.results {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

/// Whether `path` (as a client sent it: Kafka's tools send the absolute paths
/// DescribeLogDirs reported) names log directory `dir`.
fn same_dir(dir: &Path, path: &str) -> bool {
    let asked = Path::new(path);
    asked == dir
        || std::path::absolute(asked).is_ok_and(|a| a == dir)
        || (asked.canonicalize().ok()).is_some_and(|a| dir.canonicalize().is_ok_and(|d| a == d))
}

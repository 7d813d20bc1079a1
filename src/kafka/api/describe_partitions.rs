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
use crate::kafka::error_code;
use crate::kafka::frame::{decode_body, encode_response, FrameError, RequestFrame};
use bytes::BytesMut;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, DescribeProducersRequest,
    DescribeProducersResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use shards::mesh::{PartitionDescription, PartitionError, ShardMessage, TopicPartition};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Asks the owning shards about `partitions`; answers in the same order.
async fn describe(
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
            ShardMessage::DescribePartitions {
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

pub async fn describe_log_dirs(
    ctx: &Ctx,
    frame: &mut RequestFrame,
) -> Result<BytesMut, FrameError> {
    let req: DescribeLogDirsRequest = decode_body(frame)?;
    let meta = ctx.shard.metadata.snapshot();
    // Existing partitions asked for (all when the topic list is null), in name order.
    let mut wanted: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    match &req.topics {
        None => {
            for t in meta.topics.values() {
                wanted.insert(t.name.clone(), (0..t.partitions).collect());
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
    let described = describe(ctx, &partitions, false).await;

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
            t.name = kafka_protocol::messages::TopicName(StrBytes::from_string(name.to_string()));
            t.partitions = partitions;
            t
        })
        .collect();
    if frame.api_version >= 4 {
        match shards::housekeeping::filesystem_space(&ctx.config.data_dir) {
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
    error_code::count(ApiKey::DescribeLogDirs, body.error_code);
    encode_response(
        ApiKey::DescribeLogDirs,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

pub async fn describe_producers(
    ctx: &Ctx,
    frame: &mut RequestFrame,
) -> Result<BytesMut, FrameError> {
    let req: DescribeProducersRequest = decode_body(frame)?;
    let meta = ctx.shard.metadata.snapshot();
    // A partition named twice is INVALID_REQUEST: each answer may list thousands of
    // producers, so a request must not multiply them.
    let mut named = std::collections::HashMap::new();
    for t in &req.topics {
        for p in &t.partition_indexes {
            *named.entry((t.name.0.as_str(), *p)).or_insert(0usize) += 1;
        }
    }
    let once = |name: &str, p: i32| named.get(&(name, p)).copied().unwrap_or(0) == 1;
    let mut asked: Vec<TopicPartition> = Vec::new();
    for t in &req.topics {
        let name = t.name.0.as_str();
        let topic: Arc<str> = name.into();
        for p in &t.partition_indexes {
            if once(name, *p) && meta.has_partition(name, *p) {
                asked.push(TopicPartition {
                    topic: topic.clone(),
                    partition: *p,
                });
            }
        }
    }
    let mut described = describe(ctx, &asked, true).await.into_iter();
    let mut body = DescribeProducersResponse::default();
    for t in &req.topics {
        let name = t.name.0.as_str();
        let mut tr = TopicResponse::default();
        tr.name = t.name.clone();
        for p in &t.partition_indexes {
            let mut pr = PartitionResponse::default();
            pr.partition_index = *p;
            if !once(name, *p) {
                pr.error_code = ResponseError::InvalidRequest.code();
                pr.error_message = Some(StrBytes::from_static_str(
                    "the partition is named more than once",
                ));
                error_code::count(ApiKey::DescribeProducers, pr.error_code);
                tr.partitions.push(pr);
                continue;
            }
            let answer = if meta.has_partition(name, *p) {
                described
                    .next()
                    .unwrap_or(Err(PartitionError::ShuttingDown))
            } else {
                Err(PartitionError::UnknownTopicOrPartition)
            };
            match answer {
                Ok(d) => {
                    pr.active_producers = d
                        .producers
                        .iter()
                        .map(|a| {
                            let mut s = ProducerState::default();
                            s.producer_id = ProducerId(a.producer_id);
                            s.producer_epoch = i32::from(a.epoch);
                            s.last_sequence = a.last_sequence;
                            s.last_timestamp = a.last_timestamp_ms;
                            s.coordinator_epoch = -1;
                            s.current_txn_start_offset = -1;
                            s
                        })
                        .collect();
                }
                Err(e) => {
                    let code = error_code::partition(&e);
                    pr.error_code = code.code();
                    if code == ResponseError::UnknownTopicOrPartition {
                        pr.error_message = Some(StrBytes::from_string(format!(
                            "partition {name}-{p} does not exist"
                        )));
                    }
                }
            }
            error_code::count(ApiKey::DescribeProducers, pr.error_code);
            tr.partitions.push(pr);
        }
        body.topics.push(tr);
    }
    encode_response(
        ApiKey::DescribeProducers,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

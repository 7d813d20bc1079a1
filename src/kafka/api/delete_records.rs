//! DeleteRecords (v0–v2): moves partitions' log start offsets forward.
//!
//! Each owning shard checkpoints the new start before it answers, so an acknowledged
//! deletion survives a restart; whole segments below it are deleted at once (or at the
//! next retention round while the cleaner holds them). An offset past the high
//! watermark is OFFSET_OUT_OF_RANGE; -1 means the high watermark. The internal topic
//! is refused, as Kafka refuses it, and so is a topic whose only cleanup policy is
//! compact (POLICY_VIOLATION).

use super::fan_out::PerShard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{ApiKey, DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;
use shards::mesh::{PartitionRequest, TopicPartition};
use std::sync::Arc;

pub struct DeleteRecords;

impl Handler for DeleteRecords {
    const KEY: ApiKey = ApiKey::DeleteRecords;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DeleteRecordsRequest;
    type Response = DeleteRecordsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        _call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let mut slots: Vec<Vec<DeleteRecordsPartitionResult>> =
            Vec::with_capacity(req.topics.len());
        let mut per_shard = PerShard::new(ctx.shard.shard_count());
        let defaults = meta
            .broker_defaults(&ctx.shard.config.log, ctx.config.node_id)
            .effective();
        for (ti, t) in req.topics.iter().enumerate() {
            let name = t.name.0.as_str();
            let topic: Arc<str> = name.into();
            // Kafka refuses DeleteRecords on a topic that is only compacted.
            let compact_only = meta.topic(name).is_some_and(|m| {
                shards::topic_config::resolve(&defaults, &m.configs)
                    .is_ok_and(|c| c.cleanup.compact && !c.cleanup.delete)
            });
            let mut parts = Vec::with_capacity(t.partitions.len());
            for (pi, p) in t.partitions.iter().enumerate() {
                let mut out = DeleteRecordsPartitionResult::default();
                out.partition_index = p.partition_index;
                out.low_watermark = -1;
                if name == shards::group::OFFSETS_TOPIC {
                    out.error_code = ResponseError::InvalidTopicException.code();
                } else if let Err(e) =
                    meta.check_leader(ctx.config.node_id, name, p.partition_index)
                {
                    out.error_code = crate::kafka::error_code::not_served(&e).code();
                } else if compact_only {
                    out.error_code = ResponseError::PolicyViolation.code();
                } else if p.offset < -1 {
                    out.error_code = ResponseError::OffsetOutOfRange.code();
                } else {
                    let tp = TopicPartition {
                        topic: topic.clone(),
                        partition: p.partition_index,
                    };
                    let owner = ctx.shard.owner_of(name, p.partition_index);
                    per_shard.push(owner, (ti, pi), (tp, p.offset));
                }
                parts.push(out);
            }
            slots.push(parts);
        }
        let answers = per_shard
            .call(&ctx.shard, |partitions, reply| {
                PartitionRequest::DeleteRecords { partitions, reply }
            })
            .await;
        for ((ti, pi), answer) in answers {
            let Some(slot) = slots.get_mut(ti).and_then(|t| t.get_mut(pi)) else {
                continue;
            };
            match answer {
                Some(Ok(low_watermark)) => slot.low_watermark = low_watermark,
                Some(Err(e)) => slot.error_code = error_code::partition(&e).code(),
                None => slot.error_code = ResponseError::NotLeaderOrFollower.code(),
            }
        }
        let mut body = DeleteRecordsResponse::default();
        for (t, parts) in req.topics.iter().zip(slots) {
            let mut tr = DeleteRecordsTopicResult::default();
            tr.name = t.name.clone();
            tr.partitions = parts;
            body.topics.push(tr);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.topics {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

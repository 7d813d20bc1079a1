//! DeleteRecords (v0–v2): moves partitions' log start offsets forward.
//!
//! Each owning shard checkpoints the new start before it answers, so an acknowledged
//! deletion survives a restart; whole segments below it are deleted at once (or at the
//! next retention round while the cleaner holds them). An offset past the high
//! watermark is OFFSET_OUT_OF_RANGE; -1 means the high watermark. The internal topic
//! is refused, as Kafka refuses it, and so is a topic whose only cleanup policy is
//! compact (POLICY_VIOLATION).

use super::fan_out::{leader_check, FanOut, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{PartitionRequest, TopicPartition};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{ApiKey, DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;
use std::sync::Arc;

impl PartitionAnswer for DeleteRecordsPartitionResult {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }
}

pub struct DeleteRecords;

impl Handler for DeleteRecords {
    const KEY: ApiKey = ApiKey::DeleteRecords;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DeleteRecordsRequest;
    type Response = DeleteRecordsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let mut fan = FanOut::new(ctx, req.topics.len());
        let defaults = meta
            .broker_defaults(&ctx.shard.config.log, ctx.config.node_id)
            .effective();
        let access = Access::new(ctx, call);
        for t in &req.topics {
            let name = t.name.0.as_str();
            let topic: Arc<str> = name.into();
            let deletable = access.allows(Op::Delete, Resource::Topic, name);
            // Kafka refuses DeleteRecords on a topic that is only compacted.
            let compact_only = meta.topic(name).is_some_and(|m| {
                corelog_shards::topic_config::resolve(&defaults, &m.configs)
                    .is_ok_and(|c| c.cleanup.compact && !c.cleanup.delete)
            });
            fan.next_topic(t.partitions.len());
            for p in &t.partitions {
                let mut out = DeleteRecordsPartitionResult::default();
                out.partition_index = p.partition_index;
                out.low_watermark = -1;
                let refused = if !deletable {
                    Err(ResponseError::TopicAuthorizationFailed)
                } else if name == corelog_shards::group::OFFSETS_TOPIC {
                    Err(ResponseError::InvalidTopicException)
                } else if let Err(e) = leader_check(ctx, &meta, name, p.partition_index) {
                    Err(e)
                } else if compact_only {
                    Err(ResponseError::PolicyViolation)
                } else if p.offset < -1 {
                    Err(ResponseError::OffsetOutOfRange)
                } else {
                    Ok(())
                };
                match refused {
                    Err(e) => fan.refuse(out, e),
                    Ok(()) => {
                        let tp = TopicPartition {
                            topic: topic.clone(),
                            partition: p.partition_index,
                        };
                        fan.ask(name, p.partition_index, out, (tp, p.offset));
                    }
                }
            }
        }
        let make = |partitions, reply| PartitionRequest::DeleteRecords { partitions, reply };
        let fill = |slot: &mut DeleteRecordsPartitionResult, low_watermark: i64| {
            slot.low_watermark = low_watermark;
        };
        let answers = fan.call(make, fill).await;
        let mut body = DeleteRecordsResponse::default();
        for (t, parts) in req.topics.iter().zip(answers) {
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

//! ListOffsets (v1–v10): earliest (-2), latest (-1, the high watermark), by timestamp,
//! and from v7 the record with the largest timestamp (-3, KIP-734), from v8 the earliest
//! local offset (-4) and from v9 the latest tiered one (-5, KIP-1005). With no tiered
//! storage the local log is the whole log: -4 is the log start and nothing is tiered (-5
//! answers offset -1, as Kafka does without remote storage). read_uncommitted (and v0–1)
//! finds offsets below the high watermark, read_committed (v2+) below the last stable
//! offset, which equals it with no transactions served. v4+ carries the current leader
//! epoch (FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH when it is not the partition's) and
//! answers the epoch of the offset found. v10's timeout is for remote storage and has
//! nothing to wait on here.

use super::fan_out::{leader_check, FanOut, NamedOnce, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{
    FoundOffset, Isolation, ListOffsetsInput, PartitionRequest, TopicPartition,
    LATEST_TIERED_TIMESTAMP,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;
use std::sync::Arc;

impl PartitionAnswer for ListOffsetsPartitionResponse {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }
}

pub struct ListOffsets;

impl Handler for ListOffsets {
    const KEY: ApiKey = ApiKey::ListOffsets;
    const VERSIONS: (i16, i16) = (1, 10);
    type Request = ListOffsetsRequest;
    type Response = ListOffsetsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let isolation = Isolation::from_wire(req.isolation_level);
        let mut fan = FanOut::new(ctx, req.topics.len());
        // Kafka answers a partition named more than once with INVALID_REQUEST (each lookup
        // may read the log, so a request must not multiply them).
        let named = NamedOnce::count(req.topics.iter().flat_map(|t| {
            let name = t.name.0.as_str();
            t.partitions.iter().map(move |p| (name, p.partition_index))
        }));
        let access = Access::new(ctx, call);
        for t in &req.topics {
            let name = t.name.0.as_str();
            let topic: Arc<str> = name.into();
            let described = access.allows(Op::Describe, Resource::Topic, name);
            fan.next_topic(t.partitions.len());
            for p in &t.partitions {
                let mut out = ListOffsetsPartitionResponse::default();
                out.partition_index = p.partition_index;
                out.timestamp = -1;
                out.offset = -1;
                out.leader_epoch = -1;
                let once = named.once(name, p.partition_index);
                let served = described
                    .then_some(())
                    .ok_or(ResponseError::TopicAuthorizationFailed)
                    .and_then(|()| once.then_some(()).ok_or(ResponseError::InvalidRequest))
                    .and_then(|()| leader_check(ctx, &meta, name, p.partition_index))
                    // Special values Kafka added later (-6: earliest pending upload, v11).
                    .and_then(|()| {
                        (p.timestamp >= LATEST_TIERED_TIMESTAMP)
                            .then_some(())
                            .ok_or(ResponseError::UnsupportedVersion)
                    });
                match served {
                    Err(e) => fan.refuse(out, e),
                    Ok(()) => {
                        let input = ListOffsetsInput {
                            tp: TopicPartition {
                                topic: topic.clone(),
                                partition: p.partition_index,
                            },
                            timestamp: p.timestamp,
                            current_leader_epoch: p.current_leader_epoch,
                            isolation,
                        };
                        fan.ask(name, p.partition_index, out, input);
                    }
                }
            }
        }
        let make = |partitions, reply| PartitionRequest::ListOffsets { partitions, reply };
        let fill = |slot: &mut ListOffsetsPartitionResponse, found: FoundOffset| {
            slot.offset = found.offset;
            slot.timestamp = found.timestamp;
            if call.version >= 4 {
                slot.leader_epoch = found.leader_epoch;
            }
        };
        let answers = fan.call(make, fill).await;
        let mut body = ListOffsetsResponse::default();
        for (t, parts) in req.topics.iter().zip(answers) {
            let mut tr = ListOffsetsTopicResponse::default();
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

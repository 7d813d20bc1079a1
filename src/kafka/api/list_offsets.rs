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

use super::fan_out::PerShard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;
use shards::mesh::{
    Isolation, ListOffsetsInput, PartitionRequest, TopicPartition, LATEST_TIERED_TIMESTAMP,
};
use std::sync::Arc;

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
        let mut slots: Vec<Vec<ListOffsetsPartitionResponse>> =
            Vec::with_capacity(req.topics.len());
        let mut per_shard = PerShard::new(ctx.shard.shard_count());
        // Kafka answers a partition named more than once with INVALID_REQUEST (each lookup
        // may read the log, so a request must not multiply them).
        let mut named = std::collections::HashMap::new();
        for t in &req.topics {
            for p in &t.partitions {
                *named
                    .entry((t.name.0.as_str(), p.partition_index))
                    .or_insert(0usize) += 1;
            }
        }
        for (ti, t) in req.topics.iter().enumerate() {
            let name = t.name.0.as_str();
            let topic: Arc<str> = name.into();
            let mut parts = Vec::with_capacity(t.partitions.len());
            for (pi, p) in t.partitions.iter().enumerate() {
                let mut out = ListOffsetsPartitionResponse::default();
                out.partition_index = p.partition_index;
                out.timestamp = -1;
                out.offset = -1;
                out.leader_epoch = -1;
                if named.get(&(name, p.partition_index)).copied().unwrap_or(0) > 1 {
                    out.error_code = ResponseError::InvalidRequest.code();
                } else if let Err(e) =
                    meta.check_leader(ctx.config.node_id, name, p.partition_index)
                {
                    out.error_code = crate::kafka::error_code::not_served(&e).code();
                } else if p.timestamp < LATEST_TIERED_TIMESTAMP {
                    // Special values Kafka added later (-6: earliest pending upload, v11).
                    out.error_code = ResponseError::UnsupportedVersion.code();
                } else {
                    let tp = TopicPartition {
                        topic: topic.clone(),
                        partition: p.partition_index,
                    };
                    let owner = ctx.shard.owner_of(name, p.partition_index);
                    let input = ListOffsetsInput {
                        tp,
                        timestamp: p.timestamp,
                        current_leader_epoch: p.current_leader_epoch,
                        isolation,
                    };
                    per_shard.push(owner, (ti, pi), input);
                }
                parts.push(out);
            }
            slots.push(parts);
        }
        let answers = per_shard
            .call(&ctx.shard, |partitions, reply| {
                PartitionRequest::ListOffsets { partitions, reply }
            })
            .await;
        for ((ti, pi), answer) in answers {
            let Some(slot) = slots.get_mut(ti).and_then(|t| t.get_mut(pi)) else {
                continue;
            };
            match answer.map(|o| o.result) {
                Some(Ok(found)) => {
                    slot.offset = found.offset;
                    slot.timestamp = found.timestamp;
                    if call.version >= 4 {
                        slot.leader_epoch = found.leader_epoch;
                    }
                }
                Some(Err(e)) => slot.error_code = error_code::partition(&e).code(),
                None => slot.error_code = ResponseError::NotLeaderOrFollower.code(),
            }
        }
        for _p in slots.iter().flatten() {}
        let mut body = ListOffsetsResponse::default();
        for (t, parts) in req.topics.iter().zip(slots) {
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

//! OffsetForLeaderEpoch (v2–v4): where a leader epoch ended, from each partition's
//! leader-epoch cache. Consumers ask it after a leader change to detect a log truncated
//! under them (KIP-320); followers will ask it to find their divergent tail.
//!
//! Per partition: the current leader epoch is checked first (FENCED_LEADER_EPOCH,
//! UNKNOWN_LEADER_EPOCH), then the answer is the cache's: the latest epoch ends at the
//! log end, an older one where the next epoch starts, and an unknown one answers epoch
//! and offset -1 with no error, as Kafka does. A partition named twice is answered twice.

use super::fan_out::PerShard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::ResponseError;
use shards::mesh::{EpochQuery, PartitionRequest, TopicPartition};
use std::sync::Arc;

pub struct OffsetForLeaderEpoch;

impl Handler for OffsetForLeaderEpoch {
    const KEY: ApiKey = ApiKey::OffsetForLeaderEpoch;
    const VERSIONS: (i16, i16) = (2, 4);
    type Request = OffsetForLeaderEpochRequest;
    type Response = OffsetForLeaderEpochResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        _call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let mut slots: Vec<Vec<EpochEndOffset>> = Vec::with_capacity(req.topics.len());
        let mut per_shard = PerShard::new(ctx.shard.shard_count());
        for (ti, t) in req.topics.iter().enumerate() {
            let name = t.topic.0.as_str();
            let topic: Arc<str> = name.into();
            let mut parts = Vec::with_capacity(t.partitions.len());
            for (pi, p) in t.partitions.iter().enumerate() {
                let mut out = EpochEndOffset::default();
                out.partition = p.partition;
                if let Err(e) = meta.check_leader(ctx.config.node_id, name, p.partition) {
                    out.error_code = crate::kafka::error_code::not_served(&e).code();
                } else {
                    let query = EpochQuery {
                        tp: TopicPartition {
                            topic: topic.clone(),
                            partition: p.partition,
                        },
                        current_leader_epoch: p.current_leader_epoch,
                        leader_epoch: p.leader_epoch,
                    };
                    per_shard.push(ctx.shard.owner_of(name, p.partition), (ti, pi), query);
                }
                parts.push(out);
            }
            slots.push(parts);
        }
        let answers = per_shard
            .call(&ctx.shard, |partitions, reply| {
                PartitionRequest::EpochEndOffsets { partitions, reply }
            })
            .await;
        for ((ti, pi), answer) in answers {
            let Some(slot) = slots.get_mut(ti).and_then(|t| t.get_mut(pi)) else {
                continue;
            };
            match answer {
                Some(Ok((epoch, end_offset))) => {
                    slot.leader_epoch = epoch;
                    slot.end_offset = end_offset;
                }
                Some(Err(e)) => slot.error_code = error_code::partition(&e).code(),
                None => slot.error_code = ResponseError::NotLeaderOrFollower.code(),
            }
        }
        let mut body = OffsetForLeaderEpochResponse::default();
        for (t, parts) in req.topics.iter().zip(slots) {
            for _p in &parts {}
            let mut tr = OffsetForLeaderTopicResult::default();
            tr.topic = t.topic.clone();
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

//! OffsetForLeaderEpoch (v2–v4): where a leader epoch ended, from each partition's
//! leader-epoch cache. Consumers ask it after a leader change to detect a log truncated
//! under them (KIP-320); followers will ask it to find their divergent tail.
//!
//! Per partition: the current leader epoch is checked first (FENCED_LEADER_EPOCH,
//! UNKNOWN_LEADER_EPOCH), then the answer is the cache's: the latest epoch ends at the
//! log end, an older one where the next epoch starts, and an unknown one answers epoch
//! and offset -1 with no error, as Kafka does. A partition named twice is answered twice.

use super::fan_out::{leader_check, FanOut, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{EpochQuery, PartitionRequest, TopicPartition};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::ResponseError;
use std::sync::Arc;

impl PartitionAnswer for EpochEndOffset {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }
}

pub struct OffsetForLeaderEpoch;

impl Handler for OffsetForLeaderEpoch {
    const KEY: ApiKey = ApiKey::OffsetForLeaderEpoch;
    const VERSIONS: (i16, i16) = (2, 4);
    type Request = OffsetForLeaderEpochRequest;
    type Response = OffsetForLeaderEpochResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let mut fan = FanOut::new(ctx, req.topics.len());
        // A follower (v3+ names its replica id) needs CLUSTER_ACTION, a client DESCRIBE on
        // each topic.
        let access = Access::new(ctx, call);
        let replica_allowed =
            (req.replica_id.0 >= 0).then(|| access.allows_cluster(Op::ClusterAction));
        for t in &req.topics {
            let name = t.topic.0.as_str();
            let topic: Arc<str> = name.into();
            let authorized = replica_allowed
                .unwrap_or_else(|| access.allows(Op::Describe, Resource::Topic, name));
            fan.next_topic(t.partitions.len());
            for p in &t.partitions {
                let mut out = EpochEndOffset::default();
                out.partition = p.partition;
                let checked = authorized
                    .then_some(())
                    .ok_or(ResponseError::TopicAuthorizationFailed)
                    .and_then(|()| leader_check(ctx, &meta, name, p.partition));
                match checked {
                    Err(e) => fan.refuse(out, e),
                    Ok(()) => {
                        let query = EpochQuery {
                            tp: TopicPartition {
                                topic: topic.clone(),
                                partition: p.partition,
                            },
                            current_leader_epoch: p.current_leader_epoch,
                            leader_epoch: p.leader_epoch,
                        };
                        fan.ask(name, p.partition, out, query);
                    }
                }
            }
        }
        let make = |partitions, reply| PartitionRequest::EpochEndOffsets { partitions, reply };
        let fill = |slot: &mut EpochEndOffset, (epoch, end_offset): (i32, i64)| {
            slot.leader_epoch = epoch;
            slot.end_offset = end_offset;
        };
        let answers = fan.call(make, fill).await;
        let mut body = OffsetForLeaderEpochResponse::default();
        for (t, parts) in req.topics.iter().zip(answers) {
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

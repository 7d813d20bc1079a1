//! DescribeProducers (v0): the idempotent and transactional producers each partition
//! remembers (the state its sequence checks use), from the owning shards, with the epoch,
//! the last sequence written, the largest timestamp of its last batch (-1 when only an
//! older snapshot knew it), the epoch of the coordinator of its last transaction marker
//! and the first offset of its open transaction (-1 when none): what
//! `kafka-transactions find-hanging` and `abort` read.
//! An unknown partition is UNKNOWN_TOPIC_OR_PARTITION; one named twice is
//! INVALID_REQUEST.

use super::fan_out::{FanOut, NamedOnce, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{PartitionDescription, PartitionRequest, TopicPartition};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::sync::Arc;

impl PartitionAnswer for PartitionResponse {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }
}

pub struct DescribeProducers;

impl Handler for DescribeProducers {
    const KEY: ApiKey = ApiKey::DescribeProducers;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DescribeProducersRequest;
    type Response = DescribeProducersResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        // A partition named twice is INVALID_REQUEST: each answer may list thousands of
        // producers, so a request must not multiply them.
        let named = NamedOnce::count(req.topics.iter().flat_map(|t| {
            let name = t.name.0.as_str();
            t.partition_indexes.iter().map(move |p| (name, *p))
        }));
        let mut fan = FanOut::new(ctx, req.topics.len());
        let access = Access::new(ctx, call);
        for t in &req.topics {
            let name = t.name.0.as_str();
            let topic: Arc<str> = name.into();
            let readable = access.allows(Op::Read, Resource::Topic, name);
            fan.next_topic(t.partition_indexes.len());
            for p in &t.partition_indexes {
                let mut pr = PartitionResponse::default();
                pr.partition_index = *p;
                if !readable {
                    fan.refuse(pr, ResponseError::TopicAuthorizationFailed);
                } else if !named.once(name, *p) {
                    pr.error_message = Some(StrBytes::from_static_str(
                        "the partition is named more than once",
                    ));
                    fan.refuse(pr, ResponseError::InvalidRequest);
                } else if !meta.has_partition(name, *p) {
                    fan.refuse(pr, ResponseError::UnknownTopicOrPartition);
                } else {
                    let tp = TopicPartition {
                        topic: topic.clone(),
                        partition: *p,
                    };
                    fan.ask(name, *p, pr, tp);
                }
            }
        }
        let make = |partitions, reply| PartitionRequest::DescribePartitions {
            partitions,
            with_producers: true,
            reply,
        };
        let fill = |pr: &mut PartitionResponse, d: PartitionDescription| {
            pr.active_producers = d
                .producers
                .iter()
                .map(|a| {
                    let mut s = ProducerState::default();
                    s.producer_id = ProducerId(a.producer_id);
                    s.producer_epoch = i32::from(a.epoch);
                    s.last_sequence = a.last_sequence;
                    s.last_timestamp = a.last_timestamp_ms;
                    s.coordinator_epoch = a.coordinator_epoch;
                    s.current_txn_start_offset = a.current_txn_start_offset;
                    s
                })
                .collect();
        };
        let answers = fan.call(make, fill).await;
        let mut body = DescribeProducersResponse::default();
        for (t, mut parts) in req.topics.iter().zip(answers) {
            let name = t.name.0.as_str();
            for pr in &mut parts {
                if pr.error_code == ResponseError::UnknownTopicOrPartition.code() {
                    let p = pr.partition_index;
                    pr.error_message = Some(StrBytes::from_string(format!(
                        "partition {name}-{p} does not exist"
                    )));
                }
            }
            let mut tr = TopicResponse::default();
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

//! DescribeProducers (v0): the idempotent producers each partition remembers, from the
//! owning shards (see `partition_descriptions`).

use super::handler::{Call, Handler};
use super::partition_descriptions::describe;
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use shards::mesh::{PartitionError, TopicPartition};
use std::sync::Arc;

pub struct DescribeProducers;

impl Handler for DescribeProducers {
    const KEY: ApiKey = ApiKey::DescribeProducers;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DescribeProducersRequest;
    type Response = DescribeProducersResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        _call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
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
                tr.partitions.push(pr);
            }
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

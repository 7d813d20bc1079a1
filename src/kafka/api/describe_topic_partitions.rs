//! DescribeTopicPartitions (v0, KIP-966): topics and their partitions, paged.
//!
//! What the Java admin client uses for describeTopics in place of Metadata. Topics are
//! answered in name order (the named ones, or all when none is named), from the
//! request's cursor on, and at most `response_partition_limit` partitions (capped at
//! Kafka's `max.request.partition.size.limit`, 2000) per response; `next_cursor` names
//! the first partition left out. A named topic that does not exist is answered with
//! UNKNOWN_TOPIC_OR_PARTITION; a cursor whose topic is not among the named ones is
//! INVALID_REQUEST, as Kafka answers. Partitions carry no eligible leader replicas
//! (there is one replica).

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::authorized_operations as ops;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeSet;

/// Kafka's `max.request.partition.size.limit` default.
const PARTITIONS_PER_RESPONSE_MAX: i32 = 2000;

pub struct DescribeTopicPartitions;

impl Handler for DescribeTopicPartitions {
    const KEY: ApiKey = ApiKey::DescribeTopicPartitions;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DescribeTopicPartitionsRequest;
    type Response = DescribeTopicPartitionsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let named: BTreeSet<String> = req.topics.iter().map(|t| t.name.0.to_string()).collect();
        let cursor = req
            .cursor
            .as_ref()
            .map(|c| (c.topic_name.0.to_string(), c.partition_index.max(0)));
        let mut body = DescribeTopicPartitionsResponse::default();

        if let Some((topic, _)) = &cursor {
            if !named.is_empty() && !named.contains(topic) {
                // An inconsistent page: Kafka answers every named topic with the error.
                for name in &named {
                    let mut out = DescribeTopicPartitionsResponseTopic::default();
                    out.name = Some(TopicName(StrBytes::from_string(name.clone())));
                    out.error_code = ResponseError::InvalidRequest.code();
                    out.topic_authorized_operations = ops::NOT_REQUESTED;
                    body.topics.push(out);
                }
                return Ok(body);
            }
        }
        // DESCRIBE on each topic: asked for all, the others are left out; named, they
        // are TOPIC_AUTHORIZATION_FAILED.
        let access = Access::new(ctx, call);
        let all = named.is_empty();
        let names: Vec<String> = if all {
            meta.topics
                .keys()
                .filter(|n| access.may(Op::Describe, Resource::Topic, n))
                .cloned()
                .collect()
        } else {
            named.into_iter().collect()
        };
        let mut budget = req
            .response_partition_limit
            .clamp(1, PARTITIONS_PER_RESPONSE_MAX);
        for name in names {
            let first_partition = match &cursor {
                Some((topic, _)) if name < *topic => continue,
                Some((topic, p)) if name == *topic => *p,
                _ => 0,
            };
            let mut out = DescribeTopicPartitionsResponseTopic::default();
            out.name = Some(TopicName(StrBytes::from_string(name.clone())));
            if !all && !access.allows(Op::Describe, Resource::Topic, &name) {
                out.error_code = ResponseError::TopicAuthorizationFailed.code();
                out.topic_authorized_operations = ops::NOT_REQUESTED;
                body.topics.push(out);
                continue;
            }
            out.topic_authorized_operations = access.operations(ops::TOPIC, Resource::Topic, &name);
            let Some(t) = meta.topic(&name) else {
                out.error_code = ResponseError::UnknownTopicOrPartition.code();
                body.topics.push(out);
                continue;
            };
            if budget == 0 {
                body.next_cursor = Some(cursor_at(&name, first_partition));
                break;
            }
            out.topic_id = t.id;
            out.is_internal = corelog_shards::metadata::ClusterMetadata::is_internal(&name);
            let mut p = first_partition;
            while p < t.partition_count() && budget > 0 {
                let Some(state) = t.partition(p) else { break };
                let mut part = DescribeTopicPartitionsResponsePartition::default();
                part.partition_index = p;
                part.leader_id = BrokerId(state.leader);
                part.leader_epoch = state.leader_epoch;
                part.replica_nodes = state.replicas.iter().map(|b| BrokerId(*b)).collect();
                part.isr_nodes = state.isr.iter().map(|b| BrokerId(*b)).collect();
                part.offline_replicas = state
                    .replicas
                    .iter()
                    .filter(|b| !corelog_controller::image::can_serve(&meta.brokers, state, **b))
                    .map(|b| BrokerId(*b))
                    .collect();
                if !state.has_leader() {
                    part.error_code = kafka_protocol::ResponseError::LeaderNotAvailable.code();
                }
                part.eligible_leader_replicas = Some(Vec::new());
                part.last_known_elr = Some(Vec::new());
                out.partitions.push(part);
                p += 1;
                budget -= 1;
            }
            body.topics.push(out);
            if p < t.partition_count() {
                body.next_cursor = Some(cursor_at(&name, p));
                break;
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.topics {
            each(t.error_code);
        }
    }
}

fn cursor_at(topic: &str, partition: i32) -> Cursor {
    let mut c = Cursor::default();
    c.topic_name = TopicName(StrBytes::from_string(topic.to_string()));
    c.partition_index = partition;
    c
}

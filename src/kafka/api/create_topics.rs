//! CreateTopics (v0–v7): through the controller quorum (`admin_change`), which
//! places the partitions over the live brokers (or checks the given assignments) and
//! answers once this broker's shards have opened theirs. Replication factor and partition
//! count -1 are the broker defaults (`default.replication.factor`, `num.partitions`); the
//! request's own checks answer Kafka's codes and messages.

use super::admin_change::{create_or_validate, message};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource, CLUSTER_NAME};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{NewTopic, TopicError};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, HashSet};

pub struct CreateTopics;

impl Handler for CreateTopics {
    const KEY: ApiKey = ApiKey::CreateTopics;
    const VERSIONS: (i16, i16) = (0, 7);
    type Request = CreateTopicsRequest;
    type Response = CreateTopicsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut results: Vec<Option<Result<(), TopicError>>> = Vec::with_capacity(req.topics.len());
        let mut to_create = Vec::new();
        let mut seen = HashSet::new();
        let mut duplicates = HashSet::new();
        for t in &req.topics {
            if !seen.insert(t.name.0.to_string()) {
                duplicates.insert(t.name.0.to_string());
            }
        }
        // CREATE on the cluster covers every topic; else each topic's own CREATE.
        let access = Access::new(ctx, call);
        let cluster_create = access.may(Op::Create, Resource::Cluster, CLUSTER_NAME);
        for t in &req.topics {
            let name = t.name.0.to_string();
            let check = (|| {
                if duplicates.contains(&name) {
                    return Err(TopicError::Duplicate);
                }
                if !cluster_create && !access.allows(Op::Create, Resource::Topic, &name) {
                    return Err(TopicError::Unauthorized);
                }
                // Kafka's ReplicationControlManager.createTopic, in its order and with
                // its codes; what depends on the brokers is checked when the controller
                // applies the creation.
                let (partitions, assignments, replication_factor) = if !t.assignments.is_empty() {
                    if t.replication_factor != -1 {
                        return Err(TopicError::Invalid(
                            "A manual partition assignment was specified, but replication factor was not set to -1.".into(),
                        ));
                    }
                    if t.num_partitions != -1 {
                        return Err(TopicError::Invalid(
                            "A manual partition assignment was specified, but numPartitions was not set to -1.".into(),
                        ));
                    }
                    let mut by_partition = BTreeMap::new();
                    for a in &t.assignments {
                        let replicas: Vec<i32> = a.broker_ids.iter().map(|b| b.0).collect();
                        if by_partition.insert(a.partition_index, replicas).is_some() {
                            return Err(TopicError::InvalidReplicaAssignment(format!(
                                "Found multiple manual partition assignments for partition {}",
                                a.partition_index
                            )));
                        }
                    }
                    if !by_partition
                        .keys()
                        .copied()
                        .eq(0..by_partition.len() as i32)
                    {
                        return Err(TopicError::InvalidReplicaAssignment(
                            "partitions should be a consecutive 0-based integer sequence".into(),
                        ));
                    }
                    let lists: Vec<Vec<i32>> = by_partition.into_values().collect();
                    let rf = lists.first().map_or(0, |l| l.len() as i32);
                    (lists.len() as i32, Some(lists), rf)
                } else {
                    if t.replication_factor == 0 || t.replication_factor < -1 {
                        return Err(TopicError::InvalidReplicationFactor(
                            "Replication factor must be larger than 0, or -1 to use the default value.".into(),
                        ));
                    }
                    if t.num_partitions == 0 || t.num_partitions < -1 {
                        return Err(TopicError::InvalidPartitions(
                            "Number of partitions was set to an invalid non-positive value.".into(),
                        ));
                    }
                    let partitions = if t.num_partitions == -1 {
                        ctx.config.num_partitions
                    } else {
                        t.num_partitions
                    };
                    let rf = if t.replication_factor == -1 {
                        ctx.config.cluster.default_replication_factor
                    } else {
                        i32::from(t.replication_factor)
                    };
                    (partitions, None, rf)
                };
                Ok(NewTopic {
                    name: name.clone(),
                    partitions,
                    replication_factor,
                    assignments,
                    configs: t
                        .configs
                        .iter()
                        .filter_map(|c| {
                            c.value
                                .as_ref()
                                .map(|v| (c.name.to_string(), v.to_string()))
                        })
                        .collect(),
                })
            })();
            match check {
                Ok(nt) => {
                    to_create.push(nt);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let created = if to_create.is_empty() {
            Vec::new()
        } else {
            create_or_validate(ctx, to_create.clone(), req.validate_only).await
        };
        let mut created = created.into_iter();
        let mut planned = to_create.into_iter();
        let meta = ctx.shard.metadata.snapshot();
        let mut body = CreateTopicsResponse::default();
        for (t, r) in req.topics.iter().zip(results) {
            let mut out = CreatableTopicResult::default();
            out.name = t.name.clone();
            out.num_partitions = -1;
            out.replication_factor = -1;
            let (r, plan) = match r {
                Some(r) => (r, None),
                None => (
                    created
                        .next()
                        .unwrap_or_else(|| Err(TopicError::Storage("no controller answer".into()))),
                    planned.next(),
                ),
            };
            match r {
                Ok(()) => {
                    if let Some(tm) = meta.topic(&t.name.0) {
                        out.topic_id = tm.id;
                        out.num_partitions = tm.partition_count();
                        out.replication_factor = tm
                            .partitions
                            .first()
                            .map_or(-1, |p| i16::try_from(p.replicas.len()).unwrap_or(-1));
                    } else if let Some(p) = &plan {
                        // validate_only
                        out.num_partitions = p.partitions;
                        out.replication_factor = i16::try_from(p.replication_factor).unwrap_or(-1);
                    }
                    // KIP-525 (v5+): the topic's resulting configs, as DescribeConfigs shows
                    // them, to a principal that may describe them.
                    if call.version >= 5
                        && !access.may(Op::DescribeConfigs, Resource::Topic, &t.name.0)
                    {
                        out.topic_config_error_code =
                            ResponseError::TopicAuthorizationFailed.code();
                    } else if call.version >= 5 {
                        let overrides = match &plan {
                            Some(p) => p.configs.iter().cloned().collect(),
                            None => meta
                                .topic(&t.name.0)
                                .map(|m| m.configs.clone())
                                .unwrap_or_default(),
                        };
                        let defaults =
                            meta.broker_defaults(&ctx.shard.config.log, ctx.config.node_id);
                        let described =
                            corelog_shards::topic_config::describe_topic(&defaults, &overrides);
                        out.configs = Some(
                            described
                                .into_iter()
                                .map(|d| {
                                    let mut c = CreatableTopicConfigs::default();
                                    c.name = StrBytes::from_string(d.name);
                                    c.value = d.value.map(StrBytes::from_string);
                                    c.config_source = d.source as i8;
                                    c
                                })
                                .collect(),
                        );
                    }
                }
                Err(e) => {
                    out.error_code = error_code::topic(&e).code();
                    out.error_message = message(&e);
                }
            }
            body.topics.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.topics {
            each(t.error_code);
        }
    }
}

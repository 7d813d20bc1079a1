//! CreateTopics (v0–v7), DeleteTopics (v0–v6), CreatePartitions (v0–v3).
//!
//! All three go to the controller on shard 0, which persists the change and has every
//! owning shard open (or drop) its partitions before answering. This is a single-node
//! broker: a replication factor other than 1 (or -1, "default") is
//! INVALID_REPLICATION_FACTOR, and explicit replica assignments must name this node.

use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::{decode_body, encode_response, FrameError, RequestFrame};
use bytes::BytesMut;
use futures::channel::oneshot;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use shards::mesh::{ControllerRequest, NewTopic, Reply, ShardMessage, TopicError};
use shards::routing::CONTROLLER_SHARD;
use std::collections::HashSet;

/// Sends a topic change about `n` topics to the controller (shard 0) and returns one
/// outcome per topic; every one is a storage error if the controller cannot be reached
/// (shutdown). The one way the edge asks for a metadata change.
pub async fn ask_controller(
    ctx: &Ctx,
    n: usize,
    request: impl FnOnce(Reply<Vec<Result<(), TopicError>>>) -> ControllerRequest,
) -> Vec<Result<(), TopicError>> {
    if n == 0 {
        return Vec::new();
    }
    let (tx, rx) = oneshot::channel();
    let msg = ShardMessage::Controller(request(tx));
    ctx.shard
        .call(CONTROLLER_SHARD, msg, rx)
        .await
        .unwrap_or_else(|| {
            (0..n)
                .map(|_| Err(TopicError::Storage("the controller is unavailable".into())))
                .collect()
        })
}

pub async fn create_via_controller(
    ctx: &Ctx,
    topics: Vec<NewTopic>,
) -> Vec<Result<(), TopicError>> {
    create_or_validate(ctx, topics, false).await
}

async fn create_or_validate(
    ctx: &Ctx,
    topics: Vec<NewTopic>,
    validate_only: bool,
) -> Vec<Result<(), TopicError>> {
    ask_controller(ctx, topics.len(), |reply| ControllerRequest::CreateTopics {
        topics,
        validate_only,
        reply,
    })
    .await
}

fn message(e: &TopicError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.to_string()))
}

pub async fn create_topics(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: CreateTopicsRequest = decode_body(frame)?;
    let mut results: Vec<Option<Result<(), TopicError>>> = Vec::with_capacity(req.topics.len());
    let mut to_create = Vec::new();
    let mut seen = HashSet::new();
    let mut duplicates = HashSet::new();
    for t in &req.topics {
        if !seen.insert(t.name.0.to_string()) {
            duplicates.insert(t.name.0.to_string());
        }
    }
    for t in &req.topics {
        let name = t.name.0.to_string();
        let check = (|| {
            if duplicates.contains(&name) {
                return Err(TopicError::Duplicate);
            }
            if t.replication_factor != -1 && t.replication_factor != 1 {
                return Err(TopicError::InvalidReplicationFactor);
            }
            let partitions = if !t.assignments.is_empty() {
                if t.num_partitions != -1 {
                    return Err(TopicError::InvalidReplicaAssignment(
                        "both num_partitions and replica assignments were given".into(),
                    ));
                }
                let mut indexes: Vec<i32> =
                    t.assignments.iter().map(|a| a.partition_index).collect();
                indexes.sort_unstable();
                let dense = indexes.iter().enumerate().all(|(i, p)| *p == i as i32);
                let ours = t.assignments.iter().all(|a| {
                    a.broker_ids.len() == 1
                        && a.broker_ids.first().map(|b| b.0) == Some(ctx.config.node_id)
                });
                if !dense || !ours {
                    return Err(TopicError::InvalidReplicaAssignment(
                        "partitions must be 0..n, each on this node only".into(),
                    ));
                }
                t.assignments.len() as i32
            } else if t.num_partitions == -1 {
                ctx.config.num_partitions
            } else {
                t.num_partitions
            };
            Ok(NewTopic {
                name: name.clone(),
                partitions,
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
                    out.num_partitions = tm.partitions;
                } else if let Some(p) = &plan {
                    out.num_partitions = p.partitions; // validate_only
                }
                out.replication_factor = 1;
                // KIP-525 (v5+): the topic's resulting configs, as DescribeConfigs shows them.
                if frame.api_version >= 5 {
                    let overrides = match &plan {
                        Some(p) => p.configs.iter().cloned().collect(),
                        None => meta
                            .topic(&t.name.0)
                            .map(|m| m.configs.clone())
                            .unwrap_or_default(),
                    };
                    let defaults = meta.broker_defaults(&ctx.shard.config.log, ctx.config.node_id);
                    let described = shards::topic_config::describe_topic(&defaults, &overrides);
                    out.configs = Some(
                        described
                            .into_iter()
                            .map(|d| {
                                let mut c = CreatableTopicConfigs::default();
                                c.name = StrBytes::from_string(d.name);
                                c.value = Some(StrBytes::from_string(d.value));
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
    for t in &body.topics {
        error_code::count(ApiKey::CreateTopics, t.error_code);
    }
    encode_response(
        ApiKey::CreateTopics,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

pub async fn delete_topics(ctx: &Ctx, frame: &mut RequestFrame) -> Result<BytesMut, FrameError> {
    let req: DeleteTopicsRequest = decode_body(frame)?;
    let meta = ctx.shard.metadata.snapshot();
    // v0–v5 name topics in `topic_names`; v6 in `topics`, by name or by id.
    let named: Vec<(Option<String>, uuid::Uuid)> = if frame.api_version >= 6 {
        req.topics
            .iter()
            .map(|t| match &t.name {
                Some(n) => (Some(n.0.to_string()), t.topic_id),
                None => (
                    meta.topic_by_id(t.topic_id).map(|m| m.name.clone()),
                    t.topic_id,
                ),
            })
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    // The broker's internal topics cannot be deleted by clients.
    let internal = |n: &str| n == shards::group::OFFSETS_TOPIC;
    let names: Vec<String> = named
        .iter()
        .filter_map(|(n, _)| n.clone())
        .filter(|n| !internal(n))
        .collect();
    let results = ask_controller(ctx, names.len(), |reply| ControllerRequest::DeleteTopics {
        names: names.clone(),
        reply,
    })
    .await;
    let mut results = results.into_iter();
    let mut body = DeleteTopicsResponse::default();
    for (name, id) in named {
        let mut out = DeletableTopicResult::default();
        out.topic_id = meta
            .topic(name.as_deref().unwrap_or_default())
            .map(|t| t.id)
            .unwrap_or(id);
        match name {
            Some(n) if internal(&n) => {
                out.name = Some(TopicName(StrBytes::from_string(n)));
                out.error_code = ResponseError::InvalidTopicException.code();
                out.error_message = Some(StrBytes::from_static_str(
                    "internal topics cannot be deleted",
                ));
            }
            Some(n) => {
                out.name = Some(TopicName(StrBytes::from_string(n)));
                if let Some(Err(e)) = results.next() {
                    out.error_code = error_code::topic(&e).code();
                    out.error_message = message(&e);
                }
            }
            None => out.error_code = ResponseError::UnknownTopicId.code(),
        }
        body.responses.push(out);
    }
    for t in &body.responses {
        error_code::count(ApiKey::DeleteTopics, t.error_code);
    }
    encode_response(
        ApiKey::DeleteTopics,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

pub async fn create_partitions(
    ctx: &Ctx,
    frame: &mut RequestFrame,
) -> Result<BytesMut, FrameError> {
    let req: CreatePartitionsRequest = decode_body(frame)?;
    let mut pre: Vec<Option<TopicError>> = Vec::with_capacity(req.topics.len());
    let mut asks = Vec::new();
    for t in &req.topics {
        let bad_assignment = t.assignments.as_ref().is_some_and(|a| {
            !a.iter().all(|x| {
                x.broker_ids.len() == 1
                    && x.broker_ids.first().map(|b| b.0) == Some(ctx.config.node_id)
            })
        });
        if bad_assignment {
            pre.push(Some(TopicError::InvalidReplicaAssignment(
                "each new partition must be on this node only".into(),
            )));
        } else {
            pre.push(None);
            asks.push((t.name.0.to_string(), t.count));
        }
    }
    let results = ask_controller(ctx, asks.len(), |reply| {
        ControllerRequest::CreatePartitions {
            topics: asks,
            validate_only: req.validate_only,
            reply,
        }
    })
    .await;
    let mut results = results.into_iter();
    let mut body = CreatePartitionsResponse::default();
    for (t, p) in req.topics.iter().zip(pre) {
        let mut out = CreatePartitionsTopicResult::default();
        out.name = t.name.clone();
        let err = match p {
            Some(e) => Some(e),
            None => results.next().and_then(|r| r.err()),
        };
        if let Some(e) = err {
            out.error_code = error_code::topic(&e).code();
            out.error_message = message(&e);
        }
        body.results.push(out);
    }
    for t in &body.results {
        error_code::count(ApiKey::CreatePartitions, t.error_code);
    }
    encode_response(
        ApiKey::CreatePartitions,
        frame.api_version,
        frame.header.correlation_id,
        &body,
    )
}

//! Metadata (v0–v13; v13 adds a top-level error code, never set here): brokers (this node), topics, partitions, leaders; auto-creation.
//!
//! Topics are created on a Metadata request when `auto.create.topics.enable` is on and,
//! from v4, the request allows it (librdkafka's own test suite leans on this). Creation is synchronous through the controller, so the response
//! already lists the new topic's partitions.

use super::controller_call::create_via_controller;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::authorized_operations::{self as ops, NOT_REQUESTED};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use shards::mesh::{NewTopic, TopicError};
use shards::metadata::{validate_topic_name, ClusterMetadata, TopicMeta};

pub struct Metadata;

impl Handler for Metadata {
    const KEY: ApiKey = ApiKey::Metadata;
    const VERSIONS: (i16, i16) = (0, 13);
    type Request = MetadataRequest;
    type Response = MetadataResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let version = call.version;
        let mut meta = ctx.shard.metadata.snapshot();

        // Which topics: None = all (v1+); v0 uses an empty list for all.
        let requested: Option<Vec<(Option<String>, uuid::Uuid)>> = match &req.topics {
            None => None,
            Some(t) if t.is_empty() && version == 0 => None,
            Some(t) => Some(
                t.iter()
                    .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
                    .collect(),
            ),
        };

        // KIP-430: asked for by v8+ (the cluster's only up to v10; v11 moved it to
        // DescribeCluster).
        let topic_ops = ops::if_requested(req.include_topic_authorized_operations, ops::TOPIC);
        let cluster_ops = ops::if_requested(
            (8..=10).contains(&version) && req.include_cluster_authorized_operations,
            ops::CLUSTER,
        );
        let mut topics = Vec::new();
        match requested {
            None => {
                for t in meta.topics.values() {
                    topics.push(topic_entry(ctx, t, topic_ops));
                }
            }
            Some(list) => {
                let auto =
                    ctx.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
                // Entries naming a topic id are looked up by id, never auto-created by name.
                let missing: Vec<String> = list
                    .iter()
                    .filter(|(_, id)| id.is_nil())
                    .filter_map(|(n, _)| n.clone())
                    .filter(|n| meta.topic(n).is_none() && validate_topic_name(n).is_ok())
                    .collect();
                let mut create_errors = std::collections::HashMap::new();
                if auto && !missing.is_empty() {
                    let new = missing
                        .iter()
                        .map(|n| NewTopic {
                            name: n.clone(),
                            partitions: ctx.config.num_partitions,
                            configs: Vec::new(),
                        })
                        .collect();
                    let results = create_via_controller(ctx, new).await;
                    for (n, r) in missing.iter().zip(results) {
                        match r {
                            Ok(()) | Err(TopicError::AlreadyExists) => {}
                            Err(e) => {
                                create_errors.insert(n.clone(), e);
                            }
                        }
                    }
                    meta = ctx.shard.metadata.snapshot();
                }
                for (name, id) in list {
                    // A non-zero topic id names the topic whatever the name says: the Java
                    // client describes by id with an empty (not null) name, as Kafka allows.
                    let by_id = !id.is_nil();
                    let name = if by_id { None } else { name };
                    let found = match &name {
                        Some(n) => meta.topic(n),
                        None => meta.topic_by_id(id),
                    };
                    let entry = match (found, &name) {
                        (Some(t), _) => topic_entry(ctx, t, topic_ops),
                        (None, Some(n)) => {
                            let code = if validate_topic_name(n).is_err() {
                                ResponseError::InvalidTopicException
                            } else if let Some(e) = create_errors.get(n) {
                                error_code::topic(e)
                            } else {
                                ResponseError::UnknownTopicOrPartition
                            };
                            missing_topic(Some(n), id, code)
                        }
                        (None, None) => missing_topic(None, id, ResponseError::UnknownTopicId),
                    };
                    topics.push(entry);
                }
            }
        }
        for _t in &topics {}
        let body = response(ctx, &meta, topics, cluster_ops);
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.topics {
            each(t.error_code);
        }
    }
}

fn response(
    ctx: &Ctx,
    meta: &ClusterMetadata,
    topics: Vec<MetadataResponseTopic>,
    cluster_ops: i32,
) -> MetadataResponse {
    let mut broker = MetadataResponseBroker::default();
    broker.node_id = BrokerId(ctx.config.node_id);
    broker.host = StrBytes::from_string(ctx.config.advertise_host.clone());
    broker.port = ctx.config.advertise_port;
    let mut r = MetadataResponse::default();
    r.brokers = vec![broker];
    r.cluster_id = Some(StrBytes::from_string(meta.cluster_id.clone()));
    r.controller_id = BrokerId(ctx.config.node_id);
    r.topics = topics;
    r.cluster_authorized_operations = cluster_ops;
    r
}

fn topic_entry(ctx: &Ctx, t: &TopicMeta, topic_ops: i32) -> MetadataResponseTopic {
    let node = BrokerId(ctx.config.node_id);
    let mut out = MetadataResponseTopic::default();
    out.name = Some(TopicName(StrBytes::from_string(t.name.clone())));
    out.topic_id = t.id;
    out.is_internal = ClusterMetadata::is_internal(&t.name);
    out.topic_authorized_operations = topic_ops;
    out.partitions = (0..t.partitions)
        .map(|p| {
            let mut mp = MetadataResponsePartition::default();
            mp.partition_index = p;
            mp.leader_id = node;
            mp.leader_epoch = t.leader_epoch;
            mp.replica_nodes = vec![node];
            mp.isr_nodes = vec![node];
            mp
        })
        .collect();
    out
}

fn missing_topic(
    name: Option<&String>,
    id: uuid::Uuid,
    code: ResponseError,
) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.error_code = code.code();
    out.name = name.map(|n| TopicName(StrBytes::from_string(n.clone())));
    out.topic_id = id;
    out.topic_authorized_operations = NOT_REQUESTED;
    out
}

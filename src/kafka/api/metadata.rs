//! Metadata (v0–v13; v13 adds a top-level error code, never set here): the cluster's
//! live brokers, the broker to send admin requests to (`named_controller`), topics and, per partition, leader, leader epoch,
//! replicas, ISR and offline replicas; auto-creation. An offline partition (no live
//! replica can lead) carries LEADER_NOT_AVAILABLE, as in Kafka.
//!
//! Every broker named is given by its address on the listener this request came in
//! on; brokers without that listener are left out, and a partition led by one carries
//! LISTENER_NOT_FOUND (LEADER_NOT_AVAILABLE before v6), as in Kafka.
//!
//! Topics are created on a Metadata request when `auto.create.topics.enable` is on and,
//! from v4, the request allows it (librdkafka's own test suite leans on this). Creation is synchronous through the controller, so the response
//! already lists the new topic's partitions.

use super::admin_change::auto_create;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource, CLUSTER_NAME};
use crate::kafka::authorized_operations::{self as ops, NOT_REQUESTED};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_controller::image::TopicImage;
use corelog_shards::mesh::TopicError;
use corelog_shards::metadata::{validate_topic_name, ClusterMetadata};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

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
        // Where ACLs are on, a topic the principal may not DESCRIBE is left out of "all
        // topics" and refused when named; auto-creation needs CREATE too.
        let access = Access::new(ctx, call);
        let topic_ops = |name: &str| {
            ops::if_requested(
                req.include_topic_authorized_operations,
                access.operations(ops::TOPIC, Resource::Topic, name),
            )
        };
        let cluster_ops = ops::if_requested(
            (8..=10).contains(&version) && req.include_cluster_authorized_operations,
            access.operations(ops::CLUSTER, Resource::Cluster, CLUSTER_NAME),
        );
        let mut topics = Vec::new();
        match requested {
            None => {
                for t in meta.topics.values() {
                    if access.may(Op::Describe, Resource::Topic, &t.name) {
                        let ops = topic_ops(&t.name);
                        topics.push(topic_entry(&meta, t, ops, &ctx.listener, version));
                    }
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
                    .filter(|n| access.may(Op::Describe, Resource::Topic, n))
                    .filter(|n| access.may_create_topic(n))
                    .collect();
                let mut create_errors = std::collections::HashMap::new();
                if auto && !missing.is_empty() {
                    let results = auto_create(ctx, &missing).await;
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
                    let described = match (found, &name) {
                        (Some(t), _) => Some(t.name.as_str()),
                        (None, Some(n)) => Some(n.as_str()),
                        (None, None) => None,
                    };
                    if let Some(n) = described {
                        if !access.allows(Op::Describe, Resource::Topic, n) {
                            // By id, the name is not given away.
                            let name = if by_id { None } else { name.as_ref() };
                            topics.push(missing_topic(
                                name,
                                id,
                                ResponseError::TopicAuthorizationFailed,
                            ));
                            continue;
                        }
                    }
                    let entry = match (found, &name) {
                        (Some(t), _) => {
                            topic_entry(&meta, t, topic_ops(&t.name), &ctx.listener, version)
                        }
                        (None, Some(n)) => {
                            let code = if validate_topic_name(n).is_err() {
                                ResponseError::InvalidTopicException
                            } else if let Some(e) = create_errors.get(n) {
                                error_code::topic(e)
                            } else if auto && !access.may_create_topic(n) {
                                ResponseError::TopicAuthorizationFailed
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
    let mut r = MetadataResponse::default();
    r.brokers = meta
        .live_brokers()
        .filter_map(|b| {
            let (host, port) = b.endpoint_on(&ctx.listener)?;
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = BrokerId(b.id);
            broker.host = StrBytes::from_string(host.to_string());
            broker.port = i32::from(port);
            broker.rack = b.rack.clone().map(StrBytes::from_string);
            Some(broker)
        })
        .collect();
    r.cluster_id = Some(StrBytes::from_string(meta.cluster_id().to_string()));
    r.controller_id = BrokerId(named_controller(ctx, meta));
    r.topics = topics;
    r.cluster_authorized_operations = cluster_ops;
    r
}

/// The broker a client is told to send its admin requests to: this one while it is
/// live, else the first live broker, else -1. Any broker takes them and carries them to
/// the active controller (`admin_change`), as Kafka's brokers forward them; naming the
/// Raft leader instead sent every admin client to one broker, and when that broker
/// died its clients kept sending to it until their metadata refreshed (librdkafka's
/// periodic refresh is 5 minutes). A client that lost the broker it asked reconnects to
/// another, which names itself. Kafka names a random live broker; this one is never a
/// hop away.
pub(super) fn named_controller(ctx: &Ctx, meta: &ClusterMetadata) -> i32 {
    let node_id = ctx.config.node_id;
    if meta.is_live(node_id) {
        return node_id;
    }
    meta.live_brokers()
        .find(|b| b.endpoint_on(&ctx.listener).is_some())
        .map_or(-1, |b| b.id)
}

fn topic_entry(
    meta: &ClusterMetadata,
    t: &TopicImage,
    topic_ops: i32,
    listener: &str,
    version: i16,
) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.name = Some(TopicName(StrBytes::from_string(t.name.clone())));
    out.topic_id = t.id;
    out.is_internal = ClusterMetadata::is_internal(&t.name);
    out.topic_authorized_operations = topic_ops;
    out.partitions = t
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut mp = MetadataResponsePartition::default();
            mp.partition_index = i as i32;
            mp.leader_id = BrokerId(p.leader);
            mp.leader_epoch = p.leader_epoch;
            mp.replica_nodes = p.replicas.iter().map(|b| BrokerId(*b)).collect();
            mp.isr_nodes = p.isr.iter().map(|b| BrokerId(*b)).collect();
            mp.offline_replicas = p
                .replicas
                .iter()
                .filter(|b| !corelog_controller::image::can_serve(&meta.brokers, p, **b))
                .map(|b| BrokerId(*b))
                .collect();
            if !p.has_leader() {
                mp.error_code = ResponseError::LeaderNotAvailable.code();
            } else if meta
                .broker(p.leader)
                .is_some_and(|b| b.endpoint_on(listener).is_none())
            {
                mp.leader_id = BrokerId(-1);
                mp.error_code = if version >= 6 {
                    ResponseError::ListenerNotFound.code()
                } else {
                    ResponseError::LeaderNotAvailable.code()
                };
            }
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

//! What the config APIs share: describing and checking config resources and sending
//! changes to the admin shard. It serves no API itself.
//!
//! DescribeConfigs (v1–v4), AlterConfigs (v0–v2), IncrementalAlterConfigs (v0–v1).
//!
//! Topic configs are the keys of `corelog_shards::topic_config`; their values resolve from the
//! broker-wide defaults and the topic's stored overrides. Changes go to the admin shard,
//! which validates every change whole — one bad key or value refuses that resource with
//! INVALID_CONFIG and changes nothing of it — persists it through the controller quorum,
//! and has the owning shards apply the new settings.
//!
//! Broker configs (resource type BROKER, named by this node's id or "" for the cluster
//! default): the broker-wide topic defaults (`log.retention.ms`, `log.segment.bytes`,
//! `compression.type`, …, the synonyms of every topic key) are dynamic, as in Kafka:
//! altering them stores a layer in the cluster metadata ("" for every broker, "<id>" for
//! this one, the stronger) and every topic without its own override takes the new value
//! at once. The other broker settings are described read-only; altering one is
//! INVALID_REQUEST ("Cannot update these configs dynamically"), as Kafka answers, and an
//! unknown broker key is INVALID_CONFIG (Kafka would store it and ignore it; here a typo
//! never silently does nothing). Describing "" shows only the cluster-wide dynamic
//! layer, as Kafka does.
//!
//! Group configs (resource type GROUP, Kafka 4's KIP-848/KIP-932 settings): a group's
//! `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` are dynamic, as in
//! Kafka — altering them stores the group's layer in the cluster metadata (checked
//! against the broker's `group.consumer.min/max.*` bounds, the interval below the
//! timeout: `corelog_shards::group::consumer::overrides`) and its coordinator applies
//! them from the group's next heartbeat. Described, each shows the group's value
//! (DYNAMIC_GROUP_CONFIG) or the broker's. `share.auto.offset.reset` (KIP-932) is dynamic
//! too; the other share-group keys are described at Kafka's defaults and setting one is
//! INVALID_CONFIG (not applied yet).

use super::Ctx;
use crate::kafka::error_code;
use corelog_shards::kafka_broker_keys;
use corelog_shards::mesh::{AdminChange, ConfigOp, ConfigOps, TopicConfigChange};
use corelog_shards::topic_config::{self, ConfigSource, ConfigType, Described};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::DescribeConfigsRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::{HashMap, HashSet};

pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const RESOURCE_BROKER: i8 = 4;
pub(super) const RESOURCE_BROKER_LOGGER: i8 = 8;
pub(super) const RESOURCE_GROUP: i8 = 32;

/// Kafka 4's group configs (`GroupConfig`) with their defaults, which come from the
/// broker's `group.*` settings: (name, broker synonym, type, default, doc).
pub(super) const GROUP_CONFIGS: &[(&str, Option<&str>, ConfigType, &str, &str)] = &[
    (
        "consumer.heartbeat.interval.ms",
        Some("group.consumer.heartbeat.interval.ms"),
        ConfigType::Int,
        "5000",
        "heartbeat interval of consumer-protocol groups (KIP-848)",
    ),
    (
        "consumer.session.timeout.ms",
        Some("group.consumer.session.timeout.ms"),
        ConfigType::Int,
        "45000",
        "session timeout of consumer-protocol groups (KIP-848)",
    ),
    (
        "share.auto.offset.reset",
        None,
        ConfigType::String,
        "latest",
        "where a share group's partitions start (KIP-932): latest, earliest or by_duration:<ISO-8601>",
    ),
    (
        "share.delivery.count.limit",
        Some("group.share.delivery.count.limit"),
        ConfigType::Int,
        "5",
        "deliveries of a record to a share group before it is archived",
    ),
    (
        "share.heartbeat.interval.ms",
        Some("group.share.heartbeat.interval.ms"),
        ConfigType::Int,
        "5000",
        "heartbeat interval of share groups (KIP-932)",
    ),
    (
        "share.isolation.level",
        None,
        ConfigType::String,
        "read_uncommitted",
        "read_committed: a share group gets records up to the last stable offset, none of aborted transactions",
    ),
    (
        "share.partition.max.record.locks",
        Some("group.share.partition.max.record.locks"),
        ConfigType::Int,
        "2000",
        "records of one share partition in flight at most",
    ),
    (
        "share.record.lock.duration.ms",
        Some("group.share.record.lock.duration.ms"),
        ConfigType::Int,
        "30000",
        "how long a share consumer holds a record it was given",
    ),
    (
        "share.renew.acknowledge.enable",
        None,
        ConfigType::Boolean,
        "true",
        "whether share consumers may renew their records' locks (KIP-1222)",
    ),
    (
        "share.session.timeout.ms",
        Some("group.share.session.timeout.ms"),
        ConfigType::Int,
        "45000",
        "session timeout of share groups (KIP-932)",
    ),
];

/// The group configs of one group as this broker applies them: the group's own value
/// (`overrides`, from the cluster metadata), else a `group.consumer.*` or
/// `group.share.*` setting the broker was started with as that static broker config,
/// else Kafka's default.
pub(super) fn group_configs(
    groups: &corelog_shards::group::coordinator::GroupConfig,
    delivery: corelog_shards::share::leader::Delivery,
    overrides: Option<&std::collections::BTreeMap<String, String>>,
) -> Vec<Described> {
    let (consumer, share) = (&groups.consumer, &groups.share);
    GROUP_CONFIGS
        .iter()
        .map(|(name, synonym, config_type, default, doc)| {
            let set = match *name {
                "consumer.heartbeat.interval.ms" => Some(i64::from(consumer.heartbeat_interval_ms)),
                "consumer.session.timeout.ms" => Some(i64::from(consumer.session_timeout_ms)),
                "share.heartbeat.interval.ms" => Some(i64::from(share.heartbeat_interval_ms)),
                "share.session.timeout.ms" => Some(i64::from(share.session_timeout_ms)),
                "share.record.lock.duration.ms" => Some(delivery.record_lock_duration_ms),
                "share.delivery.count.limit" => Some(i64::from(delivery.delivery_count_limit)),
                "share.partition.max.record.locks" => Some(delivery.partition_max_record_locks),
                _ => None,
            }
            .map(|v| v.to_string())
            .filter(|v| v != default);
            let (broker_value, broker_source) = match set {
                Some(v) => (v, ConfigSource::StaticBrokerConfig),
                None => (default.to_string(), ConfigSource::DefaultConfig),
            };
            let mut synonyms: Vec<(String, String, ConfigSource)> = synonym
                .map(|b| vec![(b.to_string(), broker_value.clone(), broker_source)])
                .unwrap_or_default();
            let (value, source) = match overrides.and_then(|o| o.get(*name)) {
                Some(v) => {
                    synonyms.insert(
                        0,
                        (
                            name.to_string(),
                            v.clone(),
                            ConfigSource::DynamicGroupConfig,
                        ),
                    );
                    (v.clone(), ConfigSource::DynamicGroupConfig)
                }
                None => (broker_value, broker_source),
            };
            Described {
                name: name.to_string(),
                value: Some(value),
                source,
                config_type: *config_type,
                doc,
                synonyms,
                sensitive: false,
            }
        })
        .collect()
}

pub(super) fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Broker settings outside the topic-default table, shown read-only. Each is
/// STATIC_BROKER_CONFIG when set at start-up to something other than Kafka's default
/// (the addresses and the data directory always are), else DEFAULT_CONFIG, as Kafka
/// reports them.
pub(super) fn static_broker_configs(ctx: &Ctx) -> Vec<Described> {
    let c = &ctx.config;
    let entry = |name: &str,
                 value: String,
                 kafka_default: Option<&str>,
                 config_type: ConfigType,
                 doc: &'static str| {
        let source = if kafka_default == Some(value.as_str()) {
            ConfigSource::DefaultConfig
        } else {
            ConfigSource::StaticBrokerConfig
        };
        Described {
            name: name.to_string(),
            synonyms: vec![(name.to_string(), value.clone(), source)],
            value: Some(value),
            source,
            config_type,
            doc,
            sensitive: false,
        }
    };
    // Kafka's broker.rack: null by default (listed, with no synonym), else the start-up
    // value. Clients and tools read the rack of a broker here.
    let rack = match &c.cluster.rack {
        Some(r) => entry(
            "broker.rack",
            r.clone(),
            None,
            ConfigType::String,
            "the rack of this broker: replicas of a partition spread over racks",
        ),
        None => Described {
            name: "broker.rack".to_string(),
            value: None,
            source: ConfigSource::DefaultConfig,
            config_type: ConfigType::String,
            doc: "the rack of this broker: replicas of a partition spread over racks",
            synonyms: Vec::new(),
            sensitive: false,
        },
    };
    vec![
        rack,
        entry(
            "node.id",
            c.node_id.to_string(),
            None,
            ConfigType::Int,
            "this node's id",
        ),
        entry(
            "broker.id",
            c.node_id.to_string(),
            None,
            ConfigType::Int,
            "this node's id",
        ),
        entry(
            "log.dirs",
            c.log_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(","),
            None,
            ConfigType::List,
            "the log directories",
        ),
        entry(
            "listeners",
            c.listeners
                .iter()
                .map(|l| format!("{}://{}", l.name, l.bind))
                .collect::<Vec<_>>()
                .join(","),
            None,
            ConfigType::List,
            "where the broker accepts connections",
        ),
        entry(
            "advertised.listeners",
            c.listeners
                .iter()
                .filter_map(|l| {
                    let (host, port) = l.advertised.as_ref()?;
                    Some(format!("{}://{host}:{port}", l.name))
                })
                .collect::<Vec<_>>()
                .join(","),
            None,
            ConfigType::List,
            "the address clients are told to use",
        ),
        entry(
            "listener.security.protocol.map",
            c.listeners
                .iter()
                .map(|l| format!("{}:{}", l.name, l.protocol.kafka_name()))
                .collect::<Vec<_>>()
                .join(","),
            None,
            ConfigType::String,
            "each listener's security protocol",
        ),
        entry(
            "inter.broker.listener.name",
            c.inter_broker_listener.clone(),
            None,
            ConfigType::String,
            "the listener other brokers use",
        ),
        entry(
            "num.partitions",
            c.num_partitions.to_string(),
            Some("1"),
            ConfigType::Int,
            "partitions of an auto-created topic",
        ),
        entry(
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            Some("true"),
            ConfigType::Boolean,
            "create unknown topics on metadata requests",
        ),
        entry(
            "socket.request.max.bytes",
            c.socket_request_max_bytes.to_string(),
            Some("104857600"),
            ConfigType::Int,
            "largest request accepted",
        ),
        entry(
            "offsets.topic.num.partitions",
            c.groups.offsets_partitions.to_string(),
            Some("50"),
            ConfigType::Int,
            "partitions of __consumer_offsets",
        ),
        entry(
            "sasl.server.max.receive.size",
            c.limits.sasl_server_max_receive_size.to_string(),
            Some("524288"),
            ConfigType::Int,
            "largest request accepted before a connection has authenticated",
        ),
        entry(
            "log.retention.check.interval.ms",
            c.retention_check_interval_ms.to_string(),
            Some("300000"),
            ConfigType::Long,
            "how often retention and compaction look for work",
        ),
    ]
}

/// The broker-wide security settings Kafka lists (read-only: corelog reads them at
/// start): each one set, the unset ones whose corelog default is Kafka's with that
/// default (clients read `connections.max.reauth.ms` here to plan re-authentication),
/// the other unset ones null. Secrets are described without their values.
pub(super) fn security_configs(ctx: &Ctx) -> Vec<Described> {
    const SAME_DEFAULT: &[&str] = &[
        "connections.max.reauth.ms",
        "connection.failed.authentication.delay.ms",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.endpoint.identification.algorithm",
        "ssl.principal.mapping.rules",
        "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.sub.claim.name",
    ];
    crate::security_config::KEYS
        .iter()
        .filter_map(|name| {
            let key = kafka_broker_keys::lookup(name)?;
            let (value, source) = match ctx.config.kafka.security.get(*name) {
                Some(v) => (v.clone(), ConfigSource::StaticBrokerConfig),
                None if SAME_DEFAULT.contains(name) => {
                    (key.default?.to_string(), ConfigSource::DefaultConfig)
                }
                // Unset, with another default than Kafka's (or none): listed as Kafka lists
                // an unset key with no default, null; so is a secret, set or not.
                None => (String::new(), ConfigSource::DefaultConfig),
            };
            let set = source == ConfigSource::StaticBrokerConfig;
            let unset = !set && !SAME_DEFAULT.contains(name);
            let mut synonyms = Vec::with_capacity(2);
            if set || !(key.sensitive() || unset) {
                synonyms.push((name.to_string(), value.clone(), source));
            }
            if let (true, Some(d)) = (set, key.default) {
                synonyms.push((name.to_string(), d.to_string(), ConfigSource::DefaultConfig));
            }
            Some(Described {
                name: name.to_string(),
                value: (!unset).then_some(value),
                source,
                config_type: key.config_type,
                doc: "a security setting, read at start (docs/security.md)",
                synonyms,
                sensitive: key.sensitive(),
            })
        })
        .collect()
}

pub(super) fn encode_entry(
    d: &Described,
    read_only: bool,
    req: &DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut out = DescribeConfigsResourceResult::default();
    out.name = s(d.name.clone());
    out.value = d.value.clone().map(s);
    out.read_only = read_only;
    out.config_source = d.source as i8;
    out.is_sensitive = d.sensitive;
    if d.sensitive {
        out.value = None;
    }
    if req.include_synonyms {
        out.synonyms = d
            .synonyms
            .iter()
            .map(|(name, value, source)| {
                let mut syn = DescribeConfigsSynonym::default();
                syn.name = s(name.clone());
                syn.value = (!d.sensitive).then(|| s(value.clone()));
                syn.source = *source as i8;
                syn
            })
            .collect();
    }
    // Fields of v3+ only: setting them on older versions fails the encode.
    if version >= 3 {
        out.config_type = d.config_type as i8;
        if req.include_documentation {
            out.documentation = Some(s(d.doc));
        }
    }
    out
}

/// One resource of an alter request, checked at the edge.
pub(super) enum Change {
    Topic(TopicConfigChange),
    /// `resource` is "" or this node's id.
    Broker {
        resource: String,
        ops: ConfigOps,
    },
    /// A group's own configs.
    Group {
        group: String,
        ops: ConfigOps,
    },
}

/// A change for the admin shard, or the error to answer.
type Checked = Result<Change, (ResponseError, String)>;

/// The keys a change to `ops` names.
pub(super) fn op_keys(ops: &ConfigOps) -> Vec<&str> {
    match ops {
        ConfigOps::Replace(pairs) => pairs.iter().map(|(k, _)| k.as_str()).collect(),
        ConfigOps::Incremental(list) => list.iter().map(ConfigOp::key).collect(),
    }
}

/// Kafka's checks on a broker change, for the keys corelog does not change while running
/// (`kafka_broker_keys::check_update`: its own start-up keys and Kafka's read-only ones
/// are refused, values of Kafka's other keys must parse, per-broker keys need a broker
/// id), as INVALID_REQUEST; APPEND/SUBTRACT of a key outside every vocabulary is
/// INVALID_CONFIG, as Kafka answers it. The topic defaults and broker-only keys go on to
/// the admin shard, which checks them.
pub(super) fn check_broker_keys(
    ctx: &Ctx,
    resource: &str,
    ops: &ConfigOps,
) -> Result<(), (ResponseError, String)> {
    let acted_dynamically = |k: &str| {
        topic_config::def_by_broker_name(k).is_some() || topic_config::broker_only_def(k).is_some()
    };
    let changes: Vec<(&str, Option<&str>)> = match ops {
        ConfigOps::Replace(pairs) => pairs
            .iter()
            .map(|(k, v)| (k.as_str(), Some(v.as_str())))
            .collect(),
        ConfigOps::Incremental(list) => list
            .iter()
            .map(|op| match op {
                ConfigOp::Delete(k) => (k.as_str(), None),
                ConfigOp::Set(k, v) | ConfigOp::Append(k, v) | ConfigOp::Subtract(k, v) => {
                    (k.as_str(), Some(v.as_str()))
                }
            })
            .collect(),
    };
    let static_names: Vec<String> = static_broker_configs(ctx)
        .into_iter()
        .map(|d| d.name)
        .collect();
    let read_at_start =
        |k: &str| ctx.config.kafka.read_at_start(k) || static_names.iter().any(|n| n == k);
    // Deleting a key that changes only at start is a no-op Kafka accepts
    // (`kafka-reassign-partitions --verify` deletes throttle keys of every kind).
    kafka_broker_keys::check_update(
        changes
            .iter()
            .copied()
            .filter(|(k, v)| !acted_dynamically(k) && v.is_some()),
        resource.is_empty(),
        read_at_start,
    )
    .map_err(|r| (ResponseError::InvalidRequest, r.0))?;
    if let ConfigOps::Incremental(list) = ops {
        for op in list {
            if let ConfigOp::Append(k, _) | ConfigOp::Subtract(k, _) = op {
                if !acted_dynamically(k) && kafka_broker_keys::lookup(k).is_none() {
                    return Err((
                        ResponseError::InvalidConfig,
                        format!("Unknown config name: {k}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Kafka's check on a config resource: `op` (DESCRIBE_CONFIGS, ALTER_CONFIGS) on the
/// topic, on the cluster for a broker, or on the group; refused with the resource
/// type's authorization code. Other types are left to the handler's own checks.
pub(super) fn authorized(
    access: &crate::kafka::access::Access<'_>,
    op: crate::kafka::access::Op,
    resource_type: i8,
    name: &str,
) -> Result<(), (ResponseError, String)> {
    use crate::kafka::access::{Resource, CLUSTER_NAME};
    // Kafka's messages for the three codes.
    let (resource, name, code, message) = match resource_type {
        RESOURCE_TOPIC => (
            Resource::Topic,
            name,
            ResponseError::TopicAuthorizationFailed,
            "Topic authorization failed.",
        ),
        RESOURCE_GROUP => (
            Resource::Group,
            name,
            ResponseError::GroupAuthorizationFailed,
            "Group authorization failed.",
        ),
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => (
            Resource::Cluster,
            CLUSTER_NAME,
            ResponseError::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        ),
        _ => return Ok(()),
    };
    if access.allows(op, resource, name) {
        Ok(())
    } else {
        Err((code, message.to_string()))
    }
}

pub(super) fn check_resource(
    ctx: &Ctx,
    access: &crate::kafka::access::Access<'_>,
    resource_type: i8,
    name: &str,
    duplicate: bool,
    ops: Result<ConfigOps, String>,
) -> Checked {
    if duplicate {
        return Err((
            ResponseError::InvalidRequest,
            format!("resource {name} is named more than once"),
        ));
    }
    authorized(
        access,
        crate::kafka::access::Op::AlterConfigs,
        resource_type,
        name,
    )?;
    let ops = ops.map_err(|m| (ResponseError::InvalidRequest, m))?;
    match resource_type {
        RESOURCE_TOPIC => Ok(Change::Topic(TopicConfigChange {
            topic: name.to_string(),
            ops,
        })),
        // Kafka's admin clients send a broker's configs to that broker. A decommission
        // alone is taken for any broker id (`corelog admin decommission`): the broker
        // to drain may be down, and the setting lives in the cluster metadata anyway.
        RESOURCE_BROKER
            if name.is_empty()
                || name == ctx.config.node_id.to_string()
                || (name.parse::<i32>().is_ok_and(|id| id >= 0)
                    && op_keys(&ops)
                        .iter()
                        .all(|k| *k == corelog_controller::image::DECOMMISSION_KEY)) =>
        {
            check_broker_keys(ctx, name, &ops)?;
            Ok(Change::Broker {
                resource: name.to_string(),
                ops,
            })
        }
        RESOURCE_BROKER => Err((
            ResponseError::InvalidRequest,
            format!(
                "Unexpected broker id, expected {} or empty string, but received {name}",
                ctx.config.node_id
            ),
        )),
        RESOURCE_GROUP if name.is_empty() => Err((
            ResponseError::InvalidRequest,
            "group name must not be empty".to_string(),
        )),
        RESOURCE_GROUP => Ok(Change::Group {
            group: name.to_string(),
            ops,
        }),
        other => Err((
            ResponseError::InvalidRequest,
            format!("resource type {other} is not supported"),
        )),
    }
}

/// Sends the checked changes to the admin shard (the topic changes together, each broker
/// change on its own); returns one outcome per resource.
pub(super) async fn alter(
    ctx: &Ctx,
    checked: Vec<Checked>,
    validate_only: bool,
) -> Vec<Result<(), (ResponseError, String)>> {
    let changes: Vec<TopicConfigChange> = checked
        .iter()
        .filter_map(|c| match c {
            Ok(Change::Topic(t)) => Some(t.clone()),
            _ => None,
        })
        .collect();
    let mut answers = if changes.is_empty() {
        Vec::new().into_iter()
    } else {
        super::admin_change::send_admin_change(ctx, changes.len(), |reply| {
            AdminChange::AlterTopicConfigs {
                changes,
                validate_only,
                reply,
            }
        })
        .await
        .into_iter()
    };
    let mut out = Vec::with_capacity(checked.len());
    for c in checked {
        let outcome = match c {
            Err(e) => Err(e),
            Ok(Change::Topic(_)) => match answers.next() {
                Some(r) => r.map_err(|e| (error_code::topic(&e), e.to_string())),
                None => Err((
                    ResponseError::UnknownServerError,
                    "no controller answer".into(),
                )),
            },
            Ok(Change::Group { group, ops }) => {
                ask_one(ctx, |reply| AdminChange::AlterGroupConfigs {
                    group,
                    ops,
                    validate_only,
                    reply,
                })
                .await
            }
            Ok(Change::Broker { resource, ops }) => {
                ask_one(ctx, |reply| AdminChange::AlterBrokerConfigs {
                    resource,
                    ops,
                    validate_only,
                    reply,
                })
                .await
            }
        };
        out.push(outcome);
    }
    out
}

/// One resource's change sent to the admin shard on its own, its outcome as the
/// response tells it.
async fn ask_one(
    ctx: &Ctx,
    change: impl FnOnce(
        corelog_shards::mesh::Reply<Result<(), corelog_shards::mesh::TopicError>>,
    ) -> AdminChange,
) -> Result<(), (ResponseError, String)> {
    match super::admin_change::ask_admin_shard(ctx, change).await {
        Some(r) => r.map_err(|e| (error_code::topic(&e), e.to_string())),
        None => Err((
            ResponseError::UnknownServerError,
            "the controller is unavailable".into(),
        )),
    }
}

/// The resources named more than once in one request (Kafka refuses each of them).
pub(super) fn named_twice<'a>(names: impl Iterator<Item = (i8, &'a str)>) -> HashSet<(i8, String)> {
    let mut seen = HashMap::new();
    for (t, n) in names {
        *seen.entry((t, n.to_string())).or_insert(0usize) += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

/// One response entry per resource: its type, name and outcome.
pub(super) fn outcomes<'a>(
    resources: impl Iterator<Item = (i8, &'a StrBytes)>,
    outcomes: Vec<Result<(), (ResponseError, String)>>,
) -> Vec<(i8, StrBytes, i16, Option<StrBytes>)> {
    resources
        .zip(outcomes)
        .map(|((t, name), outcome)| {
            let (code, message) = match outcome {
                Ok(()) => (0, None),
                Err((code, message)) => (code.code(), Some(s(message))),
            };
            (t, name.clone(), code, message)
        })
        .collect()
}

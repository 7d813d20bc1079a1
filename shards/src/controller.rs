//! The single-node controller: the only writer of cluster metadata. Runs on shard 0.
//!
//! A topic change is: validate, build the next metadata snapshot, persist it (off the
//! reactor, on glommio's blocking pool), publish it, then ask each owning shard to open
//! (or drop) its partitions and wait for all of them — so when a client hears "created",
//! every partition is ready to take produces. Changes are serialised by `lock`.
//!
//! Not here yet: brokers, leaders and ISR beyond this one node (the cluster issue).

use crate::mesh::*;
use crate::metadata::{validate_topic_name, MetadataStore, TopicMeta};
use crate::shard_config::ShardConfig;
use crate::topic_config;
use futures::channel::oneshot;
use glommio::sync::Semaphore;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Upper bound on partitions per topic, to keep one request from opening an unbounded
/// number of files.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

pub struct Controller {
    metadata: Arc<MetadataStore>,
    config: Arc<ShardConfig>,
    lock: Semaphore,
}

impl Controller {
    pub fn new(metadata: Arc<MetadataStore>, config: Arc<ShardConfig>) -> Controller {
        Controller {
            metadata,
            config,
            lock: Semaphore::new(1),
        }
    }

    pub async fn handle(&self, peers: &Peers, req: ControllerRequest) {
        let _permit = self.lock.acquire_permit(1).await;
        match req {
            ControllerRequest::CreateTopics {
                topics,
                validate_only,
                reply,
            } => {
                let r = self.create_topics(peers, topics, validate_only).await;
                let _ = reply.send(r);
            }
            ControllerRequest::DeleteTopics { names, reply } => {
                let r = self.delete_topics(peers, names).await;
                let _ = reply.send(r);
            }
            ControllerRequest::CreatePartitions {
                topics,
                validate_only,
                reply,
            } => {
                let r = self.create_partitions(peers, topics, validate_only).await;
                let _ = reply.send(r);
            }
            ControllerRequest::AlterTopicConfigs {
                changes,
                validate_only,
                reply,
            } => {
                let r = self.alter_configs(peers, changes, validate_only).await;
                let _ = reply.send(r);
            }
            ControllerRequest::AllocateProducerIds { reply } => {
                let _ = reply.send(self.allocate_producer_ids().await);
            }
            ControllerRequest::AlterBrokerConfigs {
                resource,
                ops,
                validate_only,
                reply,
            } => {
                let r = self
                    .alter_broker_configs(peers, resource, ops, validate_only)
                    .await;
                let _ = reply.send(r);
            }
            ControllerRequest::AlterClientQuotas { alterations, reply } => {
                let r = self.alter_client_quotas(alterations).await;
                let _ = reply.send(r);
            }
        }
    }

    /// The next block of producer ids; the new high mark is persisted first.
    async fn allocate_producer_ids(&self) -> Result<i64, TopicError> {
        let mut next = (*self.metadata.snapshot()).clone();
        let start = next.next_producer_id;
        next.next_producer_id = start
            .checked_add(PRODUCER_ID_BLOCK)
            .ok_or_else(|| TopicError::Storage("producer ids exhausted".into()))?;
        self.persist(next).await?;
        Ok(start)
    }

    async fn persist(&self, next: crate::metadata::ClusterMetadata) -> Result<(), TopicError> {
        let store = self.metadata.clone();
        glommio::executor()
            .spawn_blocking(move || store.replace(next))
            .await
            .map_err(|e| TopicError::Storage(e.to_string()))
    }

    async fn create_topics(
        &self,
        peers: &Peers,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        let mut next = (*self.metadata.snapshot()).clone();
        let defaults = self.broker_defaults(&next);
        let mut results = Vec::with_capacity(topics.len());
        let mut created = Vec::new();
        for t in &topics {
            let r = (|| {
                validate_topic_name(&t.name).map_err(|e| TopicError::InvalidName(e.to_string()))?;
                if next.topics.contains_key(&t.name) {
                    return Err(TopicError::AlreadyExists);
                }
                if t.partitions < 1 || t.partitions > PARTITIONS_PER_TOPIC_MAX {
                    return Err(TopicError::InvalidPartitions(format!(
                        "partition count must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {}",
                        t.partitions
                    )));
                }
                let overrides = t.configs.iter().cloned().collect::<BTreeMap<_, _>>();
                if overrides.len() != t.configs.len() {
                    return Err(TopicError::InvalidConfig(
                        "a config key is named more than once".into(),
                    ));
                }
                topic_config::resolve(&defaults, &overrides)
                    .map_err(|e| TopicError::InvalidConfig(e.message))?;
                Ok(())
            })();
            if r.is_ok() && !validate_only {
                next.topics.insert(
                    t.name.clone(),
                    TopicMeta {
                        name: t.name.clone(),
                        id: uuid::Uuid::new_v4(),
                        partitions: t.partitions,
                        configs: t.configs.iter().cloned().collect::<BTreeMap<_, _>>(),
                        leader_epoch: 0,
                    },
                );
                created.push((t.name.clone(), 0, t.partitions));
            }
            results.push(r);
        }
        if created.is_empty() {
            return results;
        }
        if let Err(e) = self.persist(next).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        for (name, from, to) in created {
            if let Err(e) = self.open_everywhere(peers, &name, from, to).await {
                tracing::error!(topic = %name, error = %e, "opening partitions of a new topic");
            }
        }
        results
    }

    /// The partitions `range` of `topic` grouped by owning shard: (shard, partitions),
    /// shards without any left out — one mesh message per shard.
    fn by_owner(
        &self,
        peers: &Peers,
        topic: &str,
        range: std::ops::Range<i32>,
    ) -> impl Iterator<Item = (usize, Vec<i32>)> {
        let mut per_shard: Vec<Vec<i32>> = vec![Vec::new(); self.config.shard_count];
        for p in range {
            if let Some(v) = per_shard.get_mut(peers.owner_of(topic, p)) {
                v.push(p);
            }
        }
        per_shard
            .into_iter()
            .enumerate()
            .filter(|(_, ps)| !ps.is_empty())
    }

    async fn open_everywhere(
        &self,
        peers: &Peers,
        topic: &str,
        from: i32,
        to: i32,
    ) -> Result<(), TopicError> {
        let topic: Arc<str> = topic.into();
        let calls = self.by_owner(peers, &topic, from..to).map(|(target, ps)| {
            let (tx, rx) = oneshot::channel();
            let msg = PartitionRequest::OpenPartitions {
                topic: topic.clone(),
                partitions: ps,
                reply: tx,
            };
            peers.call(target, msg, rx)
        });
        for r in futures::future::join_all(calls).await {
            match r {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(e),
                None => return Err(TopicError::Storage("shard unavailable".into())),
            }
        }
        Ok(())
    }

    async fn delete_topics(
        &self,
        peers: &Peers,
        names: Vec<String>,
    ) -> Vec<Result<(), TopicError>> {
        let mut next = (*self.metadata.snapshot()).clone();
        let mut results = Vec::with_capacity(names.len());
        let mut removed = Vec::new();
        for n in &names {
            match next.topics.remove(n) {
                Some(t) => {
                    removed.push(t);
                    results.push(Ok(()));
                }
                None => results.push(Err(TopicError::Unknown)),
            }
        }
        if removed.is_empty() {
            return results;
        }
        if let Err(e) = self.persist(next).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        for t in removed {
            let topic: Arc<str> = t.name.as_str().into();
            let calls = self
                .by_owner(peers, &topic, 0..t.partitions)
                .map(|(target, ps)| {
                    let (tx, rx) = oneshot::channel();
                    let msg = PartitionRequest::DropPartitions {
                        topic: topic.clone(),
                        partitions: ps,
                        reply: tx,
                    };
                    peers.call(target, msg, rx)
                });
            futures::future::join_all(calls).await;
        }
        results
    }

    async fn create_partitions(
        &self,
        peers: &Peers,
        topics: Vec<(String, i32)>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        let mut next = (*self.metadata.snapshot()).clone();
        let mut results = Vec::with_capacity(topics.len());
        let mut grown = Vec::new();
        for (name, count) in &topics {
            let r = match next.topics.get_mut(name) {
                None => Err(TopicError::Unknown),
                Some(t) if *count <= t.partitions => Err(TopicError::InvalidPartitions(format!(
                    "topic currently has {} partitions, which is higher than or equal to the requested {count}",
                    t.partitions
                ))),
                Some(_) if *count > PARTITIONS_PER_TOPIC_MAX => Err(TopicError::InvalidPartitions(format!(
                    "at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic"
                ))),
                Some(t) => {
                    if !validate_only {
                        grown.push((name.clone(), t.partitions, *count));
                        t.partitions = *count;
                    }
                    Ok(())
                }
            };
            results.push(r);
        }
        if grown.is_empty() {
            return results;
        }
        if let Err(e) = self.persist(next).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        for (name, from, to) in grown {
            if let Err(e) = self.open_everywhere(peers, &name, from, to).await {
                tracing::error!(topic = %name, error = %e, "opening new partitions");
            }
        }
        results
    }

    /// AlterConfigs / IncrementalAlterConfigs on topics: each change is validated whole
    /// (every override resolves against the broker defaults) before anything is stored;
    /// then the owning shards re-resolve their partitions' configs.
    async fn alter_configs(
        &self,
        peers: &Peers,
        changes: Vec<TopicConfigChange>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        let mut next = (*self.metadata.snapshot()).clone();
        let defaults = self.broker_defaults(&next);
        let mut results = Vec::with_capacity(changes.len());
        let mut altered: Vec<String> = Vec::new();
        for change in &changes {
            let r = (|| {
                let t = next.topics.get(&change.topic).ok_or(TopicError::Unknown)?;
                let overrides = apply_ops(&defaults, &t.configs, &change.ops)
                    .map_err(|e| TopicError::InvalidConfig(e.message))?;
                let resolved = topic_config::resolve(&defaults, &overrides)
                    .map_err(|e| TopicError::InvalidConfig(e.message))?;
                // The group coordinator's state is the latest record per key: the
                // offsets topic is compacted and nothing else (the shard enforces it).
                if change.topic == crate::group::OFFSETS_TOPIC
                    && (resolved.cleanup.delete || !resolved.cleanup.compact)
                {
                    return Err(TopicError::InvalidConfig(format!(
                        "cleanup.policy of {} must be compact",
                        crate::group::OFFSETS_TOPIC
                    )));
                }
                Ok(overrides)
            })();
            match r {
                Ok(overrides) if !validate_only => {
                    if let Some(t) = next.topics.get_mut(&change.topic) {
                        t.configs = overrides;
                        altered.push(change.topic.clone());
                    }
                    results.push(Ok(()));
                }
                Ok(_) => results.push(Ok(())),
                Err(e) => results.push(Err(e)),
            }
        }
        if altered.is_empty() {
            return results;
        }
        if let Err(e) = self.persist(next).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        for name in altered {
            let topic: Arc<str> = name.as_str().into();
            let calls = (0..self.config.shard_count).map(|target| {
                let (tx, rx) = oneshot::channel();
                let msg = PartitionRequest::ApplyTopicConfig {
                    topic: topic.clone(),
                    reply: tx,
                };
                peers.call(target, msg, rx)
            });
            futures::future::join_all(calls).await;
        }
        results
    }
}

impl Controller {
    /// The defaults topics inherit under `meta`: the start-up config with the dynamic
    /// broker configs applied.
    fn broker_defaults(
        &self,
        meta: &crate::metadata::ClusterMetadata,
    ) -> corelog_storage::LogConfig {
        meta.broker_defaults(&self.config.log, self.config.node_id)
            .effective()
    }

    /// AlterConfigs / IncrementalAlterConfigs on a BROKER resource ("" the cluster-wide
    /// default, or this node): the changed layer is validated whole, persisted, and then
    /// every shard re-resolves its partitions' configs, so topics without an override of
    /// a key take the new value at once (Kafka's dynamic `log.*` defaults).
    async fn alter_broker_configs(
        &self,
        peers: &Peers,
        resource: String,
        ops: ConfigOps,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let mut next = (*self.metadata.snapshot()).clone();
        let effective = self.broker_defaults(&next);
        let invalid = |e: topic_config::ConfigError| TopicError::InvalidConfig(e.message);
        // The layer and the ops under topic key names, so that apply_ops' list handling
        // and checks apply unchanged; then back to broker names.
        let to_topic = |broker_name: &str| {
            topic_config::def_by_broker_name(broker_name)
                .map(|d| d.name.to_string())
                .ok_or_else(|| {
                    TopicError::InvalidConfig(format!(
                        "{broker_name} is not a dynamic broker config"
                    ))
                })
        };
        let current: BTreeMap<String, String> = next
            .broker_configs
            .get(&resource)
            .into_iter()
            .flatten()
            .map(|(k, v)| Ok((to_topic(k)?, v.clone())))
            .collect::<Result<_, TopicError>>()?;
        let ops = match ops {
            ConfigOps::Replace(pairs) => ConfigOps::Replace(
                pairs
                    .into_iter()
                    .map(|(k, v)| Ok((to_topic(&k)?, v)))
                    .collect::<Result<_, TopicError>>()?,
            ),
            ConfigOps::Incremental(list) => ConfigOps::Incremental(
                list.into_iter()
                    .map(|op| {
                        Ok(match op {
                            ConfigOp::Set(k, v) => ConfigOp::Set(to_topic(&k)?, v),
                            ConfigOp::Delete(k) => ConfigOp::Delete(to_topic(&k)?),
                            ConfigOp::Append(k, v) => ConfigOp::Append(to_topic(&k)?, v),
                            ConfigOp::Subtract(k, v) => ConfigOp::Subtract(to_topic(&k)?, v),
                        })
                    })
                    .collect::<Result<_, TopicError>>()?,
            ),
        };
        let layer = apply_ops(&effective, &current, &ops).map_err(invalid)?;
        let layer: BTreeMap<String, String> = layer
            .into_iter()
            .filter_map(|(k, v)| topic_config::def(&k).map(|d| (d.broker_name.to_string(), v)))
            .collect();
        topic_config::check_broker_layer(&layer).map_err(invalid)?;
        if layer.is_empty() {
            next.broker_configs.remove(&resource);
        } else {
            next.broker_configs.insert(resource, layer);
        }
        // The new defaults must hold together, and every topic's overrides must still
        // resolve over them: a topic is never left running without its own settings
        // (a compacted topic falling back to deletion would lose its data).
        let defaults = self.broker_defaults(&next);
        topic_config::resolve(&defaults, &BTreeMap::new()).map_err(invalid)?;
        for t in next.topics.values() {
            topic_config::resolve(&defaults, &t.configs).map_err(|e| {
                TopicError::InvalidConfig(format!(
                    "topic {}'s own configs would no longer apply: {}",
                    t.name, e.message
                ))
            })?;
        }
        if validate_only {
            return Ok(());
        }
        self.persist(next).await?;
        let calls = (0..self.config.shard_count).map(|target| {
            let (tx, rx) = oneshot::channel();
            peers.call(
                target,
                PartitionRequest::ApplyBrokerConfig { reply: tx },
                rx,
            )
        });
        futures::future::join_all(calls).await;
        Ok(())
    }

    /// AlterClientQuotas: applies every (edge-validated) alteration to one new
    /// snapshot, persisted once. Every shard sees the change at its next request
    /// through its metadata snapshot; nothing needs to be told.
    async fn alter_client_quotas(
        &self,
        alterations: Vec<crate::client_quota::QuotaAlteration>,
    ) -> Vec<Result<(), TopicError>> {
        if alterations.is_empty() {
            return Vec::new();
        }
        let mut next = (*self.metadata.snapshot()).clone();
        for alt in &alterations {
            next.client_quotas.apply(alt);
        }
        // Every later metadata change copies and rewrites all of them: bounded.
        if next.client_quotas.entries.len() > crate::client_quota::QUOTA_ENTITIES_MAX {
            let e = TopicError::InvalidConfig(format!(
                "more than {} quota entities",
                crate::client_quota::QUOTA_ENTITIES_MAX
            ));
            return alterations.iter().map(|_| Err(e.clone())).collect();
        }
        match self.persist(next).await {
            Ok(()) => alterations.iter().map(|_| Ok(())).collect(),
            Err(e) => alterations.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}

/// The overrides that result from `ops` on `current`. List operations (append,
/// subtract) start from the effective value, the broker default when not overridden.
fn apply_ops(
    broker: &corelog_storage::LogConfig,
    current: &BTreeMap<String, String>,
    ops: &ConfigOps,
) -> Result<BTreeMap<String, String>, topic_config::ConfigError> {
    let refuse = |key: &str, message: String| topic_config::ConfigError {
        key: key.to_string(),
        message,
    };
    match ops {
        ConfigOps::Replace(pairs) => {
            let map: BTreeMap<String, String> = pairs.iter().cloned().collect();
            if map.len() != pairs.len() {
                return Err(refuse("", "a config key is named more than once".into()));
            }
            Ok(map)
        }
        ConfigOps::Incremental(list) => {
            let mut map = current.clone();
            for op in list {
                match op {
                    ConfigOp::Set(k, v) => {
                        map.insert(k.clone(), v.clone());
                    }
                    ConfigOp::Delete(k) => {
                        if topic_config::def(k).is_none() {
                            return Err(refuse(k, format!("Unknown topic config name: {k}")));
                        }
                        map.remove(k);
                    }
                    ConfigOp::Append(k, v) | ConfigOp::Subtract(k, v) => {
                        let def = topic_config::def(k)
                            .ok_or_else(|| refuse(k, format!("Unknown topic config name: {k}")))?;
                        if def.config_type != topic_config::ConfigType::List {
                            return Err(refuse(
                                k,
                                format!("Config value append/subtract is not allowed for config key: {k}"),
                            ));
                        }
                        let effective = match map.get(k) {
                            Some(v) => v.clone(),
                            None => topic_config::get(broker, k).unwrap_or_default(),
                        };
                        let mut items: Vec<String> = effective
                            .split(',')
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty())
                            .collect();
                        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                            if matches!(op, ConfigOp::Append(..)) {
                                if !items.iter().any(|i| i == item) {
                                    items.push(item.to_string());
                                }
                            } else {
                                items.retain(|i| i != item);
                            }
                        }
                        if items.is_empty() {
                            return Err(refuse(k, format!("Invalid value for configuration {k}: the list may not be empty")));
                        }
                        map.insert(k.clone(), items.join(","));
                    }
                }
            }
            Ok(map)
        }
    }
}

//! The broker's side of the controller quorum, on shard 0: every admin change made on
//! this broker is validated here and committed as a command through the active
//! controller (wherever it runs: `ControllerNode::propose` carries it there, Kafka's
//! forwarding).
//!
//! What only a broker can check is checked here: config values against the broker's
//! defaults, and the lists and layers they make. Everything that depends on the cluster
//! (existence, live brokers, placement, bounds) is checked when the command is applied,
//! on the image of that moment. Configs are compare-and-set: a command names the
//! overrides it was computed from, and one computed from overrides that changed meanwhile
//! is computed again.
//!
//! A change is answered once this broker's shards have applied it (partitions opened or
//! dropped, configs re-resolved: `reconcile`), so a client that hears "created" can
//! produce to this broker's partitions at once. Changes are serialised by `lock`.

use crate::mesh::*;
use crate::metadata::MetadataStore;
use crate::shard_config::ShardConfig;
use crate::topic_config;
use corelog_controller::command::{self as cmd, Command, CommandError, Outcome};
use corelog_controller::ControllerNode;
use glommio::sync::Semaphore;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use corelog_controller::command::PARTITIONS_PER_TOPIC_MAX;

/// How long a change may wait for the active controller.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a config change is computed again after a concurrent change beat it.
const CONFLICT_RETRIES: usize = 5;

pub struct AdminChanges {
    metadata: Arc<MetadataStore>,
    config: Arc<ShardConfig>,
    node: ControllerNode,
    lock: Semaphore,
}

impl AdminChanges {
    pub fn new(
        metadata: Arc<MetadataStore>,
        config: Arc<ShardConfig>,
        node: ControllerNode,
    ) -> AdminChanges {
        AdminChanges {
            metadata,
            config,
            node,
            lock: Semaphore::new(1),
        }
    }

    pub async fn handle(&self, req: AdminChange) {
        let _permit = self.lock.acquire_permit(1).await;
        match req {
            AdminChange::CreateTopics {
                topics,
                validate_only,
                reply,
            } => {
                let _ = reply.send(self.create_topics(topics, validate_only).await);
            }
            AdminChange::DeleteTopics { names, reply } => {
                let n = names.len();
                let r = self.items(Command::DeleteTopics { names }, n).await;
                let _ = reply.send(r);
            }
            AdminChange::CreatePartitions {
                topics,
                validate_only,
                reply,
            } => {
                let n = topics.len();
                let command = Command::CreatePartitions {
                    topics: topics
                        .into_iter()
                        .map(|(topic, count, assignments)| cmd::NewPartitions {
                            topic,
                            count,
                            assignments,
                        })
                        .collect(),
                };
                let r = if validate_only {
                    items_of(self.node.dry_run(&command), n)
                } else {
                    self.items(command, n).await
                };
                let _ = reply.send(r);
            }
            AdminChange::AlterTopicConfigs {
                changes,
                validate_only,
                reply,
            } => {
                let _ = reply.send(self.alter_configs(changes, validate_only).await);
            }
            AdminChange::AllocateProducerIds { reply } => {
                let _ = reply.send(self.allocate_producer_ids().await);
            }
            AdminChange::AlterBrokerConfigs {
                resource,
                ops,
                validate_only,
                reply,
            } => {
                let r = self
                    .alter_broker_configs(resource, ops, validate_only)
                    .await;
                let _ = reply.send(r);
            }
            AdminChange::AlterGroupConfigs {
                group,
                ops,
                validate_only,
                reply,
            } => {
                let r = self.alter_group_configs(group, ops, validate_only).await;
                let _ = reply.send(r);
            }
            AdminChange::AlterPartitionReassignments { items, reply } => {
                let n = items.len();
                let r = self
                    .items(Command::AlterPartitionReassignments { items }, n)
                    .await;
                let _ = reply.send(r);
            }
            AdminChange::ElectLeaders {
                election,
                partitions,
                reply,
            } => {
                let n = partitions.len();
                let r = self
                    .items(
                        Command::ElectLeaders {
                            election,
                            partitions,
                        },
                        n,
                    )
                    .await;
                let _ = reply.send(r);
            }
            AdminChange::AlterScramCredentials {
                deletions,
                upsertions,
                reply,
            } => {
                let r = match self
                    .commit(Command::AlterScramCredentials {
                        deletions,
                        upsertions,
                    })
                    .await
                {
                    Ok(Outcome::Done(Ok(()))) => Ok(()),
                    Ok(Outcome::Done(Err(e))) => Err(topic_error(e)),
                    Ok(other) => Err(unexpected(&other)),
                    Err(e) => Err(e),
                };
                let _ = reply.send(vec![r]);
            }
            AdminChange::CreateAcls { bindings, reply } => {
                let n = bindings.len();
                let r = if n == 0 {
                    Vec::new()
                } else {
                    self.items(Command::CreateAcls { bindings }, n).await
                };
                let _ = reply.send(r);
            }
            AdminChange::DeleteAcls { filters, reply } => {
                let n = filters.len();
                let r = match self.commit(Command::DeleteAcls { filters }).await {
                    Ok(Outcome::DeletedAcls(v)) if v.len() == n => Ok(v),
                    Ok(other) => Err(unexpected(&other)),
                    Err(e) => Err(e),
                };
                let _ = reply.send(r);
            }
            AdminChange::UpdateFeatures {
                updates,
                legacy,
                validate_only,
                reply,
            } => {
                // Checked here first, on this broker's image: a refused change is never
                // written, because a broker of a release before feature levels (the
                // usual reason for a refusal) cannot read the command at all — in its
                // log it would stop that broker. Applying checks again, on the image it
                // meets.
                let image = self.node.image();
                let current = corelog_controller::features::effective(&image.features, &legacy);
                let brokers = image
                    .brokers
                    .values()
                    .map(|b| (b.id, b.supported_features.as_ref()));
                let checked = corelog_controller::features::update(current, brokers, &updates)
                    .map(|_| ())
                    .map_err(TopicError::InvalidFeatureUpdate);
                let r = if validate_only || checked.is_err() {
                    checked
                } else {
                    match self
                        .commit(Command::UpdateFeatures { updates, legacy })
                        .await
                    {
                        Ok(Outcome::Done(r)) => r.map_err(topic_error),
                        Ok(other) => Err(unexpected(&other)),
                        Err(e) => Err(e),
                    }
                };
                let _ = reply.send(r);
            }
            AdminChange::AlterClientQuotas { alterations, reply } => {
                let n = alterations.len();
                let r = if n == 0 {
                    Vec::new()
                } else {
                    match self
                        .commit(Command::AlterClientQuotas { alterations })
                        .await
                    {
                        Ok(Outcome::Done(Ok(()))) => vec![Ok(()); n],
                        Ok(Outcome::Done(Err(e))) => vec![Err(topic_error(e)); n],
                        Ok(other) => vec![Err(unexpected(&other)); n],
                        Err(e) => vec![Err(e); n],
                    }
                };
                let _ = reply.send(r);
            }
        }
    }

    /// Commits `command` and waits until this broker's shards have applied it.
    async fn commit(&self, command: Command) -> Result<Outcome, TopicError> {
        let applied = self
            .node
            .propose(command, PROPOSE_TIMEOUT)
            .await
            .map_err(|e| match e {
                corelog_controller::ProposeError::Timeout(_) => TopicError::Timeout(e.to_string()),
                corelog_controller::ProposeError::Unavailable(_) => {
                    TopicError::NotController(e.to_string())
                }
            })?;
        self.metadata.wait_reconciled(applied.index).await;
        Ok(applied.outcome)
    }

    /// Commits a command of `n` items; one result each.
    async fn items(&self, command: Command, n: usize) -> Vec<Result<(), TopicError>> {
        match self.commit(command).await {
            Ok(outcome) => items_of(outcome, n),
            Err(e) => vec![Err(e); n],
        }
    }

    /// The next block of producer ids, for this broker's current registration.
    async fn allocate_producer_ids(&self) -> Result<i64, TopicError> {
        let epoch = self
            .node
            .image()
            .broker(self.config.node_id)
            .map(|b| b.epoch)
            .ok_or_else(|| TopicError::NotController("this broker is not registered yet".into()))?;
        match self
            .commit(Command::AllocateProducerIds {
                broker: self.config.node_id,
                epoch,
            })
            .await?
        {
            Outcome::ProducerIds(r) => r.map_err(topic_error),
            other => Err(unexpected(&other)),
        }
    }

    async fn create_topics(
        &self,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        let meta = self.metadata.snapshot();
        let defaults = self.broker_defaults(&meta);
        // Checked here: the configs; the rest when the command is applied.
        let mut results: Vec<Option<Result<(), TopicError>>> = Vec::with_capacity(topics.len());
        let mut proposed = Vec::new();
        for t in &topics {
            let overrides = t.configs.iter().cloned().collect::<BTreeMap<_, _>>();
            let checked = if overrides.len() != t.configs.len() {
                Err(TopicError::InvalidConfig(
                    "a config key is named more than once".into(),
                ))
            } else {
                topic_config::resolve(&defaults, &overrides)
                    .map(|_| ())
                    .map_err(|e| TopicError::InvalidConfig(e.message))
            };
            match checked {
                Ok(()) => {
                    proposed.push(cmd::NewTopic {
                        name: t.name.clone(),
                        id: uuid::Uuid::new_v4(),
                        partitions: t.partitions,
                        replication_factor: t.replication_factor,
                        assignments: t.assignments.clone(),
                        configs: overrides,
                    });
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        if !proposed.is_empty() {
            let n = proposed.len();
            let command = Command::CreateTopics { topics: proposed };
            let applied = if validate_only {
                items_of(self.node.dry_run(&command), n)
            } else {
                self.items(command, n).await
            };
            let mut applied = applied.into_iter();
            for slot in results.iter_mut().filter(|r| r.is_none()) {
                *slot = applied.next();
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(TopicError::Storage("no result".into()))))
            .collect()
    }

    /// AlterConfigs / IncrementalAlterConfigs on topics: each change is validated whole
    /// (every override resolves against the broker defaults) before it is proposed.
    async fn alter_configs(
        &self,
        changes: Vec<TopicConfigChange>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        let mut out = Vec::with_capacity(changes.len());
        for change in &changes {
            let mut result = Err(TopicError::Timeout(
                "config changed concurrently, again and again".into(),
            ));
            for _ in 0..CONFLICT_RETRIES {
                let meta = self.metadata.snapshot();
                let proposal = self.topic_config_change(&meta, change);
                let Ok(c) = proposal else {
                    result = proposal.map(|_| ());
                    break;
                };
                if validate_only {
                    result = Ok(());
                    break;
                }
                result = match self
                    .items(Command::SetTopicConfigs { changes: vec![c] }, 1)
                    .await
                    .pop()
                {
                    Some(Err(TopicError::Conflict)) => continue,
                    Some(r) => r,
                    None => Err(TopicError::Storage("no result".into())),
                };
                break;
            }
            out.push(result);
        }
        out
    }

    fn topic_config_change(
        &self,
        meta: &crate::metadata::ClusterMetadata,
        change: &TopicConfigChange,
    ) -> Result<cmd::ConfigChange, TopicError> {
        let defaults = self.broker_defaults(meta);
        let t = meta.topic(&change.topic).ok_or(TopicError::Unknown)?;
        let overrides = apply_ops(&defaults, &t.configs, &change.ops)
            .map_err(|e| TopicError::InvalidConfig(e.message))?;
        let resolved = topic_config::resolve(&defaults, &overrides)
            .map_err(|e| TopicError::InvalidConfig(e.message))?;
        // The group coordinator's state is the latest record per key: the offsets topic
        // is compacted and nothing else (the shard enforces it).
        if change.topic == crate::group::OFFSETS_TOPIC
            && (resolved.cleanup.delete || !resolved.cleanup.compact)
        {
            return Err(TopicError::InvalidConfig(format!(
                "cleanup.policy of {} must be compact",
                crate::group::OFFSETS_TOPIC
            )));
        }
        Ok(cmd::ConfigChange {
            name: change.topic.clone(),
            from: t.configs.clone(),
            to: overrides,
        })
    }

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
    /// default, or a node): the changed layer is validated whole and committed; every
    /// broker's shards then re-resolve their partitions' configs, so topics without an
    /// override of a key take the new value at once (Kafka's dynamic `log.*` defaults).
    async fn alter_broker_configs(
        &self,
        resource: String,
        ops: ConfigOps,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        for _ in 0..CONFLICT_RETRIES {
            let meta = self.metadata.snapshot();
            let change = self.broker_config_change(&meta, &resource, &ops)?;
            if validate_only {
                return Ok(());
            }
            match self.commit(Command::SetBrokerConfigs { change }).await? {
                Outcome::Done(Err(CommandError::Conflict)) => continue,
                Outcome::Done(r) => return r.map_err(topic_error),
                other => return Err(unexpected(&other)),
            }
        }
        Err(TopicError::Timeout(
            "broker configs changed concurrently, again and again".into(),
        ))
    }

    /// AlterConfigs / IncrementalAlterConfigs on a GROUP resource: the group's layer,
    /// edited and checked against this broker's `group.consumer.*` and `group.share.*`
    /// bounds (`group::consumer::overrides`, `group::share::overrides`), replaces the stored one if that is still the one
    /// it was computed from; the group's coordinator applies it at its next heartbeat.
    async fn alter_group_configs(
        &self,
        group: String,
        ops: ConfigOps,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        use crate::group::consumer::overrides::{self, Edit};
        for _ in 0..CONFLICT_RETRIES {
            let meta = self.metadata.snapshot();
            let from = meta.group_configs.get(&group).cloned().unwrap_or_default();
            let edits: Vec<Edit> = match &ops {
                ConfigOps::Replace(set) => from
                    .keys()
                    .map(|k| Edit::Delete(k.clone()))
                    .chain(set.iter().map(|(k, v)| Edit::Set(k.clone(), v.clone())))
                    .collect(),
                ConfigOps::Incremental(ops) => ops
                    .iter()
                    .map(|op| match op {
                        ConfigOp::Set(k, v) => Ok(Edit::Set(k.clone(), v.clone())),
                        ConfigOp::Delete(k) => Ok(Edit::Delete(k.clone())),
                        ConfigOp::Append(k, _) | ConfigOp::Subtract(k, _) => Err(
                            TopicError::InvalidConfig(format!("{k} is not a list config")),
                        ),
                    })
                    .collect::<Result<_, _>>()?,
            };
            let share = crate::group::share::overrides::ShareDefaults {
                group: &self.config.groups.share,
                delivery: self.config.share_leader.delivery(),
            };
            let to = overrides::edit(&from, &edits, &self.config.groups.consumer, &share)
                .map_err(TopicError::InvalidConfig)?;
            if validate_only {
                return Ok(());
            }
            let change = cmd::ConfigChange {
                name: group.clone(),
                from,
                to,
            };
            match self.commit(Command::SetGroupConfigs { change }).await? {
                Outcome::Done(Err(CommandError::Conflict)) => continue,
                Outcome::Done(r) => return r.map_err(topic_error),
                other => return Err(unexpected(&other)),
            }
        }
        Err(TopicError::Timeout(
            "group configs changed concurrently, again and again".into(),
        ))
    }

    fn broker_config_change(
        &self,
        meta: &crate::metadata::ClusterMetadata,
        resource: &str,
        ops: &ConfigOps,
    ) -> Result<cmd::ConfigChange, TopicError> {
        let effective = self.broker_defaults(meta);
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
        let stored = meta
            .broker_configs
            .get(resource)
            .cloned()
            .unwrap_or_default();
        // Keys that are not a topic default's broker name (the replication throttles,
        // Kafka's keys corelog does not act on, keys outside Kafka's vocabulary) are set
        // and deleted as they are; the rest go through the topic keys.
        let only = |k: &str| topic_config::def_by_broker_name(k).is_none();
        let current: BTreeMap<String, String> = stored
            .iter()
            .filter(|(k, _)| !only(k))
            .map(|(k, v)| Ok((to_topic(k)?, v.clone())))
            .collect::<Result<_, TopicError>>()?;
        let mut broker_only: BTreeMap<String, String> = stored
            .iter()
            .filter(|(k, _)| only(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let ops = match ops {
            ConfigOps::Replace(pairs) => {
                broker_only = pairs.iter().filter(|(k, _)| only(k)).cloned().collect();
                ConfigOps::Replace(
                    pairs
                        .iter()
                        .filter(|(k, _)| !only(k))
                        .map(|(k, v)| Ok((to_topic(k)?, v.clone())))
                        .collect::<Result<_, TopicError>>()?,
                )
            }
            ConfigOps::Incremental(list) => {
                let mut topic_ops = Vec::with_capacity(list.len());
                for op in list {
                    match op {
                        ConfigOp::Set(k, v) if only(k) => {
                            broker_only.insert(k.clone(), v.clone());
                        }
                        ConfigOp::Delete(k) if only(k) => {
                            broker_only.remove(k);
                        }
                        ConfigOp::Append(k, v) if only(k) => {
                            let edited = edit_list(k, broker_only.get(k), v, true)?;
                            broker_only.insert(k.clone(), edited);
                        }
                        ConfigOp::Subtract(k, v) if only(k) => {
                            let edited = edit_list(k, broker_only.get(k), v, false)?;
                            broker_only.insert(k.clone(), edited);
                        }
                        // Deleting a key that is not set changes nothing, whatever the key
                        // (KRaft accepts it; `kafka-reassign-partitions --verify` deletes
                        // throttles of every kind, set or not).
                        ConfigOp::Delete(k) if !stored.contains_key(k) => {}
                        ConfigOp::Set(k, v) => {
                            topic_ops.push(ConfigOp::Set(to_topic(k)?, v.clone()))
                        }
                        ConfigOp::Delete(k) => topic_ops.push(ConfigOp::Delete(to_topic(k)?)),
                        ConfigOp::Append(k, v) => {
                            topic_ops.push(ConfigOp::Append(to_topic(k)?, v.clone()))
                        }
                        ConfigOp::Subtract(k, v) => {
                            topic_ops.push(ConfigOp::Subtract(to_topic(k)?, v.clone()))
                        }
                    }
                }
                ConfigOps::Incremental(topic_ops)
            }
        };
        let layer = apply_ops(&effective, &current, &ops).map_err(invalid)?;
        let layer: BTreeMap<String, String> = layer
            .into_iter()
            .filter_map(|(k, v)| {
                topic_config::def(&k)
                    .and_then(|d| d.broker_name)
                    .map(|b| (b.to_string(), v))
            })
            .chain(broker_only)
            .collect();
        topic_config::check_broker_layer(&layer).map_err(invalid)?;
        if resource.is_empty() && layer.contains_key(corelog_controller::image::DECOMMISSION_KEY) {
            return Err(TopicError::InvalidConfig(format!(
                "{} is set on one broker's resource, not for every broker",
                corelog_controller::image::DECOMMISSION_KEY
            )));
        }
        // The new defaults must hold together, and every topic's overrides must still
        // resolve over them: a topic is never left running without its own settings
        // (a compacted topic falling back to deletion would lose its data).
        let mut layers = meta.broker_configs.clone();
        if layer.is_empty() {
            layers.remove(resource);
        } else {
            layers.insert(resource.to_string(), layer.clone());
        }
        let node = self.config.node_id.to_string();
        let empty = BTreeMap::new();
        let defaults = topic_config::BrokerDefaults {
            static_config: &self.config.log,
            cluster_default: layers.get("").unwrap_or(&empty),
            node: layers.get(&node).unwrap_or(&empty),
        }
        .effective();
        topic_config::resolve(&defaults, &BTreeMap::new()).map_err(invalid)?;
        for t in meta.topics.values() {
            topic_config::resolve(&defaults, &t.configs).map_err(|e| {
                TopicError::InvalidConfig(format!(
                    "topic {}'s own configs would no longer apply: {}",
                    t.name, e.message
                ))
            })?;
        }
        Ok(cmd::ConfigChange {
            name: resource.to_string(),
            from: stored,
            to: layer,
        })
    }
}

/// APPEND (`append`) or SUBTRACT of the items of `value` to a list key stored as it is:
/// Kafka's LIST keys only, the list starting from what is stored (Kafka's default when
/// nothing is: the other layers are not merged in, as Kafka does not).
fn edit_list(
    key: &str,
    stored: Option<&String>,
    value: &str,
    append: bool,
) -> Result<String, TopicError> {
    use crate::config_type::ConfigType;
    let def = crate::kafka_broker_keys::lookup(key)
        .ok_or_else(|| TopicError::InvalidConfig(format!("Unknown config name: {key}")))?;
    if def.config_type != ConfigType::List {
        return Err(TopicError::InvalidConfig(format!(
            "Config value append/subtract is not allowed for config key: {key}"
        )));
    }
    let items = |text: &str| -> Vec<String> {
        text.split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut list = items(stored.map_or(def.default.unwrap_or(""), String::as_str));
    for item in items(value) {
        if append {
            if !list.contains(&item) {
                list.push(item);
            }
        } else {
            list.retain(|i| *i != item);
        }
    }
    Ok(list.join(","))
}

/// One result per item of a command of `n` items.
fn items_of(outcome: Outcome, n: usize) -> Vec<Result<(), TopicError>> {
    match outcome {
        Outcome::Items(v) if v.len() == n => {
            v.into_iter().map(|r| r.map_err(topic_error)).collect()
        }
        other => vec![Err(unexpected(&other)); n],
    }
}

fn unexpected(outcome: &Outcome) -> TopicError {
    TopicError::Storage(format!("the controller answered {outcome:?}"))
}

/// The broker's view of a command's failure.
pub fn topic_error(e: CommandError) -> TopicError {
    match e {
        CommandError::TopicAlreadyExists => TopicError::AlreadyExists,
        CommandError::UnknownTopic => TopicError::Unknown,
        CommandError::InvalidTopicName(m) => TopicError::InvalidName(m),
        CommandError::InvalidPartitions(m) => TopicError::InvalidPartitions(m),
        CommandError::InvalidReplicationFactor(m) => TopicError::InvalidReplicationFactor(m),
        CommandError::InvalidReplicaAssignment(m) => TopicError::InvalidReplicaAssignment(m),
        CommandError::InvalidConfig(m) => TopicError::InvalidConfig(m),
        CommandError::Conflict => TopicError::Conflict,
        CommandError::PolicyViolation(m) => TopicError::PolicyViolation(m),
        CommandError::UnknownTopicOrPartition => TopicError::Unknown,
        CommandError::NoReassignmentInProgress => TopicError::NoReassignmentInProgress,
        CommandError::ElectionNotNeeded => TopicError::ElectionNotNeeded,
        e @ CommandError::PreferredLeaderNotAvailable(_) => {
            TopicError::PreferredLeaderNotAvailable(e.to_string())
        }
        CommandError::EligibleLeadersNotAvailable => TopicError::EligibleLeadersNotAvailable,
        e @ (CommandError::StaleBrokerEpoch(_)
        | CommandError::UnknownTopicId
        | CommandError::NotLeaderOrFollower
        | CommandError::FencedLeaderEpoch
        | CommandError::InvalidUpdateVersion
        | CommandError::IneligibleReplica(_)
        | CommandError::LogDirNotFound(_)
        | CommandError::Invalid(_)
        | CommandError::UnsupportedFeatures(_)) => TopicError::Invalid(e.to_string()),
        CommandError::InvalidFeatureUpdate(m) => TopicError::InvalidFeatureUpdate(m),
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

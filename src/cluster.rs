//! This broker's membership of the cluster: its controller node started from the
//! broker's configuration, the wait at start-up until the quorum has admitted it, and
//! the one-time import of a single node's metadata from an earlier release.
//!
//! A broker serves nothing before it is admitted — registered in this incarnation,
//! unfenced, and its shards' metadata at least as new as that — so the first requests it
//! answers already see which partitions it holds and leads.

use crate::config::BrokerConfig;
use anyhow::Context;
use corelog_controller::image::{Endpoint, ListenerEndpoint};
use corelog_controller::{ControllerNode, NodeConfig};
use corelog_shards::metadata::{MetadataStore, LEGACY_METADATA_FILE};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The controller node's directory under the data directory.
pub const METADATA_DIR: &str = "__cluster_metadata";

/// How often the wait for admission says what it waits for.
const ADMISSION_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// How long a stopping broker waits for its leadership to move before it stops anyway.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts this node's controller; it registers the broker with its log directories'
/// ids, `log_dir_ids` (in `log.dirs` order).
pub fn start_controller(
    config: &BrokerConfig,
    log_dir_ids: &[uuid::Uuid],
) -> anyhow::Result<ControllerNode> {
    let node = NodeConfig {
        node_id: config.node_id,
        dir: config.data_dir.join(METADATA_DIR),
        listen: config.cluster.controller_listen.clone(),
        voters: config.cluster.voters.clone(),
        endpoint: Endpoint {
            host: config.advertise_host.clone(),
            port: config.advertise_port,
        },
        listeners: config
            .listeners
            .iter()
            .filter_map(|l| {
                let (host, port) = l.advertised.clone()?;
                Some(ListenerEndpoint {
                    name: l.name.clone(),
                    host,
                    port,
                })
            })
            .collect(),
        rack: config.cluster.rack.clone(),
        log_dirs: config.log_dirs.clone(),
        log_dir_ids: log_dir_ids.to_vec(),
        session_timeout: config.cluster.session_timeout,
        heartbeat_interval: config.cluster.heartbeat_interval,
        snapshot_every: config.cluster.snapshot_entries,
        initial_cluster_id: legacy_cluster_id(config),
        leader_balance: config.cluster.leader_balance.clone(),
        balancer: config.cluster.balancer.clone(),
        security: config.cluster.controller_security.clone(),
        features: config.configured_feature_levels(),
    };
    ControllerNode::start(node).map_err(|e| anyhow::anyhow!("starting the controller node: {e}"))
}

/// The cluster id a single node kept before the controller quorum, so that a node
/// upgraded in place keeps its identity.
fn legacy_cluster_id(config: &BrokerConfig) -> Option<String> {
    let bytes = std::fs::read(config.data_dir.join(LEGACY_METADATA_FILE)).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("cluster_id")?.as_str().map(str::to_string)
}

/// `cluster-metadata.json` as a single node of an earlier release wrote it.
#[derive(serde::Deserialize)]
struct LegacyMetadata {
    #[serde(default)]
    topics: std::collections::BTreeMap<String, LegacyTopic>,
    #[serde(default)]
    next_producer_id: i64,
    #[serde(default)]
    client_quotas: corelog_controller::client_quotas::ClientQuotas,
    #[serde(default)]
    broker_configs: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
}

#[derive(serde::Deserialize)]
struct LegacyTopic {
    name: String,
    id: uuid::Uuid,
    partitions: i32,
    #[serde(default)]
    configs: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    leader_epoch: i32,
}

/// Carries the topics, quotas, broker configs and producer-id mark that a single node of
/// an earlier release kept in `cluster-metadata.json` into the metadata log, once, before
/// any shard opens a partition; then renames the file `.imported`. A cluster that has
/// topics of its own imports nothing: the file stays, and the broker says so.
pub fn import_single_node(
    config: &BrokerConfig,
    node: &ControllerNode,
    metadata: &MetadataStore,
) -> anyhow::Result<()> {
    use corelog_controller::command::{Command, Outcome, SingleNodeMetadata, SingleNodeTopic};
    let path = config.data_dir.join(LEGACY_METADATA_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let legacy: LegacyMetadata =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let image = node.image();
    // A crash between the import and the rename: imported already.
    let imported = !legacy.topics.is_empty()
        && legacy
            .topics
            .values()
            .all(|t| image.topic(&t.name).is_some_and(|i| i.id == t.id));
    if !imported {
        let n = legacy.topics.len();
        let command = Command::ImportSingleNode(SingleNodeMetadata {
            broker: config.node_id,
            topics: legacy
                .topics
                .into_values()
                .map(|t| SingleNodeTopic {
                    name: t.name,
                    id: t.id,
                    partitions: t.partitions,
                    configs: t.configs,
                    leader_epoch: t.leader_epoch,
                })
                .collect(),
            next_producer_id: legacy.next_producer_id,
            client_quotas: legacy.client_quotas,
            broker_configs: legacy.broker_configs,
        });
        let applied = futures::executor::block_on(node.propose(command, Duration::from_secs(30)))
            .map_err(|e| anyhow::anyhow!("importing {}: {e}", path.display()))?;
        match applied.outcome {
            Outcome::Done(Ok(())) => {
                while metadata.snapshot().version() < applied.index {
                    std::thread::sleep(Duration::from_millis(5));
                }
                tracing::info!(topics = n, file = %path.display(), "a single node's metadata imported into the metadata log");
            }
            other => {
                tracing::warn!(outcome = ?other, file = %path.display(), "a single node's metadata not imported: the cluster has topics of its own");
                return Ok(());
            }
        }
    }
    let done = path.with_extension("json.imported");
    std::fs::rename(&path, &done).with_context(|| format!("renaming {}", path.display()))?;
    Ok(())
}

/// Blocks until this broker is admitted, or `stop` is raised (`false`); an error if it
/// never can be (`ControllerNode::refusal`).
pub fn wait_until_admitted(
    node: &ControllerNode,
    metadata: &MetadataStore,
    stop: &AtomicBool,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let mut said = started;
    let registration = node.registration();
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(false);
        }
        if let Some(why) = node.refusal() {
            anyhow::bail!("this broker cannot join the cluster: {why}");
        }
        let epoch = *registration.borrow();
        let image = metadata.snapshot();
        let admitted = epoch.is_some_and(|epoch| {
            image
                .broker(node.node_id())
                .is_some_and(|b| b.epoch == epoch && !b.fenced)
        });
        if admitted {
            tracing::info!(
                node = node.node_id(),
                cluster_id = image.cluster_id(),
                controller = ?node.leader(),
                waited_ms = started.elapsed().as_millis() as u64,
                "admitted to the cluster"
            );
            return Ok(true);
        }
        if said.elapsed() >= ADMISSION_LOG_INTERVAL {
            said = Instant::now();
            tracing::info!(
                node = node.node_id(),
                controller = ?node.leader(),
                registered = epoch.is_some(),
                "waiting for the controller quorum to admit this broker"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Moves leadership away before this broker stops (Kafka's controlled shutdown): asks
/// the controller to take it out of every ISR and lead its partitions elsewhere, then
/// waits until this broker's shards have taken up the metadata that says so. Clients
/// meanwhile get NOT_LEADER_OR_FOLLOWER, which they retry at the new leaders, instead of
/// a broker that vanishes under them. A broker alone in its cluster hands nothing over.
pub async fn controlled_shutdown(node: &ControllerNode, metadata: &MetadataStore, node_id: i32) {
    let Some(epoch) = *node.registration().borrow() else {
        return;
    };
    if metadata.snapshot().live_brokers().all(|b| b.id == node_id) {
        return;
    }
    let started = Instant::now();
    let command = corelog_controller::command::Command::ControlledShutdown { id: node_id, epoch };
    let proposing = node.propose(command, CONTROLLED_SHUTDOWN_TIMEOUT / 2);
    let handed_over = async {
        match proposing.await {
            Ok(applied) => {
                metadata.wait_reconciled(applied.index).await;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "controlled shutdown not committed; stopping without it");
                false
            }
        }
    };
    let timeout = async {
        glommio::timer::sleep(CONTROLLED_SHUTDOWN_TIMEOUT).await;
        tracing::warn!("controlled shutdown timed out; stopping");
        false
    };
    if futures_lite::future::or(handed_over, timeout).await {
        tracing::info!(
            ms = started.elapsed().as_millis() as u64,
            "leadership moved away for the shutdown"
        );
    }
}

//! This broker's membership of the cluster: its controller node started from the
//! broker's configuration, and the wait at start-up until the quorum has admitted it.
//!
//! A broker serves nothing before it is admitted — registered in this incarnation,
//! unfenced, and its shards' metadata at least as new as that — so the first requests it
//! answers already see which partitions it holds and leads.

use crate::config::BrokerConfig;
use anyhow::Context;
use corelog_controller::image::Endpoint;
use corelog_controller::{ControllerNode, NodeConfig};
use shards::metadata::{MetadataStore, LEGACY_METADATA_FILE};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The controller node's directory under the data directory.
pub const METADATA_DIR: &str = "__cluster_metadata";

/// How often the wait for admission says what it waits for.
const ADMISSION_LOG_INTERVAL: Duration = Duration::from_secs(5);

pub fn start_controller(config: &BrokerConfig) -> anyhow::Result<ControllerNode> {
    let port = u16::try_from(config.advertise_port).context("advertised port")?;
    let node = NodeConfig {
        node_id: config.node_id,
        dir: config.data_dir.join(METADATA_DIR),
        listen: config.cluster.controller_listen.clone(),
        voters: config.cluster.voters.clone(),
        endpoint: Endpoint {
            host: config.advertise_host.clone(),
            port,
        },
        rack: config.cluster.rack.clone(),
        session_timeout: config.cluster.session_timeout,
        heartbeat_interval: config.cluster.heartbeat_interval,
        snapshot_every: config.cluster.snapshot_entries,
        initial_cluster_id: legacy_cluster_id(config),
    };
    ControllerNode::start(node).map_err(|e| anyhow::anyhow!("starting the controller node: {e}"))
}

/// The cluster id a single node kept before the controller quorum, so that a node
/// upgraded in place keeps its identity.
fn legacy_cluster_id(config: &BrokerConfig) -> Option<String> {
    let bytes = std::fs::read(config.data_dir.join(LEGACY_METADATA_FILE)).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    if value
        .get("topics")
        .and_then(|t| t.as_object())
        .is_some_and(|t| !t.is_empty())
    {
        tracing::warn!(
            file = LEGACY_METADATA_FILE,
            "this data directory holds topics of a single-node release; their metadata is not carried into the controller quorum"
        );
    }
    value.get("cluster_id")?.as_str().map(str::to_string)
}

/// Blocks until this broker is admitted, or `stop` is raised (`false`).
pub fn wait_until_admitted(
    node: &ControllerNode,
    metadata: &MetadataStore,
    stop: &AtomicBool,
) -> bool {
    let started = Instant::now();
    let mut said = started;
    let registration = node.registration();
    loop {
        if stop.load(Ordering::Acquire) {
            return false;
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
            return true;
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

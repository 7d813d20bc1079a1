//! How a controller node is configured: its identity, its port, the quorum's voters,
//! and the broker it speaks for.

use crate::image::{Endpoint, ListenerEndpoint};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: i32,
    /// Where the node's files live (created if missing).
    pub dir: PathBuf,
    /// The controller port to bind, `host:port`.
    pub listen: String,
    /// The initial voters, id → `host:port` (Kafka's `controller.quorum.voters`).
    pub voters: BTreeMap<i32, String>,
    /// Where other brokers reach this broker (its inter-broker listener).
    pub endpoint: Endpoint,
    /// Every listener it advertises, by name.
    pub listeners: Vec<ListenerEndpoint>,
    pub rack: Option<String>,
    /// This broker's log directories (`log.dirs`) and their ids, registered with it
    /// (KIP-858), in the same order; its heartbeats report the filesystem of the one
    /// with the most room. Empty: `dir`'s filesystem is reported.
    pub log_dirs: Vec<PathBuf>,
    pub log_dir_ids: Vec<uuid::Uuid>,
    /// A broker silent for this long is fenced (`broker.session.timeout.ms`).
    pub session_timeout: Duration,
    /// How often a broker heartbeats (`broker.heartbeat.interval.ms`).
    pub heartbeat_interval: Duration,
    /// A snapshot is taken after this many entries since the last one.
    pub snapshot_every: u64,
    /// The cluster id the first leader gives a new cluster (one is made up when `None`).
    pub initial_cluster_id: Option<String>,
    /// Preferred leaders handed back by the active controller (Kafka's
    /// `auto.leader.rebalance.enable`); `None`: never.
    pub leader_balance: Option<LeaderBalance>,
    /// The partition balancer and decommissioning (`balancer`).
    pub balancer: Balancer,
    /// How the controller port is secured (plaintext by default).
    pub security: std::sync::Arc<crate::port_security::PortSecurity>,
    /// The feature levels configured here: a new cluster's, and this broker's while the
    /// cluster has finalized none (`features`).
    pub features: crate::features::ConfiguredLevels,
}

impl NodeConfig {
    /// The address other nodes reach this one at: its entry among the voters, else the
    /// listen address.
    pub fn advertised(&self) -> String {
        self.voters
            .get(&self.node_id)
            .cloned()
            .unwrap_or_else(|| self.listen.clone())
    }

    pub fn is_voter(&self) -> bool {
        self.voters.contains_key(&self.node_id)
    }
}

/// How the active controller rebalances leaders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderBalance {
    /// `leader.imbalance.check.interval.seconds`.
    pub check_interval: Duration,
    /// `leader.imbalance.per.broker.percentage`: a broker above it is rebalanced.
    pub max_imbalance_percent: u32,
}

impl Default for LeaderBalance {
    fn default() -> Self {
        LeaderBalance {
            check_interval: Duration::from_secs(300),
            max_imbalance_percent: 10,
        }
    }
}

/// How the active controller balances replicas and drains decommissioned brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balancer {
    /// Replicas and leaders are evened out (`--partition-balancer-enable`); off, only
    /// decommissioned brokers are drained.
    pub enabled: bool,
    /// How often a wave is planned (`--partition-balancer-interval-ms`).
    pub interval: Duration,
    /// Partitions moving at once, anyone's moves included
    /// (`--partition-balancer-max-moves`).
    pub max_moves: usize,
    /// How far from the mean a broker's replica or leader count may be, in percent.
    pub max_deviation_percent: u32,
    /// A broker whose data filesystem is fuller than this, in percent, takes no new
    /// replicas (`--partition-balancer-max-disk-usage-percent`).
    pub max_disk_usage_percent: u32,
}

impl Default for Balancer {
    fn default() -> Self {
        Balancer {
            enabled: true,
            interval: Duration::from_secs(10),
            max_moves: 8,
            max_deviation_percent: 10,
            max_disk_usage_percent: 85,
        }
    }
}

//! What a shard and the services it holds are configured with, fixed at start-up.

use crate::group::coordinator::GroupConfig;
use corelog_storage::LogConfig;
use std::path::PathBuf;
use std::time::Duration;

pub struct ShardConfig {
    /// This broker's node id (its dynamic broker configs are stored under it).
    pub node_id: i32,
    /// The first log directory: the high-watermark checkpoints and the broker-wide disk
    /// check's directory.
    pub data_dir: PathBuf,
    /// Every log directory (`log.dirs`), `data_dir` first (`crate::log_dirs`).
    pub log_dirs: Vec<PathBuf>,
    /// Each log directory's id (`crate::log_dir_identity`), in `log_dirs` order.
    pub log_dir_ids: Vec<uuid::Uuid>,
    pub log: LogConfig,
    pub shard_count: usize,
    pub groups: GroupConfig,
    /// The transaction coordinator's settings.
    pub txns: crate::txn::coordinator::TxnCoordinatorConfig,
    /// The share partitions' settings (`group.share.*` of records).
    pub share_leader: crate::share::leader::ShareLeaderConfig,
    /// The share coordinator's settings (`__share_group_state`).
    pub share_state: crate::share::coordinator::ShareCoordinatorConfig,
    pub housekeeping: crate::housekeeping::HousekeepingConfig,
    /// All tail caches of this shard together (`corelog_storage::tail_cache_budget`).
    pub tail_cache_shard_bytes: u64,
    /// Segment files this shard keeps open at once (`corelog_storage::file_cache`).
    pub open_segment_files: usize,
    pub replication: ReplicationConfig,
}

/// How this broker replicates (Kafka's settings of the same names).
#[derive(Debug, Clone)]
pub struct ReplicationConfig {
    /// `replica.lag.time.max.ms`: a follower that has not caught up for this long leaves
    /// the ISR.
    pub lag_time_max_ms: i64,
    /// `replica.high.watermark.checkpoint.interval.ms`.
    pub checkpoint_interval: Duration,
    pub fetch: crate::replica_fetcher::FetchConfig,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            lag_time_max_ms: 30_000,
            checkpoint_interval: Duration::from_secs(5),
            fetch: Default::default(),
        }
    }
}

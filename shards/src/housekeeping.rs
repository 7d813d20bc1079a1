//! Background work of one shard: retention, compaction, the disk budget and the expiry of
//! idle idempotent producers.
//!
//! Each shard runs its housekeeping in its own low-priority glommio task queue, so the
//! scheduler gives produce and fetch the core whenever they have work (the queue's
//! shares are 1% of the default queue's); the tasks yield between partitions and inside
//! long passes. Nothing here holds a partition lock: retention deletes sealed segments
//! (never the active one) and compaction swaps a sealed segment for its cleaned copy in
//! one synchronous step, so appends and reads go on throughout.
//!
//! Disk budget: every shard reports the bytes of its logs to shard 0 over the mesh once a
//! second. Shard 0 adds them up, looks at the data directory's filesystem (`statvfs`),
//! and when either limit is crossed tells every shard to refuse produces (the edge
//! answers KAFKA_STORAGE_ERROR, which producers retry). When retention brings usage back
//! under the limits, shard 0 lifts the refusal the same way. Refusing happens before an
//! append is queued, so nothing acknowledged is ever lost to a full disk.

use crate::mesh::{HousekeepingMessage, Peers, TopicPartition};
use crate::routing::ShardId;
use corelog_controller::rpc::DiskUse;
use corelog_partition::Partition;
use corelog_storage::compaction::cleaner;
use glommio::{Latency, Shares};
use std::cell::RefCell;
use std::path::Path;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The shard that keeps the disk budget of all shards.
pub const DISK_BUDGET_SHARD: ShardId = 0;

/// How often shards report their disk use to shard 0.
pub const DISK_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Shares of the housekeeping task queue; glommio's default queue has 1000.
const HOUSEKEEPING_SHARES: usize = 10;

#[derive(Debug, Clone)]
pub struct HousekeepingConfig {
    /// Between two retention rounds (`log.retention.check.interval.ms`).
    pub check_interval: Duration,
    /// Between two compaction rounds (`log.cleaner.backoff.ms`).
    pub cleaner_backoff: Duration,
    /// Memory for one compaction pass's key map (`log.cleaner.dedupe.buffer.size`).
    pub cleaner_buffer_bytes: usize,
    /// The cleaner's reads plus writes per second on one shard
    /// (`log.cleaner.io.max.bytes.per.second`); `None`: unlimited.
    pub cleaner_io_bytes_per_second: Option<u64>,
    /// Refuse produces above this fill ratio of the data directory's filesystem.
    pub disk_fill_max_ratio: f64,
    /// Refuse produces while all logs together hold more than this.
    pub disk_budget_bytes: Option<u64>,
    /// Idle time after which a partition forgets an idempotent producer
    /// (`producer.id.expiration.ms`).
    pub producer_id_expiration_ms: i64,
    /// Between two producer expiry rounds (`producer.id.expiration.check.interval.ms`).
    pub producer_id_expiration_check_interval: Duration,
}

impl Default for HousekeepingConfig {
    fn default() -> Self {
        HousekeepingConfig {
            check_interval: Duration::from_secs(300),
            cleaner_backoff: Duration::from_secs(15),
            cleaner_buffer_bytes: 16 << 20,
            cleaner_io_bytes_per_second: None,
            disk_fill_max_ratio: 0.95,
            disk_budget_bytes: None,
            producer_id_expiration_ms: 86_400_000,
            producer_id_expiration_check_interval: Duration::from_secs(600),
        }
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The partitions housekeeping works on: the shard's partition table, seen through this
/// trait so that housekeeping never depends on the shard that holds it.
pub trait PartitionSet {
    /// Every open partition of the shard, in a stable order.
    fn partitions(&self) -> Vec<(TopicPartition, Rc<Partition>)>;
}

/// One shard's housekeeping: its background rounds, the produce refusal it was told of,
/// and on shard 0 the disk budget of all shards.
pub struct Housekeeping {
    config: HousekeepingConfig,
    /// The log directories: the fullest one's filesystem decides.
    log_dirs: Vec<PathBuf>,
    /// Why produces are refused (shard 0's disk verdict), if they are.
    produce_refused: RefCell<Option<Arc<str>>>,
    /// Shard 0 only: every shard's last disk report.
    disk_budget: RefCell<DiskBudget>,
}

impl Housekeeping {
    pub fn new(
        config: HousekeepingConfig,
        log_dirs: Vec<PathBuf>,
        shard_count: usize,
    ) -> Housekeeping {
        Housekeeping {
            config,
            log_dirs,
            produce_refused: RefCell::new(None),
            disk_budget: RefCell::new(DiskBudget::new(shard_count)),
        }
    }

    /// Why produces are refused right now, if they are.
    pub fn produce_refused(&self) -> Option<Arc<str>> {
        self.produce_refused.borrow().clone()
    }

    /// Handles a housekeeping message: a shard's disk report (on shard 0, which tells
    /// every shard when the verdict changes) or that verdict.
    pub async fn handle(&self, msg: HousekeepingMessage, peers: &Peers) {
        match msg {
            HousekeepingMessage::DiskUsage { shard, bytes } => {
                let verdict = self.disk_budget.borrow_mut().report(
                    shard,
                    bytes,
                    &self.config,
                    &self.log_dirs,
                );
                let Some(verdict) = verdict else {
                    return;
                };
                match &verdict {
                    Some(why) => {
                        tracing::warn!(reason = %why, "refusing produce requests until retention frees space")
                    }
                    None => {
                        tracing::info!(
                            "disk usage is back under its limits; accepting produce requests"
                        )
                    }
                }
                let refuse: Option<Arc<str>> = verdict.map(Into::into);
                for target in 0..peers.shard_count() {
                    let msg = HousekeepingMessage::DiskPressure {
                        refuse: refuse.clone(),
                    };
                    peers.tell(target, msg).await;
                }
            }
            HousekeepingMessage::DiskPressure { refuse } => {
                *self.produce_refused.borrow_mut() = refuse;
            }
        }
    }

    /// Starts this shard's retention, compaction and producer-expiry rounds and its disk
    /// reporter, in a low-priority task queue.
    pub fn start(self: &Rc<Self>, partitions: Rc<dyn PartitionSet>, peers: Rc<Peers>) {
        cleaner::set_io_limit(self.config.cleaner_io_bytes_per_second);
        let queue = glommio::executor().create_task_queue(
            Shares::Static(HOUSEKEEPING_SHARES),
            Latency::NotImportant,
            "housekeeping",
        );
        let hk = self.config.clone();
        let set = partitions.clone();
        let spawned = glommio::spawn_local_into(
            async move {
                let tick = hk
                    .cleaner_backoff
                    .min(hk.check_interval)
                    .min(hk.producer_id_expiration_check_interval);
                let mut last_retention = std::time::Instant::now();
                let mut last_expiry = std::time::Instant::now();
                loop {
                    glommio::timer::sleep(tick).await;
                    if last_retention.elapsed() >= hk.check_interval {
                        last_retention = std::time::Instant::now();
                        retention_round(&*set).await;
                    }
                    if last_expiry.elapsed() >= hk.producer_id_expiration_check_interval {
                        last_expiry = std::time::Instant::now();
                        producer_expiry_round(&*set, hk.producer_id_expiration_ms).await;
                    }
                    compaction_round(&*set, hk.cleaner_buffer_bytes).await;
                }
            },
            queue,
        );
        match spawned {
            Ok(task) => {
                task.detach();
            }
            Err(e) => tracing::error!(error = %e, "starting housekeeping"),
        }
        let reporter = glommio::spawn_local_into(
            async move {
                loop {
                    glommio::timer::sleep(DISK_REPORT_INTERVAL).await;
                    let bytes = partitions
                        .partitions()
                        .iter()
                        .map(|(_, p)| p.log().size_bytes())
                        .sum();
                    let report = HousekeepingMessage::DiskUsage {
                        shard: peers.id(),
                        bytes,
                    };
                    peers.tell(DISK_BUDGET_SHARD, report).await;
                }
            },
            queue,
        );
        match reporter {
            Ok(task) => {
                task.detach();
            }
            Err(e) => tracing::error!(error = %e, "starting the disk reporter"),
        }
    }
}

/// Retention for each of this shard's partitions.
pub async fn retention_round(set: &dyn PartitionSet) {
    let now = now_ms();
    for (tp, log) in set.partitions() {
        match log.enforce_retention(now).await {
            Ok(0) => {}
            Ok(deleted) => {
                tracing::info!(topic = %tp.topic, partition = tp.partition, segments = deleted, log_start = log.log_start_offset(), "retention deleted segments")
            }
            Err(e) => {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "recording the log start after retention failed; retried next round")
            }
        }
        glommio::yield_if_needed().await;
    }
}

/// Forgets idle idempotent producers in each of this shard's partitions.
pub async fn producer_expiry_round(set: &dyn PartitionSet, expiration_ms: i64) {
    let now = now_ms();
    for (tp, log) in set.partitions() {
        let expired = log.log().expire_producers(now, expiration_ms);
        if expired > 0 {
            tracing::debug!(topic = %tp.topic, partition = tp.partition, expired, "expired idle producer ids");
        }
        glommio::yield_if_needed().await;
    }
}

/// A compaction pass for each of this shard's compacted partitions that is due, each
/// below its high watermark (what a truncation may still cut is not compacted).
pub async fn compaction_round(set: &dyn PartitionSet, buffer_bytes: usize) {
    let now = now_ms();
    for (tp, log) in set.partitions() {
        let high_watermark = log.high_watermark();
        match cleaner::clean_if_due(log.log(), buffer_bytes, now, high_watermark).await {
            Ok(Some(stats)) => {
                tracing::info!(topic = %tp.topic, partition = tp.partition, ?stats, "compacted")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "compaction failed; the log is unchanged")
            }
        }
        glommio::yield_if_needed().await;
    }
}

/// Shard 0's view of the disk: the last report of every shard and whether produces are
/// being refused.
#[derive(Debug)]
pub struct DiskBudget {
    usage: Vec<u64>,
    refusing: Option<String>,
}

impl DiskBudget {
    pub fn new(shards: usize) -> DiskBudget {
        DiskBudget {
            usage: vec![0; shards],
            refusing: None,
        }
    }

    /// Records one shard's report; returns the new verdict when it changed
    /// (`Some(None)`: lift the refusal).
    pub fn report(
        &mut self,
        shard: ShardId,
        bytes: u64,
        config: &HousekeepingConfig,
        log_dirs: &[PathBuf],
    ) -> Option<Option<String>> {
        if let Some(slot) = self.usage.get_mut(shard) {
            *slot = bytes;
        }
        let total: u64 = self.usage.iter().sum();
        // Broker-wide, so the fullest directory's filesystem decides: no disk fills up.
        let fill = log_dirs
            .iter()
            .filter_map(|d| filesystem_fill(d))
            .reduce(f64::max);
        let verdict = verdict(total, fill, config);
        if verdict.is_some() == self.refusing.is_some() {
            return None;
        }
        self.refusing = verdict.clone();
        Some(verdict)
    }
}

/// Why produces must be refused, if they must.
pub fn verdict(
    total_log_bytes: u64,
    fill: Option<f64>,
    config: &HousekeepingConfig,
) -> Option<String> {
    if let Some(budget) = config.disk_budget_bytes {
        if total_log_bytes > budget {
            return Some(format!(
                "partition logs hold {total_log_bytes} bytes, over the disk budget of {budget}"
            ));
        }
    }
    match fill {
        Some(f) if f > config.disk_fill_max_ratio => Some(format!(
            "the fullest log directory's filesystem is {:.1}% full (limit {:.1}%)",
            f * 100.0,
            config.disk_fill_max_ratio * 100.0
        )),
        _ => None,
    }
}

/// Used share of the filesystem holding `dir`, as `df` prints it in `Use%` (the same
/// measure the controller's balancer reads from heartbeats).
pub fn filesystem_fill(dir: &Path) -> Option<f64> {
    DiskUse::of(dir)
        .filter(|d| d.total_bytes > 0)
        .map(|d| d.fill())
}

/// (total, usable by unprivileged users) bytes of the filesystem holding `dir`
/// (DescribeLogDirs v4).
pub fn filesystem_space(dir: &Path) -> Option<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    let block = st.fragment_size() as u64;
    Some((
        (st.blocks() as u64).saturating_mul(block),
        (st.blocks_available() as u64).saturating_mul(block),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_is_dfs_use_percent() {
        // 160 GiB reserved for root, 74 GiB used, 18 GiB available: df says 81 %.
        let gib = 1u64 << 18; // 4 KiB blocks
        let f = DiskUse::from_blocks(252 * gib, 178 * gib, 18 * gib, 4096).fill();
        assert!((f - 74.0 / 92.0).abs() < 1e-9, "{f}");
        assert_eq!(DiskUse::from_blocks(100, 100, 95, 4096).fill(), 0.0);
        assert_eq!(DiskUse::from_blocks(100, 5, 0, 4096).fill(), 1.0);
        assert_eq!(DiskUse::from_blocks(0, 0, 0, 4096).fill(), 0.0);
    }

    #[test]
    fn verdict_follows_budget_and_fill() {
        let mut c = HousekeepingConfig::default();
        assert!(verdict(10, Some(0.5), &c).is_none());
        assert!(verdict(10, Some(0.96), &c).is_some());
        c.disk_budget_bytes = Some(100);
        assert!(verdict(100, Some(0.1), &c).is_none());
        assert!(verdict(101, Some(0.1), &c).is_some());
        assert!(verdict(101, None, &c).is_some());
    }

    #[test]
    fn budget_reports_only_changes() {
        let c = HousekeepingConfig {
            disk_budget_bytes: Some(100),
            disk_fill_max_ratio: 1.0,
            ..Default::default()
        };
        let dirs = [std::env::temp_dir()];
        let mut b = DiskBudget::new(2);
        assert_eq!(b.report(0, 60, &c, &dirs), None);
        assert!(matches!(b.report(1, 60, &c, &dirs), Some(Some(_))));
        assert_eq!(b.report(1, 50, &c, &dirs), None);
        assert_eq!(b.report(0, 10, &c, &dirs), Some(None));
    }
}

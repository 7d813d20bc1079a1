//! The partitions the metadata gives this shard: opened (several at once), reconfigured
//! when their topic's or the broker's configuration changes, dropped with their
//! directories when they leave, and the shard's tail-cache and preallocation budgets
//! shared among them.
//!
//! Invariants: opens and drops hold `admin_lock`, so a partition is opened at most once;
//! a partition opens only on its owner; a dropped partition's directory is renamed away
//! before it is removed, so nothing still holding the old path touches a new one.

use super::Shard;
use crate::group::OFFSETS_TOPIC;
use crate::mesh::{TopicError, TopicPartition};
use corelog_partition::Partition;
use corelog_storage::{LogConfig, StorageError};
use std::rc::Rc;
use std::sync::Arc;

/// Disk space a shard's active segments may claim ahead of their written ends, shared
/// among its partitions (each gets between 1 and 64 MiB).
const PREALLOCATION_SHARD_BYTES: u64 = 1 << 30;

/// Partitions a shard opens concurrently (topic creation, start-up).
const PARTITION_OPENS_AT_ONCE: usize = 64;

impl Shard {
    /// Opens this shard's partitions of the metadata as published now (start-up), then
    /// follows every later version.
    pub async fn open_owned_partitions(self: &Rc<Self>) -> Result<(), TopicError> {
        let meta = self.metadata.snapshot();
        let result = self.reconcile(&meta).await;
        self.start_reconciling(meta.version());
        result
    }

    /// Makes this shard's partitions what `meta` says (`reconcile::plan`), then marks the
    /// version reconciled, failures included (they are logged and returned).
    pub async fn reconcile(
        self: &Rc<Self>,
        meta: &crate::metadata::ClusterMetadata,
    ) -> Result<(), TopicError> {
        let open: Vec<crate::reconcile::OpenPartition> = self
            .logs()
            .into_iter()
            .map(|(tp, _)| crate::reconcile::OpenPartition { tp })
            .collect();
        let plan = crate::reconcile::plan(
            meta,
            self.config.node_id,
            |topic, p| self.owner_of(topic, p) == self.id,
            &open,
            &mut self.reconciled.borrow_mut(),
        );
        let mut result = Ok(());
        for (topic, partitions) in plan.drop {
            self.drop_partitions(topic, partitions).await;
        }
        if plan.reconfigure_all {
            self.apply_all_topic_configs();
        }
        for topic in &plan.reconfigure {
            self.apply_topic_config(topic);
        }
        for (topic, partitions) in plan.open {
            if let Err(e) = self.open_partitions(topic.clone(), partitions).await {
                tracing::error!(topic = %topic, error = %e, "opening partitions");
                result = Err(e);
            }
        }
        if let Err(e) = self.apply_roles(meta).await {
            result = Err(e);
        }
        self.report_directories();
        self.metadata.mark_reconciled(self.id, meta.version());
        result
    }

    /// Reconciles every version published after `from`, for as long as the shard runs.
    pub fn start_reconciling(self: &Rc<Self>, from: u64) {
        let shard = self.clone();
        glommio::spawn_local(async move {
            let mut done = from;
            loop {
                shard.metadata.wait_past(done).await;
                let meta = shard.metadata.snapshot();
                if let Err(e) = shard.reconcile(&meta).await {
                    tracing::error!(shard = shard.id, version = meta.version(), error = %e, "reconciling partitions with the metadata");
                }
                done = meta.version();
            }
        })
        .detach();
    }

    pub(crate) async fn open_partitions(
        &self,
        topic: Arc<str>,
        partitions: Vec<i32>,
    ) -> Result<(), TopicError> {
        let _permit = self.admin_lock.acquire_permit(1).await;
        let config = self.topic_log_config(&topic);
        let wanted: Vec<TopicPartition> = partitions
            .into_iter()
            .map(|p| {
                assert_eq!(
                    self.owner_of(&topic, p),
                    self.id,
                    "partitions open only on their owner"
                );
                TopicPartition {
                    topic: topic.clone(),
                    partition: p,
                }
            })
            .filter(|tp| !self.partitions.borrow().contains_key(tp))
            .collect();
        // Several at once: an open is a chain of small file operations (and a checkpoint
        // sync), so thousands of partitions open in about the time of their I/O, not of
        // their round trips one after another.
        // A failed directory opens nothing: neither what is in it nor what the metadata
        // says was (its disk may no longer show it), until the broker restarts.
        let offline: Vec<bool> = (0..self.config.log_dirs.len())
            .map(|i| self.data_dir.is_failed(i))
            .collect();
        let wanted = self.outside_failed_dirs(&topic, wanted, &offline);
        let mut placement =
            crate::log_dirs::Placement::with_offline(&self.config.log_dirs, offline);
        for group in wanted.chunks(PARTITION_OPENS_AT_ONCE) {
            let opened = futures::future::join_all(group.iter().map(|tp| {
                let dir = placement.locate_preferring(
                    &topic,
                    tp.partition,
                    config.segment_bytes,
                    self.take_preferred_dir(tp),
                );
                let config = config.clone();
                let context = self.storage_context.clone();
                let high_watermark = self.checkpointed_high_watermark(tp);
                let name = format!("{}-{}", tp.topic, tp.partition);
                async move {
                    let dir = match dir {
                        Ok(dir) => dir,
                        Err(crate::log_dirs::Unplaced::Offline) => return Ok(None),
                        Err(crate::log_dirs::Unplaced::InTwo(e)) => {
                            return Err(StorageError::new(name, e))
                        }
                    };
                    Partition::open_replica(dir, config, context, high_watermark)
                        .await
                        .map(Some)
                }
            }))
            .await;
            let mut failed = None;
            {
                let mut partitions = self.partitions.borrow_mut();
                for (tp, log) in group.iter().zip(opened) {
                    match log {
                        Ok(Some(log)) => {
                            partitions.insert(tp.clone(), log);
                        }
                        Ok(None) => {}
                        Err(e) => failed = failed.or(Some(e)),
                    }
                }
            }
            // At once, before the new partitions can cache anything.
            self.share_tail_cache();
            if let Some(e) = failed {
                return Err(TopicError::Storage(e.to_string()));
            }
        }
        Ok(())
    }

    /// Shares the shard's tail-cache budget, and its preallocation budget, among the open
    /// partitions: with many partitions each preallocates less ahead, so the disk space
    /// claimed but not yet written stays near `PREALLOCATION_SHARD_BYTES` (1,000
    /// partitions at the full 64 MiB step would claim 64 GB).
    pub(super) fn share_tail_cache(&self) {
        let budget = corelog_storage::tail_cache_budget::TailCacheBudget {
            shard_bytes: self.config.tail_cache_shard_bytes,
            partition_max_bytes: self.config.log.tail_cache_bytes,
        };
        let partitions = self.partitions.borrow();
        budget.apply(partitions.values().map(|p| &**p.log()));
        let open = u64::try_from(partitions.len().max(1)).unwrap_or(u64::MAX);
        for p in partitions.values() {
            p.log()
                .set_preallocate_step(PREALLOCATION_SHARD_BYTES / open);
        }
    }

    /// The settings of `topic`'s partitions: the broker defaults with the topic's stored
    /// overrides. Overrides were validated before they were stored; should one no longer
    /// resolve (a data directory from another version), the defaults apply and we say so.
    pub fn topic_log_config(&self, topic: &str) -> LogConfig {
        let meta = self.metadata.snapshot();
        let defaults = meta
            .broker_defaults(&self.config.log, self.config.node_id)
            .effective();
        let mut config = match meta.topic(topic) {
            None => defaults,
            Some(t) => crate::topic_config::resolve(&defaults, &t.configs).unwrap_or_else(|e| {
                tracing::warn!(topic, error = %e, "stored topic config does not resolve; using broker defaults");
                defaults.clone()
            }),
        };
        if topic == OFFSETS_TOPIC {
            // The group coordinator's state is the latest record per key: compacted,
            // never deleted by age.
            config.segment_bytes = self.config.groups.offsets_segment_bytes;
            config.cleanup = corelog_storage::config::CleanupPolicy {
                delete: false,
                compact: true,
            };
        }
        config
    }

    /// Re-resolves the config of every partition on this shard (after a dynamic broker
    /// config changed the defaults they inherit).
    pub(crate) fn apply_all_topic_configs(&self) {
        let topics: std::collections::BTreeSet<Arc<str>> = self
            .partitions
            .borrow()
            .keys()
            .map(|tp| tp.topic.clone())
            .collect();
        for topic in topics {
            self.apply_topic_config(&topic);
        }
    }

    /// Re-resolves the config of `topic`'s partitions on this shard (after AlterConfigs).
    pub(crate) fn apply_topic_config(&self, topic: &str) {
        let config = self.topic_log_config(topic);
        for (tp, log) in self.partitions.borrow().iter() {
            if &*tp.topic == topic {
                log.log().set_config(config.clone());
            }
        }
    }

    /// `wanted` without the partitions the metadata places, for this broker, in a
    /// directory marked in `offline`.
    fn outside_failed_dirs(
        &self,
        topic: &str,
        mut wanted: Vec<TopicPartition>,
        offline: &[bool],
    ) -> Vec<TopicPartition> {
        let failed_ids: Vec<uuid::Uuid> = self
            .config
            .log_dir_ids
            .iter()
            .zip(offline)
            .filter(|(_, off)| **off)
            .map(|(id, _)| *id)
            .collect();
        if failed_ids.is_empty() {
            return wanted;
        }
        let meta = self.metadata.snapshot();
        wanted.retain(|tp| {
            !meta
                .partition(topic, tp.partition)
                .and_then(|p| p.directories.get(&self.config.node_id))
                .is_some_and(|d| failed_ids.contains(d))
        });
        wanted
    }

    /// Stops what runs on `tp` beside its log: its fetcher, and the coordinator or
    /// share partitions it carries.
    pub(crate) fn unload_partition(&self, tp: &TopicPartition) {
        self.fetchers.remove(tp);
        let p = tp.partition;
        if &*tp.topic == OFFSETS_TOPIC {
            self.groups.unload_partition(p);
        }
        if &*tp.topic == crate::txn::TRANSACTION_TOPIC {
            self.txns.unload_partition(p);
        }
        self.share_leader.unload(tp);
        if &*tp.topic == crate::share::coordinator::SHARE_STATE_TOPIC {
            self.share_state.unload_partition(p);
        }
    }

    pub(crate) async fn drop_partitions(&self, topic: Arc<str>, partitions: Vec<i32>) {
        let _permit = self.admin_lock.acquire_permit(1).await;
        for p in partitions {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition: p,
            };
            let removed = self.partitions.borrow_mut().remove(&tp);
            self.share_tail_cache();
            self.unload_partition(&tp);
            if let Some(log) = removed {
                log.close().await;
            }
            // The directory is first renamed away (as Kafka does), so that background
            // work still holding the old path, or a topic created again under the same
            // name, can never touch the other's files; then it is removed. Readers still
            // holding the log keep their open files.
            let log_dirs = self.config.log_dirs.clone();
            let name = topic.to_string();
            let removal = glommio::executor()
                .spawn_blocking(move || {
                    for dir in crate::log_dirs::holding(&log_dirs, &name, p) {
                        let doomed = crate::metadata::deleted_dir_name(&dir);
                        std::fs::rename(&dir, &doomed)?;
                        std::fs::remove_dir_all(&doomed)?;
                    }
                    Ok::<(), std::io::Error>(())
                })
                .await;
            if let Err(e) = removal {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(topic = %topic, partition = p, error = %e, "removing a deleted partition's directory; retried at the next start");
                }
            }
        }
    }
}

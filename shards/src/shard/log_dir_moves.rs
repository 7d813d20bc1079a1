//! Moving a replica between this broker's log directories while it serves (Kafka's
//! AlterReplicaLogDirs): the partition's directory is copied in paced passes
//! (`dir_copy`) while the log keeps taking appends; once a pass has little left to
//! copy, the log is closed for the last pass — requests to it meanwhile are refused
//! with retriable errors, acknowledged records are all synced and so in the copy — and
//! reopened from its new directory with the role the metadata gives it. Its owner shard
//! stays the same (a partition's shard does not depend on its directory), so no data
//! crosses cores.
//!
//! A replica not yet on this broker keeps the directory asked for (`preferred`) and is
//! created there when the metadata gives it to this broker, as Kafka does for the
//! replicas a reassignment adds.
//!
//! Invariants: at most one move per partition, and a new request for another directory
//! replaces the one in progress; the last pass and the swap run under the admin lock, so
//! no reconciliation opens, drops or changes the role of the partition meanwhile; a move
//! whose partition was dropped or reopened meanwhile is given up and its copy removed.

use super::Shard;
use crate::dir_copy::DirCopy;
use crate::mesh::{PartitionError, TopicPartition};
use crate::replication_throttle::{configured_rate_of, LOG_DIR_MOVE_RATE};
use corelog_partition::Partition;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A pass that wrote less than this is followed by the last one, with the log closed.
const LAST_PASS_BELOW_BYTES: u64 = 4 << 20;
/// Passes before the last one at most, however much each still finds to copy.
const PASSES_MAX: usize = 30;

/// A move in progress, as DescribeLogDirs shows it (Kafka's future replica).
pub struct Move {
    /// The destination, an index into `log.dirs`.
    pub dest: usize,
    /// Bytes of the copy so far.
    pub copied: Arc<AtomicU64>,
    cancelled: Arc<AtomicBool>,
}

impl Move {
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }
}

impl Shard {
    /// AlterReplicaLogDirs for one partition: moves it to directory `dest` of `log.dirs`
    /// (nothing when it is there), or, for a replica not on this broker yet, records the
    /// directory for when it is created and answers REPLICA_NOT_AVAILABLE (Kafka's
    /// answer; the tools retry).
    pub(crate) fn alter_log_dir(
        self: &Rc<Self>,
        tp: TopicPartition,
        dest: usize,
    ) -> Result<(), PartitionError> {
        debug_assert!(dest < self.config.log_dirs.len());
        let Some(log) = self.partition(&tp) else {
            self.preferred_dirs.borrow_mut().insert(tp, dest);
            return Err(PartitionError::ReplicaNotAvailable);
        };
        if self.in_failed_dir(&log) {
            return Err(PartitionError::Read(corelog_storage::ReadError::Storage(
                corelog_storage::StorageError::new(
                    log.dir().display(),
                    "its log directory is offline",
                ),
            )));
        }
        if let Some(m) = self.moves.borrow().get(&tp) {
            if m.dest == dest {
                return Ok(());
            }
            m.cancel();
        }
        self.moves.borrow_mut().remove(&tp);
        if self.log_dir_index(&log) == Some(dest) {
            return Ok(());
        }
        let m = Move {
            dest,
            copied: Arc::new(AtomicU64::new(0)),
            cancelled: Arc::new(AtomicBool::new(false)),
        };
        let (copied, cancelled) = (m.copied.clone(), m.cancelled.clone());
        self.moves.borrow_mut().insert(tp.clone(), m);
        tracing::info!(topic = %tp.topic, partition = tp.partition, from = %log.dir().display(), to = %self.config.log_dirs[dest].display(), "moving a replica to another log directory");
        let shard = self.clone();
        glommio::spawn_local(async move {
            let outcome = shard.run_move(&tp, &log, dest, copied, cancelled.clone()).await;
            if let Err(e) = outcome {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "moving a replica to another log directory failed; it stays where it was");
            }
            let mut moves = shard.moves.borrow_mut();
            if moves.get(&tp).is_some_and(|m| Arc::ptr_eq(&m.cancelled, &cancelled)) {
                moves.remove(&tp);
            }
        })
        .detach();
        Ok(())
    }

    /// The directory AlterReplicaLogDirs asked for `tp` before it was created here, if
    /// any (taken: it applies once).
    pub(crate) fn take_preferred_dir(&self, tp: &TopicPartition) -> Option<usize> {
        self.preferred_dirs.borrow_mut().remove(tp)
    }

    async fn run_move(
        self: &Rc<Self>,
        tp: &TopicPartition,
        log: &Rc<Partition>,
        dest: usize,
        copied: Arc<AtomicU64>,
        cancelled: Arc<AtomicBool>,
    ) -> Result<(), String> {
        let mut copy = DirCopy::new(log.dir(), &self.config.log_dirs[dest]);
        let gone = |copy: &DirCopy| {
            copy.discard();
            Ok(())
        };
        let mut passes = 0;
        loop {
            if cancelled.load(Ordering::Acquire) {
                return gone(&copy);
            }
            let meta = self.metadata.snapshot();
            let rate =
                configured_rate_of(&meta.broker_configs, self.config.node_id, LOG_DIR_MOVE_RATE);
            let written;
            (copy, written) = self.copy_pass(copy, rate, &copied).await;
            let written = match written {
                Ok(n) => n,
                Err(e) => {
                    copy.discard();
                    return Err(format!("copying {}: {e}", log.dir().display()));
                }
            };
            passes += 1;
            if written < LAST_PASS_BELOW_BYTES || passes >= PASSES_MAX {
                break;
            }
        }
        let _permit = self.admin_lock.acquire_permit(1).await;
        let still = self.partition(tp).is_some_and(|p| Rc::ptr_eq(&p, log));
        if cancelled.load(Ordering::Acquire) || !still || self.in_failed_dir(log) {
            return gone(&copy);
        }
        let high_watermark = log.high_watermark();
        let config = log.log().config();
        self.partitions.borrow_mut().remove(tp);
        self.unload_partition(tp);
        log.close().await;
        let src = log.dir().to_path_buf();
        let doomed = crate::metadata::deleted_dir_name(&src);
        let (copy, swapped) = glommio::executor()
            .spawn_blocking(move || {
                let r = copy
                    .pass(&mut |_| {})
                    .and_then(|_| copy.seal())
                    .and_then(|()| copy.swap_in(&doomed));
                (copy, r.map(|at| (at, doomed)))
            })
            .await;
        copied.store(copy.copied_bytes(), Ordering::Release);
        // Opened where it now is: the new directory, or (the swap failed) the old one.
        let (dir, result) = match swapped {
            Ok((at, doomed)) => {
                glommio::executor()
                    .spawn_blocking(move || std::fs::remove_dir_all(doomed))
                    .await
                    .map_err(|e| tracing::warn!(error = %e, "removing a moved replica's old directory; removed at the next start"))
                    .ok();
                (at, Ok(()))
            }
            Err(e) => {
                copy.discard();
                (src, Err(format!("the last pass: {e}")))
            }
        };
        let reopened = Partition::open_replica(
            dir.clone(),
            config,
            self.storage_context.clone(),
            high_watermark,
        )
        .await
        .map_err(|e| format!("reopening {}: {e}", dir.display()))?;
        self.partitions
            .borrow_mut()
            .insert(tp.clone(), reopened.clone());
        self.share_tail_cache();
        if let Some(state) = self.metadata.snapshot().partition(&tp.topic, tp.partition) {
            self.apply_role(tp, &reopened, state)
                .map_err(|e| format!("taking up its role again: {e}"))?;
        }
        drop(_permit);
        if result.is_ok() {
            tracing::info!(topic = %tp.topic, partition = tp.partition, dir = %dir.display(), "replica moved to another log directory");
            self.report_directories();
        }
        result
    }

    /// One paced pass of `copy` on the blocking pool.
    async fn copy_pass(
        &self,
        mut copy: DirCopy,
        rate: Option<u64>,
        copied: &Arc<AtomicU64>,
    ) -> (DirCopy, std::io::Result<u64>) {
        let throttles = self.throttles.clone();
        let progress = copied.clone();
        glommio::executor()
            .spawn_blocking(move || {
                let base = copy.copied_bytes();
                let done = Cell::new(0u64);
                let r = copy.pass(&mut |n| {
                    done.set(done.get() + n);
                    progress.store(base + done.get(), Ordering::Release);
                    if let Some(rate) = rate {
                        let wait = throttles.log_dir_move(rate, n, Instant::now());
                        if !wait.is_zero() {
                            std::thread::sleep(wait);
                        }
                    }
                });
                progress.store(copy.copied_bytes(), Ordering::Release);
                (copy, r)
            })
            .await
    }
}

//! One partition as a replica sees it: its log, its role (leader or follower, as the
//! metadata says), the leader epoch, the leader-epoch cache, the high watermark and the
//! offsets a reader may see.
//!
//! Offsets, in the order they may never pass one another:
//! `log_start_offset <= high_watermark <= durable end <= written_offset <= log_end_offset`,
//! and `last_stable_offset <= high_watermark`: held back to the first offset of the
//! earliest transaction that is open, or whose marker is not below the high watermark
//! yet (`corelog_storage::producer_state`). The *durable end* is what this replica acknowledges as its own: the synced
//! offset under `ack-all` and `always`, the written offset under `interval`.
//!
//! The high watermark only grows (a truncation below it, after an unclean election, is
//! the one exception, and reopens the partition). A leader raises it to the bound its
//! [`ReplicaSet`] allows: the smallest durable end over the ISR, its own included, while
//! the ISR holds at least `min.insync.replicas`. A lone leader's bound is its own durable
//! end. A follower takes the leader's, capped by its own durable end.
//!
//! Invariants: consumers read only below the high watermark (or the last stable offset
//! for `read_committed`), followers of this leader up to the written end; every batch a
//! leader appends is stamped with the current leader epoch, and that epoch is in the
//! cache, starting at or before the batch; a follower's cache follows the epochs of the
//! batches it appends, never its own; a request naming a leader epoch other than the
//! current one is refused before it touches the log; only a leader appends produced
//! records, only a follower replicated ones.
//!
//! One module per job, each an `impl Partition` block over the state defined here:
//! `role` (the leader or follower role and the leader epochs: taking up a role, checking
//! a request's epoch, the epoch cache and its checkpoint), `high_watermark` (the durable
//! end, the high watermark, and a leader's followers and ISR: fetches recorded, ISR
//! expansion and shrink), `append` (a leader's and a follower's appends, and waiting for
//! their acknowledgement), `read` (reads for consumers and followers, waiting for data,
//! ListOffsets lookups), `retention` (DeleteRecords, a follower's log start and
//! retention, with the epochs below the log start dropped) and `truncate` (a follower's
//! log cut to follow its leader's, and the partition opened again). Here: the state,
//! opening, the log underneath and closing.

mod append;
mod high_watermark;
mod read;
mod retention;
mod role;
mod truncate;

pub use append::AckError;
pub use high_watermark::{FollowerFetch, IsrProposal};
pub use read::{
    FoundOffset, Isolation, PartitionRead, Reader, EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
};
pub use role::EpochError;
pub use truncate::Cut;

use crate::leader_epoch_cache::{LeaderEpochCache, CHECKPOINT_FILE};
use crate::replica_set::{Assignment, ReplicaSet};
use corelog_storage::error::StorageError;
use corelog_storage::{LogConfig, LogContext, PartitionLog};
use event_listener::Event;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;

/// This replica's part in the partition, as the metadata last said.
#[derive(Debug, Clone)]
enum Role {
    /// Opened, its role not yet given: it serves nothing.
    Unassigned,
    Leader(ReplicaSet),
    /// Fetches from `leader` (-1: the partition has no leader now).
    Follower {
        leader: i32,
    },
}

pub struct Partition {
    log: Rc<PartitionLog>,
    dir: PathBuf,
    /// The clock the log runs on (follower lag is measured with it).
    context: LogContext,
    leader_epoch: Cell<i32>,
    /// Never borrowed across an `.await`.
    role: RefCell<Role>,
    high_watermark: Cell<i64>,
    /// Fired when the high watermark grows, the role or ISR changes, and at close: what
    /// acks=all and consumers of a replicated partition wait on beyond the log's own
    /// progress.
    hw_moved: Event,
    /// Never borrowed across an `.await`.
    epochs: RefCell<LeaderEpochCache>,
    /// Serialises checkpoint writes, so the file always holds the newest cache.
    checkpoint_writes: glommio::sync::Semaphore,
    /// The cache changed (at open, or when this replica took up an epoch) and is not yet
    /// in its checkpoint: the first append writes it, holding the log's writes until it
    /// is durable ([`Partition::append`]), so an idle partition writes nothing.
    epochs_unpersisted: Cell<bool>,
}

impl Partition {
    /// Opens the log in `dir` and leads it alone in `leader_epoch` (a partition no other
    /// broker replicates; `leader` names this broker).
    pub async fn open(
        dir: PathBuf,
        config: LogConfig,
        context: LogContext,
        leader: i32,
        leader_epoch: i32,
    ) -> Result<Rc<Partition>, StorageError> {
        let partition = Partition::open_replica(dir, config, context, -1).await?;
        if let Err(e) = partition.become_leader(leader_epoch, leader, Assignment::alone(leader)) {
            partition.log.close().await;
            return Err(e);
        }
        Ok(partition)
    }

    /// Opens the log in `dir` and its leader-epoch cache, and drops cache entries past the
    /// recovered log end or below the log start. The partition serves nothing until the
    /// metadata gives it a role ([`Self::become_leader`], [`Self::become_follower`]).
    /// `high_watermark` is the checkpointed one (-1: none), held within the log.
    pub async fn open_replica(
        dir: PathBuf,
        config: LogConfig,
        context: LogContext,
        high_watermark: i64,
    ) -> Result<Rc<Partition>, StorageError> {
        let log = PartitionLog::open(dir.clone(), config, context.clone()).await?;
        let path = dir.join(CHECKPOINT_FILE);
        let mut epochs = match context.files.disk().fs().read_to_string(&path) {
            Ok(text) => match LeaderEpochCache::decode(&text) {
                Ok(c) => c,
                Err(e) => {
                    log.close().await;
                    return Err(StorageError::new(path.display(), e));
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => LeaderEpochCache::default(),
            Err(e) => {
                log.close().await;
                return Err(StorageError::new(path.display(), e));
            }
        };
        let mut changed = epochs.truncate_from_end(log.written_offset());
        changed |= epochs.truncate_from_start(log.log_start_offset());
        let high_watermark = high_watermark.clamp(log.log_start_offset(), log.written_offset());
        Ok(Rc::new(Partition {
            log,
            dir,
            context,
            leader_epoch: Cell::new(-1),
            role: RefCell::new(Role::Unassigned),
            high_watermark: Cell::new(high_watermark),
            hw_moved: Event::new(),
            epochs: RefCell::new(epochs),
            checkpoint_writes: glommio::sync::Semaphore::new(1),
            // Not written now: thousands of partitions would each replace a file (a new
            // inode and two syncs) at every start. Nothing depends on the file before a
            // batch is written after the change.
            epochs_unpersisted: Cell::new(changed),
        }))
    }

    /// The log underneath, for what works on segments directly (compaction, sizes,
    /// producer state, tail-cache and preallocation budgets).
    pub fn log(&self) -> &Rc<PartitionLog> {
        &self.log
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// The next offset to be assigned.
    pub fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }

    pub async fn close(&self) {
        self.log.close().await;
        self.hw_moved.notify(usize::MAX);
    }
}

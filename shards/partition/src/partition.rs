//! One partition as a replica sees it: its log, the leader epoch it is led in, the
//! leader-epoch cache, and the offsets a reader may see.
//!
//! Offsets, in the order they may never pass one another:
//! `log_start_offset <= high_watermark <= written_offset <= log_end_offset`, with
//! `last_stable_offset == high_watermark` (no transactions are served, so none holds it
//! back). On one node the high watermark is what the durability setting acknowledges:
//! the synced offset under `ack-all` and `always`, the written offset under `interval`.
//! A cluster will lower it to what every in-sync replica holds; nothing above this layer
//! needs to change for that.
//!
//! Invariants: consumers read only below the high watermark (or the last stable offset
//! for `read_committed`); every batch appended is stamped with the current leader epoch,
//! and that epoch is in the cache, starting at or before the batch; a request naming a
//! leader epoch other than the current one is refused before it touches the log.

use crate::leader_epoch_cache::{LeaderEpochCache, CHECKPOINT_FILE};
use bytes::Bytes;
use corelog_storage::error::{AppendError, ReadError, StorageError};
use corelog_storage::{
    AckLevel, AppendTicket, Durability, LogConfig, LogContext, PartitionLog, Records,
};
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

/// ListOffsets' special timestamps (Kafka's `ListOffsetsRequest` constants).
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// The record with the largest timestamp (v7+, KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;
/// The first offset in local storage (v8+, KIP-1005).
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// The last offset in tiered storage (v9+, KIP-1005).
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// Which records a consumer may see (Fetch and ListOffsets `isolation_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Below the high watermark.
    #[default]
    ReadUncommitted,
    /// Below the last stable offset.
    ReadCommitted,
}

impl Isolation {
    /// Kafka's wire value: 1 is `read_committed`, anything else `read_uncommitted`.
    pub fn from_wire(value: i8) -> Isolation {
        if value == 1 {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        }
    }
}

/// A request's `current_leader_epoch` against this partition's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    /// The request's epoch is older: the client's metadata is stale (FENCED_LEADER_EPOCH).
    #[error("leader epoch {requested} is older than the current {current}")]
    Fenced { requested: i32, current: i32 },
    /// The request's epoch is newer than this replica knows (UNKNOWN_LEADER_EPOCH).
    #[error("leader epoch {requested} is newer than the current {current}")]
    Unknown { requested: i32, current: i32 },
}

/// What a consumer's read returns.
#[derive(Debug, Clone)]
pub struct PartitionRead<R = Bytes> {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Whole batches, starting with the one containing the requested offset, all below
    /// the isolation level's bound; empty when the log diverged. `Bytes`, or for a read
    /// to send (`read_for_send`) `Records`, which may be a range of a segment file.
    pub records: R,
    /// Where the fetcher's log diverges from this one (Fetch v12+ `diverging_epoch`):
    /// the epoch and end offset it should truncate to before fetching again.
    pub diverging_epoch: Option<(i32, i64)>,
}

/// An offset a ListOffsets lookup found: the offset, the timestamp it was found by (-1
/// for the special lookups) and the leader epoch of the record there (-1 if unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundOffset {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

impl FoundOffset {
    /// Kafka's answer when no record matches.
    pub const NONE: FoundOffset = FoundOffset {
        offset: -1,
        timestamp: -1,
        leader_epoch: -1,
    };
}

pub struct Partition {
    log: Rc<PartitionLog>,
    dir: PathBuf,
    leader_epoch: Cell<i32>,
    /// Never borrowed across an `.await`.
    epochs: RefCell<LeaderEpochCache>,
    /// Serialises checkpoint writes, so the file always holds the newest cache.
    checkpoint_writes: glommio::sync::Semaphore,
    /// The cache changed at open and is not yet in its checkpoint: the first append
    /// writes it, holding the log's writes until it is durable ([`Partition::append`]),
    /// so an idle partition writes nothing at start-up.
    epochs_unpersisted: Cell<bool>,
}

impl Partition {
    /// Opens the log in `dir` and its leader-epoch cache, drops cache entries past the
    /// recovered log end or below the log start, and becomes leader in `leader_epoch`
    /// from the log end.
    pub async fn open(
        dir: PathBuf,
        config: LogConfig,
        context: LogContext,
        leader_epoch: i32,
    ) -> Result<Rc<Partition>, StorageError> {
        let log = PartitionLog::open(dir.clone(), config, context).await?;
        let path = dir.join(CHECKPOINT_FILE);
        let mut epochs = match std::fs::read_to_string(&path) {
            Ok(text) => {
                LeaderEpochCache::decode(&text).map_err(|e| StorageError::new(path.display(), e))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => LeaderEpochCache::default(),
            Err(e) => return Err(StorageError::new(path.display(), e)),
        };
        let mut changed = epochs.truncate_from_end(log.written_offset());
        changed |= epochs.truncate_from_start(log.log_start_offset());
        if let Some(latest) = epochs.latest().filter(|l| l.epoch > leader_epoch) {
            // Batches exist stamped with a newer epoch than the one clients will be told:
            // leading in the older one would fence every up-to-date client.
            log.close().await;
            return Err(StorageError::new(
                path.display(),
                format!(
                    "the partition holds leader epoch {} but is to lead in older epoch {leader_epoch}",
                    latest.epoch
                ),
            ));
        }
        let partition = Rc::new(Partition {
            log,
            dir,
            leader_epoch: Cell::new(leader_epoch),
            epochs: RefCell::new(epochs),
            checkpoint_writes: glommio::sync::Semaphore::new(1),
            epochs_unpersisted: Cell::new(false),
        });
        changed |= partition.assign_current_epoch();
        // Not written now: thousands of partitions would each replace a file (a new inode
        // and two syncs) at every start. Nothing depends on the file before a batch is
        // stamped with the new epoch, and a crash before that starts yet another epoch.
        partition.epochs_unpersisted.set(changed);
        Ok(partition)
    }

    /// The log underneath, for what works on segments directly (compaction, sizes,
    /// producer state, tail-cache and preallocation budgets).
    pub fn log(&self) -> &Rc<PartitionLog> {
        &self.log
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.get()
    }

    /// Becomes leader in a newer epoch (from the log end). An older or equal epoch is
    /// ignored.
    pub async fn set_leader_epoch(&self, epoch: i32) -> Result<(), StorageError> {
        if epoch <= self.leader_epoch.get() {
            return Ok(());
        }
        self.leader_epoch.set(epoch);
        if self.assign_current_epoch() {
            self.persist_epochs().await?;
        }
        Ok(())
    }

    /// A copy of the leader-epoch cache.
    pub fn epoch_cache(&self) -> LeaderEpochCache {
        self.epochs.borrow().clone()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// The next offset to be assigned.
    pub fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }

    /// What consumers may read up to (exclusive); see the module documentation.
    pub fn high_watermark(&self) -> i64 {
        if self.hw_is_synced() {
            self.log.synced_offset()
        } else {
            self.log.written_offset()
        }
    }

    /// Equal to the high watermark: no open transaction holds it back.
    pub fn last_stable_offset(&self) -> i64 {
        self.high_watermark()
    }

    fn hw_is_synced(&self) -> bool {
        self.log.durability() != Durability::Interval
    }

    fn bound(&self, isolation: Isolation) -> i64 {
        match isolation {
            Isolation::ReadUncommitted => self.high_watermark(),
            Isolation::ReadCommitted => self.last_stable_offset(),
        }
    }

    /// Checks a request's `current_leader_epoch` (-1: not given, always accepted).
    pub fn check_leader_epoch(&self, requested: i32) -> Result<(), EpochError> {
        let current = self.leader_epoch.get();
        match requested {
            r if r < 0 || r == current => Ok(()),
            r if r < current => Err(EpochError::Fenced {
                requested: r,
                current,
            }),
            r => Err(EpochError::Unknown {
                requested: r,
                current,
            }),
        }
    }

    /// Validates and queues `records`, stamped with the current leader epoch.
    /// Appends batches stamped with the current epoch. The first append after the epoch
    /// cache changed at open starts writing its checkpoint and holds the log's writes
    /// until it is durable: no batch of the new epoch reaches the file before the cache
    /// that names the epoch does, and appends stay synchronous, so their order is the
    /// order they arrived in. Should the checkpoint fail, the log fails with it.
    pub fn append(self: &Rc<Self>, records: &[u8]) -> Result<AppendTicket, AppendError> {
        if self.epochs_unpersisted.replace(false) {
            let hold = self.log.hold_writes();
            let partition = self.clone();
            glommio::spawn_local(async move {
                if let Err(e) = partition.persist_epochs().await {
                    partition.log.fail_with(e); // logged there, with the path
                }
                drop(hold);
            })
            .detach();
        }
        debug_assert!(
            self.epochs
                .borrow()
                .latest()
                .is_some_and(|e| e.epoch == self.leader_epoch.get()),
            "the current epoch is in the cache before anything is stamped with it"
        );
        self.log.append(records, self.leader_epoch.get())
    }

    /// Waits for an append per `acks`; acks=all returns once the high watermark covers it.
    pub async fn wait(&self, ticket: AppendTicket, level: AckLevel) -> Result<(), AppendError> {
        self.log.wait(ticket, level).await
    }

    /// A consumer's read: whole batches from `offset`, below the isolation level's bound.
    ///
    /// With `last_fetched_epoch` (the epoch of the last batch the fetcher holds; -1: not
    /// given) the fetcher's log is checked first, as Kafka's `Partition.readRecords`: if
    /// that epoch ended here before `offset`, or this log never had it, nothing is read
    /// and the divergence is answered instead; an epoch whose end is unknown is out of
    /// range.
    pub async fn read(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<PartitionRead, ReadError> {
        let read = self
            .read_records(offset, last_fetched_epoch, max_bytes, isolation, false)
            .await?;
        let Records::Memory(records) = read.records else {
            unreachable!("only a read for sending answers with a file range");
        };
        Ok(PartitionRead {
            high_watermark: read.high_watermark,
            last_stable_offset: read.last_stable_offset,
            log_start_offset: read.log_start_offset,
            records,
            diverging_epoch: read.diverging_epoch,
        })
    }

    /// [`Self::read`] for records that go to a socket: data read from a segment file
    /// may come as a range of it (`corelog_storage::FileRange`), sent without a copy.
    pub async fn read_for_send(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<PartitionRead<Records>, ReadError> {
        self.read_records(offset, last_fetched_epoch, max_bytes, isolation, true)
            .await
    }

    async fn read_records(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        isolation: Isolation,
        for_send: bool,
    ) -> Result<PartitionRead<Records>, ReadError> {
        if last_fetched_epoch >= 0 {
            let (epoch, end) = self.end_offset_for_epoch(last_fetched_epoch);
            if epoch == crate::UNDEFINED_EPOCH || end == crate::UNDEFINED_OFFSET {
                return Err(ReadError::OffsetOutOfRange {
                    offset,
                    log_start_offset: self.log_start_offset(),
                    end_offset: self.log.written_offset(),
                });
            }
            if epoch < last_fetched_epoch || end < offset {
                let high_watermark = self.high_watermark();
                return Ok(PartitionRead {
                    high_watermark,
                    last_stable_offset: high_watermark,
                    log_start_offset: self.log_start_offset(),
                    records: Records::default(),
                    diverging_epoch: Some((epoch, end)),
                });
            }
        }
        let bound = self.bound(isolation);
        let (end_offset, log_start_offset, records) = if for_send {
            self.log.read_for_send(offset, max_bytes, bound).await?
        } else {
            let read = self.log.read(offset, max_bytes, bound).await?;
            (
                read.end_offset,
                read.log_start_offset,
                Records::Memory(read.records),
            )
        };
        // Read after the log: it only grows, and covers everything returned.
        let high_watermark = self.high_watermark().max(end_offset);
        Ok(PartitionRead {
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset,
            records,
            diverging_epoch: None,
        })
    }

    /// Waits until a consumer at `offset` has something to read (the high watermark
    /// passes it), the log closes, or `deadline`.
    pub async fn wait_beyond(&self, offset: i64, deadline: Instant) {
        self.log
            .wait_beyond(offset, deadline, self.hw_is_synced())
            .await
    }

    /// Where leader epoch `epoch` ended (OffsetForLeaderEpoch): `(epoch, end offset)`
    /// as the cache answers it against the written log end, or `(-1, -1)`.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.epochs
            .borrow()
            .end_offset_for(epoch, self.log.written_offset())
    }

    /// ListOffsets: `timestamp` is a time in ms or one of the special `*_TIMESTAMP`
    /// values. Only offsets below the isolation level's bound are found.
    pub async fn find_offset(
        &self,
        timestamp: i64,
        isolation: Isolation,
    ) -> Result<FoundOffset, ReadError> {
        let bound = self.bound(isolation);
        let epoch_at = |offset: i64| self.epochs.borrow().epoch_for_offset(offset).unwrap_or(-1);
        let found = |(offset, ts): (i64, i64)| FoundOffset {
            offset,
            timestamp: ts,
            leader_epoch: epoch_at(offset),
        };
        // With no tiered storage the local log is the whole log: "earliest local" is the
        // log start and nothing is tiered.
        Ok(match timestamp {
            LATEST_TIMESTAMP => FoundOffset {
                offset: bound,
                timestamp: -1,
                leader_epoch: self.leader_epoch.get(),
            },
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => found((self.log_start_offset(), -1)),
            LATEST_TIERED_TIMESTAMP => FoundOffset::NONE,
            MAX_TIMESTAMP => self
                .log
                .offset_of_max_timestamp()
                .await?
                .filter(|(offset, _)| *offset < bound)
                .map(found)
                .unwrap_or(FoundOffset::NONE),
            ts => self
                .log
                .offset_for_timestamp(ts)
                .await?
                .filter(|(offset, _)| *offset < bound)
                .map(found)
                .unwrap_or(FoundOffset::NONE),
        })
    }

    /// DeleteRecords: moves the log start to `offset` (-1: the high watermark; past it is
    /// out of range) and drops the epochs wholly below it. Returns the new log start.
    pub async fn delete_records(&self, offset: i64) -> Result<i64, ReadError> {
        let start = self
            .log
            .delete_records(offset, self.high_watermark())
            .await?;
        self.start_moved().await?;
        Ok(start)
    }

    /// Retention (time and size) of the log, then the epochs it left behind. Returns the
    /// number of segments deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<usize, StorageError> {
        let deleted = self.log.enforce_retention(now_ms).await;
        if deleted > 0 {
            self.start_moved().await?;
        }
        Ok(deleted)
    }

    pub async fn close(&self) {
        self.log.close().await
    }

    async fn start_moved(&self) -> Result<(), StorageError> {
        let changed = self
            .epochs
            .borrow_mut()
            .truncate_from_start(self.log.log_start_offset());
        if changed {
            self.persist_epochs().await?;
        }
        Ok(())
    }

    /// Puts the current epoch in the cache, starting at the log end (Kafka's
    /// `maybeAssignEpochStartOffset` when a replica becomes leader).
    fn assign_current_epoch(&self) -> bool {
        // Everything queued before this point belongs to the previous epoch.
        let start = self.log.log_end_offset();
        self.epochs
            .borrow_mut()
            .assign(self.leader_epoch.get(), start)
    }

    /// Writes the cache's current state to its checkpoint file, off the reactor.
    async fn persist_epochs(&self) -> Result<(), StorageError> {
        let _one_at_a_time = self.checkpoint_writes.acquire_permit(1).await;
        // Taken after the permit: a later change is never overwritten by an older one.
        let text = self.epochs.borrow().encode();
        let dir = self.dir.clone();
        glommio::executor()
            .spawn_blocking(move || {
                corelog_storage::checkpoint::replace_file(&dir, CHECKPOINT_FILE, text.as_bytes())
            })
            .await
            .map_err(|e| StorageError::new(self.dir.join(CHECKPOINT_FILE).display(), e))
    }
}

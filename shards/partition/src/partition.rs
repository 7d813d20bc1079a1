//! One partition as a replica sees it: its log, its role (leader or follower, as the
//! metadata says), the leader epoch, the leader-epoch cache, the high watermark and the
//! offsets a reader may see.
//!
//! Offsets, in the order they may never pass one another:
//! `log_start_offset <= high_watermark <= durable end <= written_offset <= log_end_offset`,
//! with `last_stable_offset == high_watermark` (no transactions are served, so none holds
//! it back). The *durable end* is what this replica acknowledges as its own: the synced
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

use crate::leader_epoch_cache::{LeaderEpochCache, CHECKPOINT_FILE};
use crate::replica_set::{Assignment, ReplicaSet};
use bytes::Bytes;
use corelog_storage::error::{AppendError, ReadError, StorageError};
use corelog_storage::{
    AckLevel, AppendTicket, Durability, LogConfig, LogContext, PartitionLog, Records,
};
use event_listener::Event;
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

/// How a follower's log is cut to follow its leader's ([`Partition::truncate_and_reopen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Everything from this offset on (a batch boundary) goes.
    Tail(i64),
    /// Everything goes; the log starts, empty, at `new_start`.
    Everything { new_start: i64 },
}

/// Who reads, which bounds what it may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A consumer: below the high watermark, or the last stable offset.
    Consumer(Isolation),
    /// A follower replica of this leader: up to the written end.
    Replica,
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

/// Why an acks=all produce was not acknowledged once appended.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AckError {
    #[error(transparent)]
    Append(#[from] AppendError),
    /// This replica stopped leading before the ISR had the records.
    #[error("no longer the leader")]
    NotLeader,
    /// The ISR shrank below `min.insync.replicas` after the append: the records may be
    /// committed, or may wait (the high watermark does not move while the ISR is that
    /// small) until the ISR grows back.
    #[error("the ISR shrank below min.insync.replicas after the append")]
    NotEnoughReplicasAfterAppend,
}

/// An ISR change a leader wants the controller to commit (AlterPartition), with the
/// epochs it was computed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// A follower's fetch as the leader records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowerFetch {
    /// Recorded; `Some` when the follower should join the ISR (already marked proposed).
    Recorded(Option<IsrProposal>),
    /// This replica does not lead the partition.
    NotLeader,
    /// The fetching broker holds no replica of the partition.
    UnknownReplica,
}

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
        let mut epochs = match std::fs::read_to_string(&path) {
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

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.get()
    }

    /// This broker (`leader`) leads the partition in `epoch` with `assignment`: in a
    /// newer epoch (or after another role) from the log end, its followers known only by
    /// what they fetch from now on; in the current epoch, it takes up the newer ISR and
    /// replica list. An older epoch is ignored. Refused when the log holds batches of a
    /// newer epoch than `epoch`: leading in the older one would fence every up-to-date
    /// client.
    pub fn become_leader(
        &self,
        epoch: i32,
        leader: i32,
        assignment: Assignment,
    ) -> Result<(), StorageError> {
        let current = self.leader_epoch.get();
        if epoch < current {
            return Ok(());
        }
        if epoch == current {
            if let Role::Leader(set) = &mut *self.role.borrow_mut() {
                set.update(assignment, self.context.now_ms());
                self.hw_moved.notify(usize::MAX);
                return Ok(());
            }
        }
        if let Some(latest) = self.epochs.borrow().latest().filter(|l| l.epoch > epoch) {
            return Err(StorageError::new(
                self.dir.join(CHECKPOINT_FILE).display(),
                format!(
                    "the partition holds leader epoch {} but is to lead in older epoch {epoch}",
                    latest.epoch
                ),
            ));
        }
        self.leader_epoch.set(epoch);
        *self.role.borrow_mut() =
            Role::Leader(ReplicaSet::new(leader, assignment, self.context.now_ms()));
        if self.assign_current_epoch() {
            self.epochs_unpersisted.set(true);
        }
        self.hw_moved.notify(usize::MAX);
        Ok(())
    }

    /// Follows `leader` (-1: none now) in `epoch`; an older epoch is ignored. Produces
    /// waiting for acknowledgement as leader are answered NOT_LEADER_OR_FOLLOWER.
    pub fn become_follower(&self, leader: i32, epoch: i32) {
        if epoch < self.leader_epoch.get() {
            return;
        }
        self.leader_epoch.set(epoch);
        *self.role.borrow_mut() = Role::Follower { leader };
        self.hw_moved.notify(usize::MAX);
    }

    pub fn is_leader(&self) -> bool {
        matches!(*self.role.borrow(), Role::Leader(_))
    }

    /// The broker this replica follows, if it is a follower.
    pub fn following(&self) -> Option<i32> {
        match *self.role.borrow() {
            Role::Follower { leader } => Some(leader),
            _ => None,
        }
    }

    /// The leader's view of its replicas; `None` unless leader.
    pub fn replica_set(&self) -> Option<ReplicaSet> {
        match &*self.role.borrow() {
            Role::Leader(set) => Some(set.clone()),
            _ => None,
        }
    }

    /// The partition epoch of the state this leader took up; `None` unless leader.
    pub fn partition_epoch(&self) -> Option<i32> {
        match &*self.role.borrow() {
            Role::Leader(set) => Some(set.partition_epoch()),
            _ => None,
        }
    }

    /// Whether `replica` is in the committed ISR as the leader knows it (false unless
    /// leader).
    pub fn in_isr(&self, replica: i32) -> bool {
        match &*self.role.borrow() {
            Role::Leader(set) => set.isr().contains(&replica),
            _ => false,
        }
    }

    /// The committed ISR's size as the leader knows it (0 unless leader).
    pub fn isr_len(&self) -> usize {
        match &*self.role.borrow() {
            Role::Leader(set) => set.isr().len(),
            _ => 0,
        }
    }

    /// `min.insync.replicas` of the topic, as a count.
    pub fn min_insync_replicas(&self) -> usize {
        usize::try_from(self.log.min_insync_replicas())
            .unwrap_or(1)
            .max(1)
    }

    /// A copy of the leader-epoch cache.
    pub fn epoch_cache(&self) -> LeaderEpochCache {
        self.epochs.borrow().clone()
    }

    /// The newest epoch of a batch this replica holds (or took up as leader); -1 if none.
    pub fn latest_epoch(&self) -> i32 {
        self.epochs.borrow().latest().map_or(-1, |e| e.epoch)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// The next offset to be assigned.
    pub fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }

    /// What this replica acknowledges as its own: see the module documentation.
    pub fn durable_end(&self) -> i64 {
        if self.hw_is_synced() {
            self.log.synced_offset()
        } else {
            self.log.written_offset()
        }
    }

    /// What consumers may read up to (exclusive): a leader first raises it to what its
    /// ISR allows now (see the module documentation).
    pub fn high_watermark(&self) -> i64 {
        if let Role::Leader(set) = &*self.role.borrow() {
            let bound = set.high_watermark_bound(self.durable_end(), self.min_insync_replicas());
            if let Some(bound) = bound.filter(|b| *b > self.high_watermark.get()) {
                self.high_watermark.set(bound);
                self.hw_moved.notify(usize::MAX);
            }
        }
        self.high_watermark.get()
    }

    /// A follower takes up its leader's high watermark, capped by what it holds itself.
    pub fn follow_high_watermark(&self, leader_high_watermark: i64) {
        let hw = leader_high_watermark.min(self.durable_end());
        if hw > self.high_watermark.get() {
            self.high_watermark.set(hw);
            self.hw_moved.notify(usize::MAX);
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

    /// Records a fetch by follower `replica` at `fetch_offset` (a read that did not
    /// diverge: a diverging follower's offset says nothing of what it shares with this
    /// log), raises the high watermark, and proposes the follower's return to the ISR
    /// once it holds everything committed and the current epoch's start. `eligible` is
    /// asked only then: the metadata version if the broker may join an ISR (registered
    /// and active), `None` if not.
    pub fn record_follower_fetch(
        &self,
        replica: i32,
        fetch_offset: i64,
        eligible: impl FnOnce() -> Option<u64>,
    ) -> FollowerFetch {
        let now = self.context.now_ms();
        let leader_end = self.log.log_end_offset();
        {
            let mut role = self.role.borrow_mut();
            let Role::Leader(set) = &mut *role else {
                return FollowerFetch::NotLeader;
            };
            if !set.record_fetch(replica, fetch_offset, leader_end, now) {
                return FollowerFetch::UnknownReplica;
            }
        }
        let hw = self.high_watermark();
        let epoch = self.leader_epoch.get();
        let epoch_start = self
            .epochs
            .borrow()
            .entries()
            .iter()
            .rev()
            .find(|e| e.epoch == epoch)
            .map_or(i64::MAX, |e| e.start_offset);
        let mut role = self.role.borrow_mut();
        let Role::Leader(set) = &mut *role else {
            return FollowerFetch::NotLeader;
        };
        let Some(isr) = set.expansion(replica, hw, epoch_start) else {
            return FollowerFetch::Recorded(None);
        };
        match eligible() {
            Some(version) if set.may_propose(version) => {
                set.propose(isr.clone());
                FollowerFetch::Recorded(Some(IsrProposal {
                    leader_epoch: epoch,
                    partition_epoch: set.partition_epoch(),
                    isr,
                }))
            }
            _ => FollowerFetch::Recorded(None),
        }
    }

    /// The ISR without the followers that have not caught up for `lag_ms`, marked
    /// proposed; `None` when nobody lags, a change is in flight, this is no leader, or
    /// the controller refused a proposal at `metadata_version` already.
    pub fn isr_shrink(&self, lag_ms: i64, metadata_version: u64) -> Option<IsrProposal> {
        let now = self.context.now_ms();
        let epoch = self.leader_epoch.get();
        let mut role = self.role.borrow_mut();
        let Role::Leader(set) = &mut *role else {
            return None;
        };
        if !set.may_propose(metadata_version) {
            return None;
        }
        let isr = set.shrink(now, lag_ms)?;
        set.propose(isr.clone());
        Some(IsrProposal {
            leader_epoch: epoch,
            partition_epoch: set.partition_epoch(),
            isr,
        })
    }

    /// The proposed ISR change was lost (not answered); the committed ISR stands.
    pub fn isr_proposal_failed(&self) {
        if let Role::Leader(set) = &mut *self.role.borrow_mut() {
            set.proposal_failed();
        }
    }

    /// The controller refused the proposed ISR change at metadata `version`; the
    /// committed ISR stands and nothing is proposed again until newer metadata.
    pub fn isr_proposal_refused(&self, version: u64) {
        if let Role::Leader(set) = &mut *self.role.borrow_mut() {
            set.proposal_refused(version);
        }
    }

    /// Validates and queues `records`, stamped with the current leader epoch.
    /// Appends batches stamped with the current epoch. The first append after the epoch
    /// cache changed starts writing its checkpoint and holds the log's writes until it is
    /// durable: no batch of the new epoch reaches the file before the cache that names
    /// the epoch does, and appends stay synchronous, so their order is the order they
    /// arrived in. Should the checkpoint fail, the log fails with it; should it find the
    /// filesystem full, it is tried again, and appends are refused meanwhile.
    pub fn append(self: &Rc<Self>, records: &[u8]) -> Result<AppendTicket, AppendError> {
        debug_assert!(self.is_leader(), "only a leader appends produced records");
        self.persist_epochs_before_writes();
        debug_assert!(
            self.epochs
                .borrow()
                .latest()
                .is_some_and(|e| e.epoch == self.leader_epoch.get()),
            "the current epoch is in the cache before anything is stamped with it"
        );
        self.log.append(records, self.leader_epoch.get())
    }

    /// Appends batches fetched from the leader as they are (offsets and epochs kept). An
    /// epoch newer than the cache's latest starts at its first batch here, as it did on
    /// the leader, and the checkpoint naming it is durable before the batch is written.
    pub fn append_as_follower(
        self: &Rc<Self>,
        records: &[u8],
    ) -> Result<AppendTicket, AppendError> {
        debug_assert!(
            self.following().is_some(),
            "only a follower appends replicated records"
        );
        let ticket = self.log.append_replicated(records)?;
        // Synchronous with the append: the flusher cannot write the batches before the
        // hold below is taken.
        {
            let mut epochs = self.epochs.borrow_mut();
            for item in corelog_storage::batch::batches(records) {
                let Ok((header, _)) = item else {
                    break; // a trailing partial batch: not appended either
                };
                if header.base_offset >= ticket.next_offset {
                    break;
                }
                if epochs.assign(header.partition_leader_epoch, header.base_offset) {
                    self.epochs_unpersisted.set(true);
                }
            }
        }
        self.persist_epochs_before_writes();
        Ok(ticket)
    }

    /// When the cache is not yet durable, starts writing it and holds the log's writes
    /// until it is.
    fn persist_epochs_before_writes(self: &Rc<Self>) {
        if !self.epochs_unpersisted.replace(false) {
            return;
        }
        let hold = self.log.hold_writes();
        let partition = self.clone();
        glommio::spawn_local(async move {
            // A full filesystem is waited out as the log's own writes wait it out: new
            // appends are refused meanwhile, and what is queued is written once the
            // checkpoint is. Any other error fails the log.
            loop {
                let Err(e) = partition.persist_epochs().await else {
                    partition.log.space_again();
                    break;
                };
                if let Err(e) = partition.log.retry_or_fail(e).await {
                    partition.log.fail_with(e); // logged there, with the path
                    break;
                }
            }
            drop(hold);
        })
        .detach();
    }

    /// Waits for an append per `acks`: acks=1 once written here.
    pub async fn wait(&self, ticket: AppendTicket, level: AckLevel) -> Result<(), AppendError> {
        self.log.wait(ticket, level).await
    }

    /// Waits until an acks=all produce is committed: durable here, and the high watermark
    /// past it (every ISR member holds it). Fails when this replica stops leading first,
    /// and with NOT_ENOUGH_REPLICAS_AFTER_APPEND as soon as the ISR is below
    /// `min.insync.replicas`, committed or not: Kafka answers so once the high watermark
    /// passes, and here the high watermark stands still while the ISR is that small, so
    /// the producer hears it now instead of at its timeout (it retries; an idempotent
    /// retry is answered with these offsets once they are committed).
    pub async fn wait_committed(&self, ticket: AppendTicket) -> Result<(), AckError> {
        self.log.wait(ticket, AckLevel::All).await?;
        loop {
            let listener = self.hw_moved.listen();
            if !self.is_leader() {
                return Err(AckError::NotLeader);
            }
            // Checked first: the ISR that committed the records may since have shrunk.
            if self.isr_len() < self.min_insync_replicas() {
                return Err(AckError::NotEnoughReplicasAfterAppend);
            }
            if self.high_watermark() >= ticket.next_offset {
                return Ok(());
            }
            if let Some(e) = self.log.failure() {
                return Err(AppendError::Storage(e).into());
            }
            if self.log.is_closing() {
                return Err(AppendError::Closed.into());
            }
            listener.await;
        }
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
        self.read_as(
            offset,
            last_fetched_epoch,
            max_bytes,
            Reader::Consumer(isolation),
        )
        .await
    }

    /// [`Self::read`] for `reader`: `Reader::Replica` reads to the written end (what a
    /// new leader replays of its own log).
    pub async fn read_as(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        reader: Reader,
    ) -> Result<PartitionRead, ReadError> {
        let read = self
            .read_records(offset, last_fetched_epoch, max_bytes, reader, false)
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
    /// A follower's read (`Reader::Replica`) goes up to the written end.
    pub async fn read_for_send(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        reader: Reader,
    ) -> Result<PartitionRead<Records>, ReadError> {
        self.read_records(offset, last_fetched_epoch, max_bytes, reader, true)
            .await
    }

    async fn read_records(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        reader: Reader,
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
        let bound = match reader {
            Reader::Consumer(isolation) => self.bound(isolation),
            Reader::Replica => self.log.written_offset(),
        };
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
        // Read after the log: it only grows, and for a consumer covers everything returned.
        let high_watermark = match reader {
            Reader::Consumer(_) => self.high_watermark().max(end_offset),
            Reader::Replica => self.high_watermark(),
        };
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
        // This replica's own progress first; beyond it only followers move the mark.
        self.log
            .wait_beyond(offset, deadline, self.hw_is_synced())
            .await;
        loop {
            let listener = self.hw_moved.listen();
            if self.high_watermark() > offset || self.log.is_closing() {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let timeout = glommio::timer::sleep(deadline - now);
            futures_lite::future::or(listener, timeout).await;
        }
    }

    /// Waits until a follower at `offset` has something to fetch (the written end passes
    /// it), the log closes, or `deadline`.
    pub async fn wait_beyond_log_end(&self, offset: i64, deadline: Instant) {
        self.log.wait_beyond(offset, deadline, false).await
    }

    /// Cuts this follower's log (`Cut::Tail`: its divergent tail, found with leader
    /// epochs, at a batch boundary; `Cut::Everything`: all of it, when it ends below the
    /// leader's log start) and opens it again: the log closes, its files are cut
    /// (`PartitionLog::truncate_closed` / `reset_closed`, which also drop the producer
    /// snapshots past the cut, so producer state is rebuilt from what remains), and the
    /// partition returned takes this one's place, following the same leader in the same
    /// epoch, with the epochs past the cut dropped and the high watermark no higher than
    /// the new end. Whoever still holds this one finds it closed.
    pub async fn truncate_and_reopen(&self, cut: Cut) -> Result<Rc<Partition>, StorageError> {
        debug_assert!(!self.is_leader(), "a leader's log is never cut");
        let config = self.log.config();
        // The flusher finishes first, and with it a pending write of the epoch cache.
        self.close().await;
        let dir = self.dir.clone();
        let outcome = glommio::executor()
            .spawn_blocking(move || match cut {
                Cut::Tail(offset) => PartitionLog::truncate_closed(&dir, offset),
                Cut::Everything { new_start } => PartitionLog::reset_closed(&dir, new_start),
            })
            .await?;
        tracing::info!(dir = %self.dir.display(), ?cut, ?outcome, "log cut to follow its leader's");
        let high_watermark = match cut {
            Cut::Tail(_) => self.high_watermark.get().min(outcome.log_end_offset),
            // open_replica holds it within the new, empty log.
            Cut::Everything { new_start } => new_start,
        };
        let reopened = Partition::open_replica(
            self.dir.clone(),
            config,
            self.context.clone(),
            high_watermark,
        )
        .await?;
        reopened.become_follower(self.following().unwrap_or(-1), self.leader_epoch.get());
        Ok(reopened)
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

    /// A follower takes up its leader's log start (Kafka's follower does so from every
    /// fetch response), capped by its own high watermark: what the leader deleted by
    /// retention or DeleteRecords goes here too, and a follower that becomes leader
    /// serves none of it. Nothing to do when the log already starts there.
    pub async fn follow_log_start(&self, leader_log_start: i64) -> Result<(), ReadError> {
        let target = leader_log_start.min(self.high_watermark());
        if target <= self.log_start_offset() {
            return Ok(());
        }
        self.delete_records(target).await.map(|_| ())
    }

    /// Retention (time and size) of the log, never past the high watermark, then the
    /// epochs it left behind. Returns the number of segments deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<usize, StorageError> {
        let deleted = self
            .log
            .enforce_retention(now_ms, self.high_watermark())
            .await;
        if deleted > 0 {
            self.start_moved().await?;
        }
        Ok(deleted)
    }

    pub async fn close(&self) {
        self.log.close().await;
        self.hw_moved.notify(usize::MAX);
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
        let faults = self.log.files().faults().cloned();
        glommio::executor()
            .spawn_blocking(move || {
                if let Some(faults) = faults {
                    faults.replacing(&dir.join(CHECKPOINT_FILE))?;
                }
                corelog_storage::checkpoint::replace_file(&dir, CHECKPOINT_FILE, text.as_bytes())
            })
            .await
            .map_err(|e| StorageError::io(self.dir.join(CHECKPOINT_FILE).display(), &e))
    }
}

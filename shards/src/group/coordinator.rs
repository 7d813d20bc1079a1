//! A shard's group coordinator: the groups whose `__consumer_offsets` partition this
//! shard owns, their persistence and their timers.
//!
//! Every operation is: look up (or create) the group, run the synchronous state machine
//! (`state.rs`), and — for commits, stable generations and deletions — append records to
//! the group's `__consumer_offsets` partition on this same shard and wait for them to be
//! durable (acks=all) before answering. Join and sync answers that must wait for other
//! members arrive through oneshot channels the state machine completes.
//!
//! The coordinator serves the groups of the `__consumer_offsets` partitions this broker
//! leads. When it becomes a partition's leader it replays the partition from its start
//! to its log end (`load_partition`): offset records (and their tombstones) rebuild
//! committed offsets, those of transactional batches pending until their producer's
//! marker; group records bring the group back as it was last stored — Stable with its
//! members, generation and assignments, each member's session starting at the load, as
//! Kafka's coordinator restores it — so live members go on heartbeating and committing
//! without a rebalance, and dead ones expire. When it stops leading one, its groups
//! are forgotten (`unload_partition`). Until a partition is loaded its groups are
//! answered COORDINATOR_NOT_AVAILABLE (retriable).
//!
//! Invariants: a group is only touched on its coordinator shard, and only while its
//! partition is loaded (or being loaded); no `RefCell` borrow is held across an
//! `.await`; an answer to a commit means its records are committed (on every in-sync
//! replica, synced).
//!
//! Transactions (TxnOffsetCommit, Kafka's `OffsetMetadataManager`): a transactional
//! commit is written as one transactional batch with the producer's id and epoch
//! (`Partition::append_unsequenced`: the epoch checked, no client sequence), and its
//! offsets are pending for that producer in that group from the moment the batch has
//! its offset — synchronously with the append, so the producer's marker, which the log
//! orders after it, always finds them. The marker's acknowledgement
//! (`complete_transaction`, from the shard's WriteTxnMarkers path) commits or drops
//! those written before it; the replay at load does the same with the markers it
//! reads, and leaves a transaction still open at the end pending. `txn_groups` indexes
//! the groups with a transaction open per producer, so a marker touches only those:
//! it holds every (producer, group) pair with a `pending_txn` entry, and maybe stale
//! names of groups since deleted (skipped).
//!
//! `__consumer_offsets` is a compacted topic: the log cleaner keeps the latest record of
//! every key (group metadata, each committed offset) and drops tombstones after
//! `delete.retention.ms`, so replay from the log start stays complete and short. It
//! cleans nothing at or past the partition's first unstable offset and removes the
//! records of aborted transactions, keeping every marker
//! (`corelog_storage::compaction::cleaner`), so a replay never meets an aborted or
//! undecided offset where the committed one it superseded used to be.
//!
//! Offset retention (`expire_offsets`): a group Empty for `offsets.retention.minutes`
//! loses the offsets not committed within that time (KIP-211). The Empty clock is
//! monotonic and starts again at a restart, so a restart can only lengthen retention.

mod share;
pub use share::SHARE_PROTOCOL_TYPE;

use super::consumer::group::{
    Changes, ClassicJoin, ConsumerGroup, ConsumerGroupConfig, Heartbeat, HeartbeatAnswer,
    TopicCatalog, LEAVE_GROUP_MEMBER_EPOCH,
};
use super::consumer::overrides;
use super::consumer::records::{self as consumer_rec, ClassicProtocol};
use super::offsets_record::{self as rec, GroupValue, MemberValue, OffsetValue, RecordKey};
use super::share::group::{ShareGroup, ShareGroupConfig};
use super::state::{Group, GroupState, SESSION_TIMEOUT_MS_MAX, SESSION_TIMEOUT_MS_MIN};
use super::types::*;
use super::{partition_for_group, OFFSETS_TOPIC};
use crate::coordinator_log::{skip_record, NewerRecord, ReplayError};
use crate::routing::TopicPartition;
use bytes::Bytes;
use corelog_partition::{AckError, Partition};
use corelog_storage::batch;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::producer_state::SequenceError;
use corelog_storage::{txn_marker, AppendError, AppendTicket};
use futures::channel::oneshot;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Kafka's `offset.metadata.max.bytes` default.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub offsets_partitions: i32,
    /// Kafka's `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay: Duration,
    /// Segment size of `__consumer_offsets` partitions (Kafka's
    /// `offsets.topic.segment.bytes`, 100 MiB). Compaction frees whole segments.
    pub offsets_segment_bytes: u64,
    /// Committed offsets of a group that has been Empty this long, and that were not
    /// committed within it, expire (Kafka's `offsets.retention.minutes`, 7 days).
    pub offsets_retention: Duration,
    /// Consumer-protocol groups (KIP-848): `group.consumer.*`.
    pub consumer: ConsumerGroupConfig,
    /// Share groups (KIP-932): `group.share.*`.
    pub share: ShareGroupConfig,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            offsets_partitions: super::OFFSETS_TOPIC_PARTITIONS_DEFAULT,
            initial_rebalance_delay: Duration::from_millis(3000),
            offsets_segment_bytes: 100 << 20,
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            consumer: ConsumerGroupConfig::default(),
            share: ShareGroupConfig::default(),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub struct GroupCoordinator {
    config: GroupConfig,
    groups: RefCell<HashMap<String, Group>>,
    /// Share groups (`share.rs`), by id: no id is in both maps.
    shares: RefCell<HashMap<String, ShareGroup>>,
    /// The partitions whose groups are loaded.
    loaded: RefCell<HashSet<i32>>,
    /// Bumped at every load and unload of a partition: a load that finds it moved was
    /// overtaken and undoes itself.
    generations: RefCell<HashMap<i32, u64>>,
    /// Producer id → the groups where it has a transaction open (see the module doc).
    txn_groups: RefCell<HashMap<i64, BTreeSet<String>>>,
    /// The zero of consumer groups' millisecond clock (monotonic).
    started: Instant,
    /// Groups a timer changed protocols (a downgrade), with the batch that records it,
    /// until `store_consumer_changes` writes it.
    migrated: RefCell<HashMap<String, Vec<KeyedRecord>>>,
}

/// One record: (key, value or tombstone).
type KeyedRecord = (Vec<u8>, Option<Vec<u8>>);
/// Records for one batch.
type KeyedRecords = [KeyedRecord];

/// The protocol type of consumer groups (ListGroups, DescribeGroups).
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// What a timer round left to store (see [`GroupCoordinator::tick`]).
#[derive(Debug, Default)]
pub struct Ticked {
    pub emptied: Vec<String>,
    pub consumer_changed: Vec<String>,
    pub share_changed: Vec<String>,
}

/// Encodes consumer-group records for a batch.
fn encode_consumer_records(
    records: Vec<(consumer_rec::RecordKey, Option<consumer_rec::RecordValue>)>,
) -> Result<Vec<KeyedRecord>, GroupError> {
    records
        .into_iter()
        .map(|(k, v)| {
            let key = consumer_rec::encode_key(&k)
                .map_err(|_| GroupError::TooLong("a group or member id"))?;
            Ok((key, v.as_ref().map(consumer_rec::encode_value)))
        })
        .collect()
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> GroupCoordinator {
        GroupCoordinator {
            config,
            groups: RefCell::new(HashMap::new()),
            shares: RefCell::new(HashMap::new()),
            loaded: RefCell::new(HashSet::new()),
            generations: RefCell::new(HashMap::new()),
            txn_groups: RefCell::new(HashMap::new()),
            started: Instant::now(),
            migrated: RefCell::new(HashMap::new()),
        }
    }

    /// Consumer groups' clock: monotonic milliseconds since this coordinator started.
    fn mono_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn offsets_partition(&self, group: &str) -> i32 {
        partition_for_group(group, self.config.offsets_partitions)
    }

    /// The committed offsets of this shard's classic and consumer groups (KIP-848), for
    /// the consumer-lag metric: whole groups in name order while their offsets add up to
    /// at most `max`, and how many groups with offsets were left out. Pending
    /// transactional commits are not committed yet and are not listed; nor are share
    /// groups, whose progress is their share partitions' state, not committed offsets.
    /// Called at a metrics scrape, never on a request's path.
    pub fn committed_offsets(&self, max: usize) -> corelog_metrics::GroupOffsets {
        let groups = self.groups.borrow();
        let mut names: Vec<&String> = groups
            .iter()
            .filter(|(_, g)| !g.offsets.is_empty())
            .map(|(name, _)| name)
            .collect();
        names.sort_unstable();
        let mut out = corelog_metrics::GroupOffsets::default();
        for name in names {
            let Some(group) = groups.get(name) else {
                continue;
            };
            if out.offsets.len() + group.offsets.len() > max {
                out.groups_omitted += 1;
                continue;
            }
            out.offsets
                .extend(group.offsets.iter().filter(|(_, c)| c.offset >= 0).map(
                    |((topic, partition), c)| corelog_metrics::GroupOffset {
                        group: name.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                        committed: c.offset,
                    },
                ));
        }
        out
    }

    fn next_generation(&self, partition: i32) -> u64 {
        let mut generations = self.generations.borrow_mut();
        let g = generations.entry(partition).or_insert(0);
        *g += 1;
        *g
    }

    /// Replays `__consumer_offsets` partition `partition` (`log`, which this broker now
    /// leads) to its log end: what the previous leader wrote is committed as soon as the
    /// followers confirm it, and this leader's view must include it. The end is the
    /// written end when the replay gets there, not when it started: a marker written
    /// meanwhile (WriteTxnMarkers is served while the partition loads) is replayed too,
    /// and one written after is completed by its acknowledgement — either way no
    /// transaction's offsets stay pending past their marker.
    ///
    /// A transactional batch's records are pending for its producer until a marker of
    /// that producer commits or aborts them; control batches that are not transaction
    /// markers are skipped.
    pub async fn load_partition(&self, partition: i32, log: Rc<Partition>) {
        let generation = self.next_generation(partition);
        let mut records = 0usize;
        let replayed = crate::coordinator_log::replay(
            &log,
            || log.log_end_offset(),
            |h, bytes| {
                if h.is_control() {
                    if let Some((kind, _)) = txn_marker::parse(h, bytes) {
                        self.complete_transaction(
                            partition,
                            h.producer_id,
                            kind.is_commit(),
                            h.base_offset,
                        );
                    }
                    return Ok(());
                }
                let producer = h.is_transactional().then_some(h.producer_id);
                for r in batch::records(bytes).unwrap_or_default() {
                    records += 1;
                    self.apply(r.key, r.value, r.offset, producer)?;
                }
                Ok(())
            },
        )
        .await;
        match replayed {
            Ok(()) => {}
            Err(ReplayError::Read(e)) => {
                tracing::error!(partition, error = %e, "reading __consumer_offsets; groups of this partition start empty");
            }
            Err(ReplayError::Newer(e)) => {
                // Serving what was read so far would answer from a misread state: the
                // partition's groups stay unavailable (COORDINATOR_NOT_AVAILABLE).
                tracing::error!(
                    partition = %format!("{OFFSETS_TOPIC}-{partition}"),
                    error = %e,
                    "refusing to coordinate this partition's groups: run the release that wrote it"
                );
                self.forget_partition(partition);
                return;
            }
        }
        if self.generations.borrow().get(&partition) != Some(&generation) {
            // Unloaded (or loaded again) meanwhile: what this replay added is not ours.
            self.forget_partition(partition);
            return;
        }
        let now = self.mono_ms();
        let n = self.config.offsets_partitions;
        for (id, g) in self.groups.borrow_mut().iter_mut() {
            if let Some(c) = g
                .consumer
                .as_mut()
                .filter(|_| partition_for_group(id, n) == partition)
            {
                c.finish_restore(now, &self.config.consumer);
            }
        }
        self.finish_share_restore(partition);
        self.loaded.borrow_mut().insert(partition);
        tracing::debug!(
            partition,
            records,
            groups = self.groups.borrow().len(),
            "group coordinator loaded a partition"
        );
    }

    /// This broker no longer leads `partition`: its groups go, their waiting joins and
    /// syncs answered NOT_COORDINATOR (their members find the new coordinator).
    pub fn unload_partition(&self, partition: i32) {
        self.next_generation(partition);
        if self.loaded.borrow_mut().remove(&partition) {
            self.forget_partition(partition);
            tracing::debug!(partition, "group coordinator unloaded a partition");
        }
    }

    fn forget_partition(&self, partition: i32) {
        let n = self.config.offsets_partitions;
        self.groups.borrow_mut().retain(|id, g| {
            let keep = partition_for_group(id, n) != partition;
            if !keep {
                g.unload();
            }
            keep
        });
        self.forget_share_groups(partition);
        // Their pending offsets went with them.
        self.txn_groups.borrow_mut().retain(|_, groups| {
            groups.retain(|g| partition_for_group(g, n) != partition);
            !groups.is_empty()
        });
    }

    /// Producer `producer_id`'s transaction ended with the marker at `marker_offset` of
    /// `__consumer_offsets` partition `partition` (acknowledged, or read by a replay):
    /// in the partition's groups, its pending offsets written before the marker become
    /// committed (`commit`) or vanish. A marker for a producer with nothing pending
    /// (already completed, or a retry of the coordinator's) changes nothing.
    pub fn complete_transaction(
        &self,
        partition: i32,
        producer_id: i64,
        commit: bool,
        marker_offset: i64,
    ) {
        let n = self.config.offsets_partitions;
        let mut index = self.txn_groups.borrow_mut();
        let Some(names) = index.get_mut(&producer_id) else {
            return;
        };
        let mut groups = self.groups.borrow_mut();
        let mut completed = 0usize;
        names.retain(|name| {
            if partition_for_group(name, n) != partition {
                return true; // its own partition's marker ends it there
            }
            completed += 1;
            // A group deleted meanwhile has nothing left to complete.
            groups
                .get_mut(name)
                .is_some_and(|g| g.complete_txn(producer_id, commit, marker_offset))
        });
        if names.is_empty() {
            index.remove(&producer_id);
        }
        tracing::debug!(
            partition,
            producer_id,
            commit,
            marker_offset,
            groups = completed,
            "transaction ended in the group coordinator"
        );
    }

    /// Records a pending transactional offset and indexes it.
    fn put_pending(
        &self,
        groups: &mut HashMap<String, Group>,
        group: &str,
        producer_id: i64,
        key: (String, i32),
        c: Committed,
    ) {
        groups
            .entry(group.to_string())
            .or_insert_with(|| Group::new(group.to_string()))
            .put_pending(producer_id, key, c);
        self.txn_groups
            .borrow_mut()
            .entry(producer_id)
            .or_default()
            .insert(group.to_string());
    }

    fn serves(&self, op: &GroupOp) -> bool {
        op.group().is_none_or(|g| self.serves_group(g))
    }

    /// Whether this shard coordinates `group` (its offsets partition is loaded here).
    pub fn serves_group(&self, group: &str) -> bool {
        self.loaded
            .borrow()
            .contains(&self.offsets_partition(group))
    }

    /// Replays one record at `record_offset`; `producer` names the producer of a
    /// transactional batch, whose offsets are pending until its marker. A record of a
    /// type or version newer than this release reads is refused; one that does not
    /// decode otherwise is skipped with a warning (a keyless record, which no release
    /// writes, silently).
    fn apply(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        record_offset: i64,
        producer: Option<i64>,
    ) -> Result<(), NewerRecord> {
        let Some(key) = key else { return Ok(()) };
        if consumer_rec::is_consumer_key(key) {
            return self.apply_consumer(key, value, record_offset);
        }
        if super::share::records::is_share_key(key) {
            return self.apply_share(key, value, record_offset);
        }
        let key = match rec::decode_key(key) {
            Ok(k) => k,
            Err(e) => return skip_offsets_record(e, record_offset),
        };
        let mut groups = self.groups.borrow_mut();
        match key {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => match value.map(rec::decode_offset_value) {
                Some(Ok(v)) => {
                    let c = Committed {
                        offset: v.offset,
                        leader_epoch: v.leader_epoch,
                        metadata: v.metadata,
                        commit_timestamp_ms: v.commit_timestamp_ms,
                        record_offset,
                    };
                    match producer {
                        Some(pid) => {
                            self.put_pending(&mut groups, &group, pid, (topic, partition), c)
                        }
                        None => {
                            groups
                                .entry(group.clone())
                                .or_insert_with(|| Group::new(group))
                                .put_committed((topic, partition), c);
                        }
                    }
                }
                Some(Err(e)) => return skip_offsets_record(e, record_offset),
                None => {
                    if let Some(g) = groups.get_mut(&group) {
                        g.apply_tombstone(&(topic, partition), record_offset);
                    }
                }
            },
            RecordKey::GroupMetadata { group } => match value.map(rec::decode_group_value) {
                Some(Ok(v)) => {
                    let g = groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(group));
                    // Records come in log order: the last one is the group, a classic
                    // one now (a downgraded consumer group's records were deleted
                    // before it).
                    g.consumer = None;
                    g.restore(v, Instant::now());
                }
                Some(Err(e)) => return skip_offsets_record(e, record_offset),
                None => {
                    // Offsets live on independently of the group record (as in Kafka):
                    // a group tombstone forgets the group only when none are left,
                    // pending ones included. Its classic members go either way (the
                    // group was deleted, or upgraded: its consumer records follow).
                    if groups
                        .get(&group)
                        .is_some_and(|g| !g.has_offsets() && g.consumer.is_none())
                    {
                        groups.remove(&group);
                    } else if let Some(g) = groups.get_mut(&group) {
                        g.forget_members(GroupError::NotCoordinator);
                        if g.consumer.is_none() {
                            g.protocol_type = None;
                        }
                    }
                }
            },
        }
        Ok(())
    }

    /// Serves one operation. `log_of` finds this shard's `__consumer_offsets` partition;
    /// `topics` is the cluster's topics, for consumer-protocol groups.
    pub async fn handle(
        &self,
        op: GroupOp,
        topics: &impl TopicCatalog,
        log_of: impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> GroupAnswer {
        if !self.serves(&op) {
            return refused(op, GroupError::CoordinatorNotAvailable);
        }
        // Refused before anything changes: a string the group's records cannot hold
        // would otherwise fail their encoding after the group had moved on.
        if let Err(e) = op.check_storable() {
            return refused(op, e);
        }
        if let Some(answer) = self.refuse_share_group(&op) {
            return answer;
        }
        let now = Instant::now();
        match op {
            GroupOp::Join(req) => {
                if req.group.is_empty() {
                    return GroupAnswer::Join(JoinAnswer::error(
                        GroupError::InvalidGroupId,
                        req.member_id,
                    ));
                }
                let joins_consumer_group = self
                    .groups
                    .borrow()
                    .get(&req.group)
                    .and_then(|g| g.consumer.as_ref())
                    .is_some_and(|c| !c.is_empty());
                if joins_consumer_group {
                    return GroupAnswer::Join(self.join_consumer_group(req, topics, &log_of).await);
                }
                let (tx, rx) = oneshot::channel();
                let group = req.group.clone();
                let dropped_consumer_records = {
                    let mut groups = self.groups.borrow_mut();
                    let g = groups
                        .entry(req.group.clone())
                        .or_insert_with(|| Group::new(req.group.clone()));
                    // An empty consumer-protocol group becomes a classic group when a
                    // classic member joins, and its consumer records are deleted (after
                    // the join is in, so no heartbeat takes the group back meanwhile).
                    let mut dropped = Vec::new();
                    if let Some(c) = &g.consumer {
                        dropped = c.tombstones();
                        g.consumer = None;
                        g.protocol_type = None;
                    }
                    g.join(req, now, self.config.initial_rebalance_delay, tx);
                    dropped
                };
                if !dropped_consumer_records.is_empty() {
                    let stored = match encode_consumer_records(dropped_consumer_records) {
                        Ok(t) => self.append(&group, &t, &log_of).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = stored {
                        tracing::warn!(group = %group, error = %e, "deleting the records of a consumer group that became classic");
                    }
                }
                // A waiter dropped unanswered went with its group: this broker no
                // longer coordinates it.
                let answer = rx.await.unwrap_or_else(|_| {
                    JoinAnswer::error(GroupError::NotCoordinator, String::new())
                });
                GroupAnswer::Join(answer)
            }
            GroupOp::Sync(req) => {
                let synced = self
                    .groups
                    .borrow_mut()
                    .get_mut(&req.group)
                    .and_then(|g| g.consumer.as_mut())
                    .map(|c| {
                        c.classic_sync(
                            &req.member_id,
                            req.group_instance_id.as_deref(),
                            req.generation,
                            (req.protocol_type.as_deref(), req.protocol_name.as_deref()),
                            self.mono_ms(),
                        )
                    });
                if let Some(synced) = synced {
                    return GroupAnswer::Sync(match synced {
                        Ok((protocol, assignment)) => SyncAnswer {
                            error: None,
                            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
                            protocol_name: Some(protocol),
                            assignment: Bytes::from(assignment),
                        },
                        Err(e) => SyncAnswer::error(e),
                    });
                }
                let group = req.group.clone();
                let (tx, rx) = oneshot::channel();
                let stable = {
                    let mut groups = self.groups.borrow_mut();
                    match groups.get_mut(&req.group) {
                        Some(g) => g.sync(req, now, tx),
                        None => {
                            let _ = tx.send(SyncAnswer::error(GroupError::UnknownMemberId));
                            false
                        }
                    }
                };
                if stable {
                    // Kafka stores the group (with its assignments) as it becomes stable.
                    if let Err(e) = self.persist_group(&group, &log_of).await {
                        tracing::warn!(group = %group, error = %e, "storing group metadata");
                    }
                }
                GroupAnswer::Sync(
                    rx.await
                        .unwrap_or_else(|_| SyncAnswer::error(GroupError::NotCoordinator)),
                )
            }
            GroupOp::Heartbeat(req) => {
                let mut groups = self.groups.borrow_mut();
                GroupAnswer::Done(match groups.get_mut(&req.group) {
                    Some(Group {
                        consumer: Some(c), ..
                    }) => c.classic_heartbeat(
                        &req.member_id,
                        req.group_instance_id.as_deref(),
                        req.generation,
                        self.mono_ms(),
                    ),
                    Some(g) => g.heartbeat(&req, now),
                    None => Err(GroupError::UnknownMemberId),
                })
            }
            GroupOp::Leave { group, members } => {
                let of_consumer_group = self
                    .groups
                    .borrow()
                    .get(&group)
                    .is_some_and(|g| g.consumer.is_some());
                if of_consumer_group {
                    return GroupAnswer::Leave(
                        self.leave_consumer_group(&group, &members, &log_of).await,
                    );
                }
                let (answer, emptied) = {
                    let mut groups = self.groups.borrow_mut();
                    match groups.get_mut(&group) {
                        Some(g) => {
                            let had_members = !g.is_empty();
                            let left = g.leave(&members, now);
                            (Ok(left), had_members && g.is_empty())
                        }
                        None => (Err(GroupError::UnknownMemberId), false),
                    }
                };
                if emptied {
                    self.store_emptied(vec![group], &log_of).await;
                }
                GroupAnswer::Leave(answer)
            }
            GroupOp::Commit(req) => GroupAnswer::Commit(self.commit(req, &log_of).await),
            GroupOp::TxnCommit(req) => GroupAnswer::Commit(self.txn_commit(req, &log_of).await),
            GroupOp::FetchOffsets {
                group,
                topics,
                require_stable,
                member,
            } => {
                let groups = self.groups.borrow();
                let Some(g) = groups.get(&group) else {
                    // Unknown group: every asked partition has no committed offset.
                    let out = topics
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p, Ok(None))))
                        .collect();
                    return GroupAnswer::Offsets(Ok(out));
                };
                // Kafka's `ConsumerGroup.validateOffsetFetch`: a member fetching names
                // itself at its epoch (classic groups do not check).
                if let (Some((member_id, epoch)), Some(c)) = (&member, &g.consumer) {
                    if let Err(e) = c.check_fetch(member_id, *epoch) {
                        return GroupAnswer::Offsets(Err(e));
                    }
                }
                GroupAnswer::Offsets(Ok(g.fetch_offsets(topics, require_stable)))
            }
            GroupOp::Describe { group } => {
                let groups = self.groups.borrow();
                // A consumer-protocol group is not a classic one: Kafka describes it
                // as Dead here (GROUP_ID_NOT_FOUND from DescribeGroups v6).
                GroupAnswer::Described(match groups.get(&group).filter(|g| g.consumer.is_none()) {
                    Some(g) => g.describe(),
                    None => GroupDescription {
                        group,
                        state: GroupState::Dead.name(),
                        protocol_type: String::new(),
                        protocol: String::new(),
                        members: Vec::new(),
                    },
                })
            }
            GroupOp::List => {
                let groups = self.groups.borrow();
                let mut listed = self.share_listings();
                listed.extend(groups.values().map(|g| GroupListing {
                    group: g.id.clone(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: match &g.consumer {
                        Some(c) => c.state().name(),
                        None => g.state.name(),
                    },
                    group_type: if g.consumer.is_some() {
                        CONSUMER_PROTOCOL_TYPE
                    } else {
                        "classic"
                    },
                }));
                GroupAnswer::Listed(listed)
            }
            GroupOp::Delete { group } if self.is_share_group(&group) => {
                GroupAnswer::Done(self.delete_share_group(&group, &log_of).await)
            }
            GroupOp::Delete { group } => GroupAnswer::Done(self.delete(&group, &log_of).await),
            GroupOp::DeleteOffsets { group, partitions } => {
                GroupAnswer::OffsetsDeleted(self.delete_offsets(&group, partitions, &log_of).await)
            }
            GroupOp::ConsumerDescribe { group } => {
                let groups = self.groups.borrow();
                GroupAnswer::ConsumerDescribed(
                    match groups.get(&group).and_then(|g| g.consumer.as_ref()) {
                        Some(c) => Ok(c.describe(&self.config.consumer)),
                        None => Err(GroupError::GroupIdNotFound),
                    },
                )
            }
            GroupOp::ConsumerHeartbeat { group, heartbeat } => GroupAnswer::ConsumerHeartbeat(
                self.consumer_heartbeat(group, heartbeat, topics, &log_of)
                    .await,
            ),
            GroupOp::ShareHeartbeat { group, heartbeat } => GroupAnswer::ShareHeartbeat(
                self.share_heartbeat(group, heartbeat, topics, &log_of)
                    .await,
            ),
            GroupOp::ShareDescribe { group } => {
                GroupAnswer::ShareDescribed(self.share_describe(&group))
            }
            GroupOp::ShareScope { group } => GroupAnswer::ShareScope(self.share_scope(&group)),
            GroupOp::ShareStatePartitions { group, add, forget } => GroupAnswer::Done(
                self.share_state_partitions(&group, add, forget, &log_of)
                    .await,
            ),
        }
    }

    /// A ConsumerGroupHeartbeat: the group's step (`consumer::group`), then the records
    /// of what changed, answered once they are committed. A group id without a group is
    /// created by a joining member; an empty classic group is taken over, one with
    /// members upgraded as the migration policy allows (`upgrade`).
    async fn consumer_heartbeat(
        &self,
        group: String,
        hb: Heartbeat,
        topics: &impl TopicCatalog,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<HeartbeatAnswer, GroupError> {
        if group.is_empty() {
            return Err(GroupError::InvalidRequest("GroupId can't be empty.".into()));
        }
        let classic_with_members = self
            .groups
            .borrow()
            .get(&group)
            .is_some_and(|g| g.consumer.is_none() && !g.members.is_empty());
        if classic_with_members {
            if hb.member_epoch != 0 {
                return Err(GroupError::GroupIdNotFound);
            }
            return self.upgrade(group, hb, topics, log_of).await;
        }
        let now = self.mono_ms();
        let (answer, records, changes) = {
            let mut groups = self.groups.borrow_mut();
            let joining = hb.member_epoch == 0;
            let created = !groups.contains_key(&group);
            if created {
                if !joining {
                    return Err(GroupError::GroupIdNotFound);
                }
                groups.insert(group.clone(), Group::new(group.clone()));
            }
            let g = groups.get_mut(&group).expect("inserted above");
            let converted = g.consumer.is_none();
            if converted {
                if !joining {
                    return Err(GroupError::GroupIdNotFound);
                }
                g.consumer = Some(ConsumerGroup::new(group.clone()));
                g.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_string());
            }
            let leaving = hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH;
            let c = g.consumer.as_mut().expect("set above");
            let config = overrides::effective(&self.config.consumer, &topics.group_configs(&group));
            let answer = c.heartbeat(hb, topics, &config, now, || {
                uuid::Uuid::new_v4().to_string()
            });
            if answer.is_err() && c.is_empty() && converted {
                // A refused first heartbeat leaves no group behind, as in Kafka, where
                // the group comes with the records the refusal never writes.
                if created {
                    groups.remove(&group);
                } else {
                    g.consumer = None;
                    g.protocol_type = None;
                }
                return answer;
            }
            let downgraded = if leaving && answer.is_ok() {
                self.downgrade_if_due(g)?
            } else {
                None
            };
            match downgraded {
                Some(records) => (answer, records, Changes::default()),
                None => {
                    let c = g.consumer.as_mut().expect("not downgraded");
                    let changes = c.take_changes();
                    let records = encode_consumer_records(c.records_for(&changes))?;
                    (answer, records, changes)
                }
            }
        };
        if !records.is_empty() {
            if let Err(e) = self.append(&group, &records, log_of).await {
                self.keep_consumer_changes(&group, changes);
                return Err(e);
            }
        }
        answer
    }

    /// A ConsumerGroupHeartbeat that joins a classic group with members: the group
    /// becomes a consumer group (`state/migration.rs`) if the policy allows it, its
    /// members speak the consumer's embedded protocol and they are not too many;
    /// GROUP_ID_NOT_FOUND otherwise, as Kafka answers. The heartbeat runs on the
    /// converted group first: refused, it leaves the classic group as it was. One batch
    /// deletes the classic record and writes the consumer group.
    async fn upgrade(
        &self,
        group: String,
        hb: Heartbeat,
        topics: &impl TopicCatalog,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<HeartbeatAnswer, GroupError> {
        let config = &overrides::effective(&self.config.consumer, &topics.group_configs(&group));
        let now = self.mono_ms();
        let records = {
            let mut groups = self.groups.borrow_mut();
            let g = groups.get_mut(&group).ok_or(GroupError::GroupIdNotFound)?;
            if !config.migration_policy.upgrades() || !g.upgradable(config.max_size) {
                tracing::info!(group = %group, policy = config.migration_policy.name(), "a consumer-protocol member cannot join this classic group");
                return Err(GroupError::GroupIdNotFound);
            }
            let mut c = ConsumerGroup::from_classic(
                group.clone(),
                g.generation,
                g.classic_seeds(),
                topics,
                config,
                now,
            )
            .map_err(|e| {
                tracing::warn!(group = %group, error = %e, "cannot upgrade a classic group");
                GroupError::GroupIdNotFound
            })?;
            let answer =
                c.heartbeat(hb, topics, config, now, || uuid::Uuid::new_v4().to_string())?;
            c.take_changes();
            let mut records = vec![(
                rec::encode_key(&RecordKey::GroupMetadata {
                    group: group.clone(),
                }),
                None,
            )];
            records.extend(encode_consumer_records(c.all_records())?);
            tracing::info!(group = %group, generation = g.generation, members = g.members.len(), "classic group upgraded to a consumer group");
            g.take_upgraded(c);
            (records, answer)
        };
        let (records, answer) = records;
        self.append(&group, &records, log_of).await?;
        Ok(answer)
    }

    /// After a member left or was removed: if only classic members remain and the
    /// policy allows it, the group becomes a classic group and prepares a rebalance
    /// (`state/migration.rs`). Returns the batch that records the change.
    fn downgrade_if_due(&self, g: &mut Group) -> Result<Option<Vec<KeyedRecord>>, GroupError> {
        if !self.config.consumer.migration_policy.downgrades() || !g.downgradable() {
            return Ok(None);
        }
        let old = g.downgrade(Instant::now());
        tracing::info!(group = %g.id, generation = g.generation, members = g.members.len(), "consumer group downgraded to a classic group");
        let mut records = encode_consumer_records(old.all_tombstones())?;
        records.push(classic_group_record(g));
        Ok(Some(records))
    }

    /// A JoinGroup to a consumer group with members: the member joins it as a
    /// classic-protocol member (`consumer/group/classic.rs`), answered at once as a
    /// follower once its records are written.
    async fn join_consumer_group(
        &self,
        req: JoinRequest,
        topics: &impl TopicCatalog,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> JoinAnswer {
        if !(SESSION_TIMEOUT_MS_MIN..=SESSION_TIMEOUT_MS_MAX).contains(&req.session_timeout_ms) {
            return JoinAnswer::error(GroupError::InvalidSessionTimeout, req.member_id);
        }
        let unknown_member = req.member_id.is_empty();
        let member_id = if unknown_member {
            uuid::Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        if unknown_member && req.require_known_member_id && req.group_instance_id.is_none() {
            return JoinAnswer::error(GroupError::MemberIdRequired, member_id);
        }
        let join = ClassicJoin {
            member_id: member_id.clone(),
            unknown_member,
            instance_id: req.group_instance_id,
            protocol_type: req.protocol_type,
            protocols: req
                .protocols
                .into_iter()
                .map(|p| ClassicProtocol {
                    name: p.name,
                    metadata: p.metadata.to_vec(),
                })
                .collect(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            client_id: req.client_id,
            client_host: req.client_host,
        };
        let now = self.mono_ms();
        let stepped = {
            let mut groups = self.groups.borrow_mut();
            let Some(c) = groups.get_mut(&req.group).and_then(|g| g.consumer.as_mut()) else {
                return JoinAnswer::error(GroupError::NotCoordinator, member_id);
            };
            c.classic_join(join, topics, &self.config.consumer, now)
                .and_then(|joined| {
                    let changes = c.take_changes();
                    match encode_consumer_records(c.records_for(&changes)) {
                        Ok(records) => Ok((joined, records, changes)),
                        Err(e) => {
                            c.keep_changes(changes);
                            Err(e)
                        }
                    }
                })
        };
        let (joined, records, changes) = match stepped {
            Ok(s) => s,
            Err(e) => return JoinAnswer::error(e, member_id),
        };
        if !records.is_empty() {
            if let Err(e) = self.append(&req.group, &records, log_of).await {
                self.keep_consumer_changes(&req.group, changes);
                return JoinAnswer::error(e, member_id);
            }
        }
        JoinAnswer {
            error: None,
            skip_assignment: false,
            generation: joined.generation,
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
            protocol_name: Some(joined.protocol_name),
            leader: String::new(),
            member_id: joined.member_id,
            members: Vec::new(),
        }
    }

    /// A LeaveGroup of classic members of a consumer group.
    async fn leave_consumer_group(
        &self,
        group: &str,
        members: &[LeavingMember],
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let leaving: Vec<(String, Option<String>)> = members
            .iter()
            .map(|m| (m.member_id.clone(), m.group_instance_id.clone()))
            .collect();
        let (left, records, changes) = {
            let mut groups = self.groups.borrow_mut();
            let c = groups
                .get_mut(group)
                .and_then(|g| g.consumer.as_mut())
                .ok_or(GroupError::UnknownMemberId)?;
            let left = c.classic_leave(&leaving);
            let changes = c.take_changes();
            let records = encode_consumer_records(c.records_for(&changes))?;
            (left, records, changes)
        };
        if !records.is_empty() {
            if let Err(e) = self.append(group, &records, log_of).await {
                self.keep_consumer_changes(group, changes);
                return Err(e);
            }
        }
        Ok(left.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// A failed write's changes go back to their group, for its next write.
    fn keep_consumer_changes(&self, group: &str, changes: Changes) {
        if let Some(c) = self
            .groups
            .borrow_mut()
            .get_mut(group)
            .and_then(|g| g.consumer.as_mut())
        {
            c.keep_changes(changes);
        }
    }

    /// Replays one consumer-group record into its group.
    fn apply_consumer(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        offset: i64,
    ) -> Result<(), NewerRecord> {
        let k = match consumer_rec::decode_key(key) {
            Ok(k) => k,
            Err(e) => return skip_record("consumer group record key", e, offset),
        };
        let value = match value.map(|v| consumer_rec::decode_value(&k, v)) {
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => return skip_record("consumer group record value", e, offset),
            None => None,
        };
        let mut groups = self.groups.borrow_mut();
        let group = k.group().to_string();
        let g = groups
            .entry(group.clone())
            .or_insert_with(|| Group::new(group.clone()));
        g.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_string());
        g.consumer
            .get_or_insert_with(|| ConsumerGroup::new(group))
            .restore(&k, value);
        Ok(())
    }

    /// Removes the consumer-group members whose session or revocation timed out, and
    /// returns the groups with records to write ([`Self::store_consumer_changes`]).
    fn expire_consumer_members(&self) -> Vec<String> {
        let now = self.mono_ms();
        let mut changed = Vec::new();
        for (id, g) in self.groups.borrow_mut().iter_mut() {
            let Some(c) = g.consumer.as_mut() else {
                continue;
            };
            let expired = c.expired(now);
            for member in &expired {
                tracing::info!(group = %id, member = %member, "consumer group member removed: its session or revocation timed out");
                c.remove_member(member);
            }
            if expired.is_empty() {
                continue;
            }
            match self.downgrade_if_due(g) {
                Ok(Some(records)) => {
                    self.migrated.borrow_mut().insert(id.clone(), records);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(group = %id, error = %e, "recording a consumer group's downgrade")
                }
            }
            changed.push(id.clone());
        }
        changed
    }

    /// Writes what changed in these consumer groups (a member's removal by a timer). A
    /// failure is logged: the group goes on in memory, as after a failed heartbeat write.
    pub async fn store_consumer_changes(
        &self,
        groups: Vec<String>,
        log_of: impl Fn(i32) -> Option<Rc<Partition>>,
    ) {
        for group in groups {
            if !self.serves_group(&group) {
                continue;
            }
            let migrated = self.migrated.borrow_mut().remove(&group);
            if let Some(records) = migrated {
                if let Err(e) = self.append(&group, &records, &log_of).await {
                    // The classic group's next record supersedes the consumer one's at
                    // a replay all the same.
                    tracing::warn!(group = %group, error = %e, "storing a consumer group's downgrade");
                }
                continue;
            }
            let (records, changes) = {
                let mut all = self.groups.borrow_mut();
                let Some(c) = all.get_mut(&group).and_then(|g| g.consumer.as_mut()) else {
                    continue;
                };
                let changes = c.take_changes();
                (encode_consumer_records(c.records_for(&changes)), changes)
            };
            let result = match records {
                Ok(r) if r.is_empty() => Ok(0),
                Ok(r) => self.append(&group, &r, &log_of).await,
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                self.keep_consumer_changes(&group, changes);
                tracing::warn!(group = %group, error = %e, "storing a consumer group's member removal");
            }
        }
    }

    /// Runs the timers of every group: session expiry, join-phase timeouts, and the
    /// consumer-protocol groups' session and revocation deadlines. Returns the classic
    /// groups whose last member went, whose Empty state is to be stored
    /// ([`Self::store_emptied`]), and the consumer groups whose removals are to be
    /// stored ([`Self::store_consumer_changes`]).
    pub fn tick(&self) -> Ticked {
        let now = Instant::now();
        let mut emptied = Vec::new();
        for g in self.groups.borrow_mut().values_mut() {
            if g.consumer.is_some() {
                continue;
            }
            let had_members = !g.is_empty();
            g.tick(now);
            if had_members && g.is_empty() {
                emptied.push(g.id.clone());
            }
        }
        Ticked {
            emptied,
            consumer_changed: self.expire_consumer_members(),
            share_changed: self.expire_share_members(),
        }
    }

    /// Stores the groups of `emptied` that are still Empty, so that a coordinator that
    /// replays them later does not bring back members that left (`Group::restore`). A
    /// failure is logged: the members stored last then expire after their sessions.
    pub async fn store_emptied(
        &self,
        emptied: Vec<String>,
        log_of: impl Fn(i32) -> Option<Rc<Partition>>,
    ) {
        for group in emptied {
            let still = self
                .groups
                .borrow()
                .get(&group)
                .is_some_and(|g| g.is_empty());
            if still && self.serves_group(&group) {
                if let Err(e) = self.persist_group(&group, &log_of).await {
                    tracing::warn!(group = %group, error = %e, "storing an emptied group");
                }
            }
        }
    }

    async fn commit(
        &self,
        req: CommitRequest,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Vec<Result<(), GroupError>> {
        let n = req.offsets.len();
        let check = {
            let mut groups = self.groups.borrow_mut();
            let g = groups
                .entry(req.group.clone())
                .or_insert_with(|| Group::new(req.group.clone()));
            g.check_commit(&req)
        };
        if let Err(e) = check {
            return vec![Err(e); n];
        }
        let ts = now_ms();
        let mut results = vec![Ok(()); n];
        let mut keys = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        for (i, (topic, partition, offset, epoch, metadata)) in req.offsets.iter().enumerate() {
            if metadata.len() > OFFSET_METADATA_MAX_BYTES {
                results[i] = Err(GroupError::OffsetMetadataTooLarge);
                continue;
            }
            keys.push((
                i,
                rec::encode_key(&RecordKey::Offset {
                    group: req.group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
            ));
            values.push(Some(rec::encode_offset_value(&OffsetValue {
                offset: *offset,
                leader_epoch: *epoch,
                metadata: metadata.clone(),
                commit_timestamp_ms: ts,
                expire_timestamp_ms: -1,
            })));
        }
        if keys.is_empty() {
            return results;
        }
        let records: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            keys.iter().map(|(_, k)| k.clone()).zip(values).collect();
        let base = match self.append(&req.group, &records, log_of).await {
            Ok(base) => base,
            Err(e) => {
                for (i, _) in &keys {
                    results[*i] = Err(e.clone());
                }
                return results;
            }
        };
        let mut groups = self.groups.borrow_mut();
        let g = groups
            .entry(req.group.clone())
            .or_insert_with(|| Group::new(req.group.clone()));
        for (record_offset, (i, _)) in (base..).zip(&keys) {
            let (topic, partition, offset, epoch, metadata) = &req.offsets[*i];
            g.put_committed(
                (topic.clone(), *partition),
                Committed {
                    offset: *offset,
                    leader_epoch: *epoch,
                    metadata: metadata.clone(),
                    commit_timestamp_ms: ts,
                    record_offset,
                },
            );
        }
        results
    }

    /// TxnOffsetCommit: the offsets are written as one transactional batch of the
    /// producer's and are pending from the moment it has its offsets (module doc); the
    /// answer waits until the batch is committed.
    async fn txn_commit(
        &self,
        req: TxnCommitRequest,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Vec<Result<(), GroupError>> {
        let n = req.offsets.len();
        if req.group.is_empty() {
            return vec![Err(GroupError::InvalidGroupId); n];
        }
        let check = match self.groups.borrow().get(&req.group) {
            Some(g) => g.check_txn_commit(&req),
            // Kafka: a group that does not exist takes a commit from outside the group
            // protocol (it is created as a simple group), not one naming a generation.
            None if req.generation >= 0 => Err(GroupError::IllegalGeneration),
            None => Ok(()),
        };
        if let Err(e) = check {
            return vec![Err(e); n];
        }
        let ts = now_ms();
        let mut results = vec![Ok(()); n];
        let mut written = Vec::with_capacity(n);
        let mut records = Vec::with_capacity(n);
        for (i, (topic, partition, offset, epoch, metadata)) in req.offsets.iter().enumerate() {
            if metadata.len() > OFFSET_METADATA_MAX_BYTES {
                results[i] = Err(GroupError::OffsetMetadataTooLarge);
                continue;
            }
            let c = Committed {
                offset: *offset,
                leader_epoch: *epoch,
                metadata: metadata.clone(),
                commit_timestamp_ms: ts,
                record_offset: -1, // known once appended
            };
            records.push((
                rec::encode_key(&RecordKey::Offset {
                    group: req.group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
                Some(rec::encode_offset_value(&OffsetValue {
                    offset: c.offset,
                    leader_epoch: c.leader_epoch,
                    metadata: c.metadata.clone(),
                    commit_timestamp_ms: ts,
                    expire_timestamp_ms: -1,
                })),
            ));
            written.push((i, (topic.clone(), *partition), c));
        }
        if written.is_empty() {
            return results;
        }
        let bytes = batch_of(&records, Some((req.producer_id, req.producer_epoch)));
        let appended = self.append_now(&req.group, &bytes, true, log_of);
        let (log, ticket) = match appended {
            Ok(a) => a,
            Err(e) => {
                for (i, _, _) in &written {
                    results[*i] = Err(e.clone());
                }
                return results;
            }
        };
        {
            // No await since the append: the marker, ordered after this batch in the
            // log, finds these pending. Should the wait below fail, they stay: the
            // batch is in the log, and a replay would take it as pending too; the
            // producer retries the commit (a later record replaces it) or aborts.
            let mut groups = self.groups.borrow_mut();
            for (record_offset, (_, key, mut c)) in
                (ticket.base_offset..).zip(written.iter().cloned())
            {
                c.record_offset = record_offset;
                self.put_pending(&mut groups, &req.group, req.producer_id, key, c);
            }
        }
        if let Err(e) = committed(&log, ticket).await {
            for (i, _, _) in &written {
                results[*i] = Err(e.clone());
            }
        }
        results
    }

    async fn delete(
        &self,
        group: &str,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(), GroupError> {
        let (keys, tombstones) = {
            let groups = self.groups.borrow();
            let g = groups.get(group).ok_or(GroupError::GroupIdNotFound)?;
            if !g.is_empty() {
                return Err(GroupError::GroupNotEmpty);
            }
            // Every committed offset, and (as Kafka) every partition with only a pending
            // transactional one: a replay drops those at the tombstone too.
            let keys: BTreeSet<(String, i32)> = g
                .offsets
                .keys()
                .chain(g.pending_txn.values().flat_map(|p| p.keys()))
                .cloned()
                .collect();
            let mut t = offset_tombstones(group, keys.iter());
            t.push((
                rec::encode_key(&RecordKey::GroupMetadata {
                    group: group.to_string(),
                }),
                None,
            ));
            if let Some(c) = &g.consumer {
                t.extend(encode_consumer_records(c.tombstones())?);
            }
            (keys, t)
        };
        let base = self.append(group, &tombstones, log_of).await?;
        let mut groups = self.groups.borrow_mut();
        if let Some(g) = groups.get_mut(group) {
            for (record_offset, key) in (base..).zip(&keys) {
                g.apply_tombstone(key, record_offset);
            }
            // What was committed during the append stays, and keeps the group.
            if g.is_empty() && !g.has_offsets() {
                groups.remove(group);
            }
        }
        Ok(())
    }

    async fn delete_offsets(
        &self,
        group: &str,
        partitions: Vec<(String, i32)>,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let (results, keys) = {
            let groups = self.groups.borrow();
            let g = groups.get(group).ok_or(GroupError::GroupIdNotFound)?;
            let subscribed = g.subscribed_topics();
            let mut results = Vec::with_capacity(partitions.len());
            let mut keys = Vec::new();
            for (topic, partition) in &partitions {
                if subscribed.iter().any(|t| t == topic) {
                    results.push(Err(GroupError::GroupSubscribedToTopic));
                } else {
                    results.push(Ok(()));
                    // A tombstone where an offset is committed or pending (as Kafka).
                    let key = (topic.clone(), *partition);
                    if g.offsets.contains_key(&key) || g.has_pending(&key) {
                        keys.push(key);
                    }
                }
            }
            (results, keys)
        };
        if !keys.is_empty() {
            let tombstones = offset_tombstones(group, keys.iter());
            let base = self.append(group, &tombstones, log_of).await?;
            let mut groups = self.groups.borrow_mut();
            if let Some(g) = groups.get_mut(group) {
                for (record_offset, key) in (base..).zip(&keys) {
                    // Only what was tombstoned: a commit written after it stays.
                    g.apply_tombstone(key, record_offset);
                }
            }
        }
        Ok(results)
    }

    async fn persist_group(
        &self,
        group: &str,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(), GroupError> {
        let record = {
            let mut groups = self.groups.borrow_mut();
            let Some(g) = groups.get_mut(group) else {
                return Ok(());
            };
            classic_group_record(g)
        };
        self.append(group, &[record], log_of).await.map(|_| ())
    }

    /// Expires the committed offsets of groups that have been Empty for the retention
    /// period (and were not committed to within it), writing tombstones; a group left
    /// with nothing is forgotten. Kafka's rule since 2.1 (KIP-211). As Kafka, an offset
    /// with a pending transactional commit does not expire, nor does a group with a
    /// transaction open.
    pub async fn expire_offsets(&self, log_of: impl Fn(i32) -> Option<Rc<Partition>>) -> usize {
        let retention = self.config.offsets_retention;
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let now = now_ms();
        let candidates: Vec<String> = self
            .groups
            .borrow()
            .values()
            .filter(|g| g.state == GroupState::Empty && g.empty_since.elapsed() >= retention)
            .map(|g| g.id.clone())
            .collect();
        let mut count = 0;
        for group in candidates {
            // Re-evaluated right before the append (no await in between), so a commit
            // acknowledged meanwhile is never tombstoned from a stale list.
            let (expired, forget_group) = {
                let groups = self.groups.borrow();
                let Some(g) = groups.get(&group) else {
                    continue;
                };
                if g.state != GroupState::Empty || g.empty_since.elapsed() < retention {
                    continue;
                }
                let expired: Vec<(String, i32)> = g
                    .offsets
                    .iter()
                    .filter(|(k, c)| {
                        now.saturating_sub(c.commit_timestamp_ms) >= retention_ms
                            && !g.has_pending(k)
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                let forget = expired.len() == g.offsets.len() && g.pending_txn.is_empty();
                (expired, forget)
            };
            if expired.is_empty() && !forget_group {
                continue;
            }
            let mut tombstones = offset_tombstones(&group, expired.iter());
            if forget_group {
                tombstones.push((
                    rec::encode_key(&RecordKey::GroupMetadata {
                        group: group.clone(),
                    }),
                    None,
                ));
            }
            let base = match self.append(&group, &tombstones, &log_of).await {
                Ok(base) => base,
                Err(e) => {
                    tracing::warn!(group = %group, error = %e, "expiring offsets");
                    continue;
                }
            };
            let mut groups = self.groups.borrow_mut();
            if let Some(g) = groups.get_mut(&group) {
                for (record_offset, k) in (base..).zip(&expired) {
                    // Only what was tombstoned: a newer commit of the same key stays.
                    let before = g.offsets.contains_key(k);
                    g.apply_tombstone(k, record_offset);
                    if before && !g.offsets.contains_key(k) {
                        count += 1;
                    }
                }
                if forget_group && g.state == GroupState::Empty && !g.has_offsets() {
                    groups.remove(&group);
                }
            }
            tracing::info!(group = %group, offsets = expired.len(), "expired committed offsets of an empty group");
        }
        count
    }

    /// Appends (key, value-or-tombstone) records to the group's partition and waits until
    /// they are committed; returns the offset of the first.
    async fn append(
        &self,
        group: &str,
        records: &KeyedRecords,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<i64, GroupError> {
        let (log, ticket) = self.append_now(group, &batch_of(records, None), false, log_of)?;
        committed(&log, ticket).await?;
        Ok(ticket.base_offset)
    }

    /// Appends one batch to the group's partition, synchronously: its records have their
    /// offsets when this returns. `unsequenced`: a producer's transactional batch the
    /// coordinator writes for it (epoch checked, no sequence).
    fn append_now(
        &self,
        group: &str,
        bytes: &[u8],
        unsequenced: bool,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(Rc<Partition>, AppendTicket), GroupError> {
        let partition = self.offsets_partition(group);
        let log = log_of(partition).ok_or(GroupError::CoordinatorNotAvailable)?;
        if !log.is_leader() {
            return Err(GroupError::NotCoordinator);
        }
        // Kafka answers a commit that cannot reach enough replicas as a coordinator that
        // is not available (clients retry).
        if log.isr_len() < log.min_insync_replicas() {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let appended = if unsequenced {
            log.append_unsequenced(bytes)
        } else {
            log.append(bytes)
        };
        let ticket = appended.map_err(|e| match e {
            // Not retriable: the same commit will never fit (Kafka's INVALID_COMMIT_OFFSET_SIZE).
            AppendError::InvalidBatch(corelog_storage::batch::BatchError::TooLarge { .. }) => {
                GroupError::CommitTooLarge
            }
            // A transactional commit of a fenced producer.
            AppendError::Sequence(SequenceError::StaleEpoch { .. }) => {
                GroupError::InvalidProducerEpoch
            }
            other => GroupError::Storage(other.to_string()),
        })?;
        Ok((log, ticket))
    }
}

/// A classic group's record as it is now (its metadata, members and assignments).
fn classic_group_record(g: &mut Group) -> KeyedRecord {
    g.dirty = false;
    let protocol = g.protocol.clone();
    let value = GroupValue {
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        generation: g.generation,
        protocol: protocol.clone(),
        leader: g.leader.clone(),
        current_state_timestamp_ms: now_ms(),
        members: g
            .members
            .values()
            .map(|m| MemberValue {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                session_timeout_ms: m.session_timeout.as_millis() as i32,
                subscription: m
                    .protocols
                    .iter()
                    .find(|p| Some(&p.name) == protocol.as_ref())
                    .map(|p| p.metadata.clone())
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect(),
    };
    (
        rec::encode_key(&RecordKey::GroupMetadata {
            group: g.id.clone(),
        }),
        Some(rec::encode_group_value(&value)),
    )
}

/// Waits until `ticket`'s records are committed (acks=all).
async fn committed(log: &Partition, ticket: AppendTicket) -> Result<(), GroupError> {
    log.wait_committed(ticket).await.map_err(|e| match e {
        AckError::NotLeader => GroupError::NotCoordinator,
        AckError::NotEnoughReplicasAfterAppend => GroupError::CoordinatorNotAvailable,
        AckError::Append(e) => GroupError::Storage(e.to_string()),
    })
}

/// One batch of `records`; with `producer` (id, epoch), a transactional batch of that
/// producer, base sequence 0 as Kafka's coordinator writes it.
fn batch_of(records: &KeyedRecords, producer: Option<(i64, i16)>) -> Vec<u8> {
    let mut b = BatchBuilder::new(now_ms());
    if let Some((id, epoch)) = producer {
        b = b.producer(id, epoch, 0).transactional();
    }
    for (k, v) in records {
        b.push(&Record {
            key: Some(k),
            value: v.as_deref(),
            headers: &[],
            timestamp_delta: 0,
        });
    }
    b.build()
}

/// Offset tombstones of `group` for `keys`, in their order.
fn offset_tombstones<'a>(
    group: &str,
    keys: impl Iterator<Item = &'a (String, i32)>,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    keys.map(|(topic, partition)| {
        (
            rec::encode_key(&RecordKey::Offset {
                group: group.to_string(),
                topic: topic.clone(),
                partition: *partition,
            }),
            None,
        )
    })
    .collect()
}

/// `op` answered with `e` and nothing done.
fn refused(op: GroupOp, e: GroupError) -> GroupAnswer {
    match op {
        GroupOp::Join(r) => GroupAnswer::Join(JoinAnswer::error(e, r.member_id)),
        GroupOp::Sync(_) => GroupAnswer::Sync(SyncAnswer::error(e)),
        GroupOp::Heartbeat(_) | GroupOp::Delete { .. } => GroupAnswer::Done(Err(e)),
        GroupOp::Leave { .. } => GroupAnswer::Leave(Err(e)),
        GroupOp::Commit(r) => GroupAnswer::Commit(vec![Err(e); r.offsets.len()]),
        GroupOp::TxnCommit(r) => GroupAnswer::Commit(vec![Err(e); r.offsets.len()]),
        GroupOp::FetchOffsets { .. } => GroupAnswer::Offsets(Err(e)),
        GroupOp::Describe { group } => GroupAnswer::Described(GroupDescription {
            group,
            state: GroupState::Dead.name(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        }),
        GroupOp::List => GroupAnswer::Listed(Vec::new()),
        GroupOp::DeleteOffsets { .. } => GroupAnswer::OffsetsDeleted(Err(e)),
        GroupOp::ConsumerHeartbeat { .. } => GroupAnswer::ConsumerHeartbeat(Err(e)),
        GroupOp::ConsumerDescribe { .. } => GroupAnswer::ConsumerDescribed(Err(e)),
        GroupOp::ShareHeartbeat { .. } => GroupAnswer::ShareHeartbeat(Err(e)),
        GroupOp::ShareDescribe { .. } => GroupAnswer::ShareDescribed(Err(e)),
        GroupOp::ShareScope { .. } => GroupAnswer::ShareScope(Err(e)),
        GroupOp::ShareStatePartitions { .. } => GroupAnswer::Done(Err(e)),
    }
}

/// The `__consumer_offsets` partition of this coordinator's shard, as a topic-partition.
pub fn offsets_tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: OFFSETS_TOPIC.into(),
        partition,
    }
}

/// A classic offsets or group record that did not decode: refused when its version is
/// newer than this release reads, otherwise skipped with a warning.
fn skip_offsets_record(e: rec::OffsetsRecordError, offset: i64) -> Result<(), NewerRecord> {
    if let rec::OffsetsRecordError::UnknownVersion { record, version } = e {
        return Err(NewerRecord {
            offset,
            record,
            version,
        });
    }
    tracing::warn!(offset, error = %e, "skipping an undecodable __consumer_offsets record");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_storage::test_executor::run;
    use corelog_storage::txn_marker::{MarkerKind, TxnMarker};
    use corelog_storage::{LogConfig, LogContext};
    use std::path::Path;

    pub(super) const GROUP: &str = "g";

    pub(super) async fn open(dir: &Path) -> Rc<Partition> {
        Partition::open(
            dir.to_path_buf(),
            LogConfig::default(),
            LogContext::system(),
            1,
            0,
        )
        .await
        .expect("open")
    }

    /// A coordinator with `GROUP`'s partition (`log`) loaded.
    async fn loaded(log: &Rc<Partition>) -> GroupCoordinator {
        let c = GroupCoordinator::new(GroupConfig::default());
        c.load_partition(c.offsets_partition(GROUP), log.clone())
            .await;
        c
    }

    fn txn_commit(pid: i64, epoch: i16, offsets: &[(i32, i64)]) -> GroupOp {
        GroupOp::TxnCommit(TxnCommitRequest {
            group: GROUP.into(),
            transactional_id: format!("tx-{pid}"),
            producer_id: pid,
            producer_epoch: epoch,
            generation: -1,
            member_id: String::new(),
            group_instance_id: None,
            offsets: offsets
                .iter()
                .map(|(p, o)| ("t".to_string(), *p, *o, -1, "m".to_string()))
                .collect(),
            version: 3,
        })
    }

    fn commit(offsets: &[(i32, i64)]) -> GroupOp {
        GroupOp::Commit(CommitRequest {
            group: GROUP.into(),
            generation: -1,
            member_id: String::new(),
            group_instance_id: None,
            offsets: offsets
                .iter()
                .map(|(p, o)| ("t".to_string(), *p, *o, -1, String::new()))
                .collect(),
        })
    }

    pub(super) async fn ask(c: &GroupCoordinator, log: &Rc<Partition>, op: GroupOp) -> GroupAnswer {
        let l = log.clone();
        c.handle(op, &crate::group::consumer::catalog::NoTopics, move |_| {
            Some(l.clone())
        })
        .await
    }

    async fn commits(
        c: &GroupCoordinator,
        log: &Rc<Partition>,
        op: GroupOp,
    ) -> Vec<Result<(), GroupError>> {
        match ask(c, log, op).await {
            GroupAnswer::Commit(r) => r,
            other => panic!("not a commit answer: {other:?}"),
        }
    }

    /// What OffsetFetch tells of partitions 0..3 of topic "t".
    async fn fetched(
        c: &GroupCoordinator,
        log: &Rc<Partition>,
        require_stable: bool,
    ) -> Vec<Result<Option<i64>, GroupError>> {
        let op = GroupOp::FetchOffsets {
            group: GROUP.into(),
            topics: Some(vec![("t".into(), vec![0, 1, 2])]),
            require_stable,
            member: None,
        };
        match ask(c, log, op).await {
            GroupAnswer::Offsets(Ok(rows)) => rows
                .into_iter()
                .map(|(_, _, r)| r.map(|c| c.map(|c| c.offset)))
                .collect(),
            other => panic!("not an offsets answer: {other:?}"),
        }
    }

    /// Writes the marker the transaction coordinator asks for and tells the group
    /// coordinator once it is committed, as the shard's WriteTxnMarkers path does.
    async fn end_txn(
        c: &GroupCoordinator,
        log: &Rc<Partition>,
        pid: i64,
        epoch: i16,
        commit: bool,
    ) {
        let marker = TxnMarker {
            producer_id: pid,
            producer_epoch: epoch,
            coordinator_epoch: 0,
            kind: if commit {
                MarkerKind::Commit
            } else {
                MarkerKind::Abort
            },
        };
        let ticket = log.append_marker(&marker).expect("marker");
        log.wait_committed(ticket).await.expect("marker committed");
        c.complete_transaction(c.offsets_partition(GROUP), pid, commit, ticket.base_offset);
    }

    const UNSTABLE: Result<Option<i64>, GroupError> = Err(GroupError::UnstableOffsetCommit);

    /// One topic "t" of four partitions, at version 1.
    pub(super) struct OneTopic;

    impl TopicCatalog for OneTopic {
        fn version(&self) -> u64 {
            1
        }
        fn topic(
            &self,
            name: &str,
        ) -> Option<(uuid::Uuid, super::super::consumer::assignor::TopicSpec)> {
            (name == "t").then(|| {
                (
                    uuid::Uuid::from_u128(42),
                    super::super::consumer::assignor::TopicSpec {
                        partitions: 4,
                        racks: Vec::new(),
                    },
                )
            })
        }
        fn topic_names(&self) -> Vec<String> {
            vec!["t".into()]
        }
    }

    async fn beat(
        c: &GroupCoordinator,
        log: &Rc<Partition>,
        hb: Heartbeat,
    ) -> Result<HeartbeatAnswer, GroupError> {
        let l = log.clone();
        let op = GroupOp::ConsumerHeartbeat {
            group: GROUP.into(),
            heartbeat: hb,
        };
        match c.handle(op, &OneTopic, move |_| Some(l.clone())).await {
            GroupAnswer::ConsumerHeartbeat(r) => r,
            other => panic!("not a heartbeat answer: {other:?}"),
        }
    }

    fn join(member: &str) -> Heartbeat {
        Heartbeat {
            version: 1,
            member_id: member.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Default::default()),
            ..Heartbeat::default()
        }
    }

    fn member_commit(member: &str, epoch: i32) -> GroupOp {
        GroupOp::Commit(CommitRequest {
            group: GROUP.into(),
            generation: epoch,
            member_id: member.into(),
            group_instance_id: None,
            offsets: vec![("t".to_string(), 0, 5, -1, String::new())],
        })
    }

    #[test]
    fn a_consumer_group_is_stored_and_reloaded_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let c = loaded(&log).await;
            let a = beat(&c, &log, join("a")).await.expect("a joins");
            assert_eq!(
                (a.member_epoch, a.assignment.as_ref().map(|x| x.len())),
                (1, Some(4))
            );
            let b = beat(&c, &log, join("b")).await.expect("b joins");
            assert_eq!(b.member_epoch, 2);
            // a is asked to revoke two partitions (its epoch stays until it has).
            let mut hb = join("a");
            hb.member_epoch = 1;
            hb.owned = a.assignment.clone();
            let a2 = beat(&c, &log, hb).await.expect("a");
            assert_eq!(a2.assignment.as_ref().map(|x| x.len()), Some(2));
            // OffsetDelete refuses a topic the group subscribes to.
            let l = log.clone();
            let delete = GroupOp::DeleteOffsets {
                group: GROUP.into(),
                partitions: vec![("t".into(), 0), ("other".into(), 0)],
            };
            match c.handle(delete, &OneTopic, move |_| Some(l.clone())).await {
                GroupAnswer::OffsetsDeleted(Ok(r)) => {
                    assert_eq!(r, vec![Err(GroupError::GroupSubscribedToTopic), Ok(())])
                }
                other => panic!("not an OffsetDelete answer: {other:?}"),
            }
            // A member commits at its epoch; a stale one is told so.
            assert_eq!(commits(&c, &log, member_commit("a", 1)).await, vec![Ok(())]);
            assert_eq!(
                commits(&c, &log, member_commit("a", 0)).await,
                vec![Err(GroupError::StaleMemberEpoch)]
            );
            assert_eq!(
                commits(&c, &log, member_commit("z", 1)).await,
                vec![Err(GroupError::UnknownMemberId)]
            );
            // OffsetFetch v9: a member names itself at its epoch.
            for (member, epoch, expected) in [
                ("a", 1, None),
                ("a", 0, Some(GroupError::StaleMemberEpoch)),
                ("z", 1, Some(GroupError::UnknownMemberId)),
            ] {
                let l = log.clone();
                let op = GroupOp::FetchOffsets {
                    group: GROUP.into(),
                    topics: Some(vec![("t".into(), vec![0])]),
                    require_stable: false,
                    member: Some((member.into(), epoch)),
                };
                match c.handle(op, &OneTopic, move |_| Some(l.clone())).await {
                    GroupAnswer::Offsets(r) => assert_eq!(r.err(), expected, "{member}@{epoch}"),
                    other => panic!("not an OffsetFetch answer: {other:?}"),
                }
            }

            // A second coordinator replays the log: the same group, to the partition.
            let replayed = loaded(&log).await;
            let describe = |c: &GroupCoordinator| {
                let groups = c.groups.borrow();
                let g = groups
                    .get(GROUP)
                    .and_then(|g| g.consumer.as_ref())
                    .expect("a consumer group");
                let members: Vec<_> = g
                    .members()
                    .map(|m| {
                        (
                            m.member_id.clone(),
                            m.assignment.clone(),
                            g.target(&m.member_id).cloned(),
                        )
                    })
                    .collect();
                (g.epoch(), g.assignment_epoch(), members)
            };
            assert_eq!(describe(&replayed), describe(&c));
            // The members go on where they were: no new epoch for a heartbeat.
            let mut hb = join("a");
            hb.member_epoch = 1;
            hb.owned = a2.assignment.clone();
            let again = beat(&replayed, &log, hb).await.expect("a after the reload");
            assert_eq!(again.member_epoch, 2);
            assert_eq!(
                replayed.groups.borrow()[GROUP]
                    .consumer
                    .as_ref()
                    .map(|g| g.epoch()),
                Some(2)
            );
            // b leaves: its records are deleted, and a third replay no longer has it.
            let mut bye = join("b");
            bye.member_epoch = -1;
            beat(&replayed, &log, bye).await.expect("b leaves");
            let third = loaded(&log).await;
            let groups = third.groups.borrow();
            let g = groups[GROUP].consumer.as_ref().expect("consumer group");
            assert!(g.member("b").is_none());
            assert_eq!(g.epoch(), 3);
        });
    }

    /// A classic member's JoinGroup then SyncGroup (as a cooperative consumer: it
    /// reports `owned`), answered with its generation and assigned partitions of "t".
    async fn classic_round(
        c: &GroupCoordinator,
        log: &Rc<Partition>,
        member: &str,
        owned: Vec<i32>,
        leader_assigns: bool,
    ) -> (String, i32, Vec<i32>) {
        use super::super::consumer::embedded;
        let l = log.clone();
        let log_of = move |_| Some(l.clone());
        let metadata = embedded::subscription_bytes(
            3,
            &embedded::Subscription {
                topics: vec!["t".into()],
                owned: vec![("t".into(), owned)],
                rack: None,
            },
        );
        let join = GroupOp::Join(JoinRequest {
            group: GROUP.into(),
            member_id: member.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![Protocol {
                name: "cooperative-sticky".into(),
                metadata: Bytes::from(metadata),
            }],
            require_known_member_id: false,
        });
        let joined = match c.handle(join, &OneTopic, &log_of).await {
            GroupAnswer::Join(a) => a,
            other => panic!("not a join answer: {other:?}"),
        };
        assert_eq!(joined.error, None);
        let everything = embedded::assignment_bytes(3, &vec![("t".into(), vec![0, 1, 2, 3])]);
        let sync = GroupOp::Sync(SyncRequest {
            group: GROUP.into(),
            generation: joined.generation,
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("cooperative-sticky".into()),
            assignments: if leader_assigns {
                vec![(joined.member_id.clone(), Bytes::from(everything))]
            } else {
                Vec::new()
            },
        });
        let synced = match c.handle(sync, &OneTopic, &log_of).await {
            GroupAnswer::Sync(a) => a,
            other => panic!("not a sync answer: {other:?}"),
        };
        assert_eq!(synced.error, None);
        let assigned = embedded::parse_assignment(&synced.assignment).expect("parses");
        let partitions = assigned.into_iter().flat_map(|(_, ps)| ps).collect();
        (joined.member_id, joined.generation, partitions)
    }

    #[test]
    fn a_group_migrates_to_the_consumer_protocol_and_back_across_reloads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let config = GroupConfig {
                initial_rebalance_delay: Duration::ZERO,
                ..GroupConfig::default()
            };
            let c = GroupCoordinator::new(config.clone());
            c.load_partition(c.offsets_partition(GROUP), log.clone())
                .await;
            let reload = || async {
                let r = GroupCoordinator::new(config.clone());
                r.load_partition(r.offsets_partition(GROUP), log.clone())
                    .await;
                r
            };
            // A classic group: "a" leads and takes all four partitions.
            let (a, generation, held) = classic_round(&c, &log, "", vec![], true).await;
            assert_eq!((generation, held), (1, vec![0, 1, 2, 3]));

            // A consumer-protocol member joins: the group is upgraded, a keeps its
            // partitions until it gives some up.
            let joined = beat(&c, &log, join("b")).await.expect("b joins");
            assert_eq!(joined.assignment.map(|x| x.len()), Some(0));
            let l = log.clone();
            let hb = GroupOp::Heartbeat(HeartbeatRequest {
                group: GROUP.into(),
                generation: 1,
                member_id: a.clone(),
                group_instance_id: None,
            });
            assert!(matches!(
                c.handle(hb, &OneTopic, move |_| Some(l.clone())).await,
                GroupAnswer::Done(Err(GroupError::RebalanceInProgress))
            ));
            // a rejoins still owning everything: it is given half, keeping its epoch
            // until it has revoked the rest; then it rejoins owning that half.
            let (_, generation, held) = classic_round(&c, &log, &a, vec![0, 1, 2, 3], false).await;
            assert_eq!((generation, held.len()), (1, 2));
            let (_, generation, again) = classic_round(&c, &log, &a, held.clone(), false).await;
            assert_eq!((generation, &again), (2, &held));

            // A reload has the consumer group, with a still a classic member.
            let r = reload().await;
            {
                let groups = r.groups.borrow();
                let g = groups[GROUP].consumer.as_ref().expect("a consumer group");
                assert!(g.member(&a).is_some_and(|m| m.classic.is_some()));
                assert!(g.member("b").is_some_and(|m| m.classic.is_none()));
                assert!(groups[GROUP].members.is_empty());
            }

            // b leaves: only a classic member is left, and the group is classic again,
            // rebalancing at a's epoch (the group's before b left).
            let mut bye = join("b");
            bye.member_epoch = -1;
            beat(&r, &log, bye).await.expect("b leaves");
            {
                let groups = r.groups.borrow();
                let g = &groups[GROUP];
                assert!(g.consumer.is_none());
                assert_eq!(g.state, GroupState::PreparingRebalance);
                assert_eq!(g.generation, 2);
            }
            let classic = reload().await;
            let groups = classic.groups.borrow();
            let g = &groups[GROUP];
            assert!(g.consumer.is_none());
            assert_eq!((g.generation, g.members.len()), (2, 1));
            assert!(g.members.contains_key(&a));
        });
    }

    #[test]
    fn transactional_offsets_wait_for_their_marker_and_survive_a_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let c = loaded(&log).await;
            assert_eq!(commits(&c, &log, commit(&[(0, 1)])).await, vec![Ok(())]);
            // Producer 7 commits partitions 0 and 1 in a transaction: pending.
            assert_eq!(
                commits(&c, &log, txn_commit(7, 0, &[(0, 10), (1, 11)])).await,
                vec![Ok(()), Ok(())]
            );
            assert_eq!(
                fetched(&c, &log, false).await,
                vec![Ok(Some(1)), Ok(None), Ok(None)]
            );
            assert_eq!(
                fetched(&c, &log, true).await,
                vec![UNSTABLE, UNSTABLE, Ok(None)]
            );
            // The commit was written as one transactional batch: it holds the LSO.
            assert!(log.last_stable_offset() < log.high_watermark());
            end_txn(&c, &log, 7, 0, true).await;
            assert_eq!(
                fetched(&c, &log, true).await,
                vec![Ok(Some(10)), Ok(Some(11)), Ok(None)]
            );
            // Producer 8 commits partition 2 and aborts: nothing of it is seen.
            commits(&c, &log, txn_commit(8, 3, &[(2, 20), (0, 99)])).await;
            assert_eq!(
                fetched(&c, &log, true).await,
                vec![UNSTABLE, Ok(Some(11)), UNSTABLE]
            );
            end_txn(&c, &log, 8, 3, false).await;
            let want = vec![Ok(Some(10)), Ok(Some(11)), Ok(None)];
            assert_eq!(fetched(&c, &log, true).await, want);
            // Producer 9 leaves a transaction open.
            commits(&c, &log, txn_commit(9, 0, &[(2, 30)])).await;
            // A second coordinator replays the log: the same offsets, 9's pending.
            let replayed = loaded(&log).await;
            assert_eq!(
                fetched(&replayed, &log, true).await,
                vec![Ok(Some(10)), Ok(Some(11)), UNSTABLE]
            );
            assert_eq!(fetched(&replayed, &log, false).await, want);
            // Its marker, once written, commits it there.
            end_txn(&replayed, &log, 9, 0, true).await;
            assert_eq!(
                fetched(&replayed, &log, true).await,
                vec![Ok(Some(10)), Ok(Some(11)), Ok(Some(30))]
            );
            // Unloading forgets everything, pending offsets included.
            commits(&replayed, &log, txn_commit(7, 1, &[(0, 40)])).await;
            replayed.unload_partition(replayed.offsets_partition(GROUP));
            assert!(replayed.groups.borrow().is_empty());
            assert!(replayed.txn_groups.borrow().is_empty());
            log.close().await;
        });
    }

    #[test]
    fn a_record_of_a_newer_version_keeps_the_partition_unserved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let c = loaded(&log).await;
            assert_eq!(commits(&c, &log, commit(&[(0, 1)])).await, vec![Ok(())]);
            // An offset commit of value version 9, as a later release might write it.
            let key = rec::encode_key(&RecordKey::Offset {
                group: GROUP.into(),
                topic: "t".into(),
                partition: 0,
            });
            let mut b = BatchBuilder::new(0);
            b.push(&Record {
                key: Some(&key),
                value: Some(b"\x00\x09later"),
                headers: &[],
                timestamp_delta: 0,
            });
            let ticket = log.append(&b.build()).expect("append");
            log.wait_committed(ticket).await.expect("committed");
            // The replay stops there: the group is not served from what it read before.
            let replayed = loaded(&log).await;
            assert!(!replayed.serves_group(GROUP));
            assert!(replayed.groups.borrow().is_empty());
            assert_eq!(
                commits(&replayed, &log, commit(&[(0, 2)])).await,
                vec![Err(GroupError::CoordinatorNotAvailable)]
            );
            log.close().await;
        });
    }

    #[test]
    fn a_replay_takes_the_later_record_between_regular_and_transactional_commits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let c = loaded(&log).await;
            // Partition 1: a regular commit, then the transactional one (which wins).
            commits(&c, &log, commit(&[(1, 1)])).await;
            commits(&c, &log, txn_commit(7, 0, &[(0, 10), (1, 11)])).await;
            // Partition 0: the transactional commit, then a regular one before the
            // marker (which wins).
            commits(&c, &log, commit(&[(0, 5)])).await;
            end_txn(&c, &log, 7, 0, true).await;
            let want = vec![Ok(Some(5)), Ok(Some(11)), Ok(None)];
            assert_eq!(fetched(&c, &log, true).await, want);
            let replayed = loaded(&log).await;
            assert_eq!(fetched(&replayed, &log, true).await, want);
            log.close().await;
        });
    }

    #[test]
    fn committed_offsets_list_whole_groups_in_order_within_the_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let c = loaded(&log).await;
            // A second group coordinated by the same partition, named after "g".
            let other = (0..10_000)
                .map(|i| format!("h{i}"))
                .find(|g| c.offsets_partition(g) == c.offsets_partition(GROUP))
                .expect("a group of the same partition");
            commits(&c, &log, commit(&[(0, 5), (1, 7)])).await;
            let GroupOp::Commit(mut theirs) = commit(&[(0, 3)]) else {
                unreachable!()
            };
            theirs.group = other.clone();
            commits(&c, &log, GroupOp::Commit(theirs)).await;
            // A transaction's commit is pending, not committed: not listed.
            commits(&c, &log, txn_commit(7, 0, &[(2, 9)])).await;
            let listed = |max| {
                let o = c.committed_offsets(max);
                let rows: Vec<_> = o
                    .offsets
                    .iter()
                    .map(|o| (o.group.clone(), o.partition, o.committed))
                    .collect();
                (rows, o.groups_omitted)
            };
            let g = |p, o| (GROUP.to_string(), p, o);
            let all = vec![g(0, 5), g(1, 7), (other.clone(), 0, 3)];
            assert_eq!(listed(10), (all, 0));
            // "g" (2 offsets) fits a bound of 2, "h…" then does not: left out whole.
            assert_eq!(listed(2), (vec![g(0, 5), g(1, 7)], 1));
            // Nor does "g" fit 1; "h…" does.
            assert_eq!(listed(1), (vec![(other, 0, 3)], 1));
            log.close().await;
        });
    }

    #[test]
    fn a_fenced_producer_epoch_is_refused_and_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let c = loaded(&log).await;
            commits(&c, &log, txn_commit(7, 5, &[(0, 10)])).await;
            let end = log.log_end_offset();
            assert_eq!(
                commits(&c, &log, txn_commit(7, 4, &[(0, 11)])).await,
                vec![Err(GroupError::InvalidProducerEpoch)]
            );
            assert_eq!(log.log_end_offset(), end);
            // Twice the same commit of the current epoch is two writes (no sequence).
            commits(&c, &log, txn_commit(7, 5, &[(0, 12)])).await;
            commits(&c, &log, txn_commit(7, 5, &[(0, 12)])).await;
            assert_eq!(log.log_end_offset(), end + 2);
            end_txn(&c, &log, 7, 5, true).await;
            assert_eq!(fetched(&c, &log, true).await[0], Ok(Some(12)));
            log.close().await;
        });
    }

    #[test]
    fn transactional_commits_check_the_group_as_kafka_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("__consumer_offsets-0");
        run(move || async move {
            let log = open(&path).await;
            let c = loaded(&log).await;
            let mut named = txn_commit(7, 0, &[(0, 10)]);
            if let GroupOp::TxnCommit(r) = &mut named {
                r.generation = 3;
                r.member_id = "m".into();
            }
            assert_eq!(
                commits(&c, &log, named).await,
                vec![Err(GroupError::IllegalGeneration)],
                "a group that does not exist knows no generation"
            );
            let mut metadata = txn_commit(7, 0, &[(0, 10), (1, 11)]);
            if let GroupOp::TxnCommit(r) = &mut metadata {
                r.offsets[1].4 = "x".repeat(OFFSET_METADATA_MAX_BYTES + 1);
            }
            assert_eq!(
                commits(&c, &log, metadata).await,
                vec![Ok(()), Err(GroupError::OffsetMetadataTooLarge)]
            );
            // A group with only pending offsets exists; its deletion writes tombstones
            // for them, so its transaction's commit brings none back.
            assert!(c
                .groups
                .borrow()
                .get(GROUP)
                .is_some_and(|g| g.has_offsets()));
            match ask(
                &c,
                &log,
                GroupOp::Delete {
                    group: GROUP.into(),
                },
            )
            .await
            {
                GroupAnswer::Done(r) => assert_eq!(r, Ok(())),
                other => panic!("{other:?}"),
            }
            end_txn(&c, &log, 7, 0, true).await;
            assert_eq!(
                fetched(&c, &log, true).await,
                vec![Ok(None), Ok(None), Ok(None)]
            );
            let replayed = loaded(&log).await;
            assert_eq!(
                fetched(&replayed, &log, true).await,
                vec![Ok(None), Ok(None), Ok(None)]
            );
            log.close().await;
        });
    }
}

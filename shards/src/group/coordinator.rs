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
//! committed offsets; group records bring the group back, Empty — its members must
//! rejoin, as after a Kafka coordinator failover. When it stops leading one, its groups
//! are forgotten (`unload_partition`). Until a partition is loaded its groups are
//! answered COORDINATOR_NOT_AVAILABLE (retriable).
//!
//! Invariants: a group is only touched on its coordinator shard, and only while its
//! partition is loaded; no `RefCell` borrow is held across an `.await`; an answer to a
//! commit means its records are committed (on every in-sync replica, synced).
//!
//! `__consumer_offsets` is a compacted topic: the log cleaner keeps the latest record of
//! every key (group metadata, each committed offset) and drops tombstones after
//! `delete.retention.ms`, so replay from the log start stays complete and short.
//!
//! Offset retention (`expire_offsets`): a group Empty for `offsets.retention.minutes`
//! loses the offsets not committed within that time (KIP-211). The Empty clock is
//! monotonic and starts again at a restart, so a restart can only lengthen retention.

use super::offsets_record::{self as rec, GroupValue, MemberValue, OffsetValue, RecordKey};
use super::state::{Group, GroupState};
use super::types::*;
use super::{partition_for_group, OFFSETS_TOPIC};
use crate::routing::TopicPartition;
use corelog_partition::{AckError, Partition, Reader};
use corelog_storage::batch;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use futures::channel::oneshot;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
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
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            offsets_partitions: super::OFFSETS_TOPIC_PARTITIONS_DEFAULT,
            initial_rebalance_delay: Duration::from_millis(3000),
            offsets_segment_bytes: 100 << 20,
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
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
    /// The partitions whose groups are loaded.
    loaded: RefCell<HashSet<i32>>,
    /// Bumped at every load and unload of a partition: a load that finds it moved was
    /// overtaken and undoes itself.
    generations: RefCell<HashMap<i32, u64>>,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> GroupCoordinator {
        GroupCoordinator {
            config,
            groups: RefCell::new(HashMap::new()),
            loaded: RefCell::new(HashSet::new()),
            generations: RefCell::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn offsets_partition(&self, group: &str) -> i32 {
        partition_for_group(group, self.config.offsets_partitions)
    }

    fn next_generation(&self, partition: i32) -> u64 {
        let mut generations = self.generations.borrow_mut();
        let g = generations.entry(partition).or_insert(0);
        *g += 1;
        *g
    }

    /// Replays `__consumer_offsets` partition `partition` (`log`, which this broker now
    /// leads) to its log end: what the previous leader wrote is committed as soon as the
    /// followers confirm it, and this leader's view must include it.
    pub async fn load_partition(&self, partition: i32, log: Rc<Partition>) {
        let generation = self.next_generation(partition);
        let mut records = 0usize;
        let mut offset = log.log_start_offset();
        let end = log.log_end_offset();
        while offset < end {
            let read = match log.read_as(offset, -1, 1 << 20, Reader::Replica).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(partition, error = %e, "reading __consumer_offsets; groups of this partition start empty");
                    break;
                }
            };
            if read.records.is_empty() {
                break;
            }
            for item in batch::batches(&read.records) {
                let Ok((h, range)) = item else { break };
                offset = h.last_offset() + 1;
                let Some(bytes) = read.records.get(range) else {
                    break;
                };
                for r in batch::records(bytes).unwrap_or_default() {
                    records += 1;
                    self.apply(r.key, r.value);
                }
            }
            glommio::yield_if_needed().await;
        }
        if self.generations.borrow().get(&partition) != Some(&generation) {
            // Unloaded (or loaded again) meanwhile: what this replay added is not ours.
            self.forget_partition(partition);
            return;
        }
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
    }

    fn serves(&self, op: &GroupOp) -> bool {
        match op.group() {
            Some(g) => self.loaded.borrow().contains(&self.offsets_partition(g)),
            None => true,
        }
    }

    fn apply(&self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let Some(key) = key.and_then(|k| rec::decode_key(k).ok()) else {
            return;
        };
        let mut groups = self.groups.borrow_mut();
        match key {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => match value.map(rec::decode_offset_value) {
                Some(Ok(v)) => {
                    let g = groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(group));
                    g.offsets.insert(
                        (topic, partition),
                        Committed {
                            offset: v.offset,
                            leader_epoch: v.leader_epoch,
                            metadata: v.metadata,
                            commit_timestamp_ms: v.commit_timestamp_ms,
                        },
                    );
                }
                Some(Err(_)) => {}
                None => {
                    if let Some(g) = groups.get_mut(&group) {
                        g.offsets.remove(&(topic, partition));
                    }
                }
            },
            RecordKey::GroupMetadata { group } => match value.map(rec::decode_group_value) {
                Some(Ok(v)) => {
                    let g = groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(group));
                    g.generation = g.generation.max(v.generation);
                    g.protocol_type = Some(v.protocol_type);
                }
                Some(Err(_)) => {}
                None => {
                    // Offsets live on independently of the group record (as in Kafka):
                    // a group tombstone forgets the group only when none are left.
                    if groups.get(&group).is_some_and(|g| g.offsets.is_empty()) {
                        groups.remove(&group);
                    } else if let Some(g) = groups.get_mut(&group) {
                        g.protocol_type = None;
                    }
                }
            },
        }
    }

    /// Serves one operation. `log_of` finds this shard's `__consumer_offsets` partition.
    pub async fn handle(
        &self,
        op: GroupOp,
        log_of: impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> GroupAnswer {
        if !self.serves(&op) {
            return not_available(op);
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
                let (tx, rx) = oneshot::channel();
                {
                    let mut groups = self.groups.borrow_mut();
                    let g = groups
                        .entry(req.group.clone())
                        .or_insert_with(|| Group::new(req.group.clone()));
                    g.join(req, now, self.config.initial_rebalance_delay, tx);
                }
                // A waiter dropped unanswered went with its group: this broker no
                // longer coordinates it.
                let answer = rx.await.unwrap_or_else(|_| {
                    JoinAnswer::error(GroupError::NotCoordinator, String::new())
                });
                GroupAnswer::Join(answer)
            }
            GroupOp::Sync(req) => {
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
                    Some(g) => g.heartbeat(&req, now),
                    None => Err(GroupError::UnknownMemberId),
                })
            }
            GroupOp::Leave { group, members } => {
                let mut groups = self.groups.borrow_mut();
                GroupAnswer::Leave(match groups.get_mut(&group) {
                    Some(g) => Ok(g.leave(&members, now)),
                    None => Err(GroupError::UnknownMemberId),
                })
            }
            GroupOp::Commit(req) => GroupAnswer::Commit(self.commit(req, &log_of).await),
            GroupOp::FetchOffsets { group, topics } => {
                let groups = self.groups.borrow();
                let Some(g) = groups.get(&group) else {
                    // Unknown group: every asked partition has no committed offset.
                    let out = topics
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p, None)))
                        .collect();
                    return GroupAnswer::Offsets(Ok(out));
                };
                let out = match topics {
                    None => g
                        .offsets
                        .iter()
                        .map(|((t, p), c)| (t.clone(), *p, Some(c.clone())))
                        .collect(),
                    Some(list) => list
                        .into_iter()
                        .flat_map(|(t, ps)| {
                            ps.into_iter()
                                .map(|p| (t.clone(), p, g.offsets.get(&(t.clone(), p)).cloned()))
                                .collect::<Vec<_>>()
                        })
                        .collect(),
                };
                GroupAnswer::Offsets(Ok(out))
            }
            GroupOp::Describe { group } => {
                let groups = self.groups.borrow();
                GroupAnswer::Described(match groups.get(&group) {
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
                GroupAnswer::Listed(
                    groups
                        .values()
                        .map(|g| GroupListing {
                            group: g.id.clone(),
                            protocol_type: g.protocol_type.clone().unwrap_or_default(),
                            state: g.state.name(),
                        })
                        .collect(),
                )
            }
            GroupOp::Delete { group } => GroupAnswer::Done(self.delete(&group, &log_of).await),
            GroupOp::DeleteOffsets { group, partitions } => {
                GroupAnswer::OffsetsDeleted(self.delete_offsets(&group, partitions, &log_of).await)
            }
        }
    }

    /// Runs the timers of every group: session expiry, join-phase timeouts.
    pub fn tick(&self) {
        let now = Instant::now();
        for g in self.groups.borrow_mut().values_mut() {
            g.tick(now);
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
        if let Err(e) = self.append(&req.group, &records, log_of).await {
            for (i, _) in &keys {
                results[*i] = Err(e.clone());
            }
            return results;
        }
        let mut groups = self.groups.borrow_mut();
        let g = groups
            .entry(req.group.clone())
            .or_insert_with(|| Group::new(req.group.clone()));
        for (i, _) in &keys {
            let (topic, partition, offset, epoch, metadata) = &req.offsets[*i];
            g.offsets.insert(
                (topic.clone(), *partition),
                Committed {
                    offset: *offset,
                    leader_epoch: *epoch,
                    metadata: metadata.clone(),
                    commit_timestamp_ms: ts,
                },
            );
        }
        results
    }

    async fn delete(
        &self,
        group: &str,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(), GroupError> {
        let tombstones = {
            let groups = self.groups.borrow();
            let g = groups.get(group).ok_or(GroupError::GroupIdNotFound)?;
            if !g.is_empty() {
                return Err(GroupError::GroupNotEmpty);
            }
            let mut t: Vec<(Vec<u8>, Option<Vec<u8>>)> = g
                .offsets
                .keys()
                .map(|(topic, partition)| {
                    (
                        rec::encode_key(&RecordKey::Offset {
                            group: group.to_string(),
                            topic: topic.clone(),
                            partition: *partition,
                        }),
                        None,
                    )
                })
                .collect();
            t.push((
                rec::encode_key(&RecordKey::GroupMetadata {
                    group: group.to_string(),
                }),
                None,
            ));
            t
        };
        self.append(group, &tombstones, log_of).await?;
        let mut groups = self.groups.borrow_mut();
        if groups.get(group).map(|g| g.is_empty()).unwrap_or(false) {
            groups.remove(group);
        }
        Ok(())
    }

    async fn delete_offsets(
        &self,
        group: &str,
        partitions: Vec<(String, i32)>,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let (results, tombstones, stamps) = {
            let groups = self.groups.borrow();
            let g = groups.get(group).ok_or(GroupError::GroupIdNotFound)?;
            let subscribed = g.subscribed_topics();
            let mut results = Vec::with_capacity(partitions.len());
            let mut tombstones = Vec::new();
            let mut stamps = Vec::new();
            for (topic, partition) in &partitions {
                if subscribed.iter().any(|t| t == topic) {
                    results.push(Err(GroupError::GroupSubscribedToTopic));
                } else {
                    results.push(Ok(()));
                    if let Some(c) = g.offsets.get(&(topic.clone(), *partition)) {
                        stamps.push(((topic.clone(), *partition), c.commit_timestamp_ms));
                        tombstones.push((
                            rec::encode_key(&RecordKey::Offset {
                                group: group.to_string(),
                                topic: topic.clone(),
                                partition: *partition,
                            }),
                            None,
                        ));
                    }
                }
            }
            (results, tombstones, stamps)
        };
        if !tombstones.is_empty() {
            self.append(group, &tombstones, log_of).await?;
            let mut groups = self.groups.borrow_mut();
            if let Some(g) = groups.get_mut(group) {
                for (key, stamp) in &stamps {
                    // Only what was tombstoned: a commit made during the append stays.
                    if g.offsets
                        .get(key)
                        .is_some_and(|c| c.commit_timestamp_ms == *stamp)
                    {
                        g.offsets.remove(key);
                    }
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
        let value = {
            let mut groups = self.groups.borrow_mut();
            let Some(g) = groups.get_mut(group) else {
                return Ok(());
            };
            g.dirty = false;
            let protocol = g.protocol.clone();
            GroupValue {
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
            }
        };
        let record = (
            rec::encode_key(&RecordKey::GroupMetadata {
                group: group.to_string(),
            }),
            Some(rec::encode_group_value(&value)),
        );
        self.append(group, &[record], log_of).await
    }

    /// Expires the committed offsets of groups that have been Empty for the retention
    /// period (and were not committed to within it), writing tombstones; a group left
    /// with nothing is forgotten. Kafka's rule since 2.1 (KIP-211).
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
                let expired: Vec<((String, i32), i64)> = g
                    .offsets
                    .iter()
                    .filter(|(_, c)| now.saturating_sub(c.commit_timestamp_ms) >= retention_ms)
                    .map(|(k, c)| (k.clone(), c.commit_timestamp_ms))
                    .collect();
                let forget = expired.len() == g.offsets.len();
                (expired, forget)
            };
            if expired.is_empty() && !forget_group {
                continue;
            }
            let mut tombstones: Vec<(Vec<u8>, Option<Vec<u8>>)> = expired
                .iter()
                .map(|((topic, partition), _)| {
                    (
                        rec::encode_key(&RecordKey::Offset {
                            group: group.clone(),
                            topic: topic.clone(),
                            partition: *partition,
                        }),
                        None,
                    )
                })
                .collect();
            if forget_group {
                tombstones.push((
                    rec::encode_key(&RecordKey::GroupMetadata {
                        group: group.clone(),
                    }),
                    None,
                ));
            }
            if let Err(e) = self.append(&group, &tombstones, &log_of).await {
                tracing::warn!(group = %group, error = %e, "expiring offsets");
                continue;
            }
            let mut groups = self.groups.borrow_mut();
            if let Some(g) = groups.get_mut(&group) {
                for (k, stamp) in &expired {
                    // Only what was tombstoned: a newer commit of the same key stays.
                    if g.offsets
                        .get(k)
                        .is_some_and(|c| c.commit_timestamp_ms == *stamp)
                    {
                        g.offsets.remove(k);
                        count += 1;
                    }
                }
                if forget_group && g.state == GroupState::Empty && g.offsets.is_empty() {
                    groups.remove(&group);
                }
            }
            tracing::info!(group = %group, offsets = expired.len(), "expired committed offsets of an empty group");
        }
        count
    }

    /// Appends (key, value-or-tombstone) records to the group's partition and waits until
    /// they are durable.
    async fn append(
        &self,
        group: &str,
        records: &[(Vec<u8>, Option<Vec<u8>>)],
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(), GroupError> {
        let partition = self.offsets_partition(group);
        let log = log_of(partition).ok_or(GroupError::CoordinatorNotAvailable)?;
        let mut b = BatchBuilder::new(now_ms());
        for (k, v) in records {
            b.push(&Record {
                key: Some(k),
                value: v.as_deref(),
                headers: &[],
                timestamp_delta: 0,
            });
        }
        let bytes = b.build();
        if !log.is_leader() {
            return Err(GroupError::NotCoordinator);
        }
        // Kafka answers a commit that cannot reach enough replicas as a coordinator that
        // is not available (clients retry).
        if log.isr_len() < log.min_insync_replicas() {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let ticket = log.append(&bytes).map_err(|e| match e {
            // Not retriable: the same commit will never fit (Kafka's INVALID_COMMIT_OFFSET_SIZE).
            corelog_storage::AppendError::InvalidBatch(
                corelog_storage::batch::BatchError::TooLarge { .. },
            ) => GroupError::CommitTooLarge,
            other => GroupError::Storage(other.to_string()),
        })?;
        log.wait_committed(ticket).await.map_err(|e| match e {
            AckError::NotLeader => GroupError::NotCoordinator,
            AckError::NotEnoughReplicasAfterAppend => GroupError::CoordinatorNotAvailable,
            AckError::Append(e) => GroupError::Storage(e.to_string()),
        })
    }
}

fn not_available(op: GroupOp) -> GroupAnswer {
    let e = GroupError::CoordinatorNotAvailable;
    match op {
        GroupOp::Join(r) => GroupAnswer::Join(JoinAnswer::error(e, r.member_id)),
        GroupOp::Sync(_) => GroupAnswer::Sync(SyncAnswer::error(e)),
        GroupOp::Heartbeat(_) | GroupOp::Delete { .. } => GroupAnswer::Done(Err(e)),
        GroupOp::Leave { .. } => GroupAnswer::Leave(Err(e)),
        GroupOp::Commit(r) => GroupAnswer::Commit(vec![Err(e); r.offsets.len()]),
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
    }
}

/// The `__consumer_offsets` partition of this coordinator's shard, as a topic-partition.
pub fn offsets_tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: OFFSETS_TOPIC.into(),
        partition,
    }
}

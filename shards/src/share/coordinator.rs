//! A shard's share coordinator (KIP-932): the durable state of the share partitions
//! whose `__share_group_state` partition this shard leads, served to partition leaders
//! and the group coordinator through the share-group state APIs (Initialize, Read,
//! Write, Delete, ReadSummary).
//!
//! A share partition (group, topic id, partition) is keyed as Kafka keys it,
//! `group:topicId:partition` with the topic id in Kafka's base64 form, and lives in
//! partition `abs(javaHash(key)) % partitions` of `__share_group_state`, so a cluster
//! places its share state where Kafka would. Each operation is checked against the key's
//! state (`state.rs`: epochs, initialization), its record appended, applied to the
//! state at once — so the next operation on the key sees it, in log order — and answered
//! once committed (acks=all). A read from a newer leader epoch records that epoch first:
//! from then on the older leader's writes are FENCED_LEADER_EPOCH.
//!
//! The topic is `cleanup.policy=delete` with infinite retention, as Kafka creates it: the
//! coordinator prunes it itself (`prune`). Every key's state is whole from its latest
//! snapshot on, so the log before the oldest of those snapshots is redundant and is
//! deleted (DeleteRecords' log start move); a key whose snapshot is older than
//! `cold_snapshot_after` gets a fresh snapshot first, so a quiet share partition does
//! not hold the log back.
//!
//! Invariants: a key is only touched on its coordinator shard while its partition is
//! loaded; no `RefCell` borrow is held across an `.await`; an answer means its record is
//! committed; replaying the partition from its start gives the states as they were.

use super::records::{self, ShareKey};
use super::state::{PersistedState, StateError, StateRecord, StateWrite};
use crate::coordinator_log::{skip_record, NewerRecord, ReplayError};
use crate::group::java_string_hash;
use base64::Engine;
use corelog_partition::{AckError, Partition};
use corelog_storage::batch;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

/// Kafka's `share.coordinator.state.topic.num.partitions` default.
pub const SHARE_STATE_PARTITIONS_DEFAULT: i32 = 50;

#[derive(Debug, Clone)]
pub struct ShareCoordinatorConfig {
    /// `share.coordinator.state.topic.num.partitions`.
    pub partitions: i32,
    /// `share.coordinator.snapshot.update.records.per.snapshot`.
    pub updates_per_snapshot: u32,
    /// `share.coordinator.cold.partition.snapshot.interval.ms`.
    pub cold_snapshot_after: Duration,
}

impl Default for ShareCoordinatorConfig {
    fn default() -> Self {
        ShareCoordinatorConfig {
            partitions: SHARE_STATE_PARTITIONS_DEFAULT,
            updates_per_snapshot: super::state::UPDATES_PER_SNAPSHOT,
            cold_snapshot_after: Duration::from_secs(300),
        }
    }
}

/// A `__share_group_state` partition, as a topic-partition.
pub fn share_state_tp(partition: i32) -> crate::routing::TopicPartition {
    crate::routing::TopicPartition {
        topic: SHARE_STATE_TOPIC.into(),
        partition,
    }
}

/// Kafka's string form of a topic id (`Uuid.toString`): URL-safe base64, unpadded.
pub fn topic_id_string(id: uuid::Uuid) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// Kafka's coordinator key of a share partition (`SharePartitionKey.asCoordinatorKey`).
pub fn coordinator_key(key: &ShareKey) -> String {
    format!(
        "{}:{}:{}",
        key.group,
        topic_id_string(key.topic),
        key.partition
    )
}

/// A share partition from its coordinator key (FindCoordinator v6's key type 2): read
/// from the right, so a group id may hold colons. `None` for anything else.
pub fn parse_coordinator_key(key: &str) -> Option<ShareKey> {
    let (rest, partition) = key.rsplit_once(':')?;
    let (group, topic) = rest.rsplit_once(':')?;
    let partition: i32 = partition.parse().ok().filter(|p| *p >= 0)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(topic)
        .ok()?;
    let topic = uuid::Uuid::from_slice(&bytes).ok()?;
    (!group.is_empty()).then(|| ShareKey {
        group: group.to_string(),
        topic,
        partition,
    })
}

/// The `__share_group_state` partition of a share partition.
pub fn partition_for(key: &ShareKey, partitions: i32) -> i32 {
    assert!(partitions > 0, "the state topic has partitions");
    (java_string_hash(&coordinator_key(key)) & 0x7fff_ffff) % partitions
}

/// One state operation on one share partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateOp {
    /// InitializeShareGroupState: a fresh snapshot at `state_epoch`, starting at
    /// `start_offset` (-1: where `share.auto.offset.reset` says, decided by the leader).
    Initialize {
        state_epoch: i32,
        start_offset: i64,
    },
    /// ReadShareGroupState by the leader at `leader_epoch` (-1: no epoch).
    Read {
        leader_epoch: i32,
    },
    Write(StateWrite),
    Delete,
    ReadSummary {
        leader_epoch: i32,
    },
}

/// What a read answers (a summary leaves `batches` empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateView {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    pub delivery_complete_count: i32,
    pub batches: Vec<super::partition::StateBatch>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateFailure {
    #[error("this broker does not coordinate the share partition's state")]
    NotCoordinator,
    #[error("the share coordinator is loading or unavailable")]
    CoordinatorNotAvailable,
    #[error("the cluster has no such topic or partition")]
    UnknownTopicOrPartition,
    #[error("{0}")]
    Fenced(StateError),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("storing share state failed: {0}")]
    Storage(String),
}

/// One key's state and the offset of its latest snapshot (what pruning keeps).
#[derive(Debug, Clone)]
struct Kept {
    state: PersistedState,
    snapshot_offset: i64,
    snapshot_ms: i64,
}

pub struct ShareCoordinator {
    config: ShareCoordinatorConfig,
    states: RefCell<HashMap<ShareKey, Kept>>,
    loaded: RefCell<HashSet<i32>>,
    /// Bumped at every load and unload: a load that finds it moved was overtaken.
    generations: RefCell<HashMap<i32, u64>>,
}

use super::now_ms;

impl ShareCoordinator {
    pub fn new(config: ShareCoordinatorConfig) -> ShareCoordinator {
        ShareCoordinator {
            config,
            states: RefCell::new(HashMap::new()),
            loaded: RefCell::new(HashSet::new()),
            generations: RefCell::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &ShareCoordinatorConfig {
        &self.config
    }

    pub fn partition_of(&self, key: &ShareKey) -> i32 {
        partition_for(key, self.config.partitions)
    }

    pub fn serves(&self, key: &ShareKey) -> bool {
        self.loaded.borrow().contains(&self.partition_of(key))
    }

    fn next_generation(&self, partition: i32) -> u64 {
        let mut g = self.generations.borrow_mut();
        let n = g.entry(partition).or_insert(0);
        *n += 1;
        *n
    }

    /// Replays `__share_group_state` partition `partition` (which this broker now leads)
    /// to its log end, then serves its keys.
    pub async fn load_partition(&self, partition: i32, log: Rc<Partition>) {
        let generation = self.next_generation(partition);
        let mut records = 0usize;
        let replayed = crate::coordinator_log::replay(
            &log,
            || log.log_end_offset(),
            |h, bytes| {
                if h.is_control() {
                    return Ok(());
                }
                for r in batch::records(bytes).unwrap_or_default() {
                    records += 1;
                    self.apply(r.key, r.value, r.offset, h.max_timestamp)?;
                }
                Ok(())
            },
        )
        .await;
        match replayed {
            Ok(()) => {}
            Err(ReplayError::Read(e)) => {
                tracing::error!(partition, error = %e, "reading __share_group_state; its share partitions start empty");
            }
            Err(ReplayError::Newer(e)) => {
                // Serving what was read so far would answer from a misread state.
                tracing::error!(
                    partition = %format!("__share_group_state-{partition}"),
                    error = %e,
                    "refusing to serve this partition's share state: run the release that wrote it"
                );
                self.forget(partition);
                return;
            }
        }
        if self.generations.borrow().get(&partition) != Some(&generation) {
            self.forget(partition);
            return;
        }
        self.loaded.borrow_mut().insert(partition);
        tracing::debug!(partition, records, "share coordinator loaded a partition");
    }

    pub fn unload_partition(&self, partition: i32) {
        self.next_generation(partition);
        if self.loaded.borrow_mut().remove(&partition) {
            self.forget(partition);
            tracing::debug!(partition, "share coordinator unloaded a partition");
        }
    }

    fn forget(&self, partition: i32) {
        let n = self.config.partitions;
        self.states
            .borrow_mut()
            .retain(|k, _| partition_for(k, n) != partition);
    }

    /// Replays one record at `record_offset`, written at `timestamp_ms`; one of a type
    /// or version newer than this release reads is refused.
    fn apply(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        record_offset: i64,
        timestamp_ms: i64,
    ) -> Result<(), NewerRecord> {
        let Some(key) = key else { return Ok(()) };
        let (record_type, key) = match records::decode_key(key) {
            Ok(k) => k,
            Err(e) => return skip_record("share state record key", e, record_offset),
        };
        let mut states = self.states.borrow_mut();
        let Some(value) = value else {
            states.remove(&key);
            return Ok(());
        };
        match records::decode_value(record_type, value) {
            Ok(record) => {
                let kept = states.entry(key).or_insert_with(|| Kept {
                    state: PersistedState::default(),
                    snapshot_offset: record_offset,
                    snapshot_ms: timestamp_ms,
                });
                if matches!(record, StateRecord::Snapshot { .. }) {
                    kept.snapshot_offset = record_offset;
                    kept.snapshot_ms = timestamp_ms;
                }
                kept.state.replay(&record);
            }
            Err(e) => return skip_record("share state record value", e, record_offset),
        }
        Ok(())
    }

    /// Serves one operation on `key`; `log_of` finds this shard's `__share_group_state`
    /// partition.
    pub async fn handle(
        &self,
        key: ShareKey,
        op: StateOp,
        log_of: impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<Option<StateView>, StateFailure> {
        if !self.serves(&key) {
            return Err(StateFailure::CoordinatorNotAvailable);
        }
        if key.partition < 0 || key.topic.is_nil() {
            return Err(StateFailure::InvalidRequest(
                "the topic id is null or the partition negative".into(),
            ));
        }
        let now = now_ms();
        let (record, view) = {
            let states = self.states.borrow();
            let current = states.get(&key).map(|k| &k.state);
            decide(current, &op, self.config.updates_per_snapshot, now)?
        };
        match record {
            Some(record) => self.append(&key, Some(&record), &log_of).await?,
            None if op == StateOp::Delete && self.states.borrow().contains_key(&key) => {
                self.append(&key, None, &log_of).await?
            }
            None => {}
        }
        Ok(view)
    }

    /// Appends one record (`None`: the key's tombstone) and applies it, then waits until
    /// it is committed.
    async fn append(
        &self,
        key: &ShareKey,
        record: Option<&StateRecord>,
        log_of: &impl Fn(i32) -> Option<Rc<Partition>>,
    ) -> Result<(), StateFailure> {
        let log = log_of(self.partition_of(key)).ok_or(StateFailure::CoordinatorNotAvailable)?;
        if !log.is_leader() {
            return Err(StateFailure::NotCoordinator);
        }
        if log.isr_len() < log.min_insync_replicas() {
            return Err(StateFailure::CoordinatorNotAvailable);
        }
        let record_type = record.map_or(records::SNAPSHOT, records::record_type);
        let k = records::encode_key(record_type, key)
            .map_err(|_| StateFailure::InvalidRequest("the group id is too long".into()))?;
        let v = record.map(records::encode_value);
        let now = now_ms();
        let mut b = BatchBuilder::new(now);
        b.push(&Record {
            key: Some(&k),
            value: v.as_deref(),
            headers: &[],
            timestamp_delta: 0,
        });
        let ticket = log
            .append(&b.build())
            .map_err(|e| StateFailure::Storage(e.to_string()))?;
        // Applied at once, in log order with the other appends of this partition.
        let applied = self.apply(Some(&k), v.as_deref(), ticket.base_offset, now);
        debug_assert!(
            applied.is_ok(),
            "a record this release wrote is of a version it reads"
        );
        log.wait_committed(ticket).await.map_err(|e| match e {
            AckError::NotLeader => StateFailure::NotCoordinator,
            AckError::NotEnoughReplicasAfterAppend => StateFailure::CoordinatorNotAvailable,
            AckError::Append(e) => StateFailure::Storage(e.to_string()),
        })
    }

    /// Writes a fresh snapshot of every key of this shard's partitions whose snapshot
    /// is older than `cold_snapshot_after`, then moves each partition's log start to the
    /// oldest snapshot a key still needs. Returns the records deleted.
    pub async fn prune(&self, log_of: impl Fn(i32) -> Option<Rc<Partition>>) -> i64 {
        let now = now_ms();
        let cold_ms =
            i64::try_from(self.config.cold_snapshot_after.as_millis()).unwrap_or(i64::MAX);
        let cold: Vec<(ShareKey, StateRecord)> = self
            .states
            .borrow()
            .iter()
            .filter(|(k, kept)| now - kept.snapshot_ms >= cold_ms && self.serves(k))
            .map(|(k, kept)| (k.clone(), resnapshot(&kept.state, now)))
            .collect();
        for (key, record) in cold {
            if let Err(e) = self.append(&key, Some(&record), &log_of).await {
                tracing::debug!(group = %key.group, error = %e, "a cold share partition's snapshot");
            }
        }
        let mut deleted = 0;
        let partitions: Vec<i32> = self.loaded.borrow().iter().copied().collect();
        for p in partitions {
            let Some(log) = log_of(p) else { continue };
            // With no key left, everything written is redundant.
            let keep = self
                .states
                .borrow()
                .iter()
                .filter(|(k, _)| self.partition_of(k) == p)
                .map(|(_, kept)| kept.snapshot_offset)
                .min()
                .unwrap_or_else(|| log.high_watermark())
                .min(log.high_watermark());
            if keep > log.log_start_offset() {
                let before = log.log_start_offset();
                match log.delete_records(keep).await {
                    Ok(start) => deleted += start - before,
                    Err(e) => {
                        tracing::debug!(partition = p, error = %e, "pruning __share_group_state")
                    }
                }
            }
        }
        deleted
    }
}

/// The same state as one snapshot written now.
fn resnapshot(s: &PersistedState, now_ms: i64) -> StateRecord {
    StateRecord::Snapshot {
        snapshot_epoch: s.snapshot_epoch + 1,
        state_epoch: s.state_epoch,
        leader_epoch: s.leader_epoch,
        start_offset: s.start_offset,
        delivery_complete_count: s.delivery_complete_count,
        create_timestamp_ms: s.create_timestamp_ms,
        write_timestamp_ms: now_ms,
        batches: s.batches.clone(),
    }
}

fn view(s: &PersistedState, with_batches: bool) -> StateView {
    StateView {
        state_epoch: s.state_epoch,
        leader_epoch: s.leader_epoch,
        start_offset: s.start_offset,
        delivery_complete_count: s.delivery_complete_count,
        batches: if with_batches {
            s.batches.clone()
        } else {
            Vec::new()
        },
    }
}

/// What `op` does to a key whose state is `current` (`None`: never initialized, or
/// deleted): the record to write, if any, and the answer — or why it is refused. Pure.
pub fn decide(
    current: Option<&PersistedState>,
    op: &StateOp,
    updates_per_snapshot: u32,
    now_ms: i64,
) -> Result<(Option<StateRecord>, Option<StateView>), StateFailure> {
    let fenced = |e| Err(StateFailure::Fenced(e));
    match op {
        StateOp::Initialize {
            state_epoch,
            start_offset,
        } => {
            let empty = PersistedState::default();
            let s = current.unwrap_or(&empty);
            if current.is_some() && *state_epoch != -1 && *state_epoch < s.state_epoch {
                return fenced(StateError::FencedStateEpoch(*state_epoch, s.state_epoch));
            }
            Ok((
                Some(s.initialize(*state_epoch, *start_offset, now_ms)),
                None,
            ))
        }
        StateOp::Read { leader_epoch } => {
            let Some(s) = current else {
                return Err(StateFailure::InvalidRequest(
                    "the share partition's state was never initialized".into(),
                ));
            };
            if *leader_epoch != -1 && *leader_epoch < s.leader_epoch {
                return fenced(StateError::FencedLeaderEpoch(*leader_epoch, s.leader_epoch));
            }
            // A newer leader records its epoch: the older one is fenced from now on.
            let record = (*leader_epoch > s.leader_epoch)
                .then(|| {
                    s.write(
                        &StateWrite {
                            state_epoch: -1,
                            leader_epoch: *leader_epoch,
                            start_offset: -1,
                            delivery_complete_count: s.delivery_complete_count,
                            batches: Vec::new(),
                        },
                        updates_per_snapshot,
                        now_ms,
                    )
                })
                .transpose()
                .map_err(StateFailure::Fenced)?;
            let mut v = view(s, true);
            v.leader_epoch = v.leader_epoch.max(*leader_epoch);
            Ok((record, Some(v)))
        }
        StateOp::Write(w) => {
            let Some(s) = current else {
                return Err(StateFailure::InvalidRequest(
                    "the share partition's state was never initialized".into(),
                ));
            };
            let record = s
                .write(w, updates_per_snapshot, now_ms)
                .map_err(StateFailure::Fenced)?;
            Ok((Some(record), None))
        }
        StateOp::Delete => Ok((None, None)),
        StateOp::ReadSummary { leader_epoch } => match current {
            // Kafka answers a key it never saw with its defaults, not an error.
            None => Ok((
                None,
                Some(StateView {
                    state_epoch: 0,
                    leader_epoch: 0,
                    start_offset: -1,
                    delivery_complete_count: -1,
                    batches: Vec::new(),
                }),
            )),
            Some(s) if *leader_epoch != -1 && *leader_epoch < s.leader_epoch => {
                fenced(StateError::FencedLeaderEpoch(*leader_epoch, s.leader_epoch))
            }
            Some(s) => Ok((None, Some(view(s, false)))),
        },
    }
}

#[cfg(test)]
mod tests;

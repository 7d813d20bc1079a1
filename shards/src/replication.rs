//! A shard's part in replication: taking up each partition's role from the metadata,
//! recording its followers' fetches, proposing ISR changes to the controller, cutting
//! diverged logs, and checkpointing high watermarks.
//!
//! - **Roles.** After every reconciliation, each open partition becomes what the
//!   metadata says: leader (its `ReplicaSet` from the ISR and partition epoch, its
//!   followers' fetchers stopped) or follower of the named leader (fetched by the
//!   shard's fetcher for that leader, `replica_fetcher`).
//! - **ISR changes** (Kafka's AlterPartition): an expansion is proposed when a
//!   follower's fetch shows it caught up, a shrink by a timer every half
//!   `replica.lag.time.max.ms`. Either names the leader and partition epochs it was
//!   computed in; the controller refuses it if either moved. It takes effect when the
//!   metadata that commits it is published, never before.
//! - **High-watermark checkpoints**: one file per shard,
//!   `replication-offset-checkpoint.<shard>` in the data directory (Kafka's format),
//!   replaced every few seconds when a mark moved, and read (all shards' files, the
//!   highest mark winning) when partitions open.
//!
//! Invariants: roles change only under the shard's admin lock, which opens, drops and
//! truncations hold too; a partition cut and reopened takes up the role the metadata
//! gives it at that moment.

use crate::mesh::{PartitionError, TopicError, TopicPartition};
use crate::metadata::ClusterMetadata;
use crate::replica_fetcher::ReplicaHost;
use crate::shard::Shard;
use corelog_controller::command::{Command, IsrChange, Outcome};
use corelog_controller::image::PartitionImage;
use corelog_partition::{Assignment, Cut, FollowerFetch, IsrProposal, Partition};
use corelog_storage::error::StorageError;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How long a shard waits for the controller to commit an ISR change.
const ALTER_PARTITION_TIMEOUT: Duration = Duration::from_secs(5);

const CHECKPOINT_PREFIX: &str = "replication-offset-checkpoint.";

impl Shard {
    /// Makes every open partition's role what `meta` says.
    pub(crate) async fn apply_roles(
        self: &Rc<Self>,
        meta: &ClusterMetadata,
    ) -> Result<(), TopicError> {
        let _permit = self.admin_lock.acquire_permit(1).await;
        let mut result = Ok(());
        for (tp, log) in self.logs() {
            let Some(state) = meta.partition(&tp.topic, tp.partition) else {
                continue;
            };
            if let Err(e) = self.apply_role(&tp, &log, state) {
                tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "taking up a partition's leadership");
                result = Err(TopicError::Storage(e.to_string()));
            }
        }
        result
    }

    /// Takes up `state` for `log`; a `__consumer_offsets` partition's groups follow its
    /// leadership here.
    pub(crate) fn apply_role(
        self: &Rc<Self>,
        tp: &TopicPartition,
        log: &Rc<Partition>,
        state: &PartitionImage,
    ) -> Result<(), StorageError> {
        let was_leader = log.is_leader();
        self.take_up_role(tp, log, state)?;
        if was_leader && !log.is_leader() {
            // The share partitions of this partition go to its new leader.
            self.share_leader.unload(tp);
        }
        if &*tp.topic == crate::group::OFFSETS_TOPIC && was_leader != log.is_leader() {
            if log.is_leader() {
                let (shard, log, p) = (self.clone(), log.clone(), tp.partition);
                glommio::spawn_local(async move { shard.groups.load_partition(p, log).await })
                    .detach();
            } else {
                self.groups.unload_partition(tp.partition);
            }
        }
        if &*tp.topic == crate::share::coordinator::SHARE_STATE_TOPIC
            && was_leader != log.is_leader()
        {
            if log.is_leader() {
                let (coordinator, log, p) = (self.share_state.clone(), log.clone(), tp.partition);
                glommio::spawn_local(async move { coordinator.load_partition(p, log).await })
                    .detach();
            } else {
                self.share_state.unload_partition(tp.partition);
            }
        }
        if &*tp.topic == crate::txn::TRANSACTION_TOPIC {
            // The coordinator epoch is the leader epoch: a new epoch while leading is a
            // new coordinator too, which loads the partition again.
            let served = self.txns.served_epoch(tp.partition);
            if log.is_leader() && served != Some(log.leader_epoch()) {
                let (txns, log, p) = (self.txns.clone(), log.clone(), tp.partition);
                glommio::spawn_local(async move { txns.load_partition(p, log).await }).detach();
            } else if !log.is_leader() {
                self.txns.unload_partition(tp.partition);
            }
        }
        Ok(())
    }

    fn take_up_role(
        &self,
        tp: &TopicPartition,
        log: &Rc<Partition>,
        state: &PartitionImage,
    ) -> Result<(), StorageError> {
        let node = self.config.node_id;
        if state.leader == node {
            if log.leader_epoch() == state.leader_epoch
                && log.partition_epoch() == Some(state.partition_epoch)
            {
                return Ok(());
            }
            self.fetchers.remove(tp);
            let assignment = Assignment {
                replicas: state.replicas.clone(),
                isr: state.isr.clone(),
                partition_epoch: state.partition_epoch,
            };
            return log.become_leader(state.leader_epoch, node, assignment);
        }
        if log.following() != Some(state.leader) || log.leader_epoch() != state.leader_epoch {
            log.become_follower(state.leader, state.leader_epoch);
        }
        // A log in a failed directory follows nobody: it could not append.
        if state.leader >= 0 && !self.in_failed_dir(log) {
            self.fetchers.assign(tp, state.leader);
        } else {
            self.fetchers.remove(tp);
        }
        Ok(())
    }

    /// Records follower `replica`'s fetch of `log` at `offset` (a read that did not
    /// diverge) and proposes its return to the ISR when due; returns the high watermark
    /// to answer with.
    pub(crate) fn record_follower_fetch(
        &self,
        tp: &TopicPartition,
        log: &Rc<Partition>,
        replica: i32,
        offset: i64,
    ) -> Result<i64, PartitionError> {
        // Kafka's isReplicaIsrEligible: the controller refuses a fenced or stopping
        // broker, so proposing it would only be refused.
        let eligible = || {
            let meta = self.metadata.snapshot();
            meta.is_live(replica).then(|| meta.version())
        };
        match log.record_follower_fetch(replica, offset, eligible) {
            FollowerFetch::Recorded(proposal) => {
                if let Some(p) = proposal {
                    self.propose_isr(tp, log, p);
                }
                Ok(log.high_watermark())
            }
            // A broker the assignment does not name (a stale follower after a
            // reassignment): it refreshes its metadata and stops.
            FollowerFetch::NotLeader | FollowerFetch::UnknownReplica => {
                Err(PartitionError::NotLeaderOrFollower)
            }
        }
    }

    /// Sends `proposal` to the controller; the partition forgets it if it is refused.
    fn propose_isr(&self, tp: &TopicPartition, log: &Rc<Partition>, proposal: IsrProposal) {
        let Some(topic_id) = self.metadata.snapshot().topic(&tp.topic).map(|t| t.id) else {
            log.isr_proposal_failed();
            return;
        };
        let expand = proposal.isr.len() > log.isr_len();
        corelog_metrics::record_isr_proposal(expand);
        tracing::info!(topic = %tp.topic, partition = tp.partition, isr = ?proposal.isr, "proposing an ISR change");
        let proposal_epoch = proposal.partition_epoch;
        let command = Command::AlterPartition {
            broker: self.config.node_id,
            broker_epoch: self.broker_epoch_u64(),
            changes: vec![IsrChange {
                topic_id,
                partition: tp.partition,
                leader_epoch: proposal.leader_epoch,
                partition_epoch: proposal.partition_epoch,
                isr: proposal.isr,
            }],
        };
        let proposing = self.node.propose(command, ALTER_PARTITION_TIMEOUT);
        let (tp, log) = (tp.clone(), log.clone());
        let proposed_in = proposal_epoch;
        glommio::spawn_local(async move {
            match proposing.await {
                Ok(applied) => {
                    let refused = match applied.outcome {
                        Outcome::Items(items) => {
                            items.into_iter().find_map(|r| r.err()).map(|e| e.to_string())
                        }
                        other => Some(format!("unexpected outcome {other:?}")),
                    };
                    match refused {
                        Some(why) => {
                            tracing::info!(topic = %tp.topic, partition = tp.partition, reason = %why, "ISR change refused");
                            corelog_metrics::record_isr_proposal_refused();
                            log.isr_proposal_refused(applied.index, proposed_in);
                        }
                        None => corelog_metrics::record_isr_change(expand),
                    }
                }
                Err(e) => {
                    tracing::info!(topic = %tp.topic, partition = tp.partition, error = %e, "ISR change not committed");
                    log.isr_proposal_failed();
                }
            }
        })
        .detach();
    }

    fn broker_epoch_u64(&self) -> u64 {
        (*self.node.registration().borrow()).unwrap_or(0)
    }

    /// Shrinks the ISR of the partitions this shard leads whose followers lag, every half
    /// lag time, and checkpoints high watermarks, for the shard's life.
    pub fn start_replica_duties(self: &Rc<Self>) {
        let shard = self.clone();
        let lag = self.config.replication.lag_time_max_ms;
        glommio::spawn_local(async move {
            let period = Duration::from_millis(u64::try_from(lag / 2).unwrap_or(0).max(50));
            loop {
                glommio::timer::sleep(period).await;
                let version = shard.metadata.snapshot().version();
                for (tp, log) in shard.logs() {
                    if let Some(p) = log.isr_shrink(lag, version) {
                        shard.propose_isr(&tp, &log, p);
                    }
                }
            }
        })
        .detach();
        let shard = self.clone();
        glommio::spawn_local(async move {
            let mut written: HashMap<TopicPartition, i64> = HashMap::new();
            loop {
                glommio::timer::sleep(shard.config.replication.checkpoint_interval).await;
                if let Err(e) = shard.checkpoint_high_watermarks(&mut written).await {
                    tracing::warn!(shard = shard.id, error = %e, "writing the high-watermark checkpoint");
                }
            }
        })
        .detach();
    }

    /// Replaces this shard's checkpoint when a mark moved since `written` (which it
    /// updates).
    pub(crate) async fn checkpoint_high_watermarks(
        &self,
        written: &mut HashMap<TopicPartition, i64>,
    ) -> std::io::Result<()> {
        let marks: HashMap<TopicPartition, i64> = self
            .logs()
            .into_iter()
            .map(|(tp, log)| (tp, log.high_watermark()))
            .collect();
        if marks == *written {
            return Ok(());
        }
        let text = encode_high_watermarks(&marks);
        let dir = self.config.data_dir.clone();
        let name = format!("{CHECKPOINT_PREFIX}{}", self.id);
        glommio::executor()
            .spawn_blocking(move || {
                corelog_storage::checkpoint::replace_file(
                    &corelog_storage::fs::KernelFs,
                    &dir,
                    &name,
                    text.as_bytes(),
                )
            })
            .await?;
        *written = marks;
        Ok(())
    }

    /// The checkpointed high watermark of `tp` (-1: none), from every shard's file.
    pub(crate) fn checkpointed_high_watermark(&self, tp: &TopicPartition) -> i64 {
        let marks = self
            .hw_checkpoints
            .get_or_init(|| read_checkpoints(&self.config.data_dir));
        marks.get(tp).copied().unwrap_or(-1)
    }
}

impl Shard {
    /// `counters` with this shard's replication gauges filled in (metrics snapshots).
    pub fn replication_metrics(
        &self,
        mut m: corelog_metrics::ReplicationMetrics,
    ) -> corelog_metrics::ReplicationMetrics {
        let now = self.storage_context.now_ms();
        let non_negative = |v: i64| u64::try_from(v).unwrap_or(0);
        for (_, log) in self.logs() {
            let Some(set) = log.replica_set() else {
                if log.following().is_some() {
                    m.followers += 1;
                }
                continue;
            };
            m.leaders += 1;
            m.under_replicated += u64::from(set.isr().len() < set.replicas().len());
            m.under_min_isr += u64::from(set.isr().len() < log.min_insync_replicas());
            let end = log.log_end_offset();
            for f in set.followers() {
                let lag = non_negative(end - f.log_end_offset.max(0));
                m.follower_lag_offsets_max = m.follower_lag_offsets_max.max(lag);
                let behind = non_negative(now - f.last_caught_up_ms);
                m.follower_lag_ms_max = m.follower_lag_ms_max.max(behind);
            }
            m.uncommitted_offsets += non_negative(end - log.high_watermark());
        }
        m
    }
}

/// Every shard's checkpointed marks; where two files name a partition (the shard count
/// changed), the higher mark, since marks only grow.
fn read_checkpoints(dir: &std::path::Path) -> HashMap<TopicPartition, i64> {
    let mut marks = HashMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return marks;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(CHECKPOINT_PREFIX) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        // Another version's lines may not mean what version 0's do. A mark only shortens a
        // follower's wait, so the file is set aside, not refused.
        let version = text.lines().next().unwrap_or_default();
        if version != "0" {
            tracing::warn!(file = %entry.path().display(), version,
                "ignoring a high-watermark checkpoint of a format this release does not read (version 0)");
            continue;
        }
        decode_high_watermarks(&text, &mut marks);
    }
    marks
}

/// A shard's high-watermark checkpoint file (Kafka's `replication-offset-checkpoint`
/// layout: version, count, then `topic partition mark` lines), sorted.
pub fn encode_high_watermarks(marks: &HashMap<TopicPartition, i64>) -> String {
    let mut text = format!("0\n{}\n", marks.len());
    let mut lines: Vec<_> = marks.iter().collect();
    lines.sort_by(|a, b| (&a.0.topic, a.0.partition).cmp(&(&b.0.topic, b.0.partition)));
    for (tp, hw) in lines {
        text.push_str(&format!("{} {} {}\n", tp.topic, tp.partition, hw));
    }
    text
}

/// Adds the marks of one checkpoint file's `text` to `marks`, keeping the higher of two
/// (marks only grow); lines that do not parse are skipped, since a checkpoint only
/// shortens a follower's wait and a lost one costs nothing acknowledged.
pub fn decode_high_watermarks(text: &str, marks: &mut HashMap<TopicPartition, i64>) {
    for line in text.lines().skip(2) {
        let mut fields = line.split(' ');
        let (Some(topic), Some(p), Some(hw)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let (Ok(partition), Ok(hw)) = (p.parse::<i32>(), hw.parse::<i64>()) else {
            continue;
        };
        let tp = TopicPartition {
            topic: Arc::from(topic),
            partition,
        };
        let e = marks.entry(tp).or_insert(hw);
        *e = (*e).max(hw);
    }
}

impl ReplicaHost for Shard {
    fn node_id(&self) -> i32 {
        self.config.node_id
    }

    fn broker_epoch(&self) -> i64 {
        (*self.node.registration().borrow()).map_or(-1, |e| i64::try_from(e).unwrap_or(-1))
    }

    fn metadata(&self) -> Arc<ClusterMetadata> {
        self.metadata.snapshot()
    }

    fn partition(&self, tp: &TopicPartition) -> Option<Rc<Partition>> {
        Shard::partition(self, tp)
    }

    fn throttles(&self) -> &crate::replication_throttle::ReplicationThrottles {
        &self.throttles
    }

    async fn truncate(self: Rc<Self>, tp: TopicPartition, cut: Cut) {
        let _permit = self.admin_lock.acquire_permit(1).await;
        let Some(old) = Shard::partition(&self, &tp) else {
            return;
        };
        if old.following().is_none() {
            return;
        }
        match old.truncate_and_reopen(cut).await {
            Ok(reopened) => {
                self.replace_partition(tp.clone(), reopened.clone());
                let meta = self.metadata.snapshot();
                if let Some(state) = meta.partition(&tp.topic, tp.partition) {
                    if let Err(e) = self.apply_role(&tp, &reopened, state) {
                        tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "taking up a truncated partition's role");
                    }
                }
            }
            Err(e) => {
                // The partition stays closed (refusing everything) until a restart
                // recovers it.
                tracing::error!(topic = %tp.topic, partition = tp.partition, ?cut, error = %e, "cutting a follower's log");
            }
        }
    }
}

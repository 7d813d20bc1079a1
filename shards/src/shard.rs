//! One core's state: the partition table it owns, the services it holds, and the
//! dispatch of the messages other cores send it.
//!
//! A `Shard` lives on one glommio executor and is shared there as `Rc<Shard>`. It owns
//! every partition `p` with `routing::shard_of(topic, p) == id` and is the only code
//! that touches their logs. Other shards reach them only through [`ShardMessage`]s.
//!
//! Services, each with its own message type and none depending on `Shard`: the
//! controller (shard 0, `ControllerRequest`), the group coordinator (`GroupOp`),
//! housekeeping (`HousekeepingMessage`; it sees the partitions through `PartitionSet`),
//! the quota usage inbox, and the producer-id block. They reach other shards through
//! [`Peers`], this shard's end of the mesh, never through the shard itself.
//!
//! Invariants: a partition is open on at most one shard (its owner) and at most once
//! (opens and drops are serialised by `admin_lock`); a handler asserts the partitions it
//! is given are its own; no `RefCell` borrow crosses an `.await`.

use crate::controller::Controller;
use crate::group::coordinator::{offsets_tp, GroupCoordinator};
use crate::group::OFFSETS_TOPIC;
use crate::housekeeping::{Housekeeping, PartitionSet};
use crate::mesh::*;
use crate::metadata::{partition_dir, MetadataStore};
use crate::producer_ids::ProducerIds;
use crate::replication_throttle::Side;
use crate::routing::{shard_of, ShardId};
pub use crate::shard_config::ShardConfig;
use corelog_partition::{Partition, Reader};
use corelog_storage::{AckLevel, LogConfig};
use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Group ticks (100 ms each) between two offset-retention checks. (`__consumer_offsets`
/// is compacted by the log cleaner like any compacted topic.)
const OFFSET_EXPIRY_CHECK_TICKS: u64 = 20;

/// Disk space a shard's active segments may claim ahead of their written ends, shared
/// among its partitions (each gets between 1 and 64 MiB).
const PREALLOCATION_SHARD_BYTES: u64 = 1 << 30;

/// Partitions a shard opens concurrently (topic creation, start-up).
const PARTITION_OPENS_AT_ONCE: usize = 64;

pub struct Shard {
    pub id: ShardId,
    pub config: Arc<ShardConfig>,
    pub metadata: Arc<MetadataStore>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    /// This shard's end of the mesh, shared with the services it holds.
    pub peers: Rc<Peers>,
    pub(crate) admin_lock: Semaphore,
    controller: Option<Controller>,
    /// This broker's controller node: proposals, the registration, the quorum.
    pub node: corelog_controller::ControllerNode,
    /// What `reconcile` last made of the metadata.
    pub(crate) reconciled: RefCell<crate::reconcile::Reconciled>,
    pub groups: GroupCoordinator,
    /// Retention, compaction, producer expiry and the disk budget.
    pub housekeeping: Rc<Housekeeping>,
    /// Producer ids this shard may hand out without asking the controller: `[next, end)`.
    /// Producer ids this shard may hand out (InitProducerId).
    pub producer_ids: ProducerIds,
    /// Other shards' quota usage reports, drained by the broker's quota manager.
    pub quota_usage: crate::client_quota::UsageInbox,
    /// The clock and observer this shard's logs are opened with.
    pub(crate) storage_context: corelog_storage::LogContext,
    /// The followers' fetchers of the partitions this shard follows (`replication`).
    pub(crate) fetchers: crate::replica_fetcher::ReplicaFetchers<Shard>,
    /// The high watermarks checkpointed before this start (`replication`), read once.
    pub(crate) hw_checkpoints: std::cell::OnceCell<HashMap<TopicPartition, i64>>,
    /// The broker's replication throttles, shared by its shards.
    pub throttles: Arc<crate::replication_throttle::ReplicationThrottles>,
    /// The data directory's health (and armed faults), shared by the shards.
    pub data_dir: Arc<crate::storage_context::DataDir>,
}

impl Shard {
    pub fn new(
        id: ShardId,
        config: Arc<ShardConfig>,
        metadata: Arc<MetadataStore>,
        senders: Senders<Envelope>,
        node: corelog_controller::ControllerNode,
        throttles: Arc<crate::replication_throttle::ReplicationThrottles>,
        data_dir: Arc<crate::storage_context::DataDir>,
    ) -> Rc<Shard> {
        let config_shards = config.shard_count;
        let fetch_config = config.replication.fetch.clone();
        let storage_context =
            crate::storage_context::storage_context(config.open_segment_files, &data_dir);
        let peers = Rc::new(Peers::new(id, config.shard_count, senders));
        let shard = Rc::new(Shard {
            id,
            controller: (id == crate::routing::CONTROLLER_SHARD)
                .then(|| Controller::new(metadata.clone(), config.clone(), node.clone())),
            node,
            reconciled: RefCell::new(Default::default()),
            groups: GroupCoordinator::new(config.groups.clone()),
            housekeeping: Rc::new(Housekeeping::new(
                config.housekeeping.clone(),
                config.data_dir.clone(),
                config.shard_count,
            )),
            config,
            metadata,
            partitions: RefCell::new(HashMap::new()),
            peers,
            admin_lock: Semaphore::new(1),
            producer_ids: ProducerIds::default(),
            quota_usage: crate::client_quota::UsageInbox::new(config_shards),
            storage_context,
            fetchers: crate::replica_fetcher::ReplicaFetchers::new(fetch_config),
            hw_checkpoints: Default::default(),
            throttles,
            data_dir,
        });
        let inbox: Rc<dyn Inbox> = shard.clone();
        shard.peers.set_local(Rc::downgrade(&inbox));
        shard.fetchers.set_host(Rc::downgrade(&shard));
        shard
    }

    /// The descriptors of this shard's segment files.
    pub fn open_files(&self) -> &corelog_storage::FileCache {
        &self.storage_context.files
    }

    /// Closes this shard's segment files once they have been idle a while
    /// (`file_cache::IDLE_CLOSE_AFTER`), for the broker's life.
    pub fn start_closing_idle_files(&self) {
        let files = self.storage_context.files.clone();
        glommio::spawn_local(async move {
            let idle = corelog_storage::file_cache::IDLE_CLOSE_AFTER;
            loop {
                glommio::timer::sleep(idle / 4).await;
                files.close_idle(idle);
            }
        })
        .detach();
    }

    pub fn shard_count(&self) -> usize {
        self.config.shard_count
    }

    pub fn owner_of(&self, topic: &str, partition: i32) -> ShardId {
        shard_of(topic, partition, self.config.shard_count)
    }

    /// Every open partition of this shard.
    pub fn logs(&self) -> Vec<(TopicPartition, Rc<Partition>)> {
        let mut logs: Vec<_> = self
            .partitions
            .borrow()
            .iter()
            .map(|(tp, l)| (tp.clone(), l.clone()))
            .collect();
        logs.sort_by(|a, b| (&a.0.topic, a.0.partition).cmp(&(&b.0.topic, b.0.partition)));
        logs
    }

    /// Bytes held by this shard's partition logs.
    pub fn log_bytes(&self) -> u64 {
        self.partitions
            .borrow()
            .values()
            .map(|p| p.log().size_bytes())
            .sum()
    }

    /// Why produces are refused right now, if they are.
    pub fn produce_refused(&self) -> Option<Arc<str>> {
        self.housekeeping.produce_refused()
    }

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

    pub fn partition(&self, tp: &TopicPartition) -> Option<Rc<Partition>> {
        self.partitions.borrow().get(tp).cloned()
    }

    /// Puts `partition` in the table in the place of `tp`'s (a reopened log).
    pub(crate) fn replace_partition(&self, tp: TopicPartition, partition: Rc<Partition>) {
        self.partitions.borrow_mut().insert(tp, partition);
        self.share_tail_cache();
    }

    pub fn open_partition_count(&self) -> usize {
        self.partitions.borrow().len()
    }

    /// Handles one message addressed to this shard.
    pub async fn handle(self: Rc<Self>, msg: ShardMessage) {
        match msg {
            ShardMessage::Partition(PartitionRequest::Produce {
                acks,
                timeout_ms,
                partitions,
                reply,
            }) => {
                let out = self.produce(acks, timeout_ms, partitions).await;
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::Fetch {
                partitions,
                budget,
                reader,
                reply,
            }) => {
                let out = self.fetch(partitions, budget, reader).await;
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::WaitForData {
                partitions,
                deadline,
                replica,
                reply,
            }) => {
                self.wait_for_data(partitions, deadline, replica).await;
                let _ = reply.send(());
            }
            ShardMessage::Partition(PartitionRequest::ListOffsets { partitions, reply }) => {
                let mut out = Vec::with_capacity(partitions.len());
                for input in partitions {
                    out.push(OffsetsOutput {
                        result: self.list_offset(&input).await,
                    });
                }
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::EpochEndOffsets { partitions, reply }) => {
                let out = partitions
                    .iter()
                    .map(|q| {
                        let p = self
                            .partition(&q.tp)
                            .ok_or(PartitionError::UnknownTopicOrPartition)?;
                        p.check_leader_epoch(q.current_leader_epoch)?;
                        Ok(p.end_offset_for_epoch(q.leader_epoch))
                    })
                    .collect();
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::DescribePartitions {
                partitions,
                with_producers,
                reply,
            }) => {
                let out = partitions
                    .iter()
                    .map(|tp| {
                        let log = self
                            .partition(tp)
                            .ok_or(PartitionError::UnknownTopicOrPartition)?;
                        let log = log.log();
                        Ok(PartitionDescription {
                            size_bytes: log.size_bytes(),
                            producers: if with_producers {
                                log.active_producers()
                            } else {
                                Vec::new()
                            },
                        })
                    })
                    .collect();
                let _ = reply.send(out);
            }
            ShardMessage::Partition(PartitionRequest::DeleteRecords { partitions, reply }) => {
                let mut out = Vec::with_capacity(partitions.len());
                for (tp, offset) in partitions {
                    out.push(match self.partition(&tp) {
                        None => Err(PartitionError::UnknownTopicOrPartition),
                        Some(log) => log
                            .delete_records(offset)
                            .await
                            .map_err(PartitionError::from),
                    });
                }
                let _ = reply.send(out);
            }
            ShardMessage::Housekeeping(m) => self.housekeeping.handle(m, &self.peers).await,
            ShardMessage::Controller(req) => match &self.controller {
                Some(c) => c.handle(req).await,
                None => tracing::error!(
                    shard = self.id,
                    "controller request sent to a shard that is not the controller"
                ),
            },
            ShardMessage::Group { op, reply } => {
                let shard = self.clone();
                let answer = self
                    .groups
                    .handle(op, move |p| shard.partition(&offsets_tp(p)))
                    .await;
                let _ = reply.send(answer);
            }
            ShardMessage::Metrics { reply } => {
                let mut snapshot = corelog_metrics::snapshot(self.id);
                let files = self.open_files().stats();
                snapshot.segment_files = corelog_metrics::SegmentFileCounters {
                    open: files.open as u64,
                    capacity: files.capacity as u64,
                    opens: files.opens,
                    evictions: files.evictions,
                    exhausted: files.exhausted,
                };
                snapshot.replication = self.replication_metrics(snapshot.replication);
                let _ = reply.send(snapshot);
            }
            ShardMessage::Shutdown { reply } => {
                self.close_all().await;
                let _ = reply.send(());
            }
            ShardMessage::QuotaUsage(report) => self.quota_usage.push(report),
        }
    }

    async fn produce(
        &self,
        acks: Acks,
        timeout_ms: u64,
        inputs: Vec<ProduceInput>,
    ) -> Vec<ProduceOutput> {
        // Append everything first (offsets assigned in arrival order), then wait for all
        // acknowledgements together so one sync can serve them.
        let mut tickets = Vec::with_capacity(inputs.len());
        let refused = self.produce_refused();
        for input in &inputs {
            debug_assert_eq!(self.owner_of(&input.tp.topic, input.tp.partition), self.id);
            let r = match self
                .partition(&input.tp)
                .ok_or(PartitionError::UnknownTopicOrPartition)
            {
                Err(e) => Err(e),
                // Refused before anything is queued: no partial writes near a full disk.
                Ok(_) if refused.is_some() => Err(PartitionError::DiskFull(
                    refused
                        .clone()
                        .unwrap_or_else(|| "disk budget exhausted".into()),
                )),
                // The metadata may name this broker a moment before its shard took up the
                // leadership (or after it gave it up): only the partition's role counts.
                Ok(log) if !log.is_leader() => Err(PartitionError::NotLeaderOrFollower),
                Ok(log) if acks == Acks::All && log.isr_len() < log.min_insync_replicas() => {
                    Err(PartitionError::NotEnoughReplicas {
                        isr: log.isr_len(),
                        min: log.min_insync_replicas(),
                    })
                }
                Ok(log) => log
                    .append(&input.records)
                    .map(|t| (log, t))
                    .map_err(PartitionError::from),
            };
            tickets.push(r);
        }
        let level = match acks {
            Acks::None => None,
            Acks::Leader | Acks::All => Some(acks),
        };
        // Each partition times out on its own: one slow partition must not turn the
        // others' results (acknowledged, or refused for good) into a retriable timeout.
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(1));
        let waits = futures::future::join_all(tickets.into_iter().map(|r| async move {
            let (log, ticket) = r?;
            if let Some(level) = level {
                let timer =
                    glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
                let waited = futures_lite::future::or(
                    async {
                        Some(match level {
                            Acks::All => log
                                .wait_committed(ticket)
                                .await
                                .map_err(PartitionError::from),
                            _ => log
                                .wait(ticket, AckLevel::Leader)
                                .await
                                .map_err(PartitionError::from),
                        })
                    },
                    async {
                        timer.await;
                        None
                    },
                )
                .await;
                match waited {
                    Some(r) => r?,
                    None => return Err(PartitionError::Timeout),
                }
            }
            Ok(ProduceAck {
                base_offset: ticket.base_offset,
                log_start_offset: log.log_start_offset(),
            })
        }));
        waits
            .await
            .into_iter()
            .map(|result| ProduceOutput { result })
            .collect()
    }

    /// Reads the partitions of one fetch, in request order, until about `budget` bytes
    /// are read. The reads run concurrently in waves: each wave takes the next partitions
    /// until their limits alone would fill what is left, so a catch-up fetch of many full
    /// partitions reads them all at once, while partitions after the budget is spent are
    /// answered with their position only (as a sequential read would leave them).
    async fn fetch(
        &self,
        inputs: Vec<FetchInput>,
        budget: usize,
        reader: FetchReader,
    ) -> Vec<FetchOutput> {
        let read_as = match reader {
            FetchReader::Consumer(isolation) => Reader::Consumer(isolation),
            FetchReader::Replica(_) => Reader::Replica,
        };
        let mut out: Vec<Option<FetchOutput>> = (0..inputs.len()).map(|_| None).collect();
        let mut reads: Vec<(usize, Rc<Partition>)> = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let answer = match self.partition(&input.tp) {
                None => FetchOutput::failed(-1, -1, PartitionError::UnknownTopicOrPartition),
                Some(log) => match log.check_leader_epoch(input.current_leader_epoch) {
                    Err(e) => FetchOutput::failed(-1, -1, e.into()),
                    Ok(()) => {
                        reads.push((i, log));
                        continue;
                    }
                },
            };
            out[i] = Some(answer);
        }
        // The leader's replication throttle: which reads it counts (by input, the rate);
        // a replica outside the ISR reads at most what the bucket holds, and while the
        // bucket is in debt is answered with the leader's position only (Kafka's
        // shouldLeaderThrottle). Without a rate, nothing is looked at.
        let mut throttled: Vec<Option<u64>> = Vec::new();
        // Bytes a throttled read may take: what the bucket holds.
        let mut caps: Vec<usize> = Vec::new();
        if let FetchReader::Replica(id) = reader {
            let meta = self.metadata.snapshot();
            let node = self.config.node_id;
            let rate = crate::replication_throttle::configured_rate(
                &meta.broker_configs,
                node,
                Side::Leader,
            );
            if rate.is_some() {
                throttled = vec![None; inputs.len()];
                caps = vec![usize::MAX; inputs.len()];
                let now = Instant::now();
                let mut kept = Vec::with_capacity(reads.len());
                for (i, log) in reads {
                    let tp = &inputs[i].tp;
                    let configs = meta.topic(&tp.topic).map(|t| &t.configs);
                    throttled[i] = crate::replication_throttle::applies(
                        rate,
                        configs,
                        Side::Leader,
                        tp.partition,
                        node,
                    );
                    let held = match throttled[i] {
                        Some(rate) if !log.in_isr(id) => {
                            match self.throttles.allowance(Side::Leader, rate, now) {
                                Ok(bytes) => {
                                    caps[i] = bytes;
                                    None
                                }
                                Err(held) => Some(held),
                            }
                        }
                        _ => None,
                    };
                    let Some(held) = held else {
                        kept.push((i, log));
                        continue;
                    };
                    // Not recorded as the replica's position: its divergence is not
                    // checked on this answer, so it must not count towards the ISR.
                    let high_watermark = log.high_watermark();
                    out[i] = Some(FetchOutput {
                        high_watermark,
                        last_stable_offset: high_watermark,
                        log_start_offset: log.log_start_offset(),
                        diverging_epoch: None,
                        result: Ok(corelog_storage::Records::default()),
                        throttled_for: Some(held),
                    });
                }
                reads = kept;
            }
        }
        let mut left = budget;
        let mut next = 0;
        while next < reads.len() {
            if left == 0 {
                // The response is full: the rest are answered with their position.
                for (i, log) in &reads[next..] {
                    let high_watermark = log.high_watermark();
                    out[*i] = Some(FetchOutput {
                        high_watermark,
                        last_stable_offset: high_watermark,
                        log_start_offset: log.log_start_offset(),
                        diverging_epoch: None,
                        result: Ok(corelog_storage::Records::default()),
                        throttled_for: None,
                    });
                }
                break;
            }
            let mut planned = 0usize;
            let mut wave = Vec::new();
            while let Some((i, log)) = reads.get(next) {
                if planned >= left {
                    break;
                }
                let input = &inputs[*i];
                let cap = caps.get(*i).copied().unwrap_or(usize::MAX);
                let max_bytes = input.max_bytes.min(left - planned).min(cap);
                planned += max_bytes;
                wave.push(async move {
                    let r = log
                        .read_for_send(input.offset, input.last_fetched_epoch, max_bytes, read_as)
                        .await;
                    (*i, log, r)
                });
                next += 1;
            }
            for (i, log, r) in futures::future::join_all(wave).await {
                out[i] = Some(match r {
                    Ok(read) => {
                        left = left.saturating_sub(read.records.len());
                        if let Some(rate) = throttled.get(i).copied().flatten() {
                            self.throttles.record(
                                Side::Leader,
                                rate,
                                read.records.len(),
                                Instant::now(),
                            );
                        }
                        let mut high_watermark = read.high_watermark;
                        if let (FetchReader::Replica(id), None) = (reader, read.diverging_epoch) {
                            match self.record_follower_fetch(
                                &inputs[i].tp,
                                log,
                                id,
                                inputs[i].offset,
                            ) {
                                Ok(hw) => high_watermark = hw,
                                Err(e) => {
                                    out[i] = Some(FetchOutput::failed(
                                        read.high_watermark,
                                        read.log_start_offset,
                                        e,
                                    ));
                                    continue;
                                }
                            }
                        }
                        FetchOutput {
                            high_watermark,
                            last_stable_offset: high_watermark,
                            log_start_offset: read.log_start_offset,
                            diverging_epoch: read.diverging_epoch,
                            result: Ok(read.records),
                            throttled_for: None,
                        }
                    }
                    Err(e) => {
                        FetchOutput::failed(log.high_watermark(), log.log_start_offset(), e.into())
                    }
                });
            }
        }
        out.into_iter()
            .map(|o| o.expect("every partition of a fetch is answered"))
            .collect()
    }

    async fn wait_for_data(
        &self,
        partitions: Vec<(TopicPartition, i64)>,
        deadline: Instant,
        replica: bool,
    ) {
        let logs: Vec<(Rc<Partition>, i64)> = partitions
            .iter()
            .filter_map(|(tp, off)| self.partition(tp).map(|l| (l, *off)))
            .collect();
        if logs.is_empty() {
            let now = Instant::now();
            if deadline > now {
                glommio::timer::sleep(deadline - now).await;
            }
            return;
        }
        let waits = logs.iter().map(|(log, off)| {
            Box::pin(async move {
                if replica {
                    log.wait_beyond_log_end(*off, deadline).await
                } else {
                    log.wait_beyond(*off, deadline).await
                }
            })
        });
        futures::future::select_all(waits).await;
    }

    /// ListOffsets: `timestamp` is a time in ms or one of the special values
    /// `corelog_partition::*_TIMESTAMP`.
    async fn list_offset(&self, input: &ListOffsetsInput) -> Result<FoundOffset, PartitionError> {
        let partition = self
            .partition(&input.tp)
            .ok_or(PartitionError::UnknownTopicOrPartition)?;
        partition.check_leader_epoch(input.current_leader_epoch)?;
        Ok(partition
            .find_offset(input.timestamp, input.isolation)
            .await?)
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
        for group in wanted.chunks(PARTITION_OPENS_AT_ONCE) {
            let opened = futures::future::join_all(group.iter().map(|tp| {
                let dir = partition_dir(&self.config.data_dir, &topic, tp.partition);
                Partition::open_replica(
                    dir,
                    config.clone(),
                    self.storage_context.clone(),
                    self.checkpointed_high_watermark(tp),
                )
            }))
            .await;
            let mut failed = None;
            {
                let mut partitions = self.partitions.borrow_mut();
                for (tp, log) in group.iter().zip(opened) {
                    match log {
                        Ok(log) => {
                            partitions.insert(tp.clone(), log);
                        }
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
    fn share_tail_cache(&self) {
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

    pub(crate) async fn drop_partitions(&self, topic: Arc<str>, partitions: Vec<i32>) {
        let _permit = self.admin_lock.acquire_permit(1).await;
        for p in partitions {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition: p,
            };
            let removed = self.partitions.borrow_mut().remove(&tp);
            self.share_tail_cache();
            self.fetchers.remove(&tp);
            if &*topic == OFFSETS_TOPIC {
                self.groups.unload_partition(p);
            }
            if let Some(log) = removed {
                log.close().await;
            }
            // The directory is first renamed away (as Kafka does), so that background
            // work still holding the old path, or a topic created again under the same
            // name, can never touch the other's files; then it is removed. Readers still
            // holding the log keep their open files.
            let dir = partition_dir(&self.config.data_dir, &topic, p);
            let doomed = crate::metadata::deleted_dir_name(&dir);
            let removal = glommio::executor()
                .spawn_blocking(move || {
                    std::fs::rename(&dir, &doomed)?;
                    std::fs::remove_dir_all(&doomed)
                })
                .await;
            if let Err(e) = removal {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(topic = %topic, partition = p, error = %e, "removing a deleted partition's directory; retried at the next start");
                }
            }
        }
    }

    /// The shard that coordinates `group`.
    pub fn coordinator_of(&self, group: &str) -> ShardId {
        self.owner_of(OFFSETS_TOPIC, self.groups.offsets_partition(group))
    }

    /// Starts the group timers (session expiry every 100 ms, offset expiry every few
    /// seconds). The groups of each `__consumer_offsets` partition are loaded when this
    /// broker takes up its leadership (`replication`).
    pub async fn start_group_coordinator(self: &Rc<Self>) {
        let shard = self.clone();
        glommio::spawn_local(async move {
            let mut ticks = 0u64;
            loop {
                glommio::timer::sleep(Duration::from_millis(100)).await;
                shard.groups.tick();
                ticks += 1;
                if ticks % OFFSET_EXPIRY_CHECK_TICKS == 0 {
                    let s = shard.clone();
                    glommio::spawn_local(async move {
                        let s2 = s.clone();
                        s.groups
                            .expire_offsets(move |p| s2.partition(&offsets_tp(p)))
                            .await;
                    })
                    .detach();
                }
            }
        })
        .detach();
    }

    /// Flushes and closes every partition (clean shutdown).
    pub async fn close_all(&self) {
        self.fetchers.stop_all();
        let logs: Vec<Rc<Partition>> = self.partitions.borrow().values().cloned().collect();
        futures::future::join_all(logs.iter().map(|l| l.close())).await;
        // After the close: every mark covers what the logs hold once synced.
        if let Err(e) = self.checkpoint_high_watermarks(&mut HashMap::new()).await {
            tracing::warn!(shard = self.id, error = %e, "writing the high-watermark checkpoint");
        }
    }
}

impl Inbox for Shard {
    fn deliver(self: Rc<Self>, msg: ShardMessage) {
        glommio::spawn_local(self.handle(msg)).detach();
    }
}

impl PartitionSet for Shard {
    fn partitions(&self) -> Vec<(TopicPartition, Rc<Partition>)> {
        self.logs()
    }
}

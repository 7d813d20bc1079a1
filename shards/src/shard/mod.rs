//! One core's state: the partition table it owns, the services it holds, and the
//! dispatch of the messages other cores send it.
//!
//! A `Shard` lives on one glommio executor and is shared there as `Rc<Shard>`. It owns
//! every partition `p` with `routing::shard_of(topic, p) == id` and is the only code
//! that touches their logs. Other shards reach them only through [`ShardMessage`]s.
//!
//! Services, each with its own message type and none depending on `Shard`: admin
//! changes (shard 0 only, `AdminChange`), the group coordinator (`GroupOp`),
//! housekeeping (`HousekeepingMessage`; it sees the partitions through `PartitionSet`),
//! the quota usage inbox, and the producer-id block. They reach other shards through
//! [`Peers`], this shard's end of the mesh, never through the shard itself.
//!
//! Invariants: a partition is open on at most one shard (its owner) and at most once
//! (opens and drops are serialised by `admin_lock`); a handler asserts the partitions it
//! is given are its own; no `RefCell` borrow crosses an `.await`.
//!
//! Split by job: this file holds the shard's state and its services' start-up;
//! [`dispatch`] routes each mesh message to the code that serves it; `produce` appends
//! and waits for acknowledgements; `fetch` reads for consumers and followers (the
//! leader's replication throttle, the followers' positions recorded);
//! `partition_requests` serves the small per-partition requests (ListOffsets,
//! OffsetForLeaderEpoch, DescribePartitions, DeleteRecords, the long poll's wait);
//! `log_dir_moves` moves partitions between the broker's log directories;
//! `partition_table` opens, reconfigures and drops the partitions the metadata gives
//! this shard.

mod dispatch;
mod fetch;
mod log_dir_moves;
mod partition_requests;
mod partition_table;
mod produce;
pub mod share_requests;
mod topic_catalog;
mod txn_verify;

use crate::admin_changes::AdminChanges;
use crate::group::coordinator::{offsets_tp, GroupCoordinator};
use crate::group::OFFSETS_TOPIC;
use crate::housekeeping::{Housekeeping, PartitionSet};
use crate::mesh::*;
use crate::metadata::MetadataStore;
use crate::producer_ids::ProducerIds;
use crate::routing::{shard_of, ShardId};
pub use crate::shard_config::ShardConfig;
use crate::share::coordinator::share_state_tp;
use corelog_partition::Partition;
use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Group ticks (100 ms each) between two offset-retention checks. (`__consumer_offsets`
/// is compacted by the log cleaner like any compacted topic.)
const OFFSET_EXPIRY_CHECK_TICKS: u64 = 20;
/// Group ticks (100 ms) between two prunings of `__share_group_state` (Kafka's
/// `share.coordinator.state.topic.prune.interval.ms`, 5 minutes).
const SHARE_STATE_PRUNE_TICKS: u64 = 3000;

pub struct Shard {
    pub id: ShardId,
    pub config: Arc<ShardConfig>,
    pub metadata: Arc<MetadataStore>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    /// This shard's end of the mesh, shared with the services it holds.
    pub peers: Rc<Peers>,
    pub(crate) admin_lock: Semaphore,
    admin_changes: Option<AdminChanges>,
    /// This broker's controller node: proposals, the registration, the quorum.
    pub node: corelog_controller::ControllerNode,
    /// What `reconcile` last made of the metadata.
    pub(crate) reconciled: RefCell<crate::reconcile::Reconciled>,
    pub groups: GroupCoordinator,
    /// The transaction coordinator of the `__transaction_state` partitions this shard
    /// leads.
    pub txns: Rc<crate::txn::coordinator::TxnCoordinator>,
    /// The share partitions this shard leads (`share::leader`).
    pub share_leader: crate::share::leader::ShareLeader,
    /// The share coordinator of the `__share_group_state` partitions this shard leads.
    pub share_state: Rc<crate::share::coordinator::ShareCoordinator>,
    /// Retention, compaction, producer expiry and the disk budget.
    pub housekeeping: Rc<Housekeeping>,
    /// Producer ids this shard may hand out without asking the controller
    /// (InitProducerId).
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
    /// Verifications in flight of transactional batches (`txn_verify`).
    pub(crate) txn_guards: txn_verify::Guards,
    /// A report of replica directories is in flight (`replica_dirs`).
    pub(crate) reporting_dirs: std::cell::Cell<bool>,
    /// Moves of partitions between log directories in progress (`log_dir_moves`).
    pub(crate) moves: RefCell<HashMap<TopicPartition, log_dir_moves::Move>>,
    /// Directories asked for replicas not created here yet (`log_dir_moves`).
    pub(crate) preferred_dirs: RefCell<HashMap<TopicPartition, usize>>,
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
            admin_changes: (id == crate::routing::ADMIN_SHARD)
                .then(|| AdminChanges::new(metadata.clone(), config.clone(), node.clone())),
            node,
            reconciled: RefCell::new(Default::default()),
            groups: GroupCoordinator::new(config.groups.clone()),
            txns: Rc::new(crate::txn::coordinator::TxnCoordinator::new(
                config.txns.clone(),
                config.node_id,
                config.replication.fetch.security.clone(),
            )),
            share_leader: crate::share::leader::ShareLeader::new(),
            share_state: Rc::new(crate::share::coordinator::ShareCoordinator::new(
                config.share_state.clone(),
            )),
            housekeeping: Rc::new(Housekeeping::new(
                config.housekeeping.clone(),
                config.log_dirs.clone(),
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
            txn_guards: Default::default(),
            reporting_dirs: Default::default(),
            moves: Default::default(),
            preferred_dirs: Default::default(),
        });
        let inbox: Rc<dyn Inbox> = shard.clone();
        shard.peers.set_local(Rc::downgrade(&inbox));
        shard.fetchers.set_host(Rc::downgrade(&shard));
        let txn_host: Rc<dyn crate::txn::coordinator::TxnHost> = shard.clone();
        shard.txns.set_host(Rc::downgrade(&txn_host));
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

    /// The shard that coordinates `group`.
    pub fn coordinator_of(&self, group: &str) -> ShardId {
        self.owner_of(OFFSETS_TOPIC, self.groups.offsets_partition(group))
    }

    /// Starts the group timers (session expiry every 100 ms, offset expiry every few
    /// seconds). The groups of each `__consumer_offsets` partition are loaded when this
    /// broker takes up its leadership (`replication`).
    pub async fn start_group_coordinator(self: &Rc<Self>) {
        // Share partitions' acquisition locks end on time: the timer sleeps until the
        // earliest deadline (at most 100 ms, so one taken meanwhile is seen soon).
        let shard = self.clone();
        glommio::spawn_local(async move {
            loop {
                let now = crate::share::now_ms();
                let wait = shard
                    .share_leader
                    .next_deadline()
                    .map_or(100, |d| (d - now).clamp(1, 100));
                glommio::timer::sleep(Duration::from_millis(wait as u64)).await;
                shard.expire_share_locks().await;
            }
        })
        .detach();
        let shard = self.clone();
        glommio::spawn_local(async move {
            let mut ticks = 0u64;
            loop {
                glommio::timer::sleep(Duration::from_millis(100)).await;
                let ticked = shard.groups.tick();
                if !ticked.emptied.is_empty()
                    || !ticked.consumer_changed.is_empty()
                    || !ticked.share_changed.is_empty()
                {
                    let s = shard.clone();
                    glommio::spawn_local(async move {
                        let (s2, s3, s4) = (s.clone(), s.clone(), s.clone());
                        s.groups
                            .store_emptied(ticked.emptied, move |p| s2.partition(&offsets_tp(p)))
                            .await;
                        s.groups
                            .store_consumer_changes(ticked.consumer_changed, move |p| {
                                s3.partition(&offsets_tp(p))
                            })
                            .await;
                        s.groups
                            .store_share_changes(ticked.share_changed, move |p| {
                                s4.partition(&offsets_tp(p))
                            })
                            .await;
                    })
                    .detach();
                }
                ticks += 1;
                if ticks % SHARE_STATE_PRUNE_TICKS == 0 {
                    let s = shard.clone();
                    glommio::spawn_local(async move {
                        let s2 = s.clone();
                        let pruned = s
                            .share_state
                            .prune(move |p| s2.partition(&share_state_tp(p)))
                            .await;
                        if pruned > 0 {
                            tracing::debug!(records = pruned, "pruned __share_group_state");
                        }
                    })
                    .detach();
                }
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

    /// The shard that coordinates `transactional_id`.
    /// The shard that coordinates a share partition's state: the owner of its
    /// `__share_group_state` partition.
    pub fn share_coordinator_of(&self, key: &crate::share::records::ShareKey) -> ShardId {
        self.owner_of(
            crate::share::coordinator::SHARE_STATE_TOPIC,
            self.share_state.partition_of(key),
        )
    }

    pub fn txn_coordinator_of(&self, transactional_id: &str) -> ShardId {
        self.owner_of(
            crate::txn::TRANSACTION_TOPIC,
            self.txns.partition_of(transactional_id),
        )
    }

    /// Starts the transaction coordinator's timers. The ids of each
    /// `__transaction_state` partition are loaded when this broker takes up its
    /// leadership (`replication`).
    pub fn start_txn_coordinator(&self) {
        self.txns.start_timers();
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

impl crate::txn::coordinator::TxnHost for Shard {
    fn txn_log(&self, partition: i32) -> Option<Rc<Partition>> {
        self.partition(&TopicPartition {
            topic: crate::txn::TRANSACTION_TOPIC.into(),
            partition,
        })
    }

    fn metadata(&self) -> Arc<crate::metadata::ClusterMetadata> {
        self.metadata.snapshot()
    }

    fn allocate_producer_id(
        &self,
    ) -> futures::future::LocalBoxFuture<'_, Result<i64, crate::txn::rules::TxnError>> {
        Box::pin(async move {
            self.producer_ids.allocate(&self.peers).await.map_err(|e| {
                tracing::warn!(error = %e, "no producer id could be allocated");
                // Retriable for the client, as Kafka answers when it has no id at hand.
                crate::txn::rules::TxnError::CoordinatorLoadInProgress
            })
        })
    }
}

impl PartitionSet for Shard {
    fn partitions(&self) -> Vec<(TopicPartition, Rc<Partition>)> {
        self.logs()
    }
}

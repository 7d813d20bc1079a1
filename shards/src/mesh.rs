//! The typed messages that cross cores, and [`Peers`], the one way to send them.
//!
//! `ShardMessage` has one variant per service of a shard, each carrying that service's
//! own message type (`PartitionRequest`, `AdminChange`, `GroupOp`,
//! `HousekeepingMessage`, …). This module is the vocabulary every service shares: it
//! depends on no service, and no service depends on the shard.
//!
//! Every cross-shard operation is one message carrying its own reply channel
//! (a oneshot, completed on the receiving shard and awaited on the sender's). Messages
//! are sent once per (request, shard), never once per partition. Record bytes inside are
//! `Bytes`: moving a message moves a reference count, not the data.
//!
//! The mesh itself is glommio's `channel_mesh` (bounded, lock-free, one channel per pair
//! of executors), built once at start-up before any connection is accepted.

use crate::routing::ShardId;
pub use crate::routing::TopicPartition;
use bytes::Bytes;
pub use corelog_partition::{
    EpochError, FoundOffset, Isolation, EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
};
use corelog_storage::{AppendError, ReadError};
use futures::channel::oneshot;
use glommio::channels::channel_mesh::Senders;
use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Instant;

pub type Reply<T> = oneshot::Sender<T>;

/// Bound of each mesh channel: how many messages one shard may have queued at another.
pub const MESH_CHANNEL_CAPACITY: usize = 1024;

/// `acks` of a produce request, validated at decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    None,
    Leader,
    All,
}

impl Acks {
    pub fn from_wire(acks: i16) -> Option<Acks> {
        match acks {
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }
}

/// Why one partition of a request failed on its shard.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PartitionError {
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("timed out waiting for the acknowledgement")]
    Timeout,
    #[error("the shard is shutting down")]
    ShuttingDown,
    /// The disk budget is exhausted; produce is refused until retention frees space.
    #[error("produce refused: {0}")]
    DiskFull(Arc<str>),
    /// `acks=all` while the ISR is smaller than `min.insync.replicas`.
    #[error("the ISR has {isr} replicas, fewer than min.insync.replicas {min}")]
    NotEnoughReplicas { isr: usize, min: usize },
    /// `acks=all` committed, but the ISR shrank below `min.insync.replicas` meanwhile.
    #[error("the ISR shrank below min.insync.replicas after the append")]
    NotEnoughReplicasAfterAppend,
    /// This broker holds the partition but does not lead it (any more).
    #[error("this broker does not lead the partition")]
    NotLeaderOrFollower,
    /// This broker holds no replica of the partition (AlterReplicaLogDirs).
    #[error("this broker holds no replica of the partition")]
    ReplicaNotAvailable,
    /// The request named another leader epoch than the partition's.
    #[error(transparent)]
    Epoch(#[from] EpochError),
    /// A transactional batch the coordinator did not confirm is in the producer's
    /// transaction, or could not be asked about.
    #[error("the transaction coordinator did not confirm the partition: {0}")]
    Unverified(crate::txn::rules::TxnError),
}

impl From<corelog_partition::AckError> for PartitionError {
    fn from(e: corelog_partition::AckError) -> Self {
        match e {
            corelog_partition::AckError::Append(a) => PartitionError::Append(a),
            corelog_partition::AckError::NotLeader => PartitionError::NotLeaderOrFollower,
            corelog_partition::AckError::NotEnoughReplicasAfterAppend => {
                PartitionError::NotEnoughReplicasAfterAppend
            }
        }
    }
}

/// A transactional producer's Produce: its transactional id, which the coordinator is
/// asked about, and the request's version, which decides the errors it understands.
#[derive(Debug, Clone)]
pub struct ProduceTxn {
    pub transactional_id: Arc<str>,
    pub version: i16,
}

pub struct ProduceInput {
    pub tp: TopicPartition,
    pub records: Bytes,
}

#[derive(Debug, Clone)]
pub struct ProduceOutput {
    pub result: Result<ProduceAck, PartitionError>,
}

#[derive(Debug, Clone, Copy)]
pub struct ProduceAck {
    pub base_offset: i64,
    pub log_start_offset: i64,
}

/// Who a fetch is for, which bounds what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchReader {
    Consumer(Isolation),
    /// The follower replica on broker `id`: reads to the written end, and its fetch
    /// offset is its log end (recorded by the leader).
    Replica(i32),
}

pub struct FetchInput {
    pub tp: TopicPartition,
    pub offset: i64,
    pub max_bytes: usize,
    /// The fetcher's idea of the partition's leader epoch (-1: not given).
    pub current_leader_epoch: i32,
    /// The epoch of the last batch the fetcher holds (-1: not given).
    pub last_fetched_epoch: i32,
}

#[derive(Debug, Clone)]
pub struct FetchOutput {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Where the fetcher's log diverges (epoch, end offset), if it does.
    pub diverging_epoch: Option<(i32, i64)>,
    /// Whole batches in memory, or a range of a segment file to be sent without a copy.
    pub result: Result<corelog_storage::Records, PartitionError>,
    /// Held back by the leader's replication throttle (no records), for about this long.
    pub throttled_for: Option<std::time::Duration>,
    /// For a `read_committed` consumer's read, the transactions aborted among the records
    /// (Fetch's `aborted_transactions`); `None` otherwise.
    pub aborted: Option<Vec<corelog_storage::txn_index::AbortedTxn>>,
}

impl FetchOutput {
    pub fn failed(
        high_watermark: i64,
        log_start_offset: i64,
        error: PartitionError,
    ) -> FetchOutput {
        FetchOutput {
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset,
            diverging_epoch: None,
            result: Err(error),
            throttled_for: None,
            aborted: None,
        }
    }
}

pub struct ListOffsetsInput {
    pub tp: TopicPartition,
    /// A time in ms, or one of the special `*_TIMESTAMP` values.
    pub timestamp: i64,
    pub current_leader_epoch: i32,
    pub isolation: Isolation,
}

#[derive(Debug, Clone)]
pub struct OffsetsOutput {
    pub result: Result<FoundOffset, PartitionError>,
}

/// OffsetForLeaderEpoch for one partition.
pub struct EpochQuery {
    pub tp: TopicPartition,
    pub current_leader_epoch: i32,
    pub leader_epoch: i32,
}

/// What DescribePartitions answers for one partition.
#[derive(Debug, Clone, Default)]
pub struct PartitionDescription {
    /// Bytes of all its segments.
    pub size_bytes: u64,
    /// Which of the broker's log directories holds it (an index into `log.dirs`).
    pub log_dir: usize,
    /// A move to another directory in progress (AlterReplicaLogDirs): that directory and
    /// the bytes copied so far (Kafka's future replica).
    pub moving_to: Option<(usize, u64)>,
    /// Empty unless producers were asked for.
    pub producers: Vec<corelog_storage::producer_state::ActiveProducer>,
}

#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    /// Resolved by the edge (Kafka's -1 is the broker's default).
    pub replication_factor: i32,
    /// Explicit replica lists, one per partition.
    pub assignments: Option<Vec<Vec<i32>>>,
    pub configs: Vec<(String, String)>,
}

/// Topic-level failures of an admin change, as the admin shard reports them (its own
/// checks, or the quorum's refusal passed on); the edge maps them to Kafka codes.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TopicError {
    #[error("topic already exists")]
    AlreadyExists,
    #[error("unknown topic")]
    Unknown,
    #[error("invalid topic name: {0}")]
    InvalidName(String),
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("invalid replication factor: {0}")]
    InvalidReplicationFactor(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("the topic is named more than once in the request")]
    Duplicate,
    #[error("storage error: {0}")]
    Storage(String),
    #[error("{0}")]
    PolicyViolation(String),
    /// Computed from metadata that changed meanwhile (retried inside the broker).
    #[error("changed concurrently")]
    Conflict,
    #[error("no active controller: {0}")]
    NotController(String),
    #[error("{0}")]
    Timeout(String),
    #[error("no reassignment is in progress for the partition")]
    NoReassignmentInProgress,
    #[error("the partition already has the leader this election would give it")]
    ElectionNotNeeded,
    #[error("{0}")]
    PreferredLeaderNotAvailable(String),
    #[error("no replica of the partition is live")]
    EligibleLeadersNotAvailable,
    #[error("{0}")]
    Invalid(String),
    /// A feature level change refused (Kafka's INVALID_UPDATE_VERSION), in Kafka's words.
    #[error("{0}")]
    InvalidFeatureUpdate(String),
    /// An ACL refused the operation (checked at the edge; never from the admin shard).
    #[error("Authorization failed.")]
    Unauthorized,
}

/// An admin change for shard 0 (`admin_changes::AdminChanges`), which validates it and
/// commits it through the controller quorum.
pub enum AdminChange {
    /// UpdateFeatures: the finalized feature levels changed all or none; `legacy` are
    /// the edge's configured levels (where the cluster has finalized none yet).
    UpdateFeatures {
        updates: Vec<corelog_controller::features::FeatureUpdate>,
        legacy: corelog_controller::features::FeatureLevels,
        validate_only: bool,
        reply: Reply<Result<(), TopicError>>,
    },
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    DeleteTopics {
        names: Vec<String>,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    CreatePartitions {
        /// (topic, new total count, the new partitions' replica lists if given)
        topics: Vec<(String, i32, Option<Vec<Vec<i32>>>)>,
        validate_only: bool,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    /// Replaces (AlterConfigs) or edits (IncrementalAlterConfigs) topics' overrides.
    AlterTopicConfigs {
        changes: Vec<TopicConfigChange>,
        validate_only: bool,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    /// Hands out the next block of producer ids, `[start, start + PRODUCER_ID_BLOCK)`,
    /// persisted before the reply so no id is ever given out twice.
    AllocateProducerIds {
        reply: Reply<Result<i64, TopicError>>,
    },
    /// AlterConfigs / IncrementalAlterConfigs on a BROKER resource: `resource` is "" (the
    /// cluster-wide default) or this node's id; `ops` name broker keys.
    AlterBrokerConfigs {
        resource: String,
        ops: ConfigOps,
        validate_only: bool,
        reply: Reply<Result<(), TopicError>>,
    },
    /// AlterConfigs / IncrementalAlterConfigs on a GROUP resource: the group's own
    /// configs (`group::consumer::overrides`).
    AlterGroupConfigs {
        group: String,
        ops: ConfigOps,
        validate_only: bool,
        reply: Reply<Result<(), TopicError>>,
    },
    /// AlterClientQuotas: entries already validated at the edge; one result each.
    AlterClientQuotas {
        alterations: Vec<crate::client_quota::QuotaAlteration>,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    /// AlterUserScramCredentials: validated at the edge; committed as one command, so
    /// one result stands for all.
    AlterScramCredentials {
        deletions: Vec<(String, corelog_controller::scram::ScramMechanism)>,
        upsertions: Vec<corelog_controller::scram::ScramUpsertion>,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    /// CreateAcls: bindings validated at the edge, committed as one command; one result
    /// each.
    CreateAcls {
        bindings: Vec<corelog_controller::acl::AclBinding>,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    /// DeleteAcls: filters validated at the edge; per filter, the ACLs it removed.
    DeleteAcls {
        filters: Vec<corelog_controller::acl::AclFilter>,
        reply: Reply<Result<Vec<Vec<corelog_controller::acl::AclBinding>>, TopicError>>,
    },
    /// AlterPartitionReassignments: one result per item.
    AlterPartitionReassignments {
        items: Vec<corelog_controller::command::ReassignmentItem>,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
    /// ElectLeaders: one result per partition.
    ElectLeaders {
        election: corelog_controller::command::Election,
        partitions: Vec<(String, i32)>,
        reply: Reply<Vec<Result<(), TopicError>>>,
    },
}

/// Producer ids a shard takes from the controller at a time (Kafka's block size).
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// One topic's configuration change.
#[derive(Debug, Clone)]
pub struct TopicConfigChange {
    pub topic: String,
    pub ops: ConfigOps,
}

#[derive(Debug, Clone)]
pub enum ConfigOps {
    /// AlterConfigs: these overrides replace all the topic's overrides.
    Replace(Vec<(String, String)>),
    /// IncrementalAlterConfigs: applied in order to the current overrides.
    Incremental(Vec<ConfigOp>),
}

#[derive(Debug, Clone)]
pub enum ConfigOp {
    Set(String, String),
    /// Back to the broker default.
    Delete(String),
    /// Add items to a list key (`cleanup.policy`).
    Append(String, String),
    /// Remove items from a list key.
    Subtract(String, String),
}

impl ConfigOp {
    /// The key the operation changes.
    pub fn key(&self) -> &str {
        match self {
            ConfigOp::Set(k, _)
            | ConfigOp::Delete(k)
            | ConfigOp::Append(k, _)
            | ConfigOp::Subtract(k, _) => k,
        }
    }
}

/// What actually travels on the mesh: a message and when it was sent (for the mesh
/// latency histogram; `Instant` is CLOCK_MONOTONIC, comparable across cores).
pub struct Envelope {
    pub sent_at: Instant,
    pub msg: ShardMessage,
}

/// What the partition table of a shard serves: produce, reads, lookups, and opening,
/// closing and reconfiguring its partitions.
/// One partition of a ShareFetch.
#[derive(Debug, Clone)]
pub struct ShareFetchInput {
    pub tp: TopicPartition,
    pub topic_id: uuid::Uuid,
    /// The most bytes of records to read for it.
    pub max_bytes: usize,
}

/// What is left of a ShareFetch's limits when it reaches a shard: its partitions there
/// are read in order, each taking from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareFetchLimits {
    /// Records still to acquire (MaxRecords less those acquired on other shards).
    pub max_records: usize,
    /// Bytes still to return (MaxBytes less those returned on other shards).
    pub max_bytes: usize,
    /// Nothing was returned yet: the first batch found is returned whatever its size.
    pub min_one_batch: bool,
    /// Kafka's ShareAcquireMode batch_optimized (0, the default), else record_limit.
    pub batch_optimized: bool,
}

/// What one partition of a ShareFetch got.
#[derive(Debug, Clone, Default)]
pub struct ShareFetchOutput {
    pub acquired: Vec<crate::share::partition::Acquired>,
    /// Whole batches covering the acquired ranges.
    pub records: Option<bytes::Bytes>,
    /// The partition's high watermark when it was read (a long poll waits past it).
    pub high_watermark: i64,
    /// The shard's count of share partitions that gained records to acquire, taken
    /// before this fetch looked (a long poll waits until it grows:
    /// `ShareRequest::Wait`).
    pub available_generation: u64,
}

/// One partition's acknowledgements.
#[derive(Debug, Clone)]
pub struct ShareAckInput {
    pub tp: TopicPartition,
    pub topic_id: uuid::Uuid,
    pub batches: Vec<crate::share::partition::AckBatch>,
}

/// A share consumer's request for partitions this shard owns (KIP-932).
pub enum ShareRequest {
    /// Acquires and reads records, at most `max_records` in all.
    Fetch {
        group: String,
        member: String,
        partitions: Vec<ShareFetchInput>,
        limits: ShareFetchLimits,
        reply: Reply<Vec<Result<ShareFetchOutput, crate::share::leader::ShareError>>>,
    },
    Acknowledge {
        group: String,
        member: String,
        partitions: Vec<ShareAckInput>,
        reply: Reply<Vec<Result<(), crate::share::leader::ShareError>>>,
    },
    /// The member's share session ended.
    Release {
        group: String,
        member: String,
        partitions: Vec<(TopicPartition, uuid::Uuid)>,
        reply: Reply<()>,
    },
    /// Completes when any listed partition's high watermark passes its offset, when a
    /// share partition of this shard gains records to acquire after `since` (a count
    /// from `ShareFetchOutput::available_generation`), or at the deadline.
    Wait {
        partitions: Vec<(TopicPartition, i64)>,
        since: u64,
        deadline: std::time::Instant,
        reply: Reply<()>,
    },
}

pub enum PartitionRequest {
    Produce {
        acks: Acks,
        timeout_ms: u64,
        partitions: Vec<ProduceInput>,
        /// Set for a transactional producer's request.
        transaction: Option<ProduceTxn>,
        reply: Reply<Vec<ProduceOutput>>,
    },
    /// Reads the partitions in order; once their records add up to `budget` (the
    /// request's `max_bytes`) the rest answer with no records, so a fetch of many
    /// partitions reads about what its response can hold, not each partition's limit.
    Fetch {
        partitions: Vec<FetchInput>,
        budget: usize,
        reader: FetchReader,
        reply: Reply<Vec<FetchOutput>>,
    },
    /// Completes when any listed partition's high watermark (for a replica: its written
    /// end) passes its offset, or at the deadline.
    WaitForData {
        partitions: Vec<(TopicPartition, i64)>,
        deadline: Instant,
        replica: bool,
        reply: Reply<()>,
    },
    /// (partition, timestamp) → (offset, timestamp); Kafka's -1 latest, -2 earliest.
    ListOffsets {
        partitions: Vec<ListOffsetsInput>,
        reply: Reply<Vec<OffsetsOutput>>,
    },
    /// OffsetForLeaderEpoch: (epoch, end offset) of each queried epoch.
    EpochEndOffsets {
        partitions: Vec<EpochQuery>,
        reply: Reply<Vec<Result<(i32, i64), PartitionError>>>,
    },
    /// DescribeLogDirs and DescribeProducers: each partition's size and, when asked, its
    /// idempotent producers.
    DescribePartitions {
        partitions: Vec<TopicPartition>,
        with_producers: bool,
        reply: Reply<Vec<Result<PartitionDescription, PartitionError>>>,
    },
    /// WriteTxnMarkers: each partition's transaction marker appended and committed.
    WriteMarkers {
        timeout_ms: u64,
        markers: Vec<(TopicPartition, corelog_storage::txn_marker::TxnMarker)>,
        reply: Reply<Vec<Result<(), PartitionError>>>,
    },
    /// The metrics scrape's consumer lag: each partition's high watermark where the
    /// shard holds a replica (`Shard::high_watermarks`).
    HighWatermarks {
        partitions: Vec<TopicPartition>,
        reply: Reply<Vec<Option<i64>>>,
    },
    /// AlterReplicaLogDirs: each partition moved to a log directory (an index into
    /// `log.dirs`), or the directory kept for when its replica is created here.
    AlterLogDirs {
        moves: Vec<(TopicPartition, usize)>,
        reply: Reply<Vec<Result<(), PartitionError>>>,
    },
    /// DeleteRecords: (partition, offset; -1 the high watermark) → the new log start.
    DeleteRecords {
        partitions: Vec<(TopicPartition, i64)>,
        reply: Reply<Vec<Result<i64, PartitionError>>>,
    },
}

/// Housekeeping's messages: the disk budget kept by shard 0.
pub enum HousekeepingMessage {
    /// A shard's periodic report of the bytes its logs hold (to shard 0; no reply).
    DiskUsage { shard: usize, bytes: u64 },
    /// Shard 0's verdict for every shard: refuse produces (with why), or accept again.
    DiskPressure { refuse: Option<Arc<str>> },
}

/// Every message a shard takes from the mesh, one variant per service it holds; each
/// service handles only its own message type.
pub enum ShardMessage {
    Partition(PartitionRequest),
    AdminChange(AdminChange),
    Housekeeping(HousekeepingMessage),
    /// A consumer-group operation, sent to the group's coordinator shard (or, for List,
    /// to every shard).
    /// Boxed: an operation (a heartbeat with its subscription, a commit) is larger
    /// than the other messages, which would all be as large.
    Group {
        op: Box<crate::group::types::GroupOp>,
        reply: Reply<crate::group::types::GroupAnswer>,
    },
    /// A transaction operation, sent to the transactional id's coordinator shard (or,
    /// for List, to every shard).
    Txn {
        op: crate::txn::types::TxnOp,
        reply: Reply<crate::txn::types::TxnAnswer>,
    },
    /// A share-group state operation (KIP-932), sent to the shard that leads the share
    /// partition's `__share_group_state` partition.
    ShareState {
        key: crate::share::records::ShareKey,
        op: Box<crate::share::coordinator::StateOp>,
        reply: Reply<
            Result<
                Option<crate::share::coordinator::StateView>,
                crate::share::coordinator::StateFailure,
            >,
        >,
    },
    /// ShareFetch and ShareAcknowledge work on the shard that owns the partitions.
    Share(ShareRequest),
    /// A copy of the shard's metrics.
    Metrics {
        reply: Reply<corelog_metrics::MetricsSnapshot>,
    },
    Shutdown {
        reply: Reply<()>,
    },
    /// A shard's bytes per quota sensor in its last completed window (to every other
    /// shard, once a window; no reply).
    QuotaUsage(Arc<crate::client_quota::UsageReport>),
}

impl From<PartitionRequest> for ShardMessage {
    fn from(r: PartitionRequest) -> ShardMessage {
        ShardMessage::Partition(r)
    }
}

impl From<AdminChange> for ShardMessage {
    fn from(r: AdminChange) -> ShardMessage {
        ShardMessage::AdminChange(r)
    }
}

impl From<HousekeepingMessage> for ShardMessage {
    fn from(m: HousekeepingMessage) -> ShardMessage {
        ShardMessage::Housekeeping(m)
    }
}

/// Where a message for this very shard goes: handled on its own executor, never through
/// the channels (a shard has none to itself).
pub trait Inbox {
    fn deliver(self: Rc<Self>, msg: ShardMessage);
}

/// This shard's end of the mesh: the one way every service of a shard reaches the
/// others. Services hold it instead of the shard, so none of them depends on `Shard`.
pub struct Peers {
    id: ShardId,
    shard_count: usize,
    senders: Senders<Envelope>,
    /// This shard, set once it exists (the shard holds its `Peers`).
    local: RefCell<Option<Weak<dyn Inbox>>>,
}

impl Peers {
    pub fn new(id: ShardId, shard_count: usize, senders: Senders<Envelope>) -> Peers {
        Peers {
            id,
            shard_count,
            senders,
            local: RefCell::new(None),
        }
    }

    /// Makes `inbox` the receiver of messages this shard sends to itself.
    pub fn set_local(&self, inbox: Weak<dyn Inbox>) {
        *self.local.borrow_mut() = Some(inbox);
    }

    pub fn id(&self) -> ShardId {
        self.id
    }

    pub fn shard_count(&self) -> usize {
        self.shard_count
    }

    /// The shard that owns `partition` of `topic`.
    pub fn owner_of(&self, topic: &str, partition: i32) -> ShardId {
        crate::routing::shard_of(topic, partition, self.shard_count)
    }

    /// Sends `msg` to `target` and awaits the reply on `rx`. `None` when the target is
    /// gone (shutdown).
    pub async fn call<T>(
        &self,
        target: ShardId,
        msg: impl Into<ShardMessage>,
        rx: oneshot::Receiver<T>,
    ) -> Option<T> {
        if !self.tell(target, msg).await {
            return None;
        }
        rx.await.ok()
    }

    /// Asks every shard, this one included, all at once: each is sent the message `make`
    /// builds around its own reply channel. The replies in shard order, `None` for a
    /// shard that is gone (shutdown); whole-broker questions (groups, metrics) ask this
    /// way rather than partition by partition.
    pub async fn call_each<T, M: Into<ShardMessage>>(
        &self,
        make: impl Fn(Reply<T>) -> M,
    ) -> Vec<Option<T>> {
        let calls = (0..self.shard_count).map(|target| {
            let (tx, rx) = oneshot::channel();
            self.call(target, make(tx), rx)
        });
        futures::future::join_all(calls).await
    }

    /// Sends `msg` to `target` without waiting for an answer; `false` when the target is
    /// gone (shutdown).
    pub async fn tell(&self, target: ShardId, msg: impl Into<ShardMessage>) -> bool {
        let msg = msg.into();
        if target == self.id {
            let local = self.local.borrow().as_ref().and_then(Weak::upgrade);
            return match local {
                Some(inbox) => {
                    inbox.deliver(msg);
                    true
                }
                None => false,
            };
        }
        let envelope = Envelope {
            sent_at: Instant::now(),
            msg,
        };
        self.senders.send_to(target, envelope).await.is_ok()
    }
}

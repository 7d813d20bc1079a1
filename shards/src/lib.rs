//! `shards`: what one core owns, besides its partitions' storage.
//!
//! corelog runs one glommio executor per core. Each executor is a *shard* that owns a
//! disjoint set of partitions (chosen by the pure function in [`routing`]) and is the only
//! thread that ever touches their files, indexes and caches. Work that spans shards moves
//! as typed messages over the channel mesh in [`mesh`]; record bytes travel as
//! reference-counted [`bytes::Bytes`], never copied.
//!
//! Components:
//! - [`shard`]: the per-core partition table (`corelog_partition::Partition`s), the
//!   dispatch of mesh messages and the partition requests it serves (produce, fetch with
//!   the leader's replication throttle, offsets, deletions).
//! - [`routing`]: partition → shard, a stable pure function.
//! - [`metadata`]: the cluster metadata as the controller last published it, one writer
//!   (the controller node) and lock-free readers on every core.
//! - [`reconcile`]: each shard's partitions made to follow the metadata.
//! - [`replication`]: each partition's role taken up from the metadata, followers'
//!   fetches recorded, ISR changes proposed, high watermarks checkpointed.
//! - [`replica_fetcher`]: one fetcher per (leader, shard) replicating what this shard
//!   follows.
//! - [`mesh`]: the cross-core request/reply messages.
//! - [`admin_changes`]: shard 0's side of the controller quorum: admin changes validated
//!   and committed as commands (topics, configs, quotas, producer-id blocks).
//! - [`group`]: the classic consumer-group coordinator and its `__consumer_offsets` log.
//! - [`share`]: share groups (KIP-932), being built: a share partition's state so far.
//! - [`txn`]: the transaction coordinator, over `__transaction_state` (being built: the
//!   states, their transitions and the log record so far).
//! - [`housekeeping`]: per-shard retention, compaction and the disk budget.
//! - [`topic_config`]: the topic configuration keys, their validation and description.
//! - [`client_quota`]: quota entities and the usage reports shards exchange.
//! - [`producer_ids`]: the block of producer ids a shard hands out.
//! - [`storage_context`]: the clock and metrics observer handed to the storage engine,
//!   and the data directory's health shared by the shards.
//!
//! It builds on `corelog-partition`, `corelog-storage` and `corelog-metrics`, and must
//! never depend on the broker's edge (the `corelog` crate): serving Kafka's wire protocol
//! happens only there, and so does mapping errors to the Kafka error codes a client is
//! answered with. The one Kafka wire format spoken here is the replica fetcher's, as a
//! client of the leader, through `corelog-kafka-client`: it reads the error codes in the
//! leader's answers (`ResponseError`), and never answers with one. Errors are typed per
//! layer (`thiserror`).

pub mod admin_changes;
pub mod client_quota;
pub mod config_type;
pub mod coordinator_log;
pub mod coordinator_record;
pub mod dir_copy;
pub mod group;

pub mod housekeeping;
pub mod kafka_broker_keys;
pub mod log_dir_failure;
pub mod log_dir_identity;
pub mod log_dirs;

pub mod mesh;
pub mod metadata;
pub mod other_broker_configs;
pub mod producer_ids;
pub mod reconcile;
pub mod replica_dirs;
pub mod replica_fetcher;
pub mod replication;
pub mod replication_throttle;
pub mod routing;
pub mod shard;
pub mod shard_config;
pub mod share;
pub mod storage_context;
pub mod topic_config;
pub mod txn;

//! `shards`: everything one core owns.
//!
//! corelog runs one glommio executor per core. Each executor is a *shard* that owns a
//! disjoint set of partitions (chosen by the pure function in [`routing`]) and is the only
//! thread that ever touches their files, indexes and caches. Work that spans shards moves
//! as typed messages over the channel mesh in [`mesh`]; record bytes travel as
//! reference-counted [`bytes::Bytes`], never copied.
//!
//! Components:
//! - [`log`]: the partition log — record-batch validation, segments, the sparse offset and
//!   time indexes, the direct-I/O appender with group commit, recovery and reads.
//! - [`routing`]: partition → shard, a stable pure function.
//! - [`metadata`]: the cluster's topic metadata, single writer (shard 0) and lock-free
//!   readers on every core, persisted in the data directory.
//! - [`mesh`]: the cross-core request/reply messages.
//! - [`shard`]: the per-core partition table.
//! - [`housekeeping`]: per-shard retention, compaction and the disk budget.
//! - [`topic_config`]: the topic configuration keys, their validation and description.
//!
//! Errors are typed per layer (`thiserror`); Kafka error codes exist only in the broker's
//! protocol edge, never here.

pub mod client_quota;
pub mod controller;
pub mod group;

pub mod housekeeping;

pub mod mesh;
pub mod metadata;
pub mod routing;
pub mod shard;
pub mod storage_context;
pub mod topic_config;

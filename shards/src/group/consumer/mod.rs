//! Consumer groups of the next-generation protocol (KIP-848): the broker computes each
//! member's partitions and hands them over through heartbeats, one member at a time,
//! with no group-wide barrier.
//!
//! Modules, each pure (no I/O, no clock of its own), so tests and the simulator can
//! drive them: `assignment` (a set of partitions by topic id), `assignor` (the `uniform`
//! and `range` server-side assignors), `reconcile` (one member's step toward its target
//! without ever holding a partition another member still holds) and `group` (one group:
//! members, epochs, target, heartbeats, timeouts); `records` is the codec of the
//! groups' records in `__consumer_offsets`, as Kafka lays them out; `embedded` is the
//! codec of what classic-protocol consumers send in JoinGroup and read from SyncGroup
//! (a consumer group takes such members in: KIP-848's migration); `overrides` checks
//! and applies a group's own configs (the GROUP config resource); `catalog` is a
//! catalog with no topics (the one over the cluster metadata is the shard's).

pub mod assignment;
pub mod assignor;
pub mod catalog;
pub mod embedded;
pub mod group;
pub mod overrides;
pub mod reconcile;
pub mod records;

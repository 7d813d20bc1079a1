//! `corelog-partition`: the layer between a shard and its partition logs, holding what
//! replication needs — the replica's role, the leader epoch and its persisted cache
//! (epoch → first offset, as Kafka's `leader-epoch-checkpoint`), a leader's view of its
//! followers and ISR (`replica_set`), the high watermark kept apart from the written and
//! synced offsets, the last stable offset and the log start.
//!
//! Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords, the group
//! coordinator's offsets log and housekeeping's retention all go through a [`Partition`];
//! only what works on segments themselves (compaction, sizes, budgets) reaches the log.
//! A follower's decisions on its leader's answers are here too (`follower`), so the
//! broker's replica fetcher and the simulator replicate with the same rules.
//!
//! It depends on the storage engine only: never on shards, the mesh, the controller or
//! the Kafka protocol's framing.

pub mod follower;
pub mod leader_epoch_cache;
mod partition;
pub mod replica_set;

pub use leader_epoch_cache::{LeaderEpochCache, UNDEFINED_EPOCH, UNDEFINED_OFFSET};
pub use partition::{
    AckError, Cut, EpochError, FollowerFetch, FoundOffset, Isolation, IsrProposal, Partition,
    PartitionRead, Reader, EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP, MAX_TIMESTAMP,
};
pub use replica_set::{Assignment, ReplicaSet};

//! The controller quorum: the cluster's metadata as the state machine of a replicated
//! log, run by openraft (a proven Raft implementation, not our own).
//!
//! So far: the log's durable storage ([`raft_log`]). It runs on the controller's own
//! thread, never on a shard: nothing here may be called from a data-plane core.
//!
//! Why openraft (pinned to 0.9.25, its current release line) over raft-rs: openraft is
//! the whole protocol behind four traits we implement — log storage, state machine,
//! network, and its runtime — and drives elections, replication, snapshots and joint
//! membership changes itself, with learners for the brokers that follow the log without
//! voting (Kafka's observers). raft-rs is the core state machine only: the host drives its
//! ticks and "ready" loop and writes storage, transport and snapshot shipping by hand,
//! which is more of our own code on the path that must never be wrong. openraft also
//! ships the storage test suite `raft_log` is checked with.
//!
//! Depends on no other corelog crate.

pub mod raft_log;

pub use raft_log::RaftLog;

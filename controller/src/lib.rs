//! The controller quorum: the cluster's metadata as the state machine of a replicated
//! log, run by openraft (a proven Raft implementation, not our own).
//!
//! The pieces, from the bottom:
//! - [`image`]: the metadata as of one log index; [`command`]: what the log holds;
//!   `apply`: the one deterministic function from (image, command) to the next image;
//!   [`placement`]: Kafka's replica placement, seeded by the command.
//! - [`raft_log`] and [`state_machine`]: openraft's storage — log, vote and snapshots on
//!   disk, the image published to subscribers.
//! - [`rpc`], [`network`], `server`: the controller port between nodes.
//! - [`node`]: a whole node on its own thread — openraft, the port, and the duties of
//!   the active controller (`liveness`: fencing; `leader_balance`: preferred leaders
//!   back) and of every broker (registering,
//!   heartbeating, joining as an observer).
//!
//! Everything runs on the controller's own thread, never on a shard: a shard only awaits
//! the futures [`ControllerNode`] hands out and reads published images.
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

pub mod acl;
mod apply;
pub mod balancer;
pub mod client_quotas;
pub mod command;
pub mod features;
mod heartbeats;
pub mod image;
pub mod leader_balance;
mod liveness;
pub mod network;
pub mod node;
mod node_config;
mod node_state;
pub mod peer_health;
pub mod placement;
pub mod port_security;
pub mod raft_log;
pub mod rpc;
pub mod scram;
mod server;
pub mod state_machine;
#[cfg(test)]
mod test_images;

pub use command::{Command, CommandError, Outcome};
pub use image::MetadataImage;
pub use node::{ControllerNode, NodeConfig, NodeError, ProposeError};
pub use raft_log::RaftLog;

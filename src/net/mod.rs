//! The network side of a shard: the SO_REUSEPORT listener and the per-connection
//! request pipeline.

pub mod connection;
pub mod listener;

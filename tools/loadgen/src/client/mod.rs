//! A minimal Kafka client for load generation: just what produce/fetch benchmarking
//! needs, on glommio, one instance per executor.
//!
//! - `protocol`: API version ranges, negotiation, request framing and builders.
//! - `records`: RecordBatch v2 encode (per batch, not per message) and header walking.
//! - `connection`: one pipelined broker connection with an in-flight limit.
//! - `cluster`: bootstrap, topic creation, partition leaders, per-broker connections.
//!
//! Deliberately absent: consumer groups, idempotence, transactions, retries, metadata
//! refresh. A load generator should report what the broker does, not hide it.

pub mod cluster;
pub mod connection;
pub mod protocol;
pub mod records;

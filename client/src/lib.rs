//! `corelog-kafka-client`: a small Kafka client on glommio, one instance per executor —
//! connection, framing and version negotiation, metadata, produce and fetch. The
//! broker's replica fetcher (`corelog-shards`) fetches from leaders with it, `corelog
//! admin` speaks to a cluster with it and the load generator drives brokers with it
//! (batched requests, pipelined connections, typed errors, no allocation per record).
//!
//! It must never depend on the broker or its shards: it speaks only the Kafka protocol
//! (through `kafka-protocol`) to whatever listens. Its one corelog dependency is the leaf
//! `corelog-record-batch`, the RecordBatch v2 header layout it shares with the storage
//! engine.
//!
//! - `protocol`: API version ranges, negotiation, request framing and builders.
//! - `records`: RecordBatch v2 encode (per batch, not per message) and header walking.
//! - `connection`: one pipelined broker connection with an in-flight limit.
//! - `cluster`: bootstrap, topic creation, partition leaders, per-broker connections.
//! - `security`: TLS (rustls) and SASL credentials for a connection.
//! - `sasl`: the client side of SASL PLAIN and SCRAM, message by message.
//! - `error`: what fails, typed.
//!
//! Deliberately absent: consumer groups, idempotence, transactions, retries, metadata
//! refresh. Its callers decide what a failure means (a load generator reports what the
//! broker does rather than hiding it).

pub mod cluster;
pub mod connection;
pub mod error;
pub mod protocol;
pub mod records;
pub mod sasl;
pub mod security;

pub use error::{ClientError, Result};

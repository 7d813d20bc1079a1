//! The client's errors: what failed, typed, so a caller can tell an unreachable broker
//! from a broken connection, a Kafka error code from a malformed answer.

use kafka_protocol::ResponseError;
use std::net::SocketAddr;

pub type Result<T> = std::result::Result<T, ClientError>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// No connection could be made at all (refused, timed out, unresolvable). The load
    /// generator maps this to exit code 2.
    #[error("cannot connect to broker {addr}: {reason}")]
    Unreachable { addr: String, reason: String },
    /// An established connection failed or closed; every request in flight on it fails.
    #[error("connection to {addr} {reason}")]
    Connection { addr: SocketAddr, reason: String },
    /// The broker answered with a Kafka error code.
    #[error("{context}: {}", error_name(*.code))]
    Kafka { context: String, code: i16 },
    /// A frame, response or record batch that does not decode or cannot be encoded, or an
    /// API the broker does not offer in a version this client speaks.
    #[error("{0}")]
    Protocol(String),
    /// The cluster's metadata does not describe what was asked for (a topic missing or
    /// never ready, a partition without a known leader, an unknown broker).
    #[error("{0}")]
    Metadata(String),
}

/// Kafka's name for an error code, e.g. `NotLeaderOrFollower (6)`.
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(e) => format!("{e:?} ({code})"),
        None => format!("NONE ({code})"),
    }
}

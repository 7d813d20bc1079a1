//! Typed errors of the partition log. The broker's protocol edge maps them to Kafka
//! error codes in one place; nothing here knows those codes.

use super::batch::BatchError;
use super::producer_state::SequenceError;
use std::sync::Arc;

/// An I/O failure of the log's files. It is sticky: once a write or sync fails the
/// partition refuses further appends (the on-disk state past the failure is unknown).
#[derive(Debug, Clone, thiserror::Error)]
#[error("storage error on {path}: {message}")]
pub struct StorageError {
    pub path: Arc<str>,
    pub message: Arc<str>,
}

impl StorageError {
    pub fn new(path: impl std::fmt::Display, err: impl std::fmt::Display) -> Self {
        StorageError {
            path: path.to_string().into(),
            message: err.to_string().into(),
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum AppendError {
    #[error("invalid record batch: {0}")]
    InvalidBatch(#[from] BatchError),
    #[error("produce request carried no record batch")]
    Empty,
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the partition is closing")]
    Closed,
    /// A create-time timestamp too far from the broker's clock
    /// (`message.timestamp.difference.max.ms`).
    #[error("{0}")]
    InvalidTimestamp(String),
    /// An idempotent producer's batch that breaks its sequence or epoch.
    #[error(transparent)]
    Sequence(#[from] SequenceError),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    #[error("offset {offset} is outside [{log_start_offset}, {high_watermark}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        high_watermark: i64,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("segment data at offset {offset} is corrupt: {source}")]
    Corrupt { offset: i64, source: BatchError },
}

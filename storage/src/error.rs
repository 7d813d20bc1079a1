//! Typed errors of the partition log. The broker's protocol edge maps them to Kafka
//! error codes in one place; nothing here knows those codes.

use super::batch::BatchError;
use super::producer_state::SequenceError;
use std::sync::Arc;

/// An I/O failure of the log's files. It is sticky: once a write or sync fails the
/// partition refuses further appends (the on-disk state past the failure is unknown) —
/// except when no file could be opened because the process had no descriptor left
/// (`out_of_descriptors`), or a write found the filesystem full (`no_space`): nothing
/// was acknowledged past what is on disk, the bytes are still in memory, and the writer
/// waits and writes them again. A failed sync is never retried (its error carries no OS
/// code, see `SegmentFile::sync_data`): after a failed `fdatasync` nothing says what the
/// disk holds.
#[derive(Debug, Clone, thiserror::Error)]
#[error("storage error on {path}: {message}")]
pub struct StorageError {
    pub path: Arc<str>,
    pub message: Arc<str>,
    pub out_of_descriptors: bool,
    pub no_space: bool,
}

impl StorageError {
    pub fn new(path: impl std::fmt::Display, err: impl std::fmt::Display) -> Self {
        StorageError {
            path: path.to_string().into(),
            message: err.to_string().into(),
            out_of_descriptors: false,
            no_space: false,
        }
    }

    /// An I/O error, noting whether it was the descriptor limit or a full filesystem.
    pub fn io(path: impl std::fmt::Display, err: &std::io::Error) -> Self {
        StorageError {
            out_of_descriptors: crate::file_cache::is_out_of_descriptors(err),
            no_space: err.raw_os_error() == Some(libc::ENOSPC),
            ..StorageError::new(path, err)
        }
    }

    /// Whether the failed step can simply run again later (see the type's doc).
    pub fn is_transient(&self) -> bool {
        self.out_of_descriptors || self.no_space
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
    /// Records of a valid batch that break the topic's rules; the whole batch is refused
    /// and each offending record is named by its index (Kafka's `record_errors`, KIP-467).
    #[error("{}", .0.message)]
    RecordsRejected(RejectedRecords),
    /// An idempotent producer's batch that breaks its sequence or epoch.
    #[error(transparent)]
    Sequence(#[from] SequenceError),
    /// A follower's batches do not continue its log (`PartitionLog::append_replicated`):
    /// the first must start at or after the log end offset and each next one after the
    /// last offset of the one before. Nothing of the request was queued.
    #[error("replicated batch starts at offset {found}, expected at least {expected}")]
    OffsetMismatch { expected: i64, found: i64 },
}

/// Which topic rule the rejected records break; it decides the Kafka error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordRule {
    /// A record without a key in a compacted topic.
    KeyRequired,
    /// A create-time timestamp too far from the broker's clock
    /// (`message.timestamp.difference.max.ms`).
    TimestampOutOfRange,
}

/// The records of one batch that break `rule`. Invariant: `records` is not empty and
/// its indices ascend, each below the batch's record count.
#[derive(Debug, Clone)]
pub struct RejectedRecords {
    pub rule: RecordRule,
    /// Summary for the partition's `error_message`.
    pub message: Arc<str>,
    /// (index of the record in its batch, why it was rejected).
    pub records: Arc<[(i32, Arc<str>)]>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    #[error("offset {offset} is outside [{log_start_offset}, {end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        end_offset: i64,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("segment data at offset {offset} is corrupt: {source}")]
    Corrupt { offset: i64, source: BatchError },
}

//! Replaying a coordinator's partition: the group, transaction and share coordinators
//! each rebuild their state from the records of an internal topic's partition they
//! have come to lead, read from its log start.
//!
//! Invariant: every batch at or past the log start and below `until()` (asked again
//! after each read, so what is appended meanwhile is replayed too where the caller
//! wants it) is handed to `each` exactly once, in log order; reading yields to the
//! shard's other work between reads. A record of a format newer than this release
//! reads stops the replay there ([`NewerRecord`]): its coordinator refuses to serve the
//! partition rather than serve state it has misread (a release meets one only when run
//! on data a later release wrote, which feature levels otherwise prevent).

use crate::coordinator_record::RecordError;
use corelog_partition::{Partition, Reader};
use corelog_storage::batch::{self, BatchHeader};
use corelog_storage::error::ReadError;

/// A coordinator record of a newer format than this release reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {record} at offset {offset} is of version {version}, newer than this release reads")]
pub struct NewerRecord {
    pub offset: i64,
    /// Which record (or key) carried the version.
    pub record: &'static str,
    pub version: i16,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("reading the log: {0}")]
    Read(#[from] ReadError),
    #[error(transparent)]
    Newer(#[from] NewerRecord),
}

/// Hands every batch of `log` from its log start to `until()` to `each` (its header and
/// bytes, control batches included), stopping at the first batch `each` refuses.
pub async fn replay(
    log: &Partition,
    until: impl Fn() -> i64,
    mut each: impl FnMut(&BatchHeader, &[u8]) -> Result<(), NewerRecord>,
) -> Result<(), ReplayError> {
    let mut offset = log.log_start_offset();
    while offset < until() {
        let read = log.read_as(offset, -1, 1 << 20, Reader::Replica).await?;
        let from = offset;
        if read.records.is_empty() {
            break;
        }
        for item in batch::batches(&read.records) {
            let Ok((h, range)) = item else { break };
            offset = h.last_offset() + 1;
            let Some(bytes) = read.records.get(range) else {
                break;
            };
            each(&h, bytes)?;
        }
        if offset == from {
            break; // not one whole batch read: nothing more to replay
        }
        glommio::yield_if_needed().await;
    }
    Ok(())
}

/// A record (`record` names which) that did not decode at `offset`: refused when its
/// version is newer than this release reads, otherwise skipped with a warning.
pub fn skip_record(record: &'static str, e: RecordError, offset: i64) -> Result<(), NewerRecord> {
    if let RecordError::UnknownVersion(version) = e {
        return Err(NewerRecord {
            offset,
            record,
            version,
        });
    }
    tracing::warn!(offset, record, error = %e, "skipping an undecodable record");
    Ok(())
}

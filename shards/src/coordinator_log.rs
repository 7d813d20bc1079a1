//! Replaying a coordinator's partition: the group, transaction and share coordinators
//! each rebuild their state from the records of an internal topic's partition they
//! have come to lead, read from its log start.
//!
//! Invariant: every batch at or past the log start and below `until()` (asked again
//! after each read, so what is appended meanwhile is replayed too where the caller
//! wants it) is handed to `each` exactly once, in log order; reading yields to the
//! shard's other work between reads.

use corelog_partition::{Partition, Reader};
use corelog_storage::batch::{self, BatchHeader};
use corelog_storage::error::ReadError;

/// Hands every batch of `log` from its log start to `until()` to `each` (its header and
/// bytes, control batches included).
pub async fn replay(
    log: &Partition,
    until: impl Fn() -> i64,
    mut each: impl FnMut(&BatchHeader, &[u8]),
) -> Result<(), ReadError> {
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
            each(&h, bytes);
        }
        if offset == from {
            break; // not one whole batch read: nothing more to replay
        }
        glommio::yield_if_needed().await;
    }
    Ok(())
}

//! Moving the log start: time- and size-based retention (the policy for which segments
//! are past retention lives in `crate::retention`) and DeleteRecords, with the start
//! offset checkpointed before it takes effect.
//!
//! Invariant: the log start offset only grows and never passes the written offset.

use super::{storage_err, PartitionLog};
use crate::error::ReadError;

impl PartitionLog {
    /// Applies `retention.ms` and `retention.bytes` (when `cleanup.policy` includes
    /// delete) as of `now_ms` to the segments that end at or below `upper_bound`, and
    /// deletes segments left below the log start offset. Returns how many segments went.
    ///
    /// `upper_bound` is the owner's high watermark (Kafka's bound too): retention never
    /// deletes what the in-sync replicas have not all got yet, or a follower would find
    /// the leader's log start past records never committed.
    pub async fn enforce_retention(&self, now_ms: i64, upper_bound: i64) -> usize {
        let config = self.config();
        let stats = self.segment_stats();
        // Segments wholly below the log start (DeleteRecords) go whatever the policy.
        let below_start = self.log_start_offset();
        let cut = if config.cleanup.delete {
            crate::retention::retention_cut(
                &stats,
                config.retention_ms,
                config.retention_bytes,
                now_ms,
            )
            .unwrap_or(i64::MIN)
            .min(upper_bound)
        } else {
            i64::MIN
        };
        self.delete_segments_before(cut.max(below_start)).await
    }

    /// DeleteRecords: moves the log start offset to `offset` (-1: `end`, the caller's
    /// high watermark; an offset past `end` or the written offset is out of range),
    /// persists it, and deletes the segments wholly below it. Returns the new log start.
    pub async fn delete_records(&self, offset: i64, end: i64) -> Result<i64, ReadError> {
        // One move of the start at a time: two requests racing could otherwise leave the
        // smaller offset in the checkpoint while memory holds the larger.
        let _one_at_a_time = self.start_moves.acquire_permit(1).await;
        let (lso, hw) = {
            let st = self.state.borrow();
            if let Some(f) = &st.failure {
                return Err(ReadError::Storage(f.clone()));
            }
            if st.closing {
                return Err(ReadError::Storage(storage_err(
                    &self.dir,
                    "the log is closing",
                )));
            }
            (st.log_start_offset, st.written_offset.min(end))
        };
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Err(ReadError::OffsetOutOfRange {
                offset,
                log_start_offset: lso,
                end_offset: hw,
            });
        }
        if target <= lso {
            return Ok(lso);
        }
        let dir = self.dir.clone();
        self.files()
            .disk()
            .run(move |fs| {
                crate::checkpoint::write(fs, &dir, crate::retention::LOG_START_CHECKPOINT, target)
            })
            .await
            .map_err(|e| ReadError::Storage(storage_err(&self.dir, e)))?;
        {
            let mut st = self.state.borrow_mut();
            st.log_start_offset = st.log_start_offset.max(target);
        }
        self.delete_segments_before(target).await;
        Ok(self.log_start_offset())
    }
}

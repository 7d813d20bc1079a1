//! Moving the log start: DeleteRecords, a follower taking up its leader's log start, and
//! time- and size-based retention, each followed by dropping the leader epochs wholly
//! below the new log start (and a checkpoint of the cache when that changed it).
//!
//! Invariants: the log start never passes the high watermark, so nothing a consumer may
//! not yet see is deleted; once a move succeeds, the epoch cache holds no epoch wholly
//! below the log start.

use super::Partition;
use corelog_storage::error::{ReadError, StorageError};

impl Partition {
    /// DeleteRecords: moves the log start to `offset` (-1: the high watermark; past it is
    /// out of range) and drops the epochs wholly below it. Returns the new log start.
    pub async fn delete_records(&self, offset: i64) -> Result<i64, ReadError> {
        let start = self
            .log
            .delete_records(offset, self.high_watermark())
            .await?;
        self.start_moved().await?;
        Ok(start)
    }

    /// A follower takes up its leader's log start (Kafka's follower does so from every
    /// fetch response), capped by its own high watermark: what the leader deleted by
    /// retention or DeleteRecords goes here too, and a follower that becomes leader
    /// serves none of it. Nothing to do when the log already starts there.
    pub async fn follow_log_start(&self, leader_log_start: i64) -> Result<(), ReadError> {
        let target = leader_log_start.min(self.high_watermark());
        if target <= self.log_start_offset() {
            return Ok(());
        }
        self.delete_records(target).await.map(|_| ())
    }

    /// Retention (time and size) of the log, never past the high watermark, then the
    /// epochs it left behind. Returns the number of segments deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<usize, StorageError> {
        let deleted = self
            .log
            .enforce_retention(now_ms, self.high_watermark())
            .await;
        if deleted > 0 {
            self.start_moved().await?;
        }
        Ok(deleted)
    }

    async fn start_moved(&self) -> Result<(), StorageError> {
        let changed = self
            .epochs
            .borrow_mut()
            .truncate_from_start(self.log.log_start_offset());
        if changed {
            self.persist_epochs().await?;
        }
        Ok(())
    }
}

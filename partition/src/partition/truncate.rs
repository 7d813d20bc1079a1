//! A follower's log cut to follow its leader's: the log closes, its directory is cut
//! (`PartitionLog::truncate_closed` / `reset_closed`) off the reactor, and a new
//! partition is opened on it in this one's place.
//!
//! Invariants: a leader's log is never cut; the partition returned follows the same
//! leader in the same epoch, its epoch cache holds nothing past the new log end and its
//! high watermark is no higher than that end (the one place the high watermark goes
//! down); the partition cut stays closed.

use super::Partition;
use corelog_storage::error::StorageError;
use corelog_storage::PartitionLog;
use std::rc::Rc;

/// How a follower's log is cut to follow its leader's ([`Partition::truncate_and_reopen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Everything from this offset on (a batch boundary) goes.
    Tail(i64),
    /// Everything goes; the log starts, empty, at `new_start`.
    Everything { new_start: i64 },
}

impl Partition {
    /// Cuts this follower's log (`Cut::Tail`: its divergent tail, found with leader
    /// epochs, at a batch boundary; `Cut::Everything`: all of it, when it ends below the
    /// leader's log start) and opens it again: the log closes, its files are cut
    /// (`PartitionLog::truncate_closed` / `reset_closed`, which also drop the producer
    /// snapshots past the cut, so producer state is rebuilt from what remains), and the
    /// partition returned takes this one's place, following the same leader in the same
    /// epoch, with the epochs past the cut dropped and the high watermark no higher than
    /// the new end. Whoever still holds this one finds it closed.
    pub async fn truncate_and_reopen(&self, cut: Cut) -> Result<Rc<Partition>, StorageError> {
        debug_assert!(!self.is_leader(), "a leader's log is never cut");
        let config = self.log.config();
        // The flusher finishes first, and with it a pending write of the epoch cache.
        self.close().await;
        let dir = self.dir.clone();
        let outcome = self
            .log
            .files()
            .disk()
            .run(move |fs| match cut {
                Cut::Tail(offset) => PartitionLog::truncate_closed(fs, &dir, offset),
                Cut::Everything { new_start } => PartitionLog::reset_closed(fs, &dir, new_start),
            })
            .await?;
        tracing::info!(dir = %self.dir.display(), ?cut, ?outcome, "log cut to follow its leader's");
        let high_watermark = match cut {
            Cut::Tail(_) => self.high_watermark.get().min(outcome.log_end_offset),
            // open_replica holds it within the new, empty log.
            Cut::Everything { new_start } => new_start,
        };
        let reopened = Partition::open_replica(
            self.dir.clone(),
            config,
            self.context.clone(),
            high_watermark,
        )
        .await?;
        reopened.become_follower(self.following().unwrap_or(-1), self.leader_epoch.get());
        Ok(reopened)
    }
}

//! The replica's role and its leader epochs: taking up leadership or following as the
//! metadata says, checking a request's `current_leader_epoch`, and the leader-epoch
//! cache (epoch → first offset) with its checkpoint file.
//!
//! Invariants: the leader epoch only grows (an older one from the metadata is ignored);
//! a replica never leads in an epoch older than the newest its log holds; a leader's
//! current epoch is put in the cache as it takes the epoch up, starting at the log end
//! then (an epoch the cache already holds keeps its start); the checkpoint is written
//! one writer at a time, from the cache as it is once the writer's turn comes, so the
//! file always holds the newest cache.

use super::{Partition, Role};
use crate::leader_epoch_cache::{LeaderEpochCache, CHECKPOINT_FILE};
use crate::replica_set::{Assignment, ReplicaSet};
use corelog_storage::error::StorageError;

/// A request's `current_leader_epoch` against this partition's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    /// The request's epoch is older: the client's metadata is stale (FENCED_LEADER_EPOCH).
    #[error("leader epoch {requested} is older than the current {current}")]
    Fenced { requested: i32, current: i32 },
    /// The request's epoch is newer than this replica knows (UNKNOWN_LEADER_EPOCH).
    #[error("leader epoch {requested} is newer than the current {current}")]
    Unknown { requested: i32, current: i32 },
}

impl Partition {
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.get()
    }

    /// This broker (`leader`) leads the partition in `epoch` with `assignment`: in a
    /// newer epoch (or after another role) from the log end, its followers known only by
    /// what they fetch from now on; in the current epoch, it takes up the newer ISR and
    /// replica list. An older epoch is ignored. Refused when the log holds batches of a
    /// newer epoch than `epoch`: leading in the older one would fence every up-to-date
    /// client.
    pub fn become_leader(
        &self,
        epoch: i32,
        leader: i32,
        assignment: Assignment,
    ) -> Result<(), StorageError> {
        let current = self.leader_epoch.get();
        if epoch < current {
            return Ok(());
        }
        if epoch == current {
            if let Role::Leader(set) = &mut *self.role.borrow_mut() {
                set.update(assignment, self.context.now_ms());
                self.hw_moved.notify(usize::MAX);
                return Ok(());
            }
        }
        if let Some(latest) = self.epochs.borrow().latest().filter(|l| l.epoch > epoch) {
            return Err(StorageError::new(
                self.dir.join(CHECKPOINT_FILE).display(),
                format!(
                    "the partition holds leader epoch {} but is to lead in older epoch {epoch}",
                    latest.epoch
                ),
            ));
        }
        self.leader_epoch.set(epoch);
        *self.role.borrow_mut() =
            Role::Leader(ReplicaSet::new(leader, assignment, self.context.now_ms()));
        if self.assign_current_epoch() {
            self.epochs_unpersisted.set(true);
        }
        self.hw_moved.notify(usize::MAX);
        Ok(())
    }

    /// Follows `leader` (-1: none now) in `epoch`; an older epoch is ignored. Produces
    /// waiting for acknowledgement as leader are answered NOT_LEADER_OR_FOLLOWER.
    pub fn become_follower(&self, leader: i32, epoch: i32) {
        if epoch < self.leader_epoch.get() {
            return;
        }
        self.leader_epoch.set(epoch);
        *self.role.borrow_mut() = Role::Follower { leader };
        self.hw_moved.notify(usize::MAX);
    }

    pub fn is_leader(&self) -> bool {
        matches!(*self.role.borrow(), Role::Leader(_))
    }

    /// The broker this replica follows, if it is a follower.
    pub fn following(&self) -> Option<i32> {
        match *self.role.borrow() {
            Role::Follower { leader } => Some(leader),
            _ => None,
        }
    }

    /// A copy of the leader-epoch cache.
    pub fn epoch_cache(&self) -> LeaderEpochCache {
        self.epochs.borrow().clone()
    }

    /// The newest epoch of a batch this replica holds (or took up as leader); -1 if none.
    pub fn latest_epoch(&self) -> i32 {
        self.epochs.borrow().latest().map_or(-1, |e| e.epoch)
    }

    /// Checks a request's `current_leader_epoch` (-1: not given, always accepted).
    pub fn check_leader_epoch(&self, requested: i32) -> Result<(), EpochError> {
        let current = self.leader_epoch.get();
        match requested {
            r if r < 0 || r == current => Ok(()),
            r if r < current => Err(EpochError::Fenced {
                requested: r,
                current,
            }),
            r => Err(EpochError::Unknown {
                requested: r,
                current,
            }),
        }
    }

    /// Where leader epoch `epoch` ended (OffsetForLeaderEpoch): `(epoch, end offset)`
    /// as the cache answers it against the written log end, or `(-1, -1)`.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.epochs
            .borrow()
            .end_offset_for(epoch, self.log.written_offset())
    }

    /// Puts the current epoch in the cache, starting at the log end (Kafka's
    /// `maybeAssignEpochStartOffset` when a replica becomes leader).
    fn assign_current_epoch(&self) -> bool {
        // Everything queued before this point belongs to the previous epoch.
        let start = self.log.log_end_offset();
        self.epochs
            .borrow_mut()
            .assign(self.leader_epoch.get(), start)
    }

    /// Writes the cache's current state to its checkpoint file, off the reactor.
    pub(super) async fn persist_epochs(&self) -> Result<(), StorageError> {
        let _one_at_a_time = self.checkpoint_writes.acquire_permit(1).await;
        // Taken after the permit: a later change is never overwritten by an older one.
        let text = self.epochs.borrow().encode();
        let dir = self.dir.clone();
        let files = self.log.files();
        let faults = files.faults().cloned();
        files
            .disk()
            .run(move |fs| {
                if let Some(faults) = faults {
                    faults.replacing(&dir.join(CHECKPOINT_FILE))?;
                }
                corelog_storage::checkpoint::replace_file(
                    fs,
                    &dir,
                    CHECKPOINT_FILE,
                    text.as_bytes(),
                )
            })
            .await
            .map_err(|e| StorageError::io(self.dir.join(CHECKPOINT_FILE).display(), &e))
    }
}

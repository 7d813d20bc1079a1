//! Appends and their acknowledgement: a leader's append of produced records, stamped
//! with its current epoch; a follower's append of the batches its leader sent, offsets
//! and epochs kept, its epoch cache following them; and the waits of acks=1 and
//! acks=all.
//!
//! Invariants: only a leader appends produced records, only a follower replicated ones;
//! appends are synchronous, so offsets follow the order appends arrive in; while the
//! epoch cache holds a change its checkpoint does not, the log's writes are held until
//! the checkpoint is durable, so no batch reaches the file before the cache that names
//! its epoch; an acks=all produce is acknowledged only once the high watermark passes
//! it, while this replica leads and its ISR holds `min.insync.replicas`.

use super::Partition;
use corelog_storage::error::AppendError;
use corelog_storage::{AckLevel, AppendTicket};
use std::rc::Rc;

/// Why an acks=all produce was not acknowledged once appended.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AckError {
    #[error(transparent)]
    Append(#[from] AppendError),
    /// This replica stopped leading before the ISR had the records.
    #[error("no longer the leader")]
    NotLeader,
    /// The ISR shrank below `min.insync.replicas` after the append: the records may be
    /// committed, or may wait (the high watermark does not move while the ISR is that
    /// small) until the ISR grows back.
    #[error("the ISR shrank below min.insync.replicas after the append")]
    NotEnoughReplicasAfterAppend,
}

impl Partition {
    /// Validates and queues `records`, stamped with the current leader epoch. The first
    /// append after the epoch cache changed starts writing its checkpoint and holds the
    /// log's writes until it is durable: no batch of the new epoch reaches the file before
    /// the cache that names the epoch does, and appends stay synchronous, so their order
    /// is the order they arrived in. Should the checkpoint fail, the log fails with it;
    /// should it find the filesystem full, it is tried again, and appends are refused
    /// meanwhile.
    pub fn append(self: &Rc<Self>, records: &[u8]) -> Result<AppendTicket, AppendError> {
        debug_assert!(self.is_leader(), "only a leader appends produced records");
        self.persist_epochs_before_writes();
        debug_assert!(
            self.epochs
                .borrow()
                .latest()
                .is_some_and(|e| e.epoch == self.leader_epoch.get()),
            "the current epoch is in the cache before anything is stamped with it"
        );
        self.log.append(records, self.leader_epoch.get())
    }

    /// [`Self::append`] of a batch the broker writes itself for a producer (a group
    /// coordinator's transactional offset commit): the producer's epoch is checked, its
    /// sequences are not (`PartitionLog::append_unsequenced`).
    pub fn append_unsequenced(
        self: &Rc<Self>,
        records: &[u8],
    ) -> Result<AppendTicket, AppendError> {
        debug_assert!(
            self.is_leader(),
            "only a leader appends coordinator records"
        );
        self.persist_epochs_before_writes();
        self.log
            .append_unsequenced(records, self.leader_epoch.get())
    }

    /// Appends the transaction marker the coordinator asks for (WriteTxnMarkers), stamped
    /// with the current leader epoch, as [`Self::append`] does for produced records.
    pub fn append_marker(
        self: &Rc<Self>,
        marker: &corelog_storage::txn_marker::TxnMarker,
    ) -> Result<AppendTicket, AppendError> {
        debug_assert!(self.is_leader(), "only a leader appends markers");
        self.persist_epochs_before_writes();
        self.log.append_marker(marker, self.leader_epoch.get())
    }

    /// Appends batches fetched from the leader as they are (offsets and epochs kept). An
    /// epoch newer than the cache's latest starts at its first batch here, as it did on
    /// the leader, and the checkpoint naming it is durable before the batch is written.
    pub fn append_as_follower(
        self: &Rc<Self>,
        records: &[u8],
    ) -> Result<AppendTicket, AppendError> {
        debug_assert!(
            self.following().is_some(),
            "only a follower appends replicated records"
        );
        let ticket = self.log.append_replicated(records)?;
        // Synchronous with the append: the flusher cannot write the batches before the
        // hold below is taken.
        {
            let mut epochs = self.epochs.borrow_mut();
            for item in corelog_storage::batch::batches(records) {
                let Ok((header, _)) = item else {
                    break; // a trailing partial batch: not appended either
                };
                if header.base_offset >= ticket.next_offset {
                    break;
                }
                if epochs.assign(header.partition_leader_epoch, header.base_offset) {
                    self.epochs_unpersisted.set(true);
                }
            }
        }
        self.persist_epochs_before_writes();
        Ok(ticket)
    }

    /// When the cache is not yet durable, starts writing it and holds the log's writes
    /// until it is.
    fn persist_epochs_before_writes(self: &Rc<Self>) {
        if !self.epochs_unpersisted.replace(false) {
            return;
        }
        let hold = self.log.hold_writes();
        let partition = self.clone();
        self.context.runtime.spawn(async move {
            // A full filesystem is waited out as the log's own writes wait it out: new
            // appends are refused meanwhile, and what is queued is written once the
            // checkpoint is. Any other error fails the log.
            loop {
                let Err(e) = partition.persist_epochs().await else {
                    partition.log.space_again();
                    break;
                };
                if let Err(e) = partition.log.retry_or_fail(e).await {
                    partition.log.fail_with(e); // logged there, with the path
                    break;
                }
            }
            drop(hold);
        });
    }

    /// Waits for an append per `acks`: acks=1 once written here.
    pub async fn wait(&self, ticket: AppendTicket, level: AckLevel) -> Result<(), AppendError> {
        self.log.wait(ticket, level).await
    }

    /// Waits until an acks=all produce is committed: durable here, and the high watermark
    /// past it (every ISR member holds it). Fails when this replica stops leading first,
    /// and with NOT_ENOUGH_REPLICAS_AFTER_APPEND as soon as the ISR is below
    /// `min.insync.replicas`, committed or not: Kafka answers so once the high watermark
    /// passes, and here the high watermark stands still while the ISR is that small, so
    /// the producer hears it now instead of at its timeout (it retries; an idempotent
    /// retry is answered with these offsets once they are committed).
    pub async fn wait_committed(&self, ticket: AppendTicket) -> Result<(), AckError> {
        self.log.wait(ticket, AckLevel::All).await?;
        let synced_at = self.log.now();
        loop {
            let listener = self.hw_moved.listen();
            if !self.is_leader() {
                return Err(AckError::NotLeader);
            }
            // Checked first: the ISR that committed the records may since have shrunk.
            if self.isr_len() < self.min_insync_replicas() {
                return Err(AckError::NotEnoughReplicasAfterAppend);
            }
            if self.high_watermark() >= ticket.next_offset {
                self.log
                    .observe_since(corelog_storage::Stage::ReplicationWait, synced_at);
                return Ok(());
            }
            if let Some(e) = self.log.failure() {
                return Err(AppendError::Storage(e).into());
            }
            if self.log.is_closing() {
                return Err(AppendError::Closed.into());
            }
            listener.await;
        }
    }
}

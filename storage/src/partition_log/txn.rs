//! Transactions in the log: the markers a partition leader appends at the coordinator's
//! request, the first unstable offset that bounds what `read_committed` consumers read,
//! the aborted transactions such a fetch is told about, and their `.txnindex` files.
//!
//! The producer state (`producer_state`) decides; this module keeps the log's part:
//! every aborted transaction's entry is added in marker order, synchronously with the
//! marker's offset, by all three paths that add batches (a leader's marker here, a
//! follower's replicated batches, the replay at open), so a follower and a log reopened
//! after a crash hold the same entries as the leader.
//!
//! Durability of the entries: before each producer snapshot, every segment that gained
//! entries since the last one has its `.txnindex` written whole (`persist_txn_indexes`),
//! with the entries known in the instant the snapshot's state was taken; the snapshot
//! is written only if that succeeded. So every entry whose marker lies below the newest
//! snapshot is on disk, and at open the replay from that snapshot adds the rest. A file
//! may also hold the entry of a marker still queued when it was written; if a crash
//! loses that marker (the entry is at or past the recovered end), open drops the entry
//! from memory and from the file, before other batches take its offsets.

use super::{io_err, AppendTicket, PartitionLog, Pending};
use crate::batch;
use crate::error::AppendError;
use crate::producer_state::ProducerState;
use crate::txn_index::{self, AbortedTxn, AbortedTxns};
use crate::txn_marker::{self, TxnMarker};
use bytes::BytesMut;

impl PartitionLog {
    /// Appends the transaction marker the coordinator asks for (WriteTxnMarkers), ending
    /// the producer's open transaction here if it has one. Checked first: a marker older
    /// than the producer's epoch, or from an older coordinator, is refused and nothing
    /// is written. Wait on the ticket with [`Self::wait`].
    pub fn append_marker(
        &self,
        marker: &TxnMarker,
        leader_epoch: i32,
    ) -> Result<AppendTicket, AppendError> {
        let now_ms = self.context.now_ms();
        self.producers.borrow().check_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
        )?;
        let flush_messages = self.config.borrow().flush_messages;
        let mut st = self.state.borrow_mut();
        if let Some(f) = st.failure.as_ref().or(st.out_of_space.as_ref()) {
            return Err(AppendError::Storage(f.clone()));
        }
        if st.closing {
            return Err(AppendError::Closed);
        }
        let mut bytes = BytesMut::from(&txn_marker::build(marker, now_ms)[..]);
        let offset = st.next_offset;
        batch::set_base_offset(&mut bytes, offset);
        batch::set_partition_leader_epoch(&mut bytes, leader_epoch);
        st.next_offset = offset + 1;
        let done = self.producers.borrow_mut().record_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.kind,
            offset,
            now_ms,
        );
        if let Some(done) = done.filter(|d| d.aborted) {
            let entry = AbortedTxn {
                producer_id: done.producer_id,
                first_offset: done.first_offset,
                last_offset: done.last_offset,
                last_stable_offset: self.producers.borrow().last_stable_offset_after(&done),
            };
            self.aborted.borrow_mut().push(entry);
        }
        self.enqueue(
            st,
            Pending {
                base_offset: offset,
                next_offset: offset + 1,
                bytes: bytes.freeze(),
            },
            flush_messages,
        );
        Ok(AppendTicket {
            base_offset: offset,
            next_offset: offset + 1,
        })
    }

    /// The first offset a `read_committed` consumer may not read yet given the
    /// partition's `high_watermark` (see `ProducerState::first_unstable_offset`);
    /// `None` when no transaction holds anything back.
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        self.producers
            .borrow_mut()
            .first_unstable_offset(high_watermark)
    }

    /// The first offset of the transaction `producer_id` has open here under `epoch`, if
    /// any. A transactional batch for which there is none opens a transaction, which
    /// the partition leader first verifies with the coordinator: so does one under a
    /// newer epoch while the older epoch's transaction waits for its marker (Kafka's
    /// `hasOngoingTransaction`).
    pub fn open_transaction(&self, producer_id: i64, epoch: i16) -> Option<i64> {
        self.producers
            .borrow()
            .get(producer_id)
            .filter(|e| e.epoch == epoch)
            .and_then(|e| e.current_txn_first_offset)
    }

    /// Forgets the completed transactions whose marker the high watermark has passed:
    /// called as it moves, on leaders and followers alike, so that they never pile up
    /// where nobody reads (Kafka's `onHighWatermarkUpdated`).
    pub fn prune_completed_transactions(&self, high_watermark: i64) {
        self.producers
            .borrow_mut()
            .first_unstable_offset(high_watermark);
    }

    /// The aborted transactions a `read_committed` fetch from `fetch_offset` of records
    /// below `upper_bound` must be told about, in marker order.
    pub fn aborted_transactions(&self, fetch_offset: i64, upper_bound: i64) -> Vec<AbortedTxn> {
        self.aborted.borrow().collect(fetch_offset, upper_bound)
    }

    /// The `.txnindex` files to write before a producer snapshot taken now: every
    /// segment that gained entries since the last snapshot, with all its entries, and
    /// the offset past the newest entry. Taken in the same instant as the snapshot's
    /// state, so that each entry below the snapshot's offset is in one of them (see the
    /// module doc); `None` when no segment gained any.
    pub(super) fn txn_index_writes(&self) -> Option<TxnIndexWrites> {
        let from = self.txn_index_persisted.get();
        let aborted = self.aborted.borrow();
        let last = aborted.in_range(from, i64::MAX).last().copied()?;
        let st = self.state.borrow();
        let bases: Vec<i64> = st.segments.keys().copied().collect();
        let mut files = Vec::new();
        for (i, base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            if !aborted.in_range((*base).max(from), next_base).is_empty() {
                files.push((*base, aborted.in_range(*base, next_base).to_vec()));
            }
        }
        Some(TxnIndexWrites {
            files,
            end: last.last_offset + 1,
        })
    }

    /// Writes the files [`Self::txn_index_writes`] listed, whole. The producer snapshot
    /// taken with them must not be written if this fails.
    pub(super) async fn persist_txn_indexes(
        &self,
        writes: TxnIndexWrites,
    ) -> Result<(), crate::StorageError> {
        let dir = self.dir.clone();
        let TxnIndexWrites { files, end } = writes;
        self.files()
            .disk()
            .run(move |fs| -> std::io::Result<()> {
                for (base, entries) in &files {
                    txn_index::write(fs, &dir, *base, entries)?;
                }
                Ok(())
            })
            .await
            .map_err(|e| io_err(&self.dir, &e))?;
        // Entries added meanwhile are for later markers: at or past `end`.
        self.txn_index_persisted
            .set(self.txn_index_persisted.get().max(end));
        Ok(())
    }
}

/// The `.txnindex` files a producer snapshot needs on disk first: per segment base its
/// entries, and the offset past the newest of them.
pub(super) struct TxnIndexWrites {
    files: Vec<(i64, Vec<AbortedTxn>)>,
    end: i64,
}

/// Takes one stored batch into `producers` as a follower's append and the replay at open
/// do (no check: the leader made them): an idempotent or transactional producer's batch
/// is recorded, a transaction marker ends its transaction. Returns the aborted
/// transaction's entry when the batch is a marker that aborted one.
pub(super) fn take_stored_batch(
    producers: &mut ProducerState,
    header: &batch::BatchHeader,
    bytes: &[u8],
    now_ms: i64,
    written_offset: i64,
) -> Option<AbortedTxn> {
    if let Some(p) = crate::producer_state::ProducerBatch::from_header(header) {
        producers.record(
            &p,
            header.base_offset,
            header.last_offset() + 1,
            now_ms,
            written_offset,
        );
        return None;
    }
    let (kind, coordinator_epoch) = txn_marker::parse(header, bytes)?;
    let done = producers.record_marker(
        header.producer_id,
        header.producer_epoch,
        coordinator_epoch,
        kind,
        header.base_offset,
        now_ms,
    )?;
    done.aborted.then(|| AbortedTxn {
        producer_id: done.producer_id,
        first_offset: done.first_offset,
        last_offset: done.last_offset,
        last_stable_offset: producers.last_stable_offset_after(&done),
    })
}

/// The aborted transactions of the segments at `bases` as their files hold them, those
/// whose marker is at or past `log_end` (lost in a crash) left out. A file holding such
/// entries is rewritten without them at once: the offsets they name will be taken by
/// other batches, and a later open, with the log end past them, must not believe them.
pub(super) fn load_aborted(
    fs: &dyn crate::fs::Fs,
    dir: &std::path::Path,
    bases: &[i64],
    log_end: i64,
) -> Result<AbortedTxns, crate::StorageError> {
    let mut aborted = AbortedTxns::new();
    for base in bases {
        let mut entries = txn_index::read(fs, dir, *base).map_err(|e| io_err(dir, &e))?;
        let held = entries.len();
        entries.retain(|e| e.last_offset < log_end);
        if entries.len() != held {
            tracing::info!(dir = %dir.display(), base, lost = held - entries.len(),
                "dropped aborted-transaction entries of markers a crash lost");
            txn_index::write(fs, dir, *base, &entries).map_err(|e| io_err(dir, &e))?;
        }
        aborted.extend(entries);
    }
    Ok(aborted)
}

//! Idempotent-producer state of one partition: for every producer id that wrote to it, the
//! producer's epoch and its last [`BATCHES_RETAINED`] batches (sequence range and the
//! offsets they were given).
//!
//! This is what lets a producer retry safely (Kafka's `ProducerStateManager`): a batch whose
//! sequences match one of the remembered batches of the same epoch is a retry of a batch
//! already in the log, and is answered with that batch's offsets instead of being written
//! again. At least five batches because a Kafka client pipelines up to five requests per
//! connection when idempotence is on (remembering only the last one lets a retry of an
//! earlier one be written twice); twice that is kept, so that a snapshot taken while up to five batches wait to
//! be written (`producer_snapshot`: those are dropped at load and replayed from the log)
//! still holds the five before them — the retry window and the last sequence survive a
//! crash. Retries of any retained batch are answered as duplicates.
//!
//! Rules (Kafka's, `ProducerAppendInfo.checkProducerEpoch` / `checkSequence`):
//! - an epoch below the producer's current one is fenced (INVALID_PRODUCER_EPOCH);
//! - a new, higher epoch must start at sequence 0;
//! - within an epoch each batch starts right after the last one, the sequence wrapping
//!   from `i32::MAX` to 0; anything else is OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - a producer the partition does not know (never seen, expired, or its batches lost in a
//!   crash) may start at any sequence: its history is gone, so nothing can be checked.
//!
//! The state changes only in [`ProducerState::record`], called by the log when it assigns
//! offsets, synchronously and in offset order; a duplicate of a batch still waiting to be
//! written is answered with that batch's (future) offsets, and the caller waits for it like
//! the original did. Invariants: an entry holds at most `BATCHES_RETAINED` batches,
//! oldest first, all of the entry's epoch, with increasing offsets.
//!
//! Memory is bounded: at most [`PRODUCERS_PER_PARTITION_MAX`] producers per partition;
//! past it the longest-idle eighth of those with nothing waiting to be written and no
//! open transaction is forgotten (their retries then count as new writes, which is what
//! Kafka does for expired producers too).
//!
//! Transactions (Kafka's `ProducerStateManager`): a transactional producer's first
//! transactional batch here opens its transaction at that batch's offset, and its
//! transaction marker (`txn_marker`, written at the coordinator's request) closes it. The
//! offsets of open transactions bound the last stable offset, which `read_committed`
//! consumers read up to; a transaction whose marker is written but not yet below the high
//! watermark still bounds it ([`ProducerState::first_unstable_offset`]), so a consumer
//! never reads a transaction's records before it can read its marker. Rules:
//! - a producer with an open transaction may not write a non-transactional batch
//!   (INVALID_TXN_STATE);
//! - a marker older than the producer's epoch is fenced, and one from a coordinator
//!   older than the last that wrote here is refused (TRANSACTION_COORDINATOR_FENCED);
//! - a marker with a newer epoch (transaction version 2 bumps it at every end) takes
//!   the epoch up, and the producer's next batch must start at sequence 0;
//! - a marker for a producer with no open transaction is harmless: it changes nothing
//!   but the epochs.
//!
//! Batches the broker writes itself for a producer (a group coordinator's transactional
//! offset commit, Kafka's `AppendOrigin.COORDINATOR`) carry no client sequence: they are
//! checked by [`ProducerState::check_unsequenced`] — the epoch, and the open-transaction
//! rule — and never answered as duplicates; once recorded they count like any other
//! batch (a transactional one opens the producer's transaction here).
//!
//! A producer with an open transaction is never forgotten, by expiry or to make room:
//! its transaction would otherwise hold nothing back and its aborted records could be
//! read.

use super::batch::BatchHeader;
use crate::txn_marker::MarkerKind;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// How many batches per producer a retry is recognised against (Kafka's
/// `NUM_BATCHES_TO_RETAIN`, matching `max.in.flight.requests.per.connection` ≤ 5).
pub const BATCHES_PER_PRODUCER: usize = 5;

/// Batches kept per producer: the retry window twice over (see the module doc).
pub const BATCHES_RETAINED: usize = 2 * BATCHES_PER_PRODUCER;

/// Producers remembered per partition before the longest idle are forgotten.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 50_000;

/// `producerId` of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;

/// The sequence and producer fields of one batch, read from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    /// The batch's largest record timestamp (what DescribeProducers reports).
    pub max_timestamp: i64,
    /// Written in a transaction (the batch's transactional bit).
    pub transactional: bool,
}

impl ProducerBatch {
    /// `None` for a batch without a producer id (not idempotent) and for a control batch
    /// (a transaction marker is [`ProducerState::record_marker`]'s).
    pub fn from_header(h: &BatchHeader) -> Option<ProducerBatch> {
        if h.producer_id <= NO_PRODUCER_ID || h.is_control() {
            return None;
        }
        Some(ProducerBatch {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            last_seq: increment_sequence(h.base_sequence, h.last_offset_delta),
            max_timestamp: h.max_timestamp,
            transactional: h.is_transactional(),
        })
    }
}

/// `seq + by`, wrapping past `i32::MAX` to 0 as Kafka's sequences do
/// (`DefaultRecordBatch.incrementSequence`).
pub fn increment_sequence(seq: i32, by: i32) -> i32 {
    let next = i64::from(seq) + i64::from(by.max(0));
    if next > i64::from(i32::MAX) {
        (next - i64::from(i32::MAX) - 1) as i32
    } else {
        next as i32
    }
}

/// Whether `next` is the sequence right after `last`.
pub fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// One remembered batch: its sequence range and where it went in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    /// One past the batch's last offset.
    pub next_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    /// Oldest first; empty when the batches were lost (then any sequence is accepted).
    pub batches: VecDeque<BatchMeta>,
    /// Broker clock of the producer's last write here (ms since the epoch): drives expiry.
    pub last_seen_ms: i64,
    /// Largest record timestamp of its newest batch (Kafka's `lastTimestamp`); -1 when
    /// unknown (restored from a snapshot written before it was kept).
    pub last_timestamp_ms: i64,
    /// Offset of the first batch of the producer's open transaction here.
    pub current_txn_first_offset: Option<i64>,
    /// Epoch of the coordinator that wrote the producer's last marker here; -1: none yet.
    pub coordinator_epoch: i32,
    /// The epoch was taken up by a marker and no batch came since: the next one must
    /// start at sequence 0 (not kept in snapshots; after a restart any sequence is
    /// accepted, as for a producer whose batches were lost).
    pub epoch_from_marker: bool,
}

impl ProducerEntry {
    /// An entry with no batches yet.
    pub fn new(epoch: i16, now_ms: i64) -> ProducerEntry {
        ProducerEntry {
            epoch,
            batches: VecDeque::with_capacity(BATCHES_PER_PRODUCER),
            last_seen_ms: now_ms,
            last_timestamp_ms: -1,
            current_txn_first_offset: None,
            coordinator_epoch: -1,
            epoch_from_marker: false,
        }
    }
}

/// A transaction that a marker ended in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    /// Offset of its first batch here.
    pub first_offset: i64,
    /// Offset of its marker.
    pub last_offset: i64,
    pub aborted: bool,
}

/// What to do with a batch that passed the sequence checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// A new batch: assign offsets and [`ProducerState::record`] it.
    Append,
    /// A retry of a remembered batch: answer with its offsets, write nothing.
    Duplicate(BatchMeta),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id} epoch {epoch} is older than its current epoch {current}")]
    StaleEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error(
        "out of order sequence for producer {producer_id} (epoch {epoch}): \
         expected {expected}, got {got}"
    )]
    OutOfOrder {
        producer_id: i64,
        epoch: i16,
        expected: i64,
        got: i32,
    },
    #[error(
        "producer {producer_id} has an open transaction; a non-transactional write is refused"
    )]
    TxnOpen { producer_id: i64 },
    #[error(
        "marker from coordinator epoch {coordinator_epoch} for producer {producer_id}, \
         older than {current}"
    )]
    CoordinatorFenced {
        producer_id: i64,
        coordinator_epoch: i32,
        current: i32,
    },
}

/// One producer as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    /// Sequence of its last remembered record; -1 when no batch is remembered.
    pub last_sequence: i32,
    /// Largest record timestamp of its newest batch; -1 when unknown.
    pub last_timestamp_ms: i64,
    /// Epoch of the coordinator of its last marker here; -1 when none.
    pub coordinator_epoch: i32,
    /// First offset of its open transaction here; -1 when none.
    pub current_txn_start_offset: i64,
}

#[derive(Debug, Default)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions by first offset: the producer of each.
    ongoing: BTreeMap<i64, i64>,
    /// Transactions whose marker is written but was not yet below the high watermark
    /// when last asked, by first offset.
    unreplicated: BTreeMap<i64, CompletedTxn>,
}

impl ProducerState {
    pub fn new() -> ProducerState {
        ProducerState::default()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Every remembered producer, by id.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(id, e)| ActiveProducer {
                producer_id: *id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp_ms: e.last_timestamp_ms,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    pub fn entries(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// The completed transactions whose marker was not below the high watermark when
    /// last asked ([`Self::first_unstable_offset`]), by first offset.
    pub fn unreplicated(&self) -> impl Iterator<Item = &CompletedTxn> {
        self.unreplicated.values()
    }

    /// Puts back a completed transaction read from a snapshot as not yet replicated:
    /// until the high watermark passes its marker, it holds the last stable offset at
    /// its first offset.
    pub fn restore_unreplicated(&mut self, done: CompletedTxn) {
        debug_assert!(done.first_offset <= done.last_offset);
        self.unreplicated.insert(done.first_offset, done);
    }

    /// Checks `batch` against the producer's history without changing anything.
    pub fn check(&self, batch: &ProducerBatch) -> Result<SequenceCheck, SequenceError> {
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            // A transactional producer new to the partition starts at sequence 0 (Kafka
            // says so for transaction version 2 producers; for version 1 it checks against
            // the lowest sequence being verified). Without this, a later batch of a
            // pipelining producer whose first batch was refused (its verification sent
            // back for a retry) would be appended first, and the retried first batch
            // then refused for ever as out of order. An idempotent producer's state may
            // have expired, so any sequence is taken from it (as Kafka).
            if batch.transactional && batch.first_seq != 0 {
                return Err(SequenceError::OutOfOrder {
                    producer_id: batch.producer_id,
                    epoch: batch.epoch,
                    expected: 0,
                    got: batch.first_seq,
                });
            }
            return Ok(SequenceCheck::Append);
        };
        if batch.epoch == entry.epoch {
            if let Some(dup) = entry
                .batches
                .iter()
                .find(|b| b.first_seq == batch.first_seq && b.last_seq == batch.last_seq)
            {
                return Ok(SequenceCheck::Duplicate(*dup));
            }
        }
        if batch.epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id: batch.producer_id,
                epoch: batch.epoch,
                current: entry.epoch,
            });
        }
        // A fenced producer is told so first (Kafka checks the epoch before the rest).
        if !batch.transactional && entry.current_txn_first_offset.is_some() {
            return Err(SequenceError::TxnOpen {
                producer_id: batch.producer_id,
            });
        }
        if batch.epoch > entry.epoch && entry.current_txn_first_offset.is_some() {
            // A transaction under the old epoch is still open here (its marker, which
            // under transaction version 2 carries the bumped epoch, has not come yet): a
            // batch under the new epoch belongs to the next transaction and must not
            // join this one. Its leader verifies it with the coordinator first, which
            // holds it back until the markers are written; this is the last line.
            return Err(SequenceError::TxnOpen {
                producer_id: batch.producer_id,
            });
        }
        if batch.epoch > entry.epoch {
            // A bumped epoch restarts the sequence.
            if batch.first_seq != 0 {
                return Err(SequenceError::OutOfOrder {
                    producer_id: batch.producer_id,
                    epoch: batch.epoch,
                    expected: 0,
                    got: batch.first_seq,
                });
            }
            return Ok(SequenceCheck::Append);
        }
        match entry.batches.back() {
            None if entry.epoch_from_marker && batch.first_seq != 0 => {
                Err(SequenceError::OutOfOrder {
                    producer_id: batch.producer_id,
                    epoch: batch.epoch,
                    expected: 0,
                    got: batch.first_seq,
                })
            }
            None => Ok(SequenceCheck::Append),
            Some(last) if in_sequence(last.last_seq, batch.first_seq) => Ok(SequenceCheck::Append),
            Some(last) => Err(SequenceError::OutOfOrder {
                producer_id: batch.producer_id,
                epoch: batch.epoch,
                expected: (i64::from(last.last_seq) + 1) % (i64::from(i32::MAX) + 1),
                got: batch.first_seq,
            }),
        }
    }

    /// Checks a batch the broker writes itself for a producer (see the module doc):
    /// without the sequence checks, so without duplicate detection either — two such
    /// batches with the same sequences are two writes. Changes nothing.
    pub fn check_unsequenced(&self, batch: &ProducerBatch) -> Result<(), SequenceError> {
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            return Ok(());
        };
        if batch.epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id: batch.producer_id,
                epoch: batch.epoch,
                current: entry.epoch,
            });
        }
        if !batch.transactional && entry.current_txn_first_offset.is_some() {
            return Err(SequenceError::TxnOpen {
                producer_id: batch.producer_id,
            });
        }
        Ok(())
    }

    /// Remembers that `batch` was given offsets `[first_offset, next_offset)`.
    /// `written_offset` is the log's written end: producers with batches at or past it are
    /// never forgotten to make room (their retries must still be recognised).
    pub fn record(
        &mut self,
        batch: &ProducerBatch,
        first_offset: i64,
        next_offset: i64,
        now_ms: i64,
        written_offset: i64,
    ) {
        debug_assert!(first_offset < next_offset);
        if !self.producers.contains_key(&batch.producer_id)
            && self.producers.len() >= PRODUCERS_PER_PARTITION_MAX
        {
            self.forget_longest_idle(PRODUCERS_PER_PARTITION_MAX / 8, written_offset);
        }
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| ProducerEntry::new(batch.epoch, now_ms));
        if entry.epoch != batch.epoch {
            entry.epoch = batch.epoch;
            entry.batches.clear();
        }
        entry.epoch_from_marker = false;
        if batch.transactional && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(first_offset);
            self.ongoing.insert(first_offset, batch.producer_id);
        }
        debug_assert!(entry
            .batches
            .back()
            .is_none_or(|b| b.next_offset <= first_offset));
        if entry.batches.len() == BATCHES_RETAINED {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: batch.first_seq,
            last_seq: batch.last_seq,
            first_offset,
            next_offset,
        });
        entry.last_seen_ms = entry.last_seen_ms.max(now_ms);
        entry.last_timestamp_ms = batch.max_timestamp;
    }

    /// Checks a transaction marker for `producer_id` against what this partition knows,
    /// without changing anything.
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), SequenceError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id,
                epoch,
                current: entry.epoch,
            });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(SequenceError::CoordinatorFenced {
                producer_id,
                coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records the marker written at `offset` (checked by the leader; a follower and a
    /// replay take it as it is): the producer's open transaction, if any, ends there.
    #[allow(clippy::too_many_arguments)]
    pub fn record_marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        kind: MarkerKind,
        offset: i64,
        now_ms: i64,
    ) -> Option<CompletedTxn> {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(epoch, now_ms));
        if entry.epoch != epoch {
            entry.epoch = epoch;
            entry.batches.clear();
            entry.epoch_from_marker = true;
        }
        entry.coordinator_epoch = coordinator_epoch;
        entry.last_seen_ms = entry.last_seen_ms.max(now_ms);
        let first_offset = entry.current_txn_first_offset.take()?;
        debug_assert!(first_offset < offset, "a marker follows its transaction");
        let removed = self.ongoing.remove(&first_offset);
        debug_assert_eq!(removed, Some(producer_id));
        let done = CompletedTxn {
            producer_id,
            first_offset,
            last_offset: offset,
            aborted: !kind.is_commit(),
        };
        self.unreplicated.insert(first_offset, done);
        Some(done)
    }

    /// The last stable offset right after `done`'s marker (what its aborted-transaction
    /// entry records): the first offset of a transaction still open, or the offset after
    /// the marker.
    pub fn last_stable_offset_after(&self, done: &CompletedTxn) -> i64 {
        self.ongoing
            .keys()
            .next()
            .copied()
            .unwrap_or(done.last_offset + 1)
            .min(done.last_offset + 1)
    }

    /// The first offset a `read_committed` consumer may not read yet, given the high
    /// watermark: the start of the earliest transaction that is open or whose marker is
    /// not below `high_watermark`. `None` when there is none. Forgets the completed
    /// transactions the high watermark has passed.
    pub fn first_unstable_offset(&mut self, high_watermark: i64) -> Option<i64> {
        if !self.unreplicated.is_empty() {
            self.unreplicated
                .retain(|_, t| t.last_offset >= high_watermark);
        }
        let open = self.ongoing.keys().next().copied();
        let unreplicated = self.unreplicated.keys().next().copied();
        match (open, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Puts back an entry read from a snapshot. A last-seen time in the future (the clock
    /// was stepped back) counts as now, so the entry still expires.
    pub fn restore(&mut self, producer_id: i64, mut entry: ProducerEntry, now_ms: i64) {
        debug_assert!(entry.batches.len() <= BATCHES_RETAINED);
        entry.last_seen_ms = entry.last_seen_ms.min(now_ms);
        if let Some(first) = entry.current_txn_first_offset {
            self.ongoing.insert(first, producer_id);
        }
        if let Some(old) = self.producers.insert(producer_id, entry) {
            if let Some(first) = old.current_txn_first_offset {
                self.ongoing.remove(&first);
            }
        }
    }

    /// Forgets the batches at or past `offset` (they are replayed from the log, or were
    /// lost with it), and transactions opened there. Entries stay, with their epoch, even
    /// when no batch is left.
    pub fn forget_batches_from(&mut self, offset: i64) {
        for entry in self.producers.values_mut() {
            entry.batches.retain(|b| b.first_offset < offset);
            if entry.current_txn_first_offset.is_some_and(|f| f >= offset) {
                entry.current_txn_first_offset = None;
            }
        }
        self.ongoing.retain(|first, _| *first < offset);
        self.unreplicated.retain(|_, t| t.last_offset < offset);
    }

    /// Forgets producers idle for `expiration_ms` or more, and those whose every batch lies
    /// below the log start (deleted by retention; Kafka's `truncateHead`). Returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64, log_start_offset: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            if e.current_txn_first_offset.is_some() {
                return true;
            }
            let idle = now_ms.saturating_sub(e.last_seen_ms) >= expiration_ms;
            let deleted = e
                .batches
                .back()
                .is_some_and(|b| b.next_offset <= log_start_offset);
            !idle && !deleted
        });
        before - self.producers.len()
    }

    fn forget_longest_idle(&mut self, count: usize, written_offset: i64) {
        let mut seen: Vec<(i64, i64)> = self
            .producers
            .iter()
            .filter(|(_, e)| {
                // Nothing at or past the written end (`is_none_or` needs a newer MSRV),
                // and no transaction open.
                !matches!(e.batches.back(), Some(b) if b.next_offset > written_offset)
                    && e.current_txn_first_offset.is_none()
            })
            .map(|(id, e)| (e.last_seen_ms, *id))
            .collect();
        if seen.is_empty() {
            return; // every producer has a batch in flight: over the cap until written
        }
        let count = count.clamp(1, seen.len().max(1));
        if seen.len() > count {
            seen.select_nth_unstable(count - 1);
        }
        for (_, id) in seen.into_iter().take(count) {
            self.producers.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, epoch: i16, first: i32, count: i32) -> ProducerBatch {
        ProducerBatch {
            producer_id: pid,
            epoch,
            first_seq: first,
            last_seq: increment_sequence(first, count - 1),
            max_timestamp: 1_700_000_000_000,
            transactional: false,
        }
    }

    fn txn_batch(pid: i64, epoch: i16, first: i32, count: i32) -> ProducerBatch {
        ProducerBatch {
            transactional: true,
            ..batch(pid, epoch, first, count)
        }
    }

    /// Checks and records like the log does; returns the offsets given or found.
    fn append(
        s: &mut ProducerState,
        next: &mut i64,
        b: ProducerBatch,
    ) -> Result<(i64, bool), SequenceError> {
        match s.check(&b)? {
            SequenceCheck::Duplicate(m) => Ok((m.first_offset, true)),
            SequenceCheck::Append => {
                let first = *next;
                *next += (i64::from(b.last_seq) - i64::from(b.first_seq)).rem_euclid(1 << 31) + 1;
                s.record(&b, first, *next, 0, i64::MAX);
                Ok((first, false))
            }
        }
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 0), 5);
        assert!(in_sequence(i32::MAX, 0));
        assert!(in_sequence(41, 42));
        assert!(!in_sequence(41, 43));
        assert!(!in_sequence(i32::MAX, i32::MIN));
    }

    #[test]
    fn retries_of_the_retained_batches_get_their_original_offsets() {
        let mut s = ProducerState::new();
        let mut next = 100;
        let mut firsts = Vec::new();
        let n = BATCHES_RETAINED as i32 + 2;
        for i in 0..n {
            let (off, dup) = append(&mut s, &mut next, batch(7, 0, i * 10, 10)).expect("accepted");
            assert!(!dup);
            firsts.push(off);
        }
        for i in 2..n {
            let (off, dup) = append(&mut s, &mut next, batch(7, 0, i * 10, 10)).expect("accepted");
            assert!(dup, "batch {i} is remembered");
            assert_eq!(off, firsts[i as usize]);
        }
        // Older than that is forgotten: its retry is out of order, not written twice.
        assert!(matches!(
            s.check(&batch(7, 0, 10, 10)),
            Err(SequenceError::OutOfOrder { expected, .. }) if expected == i64::from(n) * 10
        ));
        assert_eq!(next, 100 + i64::from(n) * 10, "no retry wrote anything");
    }

    #[test]
    fn gaps_and_partial_overlaps_are_out_of_order() {
        let mut s = ProducerState::new();
        let mut next = 0;
        append(&mut s, &mut next, batch(1, 0, 0, 5)).expect("accepted");
        assert!(matches!(
            s.check(&batch(1, 0, 6, 1)),
            Err(SequenceError::OutOfOrder {
                expected: 5,
                got: 6,
                ..
            })
        ));
        assert!(
            s.check(&batch(1, 0, 2, 3)).is_err(),
            "overlap that is no retry"
        );
        assert_eq!(s.check(&batch(1, 0, 5, 1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn stale_epochs_are_fenced_and_new_epochs_start_at_zero() {
        let mut s = ProducerState::new();
        let mut next = 0;
        append(&mut s, &mut next, batch(3, 2, 0, 1)).expect("accepted");
        assert!(matches!(
            s.check(&batch(3, 1, 1, 1)),
            Err(SequenceError::StaleEpoch { current: 2, .. })
        ));
        assert!(matches!(
            s.check(&batch(3, 3, 5, 1)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        append(&mut s, &mut next, batch(3, 3, 0, 1)).expect("accepted");
        assert!(
            s.check(&batch(3, 2, 1, 1)).is_err(),
            "the old epoch is fenced now"
        );
        assert_eq!(s.get(3).map(|e| e.batches.len()), Some(1));
    }

    #[test]
    fn unknown_producers_and_lost_batches_accept_any_sequence() {
        let mut s = ProducerState::new();
        assert_eq!(s.check(&batch(9, 0, 1234, 1)), Ok(SequenceCheck::Append));
        s.record(&batch(9, 0, 1234, 1), 10, 11, 0, i64::MAX);
        s.forget_batches_from(10);
        assert_eq!(s.check(&batch(9, 0, 77, 1)), Ok(SequenceCheck::Append));
        assert!(
            s.check(&batch(9, -1, 0, 1)).is_err(),
            "the epoch is still known"
        );
    }

    #[test]
    fn wrap_around_continues_the_sequence() {
        let mut s = ProducerState::new();
        let mut next = 0;
        append(&mut s, &mut next, batch(5, 0, i32::MAX - 1, 2)).expect("accepted");
        assert_eq!(s.check(&batch(5, 0, 0, 3)), Ok(SequenceCheck::Append));
        append(&mut s, &mut next, batch(5, 0, 0, 3)).expect("accepted");
        let (off, dup) = append(&mut s, &mut next, batch(5, 0, i32::MAX - 1, 2)).expect("accepted");
        assert!(dup);
        assert_eq!(off, 0);
        // A batch that itself wraps.
        let mut s = ProducerState::new();
        let mut next = 0;
        let wrapping = batch(6, 0, i32::MAX, 4);
        assert_eq!(wrapping.last_seq, 2);
        append(&mut s, &mut next, wrapping).expect("accepted");
        assert_eq!(s.check(&batch(6, 0, 3, 1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn expiry_forgets_idle_producers_only() {
        let mut s = ProducerState::new();
        s.record(&batch(1, 0, 0, 1), 0, 1, 1_000, i64::MAX);
        s.record(&batch(2, 0, 0, 1), 1, 2, 5_000, i64::MAX);
        assert_eq!(s.expire(5_999, 5_000, 0), 0, "not idle long enough");
        assert_eq!(s.expire(6_000, 5_000, 0), 1);
        assert!(s.get(1).is_none() && s.get(2).is_some());
        assert_eq!(s.expire(6_000, 5_000, 2), 1, "all its batches were deleted");
        assert!(s.is_empty());
    }

    #[test]
    fn producers_with_batches_in_flight_are_never_evicted() {
        let mut s = ProducerState::new();
        let cap = PRODUCERS_PER_PARTITION_MAX as i64;
        // Every producer's batch is still pending (written end 0): nobody is forgotten.
        for pid in 0..cap + 3 {
            s.record(&batch(pid, 0, 0, 1), pid, pid + 1, pid, 0);
        }
        assert_eq!(s.len(), PRODUCERS_PER_PARTITION_MAX + 3);
        // Once written, the longest idle go.
        s.record(
            &batch(cap + 3, 0, 0, 1),
            cap + 3,
            cap + 4,
            cap + 3,
            i64::MAX,
        );
        assert!(s.len() <= PRODUCERS_PER_PARTITION_MAX);
    }

    #[test]
    fn the_producer_table_is_bounded() {
        let mut s = ProducerState::new();
        for pid in 0..(PRODUCERS_PER_PARTITION_MAX as i64 + 10) {
            s.record(&batch(pid, 0, 0, 1), pid, pid + 1, pid, i64::MAX);
        }
        assert!(s.len() <= PRODUCERS_PER_PARTITION_MAX);
        assert!(s.get(0).is_none(), "the longest idle went first");
        assert!(s.get(PRODUCERS_PER_PARTITION_MAX as i64 + 9).is_some());
    }

    /// Checks and records a batch at `*next` like the log does.
    fn write(s: &mut ProducerState, next: &mut i64, b: ProducerBatch) -> i64 {
        let first = *next;
        assert_eq!(s.check(&b), Ok(SequenceCheck::Append));
        *next += i64::from(b.last_seq - b.first_seq) + 1;
        s.record(&b, first, *next, 0, i64::MAX);
        first
    }

    fn marker(
        s: &mut ProducerState,
        next: &mut i64,
        pid: i64,
        epoch: i16,
        kind: MarkerKind,
    ) -> Option<CompletedTxn> {
        assert_eq!(s.check_marker(pid, epoch, 0), Ok(()));
        let at = *next;
        *next += 1;
        s.record_marker(pid, epoch, 0, kind, at, 0)
    }

    #[test]
    fn an_open_transaction_holds_the_stable_offset_until_its_marker_is_replicated() {
        let mut s = ProducerState::new();
        let mut next = 10;
        write(&mut s, &mut next, batch(9, 0, 0, 2)); // 10..12, not transactional
        assert_eq!(s.first_unstable_offset(12), None);
        let first = write(&mut s, &mut next, txn_batch(1, 0, 0, 3)); // 12..15
        write(&mut s, &mut next, txn_batch(1, 0, 3, 2)); // 15..17
        assert_eq!(s.first_unstable_offset(17), Some(first));
        assert_eq!(s.get(1).and_then(|e| e.current_txn_first_offset), Some(12));
        let done = marker(&mut s, &mut next, 1, 0, MarkerKind::Commit).expect("ends the txn");
        assert_eq!(
            done,
            CompletedTxn {
                producer_id: 1,
                first_offset: 12,
                last_offset: 17,
                aborted: false
            }
        );
        assert_eq!(
            s.first_unstable_offset(17),
            Some(12),
            "marker not below the HW yet"
        );
        assert_eq!(
            s.first_unstable_offset(18),
            None,
            "the HW passed the marker"
        );
        assert_eq!(s.first_unstable_offset(17), None, "forgotten once passed");
        assert_eq!(s.get(1).and_then(|e| e.current_txn_first_offset), None);
    }

    #[test]
    fn an_abort_records_the_stable_offset_other_transactions_hold() {
        let mut s = ProducerState::new();
        let mut next = 0;
        write(&mut s, &mut next, txn_batch(1, 0, 0, 2)); // 0..2
        write(&mut s, &mut next, txn_batch(2, 0, 0, 2)); // 2..4
        let a = marker(&mut s, &mut next, 1, 0, MarkerKind::Abort).expect("ends"); // 4
        assert!(a.aborted);
        assert_eq!(
            s.last_stable_offset_after(&a),
            2,
            "producer 2's transaction is open"
        );
        let b = marker(&mut s, &mut next, 2, 0, MarkerKind::Abort).expect("ends"); // 5
        assert_eq!(s.last_stable_offset_after(&b), 6);
        assert_eq!(s.first_unstable_offset(6), None);
    }

    #[test]
    fn unsequenced_batches_check_the_epoch_only() {
        let mut s = ProducerState::new();
        assert_eq!(
            s.check_unsequenced(&txn_batch(4, 2, 0, 3)),
            Ok(()),
            "unknown"
        );
        s.record(&txn_batch(4, 2, 0, 3), 0, 3, 0, i64::MAX);
        // The same sequences again are a second write, not a retry.
        assert_eq!(s.check_unsequenced(&txn_batch(4, 2, 0, 3)), Ok(()));
        // Any sequence goes, in this epoch or a newer one.
        assert_eq!(s.check_unsequenced(&txn_batch(4, 2, 77, 1)), Ok(()));
        assert_eq!(s.check_unsequenced(&txn_batch(4, 3, 5, 1)), Ok(()));
        assert!(matches!(
            s.check_unsequenced(&txn_batch(4, 1, 0, 1)),
            Err(SequenceError::StaleEpoch { current: 2, .. })
        ));
        assert_eq!(
            s.check_unsequenced(&batch(4, 2, 0, 1)),
            Err(SequenceError::TxnOpen { producer_id: 4 }),
            "the transaction it opened is open"
        );
        assert_eq!(s.first_unstable_offset(3), Some(0));
    }

    #[test]
    fn a_producer_with_an_open_transaction_may_not_write_outside_it() {
        let mut s = ProducerState::new();
        let mut next = 0;
        write(&mut s, &mut next, txn_batch(1, 0, 0, 1));
        assert_eq!(
            s.check(&batch(1, 0, 1, 1)),
            Err(SequenceError::TxnOpen { producer_id: 1 })
        );
        assert_eq!(s.check(&txn_batch(1, 0, 1, 1)), Ok(SequenceCheck::Append));
        // A transactional producer new to a partition starts at sequence 0.
        assert!(matches!(
            s.check(&txn_batch(2, 0, 5, 1)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        assert_eq!(s.check(&batch(2, 0, 5, 1)), Ok(SequenceCheck::Append));
        // The next transaction's batch, under the epoch a version 2 end bumped to, may
        // not join this one before its marker comes.
        assert_eq!(
            s.check(&txn_batch(1, 1, 0, 1)),
            Err(SequenceError::TxnOpen { producer_id: 1 })
        );
        // A fenced producer hears it is fenced, whatever else is wrong with its write.
        s.record_marker(1, 2, 0, MarkerKind::Abort, next, 0);
        next += 1;
        write(&mut s, &mut next, txn_batch(1, 2, 0, 1));
        assert!(matches!(
            s.check(&batch(1, 1, 0, 1)),
            Err(SequenceError::StaleEpoch { current: 2, .. })
        ));
    }

    #[test]
    fn stale_markers_are_refused_and_late_ones_change_nothing() {
        let mut s = ProducerState::new();
        let mut next = 0;
        write(&mut s, &mut next, txn_batch(1, 3, 0, 1));
        assert!(matches!(
            s.check_marker(1, 2, 0),
            Err(SequenceError::StaleEpoch { current: 3, .. })
        ));
        assert!(s.record_marker(1, 3, 5, MarkerKind::Commit, 1, 0).is_some());
        assert!(matches!(
            s.check_marker(1, 3, 4),
            Err(SequenceError::CoordinatorFenced { current: 5, .. })
        ));
        // The same marker again: no transaction is open, nothing ends.
        assert_eq!(s.check_marker(1, 3, 5), Ok(()));
        assert_eq!(s.record_marker(1, 3, 5, MarkerKind::Commit, 2, 0), None);
        assert_eq!(s.first_unstable_offset(3), None);
        // A marker for a producer never seen here is harmless too.
        assert_eq!(s.check_marker(77, 0, 0), Ok(()));
        assert_eq!(s.record_marker(77, 0, 0, MarkerKind::Abort, 3, 0), None);
    }

    #[test]
    fn a_marker_that_bumps_the_epoch_restarts_the_sequence() {
        let mut s = ProducerState::new();
        let mut next = 0;
        write(&mut s, &mut next, txn_batch(1, 0, 0, 5));
        // Transaction version 2: the marker carries the next epoch.
        assert!(marker(&mut s, &mut next, 1, 1, MarkerKind::Commit).is_some());
        assert!(matches!(
            s.check(&txn_batch(1, 1, 5, 1)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        assert!(
            s.check(&txn_batch(1, 0, 5, 1)).is_err(),
            "the old epoch is fenced"
        );
        write(&mut s, &mut next, txn_batch(1, 1, 0, 1));
        assert_eq!(
            s.get(1).and_then(|e| e.current_txn_first_offset),
            Some(next - 1)
        );
    }

    #[test]
    fn open_transactions_are_never_forgotten_and_a_replay_reopens_them() {
        let mut s = ProducerState::new();
        let mut next = 0;
        write(&mut s, &mut next, txn_batch(1, 0, 0, 1)); // 0
        write(&mut s, &mut next, batch(2, 0, 0, 1)); // 1
        assert_eq!(
            s.expire(i64::MAX, 1, 0),
            1,
            "only the idle producer without a txn"
        );
        assert!(s.get(1).is_some());
        write(&mut s, &mut next, txn_batch(3, 0, 0, 1)); // 2
        s.forget_batches_from(2);
        assert_eq!(s.get(3).and_then(|e| e.current_txn_first_offset), None);
        assert_eq!(s.first_unstable_offset(3), Some(0));
        let active = s.active();
        assert_eq!(
            active
                .iter()
                .find(|p| p.producer_id == 1)
                .map(|p| p.current_txn_start_offset),
            Some(0)
        );
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any interleaving of sends and retries (of the last five batches) leaves each
            /// sequence written exactly once, in order, and retries answered with the
            /// offsets of the first write.
            #[test]
            fn retries_never_duplicate(ops in proptest::collection::vec((0u8..4, 1i32..4), 1..200)) {
                let mut s = ProducerState::new();
                let mut next = 0i64;
                let mut sent: Vec<(ProducerBatch, i64)> = Vec::new();
                let mut seq = i32::MAX - 20; // cross the wrap on the way
                let mut written = 0i64;
                for (op, count) in ops {
                    if op == 0 && !sent.is_empty() {
                        let back = (count as usize).min(sent.len());
                        let (b, off) = sent[sent.len() - back];
                        let (got, dup) = append(&mut s, &mut next, b).expect("accepted");
                        prop_assert!(dup);
                        prop_assert_eq!(got, off);
                    } else {
                        let b = batch(1, 0, seq, count);
                        let (off, dup) = append(&mut s, &mut next, b).expect("accepted");
                        prop_assert!(!dup);
                        prop_assert_eq!(off, written);
                        written += i64::from(count);
                        seq = increment_sequence(seq, count);
                        sent.push((b, off));
                    }
                    prop_assert_eq!(next, written);
                }
            }
        }
    }
}

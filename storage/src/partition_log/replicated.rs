//! A follower's append (Kafka's `appendAsFollower`): batches fetched from the partition's
//! leader are stored as the leader wrote them — base offsets and partition leader epochs
//! unchanged — so that the follower's log is a byte-for-byte copy of the leader's.
//!
//! What `append` does that this does not, because the leader already did it when it
//! accepted the batches: the topic's rules (keys on compacted topics, timestamps, the
//! codec and log-append time), idempotent producers' sequence checks and duplicate
//! answers, and `max.message.bytes`. What it still does: every whole batch is validated
//! as a log stores it (CRC-32C, structure) before anything is queued, the batches must
//! continue the log with increasing offsets, idempotent producers' batches are recorded
//! in the producer state (a follower that becomes leader knows every producer's last
//! sequences), and the queueing is `append`'s: one copy into the pending buffer,
//! `flush.messages`, the flusher woken.
//!
//! The leader's log may have been compacted: its cleaner removes records from batches
//! (keeping each batch's base offset and `lastOffsetDelta`) and whole batches. So the
//! batches may skip offsets, between them and inside them, as Kafka's follower allows
//! (`OffsetsOutOfOrderException` only when they go backwards). The offsets skipped are
//! the ones the leader no longer holds.
//!
//! Invariants: a request is queued whole or not at all, and a refused one changes no
//! state; the batches' offsets increase from the log end offset; what is queued covers
//! the offsets from the log end to one past its last batch, so the pending entries stay
//! contiguous in offset space (what the flusher relies on) even where batches skip.

use super::{AppendTicket, PartitionLog, Pending};
use crate::batch::{self, batches, BatchError};
use crate::error::AppendError;
use bytes::BytesMut;

/// The whole batches at the front of a follower's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chain {
    /// Bytes of the whole batches; a partial batch after them is left out.
    len: usize,
    /// One past the last offset of the last whole batch (`from` when there is none).
    next_offset: i64,
}

impl PartitionLog {
    /// Appends batches fetched from the leader as they are: their base offsets and
    /// partition leader epochs are kept. The first batch must start at or after the log
    /// end offset and each next one after the one before (past offsets the leader's
    /// cleaner removed), else [`AppendError::OffsetMismatch`] and nothing is queued. A partial batch at the end
    /// of `records` (where a fetch response may stop) is left out; with no whole batch,
    /// the ticket is empty (base == next == log end) and nothing is queued. Wait on the
    /// ticket with [`Self::wait`].
    pub fn append_replicated(&self, records: &[u8]) -> Result<AppendTicket, AppendError> {
        let now_ms = self.context.now_ms();
        let flush_messages = self.config.borrow().flush_messages;
        let mut st = self.state.borrow_mut();
        if let Some(f) = st.failure.as_ref().or(st.out_of_space.as_ref()) {
            return Err(AppendError::Storage(f.clone()));
        }
        if st.closing {
            return Err(AppendError::Closed);
        }
        let base_offset = st.next_offset;
        let chain = validate_chain(records, base_offset)?;
        let whole = records.get(..chain.len).unwrap_or_default();
        if whole.is_empty() {
            debug_assert_eq!(chain.next_offset, base_offset);
            return Ok(AppendTicket {
                base_offset,
                next_offset: base_offset,
            });
        }
        debug_assert!(
            chain.next_offset > base_offset,
            "a whole batch holds offsets"
        );
        st.next_offset = chain.next_offset;
        let written = st.written_offset;
        self.record_producers(whole, now_ms, written);
        // The one copy of the records: the fetch response's buffer is shared and
        // immutable. Nothing in it is rewritten.
        let bytes = BytesMut::from(whole).freeze();
        self.enqueue(
            st,
            Pending {
                base_offset,
                next_offset: chain.next_offset,
                bytes,
            },
            flush_messages,
        );
        Ok(AppendTicket {
            base_offset,
            next_offset: chain.next_offset,
        })
    }

    /// Records every producer's batch and transaction marker of `whole` (validated,
    /// contiguous) as a replay of the log at open does: no sequence or epoch is checked,
    /// the leader did that. An aborted transaction's entry is added as the leader added
    /// it, so a follower that becomes leader serves `read_committed` fetches at once.
    fn record_producers(&self, whole: &[u8], now_ms: i64, written: i64) {
        let mut producers = self.producers.borrow_mut();
        for (header, range) in batches(whole).flatten() {
            if header.producer_id < 0 {
                continue;
            }
            let bytes = whole.get(range).unwrap_or_default();
            if let Some(entry) =
                super::txn::take_stored_batch(&mut producers, &header, bytes, now_ms, written)
            {
                self.aborted.borrow_mut().push(entry);
            }
        }
    }
}

/// Checks the batches of `records` that are whole: each valid as stored (CRC, structure,
/// a cleaned batch's gaps), the first at or after `from`, each next after the one before.
/// A partial batch at the end ends the chain; bytes that cannot be a batch at all (an
/// impossible length) are an error.
fn validate_chain(records: &[u8], from: i64) -> Result<Chain, AppendError> {
    let mut chain = Chain {
        len: 0,
        next_offset: from,
    };
    for item in batches(records) {
        let (header, range) = match item {
            Ok(framed) => framed,
            // Where a fetch response stops inside a batch: the rest comes with the next.
            Err(BatchError::Truncated) => break,
            Err(e) => return Err(AppendError::InvalidBatch(e)),
        };
        let bytes = records.get(range.clone()).ok_or(AppendError::Empty)?;
        // No size limit: the leader accepted the batch, and a follower refusing it (say,
        // after `max.message.bytes` was lowered) could never fetch past it and would stay
        // behind for good.
        batch::validate_stored(bytes)?;
        if header.base_offset < chain.next_offset {
            return Err(AppendError::OffsetMismatch {
                expected: chain.next_offset,
                found: header.base_offset,
            });
        }
        chain.next_offset = header
            .last_offset()
            .checked_add(1)
            .ok_or(AppendError::InvalidBatch(BatchError::InvalidRecordCount))?;
        chain.len = range.end;
    }
    debug_assert!(chain.next_offset >= from);
    Ok(chain)
}

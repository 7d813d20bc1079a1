//! The records a `read_committed` share group never gets (`share.isolation.level`,
//! KIP-932): the data batches of aborted transactions. A ShareFetch response has no
//! aborted-transactions field, so the share consumer cannot drop them itself; the
//! partition's leader archives them when they would be acquired (Kafka's
//! `SharePartition.filterAbortedTransactionalAcquiredRecords`). Transaction markers are
//! delivered as Kafka delivers them, and the consumer acknowledges them as gaps.
//!
//! [`aborted_ranges`] is the pure decision over batch headers and the log's aborted
//! transactions; [`read_aborted_ranges`] reads the headers of the part of a log that
//! those transactions touch. A log without aborted transactions there is not read.
//!
//! Invariant: a batch is aborted exactly when it is transactional data (not a marker)
//! of a producer with an aborted transaction that began at or before the batch and whose
//! abort marker lies after it — a producer has at most one transaction open at a time,
//! so that transaction is the batch's.

use corelog_partition::Partition;
use corelog_storage::batch::BatchHeader;
use corelog_storage::txn_index::AbortedTxn;

/// Bytes read at once while looking at batch headers.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// The offset ranges (inclusive, in order) of the batches among `headers` that belong
/// to one of `aborted`.
pub fn aborted_ranges(
    headers: impl IntoIterator<Item = BatchHeader>,
    aborted: &[AbortedTxn],
) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for h in headers {
        if !h.is_transactional() || h.is_control() {
            continue;
        }
        let (first, last) = (h.base_offset, h.last_offset());
        let is_aborted = aborted.iter().any(|t| {
            t.producer_id == h.producer_id && t.first_offset <= first && last < t.last_offset
        });
        if !is_aborted {
            continue;
        }
        match out.last_mut() {
            Some(prev) if prev.1 + 1 == first => prev.1 = last,
            _ => out.push((first, last)),
        }
    }
    out
}

/// The aborted transactions' data batches of `log` in `[from, to)` (whole batches, so
/// a range may reach outside), as [`aborted_ranges`] says. Reads only from the first
/// such transaction's start to the last one's marker.
pub async fn read_aborted_ranges(
    log: &Partition,
    from: i64,
    to: i64,
) -> Result<Vec<(i64, i64)>, String> {
    if from >= to {
        return Ok(Vec::new());
    }
    let aborted = log.log().aborted_transactions(from, to);
    let (Some(lo), Some(hi)) = (
        aborted.iter().map(|t| t.first_offset.max(from)).min(),
        aborted.iter().map(|t| t.last_offset.min(to)).max(),
    ) else {
        return Ok(Vec::new());
    };
    let mut headers = Vec::new();
    let mut offset = lo.max(log.log_start_offset());
    while offset < hi {
        let read = log
            .read(
                offset,
                -1,
                SCAN_CHUNK_BYTES,
                corelog_partition::Isolation::ReadUncommitted,
            )
            .await
            .map_err(|e| format!("reading offset {offset}: {e}"))?;
        let mut next = offset;
        for item in corelog_storage::batch::batches(&read.records) {
            let (h, _) = item.map_err(|e| format!("a batch at or past offset {offset}: {e}"))?;
            next = next.max(h.last_offset() + 1);
            headers.push(h);
        }
        if next == offset {
            break; // nothing more below the high watermark
        }
        offset = next;
    }
    Ok(aborted_ranges(headers, &aborted))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(base: i64, last: i64, pid: i64, txn: bool, control: bool) -> BatchHeader {
        let mut attributes = 0;
        if txn {
            attributes |= 1 << 4;
        }
        if control {
            attributes |= 1 << 5;
        }
        BatchHeader {
            base_offset: base,
            batch_length: 61,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: i32::try_from(last - base).unwrap(),
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            record_count: i32::try_from(last - base + 1).unwrap(),
        }
    }

    fn abort(pid: i64, first: i64, marker: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: marker,
            last_stable_offset: marker + 1,
        }
    }

    #[test]
    fn only_the_aborted_transactions_data_batches() {
        // Producer 7 aborts 0..=4 (marker 5); producer 8 commits 6..=7 (marker 9) with
        // producer 7's next transaction (10..=11, aborted by marker 12) after it, and a
        // plain batch of producer 7 in between.
        let headers = vec![
            header(0, 2, 7, true, false),
            header(3, 4, 7, true, false),
            header(5, 5, 7, true, true), // abort marker
            header(6, 7, 8, true, false),
            header(8, 8, 7, false, false), // not transactional
            header(9, 9, 8, true, true),   // commit marker
            header(10, 11, 7, true, false),
            header(12, 12, 7, true, true),
        ];
        let aborted = [abort(7, 0, 5), abort(7, 10, 12)];
        assert_eq!(aborted_ranges(headers, &aborted), vec![(0, 4), (10, 11)]);
    }

    #[test]
    fn a_batch_before_the_transaction_or_after_its_marker_is_not_aborted() {
        let headers = vec![
            header(0, 1, 7, true, false), // an earlier, committed transaction
            header(2, 3, 7, true, false),
            header(5, 6, 7, true, false), // a later transaction, still open
        ];
        assert_eq!(aborted_ranges(headers, &[abort(7, 2, 4)]), vec![(2, 3)]);
        assert!(aborted_ranges(vec![header(0, 1, 7, true, false)], &[]).is_empty());
    }
}

//! Transaction markers: the control batch that ends a producer's transaction in one
//! partition, written by the partition's leader when the transaction coordinator asks
//! (WriteTxnMarkers), and read back wherever the producer state is rebuilt.
//!
//! A marker is a batch with the transactional and control bits set, the producer's id and
//! epoch, no sequence (-1), and one record: key `version i16 = 0, type i16` (Kafka's
//! `ControlRecordType`: 0 abort, 1 commit) and value `version i16 = 0,
//! coordinator_epoch i32` (Kafka's `EndTransactionMarker`). Other control types (a
//! KRaft leader change, say) are not transaction markers and [`parse`] says so.
//!
//! Invariant: [`build`] yields a batch `batch::validate` accepts and [`parse`] reads back
//! unchanged; [`parse`] never panics on any bytes.

use crate::batch::{self, BatchHeader};
use crate::batch_builder::{BatchBuilder, Record};

/// Control record type of an abort (`ControlRecordType.ABORT`).
pub const ABORT: i16 = 0;
/// Control record type of a commit (`ControlRecordType.COMMIT`).
pub const COMMIT: i16 = 1;
/// Length of a marker batch: the header and its one record (a one-byte length, then
/// attributes, timestamp and offset deltas, the key's length and 4 bytes, the value's
/// length and 6 bytes, no headers: 16 bytes).
pub const MARKER_BATCH_LEN: usize = batch::BATCH_HEADER_LEN + 1 + 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerKind {
    Abort,
    Commit,
}

impl MarkerKind {
    pub fn is_commit(self) -> bool {
        self == MarkerKind::Commit
    }
}

/// One transaction marker, as the coordinator asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub kind: MarkerKind,
}

/// The marker's control batch, with base offset 0 (the log assigns it) and the broker's
/// clock as its timestamp.
pub fn build(marker: &TxnMarker, now_ms: i64) -> Vec<u8> {
    let kind = match marker.kind {
        MarkerKind::Abort => ABORT,
        MarkerKind::Commit => COMMIT,
    };
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let mut builder = BatchBuilder::new(now_ms)
        .producer(marker.producer_id, marker.producer_epoch, -1)
        .control();
    builder.push(&Record {
        key: Some(&key),
        value: Some(&value),
        headers: &[],
        timestamp_delta: 0,
    });
    let out = builder.build();
    debug_assert_eq!(out.len(), MARKER_BATCH_LEN);
    out
}

/// The kind and coordinator epoch of a control batch that is a transaction marker;
/// `None` for any other batch, another control type, or records that do not parse.
pub fn parse(header: &BatchHeader, bytes: &[u8]) -> Option<(MarkerKind, i32)> {
    if !header.is_control() || !header.is_transactional() {
        return None;
    }
    let records = batch::records(bytes)?;
    let record = records.first()?;
    let key = record.key?;
    let version = i16::from_be_bytes(key.get(0..2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let kind = match i16::from_be_bytes(key.get(2..4)?.try_into().ok()?) {
        ABORT => MarkerKind::Abort,
        COMMIT => MarkerKind::Commit,
        _ => return None,
    };
    // A value too short to hold the epoch (never written by Kafka or corelog) counts as
    // epoch -1: the marker still ends the transaction, it just fences nobody.
    let coordinator_epoch = record
        .value
        .and_then(|v| v.get(2..6))
        .and_then(|b| b.try_into().ok())
        .map_or(-1, i32::from_be_bytes);
    Some((kind, coordinator_epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(kind: MarkerKind) -> TxnMarker {
        TxnMarker {
            producer_id: 4242,
            producer_epoch: 7,
            coordinator_epoch: 3,
            kind,
        }
    }

    #[test]
    fn a_built_marker_is_a_valid_control_batch_that_parses_back() {
        for kind in [MarkerKind::Abort, MarkerKind::Commit] {
            let bytes = build(&marker(kind), 1_700_000_000_000);
            let h = batch::validate(&bytes, usize::MAX).expect("valid batch");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.producer_id, h.producer_epoch), (4242, 7));
            assert_eq!(h.base_sequence, -1);
            assert_eq!(h.record_count, 1);
            assert_eq!(parse(&h, &bytes), Some((kind, 3)));
        }
    }

    #[test]
    fn the_record_is_laid_out_as_kafka_lays_it_out() {
        let bytes = build(&marker(MarkerKind::Commit), 0);
        let records = batch::records(&bytes).expect("records");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].key, Some(&[0u8, 0, 0, 1][..]));
        assert_eq!(records[0].value, Some(&[0u8, 0, 0, 0, 0, 3][..]));
    }

    #[test]
    fn data_batches_and_other_control_types_are_no_markers() {
        let mut b = BatchBuilder::new(0).producer(1, 0, 0).transactional();
        b.push(&Record {
            key: Some(&[0, 0, 0, 0]),
            value: None,
            headers: &[],
            timestamp_delta: 0,
        });
        let data = b.build();
        let h = BatchHeader::parse(&data).expect("header");
        assert!(h.is_transactional() && !h.is_control());
        assert_eq!(parse(&h, &data), None);

        // A KRaft leader-change record (type 2) in a control batch.
        let mut b = BatchBuilder::new(0).producer(1, 0, -1).control();
        b.push(&Record {
            key: Some(&[0, 0, 0, 2]),
            value: None,
            headers: &[],
            timestamp_delta: 0,
        });
        let other = b.build();
        let h = BatchHeader::parse(&other).expect("header");
        assert_eq!(parse(&h, &other), None);
    }

    #[test]
    fn parsing_any_truncation_never_panics() {
        let bytes = build(&marker(MarkerKind::Abort), 0);
        let h = BatchHeader::parse(&bytes).expect("header");
        for len in 0..bytes.len() {
            let _ = parse(&h, &bytes[..len]);
        }
    }
}

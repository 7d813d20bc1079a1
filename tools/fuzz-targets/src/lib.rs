//! The fuzz targets' bodies: every decoder the broker runs on bytes it did not write —
//! request frames from clients, record batches from producers and leaders — or on files
//! a crash may have torn — producer snapshots, leader-epoch checkpoints, offset and time
//! indexes. Each takes arbitrary bytes and asserts what must hold whatever they are: no
//! panic, no allocation beyond what the input can justify, and, where the decoder
//! accepts, the invariants of what it produced (a re-encoded batch holds the same
//! records; a compacted batch is valid and a subset).
//!
//! `fuzz/` drives each with libFuzzer (`cargo +nightly fuzz run <target>`,
//! `benches/fuzz.sh`); this crate's tests replay the seed corpora in `fuzz/corpus/` and
//! a fixed set of mutations of them on the stable toolchain, so CI runs every target
//! without libFuzzer.

use bytes::Bytes;
use corelog_storage::batch::{self, Compression};
use corelog_storage::batch_filter::{self, Filtered};

/// Every target, by the name of its corpus directory and libFuzzer binary.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("request", request),
    ("record_batch", record_batch),
    ("compaction_filter", compaction_filter),
    ("producer_snapshot", producer_snapshot),
    ("leader_epoch_checkpoint", leader_epoch_checkpoint),
    ("segment_indexes", segment_indexes),
];

/// A request frame as a connection reads it (after the size prefix): the header, then
/// the body of every API and version the broker serves, decoded as its handler would.
pub fn request(data: &[u8]) {
    let Ok(frame) = corelog::kafka::frame::parse_request(Bytes::copy_from_slice(data)) else {
        return;
    };
    let _ = corelog::kafka::api::decode_request(frame);
}

/// Record batches as a produce request or a leader carries them: validation as a
/// producer's and as a stored batch; for a valid one, every record walked, and the batch
/// re-encoded in every codec, each copy valid and holding the same records.
pub fn record_batch(data: &[u8]) {
    let as_produced = batch::validate(data, 1 << 20);
    let as_stored = batch::validate_stored(data);
    if as_produced.is_ok() {
        assert!(
            as_stored.is_ok(),
            "a batch valid from a producer is valid stored"
        );
    }
    let Ok(header) = as_produced else {
        return;
    };
    let Some(records) = records_of(data) else {
        return;
    };
    assert!(records.len() <= header.record_count.max(0) as usize);
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let Ok(copy) = batch_filter::recompress(data, codec) else {
            continue;
        };
        batch::validate_stored(&copy).expect("a re-encoded batch is valid");
        assert_eq!(
            records_of(&copy).as_ref(),
            Some(&records),
            "a re-encoded batch holds the same records"
        );
    }
}

/// (offset, timestamp, key, tombstone) of each record, or `None` when the records do
/// not parse.
type Record = (i64, i64, Option<Vec<u8>>, bool);

fn records_of(batch: &[u8]) -> Option<Vec<Record>> {
    let mut out = Vec::new();
    batch_filter::for_each_record(batch, |r| {
        out.push((
            r.offset,
            r.timestamp_ms,
            r.key.map(<[u8]>::to_vec),
            r.is_tombstone,
        ))
    })
    .ok()?;
    Some(out)
}

/// The compaction filter: a valid stored batch filtered by a predicate taken from the
/// input keeps exactly the records the predicate kept, in a batch that is still valid.
pub fn compaction_filter(data: &[u8]) {
    let Some((&selector, batch)) = data.split_first() else {
        return;
    };
    if batch::validate_stored(batch).is_err() {
        return;
    }
    let Some(records) = records_of(batch) else {
        return;
    };
    let keep = |offset: i64| (selector >> (offset.rem_euclid(8))) & 1 == 1;
    match batch_filter::filter_batch(batch, |r| keep(r.offset)) {
        Err(_) => {}
        Ok(Filtered::Unchanged) => assert!(records.iter().all(|r| keep(r.0))),
        Ok(Filtered::Empty) => assert!(!records.iter().any(|r| keep(r.0))),
        Ok(Filtered::Rewritten(out)) => {
            batch::validate_stored(&out).expect("a compacted batch is valid");
            let kept: Vec<Record> = records.into_iter().filter(|r| keep(r.0)).collect();
            assert_eq!(records_of(&out), Some(kept), "exactly the kept records");
        }
    }
}

/// A producer-state snapshot file as a restart reads it.
pub fn producer_snapshot(data: &[u8]) {
    let _ = corelog_storage::producer_snapshot::decode(data, 1_700_000_000_000);
}

/// A leader-epoch checkpoint file: decoded, it encodes back to a file that decodes to the
/// same cache.
pub fn leader_epoch_checkpoint(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cache) = corelog_partition::leader_epoch_cache::LeaderEpochCache::decode(text) else {
        return;
    };
    let again = corelog_partition::leader_epoch_cache::LeaderEpochCache::decode(&cache.encode())
        .expect("an encoded cache decodes");
    assert_eq!(again.entries(), cache.entries());
}

/// A segment's offset and time indexes as recovery reads them (the first 16 bytes choose
/// the base offset and the log's length): every entry kept lies within the log and
/// increases.
pub fn segment_indexes(data: &[u8]) {
    let (head, rest) = data.split_at(data.len().min(16));
    let mut word = [0u8; 16];
    word[..head.len()].copy_from_slice(head);
    let base = i64::from_be_bytes(word[..8].try_into().expect("8 bytes"));
    let log_len = u64::from_be_bytes(word[8..].try_into().expect("8 bytes")) % (1 << 31);
    let offsets = corelog_storage::offset_index::OffsetIndex::decode(base, rest, log_len);
    for pair in offsets.entries().windows(2) {
        assert!(pair[0].relative_offset < pair[1].relative_offset);
        assert!(pair[0].position < pair[1].position);
    }
    assert!(offsets
        .entries()
        .iter()
        .all(|e| u64::from(e.position) < log_len));
    let _ =
        corelog_storage::time_index::TimeIndex::decode(base, rest, base.saturating_add(1 << 20));
}

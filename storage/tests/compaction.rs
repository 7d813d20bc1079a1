//! Log compaction and retention on real files, checked against a model.
//!
//! - A property test: random keyed workloads (tombstones, every codec, small segments,
//!   rounds of produce/roll/clean, sometimes a DeleteRecords first) are compacted,
//!   possibly in several bounded-memory passes, and the log read back must be exactly
//!   "the last record of each key in the cleaned range, at its original offset, and
//!   everything after it untouched" — before and after a restart.
//! - Tombstones survive while younger than `delete.retention.ms` and go after it.
//! - Reads right after a pass do not see superseded records through the tail cache;
//!   passes run safely beside appends and rolls; the dirty ratio and the compaction lags
//!   decide when a pass runs and how far it reaches.
//! - A pass stopped at each crash point leaves, after reopening, the old or the cleaned
//!   content and no temporary files.
//! - Retention by size and time, DeleteRecords, and delayed file deletion.
//!
//! Records are read back with the library's `for_each_record` and, independently, with
//! kafka-protocol's decoder (which also yields the values).

mod common;

use bytes::Bytes;
use common::*;
use corelog_storage::batch::batches;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::batch_filter::for_each_record;
use corelog_storage::compaction::cleaner::{self, clean, read_checkpoint, CrashPoint};
use corelog_storage::config::CleanupPolicy;
use corelog_storage::fs::KernelFs;
use corelog_storage::LogContext;
use corelog_storage::{AckLevel, LogConfig, PartitionLog, ReadError};
use kafka_protocol::records::{
    Compression as KCompression, Record as KRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// Base of every record timestamp; "now" for the cleaner is far after it.
const T0: i64 = 1_700_000_000_000;
const NOW: i64 = T0 + 1_000_000_000;
/// A `delete.retention.ms` no test outlives.
const FOREVER_MS: i64 = 1 << 50;
const BIG_MEMORY: usize = 1 << 20;
/// 16 entries: the smallest key map the cleaner builds.
const SMALL_MEMORY: usize = 16 * 32;

// ---- producing ------------------------------------------------------------------------

/// How a test batch is encoded: by the library's own builder (uncompressed) or by
/// kafka-protocol's encoder with a codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Builder,
    Kafka(KCompression),
}

const CODECS: [Codec; 6] = [
    Codec::Builder,
    Codec::Kafka(KCompression::None),
    Codec::Kafka(KCompression::Gzip),
    Codec::Kafka(KCompression::Snappy),
    Codec::Kafka(KCompression::Lz4),
    Codec::Kafka(KCompression::Zstd),
];

impl Codec {
    fn compression(self) -> KCompression {
        match self {
            Codec::Builder => KCompression::None,
            Codec::Kafka(c) => c,
        }
    }
}

/// A record to produce: key and value (`None`: a tombstone).
type Produce = (Vec<u8>, Option<Vec<u8>>);

/// One record of the log as the model knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    offset: i64,
    ts: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
}

/// What was acknowledged: every record, and every batch's offsets and codec.
#[derive(Default, Clone)]
struct Model {
    recs: Vec<Rec>,
    /// base offset → (last offset, codec).
    batches: BTreeMap<i64, (i64, KCompression)>,
}

/// One batch holding `records`, record `i` stamped `base_ts + i`.
fn encode(records: &[Produce], base_ts: i64, codec: Codec) -> Vec<u8> {
    match codec {
        Codec::Builder => {
            let mut b = BatchBuilder::new(base_ts);
            for (i, (k, v)) in records.iter().enumerate() {
                b.push(&Record {
                    key: Some(k),
                    value: v.as_deref(),
                    headers: &[("h", Some(b"x"))],
                    timestamp_delta: i as i64,
                });
            }
            b.build()
        }
        Codec::Kafka(compression) => {
            let recs: Vec<KRecord> = records
                .iter()
                .enumerate()
                .map(|(i, (k, v))| KRecord {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: TimestampType::Creation,
                    offset: i as i64,
                    // offset - sequence constant: the encoder keeps them in one batch,
                    // with base sequence -1 (no idempotent producer).
                    sequence: i as i32 - 1,
                    timestamp: base_ts + i as i64,
                    key: Some(Bytes::copy_from_slice(k)),
                    value: v.as_deref().map(Bytes::copy_from_slice),
                    headers: Default::default(),
                })
                .collect();
            let mut buf = Vec::new();
            RecordBatchEncoder::encode(
                &mut buf,
                &recs,
                &RecordEncodeOptions {
                    version: 2,
                    compression,
                },
            )
            .expect("test records encode");
            assert_eq!(
                batches(&buf).count(),
                1,
                "the encoder made exactly one batch"
            );
            buf
        }
    }
}

/// Appends one batch, waits for acks=all and records it in the model.
async fn produce(
    log: &PartitionLog,
    model: &mut Model,
    records: &[Produce],
    base_ts: i64,
    codec: Codec,
) {
    let bytes = encode(records, base_ts, codec);
    let t = log.append(&bytes, 0).expect("append");
    log.wait(t, AckLevel::All).await.expect("ack");
    assert_eq!(t.next_offset - t.base_offset, records.len() as i64);
    let expected_base = model.recs.last().map_or(0, |r| r.offset + 1);
    assert_eq!(t.base_offset, expected_base, "offsets are dense");
    for (i, (k, v)) in records.iter().enumerate() {
        model.recs.push(Rec {
            offset: t.base_offset + i as i64,
            ts: base_ts + i as i64,
            key: Some(k.clone()),
            value: v.clone(),
        });
    }
    model
        .batches
        .insert(t.base_offset, (t.next_offset - 1, codec.compression()));
}

/// Seals the active segment: one record appended with `segment.bytes` 1 starts a new
/// segment. Returns the new active segment's base (everything below it is sealed).
async fn force_roll(log: &PartitionLog, model: &mut Model, ts: i64) -> i64 {
    let config = log.config();
    log.set_config(LogConfig {
        segment_bytes: 1,
        ..config.clone()
    });
    produce(
        log,
        model,
        &[(b"roll".to_vec(), Some(b"r".to_vec()))],
        ts,
        Codec::Builder,
    )
    .await;
    log.set_config(config);
    let active = active_base(log);
    assert_eq!(
        Some(active),
        model.recs.last().map(|r| r.offset),
        "the roll record starts the active segment"
    );
    active
}

fn active_base(log: &PartitionLog) -> i64 {
    log.segment_stats()
        .last()
        .expect("a log has an active segment")
        .base_offset
}

fn key(k: u8) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

/// A value unique to `seq`, `len` bytes of filler after it.
fn value(seq: u32, len: usize) -> Vec<u8> {
    let mut v = format!("v{seq}:").into_bytes();
    v.extend(vec![b'a' + (seq % 26) as u8; len]);
    v
}

fn compact_config(segment_bytes: u64, tail_cache_bytes: usize) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 256,
        tail_cache_bytes,
        cleanup: CleanupPolicy {
            delete: false,
            compact: true,
        },
        delete_retention_ms: FOREVER_MS,
        min_compaction_lag_ms: 0,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    }
}

fn delete_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 256,
        tail_cache_bytes: 8 * 1024,
        cleanup: CleanupPolicy {
            delete: true,
            compact: false,
        },
        retention_ms: -1,
        retention_bytes: -1,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    }
}

// ---- reading back ---------------------------------------------------------------------

/// Every record from the log start to the high watermark, checking on the way that each
/// batch is one the model acknowledged (same base, last offset and codec), that its
/// header agrees with its records, and that offsets strictly increase.
async fn read_all(log: &PartitionLog, model: &Model) -> Vec<Rec> {
    let hw = log.written_offset();
    let mut at = log.log_start_offset();
    let mut out: Vec<Rec> = Vec::new();
    while at < hw {
        let r = log
            .read(at, 16 * 1024, i64::MAX)
            .await
            .unwrap_or_else(|e| panic!("read at {at}: {e}"));
        assert!(
            !r.records.is_empty(),
            "read at {at} (high watermark {hw}) returned nothing"
        );
        for item in batches(&r.records) {
            let (h, range) = item.expect("served bytes are whole batches");
            let bytes = &r.records[range];
            assert!(
                h.last_offset() >= at,
                "batch {}..={} served for offset {at}",
                h.base_offset,
                h.last_offset()
            );
            let (last, codec) = model
                .batches
                .get(&h.base_offset)
                .copied()
                .unwrap_or_else(|| panic!("batch base {} was never written", h.base_offset));
            assert_eq!(
                h.last_offset(),
                last,
                "batch {} keeps its last offset",
                h.base_offset
            );
            let mut infos = Vec::new();
            for_each_record(bytes, |ri| {
                infos.push((
                    ri.offset,
                    ri.timestamp_ms,
                    ri.key.map(<[u8]>::to_vec),
                    ri.is_tombstone,
                ))
            })
            .unwrap_or_else(|e| panic!("batch {}: {e}", h.base_offset));
            let set = RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(bytes))
                .expect("kafka-protocol decodes the batch");
            assert_eq!(
                set.compression, codec,
                "batch {} keeps its codec",
                h.base_offset
            );
            assert_eq!(infos.len(), set.records.len());
            assert_eq!(h.record_count as usize, infos.len(), "record count");
            assert!(!infos.is_empty(), "no empty batch is stored");
            let max_ts = infos.iter().map(|i| i.1).max().unwrap_or(i64::MIN);
            assert_eq!(
                h.max_timestamp, max_ts,
                "batch {} max timestamp",
                h.base_offset
            );
            for (info, kr) in infos.into_iter().zip(set.records) {
                let (offset, ts, k, tombstone) = info;
                assert_eq!(kr.offset, offset);
                assert_eq!(kr.timestamp, ts);
                assert_eq!(kr.key.as_deref(), k.as_deref());
                assert_eq!(kr.value.is_none(), tombstone);
                assert!(offset >= h.base_offset && offset <= h.last_offset());
                if let Some(prev) = out.last() {
                    assert!(offset > prev.offset, "offsets strictly increase");
                }
                out.push(Rec {
                    offset,
                    ts,
                    key: k,
                    value: kr.value.map(|v| v.to_vec()),
                });
            }
            at = h.last_offset() + 1;
        }
    }
    out
}

/// What compaction of `[log start, cleaned_end)` must leave: the last record of each key
/// there (not even that if it is a tombstone and `drop_tombstones`), and everything at or
/// past `cleaned_end`.
fn compacted(recs: &[Rec], cleaned_end: i64, drop_tombstones: bool) -> Vec<Rec> {
    let mut last: HashMap<&[u8], i64> = HashMap::new();
    for r in recs.iter().filter(|r| r.offset < cleaned_end) {
        last.insert(r.key.as_deref().expect("keyed"), r.offset);
    }
    recs.iter()
        .filter(|r| {
            r.offset >= cleaned_end
                || (last.get(r.key.as_deref().expect("keyed")) == Some(&r.offset)
                    && !(drop_tombstones && r.value.is_none()))
        })
        .cloned()
        .collect()
}

/// Appends the records of `recs` past the last one of `want` (what was produced since).
fn extend_after(want: &mut Vec<Rec>, recs: &[Rec]) {
    let from = want.last().map_or(0, |l| l.offset + 1);
    want.extend(recs.iter().filter(|r| r.offset >= from).cloned());
}

/// The records at or past `log_start` (a read returns the whole batch holding it).
fn visible(recs: Vec<Rec>, log_start: i64) -> Vec<Rec> {
    recs.into_iter().filter(|r| r.offset >= log_start).collect()
}

/// Runs forced passes until one finds nothing dirty; returns how many did work.
async fn clean_fully(log: &PartitionLog, memory: usize, now: i64) -> usize {
    clean_fully_below(log, memory, now, i64::MAX).await
}

/// [`clean_fully`] with the high watermark at `high_watermark`.
async fn clean_fully_below(
    log: &PartitionLog,
    memory: usize,
    now: i64,
    high_watermark: i64,
) -> usize {
    let mut passes = 0;
    while let Some(stats) = clean(log, memory, now, high_watermark, true, None)
        .await
        .expect("clean")
    {
        passes += 1;
        // Progress: the dirty part shrinks, or (a pass for expired tombstones alone)
        // something is removed or merged.
        assert!(
            stats.map_end > stats.first_dirty
                || stats.records_removed > 0
                || stats.segments_rewritten > 0,
            "a pass makes progress: {stats:?}"
        );
        assert!(passes < 1000, "cleaning never ends");
    }
    passes
}

fn assert_same(got: &[Rec], want: &[Rec], what: &str) {
    if got != want {
        let got_offsets: Vec<i64> = got.iter().map(|r| r.offset).collect();
        let want_offsets: Vec<i64> = want.iter().map(|r| r.offset).collect();
        let first_diff = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        panic!(
            "{what}: log differs from the model at index {first_diff}\n got {:?}\nwant {:?}\n got offsets {got_offsets:?}\nwant offsets {want_offsets:?}",
            got.get(first_diff),
            want.get(first_diff)
        );
    }
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// No temporary file of a swap or a deletion is left, and every index belongs to a log.
fn assert_tidy(dir: &Path) {
    let names = dir_names(dir);
    for n in &names {
        assert!(
            !n.ends_with(".cleaned")
                && !n.ends_with(".swap")
                && !n.contains(".covers")
                && !n.ends_with(".deleted"),
            "leftover file {n} in {names:?}"
        );
    }
    let logs: BTreeSet<&str> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".log"))
        .collect();
    for n in &names {
        if let Some(stem) = n
            .strip_suffix(".index")
            .or_else(|| n.strip_suffix(".timeindex"))
        {
            assert!(logs.contains(stem), "{n} without its log in {names:?}");
        }
    }
}

fn log_bases(dir: &Path) -> Vec<i64> {
    dir_names(dir)
        .iter()
        .filter_map(|n| n.strip_suffix(".log")?.parse().ok())
        .collect()
}

// ---- 1. the model test ----------------------------------------------------------------

#[derive(Debug, Clone)]
struct Workload {
    segment_bytes: u64,
    small_memory: bool,
    tail_cache_bytes: usize,
    /// Rounds of produce, roll, clean; each a list of batches: (codec index, records:
    /// (key, value length or None for a tombstone)).
    rounds: Vec<Vec<(usize, Vec<(u8, Option<usize>)>)>>,
    /// Records appended after the last roll, into the active segment.
    tail: Vec<(u8, Option<usize>)>,
    /// DeleteRecords at this percentage of the log before the first pass.
    start_cut: Option<i64>,
}

fn workload() -> impl Strategy<Value = Workload> {
    (1u8..=40).prop_flat_map(|keys| {
        let rec = move || (0u8..keys, proptest::option::weighted(0.85, 0usize..200));
        let batch = move || {
            (
                0usize..CODECS.len(),
                proptest::collection::vec(rec(), 1..20),
            )
        };
        (
            4096u64..16384,
            any::<bool>(),
            prop_oneof![Just(1usize), Just(8 * 1024), Just(1 << 20)],
            proptest::collection::vec(proptest::collection::vec(batch(), 1..30), 1..4),
            proptest::collection::vec(rec(), 0..8),
            proptest::option::weighted(0.25, 0i64..100),
        )
            .prop_map(
                |(segment_bytes, small_memory, tail_cache_bytes, rounds, tail, start_cut)| {
                    Workload {
                        segment_bytes,
                        small_memory,
                        tail_cache_bytes,
                        rounds,
                        tail,
                        start_cut,
                    }
                },
            )
    })
}

async fn check_workload(w: Workload, dir: std::path::PathBuf) {
    let config = compact_config(w.segment_bytes, w.tail_cache_bytes);
    let log = PartitionLog::open(dir.clone(), config.clone(), LogContext::system())
        .await
        .expect("open");
    let memory = if w.small_memory {
        SMALL_MEMORY
    } else {
        BIG_MEMORY
    };
    let mut model = Model::default();
    let mut seq = 0u32;
    let mut make = |recs: &[(u8, Option<usize>)]| -> Vec<Produce> {
        recs.iter()
            .map(|(k, v)| {
                seq += 1;
                (key(*k), v.map(|len| value(seq, len)))
            })
            .collect()
    };
    let mut ts = T0;
    let mut want = Vec::new();
    for (round, batches) in w.rounds.iter().enumerate() {
        for (codec, recs) in batches {
            let records = make(recs);
            produce(&log, &mut model, &records, ts, CODECS[*codec]).await;
            ts += 100;
        }
        let cleaned_end = force_roll(&log, &mut model, ts).await;
        if let (0, Some(pct)) = (round, w.start_cut) {
            let target = log.written_offset() * pct / 100;
            assert_eq!(
                log.delete_records(target, i64::MAX)
                    .await
                    .expect("delete records"),
                target
            );
            // What lies below the log start is of no concern from here on.
            model.recs.retain(|r| r.offset >= target);
        }
        let lso = log.log_start_offset();
        // Before this round's pass: the previous rounds' result plus what came since.
        let mut before = want.clone();
        extend_after(&mut before, &model.recs);
        assert_same(
            &visible(read_all(&log, &model).await, lso),
            &before,
            &format!("round {round}, before its pass"),
        );

        let checkpoint = read_checkpoint(&KernelFs, &dir).expect("checkpoint");
        let first_dirty = checkpoint.unwrap_or(0).max(lso);
        let passes = clean_fully(&log, memory, NOW).await;
        if first_dirty < cleaned_end {
            assert!(passes >= 1, "a log with dirty sealed segments gets a pass");
            assert_eq!(
                read_checkpoint(&KernelFs, &dir).expect("checkpoint"),
                Some(cleaned_end),
                "the cleaner checkpoints the end of what it cleaned"
            );
        } else {
            // DeleteRecords moved the start into the active segment: nothing to clean.
            assert_eq!(passes, 0);
            assert_eq!(
                read_checkpoint(&KernelFs, &dir).expect("checkpoint"),
                checkpoint
            );
        }
        want = compacted(&model.recs, cleaned_end, false);
        assert_eq!(
            log.log_start_offset(),
            lso,
            "cleaning does not move the log start"
        );
        assert_same(
            &visible(read_all(&log, &model).await, lso),
            &want,
            &format!("round {round}, after its pass"),
        );
        assert_eq!(
            active_base(&log),
            cleaned_end,
            "the active segment is not touched"
        );
        assert_tidy(&dir);
        // Nothing left to do: another pass finds nothing dirty.
        assert!(clean(&log, memory, NOW, i64::MAX, true, None)
            .await
            .expect("clean")
            .is_none());
    }
    if !w.tail.is_empty() {
        let records = make(&w.tail);
        produce(&log, &mut model, &records, ts + 1, Codec::Builder).await;
        extend_after(&mut want, &model.recs);
        assert_same(
            &visible(read_all(&log, &model).await, log.log_start_offset()),
            &want,
            "with a tail",
        );
    }

    // The cleaned segments are what a restart finds.
    log.close().await;
    let log = PartitionLog::open(dir.clone(), config.clone(), LogContext::system())
        .await
        .expect("reopen");
    assert_eq!(
        log.written_offset(),
        model.recs.last().map_or(0, |r| r.offset + 1)
    );
    let lso = model.recs.first().map_or(0, |r| r.offset);
    assert_eq!(
        log.log_start_offset(),
        lso,
        "the log start survives the restart"
    );
    assert_same(
        &visible(read_all(&log, &model).await, lso),
        &want,
        "after reopening",
    );
    // Appends continue after the last offset.
    produce(
        &log,
        &mut model,
        &[(key(0), Some(b"after".to_vec()))],
        ts + 50,
        Codec::Kafka(KCompression::Zstd),
    )
    .await;
    want.push(model.recs.last().cloned().expect("appended"));
    assert_same(
        &visible(read_all(&log, &model).await, lso),
        &want,
        "appending after reopening",
    );
    log.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, max_shrink_iters: 64, ..ProptestConfig::default() })]
    #[test]
    fn compaction_keeps_the_last_record_of_each_key_at_its_offset(w in workload()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t-0");
        run(move || check_workload(w, path));
    }
}

// ---- 2. tombstones --------------------------------------------------------------------

#[test]
fn tombstones_stay_for_delete_retention_then_go_with_their_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let config = compact_config(4096, 1);
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        let mut model = Model::default();
        let old = T0; // long before NOW
                      // Values for keys 0..10, three rounds, over several segments.
        for round in 0..3u32 {
            for k in 0..10u8 {
                let recs = [(key(k), Some(value(round * 100 + u32::from(k), 700)))];
                produce(&log, &mut model, &recs, old, CODECS[usize::from(k) % 6]).await;
            }
        }
        // Tombstones for keys 0..4 (one compressed batch), a new value for key 5.
        let recs: Vec<Produce> = (0..4u8).map(|k| (key(k), None)).collect();
        produce(
            &log,
            &mut model,
            &recs,
            old,
            Codec::Kafka(KCompression::Lz4),
        )
        .await;
        produce(
            &log,
            &mut model,
            &[(key(5), Some(value(999, 10)))],
            old,
            Codec::Builder,
        )
        .await;
        let end1 = force_roll(&log, &mut model, old).await;
        assert!(log.segment_count() > 3);

        // Pass 1, tombstones younger than delete.retention.ms: they stay, the values
        // they delete go.
        clean_fully(&log, BIG_MEMORY, NOW).await;
        let want = compacted(&model.recs, end1, false);
        let got = read_all(&log, &model).await;
        assert_same(&got, &want, "first pass");
        for k in 0..4u8 {
            let of_key: Vec<&Rec> = got
                .iter()
                .filter(|r| r.key.as_deref() == Some(&key(k)[..]))
                .collect();
            assert_eq!(of_key.len(), 1, "key {k}: only its tombstone is left");
            assert!(of_key[0].value.is_none());
        }

        // delete.retention.ms 0: the next pass removes every tombstone in the cleaned
        // range, also those in segments cleaned before. It needs something dirty, so more
        // records come: a tombstone for key 9 (its value is in the clean part) and a value.
        log.set_config(LogConfig {
            delete_retention_ms: 0,
            ..config.clone()
        });
        produce(
            &log,
            &mut model,
            &[(key(9), None)],
            old,
            Codec::Kafka(KCompression::Snappy),
        )
        .await;
        produce(
            &log,
            &mut model,
            &[(key(6), Some(value(777, 10)))],
            old,
            Codec::Kafka(KCompression::Gzip),
        )
        .await;
        let end2 = force_roll(&log, &mut model, old).await;
        // The delete horizon runs from a segment's first cleaning (KIP-534), not from
        // the records' own (old) timestamps: a pass a moment later removes the
        // tombstones cleaned before, and the one after removes the one just cleaned.
        clean_fully(&log, BIG_MEMORY, NOW + 1).await;
        let got = read_all(&log, &model).await;
        assert!(
            got.iter()
                .any(|r| r.key.as_deref() == Some(&key(9)[..]) && r.value.is_none()),
            "key 9's tombstone, first cleaned just now, is still there"
        );
        // Nothing new is dirty: the expired tombstone alone makes the next pass due.
        clean_fully(&log, BIG_MEMORY, NOW + 2).await;
        let want = compacted(&model.recs, end2, true);
        let got = read_all(&log, &model).await;
        assert_same(&got, &want, "second pass");
        for k in (0..4u8).chain([9]) {
            assert!(
                got.iter().all(|r| r.key.as_deref() != Some(&key(k)[..])),
                "key {k}: tombstone and values gone"
            );
        }
        assert!(got.iter().all(|r| r.value.is_some()), "no tombstone left");
        for k in [5u8, 6, 7, 8] {
            assert_eq!(
                got.iter()
                    .filter(|r| r.key.as_deref() == Some(&key(k)[..]))
                    .count(),
                1,
                "key {k} keeps its last value"
            );
        }
        log.close().await;
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("reopen");
        assert_same(&read_all(&log, &model).await, &want, "after reopening");
        log.close().await;
    });
}

/// Reads right after a pass return the cleaned data, also for offsets whose batches
/// are still in the tail cache.
#[test]
fn reads_after_a_pass_do_not_serve_superseded_records_from_the_tail_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(
            path.clone(),
            compact_config(4096, 1 << 20),
            LogContext::system(),
        )
        .await
        .expect("open");
        let mut model = Model::default();
        for i in 0..12u32 {
            let recs: Vec<Produce> = (0..4u8)
                .map(|k| (key(k), Some(value(i * 4 + u32::from(k), 200))))
                .collect();
            produce(&log, &mut model, &recs, T0, Codec::Builder).await;
        }
        let end = force_roll(&log, &mut model, T0).await;
        clean_fully(&log, BIG_MEMORY, NOW).await;
        let want = compacted(&model.recs, end, false);
        assert_same(&read_all(&log, &model).await, &want, "right after the pass");
        log.close().await;
    });
}

/// Passes run while a producer appends and segments roll under them (as the shard's
/// housekeeping runs beside produce): nothing acknowledged is lost or changed, and a
/// final pass leaves exactly the compacted model.
#[test]
fn passes_concurrent_with_appends_and_rolls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let config = compact_config(4096, 16 * 1024);
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        let model = std::rc::Rc::new(std::cell::RefCell::new(Model::default()));
        let done = std::rc::Rc::new(std::cell::Cell::new(false));
        let producer = {
            let log = log.clone();
            let model = model.clone();
            let done = done.clone();
            glommio::spawn_local(async move {
                for i in 0..150u32 {
                    let recs: Vec<Produce> = (0..6u32)
                        .map(|j| {
                            let k = ((i * 7 + j * 3) % 25) as u8;
                            let v = (i * 6 + j) % 11 != 0;
                            (key(k), v.then(|| value(i * 6 + j, 90)))
                        })
                        .collect();
                    let codec = CODECS[i as usize % CODECS.len()];
                    // The model is updated only after the ack, and is not borrowed
                    // across the wait.
                    let mut m = model.borrow().clone();
                    produce(&log, &mut m, &recs, T0 + i64::from(i), codec).await;
                    *model.borrow_mut() = m;
                }
                done.set(true);
            })
        };
        let mut passes = 0;
        while !done.get() {
            if clean(&log, SMALL_MEMORY, NOW, i64::MAX, true, None)
                .await
                .expect("clean")
                .is_some()
            {
                passes += 1;
            }
            // Meanwhile the log reads as whole, valid batches in offset order.
            let hw = log.written_offset();
            let mut at = log.log_start_offset();
            let mut last = -1;
            while at < hw {
                let r = log
                    .read(at, 8 * 1024, i64::MAX)
                    .await
                    .expect("read during passes");
                assert!(!r.records.is_empty(), "read at {at} below {hw}");
                for item in batches(&r.records) {
                    let (h, range) = item.expect("whole batches");
                    for_each_record(&r.records[range], |ri| {
                        assert!(ri.offset > last, "offsets increase");
                        last = ri.offset;
                    })
                    .expect("records parse");
                    at = h.last_offset() + 1;
                }
            }
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        }
        producer.await;
        assert!(passes > 3, "passes ran while the producer did: {passes}");
        let mut model = model.borrow().clone();
        let end = force_roll(&log, &mut model, T0 + 1000).await;
        clean_fully(&log, SMALL_MEMORY, NOW).await;
        let want = compacted(&model.recs, end, false);
        assert_same(&read_all(&log, &model).await, &want, "after the final pass");
        log.close().await;
        let log = PartitionLog::open(path.clone(), config, LogContext::system())
            .await
            .expect("reopen");
        assert_same(&read_all(&log, &model).await, &want, "after reopening");
        assert_tidy(&path);
        log.close().await;
    });
}

/// The cleaner stops at the owner's high watermark (Kafka's `firstUncleanableOffset`):
/// a segment reaching past it is left as it is, superseded records and all, because
/// what lies above the high watermark may still be cut by a truncation; once the high
/// watermark passes the segment, it is cleaned.
#[test]
fn a_pass_stops_at_the_high_watermark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(path.clone(), compact_config(2048, 1), LogContext::system())
            .await
            .expect("open");
        let mut model = Model::default();
        for i in 0..60u32 {
            let recs = [(key((i % 5) as u8), Some(value(i, 150)))];
            produce(&log, &mut model, &recs, T0, Codec::Builder).await;
        }
        let active = force_roll(&log, &mut model, T0).await;
        let bases: Vec<i64> = log.segment_stats().iter().map(|s| s.base_offset).collect();
        assert!(bases.len() >= 4, "several sealed segments: {bases:?}");
        // A high watermark inside the third segment: the first two are cleanable.
        let (second_end, hw) = (bases[2], bases[2] + 1);
        let stats = cleaner::clean(&log, BIG_MEMORY, NOW, hw, true, None)
            .await
            .expect("clean")
            .expect("the first two segments are dirty");
        assert_eq!((stats.first_dirty, stats.map_end), (0, second_end));
        assert_eq!(
            read_checkpoint(&KernelFs, &path).expect("checkpoint"),
            Some(second_end)
        );
        assert_same(
            &read_all(&log, &model).await,
            &compacted(&model.recs, second_end, false),
            "nothing at or past the segment holding the high watermark is cleaned",
        );
        // The high watermark at the active segment: everything sealed is cleanable.
        clean_fully_below(&log, BIG_MEMORY, NOW, active).await;
        assert_same(
            &read_all(&log, &model).await,
            &compacted(&model.recs, active, false),
            "once the high watermark passes",
        );
        log.close().await;
    });
}

/// When a pass is due (`min.cleanable.dirty.ratio`, `max.compaction.lag.ms`) and how far
/// it reaches (`min.compaction.lag.ms`: segments holding young records wait).
#[test]
fn dirty_ratio_and_compaction_lags_decide_when_and_how_far() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let config = LogConfig {
            min_cleanable_dirty_ratio: 0.5,
            ..compact_config(4096, 1)
        };
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        let mut model = Model::default();
        // 40 distinct keys, then 10 of them again: everything is dirty, ratio 1.
        for k in 0..50u8 {
            let recs = [(key(k % 40), Some(value(u32::from(k), 200)))];
            produce(&log, &mut model, &recs, T0, Codec::Builder).await;
        }
        let end1 = force_roll(&log, &mut model, T0).await;
        let stats = cleaner::clean_if_due(&log, BIG_MEMORY, NOW, i64::MAX)
            .await
            .expect("clean")
            .expect("due: all of the log is dirty");
        assert_eq!((stats.first_dirty, stats.map_end), (0, end1));
        assert_eq!(stats.records_removed, 10);
        assert_same(
            &read_all(&log, &model).await,
            &compacted(&model.recs, end1, false),
            "first pass",
        );

        // One small dirty segment beside ~10 KB of clean ones: not due.
        produce(
            &log,
            &mut model,
            &[(key(1), Some(value(100, 10)))],
            T0,
            Codec::Builder,
        )
        .await;
        let end2 = force_roll(&log, &mut model, T0).await;
        assert!(cleaner::clean_if_due(&log, BIG_MEMORY, NOW, i64::MAX)
            .await
            .expect("clean")
            .is_none());
        assert_eq!(
            read_checkpoint(&KernelFs, &path).expect("checkpoint"),
            Some(end1)
        );
        // Unless its oldest record is older than max.compaction.lag.ms.
        log.set_config(LogConfig {
            max_compaction_lag_ms: NOW - T0 - 1,
            ..config.clone()
        });
        let stats = cleaner::clean_if_due(&log, BIG_MEMORY, NOW, i64::MAX)
            .await
            .expect("clean")
            .expect("due: overdue");
        assert_eq!((stats.first_dirty, stats.map_end), (end1, end2));
        assert_same(
            &read_all(&log, &model).await,
            &compacted(&model.recs, end2, false),
            "overdue pass",
        );

        // min.compaction.lag.ms: old records, then young ones over several segments.
        let young = NOW - 10;
        for i in 0..30u32 {
            let recs: Vec<Produce> = (0..3u32)
                .map(|j| (key(((i + j) % 7) as u8), Some(value(i * 3 + j, 150))))
                .collect();
            let ts = if i < 15 { T0 + 10 } else { young };
            produce(
                &log,
                &mut model,
                &recs,
                ts,
                Codec::Kafka(KCompression::Snappy),
            )
            .await;
        }
        let active = force_roll(&log, &mut model, young).await;
        log.set_config(LogConfig {
            min_compaction_lag_ms: 1000,
            ..config.clone()
        });
        // The cleanable log ends at the first segment holding a record younger than
        // the lag.
        let cleaned_end = log
            .segment_stats()
            .iter()
            .find(|s| s.max_timestamp_ms > NOW - 1000)
            .expect("young segments")
            .base_offset;
        assert!(cleaned_end < active, "some sealed segments are too young");
        let first_young = model
            .recs
            .iter()
            .find(|r| r.ts >= young)
            .expect("young")
            .offset;
        assert!(cleaned_end <= first_young);
        clean_fully(&log, BIG_MEMORY, NOW).await;
        assert_eq!(
            read_checkpoint(&KernelFs, &path).expect("checkpoint"),
            Some(cleaned_end)
        );
        let want = compacted(&model.recs, cleaned_end, false);
        assert_ne!(
            want,
            compacted(&model.recs, active, false),
            "the young part has superseded records, kept"
        );
        assert_same(&read_all(&log, &model).await, &want, "young segments wait");
        // Once they are old enough, they are cleaned too.
        clean_fully(&log, BIG_MEMORY, NOW + 1000).await;
        assert_same(
            &read_all(&log, &model).await,
            &compacted(&model.recs, active, false),
            "later",
        );
        log.close().await;
    });
}

// ---- 3. crashes -----------------------------------------------------------------------

/// A log of several sealed segments with superseded records of every codec, and a tail
/// in the active segment. Returns the model and the end of the sealed part.
async fn build_crash_log(log: &PartitionLog, model: &mut Model, round: u32) -> i64 {
    let mut seq = round * 1000;
    let t = T0 + i64::from(round) * 1000;
    for i in 0..30usize {
        let recs: Vec<Produce> = (0..5u8)
            .map(|j| {
                seq += 1;
                let k = ((i * 3 + usize::from(j)) % 12) as u8;
                (
                    key(k),
                    if seq % 9 == 0 {
                        None
                    } else {
                        Some(value(seq, 120))
                    },
                )
            })
            .collect();
        produce(
            log,
            model,
            &recs,
            t + i as i64,
            CODECS[(i + round as usize) % CODECS.len()],
        )
        .await;
    }
    let end = force_roll(log, model, t + 100).await;
    produce(
        log,
        model,
        &[(key(1), Some(b"tail".to_vec()))],
        t + 101,
        Codec::Builder,
    )
    .await;
    end
}

fn crash_files(dir: &Path, suffix: &str) -> Vec<String> {
    dir_names(dir)
        .into_iter()
        .filter(|n| n.ends_with(suffix))
        .collect()
}

async fn crash_case(
    point: CrashPoint,
    one_group: bool,
    precleaned: bool,
    path: std::path::PathBuf,
) {
    let what = format!("{point:?}, one group: {one_group}, cleaned before: {precleaned}");
    let config = compact_config(4096, 8 * 1024);
    let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
        .await
        .expect("open");
    let mut model = Model::default();
    // Optionally a first round, cleaned: the crashing pass then also rewrites segments
    // cleaned before, and a checkpoint exists.
    let mut end0 = 0;
    if precleaned {
        end0 = build_crash_log(&log, &mut model, 0).await;
        clean_fully(&log, BIG_MEMORY, NOW).await;
    }
    let checkpoint = read_checkpoint(&KernelFs, &path).expect("checkpoint");
    assert_eq!(checkpoint, precleaned.then_some(end0));
    let end = build_crash_log(&log, &mut model, 1).await;
    let sealed_before = log_bases(&path);
    assert!(sealed_before.len() >= 4, "{what}: several segments");
    if one_group {
        // Every sealed segment fits one group: the pass is one swap of all of them.
        log.set_config(LogConfig {
            segment_bytes: 1 << 20,
            ..config.clone()
        });
    }
    // What the log holds before the crashing pass.
    let original = compacted(&model.recs, end0, false);
    assert_same(
        &read_all(&log, &model).await,
        &original,
        &format!("{what}: before the crash"),
    );
    let want = compacted(&model.recs, end, false);
    assert_ne!(original, want, "{what}: compaction has something to remove");

    let stats = clean(&log, BIG_MEMORY, NOW, i64::MAX, true, Some(point))
        .await
        .expect("crashing pass")
        .expect("a pass ran");
    assert!(stats.segments_rewritten >= 1, "{what}: {stats:?}");
    if one_group {
        assert_eq!(
            stats.segments_rewritten,
            sealed_before.len() - 1,
            "{what}: {stats:?}"
        );
    }
    // The crash point really was reached: the files a crash there leaves.
    match point {
        CrashPoint::AfterCleaned => {
            assert_eq!(
                crash_files(&path, ".cleaned").len(),
                5, // log, index, time index, covers, cleaned-at
                "{what}: {:?}",
                dir_names(&path)
            );
            assert!(crash_files(&path, ".swap").is_empty(), "{what}");
        }
        CrashPoint::AfterSwapFiles => {
            assert!(crash_files(&path, ".cleaned").is_empty(), "{what}");
            assert_eq!(
                crash_files(&path, ".swap").len(),
                5,
                "{what}: {:?}",
                dir_names(&path)
            );
        }
        CrashPoint::MidSwap => {
            let swaps = crash_files(&path, ".swap");
            assert_eq!(
                swaps.len(),
                2,
                "{what}: log and covers still .swap: {swaps:?}"
            );
            assert!(
                swaps.iter().any(|n| n.ends_with(".log.swap")),
                "{what}: {swaps:?}"
            );
            if one_group {
                let active = *sealed_before.last().expect("active");
                assert_eq!(
                    log_bases(&path),
                    vec![sealed_before[0], active],
                    "{what}: the other members are deleted, the first keeps its old log"
                );
            }
        }
    }
    assert_eq!(
        read_checkpoint(&KernelFs, &path).expect("checkpoint"),
        checkpoint,
        "{what}: the checkpoint does not move"
    );
    // The running log never swapped: it still serves the original records.
    assert_same(
        &read_all(&log, &model).await,
        &original,
        &format!("{what}: live log after the crash"),
    );
    log.close().await;
    drop(log);

    let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
        .await
        .expect("reopen after the crash");
    assert_tidy(&path);
    assert_eq!(
        log.written_offset(),
        original.last().map_or(0, |r| r.offset + 1)
    );
    let got = read_all(&log, &model).await;
    match (point, one_group) {
        (CrashPoint::AfterCleaned, _) => assert_same(&got, &original, &what),
        (_, true) => assert_same(&got, &want, &what),
        (_, false) => {
            // Part of the log is cleaned: every record is an original one, and every
            // record compaction keeps is there.
            let by_offset: HashMap<i64, &Rec> = original.iter().map(|r| (r.offset, r)).collect();
            for r in &got {
                assert_eq!(
                    Some(&r),
                    by_offset.get(&r.offset),
                    "{what}: record at {}",
                    r.offset
                );
            }
            let have: BTreeSet<i64> = got.iter().map(|r| r.offset).collect();
            for r in &want {
                assert!(
                    have.contains(&r.offset),
                    "{what}: kept record {} lost",
                    r.offset
                );
            }
            assert!(
                got.len() < original.len(),
                "{what}: the first group was swapped in"
            );
        }
    }
    // The log works: a full clean and more appends.
    clean_fully(&log, BIG_MEMORY, NOW).await;
    assert_same(
        &read_all(&log, &model).await,
        &want,
        &format!("{what}: cleaned after the crash"),
    );
    let mut model = model;
    produce(
        &log,
        &mut model,
        &[(key(2), Some(b"more".to_vec()))],
        T0 + 200,
        Codec::Kafka(KCompression::Gzip),
    )
    .await;
    let mut want2 = want.clone();
    want2.push(model.recs.last().cloned().expect("appended"));
    assert_same(
        &read_all(&log, &model).await,
        &want2,
        &format!("{what}: appended"),
    );
    log.close().await;
    let log = PartitionLog::open(path.clone(), config, LogContext::system())
        .await
        .expect("reopen");
    assert_same(
        &read_all(&log, &model).await,
        &want2,
        &format!("{what}: reopened"),
    );
    assert_tidy(&path);
    log.close().await;
}

#[test]
fn a_pass_interrupted_at_any_crash_point_leaves_a_valid_log() {
    for point in [
        CrashPoint::AfterCleaned,
        CrashPoint::AfterSwapFiles,
        CrashPoint::MidSwap,
    ] {
        for one_group in [true, false] {
            for precleaned in [false, true] {
                let dir = tempfile::tempdir().expect("tempdir");
                let path = dir.path().join("t-0");
                run(move || crash_case(point, one_group, precleaned, path));
            }
        }
    }
}

// ---- 4. retention ---------------------------------------------------------------------

/// `n` batches of 4 records with 200-byte values, batch `i` stamped `ts(i)`.
async fn fill(log: &PartitionLog, model: &mut Model, n: usize, ts: impl Fn(usize) -> i64) {
    for i in 0..n {
        let recs: Vec<Produce> = (0..4u8)
            .map(|k| (key(k), Some(value((i * 4) as u32 + u32::from(k), 200))))
            .collect();
        produce(log, model, &recs, ts(i), Codec::Builder).await;
    }
}

async fn assert_out_of_range(log: &PartitionLog, offset: i64) {
    match log.read(offset, 1 << 16, i64::MAX).await {
        Err(ReadError::OffsetOutOfRange {
            log_start_offset, ..
        }) => assert_eq!(log_start_offset, log.log_start_offset()),
        other => panic!("read at {offset} below the log start: {other:?}"),
    }
}

/// The records at or past the log start are exactly the model's.
async fn assert_suffix(log: &PartitionLog, model: &Model) {
    let lso = log.log_start_offset();
    let got = read_all(log, model).await;
    // A read may return the whole batch that contains the log start.
    let got: Vec<Rec> = got.into_iter().filter(|r| r.offset >= lso).collect();
    let want: Vec<Rec> = model
        .recs
        .iter()
        .filter(|r| r.offset >= lso)
        .cloned()
        .collect();
    assert_same(&got, &want, "records from the log start");
}

#[test]
fn size_retention_deletes_the_oldest_segments_down_to_retention_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let config = delete_config(4096);
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        let mut model = Model::default();
        fill(&log, &mut model, 40, |_| T0).await;
        let before = log.segment_stats();
        assert!(before.len() >= 8, "small segments roll: {}", before.len());
        let total: u64 = before.iter().map(|s| s.size).sum();
        assert_eq!(log.size_bytes(), total);
        // Nothing configured: nothing goes.
        assert_eq!(log.enforce_retention(NOW, i64::MAX).await, 0);

        let limit = total / 2;
        log.set_config(LogConfig {
            retention_bytes: limit as i64,
            ..config.clone()
        });
        let deleted = log.enforce_retention(NOW, i64::MAX).await;
        let after = log.segment_stats();
        assert!(deleted > 0);
        assert_eq!(after.len() + deleted, before.len());
        assert_eq!(
            &before[deleted..],
            &after[..],
            "the oldest segments go, the rest stay as they were"
        );
        let size = log.size_bytes();
        assert!(
            size >= limit,
            "at least retention.bytes stays: {size} < {limit}"
        );
        assert!(
            size - after[0].size < limit,
            "the first remaining segment would take the log below the limit ({size} - {} >= {limit})",
            after[0].size
        );
        assert_eq!(log.log_start_offset(), after[0].base_offset);
        assert_out_of_range(&log, after[0].base_offset - 1).await;
        assert_out_of_range(&log, 0).await;
        assert_suffix(&log, &model).await;
        assert_eq!(
            log_bases(&path),
            after.iter().map(|s| s.base_offset).collect::<Vec<_>>()
        );
        assert_tidy(&path);
        assert_eq!(
            log.enforce_retention(NOW, i64::MAX).await,
            0,
            "nothing more is due"
        );

        // retention.bytes 0: every sealed segment goes, never the active one.
        log.set_config(LogConfig {
            retention_bytes: 0,
            ..config.clone()
        });
        log.enforce_retention(NOW, i64::MAX).await;
        let last = log.segment_stats();
        assert_eq!(last.len(), 1);
        assert_eq!(
            last[0],
            *before.last().expect("active"),
            "the active segment stays"
        );
        assert_eq!(log.log_start_offset(), last[0].base_offset);
        assert_suffix(&log, &model).await;
        produce(
            &log,
            &mut model,
            &[(key(1), Some(b"x".to_vec()))],
            T0,
            Codec::Builder,
        )
        .await;
        assert_suffix(&log, &model).await;
        log.close().await;
        let log = PartitionLog::open(path.clone(), config, LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.log_start_offset(), last[0].base_offset);
        assert_suffix(&log, &model).await;
        log.close().await;
    });
}

#[test]
fn time_retention_deletes_segments_whose_newest_record_is_too_old() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let retention_ms = 3_600_000;
        let old = NOW - 10 * retention_ms;
        let young = NOW - 1000;
        // Compact only first: time retention does not apply.
        let config = LogConfig {
            retention_ms,
            cleanup: CleanupPolicy {
                delete: false,
                compact: true,
            },
            ..delete_config(4096)
        };
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        let mut model = Model::default();
        fill(&log, &mut model, 30, |i| {
            if i < 15 {
                old + i as i64
            } else {
                young
            }
        })
        .await;
        let before = log.segment_stats();
        assert!(before.len() >= 6);
        assert_eq!(
            log.enforce_retention(NOW, i64::MAX).await,
            0,
            "cleanup.policy compact deletes nothing"
        );

        log.set_config(LogConfig {
            cleanup: CleanupPolicy {
                delete: true,
                compact: false,
            },
            ..config.clone()
        });
        // Before everything is old enough: nothing.
        assert_eq!(
            log.enforce_retention(old + retention_ms - 1_000, i64::MAX)
                .await,
            0
        );
        let deleted = log.enforce_retention(NOW, i64::MAX).await;
        let first_young = model
            .recs
            .iter()
            .find(|r| r.ts == young)
            .expect("young records")
            .offset;
        let after = log.segment_stats();
        let lso = log.log_start_offset();
        assert!(deleted > 0);
        assert_eq!(lso, after[0].base_offset);
        assert!(lso <= first_young, "only segments of old records go");
        let next = after.get(1).map_or(log.written_offset(), |s| s.base_offset);
        assert!(first_young < next, "the segment holding the first young record stays (it starts at {lso}, the young record is at {first_young}, next segment at {next})");
        assert_out_of_range(&log, lso - 1).await;
        assert_suffix(&log, &model).await;
        assert_eq!(
            log_bases(&path),
            after.iter().map(|s| s.base_offset).collect::<Vec<_>>()
        );
        // Far in the future every sealed segment is old, but none that reaches past the
        // upper bound (the high watermark) goes; then, unbounded, all but the active one.
        let bound = after.get(2).map_or(i64::MAX, |s| s.base_offset);
        log.enforce_retention(NOW + 100 * retention_ms, bound).await;
        assert!(
            log.segment_stats()
                .first()
                .is_some_and(|s| s.base_offset <= bound),
            "the segment holding the bound stays"
        );
        log.enforce_retention(NOW + 100 * retention_ms, i64::MAX)
            .await;
        assert_eq!(log.segment_stats().len(), 1);
        assert_eq!(
            log.log_start_offset(),
            before.last().expect("active").base_offset
        );
        assert_suffix(&log, &model).await;
        log.close().await;
    });
}

#[test]
fn delete_records_moves_the_start_inside_a_segment_and_persists_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let config = delete_config(4096);
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        let mut model = Model::default();
        fill(&log, &mut model, 30, |_| T0).await;
        let before = log.segment_stats();
        assert!(before.len() >= 4);
        // Inside the third segment, inside a batch (batches hold 4 records).
        let target = before[2].base_offset + 5;
        assert!(target < before[3].base_offset);
        assert_eq!(
            log.delete_records(target, i64::MAX)
                .await
                .expect("delete records"),
            target
        );
        assert_eq!(log.log_start_offset(), target);
        let after = log.segment_stats();
        assert_eq!(
            after[0].base_offset, before[2].base_offset,
            "the two segments wholly below go"
        );
        assert_eq!(log_bases(&path)[0], before[2].base_offset);
        assert_out_of_range(&log, target - 1).await;
        let r = log
            .read(target, 1, i64::MAX)
            .await
            .expect("read at the start");
        let (h, _) = batches(&r.records).next().expect("a batch").expect("whole");
        assert!(h.base_offset <= target && target <= h.last_offset());
        assert_eq!(r.log_start_offset, target);
        assert_suffix(&log, &model).await;
        // It never moves back.
        assert_eq!(
            log.delete_records(target - 3, i64::MAX)
                .await
                .expect("lower"),
            target
        );
        assert_eq!(log.log_start_offset(), target);
        // Beyond the high watermark: an error, nothing moves.
        let hw = log.written_offset();
        assert!(matches!(
            log.delete_records(hw + 1, i64::MAX).await,
            Err(ReadError::OffsetOutOfRange { .. })
        ));
        assert_eq!(log.log_start_offset(), target);
        log.close().await;

        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(
            log.log_start_offset(),
            target,
            "the checkpoint keeps the start across a restart"
        );
        assert_out_of_range(&log, target - 1).await;
        assert_suffix(&log, &model).await;
        // -1: up to the high watermark; the active segment stays, appends go on.
        assert_eq!(log.delete_records(-1, i64::MAX).await.expect("to hw"), hw);
        assert_eq!(log.log_start_offset(), hw);
        assert_eq!(log.segment_stats().len(), 1);
        assert!(log
            .read(hw, 1024, i64::MAX)
            .await
            .expect("read at hw")
            .records
            .is_empty());
        produce(
            &log,
            &mut model,
            &[(key(3), Some(b"y".to_vec()))],
            T0,
            Codec::Builder,
        )
        .await;
        assert_suffix(&log, &model).await;
        log.close().await;
        let log = PartitionLog::open(path.clone(), config, LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.log_start_offset(), hw);
        assert_eq!(log.written_offset(), hw + 1);
        assert_suffix(&log, &model).await;
        log.close().await;
    });
}

#[test]
fn deleted_segment_files_are_unlinked_after_the_delay_or_at_the_next_open() {
    for delay_ms in [0i64, 300, 3_600_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t-0");
        let p = path.clone();
        let (kept, gone) = run(move || async move {
            let config = LogConfig {
                file_delete_delay_ms: delay_ms,
                ..delete_config(4096)
            };
            let log = PartitionLog::open(p.clone(), config.clone(), LogContext::system())
                .await
                .expect("open");
            let mut model = Model::default();
            fill(&log, &mut model, 20, |_| T0).await;
            let before = log_bases(&p);
            let cut = log.segment_stats()[3].base_offset;
            assert_eq!(log.delete_segments_before(cut).await, 3);
            let kept = log_bases(&p);
            assert_eq!(kept, before[3..].to_vec());
            let gone = before[..3].to_vec();
            let deleted = crash_files(&p, ".deleted");
            if delay_ms == 0 {
                assert!(deleted.is_empty(), "unlinked at once: {deleted:?}");
            } else {
                assert_eq!(
                    deleted.len(),
                    9,
                    "three files per segment wait: {deleted:?}"
                );
                for b in &gone {
                    for s in ["log", "index", "timeindex"] {
                        let n = format!("{b:020}.{s}.deleted");
                        assert!(deleted.contains(&n), "{n} in {deleted:?}");
                    }
                }
            }
            if delay_ms == 300 {
                glommio::timer::sleep(std::time::Duration::from_millis(800)).await;
                assert!(
                    crash_files(&p, ".deleted").is_empty(),
                    "unlinked after the delay"
                );
            }
            assert_suffix(&log, &model).await;
            log.close().await;
            (kept, gone)
        });
        // The executor is gone (a pending unlink with it); the next open removes leftovers.
        run(move || async move {
            let log = PartitionLog::open(path.clone(), delete_config(4096), LogContext::system())
                .await
                .expect("reopen");
            assert_tidy(&path);
            assert_eq!(log_bases(&path), kept);
            assert_eq!(log.log_start_offset(), kept[0]);
            for b in gone {
                assert!(!path.join(format!("{b:020}.log")).exists());
            }
            assert_out_of_range(&log, kept[0] - 1).await;
            log.close().await;
        });
    }
}

/// A log start checkpoint beyond what survived (DeleteRecords of written but unsynced
/// offsets, then a power loss) is clamped and rewritten at open, so records appended
/// later at those offsets are never hidden by it; ListOffsets by time never answers
/// below the log start.
#[test]
fn a_checkpoint_past_the_log_end_is_clamped_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let config = delete_config(4096);
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        let mut model = Model::default();
        fill(&log, &mut model, 8, |_| T0).await;
        let end = log.log_end_offset();
        log.close().await;
        drop(log);
        std::fs::write(path.join("log-start-offset"), format!("{}\n", end + 100)).expect("write");
        let log = PartitionLog::open(path.clone(), config.clone(), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.log_start_offset(), end);
        let text = std::fs::read_to_string(path.join("log-start-offset")).expect("read");
        assert_eq!(
            text.trim(),
            end.to_string(),
            "the checkpoint itself is clamped"
        );
        fill(&log, &mut model, 8, |_| T0 + 1).await;
        log.close().await;
        drop(log);
        let log = PartitionLog::open(path.clone(), config, LogContext::system())
            .await
            .expect("reopen again");
        assert_eq!(log.log_start_offset(), end, "the new records stay visible");
        // By time: the old records (T0) are below the start; the answer is the start.
        let (offset, _) = log
            .offset_for_timestamp(T0)
            .await
            .expect("lookup")
            .expect("a hit");
        assert!(
            offset >= end,
            "ListOffsets by time answered {offset} below the start {end}"
        );
        log.close().await;
    });
}

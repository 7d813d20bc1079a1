//! A follower's append (`PartitionLog::append_replicated`) on real partition logs: a
//! follower fed a leader's batches ends byte-identical, with the leader's offsets and
//! epochs; a compacted leader's batches, which skip offsets, are copied as they are and
//! survive the follower's restart; batches that go backwards are refused whole; a
//! partial batch at the end is left for the next fetch; the leader's topic rules and
//! size limit are not applied again; idempotent producers are recorded so that duplicates
//! are recognised.

mod common;

use common::*;
use corelog_storage::batch::{self, batches, BatchError};
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::compaction::cleaner;
use corelog_storage::config::{CleanupPolicy, CompressionType, TimestampType};
use corelog_storage::{AckLevel, AppendError, LogConfig, LogContext, PartitionLog};
use std::path::{Path, PathBuf};
use std::rc::Rc;

async fn open(path: &Path, config: LogConfig) -> Rc<PartitionLog> {
    PartitionLog::open(path.to_path_buf(), config, LogContext::system())
        .await
        .expect("open")
}

/// The `.log` files of `dir`, by name, with their bytes.
fn segment_logs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    out
}

/// A leader log of plain and idempotent batches over several segments, written at
/// leader epochs 0..4; closed. Returns its directory.
fn write_leader(root: &Path) -> PathBuf {
    let path = root.join("leader-0");
    let p = path.clone();
    run(move || async move {
        let log = open(&p, small_config(2048)).await;
        let mut seq = 0;
        for i in 0..60u32 {
            let epoch = (i / 15) as i32;
            let bytes = if i % 3 == 0 {
                seq += 2;
                idem(7, 0, seq - 2, 2)
            } else {
                batch(i, 1 + (i as usize % 4), 40, 1_000 + i64::from(i))
            };
            let t = log.append(&bytes, epoch).expect("append");
            log.wait(t, AckLevel::All).await.expect("ack");
        }
        assert!(log.segment_count() >= 3, "several segments");
        log.close().await;
    });
    path
}

#[test]
fn a_follower_fed_the_leaders_segments_is_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let leader = write_leader(dir.path());
    let follower = dir.path().join("follower-0");
    let leader_logs = segment_logs(&leader);
    let (l, f) = (leader.clone(), follower.clone());
    run(move || async move {
        let log = open(&f, small_config(2048)).await;
        // Each leader segment's bytes in one append, as a fetch of that segment would
        // bring them.
        let mut expected_base = 0;
        for (_, bytes) in &leader_logs {
            let t = log.append_replicated(bytes).expect("replicated");
            assert_eq!(t.base_offset, expected_base, "continues the log");
            expected_base = t.next_offset;
            log.wait(t, AckLevel::All).await.expect("ack");
        }
        let copied = read_all(&log).await;
        log.close().await;
        let leader_log = open(&l, small_config(2048)).await;
        assert_eq!(copied, read_all(&leader_log).await, "reads are identical");
        assert_eq!(leader_log.log_end_offset(), expected_base);
        leader_log.close().await;
        // Offsets and epochs are the leader's: epoch 3 for the last batches.
        let hs = headers(&copied);
        assert_eq!(hs.first().map(|h| h.partition_leader_epoch), Some(0));
        assert_eq!(hs.last().map(|h| h.partition_leader_epoch), Some(3));
    });
    assert_eq!(
        segment_logs(&follower),
        segment_logs(&leader),
        "the follower's segments are the leader's, file for file"
    );
    // And they survive a restart of the follower.
    run(move || async move {
        let log = open(&follower, small_config(2048)).await;
        let leader_log = open(&leader, small_config(2048)).await;
        assert_eq!(log.log_end_offset(), leader_log.log_end_offset());
        assert_eq!(read_all(&log).await, read_all(&leader_log).await);
        assert_eq!(log.active_producers(), leader_log.active_producers());
        log.close().await;
        leader_log.close().await;
    });
}

/// `bytes` (whole batches) with the base offsets `base, base + n, ...` written in, as a
/// leader would have given them.
fn at_offsets(mut bytes: Vec<u8>, base: i64) -> Vec<u8> {
    let ranges: Vec<_> = batches(&bytes).map(|r| r.expect("whole batches")).collect();
    let mut next = base;
    for (h, range) in ranges {
        batch::set_base_offset(&mut bytes[range], next);
        next += i64::from(h.last_offset_delta) + 1;
    }
    bytes
}

#[test]
fn batches_that_do_not_continue_the_log_are_refused_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f-0");
    run(move || async move {
        let log = open(&path, small_config(1 << 20)).await;
        let t = log
            .append_replicated(&at_offsets(batch(0, 3, 10, 1), 0))
            .expect("first");
        assert_eq!((t.base_offset, t.next_offset), (0, 3));
        log.wait(t, AckLevel::Leader).await.expect("ack");
        // A fetch from the wrong offset: the first batch starts below the log end.
        for base in [0, 2] {
            match log.append_replicated(&at_offsets(batch(1, 2, 10, 1), base)) {
                Err(AppendError::OffsetMismatch { expected, found }) => {
                    assert_eq!((expected, found), (3, base))
                }
                other => panic!("expected an offset mismatch, got {other:?}"),
            }
        }
        // The second batch overlaps the first: nothing of either is queued.
        let mut two = at_offsets(batch(2, 2, 10, 1), 3);
        two.extend_from_slice(&at_offsets(batch(3, 2, 10, 1), 4));
        assert!(matches!(
            log.append_replicated(&two),
            Err(AppendError::OffsetMismatch {
                expected: 5,
                found: 4
            })
        ));
        // A corrupt batch after a good one: refused whole too.
        let mut corrupt = at_offsets(batch(4, 2, 10, 1), 3);
        let mut bad = at_offsets(batch(5, 2, 10, 1), 5);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        corrupt.extend_from_slice(&bad);
        assert!(matches!(
            log.append_replicated(&corrupt),
            Err(AppendError::InvalidBatch(BatchError::CorruptCrc { .. }))
        ));
        assert_eq!(log.log_end_offset(), 3, "nothing was queued");
        // Nothing was written either, and the log goes on from where it was.
        let t = log
            .append_replicated(&at_offsets(batch(6, 1, 10, 1), 3))
            .expect("continues");
        log.wait(t, AckLevel::Leader).await.expect("ack");
        assert_eq!(
            headers(&read_all(&log).await)
                .iter()
                .map(|h| (h.base_offset, h.last_offset()))
                .collect::<Vec<_>>(),
            vec![(0, 2), (3, 3)]
        );
        log.close().await;
    });
}

/// A compacted topic's log: small segments, compaction at once, tombstones kept.
fn compacted_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        cleanup: CleanupPolicy {
            delete: false,
            compact: true,
        },
        min_compaction_lag_ms: 0,
        delete_retention_ms: 1 << 50,
        file_delete_delay_ms: 0,
        ..small_config(segment_bytes)
    }
}

/// One batch of `count` records numbered from `first`: record n has a key of its own
/// when n is a multiple of 5 (kept by every compaction), else `key-(n % keys)`.
fn keyed(first: u32, count: u32, keys: u32, base_ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(base_ts);
    for i in 0..count {
        let n = first + i;
        let key = if n % 5 == 0 {
            format!("once-{n}")
        } else {
            format!("key-{}", n % keys)
        };
        let value = format!("value-{n}").repeat(4);
        b.push(&Record {
            key: Some(key.as_bytes()),
            value: Some(value.as_bytes()),
            headers: &[],
            timestamp_delta: i64::from(i),
        });
    }
    b.build()
}

/// The follower's fetch loop, reduced to storage: read the leader's log from the
/// follower's log end (often an offset the leader's cleaner removed), `max_bytes` at a
/// time, and append what comes back, until the leader has nothing more.
async fn copy_by_fetching(leader: &PartitionLog, follower: &PartitionLog, max_bytes: usize) {
    for _ in 0..10_000 {
        let read = leader
            .read(follower.log_end_offset(), max_bytes, i64::MAX)
            .await
            .expect("a follower's fetch offset is in range");
        if read.records.is_empty() {
            return;
        }
        let t = follower
            .append_replicated(&read.records)
            .expect("a compacted leader's batches continue the log");
        assert!(t.next_offset > t.base_offset, "every fetch makes progress");
        follower.wait(t, AckLevel::All).await.expect("ack");
    }
    panic!("the copy never ends");
}

#[test]
fn a_compacted_leaders_batches_are_copied_gaps_and_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (leader_path, follower_path) = (dir.path().join("l-0"), dir.path().join("f-0"));
    run(move || async move {
        let leader = open(&leader_path, compacted_config(2048)).await;
        // Ten keys written over and over, and keys written once, over batches of one to
        // four records: compaction leaves batches with fewer records than offsets and
        // removes whole batches.
        let mut first = 0;
        for i in 0..120u32 {
            let count = 1 + i % 4;
            let t = leader
                .append(&keyed(first, count, 10, 1_000), 0)
                .expect("append");
            leader.wait(t, AckLevel::All).await.expect("ack");
            first += count;
        }
        while cleaner::clean(&leader, 1 << 20, i64::MAX / 2, i64::MAX, true, None)
            .await
            .expect("clean")
            .is_some()
        {}
        // The active segment holds the newest records, so the log ends at a batch.
        let t = leader
            .append(&keyed(first, 3, 10, 1_000), 0)
            .expect("append");
        leader.wait(t, AckLevel::All).await.expect("ack");
        let stored = read_all(&leader).await;
        let hs = headers(&stored);
        assert!(
            hs.iter()
                .any(|h| h.record_count > 0 && h.record_count < h.last_offset_delta + 1),
            "some batch lost records inside"
        );
        assert!(
            hs.windows(2)
                .any(|w| w[1].base_offset > w[0].last_offset() + 1),
            "some batch is gone whole"
        );

        // One segment without index entries on the follower: its restart recovers all
        // of it, gaps included.
        let one_segment = LogConfig {
            index_interval_bytes: 1 << 20,
            ..small_config(1 << 20)
        };
        let follower = open(&follower_path, one_segment.clone()).await;
        copy_by_fetching(&leader, &follower, 700).await;
        assert_eq!(follower.log_end_offset(), leader.log_end_offset());
        assert_eq!(
            read_all(&follower).await,
            stored,
            "the leader's batches, as stored"
        );
        follower.close().await;
        let follower = open(&follower_path, one_segment).await;
        assert_eq!(follower.log_end_offset(), leader.log_end_offset());
        assert_eq!(read_all(&follower).await, stored, "after a restart");
        // It goes on from there, as a follower and as a leader.
        let t = leader.append(&keyed(0, 2, 10, 1_000), 0).expect("append");
        leader.wait(t, AckLevel::All).await.expect("ack");
        copy_by_fetching(&leader, &follower, 700).await;
        let t = follower
            .append(&keyed(0, 1, 10, 1_000), 1)
            .expect("append as leader");
        assert_eq!(t.base_offset, leader.log_end_offset());
        follower.close().await;
        leader.close().await;
    });
}

#[test]
fn a_trailing_partial_batch_is_left_for_the_next_fetch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f-0");
    run(move || async move {
        let log = open(&path, small_config(1 << 20)).await;
        // Nothing at all, or only part of a batch: an empty ticket at the log end.
        for bytes in [Vec::new(), at_offsets(batch(0, 2, 10, 1), 0)[..30].to_vec()] {
            let t = log.append_replicated(&bytes).expect("nothing to append");
            assert_eq!((t.base_offset, t.next_offset), (0, 0));
            log.wait(t, AckLevel::All)
                .await
                .expect("nothing to wait for");
        }
        let mut fetched = at_offsets(batch(1, 2, 10, 1), 0);
        let whole = fetched.len();
        let second = at_offsets(batch(2, 3, 10, 1), 2);
        fetched.extend_from_slice(&second[..second.len() - 7]);
        let t = log.append_replicated(&fetched).expect("whole batches");
        assert_eq!((t.base_offset, t.next_offset), (0, 2));
        log.wait(t, AckLevel::All).await.expect("ack");
        assert_eq!(read_all(&log).await, fetched[..whole]);
        // The next fetch starts at the log end and brings the batch whole.
        let t = log.append_replicated(&second).expect("the rest");
        assert_eq!((t.base_offset, t.next_offset), (2, 5));
        log.wait(t, AckLevel::All).await.expect("ack");
        assert_eq!(log.log_end_offset(), 5);
        log.close().await;
    });
}

#[test]
fn the_leaders_topic_rules_and_size_limit_are_not_applied_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f-0");
    run(move || async move {
        // A compacted topic that recompresses, stamps log-append time and takes small
        // batches: the rules `append` applies would refuse or rewrite these batches.
        let config = LogConfig {
            cleanup: CleanupPolicy {
                delete: false,
                compact: true,
            },
            compression: CompressionType::Gzip,
            timestamp_type: TimestampType::LogAppendTime,
            max_batch_bytes: 100,
            ..small_config(1 << 20)
        };
        let log = open(&path, config.clone()).await;
        let unkeyed = at_offsets(idem(3, 0, 0, 20), 0);
        assert!(unkeyed.len() > config.max_batch_bytes);
        assert!(
            log.append(&unkeyed, 0).is_err(),
            "a client's append is refused"
        );
        let mut fetched = unkeyed.clone();
        batch::set_partition_leader_epoch(&mut fetched, 9);
        let t = log.append_replicated(&fetched).expect("replicated");
        log.wait(t, AckLevel::All).await.expect("ack");
        assert_eq!(read_all(&log).await, fetched, "stored exactly as fetched");
        log.close().await;
    });
}

#[test]
fn replicated_idempotent_batches_are_recognised_as_duplicates_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f-0");
    run(move || async move {
        let log = open(&path, small_config(1 << 20)).await;
        // Several producers' batches in one fetch, at the leader's offsets.
        let mut fetched = Vec::new();
        for (pid, seq) in [(1, 0), (2, 0), (1, 3), (2, 3)] {
            fetched.extend_from_slice(&idem(pid, 4, seq, 3));
        }
        fetched.extend_from_slice(&batch(9, 2, 10, 1));
        let fetched = at_offsets(fetched, 0);
        let t = log.append_replicated(&fetched).expect("replicated");
        assert_eq!((t.base_offset, t.next_offset), (0, 14));
        log.wait(t, AckLevel::All).await.expect("ack");
        let producers = log.active_producers();
        assert_eq!(
            producers
                .iter()
                .map(|p| (p.producer_id, p.epoch, p.last_sequence))
                .collect::<Vec<_>>(),
            vec![(1, 4, 5), (2, 4, 5)]
        );
        // Leader now: a producer's retry of a replicated batch is answered with the
        // offsets the leader gave it, and nothing is written.
        let retry = log.append(&idem(2, 4, 3, 3), 5).expect("duplicate");
        assert_eq!((retry.base_offset, retry.next_offset), (9, 12));
        let next = log.append(&idem(1, 4, 6, 1), 5).expect("in sequence");
        assert_eq!(next.base_offset, 14);
        assert!(matches!(
            log.append(&idem(2, 4, 7, 1), 5),
            Err(AppendError::Sequence(_))
        ));
        log.wait(next, AckLevel::All).await.expect("ack");
        log.close().await;
        // The same after a restart (snapshot at the clean close).
        let log = open(&path, small_config(1 << 20)).await;
        let retry = log.append(&idem(1, 4, 3, 3), 5).expect("duplicate");
        assert_eq!(retry.base_offset, 6);
        assert_eq!(log.log_end_offset(), 15);
        log.close().await;
    });
}

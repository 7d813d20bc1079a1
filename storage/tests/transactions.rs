//! Transactions on a real partition log: markers ending transactions, the first unstable
//! offset, the aborted transactions a `read_committed` fetch is told about, and all of it
//! surviving clean restarts, crashes, segment rolls, a follower's replication, a
//! truncation and compaction.

mod common;

use common::*;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::fs::KernelFs;
use corelog_storage::producer_state::SequenceError;
use corelog_storage::txn_index::AbortedTxn;
use corelog_storage::txn_marker::{MarkerKind, TxnMarker};
use corelog_storage::LogContext;
use corelog_storage::{AckLevel, AppendError, PartitionLog};
use std::path::Path;

/// A transactional batch of `count` records from `pid` at `epoch`, sequences from `seq`.
fn txn(pid: i64, epoch: i16, seq: i32, count: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_000)
        .producer(pid, epoch, seq)
        .transactional();
    for i in 0..count {
        let value = format!("p{pid}-s{}", i64::from(seq) + i as i64);
        b.push(&Record {
            key: Some(b"k"),
            value: Some(value.as_bytes()),
            headers: &[],
            timestamp_delta: i as i64,
        });
    }
    b.build()
}

fn marker(pid: i64, epoch: i16, coordinator_epoch: i32, commit: bool) -> TxnMarker {
    TxnMarker {
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch,
        kind: if commit {
            MarkerKind::Commit
        } else {
            MarkerKind::Abort
        },
    }
}

async fn produce(log: &PartitionLog, bytes: &[u8]) -> Result<i64, AppendError> {
    let t = log.append(bytes, 0)?;
    log.wait(t, AckLevel::All).await?;
    Ok(t.base_offset)
}

async fn end(log: &PartitionLog, m: TxnMarker) -> Result<i64, AppendError> {
    let t = log.append_marker(&m, 0)?;
    log.wait(t, AckLevel::All).await?;
    Ok(t.base_offset)
}

/// The offset of the newest producer snapshot in `dir`.
fn newest_snapshot(dir: &Path) -> i64 {
    std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".snapshot")?.parse::<i64>().ok()
        })
        .max()
        .expect("a snapshot was written at a roll")
}

fn aborted(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset: first,
        last_offset: last,
        last_stable_offset: lso,
    }
}

#[test]
fn markers_end_transactions_and_aborts_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        assert_eq!(produce(&log, &txn(1, 0, 0, 3)).await.expect("p1"), 0);
        assert_eq!(produce(&log, &txn(2, 0, 0, 2)).await.expect("p2"), 3);
        assert_eq!(produce(&log, &batch(0, 2, 10, 1)).await.expect("plain"), 5);
        assert_eq!(log.first_unstable_offset(7), Some(0));
        // Producer 1 may not write outside its transaction.
        assert!(matches!(
            log.append(&idem(1, 0, 3, 1), 0),
            Err(AppendError::Sequence(SequenceError::TxnOpen {
                producer_id: 1
            }))
        ));
        assert_eq!(end(&log, marker(1, 0, 4, false)).await.expect("abort"), 7);
        assert_eq!(
            log.aborted_transactions(0, 8),
            vec![aborted(1, 0, 7, 3)],
            "producer 2's transaction held the stable offset at 3"
        );
        assert_eq!(
            log.first_unstable_offset(7),
            Some(0),
            "marker not replicated"
        );
        assert_eq!(log.first_unstable_offset(8), Some(3));
        assert_eq!(end(&log, marker(2, 0, 4, true)).await.expect("commit"), 8);
        assert_eq!(log.first_unstable_offset(9), None);
        assert_eq!(
            log.aborted_transactions(0, 9).len(),
            1,
            "a commit adds none"
        );
        // Stale and fenced markers are refused and write nothing.
        assert!(matches!(
            log.append_marker(&marker(2, 0, 3, true), 0),
            Err(AppendError::Sequence(SequenceError::CoordinatorFenced {
                current: 4,
                ..
            }))
        ));
        produce(&log, &txn(2, 1, 0, 1)).await.expect("next epoch");
        assert!(matches!(
            log.append_marker(&marker(2, 0, 4, true), 0),
            Err(AppendError::Sequence(SequenceError::StaleEpoch {
                current: 1,
                ..
            }))
        ));
        // A duplicate of a marker already written is harmless: it ends nothing.
        end(&log, marker(1, 0, 4, false))
            .await
            .expect("late marker");
        assert_eq!(log.aborted_transactions(0, 100).len(), 1);
        assert_eq!(
            log.first_unstable_offset(11),
            Some(9),
            "producer 2's new one"
        );
        assert_eq!(log.written_offset(), 11);
        // Markers are control batches read back as stored.
        let all = read_all(&log).await;
        let controls: Vec<i64> = headers(&all)
            .iter()
            .filter(|h| h.is_control())
            .map(|h| h.base_offset)
            .collect();
        assert_eq!(controls, vec![7, 8, 10]);
        log.close().await;
    });
}

/// Many transactions over many small segments, every third aborted, producer 9's left
/// open at the end.
async fn write_history(log: &PartitionLog) -> Vec<AbortedTxn> {
    let mut seq = [0i32; 4];
    for round in 0..40 {
        for pid in 1..4i64 {
            let s = &mut seq[pid as usize];
            produce(log, &txn(pid, 0, *s, 2)).await.expect("txn");
            *s += 2;
        }
        for pid in 1..4i64 {
            let commit = (round + pid) % 3 != 0;
            end(log, marker(pid, 0, 1, commit)).await.expect("marker");
        }
    }
    produce(log, &txn(9, 0, 0, 1)).await.expect("open txn");
    log.aborted_transactions(0, i64::MAX)
}

#[test]
fn transactions_survive_clean_restarts_crashes_and_rolls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let live = dir.path().join("t-0");
    let crashed = dir.path().join("crash-0");
    let (l, c) = (live.clone(), crashed.clone());
    let expected = run(move || async move {
        let log = PartitionLog::open(l.clone(), small_config(1024), LogContext::system())
            .await
            .expect("open");
        write_history(&log).await;
        assert!(log.segment_count() > 5, "segments rolled");
        // A tail of aborts: three producers' transactions, each aborted (less than a
        // segment, so at most one roll among them).
        for pid in [11i64, 12, 13] {
            produce(&log, &txn(pid, 0, 0, 1)).await.expect("txn");
        }
        for pid in [11i64, 12, 13] {
            end(&log, marker(pid, 0, 1, false)).await.expect("abort");
        }
        let expected = log.aborted_transactions(0, i64::MAX);
        assert_eq!(expected.len(), 43);
        // A crash image: copied while open, so no snapshot or index at the log end.
        copy_dir(&l, &c);
        // Some aborts lie past the newest snapshot: only a replay can find them.
        let newest = newest_snapshot(&c);
        assert!(
            expected.iter().filter(|e| e.last_offset >= newest).count() >= 2,
            "snapshot at {newest}, aborts at {:?}",
            expected.iter().map(|e| e.last_offset).collect::<Vec<_>>()
        );
        log.close().await;
        expected
    });
    for path in [live, crashed] {
        let expected = expected.clone();
        run(move || async move {
            let log = PartitionLog::open(path.clone(), small_config(1024), LogContext::system())
                .await
                .expect("reopen");
            let end_offset = log.written_offset();
            assert_eq!(log.aborted_transactions(0, i64::MAX), expected, "{path:?}");
            let open_at = end_offset - 7;
            assert_eq!(
                log.first_unstable_offset(end_offset),
                Some(open_at),
                "producer 9's transaction is still open"
            );
            end(&log, marker(9, 0, 1, false)).await.expect("abort it");
            let last = log.aborted_transactions(end_offset, i64::MAX);
            assert_eq!(last, vec![aborted(9, open_at, end_offset, end_offset + 1)]);
            log.close().await;
            // Reopened once more: the new entry was persisted at the clean close.
            let log = PartitionLog::open(path.clone(), small_config(1024), LogContext::system())
                .await
                .expect("reopen");
            assert_eq!(log.aborted_transactions(0, i64::MAX).len(), 44);
            assert_eq!(log.first_unstable_offset(i64::MAX), None);
            log.close().await;
        });
    }
}

#[test]
fn a_follower_holds_what_its_leader_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (l, f) = (dir.path().join("leader-0"), dir.path().join("follower-0"));
    run(move || async move {
        let leader = PartitionLog::open(l, small_config(1024), LogContext::system())
            .await
            .expect("open");
        let follower = PartitionLog::open(f.clone(), small_config(1024), LogContext::system())
            .await
            .expect("open");
        let expected = write_history(&leader).await;
        let bytes = read_all(&leader).await;
        let t = follower.append_replicated(&bytes).expect("replicate");
        follower.wait(t, AckLevel::All).await.expect("written");
        let end_offset = leader.written_offset();
        assert_eq!(follower.aborted_transactions(0, i64::MAX), expected);
        assert_eq!(
            follower.first_unstable_offset(end_offset),
            leader.first_unstable_offset(end_offset)
        );
        follower.close().await;
        leader.close().await;
        let follower = PartitionLog::open(f, small_config(1024), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(follower.aborted_transactions(0, i64::MAX), expected);
        follower.close().await;
    });
}

#[test]
fn a_truncation_forgets_the_markers_it_cuts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    let (cut, kept) = run(move || async move {
        let log = PartitionLog::open(p, small_config(1024), LogContext::system())
            .await
            .expect("open");
        let all = write_history(&log).await;
        log.close().await;
        // Cut right at an abort marker in the middle: it and every later one go.
        let victim = all[all.len() / 2];
        (victim.last_offset, all[..all.len() / 2].to_vec())
    });
    PartitionLog::truncate_closed(&KernelFs, &path, cut).expect("truncate");
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1024), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.written_offset(), cut);
        assert_eq!(log.aborted_transactions(0, i64::MAX), kept);
        // The transaction whose marker was cut is open again.
        assert!(log.first_unstable_offset(cut).is_some_and(|f| f < cut));
        log.close().await;
    });
}

/// A transaction opened segments before the end stays open through a follower's cuts:
/// each cut deletes the snapshots past it, and whatever snapshot the next open starts
/// from (an earlier roll's, or none: the whole log) still knows the transaction.
#[test]
fn an_open_transaction_survives_cuts_that_delete_the_newest_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    let (open_at, end_offset) = run(move || async move {
        let log = PartitionLog::open(p, small_config(1024), LogContext::system())
            .await
            .expect("open");
        filler(&log, 0).await;
        let open_at = produce(&log, &txn(7, 0, 0, 2)).await.expect("txn");
        filler(&log, 20).await;
        filler(&log, 40).await;
        assert!(log.segment_count() > 10, "segments rolled");
        let end_offset = log.written_offset();
        log.close().await;
        (open_at, end_offset)
    });
    // Cuts of a few offsets each, as a follower's truncations to its leader's end are.
    for cut in [end_offset - 3, end_offset - 6, end_offset - 9] {
        PartitionLog::truncate_closed(&KernelFs, &path, cut).expect("truncate");
        let path = path.clone();
        run(move || async move {
            let log = PartitionLog::open(path, small_config(1024), LogContext::system())
                .await
                .expect("reopen");
            assert_eq!(
                log.first_unstable_offset(i64::MAX),
                Some(open_at),
                "at {cut}"
            );
            log.close().await;
        });
    }
    // No snapshot at all: the whole log is replayed.
    for entry in std::fs::read_dir(&path).expect("dir") {
        let entry = entry.expect("entry");
        if entry.file_name().to_string_lossy().ends_with(".snapshot") {
            std::fs::remove_file(entry.path()).expect("remove");
        }
    }
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1024), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.first_unstable_offset(i64::MAX), Some(open_at));
        log.close().await;
    });
}

#[test]
fn an_abort_whose_marker_a_crash_lost_leaves_no_entry_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    let end_offset = run(move || async move {
        let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        produce(&log, &txn(7, 0, 0, 2)).await.expect("txn");
        let end_offset = log.written_offset();
        log.close().await;
        end_offset
    });
    // The entry of an abort marker that was queued when a snapshot wrote the index, and
    // then lost with the crash: past the recovered end.
    let phantom = aborted(7, 0, end_offset + 1, end_offset + 2);
    corelog_storage::txn_index::write(&KernelFs, &path, 0, &[phantom]).expect("phantom entry");
    let p = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
            .await
            .expect("reopen");
        assert!(log.aborted_transactions(0, i64::MAX).is_empty());
        // The coordinator's marker comes again, a commit this time, and the offsets the
        // phantom named go to other records: a commit writes no index.
        end(&log, marker(7, 0, 1, true)).await.expect("commit");
        produce(&log, &txn(7, 0, 2, 3)).await.expect("next txn");
        end(&log, marker(7, 0, 1, true)).await.expect("commit");
        log.close().await;
    });
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("reopen");
        assert!(log.written_offset() > end_offset + 2);
        assert_eq!(
            log.aborted_transactions(0, i64::MAX),
            vec![],
            "the lost marker's entry must not come back once the log passes it"
        );
        log.close().await;
    });
}

/// Small segments, compacted at once (no lag), files unlinked at once.
fn compacted_config() -> corelog_storage::LogConfig {
    corelog_storage::LogConfig {
        cleanup: corelog_storage::config::CleanupPolicy {
            delete: false,
            compact: true,
        },
        min_compaction_lag_ms: 0,
        file_delete_delay_ms: 0,
        ..small_config(1024)
    }
}

#[test]
fn compaction_keeps_the_aborted_transactions_of_the_segments_it_merges() {
    use corelog_storage::compaction::cleaner::clean;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let config = compacted_config();
    let c = config.clone();
    let p = path.clone();
    let expected = run(move || async move {
        let log = PartitionLog::open(p, c, LogContext::system())
            .await
            .expect("open");
        let expected = write_history(&log).await;
        let segments = log.segment_count();
        let now = 2_000_000_000_000;
        while clean(&log, 1 << 20, now, i64::MAX, true, None)
            .await
            .expect("clean")
            .is_some()
        {}
        assert!(log.segment_count() < segments, "segments were merged");
        assert_eq!(log.aborted_transactions(0, i64::MAX), expected);
        log.close().await;
        expected
    });
    run(move || async move {
        let log = PartitionLog::open(path, config, LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.aborted_transactions(0, i64::MAX), expected);
        log.close().await;
    });
}

/// One record `key` = `value`, of producer `pid` in a transaction (`Some`) or plain.
fn keyed(txn_of: Option<(i64, i16)>, key: &str, value: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_000);
    if let Some((pid, epoch)) = txn_of {
        b = b.producer(pid, epoch, 0).transactional();
    }
    b.push(&Record {
        key: Some(key.as_bytes()),
        value: Some(value.as_bytes()),
        headers: &[],
        timestamp_delta: 0,
    });
    b.build()
}

async fn coordinator_write(log: &PartitionLog, bytes: &[u8]) -> Result<i64, AppendError> {
    let t = log.append_unsequenced(bytes, 0)?;
    log.wait(t, AckLevel::All).await?;
    Ok(t.base_offset)
}

/// A group coordinator's transactional offset commit (Kafka's `AppendOrigin.COORDINATOR`):
/// no sequence checks, no duplicate detection, the epoch checked; it opens the
/// producer's transaction like a producer's own batch, and a replay at open agrees.
#[test]
fn coordinator_batches_skip_sequences_but_not_the_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        let commit = txn(5, 2, 0, 2);
        assert_eq!(coordinator_write(&log, &commit).await.expect("first"), 0);
        assert_eq!(
            log.first_unstable_offset(2),
            Some(0),
            "the batch opened a txn"
        );
        // The same bytes again are a second write: the coordinator's batches all start
        // at sequence 0, so sequences tell nothing.
        assert_eq!(coordinator_write(&log, &commit).await.expect("second"), 2);
        // A client's batch of the same sequences is still checked as a client's.
        assert!(matches!(
            log.append(&txn(5, 2, 9, 1), 0),
            Err(AppendError::Sequence(SequenceError::OutOfOrder { .. }))
        ));
        // A stale epoch is fenced, and nothing is written.
        assert!(matches!(
            log.append_unsequenced(&txn(5, 1, 0, 1), 0),
            Err(AppendError::Sequence(SequenceError::StaleEpoch {
                current: 2,
                ..
            }))
        ));
        // Outside its open transaction the producer may not write, coordinator or not.
        assert!(matches!(
            log.append_unsequenced(&idem(5, 2, 0, 1), 0),
            Err(AppendError::Sequence(SequenceError::TxnOpen {
                producer_id: 5
            }))
        ));
        assert_eq!(log.written_offset(), 4);
        end(&log, marker(5, 2, 0, true)).await.expect("commit");
        assert_eq!(log.first_unstable_offset(5), None);
        // Another producer's, left open at the close.
        assert_eq!(
            coordinator_write(&log, &txn(6, 0, 0, 1))
                .await
                .expect("open"),
            5
        );
        log.close().await;
    });
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.first_unstable_offset(6), Some(5), "6's is still open");
        assert!(matches!(
            log.append_unsequenced(&txn(5, 1, 0, 1), 0),
            Err(AppendError::Sequence(SequenceError::StaleEpoch { .. }))
        ));
        log.close().await;
    });
}

/// Twenty plain records of distinct keys (`f<from>`…), enough to roll small segments.
async fn filler(log: &PartitionLog, from: usize) {
    for i in from..from + 20 {
        let b = keyed(None, &format!("f{i}"), &"x".repeat(100));
        produce(log, &b).await.expect("filler");
    }
}

/// (offset, key) of every data record readable in `log`, and how many markers.
async fn kept_records(log: &PartitionLog) -> (Vec<(i64, String)>, usize) {
    let all = read_all(log).await;
    let mut out = Vec::new();
    let mut markers = 0;
    for item in corelog_storage::batch::batches(&all) {
        let (h, range) = item.expect("whole batches");
        if h.is_control() {
            markers += 1;
            continue;
        }
        let bytes = all.get(range).expect("in range");
        corelog_storage::batch_filter::for_each_record(bytes, |r| {
            let key = r.key.map(|k| String::from_utf8_lossy(k).into_owned());
            out.push((r.offset, key.unwrap_or_default()));
        })
        .expect("records");
    }
    (out, markers)
}

/// The cleaner and transactions (Kafka's `LogCleaner`, what a replay of a compacted log
/// needs): an aborted record never supersedes a committed one and is removed; nothing
/// at or past the first unstable offset is cleaned, so a transaction still open cannot
/// take its key's committed record with it; a marker stays while a record of its
/// transaction does, and at least `delete.retention.ms`.
#[test]
fn the_cleaner_drops_aborted_records_and_stops_at_open_transactions() {
    use corelog_storage::compaction::cleaner::clean;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let reopen = path.clone();
    let config = compacted_config();
    run(move || async move {
        let log = PartitionLog::open(path, config, LogContext::system())
            .await
            .expect("open");
        let a1 = produce(&log, &keyed(None, "a", "a1")).await.expect("a1");
        let c1 = produce(&log, &keyed(None, "c", "c1")).await.expect("c1");
        let a_aborted = produce(&log, &keyed(Some((1, 0)), "a", "aborted"))
            .await
            .expect("txn");
        end(&log, marker(1, 0, 0, false)).await.expect("abort");
        let b1 = produce(&log, &keyed(None, "b", "b1")).await.expect("b1");
        let b_committed = produce(&log, &keyed(Some((2, 0)), "b", "committed"))
            .await
            .expect("txn");
        end(&log, marker(2, 0, 0, true)).await.expect("commit");
        filler(&log, 0).await;
        // Producer 3 writes key c and leaves its transaction open; more data follows,
        // sealing the segment that holds it.
        let c_open = produce(&log, &keyed(Some((3, 0)), "c", "open"))
            .await
            .expect("txn");
        filler(&log, 100).await;
        assert!(log.segment_count() > 3, "segments rolled");
        let now = 2_000_000_000_000;
        let mut passes = 0;
        while clean(&log, 1 << 20, now, i64::MAX, true, None)
            .await
            .expect("clean")
            .is_some()
        {
            passes += 1;
            assert!(passes < 10, "passes end");
        }
        let (kept, markers) = kept_records(&log).await;
        let has = |offset: i64| kept.iter().any(|(o, _)| *o == offset);
        assert!(has(a1), "the aborted record did not supersede a1: {kept:?}");
        assert!(!has(a_aborted), "the aborted record is removed");
        assert!(!has(b1), "the committed transactional record superseded b1");
        assert!(has(b_committed));
        assert!(
            has(c1),
            "nothing past the open transaction was cleaned: {kept:?}"
        );
        assert!(has(c_open));
        assert_eq!(markers, 2, "markers are kept");
        // The open transaction aborts: its record goes at the next pass, c1 stays.
        end(&log, marker(3, 0, 0, false)).await.expect("abort");
        filler(&log, 200).await;
        while clean(&log, 1 << 20, now, i64::MAX, true, None)
            .await
            .expect("clean")
            .is_some()
        {}
        let (kept, markers) = kept_records(&log).await;
        let has = |offset: i64| kept.iter().any(|(o, _)| *o == offset);
        assert!(has(c1), "{kept:?}");
        assert!(!has(c_open));
        assert!(has(a1) && has(b_committed));
        assert_eq!(markers, 3);
        assert_eq!(
            log.aborted_transactions(0, i64::MAX).len(),
            2,
            "entries stay"
        );
        // Once `delete.retention.ms` has passed, the markers whose transactions have no
        // record left go (both aborts'); the commit's marker stays with b_committed.
        let later = now + log.config().delete_retention_ms + 1;
        while clean(&log, 1 << 20, later, i64::MAX, true, None)
            .await
            .expect("clean")
            .is_some()
        {}
        let (kept, markers) = kept_records(&log).await;
        let has = |offset: i64| kept.iter().any(|(o, _)| *o == offset);
        assert!(has(a1) && has(b_committed) && has(c1), "{kept:?}");
        assert_eq!(
            markers, 1,
            "only the marker of a transaction with a record left"
        );
        log.close().await;
    });
    // A replay of the cleaned log finds no transaction left open.
    run(move || async move {
        let log = PartitionLog::open(reopen, compacted_config(), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.first_unstable_offset(i64::MAX), None);
        log.close().await;
    });
}

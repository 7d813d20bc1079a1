//! Truncating a closed log's directory (`PartitionLog::truncate_closed`) and opening it
//! again: inside a middle segment, at a segment boundary, inside a batch, inside the
//! active segment, at or below the log start (a reset to an empty log), and at or past
//! the end (nothing changes); then appends and another restart.

mod common;

use common::*;
use corelog_storage::fs::KernelFs;
use corelog_storage::offset_index::OffsetIndex;
use corelog_storage::time_index::TimeIndex;
use corelog_storage::{AckLevel, LogContext, PartitionLog, TruncateOutcome};
use std::path::{Path, PathBuf};
use std::rc::Rc;

const SEGMENT_BYTES: u64 = 1024;
const PID: i64 = 7;

/// One batch the fixture appended: its bytes as the producer sent them, and where they
/// went.
#[derive(Clone)]
struct Sent {
    bytes: Vec<u8>,
    base: i64,
    next: i64,
    /// Its largest record timestamp (they grow with every batch).
    max_ts: i64,
    idempotent: bool,
}

async fn open(path: &Path) -> Rc<PartitionLog> {
    PartitionLog::open(
        path.to_path_buf(),
        small_config(SEGMENT_BYTES),
        LogContext::system(),
    )
    .await
    .expect("open")
}

async fn produce(log: &PartitionLog, bytes: &[u8]) -> (i64, i64) {
    let t = log.append(bytes, 0).expect("append");
    log.wait(t, AckLevel::All).await.expect("ack");
    (t.base_offset, t.next_offset)
}

/// Idempotent and plain batches, alternating, over several segments; closed.
fn write_log(path: &Path) -> Vec<Sent> {
    let p = path.to_path_buf();
    run(move || async move {
        let log = open(&p).await;
        let mut sent = Vec::new();
        let mut seq = 0;
        for i in 0..48u32 {
            let ts = 1_000_000 + i64::from(i) * 100;
            let idempotent = i % 2 == 0;
            let count = 1 + i as usize % 3;
            let bytes = if idempotent {
                seq += count as i32;
                idem_at(PID, 0, seq - count as i32, count, ts)
            } else {
                batch(i, count, 30, ts)
            };
            let (base, next) = produce(&log, &bytes).await;
            sent.push(Sent {
                bytes,
                base,
                next,
                max_ts: ts + count as i64 - 1,
                idempotent,
            });
        }
        assert!(log.segment_count() >= 5, "several segments");
        log.close().await;
        sent
    })
}

/// The batches of the log below `offset`, as read before the truncation.
fn read_below(path: &Path, offset: i64) -> Vec<u8> {
    let p = path.to_path_buf();
    run(move || async move {
        let log = open(&p).await;
        let all = read_all(&log).await;
        log.close().await;
        let mut end = 0;
        for item in corelog_storage::batch::batches(&all) {
            let (h, range) = item.expect("whole batches");
            if h.last_offset() >= offset {
                break;
            }
            end = range.end;
        }
        all[..end].to_vec()
    })
}

/// Base offsets of the segments in `dir`.
fn segment_bases(dir: &Path) -> Vec<i64> {
    files_with(dir, ".log")
}

/// Offsets named by the files of `dir` ending in `suffix`, ascending.
fn files_with(dir: &Path, suffix: &str) -> Vec<i64> {
    let mut out: Vec<i64> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            name.strip_suffix(suffix)?.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// Every file of `dir` with its bytes.
fn snapshot_dir(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| {
            let p = e.expect("entry").path();
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    out
}

fn truncate(path: &Path, offset: i64) -> TruncateOutcome {
    PartitionLog::truncate_closed(&KernelFs, path, offset).expect("truncate")
}

/// On disk, before the log opens again: no segment past `end`, no producer snapshot past
/// it, and no index entry of a batch that went.
fn check_files(path: &Path, end: i64) {
    let bases = segment_bases(path);
    assert!(bases.iter().all(|b| *b <= end), "segments {bases:?}");
    assert!(files_with(path, ".snapshot").iter().all(|s| *s <= end));
    for base in &bases {
        let bytes = std::fs::read(path.join(format!("{base:020}.timeindex"))).unwrap_or_default();
        let index = TimeIndex::decode(*base, &bytes, i64::MAX);
        assert!(
            index
                .entries()
                .iter()
                .all(|e| base + i64::from(e.relative_offset) < end),
            "time index of {base} names a batch that went"
        );
        let log_len = std::fs::metadata(path.join(format!("{base:020}.log")))
            .expect("log")
            .len();
        let bytes = std::fs::read(path.join(format!("{base:020}.index"))).unwrap_or_default();
        let index = OffsetIndex::decode(*base, &bytes, u64::MAX);
        assert!(
            index
                .entries()
                .iter()
                .all(|e| u64::from(e.position) < log_len
                    && base + i64::from(e.relative_offset) < end),
            "offset index of {base} names a batch that went"
        );
    }
}

/// What every truncation to `end` must leave: the log ends there, reads below it are
/// what they were, nothing at or past it is read or found by time, producers forgot the
/// batches that went, and appends and a restart go on from there.
fn check_truncated(path: &Path, end: i64, before: Vec<u8>, sent: &[Sent]) {
    check_files(path, end);
    let removed: Vec<Sent> = sent.iter().filter(|s| s.next > end).cloned().collect();
    let p = path.to_path_buf();
    run(move || async move {
        let log = open(&p).await;
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(log.written_offset(), end);
        assert_eq!(read_all(&log).await, before, "what stays reads as before");
        let at_end = log.read(end, 1 << 20, i64::MAX).await.expect("read at end");
        assert!(at_end.records.is_empty());
        if let Some(first_gone) = removed.first() {
            assert_eq!(
                log.offset_for_timestamp(first_gone.max_ts)
                    .await
                    .expect("by time"),
                None,
                "no removed timestamp is found"
            );
        }
        // The first idempotent batch that went is new to the producer state (its
        // sequence follows the kept ones): written again, not answered as a duplicate.
        let mut next = end;
        if let Some(gone) = removed.iter().find(|s| s.idempotent) {
            let (base, new_next) = produce(&log, &gone.bytes).await;
            assert_eq!(base, end, "the next append starts at the new end");
            assert_eq!(new_next, end + gone.next - gone.base, "not a duplicate");
            next = new_next;
        }
        let (base, after) = produce(&log, &batch(999, 2, 30, 2_000_000)).await;
        assert_eq!(base, next);
        let reread = read_all(&log).await;
        log.close().await;
        // And the truncated, appended log opens again cleanly.
        let log = open(&p).await;
        assert_eq!(log.log_end_offset(), after);
        assert_eq!(read_all(&log).await, reread);
        assert_eq!(produce(&log, &batch(1000, 1, 30, 2_000_001)).await.0, after);
        log.close().await;
    });
}

#[test]
fn truncating_inside_a_middle_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let sent = write_log(&path);
    let bases = segment_bases(&path);
    let (middle, next) = (bases[bases.len() / 2], bases[bases.len() / 2 + 1]);
    // A batch boundary strictly inside the middle segment.
    let offset = sent
        .iter()
        .map(|s| s.base)
        .find(|b| *b > middle && *b < next)
        .expect("a batch inside the middle segment");
    let before = read_below(&path, offset);
    let outcome = truncate(&path, offset);
    assert_eq!(
        outcome,
        TruncateOutcome {
            log_end_offset: offset,
            truncated: true,
            reset: false,
            segments_removed: bases.iter().filter(|b| **b >= offset).count(),
        }
    );
    // The cut segment stays sealed; an empty active segment follows it at the cut.
    assert_eq!(
        segment_bases(&path),
        bases
            .iter()
            .copied()
            .filter(|b| *b < offset)
            .chain([offset])
            .collect::<Vec<_>>()
    );
    check_truncated(&path, offset, before, &sent);
}

#[test]
fn truncating_at_a_segment_boundary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let sent = write_log(&path);
    let bases = segment_bases(&path);
    let offset = bases[2];
    let before = read_below(&path, offset);
    let outcome = truncate(&path, offset);
    assert_eq!(outcome.log_end_offset, offset);
    assert_eq!(outcome.segments_removed, bases.len() - 2);
    assert_eq!(segment_bases(&path), bases[..3].to_vec());
    check_truncated(&path, offset, before, &sent);
}

#[test]
fn a_batch_straddling_the_offset_goes_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let sent = write_log(&path);
    let bases = segment_bases(&path);
    let straddling = sent
        .iter()
        .find(|s| s.base > bases[1] && s.next - s.base >= 2)
        .expect("a batch of several records")
        .clone();
    let before = read_below(&path, straddling.base);
    let outcome = truncate(&path, straddling.base + 1);
    assert_eq!(outcome.log_end_offset, straddling.base);
    assert!(outcome.truncated && !outcome.reset);
    check_truncated(&path, straddling.base, before, &sent);
}

#[test]
fn truncating_inside_the_active_segment_cuts_it_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let sent = write_log(&path);
    let bases = segment_bases(&path);
    let last = *bases.last().expect("segments");
    let offset = sent
        .iter()
        .map(|s| s.base)
        .find(|b| *b > last)
        .expect("two batches in the active segment");
    let before = read_below(&path, offset);
    let outcome = truncate(&path, offset);
    assert_eq!(outcome.log_end_offset, offset);
    assert_eq!(outcome.segments_removed, 0);
    assert_eq!(segment_bases(&path), bases);
    check_files(&path, offset);
    // The snapshot of the last roll is below the cut: the producer state is rebuilt
    // exactly, and a retry of the last idempotent batch kept is still recognised.
    let last_kept = sent
        .iter()
        .rev()
        .find(|s| s.idempotent && s.next <= offset)
        .expect("an idempotent batch kept")
        .clone();
    let p = path.clone();
    run(move || async move {
        let log = open(&p).await;
        let retry = log.append(&last_kept.bytes, 0).expect("duplicate");
        assert_eq!(retry.base_offset, last_kept.base);
        assert_eq!(log.log_end_offset(), offset, "nothing written");
        log.close().await;
    });
    check_truncated(&path, offset, before, &sent);
}

#[test]
fn truncating_at_or_past_the_end_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let sent = write_log(&path);
    let end = sent.last().expect("batches").next;
    let files = snapshot_dir(&path);
    for offset in [end, end + 1, i64::MAX] {
        let outcome = truncate(&path, offset);
        assert_eq!(
            outcome,
            TruncateOutcome {
                log_end_offset: end,
                truncated: false,
                reset: false,
                segments_removed: 0,
            }
        );
        assert_eq!(snapshot_dir(&path), files, "no file changed");
    }
    // An empty log, too: a fresh one, and one that was just reset.
    let empty = dir.path().join("e-0");
    let e = empty.clone();
    run(move || async move { open(&e).await.close().await });
    assert!(!truncate(&empty, 0).truncated);
    assert_eq!(truncate(&empty, 3).log_end_offset, 0);
    assert!(truncate(&path, 0).reset);
    assert_eq!(segment_bases(&path), vec![0]);
    assert_eq!(
        std::fs::metadata(path.join(format!("{:020}.log", 0)))
            .expect("log")
            .len(),
        0
    );
    assert!(!truncate(&path, 0).truncated);
    assert!(PartitionLog::truncate_closed(&KernelFs, &path, -1).is_err());
}

#[test]
fn truncating_at_or_below_the_log_start_resets_the_log_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let sent = write_log(&path);
    let bases = segment_bases(&path);
    // Move the log start into the third segment, past its second batch; the first two
    // segments go.
    let inside_third: Vec<i64> = sent
        .iter()
        .map(|s| s.base)
        .filter(|b| *b > bases[2] && *b < bases[3])
        .collect();
    let (inside, start) = (inside_third[0], inside_third[1]);
    let p = path.clone();
    run(move || async move {
        let log = open(&p).await;
        assert_eq!(
            log.delete_records(start, i64::MAX).await.expect("delete"),
            start
        );
        log.close().await;
    });
    assert_eq!(segment_bases(&path)[0], bases[2]);
    // Between the first segment's base and the log start: the cut is made as anywhere
    // else, and the start comes down to the new end.
    let outcome = truncate(&path, inside);
    assert!(outcome.truncated && !outcome.reset);
    let p = path.clone();
    run(move || async move {
        let log = open(&p).await;
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (inside, inside)
        );
        log.close().await;
    });
    // At the first segment's base, and below it: reset to empty at the offset.
    for offset in [bases[2], bases[1]] {
        let segments = segment_bases(&path).len();
        let outcome = truncate(&path, offset);
        assert_eq!(
            outcome,
            TruncateOutcome {
                log_end_offset: offset,
                truncated: true,
                reset: true,
                segments_removed: segments,
            }
        );
        assert_eq!(segment_bases(&path), vec![offset]);
        assert!(
            files_with(&path, ".snapshot").is_empty(),
            "producers forgotten"
        );
        assert_eq!(
            corelog_storage::checkpoint::read(&KernelFs, &path, "log-start-offset")
                .expect("checkpoint"),
            Some(offset)
        );
        let p = path.clone();
        let first_idem = sent
            .iter()
            .find(|s| s.idempotent)
            .expect("idempotent")
            .clone();
        run(move || async move {
            let log = open(&p).await;
            assert_eq!(
                (log.log_start_offset(), log.log_end_offset()),
                (offset, offset)
            );
            assert_eq!(log.producer_count(), 0);
            assert!(read_all(&log).await.is_empty());
            // Any sequence is new to a log that forgot its producers.
            assert_eq!(produce(&log, &first_idem.bytes).await.0, offset);
            log.close().await;
        });
        let again: PathBuf = path.clone();
        run(move || async move {
            let log = open(&again).await;
            assert_eq!(
                log.log_end_offset(),
                offset + first_idem.next - first_idem.base
            );
            log.close().await;
        });
    }
}

/// A follower below its leader's log start: everything goes, and the log starts (empty)
/// at the leader's start, past its old end; a replicated batch from there is taken, and
/// the whole survives a restart.
#[test]
fn resetting_past_the_end_starts_an_empty_log_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let sent = write_log(&path);
    let end = sent.last().map_or(0, |s| s.next);
    let start = end + 1_000;
    let segments = segment_bases(&path).len();
    let outcome = PartitionLog::reset_closed(&KernelFs, &path, start).expect("reset");
    assert_eq!(
        outcome,
        TruncateOutcome {
            log_end_offset: start,
            truncated: true,
            reset: true,
            segments_removed: segments,
        }
    );
    assert_eq!(segment_bases(&path), vec![start]);
    assert!(
        files_with(&path, ".snapshot").is_empty(),
        "producers forgotten"
    );
    let p = path.clone();
    run(move || async move {
        let log = open(&p).await;
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (start, start)
        );
        // The leader's batch at its log start, as it wrote it.
        let mut b = batch(1, 2, 30, 5_000_000);
        corelog_storage::batch::set_base_offset(&mut b, start);
        let t = log.append_replicated(&b).expect("replicated");
        log.wait(t, AckLevel::All).await.expect("ack");
        assert_eq!(log.log_end_offset(), start + 2);
        log.close().await;
        let log = open(&p).await;
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (start, start + 2)
        );
        log.close().await;
    });
    // An empty directory (nothing fetched yet) resets too.
    let empty = dir.path().join("e-0");
    std::fs::create_dir_all(&empty).expect("dir");
    PartitionLog::reset_closed(&KernelFs, &empty, 42).expect("reset");
    let e = empty.clone();
    run(move || async move {
        let log = open(&e).await;
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (42, 42));
        log.close().await;
    });
}

//! Partition log on real files: append/read, segment rolls, restart, and recovery from a
//! torn tail and a damaged index.

mod common;

use common::*;
use corelog_storage::batch::{self};
use corelog_storage::LogContext;
use corelog_storage::{AckLevel, PartitionLog, ReadError};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

async fn append_acked(log: &PartitionLog, bytes: &[u8]) -> i64 {
    let t = log.append(bytes, 0).expect("append");
    log.wait(t, AckLevel::All).await.expect("ack");
    t.base_offset
}

fn seg_files(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn append_read_and_fetch_from_inside_a_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        assert_eq!(append_acked(&log, &batch(1, 5, 10, 1000)).await, 0);
        assert_eq!(append_acked(&log, &batch(2, 3, 10, 2000)).await, 5);
        assert_eq!(log.written_offset(), 8);
        // Offset 6 is inside the second batch: the whole batch comes back.
        let r = log.read(6, 1 << 20, i64::MAX).await.expect("read");
        let h = headers(&r.records);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].base_offset, 5);
        assert_eq!(h[0].last_offset(), 7);
        // Served bytes are valid batches (pair assertion with the write path).
        batch::validate(&r.records, usize::MAX).expect("valid batch");
        // At the high watermark: empty; beyond: out of range.
        assert!(log
            .read(8, 1024, i64::MAX)
            .await
            .expect("read")
            .records
            .is_empty());
        assert!(matches!(
            log.read(9, 1024, i64::MAX).await,
            Err(ReadError::OffsetOutOfRange { .. })
        ));
        log.close().await;
    });
}

#[test]
fn rolls_segments_and_survives_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p2 = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p2.clone(), small_config(8192), LogContext::system())
            .await
            .expect("open");
        for i in 0..40u32 {
            append_acked(&log, &batch(i, 4, 400, 10_000 + i64::from(i) * 10)).await;
        }
        assert!(log.segment_count() > 3, "small segments must roll");
        log.close().await;
        let log = PartitionLog::open(p2, small_config(8192), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.written_offset(), 160);
        // Every offset reads back as the batch that contains it, across segments.
        let mut offset = 0;
        while offset < 160 {
            let r = log.read(offset, 1, i64::MAX).await.expect("read");
            let h = headers(&r.records);
            assert_eq!(h.len(), 1, "max_bytes 1 still returns one whole batch");
            assert_eq!(h[0].base_offset, offset);
            offset = h[0].last_offset() + 1;
        }
        // By timestamp: batch i holds offsets 4i..4i+3 stamped 10_000 + 10i + 0..3.
        assert_eq!(
            log.offset_for_timestamp(10_052).await.expect("ts"),
            Some((22, 10_052))
        );
        assert_eq!(
            log.offset_for_timestamp(10_000).await.expect("ts"),
            Some((0, 10_000))
        );
        assert_eq!(log.offset_for_timestamp(99_999).await.expect("ts"), None);
        // Appends continue after restart with the next offset.
        assert_eq!(append_acked(&log, &batch(99, 1, 10, 50_000)).await, 160);
        log.close().await;
    });
    assert!(seg_files(&path, "log").len() > 3);
}

#[test]
fn torn_tail_is_truncated_and_acknowledged_data_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        for i in 0..10u32 {
            append_acked(&log, &batch(i, 3, 50, 1000)).await;
        }
        log.close().await;
    });
    // Simulate a crash mid-write: a partial batch after the valid end, then garbage.
    let log_file = seg_files(&path, "log").pop().expect("a segment");
    let valid_len = std::fs::metadata(&log_file).expect("meta").len();
    let next = batch(77, 3, 50, 1000);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&log_file)
        .expect("open");
    f.seek(SeekFrom::Start(valid_len)).expect("seek");
    f.write_all(&next[..next.len() / 2]).expect("write");
    f.write_all(&[0xAB; 333]).expect("write");
    f.sync_all().expect("sync");
    drop(f);
    let p = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(
            log.written_offset(),
            30,
            "the torn batch is not part of the log"
        );
        let r = log.read(27, 1 << 20, i64::MAX).await.expect("read");
        assert_eq!(headers(&r.records)[0].base_offset, 27);
        assert_eq!(append_acked(&log, &batch(8, 2, 50, 1000)).await, 30);
        let r = log.read(30, 1 << 20, i64::MAX).await.expect("read");
        assert_eq!(headers(&r.records)[0].base_offset, 30);
        log.close().await;
    });
    assert_eq!(
        std::fs::metadata(&log_file).expect("meta").len(),
        valid_len + batch(8, 2, 50, 1000).len() as u64,
        "the garbage is gone and the new batch follows the valid end"
    );
}

#[test]
fn corrupt_crc_in_the_tail_ends_the_log_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        for i in 0..4u32 {
            append_acked(&log, &batch(i, 2, 20, 1000)).await;
        }
        log.close().await;
    });
    let log_file = seg_files(&path, "log").pop().expect("a segment");
    let len = std::fs::metadata(&log_file).expect("meta").len();
    let one = batch(0, 2, 20, 1000).len() as u64;
    // Flip a byte in the last batch's records (covered by the CRC).
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&log_file)
        .expect("open");
    f.seek(SeekFrom::Start(len - 5)).expect("seek");
    f.write_all(&[0x5A]).expect("write");
    drop(f);
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.written_offset(), 6);
        log.close().await;
    });
    assert_eq!(std::fs::metadata(&log_file).expect("meta").len(), len - one);
}

#[test]
fn truncated_or_garbage_index_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        for i in 0..50u32 {
            append_acked(&log, &batch(i, 2, 100, 1000)).await;
        }
        log.close().await;
    });
    let index = seg_files(&path, "index").pop().expect("index");
    let full = std::fs::read(&index).expect("read");
    assert!(full.len() >= 16, "the index has entries");
    for damage in 0..3 {
        match damage {
            // Cut mid-entry.
            0 => std::fs::write(&index, &full[..full.len() / 2 + 3]).expect("write"),
            // An entry pointing past the end of the log.
            1 => {
                let mut bad = full.clone();
                bad.extend_from_slice(&[0, 0, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff]);
                std::fs::write(&index, &bad).expect("write");
            }
            // Gone entirely.
            _ => std::fs::remove_file(&index).expect("rm"),
        }
        let p = path.clone();
        run(move || async move {
            let log = PartitionLog::open(p, small_config(1 << 20), LogContext::system())
                .await
                .expect("reopen");
            assert_eq!(log.written_offset(), 100);
            for offset in [0, 1, 37, 98, 99] {
                let r = log.read(offset, 1, i64::MAX).await.expect("read");
                let h = headers(&r.records);
                assert!(h[0].base_offset <= offset && offset <= h[0].last_offset());
            }
            log.close().await;
        });
    }
}

#[test]
fn one_sync_serves_many_waiting_produces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        let tickets: Vec<_> = (0..200u32)
            .map(|i| log.append(&batch(i, 1, 100, 1000), 0).expect("append"))
            .collect();
        let waits = tickets.into_iter().map(|t| log.wait(t, AckLevel::All));
        for r in futures::future::join_all(waits).await {
            r.expect("acknowledged");
        }
        assert_eq!(log.written_offset(), 200);
        let syncs = log.sync_count();
        assert!(syncs >= 1, "acks=all waited for at least one fdatasync");
        assert!(syncs <= 10, "group commit: {syncs} syncs for 200 produces");
        // acks=1 never needs a sync of its own.
        let before = log.sync_count();
        let t = log.append(&batch(999, 1, 100, 1000), 0).expect("append");
        log.wait(t, AckLevel::Leader).await.expect("ack");
        assert_eq!(log.sync_count(), before);
        log.close().await;
    });
}

#[test]
fn rolls_by_age() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = small_config(1 << 30);
        config.segment_ms = 50;
        let log = PartitionLog::open(path, config, LogContext::system())
            .await
            .expect("open");
        append_acked(&log, &batch(1, 2, 10, 1000)).await;
        assert_eq!(log.segment_count(), 1);
        glommio::timer::sleep(std::time::Duration::from_millis(80)).await;
        assert_eq!(append_acked(&log, &batch(2, 2, 10, 1000)).await, 2);
        assert_eq!(
            log.segment_count(),
            2,
            "an old active segment rolls on the next append"
        );
        let r = log.read(0, 1 << 20, i64::MAX).await.expect("read");
        assert_eq!(headers(&r.records)[0].base_offset, 0);
        log.close().await;
    });
}

/// Copies the files of a log that is open: what a SIGKILL would leave behind.
fn crash_image(live: &Path, image: &Path) {
    std::fs::create_dir_all(image).expect("mkdir");
    for e in std::fs::read_dir(live).expect("dir") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, image.join(p.file_name().expect("name"))).expect("copy");
    }
}

/// A copy of the files taken while the log is open is what a SIGKILL leaves behind: the
/// active segment preallocated far past its data, index entries maybe not yet written.
#[test]
fn crash_image_with_preallocated_segment_recovers_every_acknowledged_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let live = dir.path().join("t-0");
    let image = dir.path().join("image-0");
    let (l, i) = (live.clone(), image.clone());
    run(move || async move {
        let log = PartitionLog::open(l.clone(), small_config(1 << 30), LogContext::system())
            .await
            .expect("open");
        for n in 0..30u32 {
            append_acked(&log, &batch(n, 3, 200, 1000)).await;
        }
        // Copy while open: no close, no seal, no truncation.
        crash_image(&l, &i);
        log.close().await;
    });
    let seg = seg_files(&image, "log").pop().expect("segment");
    let len = std::fs::metadata(&seg).expect("meta").len();
    assert!(
        len >= corelog_storage::partition_log::PREALLOCATE_INITIAL_BYTES,
        "the active segment is preallocated past its data ({len} bytes)"
    );
    run(move || async move {
        let log = PartitionLog::open(image, small_config(1 << 30), LogContext::system())
            .await
            .expect("recover");
        assert_eq!(log.written_offset(), 90);
        let r = log.read(88, 1 << 20, i64::MAX).await.expect("read");
        assert_eq!(headers(&r.records)[0].base_offset, 87);
        assert_eq!(append_acked(&log, &batch(99, 1, 10, 1000)).await, 90);
        log.close().await;
    });
}

#[test]
fn deleting_old_segments_moves_the_log_start_and_survives_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let log = PartitionLog::open(p.clone(), small_config(8192), LogContext::system())
            .await
            .expect("open");
        for i in 0..40u32 {
            append_acked(&log, &batch(i, 4, 400, 1000)).await;
        }
        let segments = log.segment_count();
        assert!(segments > 3);
        let deleted = log.delete_segments_before(100).await;
        assert!(
            deleted >= 1 && deleted < segments,
            "only whole sealed segments below 100 go"
        );
        let start = log.log_start_offset();
        assert!(start > 0 && start <= 100, "log start {start}");
        assert!(matches!(
            log.read(start - 1, 1024, i64::MAX).await,
            Err(ReadError::OffsetOutOfRange { .. })
        ));
        let r = log
            .read(start, 1024, i64::MAX)
            .await
            .expect("read at the new start");
        assert_eq!(headers(&r.records)[0].base_offset, start);
        // The active segment is never deleted, whatever the offset.
        log.delete_segments_before(i64::MAX).await;
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.written_offset(), 160);
        log.close().await;
        let log = PartitionLog::open(p, small_config(8192), LogContext::system())
            .await
            .expect("reopen");
        assert_eq!(log.written_offset(), 160);
        assert!(log.log_start_offset() > 100);
        log.close().await;
    });
}

/// A compressed batch may claim up to 2^31 records (its records are not walked), so a
/// few of them move offsets by more than a 32-bit relative index entry can hold: the log
/// must roll instead of panicking, and recover the same way.
#[test]
fn huge_record_counts_roll_segments_instead_of_overflowing_the_index() {
    fn fake_compressed(count: i32) -> Vec<u8> {
        use corelog_storage::batch::{layout, write_crc, write_field};
        let mut b = batch(1, 1, 10, 1000);
        write_field(&mut b, layout::ATTRIBUTES, 1i16.to_be_bytes()); // gzip
        write_field(&mut b, layout::LAST_OFFSET_DELTA, (count - 1).to_be_bytes());
        write_field(&mut b, layout::RECORD_COUNT, count.to_be_bytes());
        write_crc(&mut b);
        b
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let mut config = small_config(1 << 20);
        config.index_interval_bytes = 1;
        let log = PartitionLog::open(p.clone(), config.clone(), LogContext::system())
            .await
            .expect("open");
        for _ in 0..4 {
            append_acked(&log, &fake_compressed(i32::MAX)).await;
        }
        let end = 4 * i64::from(i32::MAX);
        assert_eq!(log.written_offset(), end);
        assert!(
            log.segment_count() >= 2,
            "rolled before relative offsets overflowed"
        );
        log.close().await;
        let log = PartitionLog::open(p, config, LogContext::system())
            .await
            .expect("recover");
        assert_eq!(log.written_offset(), end);
        log.close().await;
    });
}

/// Index entries are written in rounds of their own, not with each log write: right
/// after a burst of small batches the index files on disk lag the log, a crash image
/// taken then recovers every batch and rebuilds the entries, and an idle log writes them
/// within about a second.
#[test]
fn index_entries_are_written_in_rounds_and_rebuilt_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let live = dir.path().join("t-0");
    let image = dir.path().join("image-0");
    let (l, i) = (live.clone(), image.clone());
    run(move || async move {
        let log = PartitionLog::open(l.clone(), small_config(1 << 30), LogContext::system())
            .await
            .expect("open");
        for n in 0..30u32 {
            append_acked(&log, &batch(n, 3, 200, 1000 + i64::from(n))).await;
        }
        let index = seg_files(&l, "index").pop().expect("index");
        let time_index = seg_files(&l, "timeindex").pop().expect("time index");
        assert_eq!(
            std::fs::metadata(&index).expect("meta").len(),
            0,
            "not yet due"
        );
        assert_eq!(std::fs::metadata(&time_index).expect("meta").len(), 0);
        crash_image(&l, &i);
        // Idle: the pending entries are written about a second later.
        glommio::timer::sleep(std::time::Duration::from_millis(1500)).await;
        assert!(std::fs::metadata(&index).expect("meta").len() > 0);
        assert!(std::fs::metadata(&time_index).expect("meta").len() > 0);
        log.close().await;
    });
    run(move || async move {
        let log = PartitionLog::open(image.clone(), small_config(1 << 30), LogContext::system())
            .await
            .expect("recover");
        assert_eq!(log.written_offset(), 90);
        for at in [0, 31, 47, 89] {
            let r = log.read(at, 1, i64::MAX).await.expect("read");
            let h = headers(&r.records);
            assert_eq!(h[0].base_offset, at - at % 3, "the batch holding {at}");
        }
        // By time, through the rebuilt time index.
        let found = log.offset_for_timestamp(1020).await.expect("by time");
        assert_eq!(found.map(|f| f.0), Some(56), "batch 18 holds 1018..=1020");
        let index = seg_files(&image, "index").pop().expect("index");
        assert!(
            std::fs::metadata(&index).expect("meta").len() > 0,
            "rebuilt at open"
        );
        log.close().await;
    });
}

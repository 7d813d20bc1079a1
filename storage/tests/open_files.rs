//! Segment files are open only while they are used: many logs with many segments share a
//! small cache of descriptors, every offset still reads back (before and after a reopen),
//! and what stays open is bounded by the cache, not by the logs or segments that exist.

mod common;

use common::*;
use corelog_storage::file_cache::MIN_CAPACITY;
use corelog_storage::{AckLevel, FileCache, LogConfig, LogContext, PartitionLog};
use std::rc::Rc;

const LOGS: usize = 30;
const BATCHES: u32 = 24;

fn config() -> LogConfig {
    LogConfig {
        // A few batches per segment, so each log has several sealed segments.
        segment_bytes: 4096,
        // Every read goes to the files.
        tail_cache_bytes: 0,
        ..small_config(4096)
    }
}

fn context(cache: &Rc<FileCache>) -> LogContext {
    LogContext {
        files: cache.clone(),
        ..LogContext::system()
    }
}

/// Reads every offset of `log` from the start, one fetch at a time.
async fn read_all(log: &PartitionLog) -> Vec<i64> {
    let mut offsets = Vec::new();
    let mut at = 0;
    while at < log.written_offset() {
        let out = log.read(at, 1500, i64::MAX).await.expect("read");
        let hs = headers(&out.records);
        assert!(!hs.is_empty(), "offset {at} reads something");
        for h in hs {
            offsets.extend(h.base_offset..=h.last_offset());
            at = h.last_offset() + 1;
        }
    }
    offsets.dedup();
    offsets
}

#[test]
fn many_logs_share_a_bounded_set_of_descriptors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let before = open_descriptors();
        let cache = FileCache::new(MIN_CAPACITY);
        let mut logs = Vec::new();
        for i in 0..LOGS {
            let log = PartitionLog::open(root.join(format!("t-{i}")), config(), context(&cache))
                .await
                .expect("open");
            logs.push(log);
        }
        for n in 0..BATCHES {
            for log in &logs {
                let t = log.append(&batch(n, 3, 300, 1000), 0).expect("append");
                log.wait(t, AckLevel::All).await.expect("acked");
            }
        }
        let want: Vec<i64> = (0..i64::from(BATCHES) * 3).collect();
        for log in &logs {
            assert!(log.segment_count() > 3, "several segments per log");
            assert_eq!(read_all(log).await, want);
        }
        let stats = cache.stats();
        assert!(stats.open <= MIN_CAPACITY, "{stats:?}");
        assert!(stats.evictions > 0, "{stats:?}");
        let segments: usize = logs.iter().map(|l| l.segment_count()).sum();
        // Closed descriptors are released by the reactor's next cycle.
        glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        let open_now = open_descriptors().saturating_sub(before);
        assert!(
            open_now <= MIN_CAPACITY + 4,
            "{open_now} descriptors open for {LOGS} logs of {segments} segments (3 files each)"
        );
        for log in &logs {
            log.close().await;
        }
        drop(logs);

        // Reopened: sealed segments are not opened until read, and read back whole.
        let cache = FileCache::new(MIN_CAPACITY);
        let mut logs = Vec::new();
        for i in 0..LOGS {
            let log = PartitionLog::open(root.join(format!("t-{i}")), config(), context(&cache))
                .await
                .expect("reopen");
            logs.push(log);
        }
        assert!(cache.stats().open <= MIN_CAPACITY);
        for log in &logs {
            assert_eq!(read_all(log).await, want);
            let t = log
                .append(&batch(99, 1, 10, 1000), 0)
                .expect("append after reopen");
            log.wait(t, AckLevel::All).await.expect("acked");
        }
        for log in &logs {
            log.close().await;
        }
    });
}

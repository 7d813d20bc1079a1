//! Preallocation follows what a segment writes: an idle or one-message partition reserves
//! at most 1 MiB, a busy one doubles its reservation as it grows, never more than its step
//! beyond what is written.

mod common;

use common::*;
use corelog_storage::partition_log::{PREALLOCATE_INITIAL_BYTES, PREALLOCATE_STEP_BYTES};
use corelog_storage::{AckLevel, LogConfig, LogContext, PartitionLog};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// (file size, bytes the filesystem allocated) of the active segment.
fn sizes(dir: &Path) -> (u64, u64) {
    let m = std::fs::metadata(dir.join("00000000000000000000.log")).expect("segment");
    (m.len(), m.blocks() * 512)
}

#[test]
fn reservations_grow_with_the_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p-0");
    run(move || async move {
        let config = LogConfig {
            segment_bytes: 1 << 30,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(path.clone(), config, LogContext::system())
            .await
            .expect("open");
        let t = log.append(&batch(0, 1, 100, 1000), 0).expect("append");
        log.wait(t, AckLevel::All).await.expect("acked");
        let (len, allocated) = sizes(&path);
        assert_eq!(
            len, PREALLOCATE_INITIAL_BYTES,
            "one message reserves the initial 1 MiB"
        );
        assert!(
            allocated <= PREALLOCATE_INITIAL_BYTES,
            "allocated {allocated} bytes"
        );

        // About 12 MiB in 100 KiB batches: the reservation doubles as the data grows.
        let mut lens = vec![len];
        for n in 1..=120u32 {
            let t = log.append(&batch(n, 10, 10_000, 1000), 0).expect("append");
            log.wait(t, AckLevel::Leader).await.expect("written");
            let (len, _) = sizes(&path);
            if lens.last() != Some(&len) {
                lens.push(len);
            }
        }
        let written = log.size_bytes();
        let (len, _) = sizes(&path);
        assert!(len >= written, "the file holds what is written");
        assert!(
            len <= (2 * written).div_ceil(4096) * 4096,
            "at most twice what is written ({len} for {written})"
        );
        assert!(len <= written + PREALLOCATE_STEP_BYTES);
        assert!(
            // Each extension doubles what was written when it ran: at most the previous
            // size plus one batch (about 100 KiB), twice.
            lens.len() >= 4 && lens.windows(2).all(|w| w[1] <= 2 * (w[0] + (128 << 10))),
            "grown by doubling, not in one step: {lens:?}"
        );
        log.close().await;
    });
}

//! The engine against a failing disk (`corelog_storage::fault`): a failed fsync is never
//! acknowledged and fails the log for good; ENOSPC on a write keeps what is queued,
//! refuses new appends, and writes it all once space returns; a torn write fails the log
//! and the next open cuts the torn batch.

mod common;

use common::*;
use corelog_storage::fault::StorageFaults;
use corelog_storage::{AckLevel, AppendError, FileCache, LogContext, PartitionLog};
use std::sync::Arc;
use std::time::Duration;

fn context(faults: &Arc<StorageFaults>) -> LogContext {
    LogContext {
        files: FileCache::with_faults(64, Some(faults.clone())),
        ..LogContext::system()
    }
}

/// A log in `root` whose files go through `faults`, holding one acknowledged batch of
/// `count` records.
async fn open_with_one_batch(
    root: &std::path::Path,
    faults: &Arc<StorageFaults>,
    count: usize,
) -> std::rc::Rc<PartitionLog> {
    let log = PartitionLog::open(root.to_path_buf(), small_config(1 << 20), context(faults))
        .await
        .expect("open");
    let t = log.append(&batch(0, count, 100, 1000), 0).expect("append");
    log.wait(t, AckLevel::All).await.expect("acked");
    log
}

async fn records(log: &PartitionLog) -> i64 {
    headers(&read_all(log).await)
        .iter()
        .map(|h| i64::from(h.record_count))
        .sum()
}

#[test]
fn a_failed_fsync_is_never_acknowledged_and_fails_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t-0");
    run(move || async move {
        let faults = Arc::new(StorageFaults::new());
        let log = open_with_one_batch(&root, &faults, 3).await;
        faults.command("fail sync eio count=1").expect("armed");
        let t = log.append(&batch(1, 3, 100, 1000), 0).expect("append");
        assert!(
            log.wait(t, AckLevel::All).await.is_err(),
            "a batch whose sync failed is not acknowledged"
        );
        // Sticky: the sync is not tried again, nothing more is taken.
        assert!(matches!(
            log.append(&batch(2, 3, 100, 1000), 0),
            Err(AppendError::Storage(_))
        ));
        assert_eq!(faults.injected(), 1);
    });
}

#[test]
fn enospc_on_a_write_refuses_new_appends_and_writes_the_queue_once_space_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t-0");
    run(move || async move {
        let faults = Arc::new(StorageFaults::new());
        let log = open_with_one_batch(&root, &faults, 3).await;
        faults.command("fail write enospc").expect("armed");
        let queued = log.append(&batch(1, 3, 100, 1000), 0).expect("queued");
        let mut refused = false;
        for _ in 0..100 {
            glommio::timer::sleep(Duration::from_millis(10)).await;
            if let Err(AppendError::Storage(e)) = log.append(&batch(2, 3, 100, 1000), 0) {
                assert!(e.no_space, "{e}");
                refused = true;
                break;
            }
        }
        assert!(refused, "appends go on into a full filesystem");
        faults.clear();
        log.wait(queued, AckLevel::All)
            .await
            .expect("written and synced once space returned");
        let t = log
            .append(&batch(3, 3, 100, 1000), 0)
            .expect("accepted again");
        log.wait(t, AckLevel::All).await.expect("acked");
        assert_eq!(records(&log).await, 9);
    });
}

/// A log that fails while its flusher waits for space stops waiting: once space returns
/// it writes nothing more (its files may be the next open's by then, and a write of what
/// it still held would land on what that open recovered and appended).
#[test]
fn a_log_failed_while_waiting_for_space_writes_nothing_when_space_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t-0");
    run(move || async move {
        let faults = Arc::new(StorageFaults::new());
        let log = open_with_one_batch(&root, &faults, 3).await;
        let segment = root.join("00000000000000000000.log");
        let before = std::fs::read(&segment).expect("the segment");
        faults.command("fail write enospc").expect("armed");
        let queued = log.append(&batch(1, 3, 100, 1000), 0).expect("queued");
        let mut waiting = false;
        for _ in 0..100 {
            glommio::timer::sleep(Duration::from_millis(10)).await;
            if log.append(&batch(2, 3, 100, 1000), 0).is_err() {
                waiting = true;
                break;
            }
        }
        assert!(waiting, "the flusher waits for space");
        log.fail_with(corelog_storage::StorageError::new(
            root.display(),
            "failed by its owner",
        ));
        faults.clear();
        // Longer than the flusher's wait for space, several times over.
        glommio::timer::sleep(Duration::from_secs(1)).await;
        assert!(log.wait(queued, AckLevel::Leader).await.is_err());
        assert_eq!(
            std::fs::read(&segment).expect("the segment"),
            before,
            "nothing written after the failure"
        );
    });
}

#[test]
fn a_torn_write_fails_the_log_and_the_next_open_cuts_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t-0");
    run(move || async move {
        let faults = Arc::new(StorageFaults::new());
        let log = open_with_one_batch(&root, &faults, 5).await;
        faults
            .command("tear write path=.log count=1")
            .expect("armed");
        let t = log.append(&batch(1, 20, 300, 1000), 0).expect("append");
        assert!(log.wait(t, AckLevel::Leader).await.is_err());
        drop(log);
        let log = PartitionLog::open(root.clone(), small_config(1 << 20), LogContext::system())
            .await
            .expect("recovery opens a torn log");
        assert_eq!(log.written_offset(), 5, "cut at the torn batch");
        assert_eq!(records(&log).await, 5);
        let t = log.append(&batch(2, 2, 300, 1000), 0).expect("append");
        log.wait(t, AckLevel::All).await.expect("acked");
        assert_eq!(records(&log).await, 7);
    });
}

//! Idempotent producers on a real partition log: retries answered with their original
//! offsets (also while still pending), sequence and epoch errors, and the producer state
//! surviving a clean restart, a crash (snapshot plus replay of the log tail) and segment
//! rolls.

mod common;

use common::*;
use corelog_storage::producer_state::SequenceError;
use corelog_storage::LogContext;
use corelog_storage::{AckLevel, AppendError, PartitionLog};

async fn produce(log: &PartitionLog, bytes: &[u8]) -> Result<i64, AppendError> {
    let t = log.append(bytes, 0)?;
    log.wait(t, AckLevel::All).await?;
    Ok(t.base_offset)
}

#[test]
fn retries_get_the_original_offsets_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        assert_eq!(produce(&log, &idem(1, 0, 0, 3)).await.expect("first"), 0);
        assert_eq!(produce(&log, &batch(0, 2, 10, 1)).await.expect("plain"), 3);
        assert_eq!(produce(&log, &idem(1, 0, 3, 2)).await.expect("second"), 5);
        // Retries of both, in any order: original offsets, nothing written.
        assert_eq!(produce(&log, &idem(1, 0, 0, 3)).await.expect("retry"), 0);
        assert_eq!(produce(&log, &idem(1, 0, 3, 2)).await.expect("retry"), 5);
        assert_eq!(log.written_offset(), 7);
        // A retry of a batch still pending gets the same ticket as the original.
        let a = log.append(&idem(1, 0, 5, 4), 0).expect("queued");
        let b = log
            .append(&idem(1, 0, 5, 4), 0)
            .expect("retry while pending");
        assert_eq!(a, b);
        log.wait(b, AckLevel::All).await.expect("ack");
        assert_eq!(log.written_offset(), 11);
        // Gaps, stale epochs and new epochs.
        assert!(matches!(
            log.append(&idem(1, 0, 10, 1), 0),
            Err(AppendError::Sequence(SequenceError::OutOfOrder {
                expected: 9,
                got: 10,
                ..
            }))
        ));
        assert_eq!(
            produce(&log, &idem(1, 1, 0, 1)).await.expect("epoch bump"),
            11
        );
        assert!(matches!(
            log.append(&idem(1, 0, 9, 1), 0),
            Err(AppendError::Sequence(SequenceError::StaleEpoch {
                current: 1,
                ..
            }))
        ));
        assert_eq!(
            log.written_offset(),
            12,
            "refused batches leave nothing behind"
        );
        log.close().await;
    });
}

#[test]
fn producer_state_survives_clean_restarts_and_crashes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let live = dir.path().join("t-0");
    let crashed = dir.path().join("crash-0");
    let (l, c) = (live.clone(), crashed.clone());
    // Small segments: several rolls, so snapshots at rolls and a replayed tail both count.
    run(move || async move {
        let log = PartitionLog::open(l.clone(), small_config(1024), LogContext::system())
            .await
            .expect("open");
        for seq in 0..60 {
            produce(&log, &idem(7, 0, seq * 2, 2))
                .await
                .expect("append");
            produce(&log, &idem(8, 3, seq, 1)).await.expect("append");
        }
        assert!(log.segment_count() > 3, "segments rolled");
        // A crash image: copied while open, so no snapshot at the log end.
        copy_dir(&l, &c);
        log.close().await;
    });
    for path in [live, crashed] {
        run(move || async move {
            let log = PartitionLog::open(path.clone(), small_config(1024), LogContext::system())
                .await
                .expect("reopen");
            assert_eq!(log.written_offset(), 180);
            assert_eq!(log.producer_count(), 2);
            // The last five batches of each producer are still recognised as retries.
            let last = produce(&log, &idem(7, 0, 118, 2)).await.expect("retry");
            let older = produce(&log, &idem(7, 0, 110, 2)).await.expect("retry");
            assert_eq!(last - older, 12, "original offsets: 4 batches of 3 apart");
            produce(&log, &idem(8, 3, 59, 1)).await.expect("retry");
            assert_eq!(
                log.written_offset(),
                180,
                "retries after restart write nothing"
            );
            // Sequences continue; gaps and stale epochs are still refused.
            assert!(log.append(&idem(7, 0, 121, 1), 0).is_err());
            assert!(log.append(&idem(8, 2, 60, 1), 0).is_err());
            assert_eq!(produce(&log, &idem(7, 0, 120, 1)).await.expect("next"), 180);
            log.close().await;
        });
    }
}

#[test]
fn idle_producers_expire_and_then_start_fresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        produce(&log, &idem(3, 0, 0, 1)).await.expect("append");
        let now = corelog_storage::Clock::now_ms(&corelog_storage::SystemClock);
        assert_eq!(log.expire_producers(now, 60_000), 0, "not idle yet");
        assert_eq!(log.expire_producers(now + 60_000, 60_000), 1);
        // Forgotten: its next batch is accepted whatever its sequence (Kafka's rule).
        assert_eq!(produce(&log, &idem(3, 0, 40, 1)).await.expect("fresh"), 1);
        log.close().await;
    });
}

#[test]
fn a_batch_of_an_idempotent_producer_must_be_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = PartitionLog::open(path, small_config(1 << 20), LogContext::system())
            .await
            .expect("open");
        let mut two = idem(4, 0, 0, 1);
        two.extend_from_slice(&idem(4, 0, 1, 1));
        assert!(matches!(
            log.append(&two, 0),
            Err(AppendError::InvalidBatch(_))
        ));
        assert_eq!(log.written_offset(), 0);
        log.close().await;
    });
}

//! The partition layer on a real log: epochs stamped and cached across reopens, the
//! high watermark per durability, reads bounded by it, divergence answered, the cache
//! following the log start, and its checkpoint waiting out a full filesystem.

use corelog_partition::{
    AckError, Assignment, EpochError, Isolation, Partition, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
};
use corelog_storage::batch::batches;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::fault::StorageFaults;
use corelog_storage::test_executor::run;
use corelog_storage::{AckLevel, AppendError, Durability, FileCache, LogConfig, LogContext};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn one_record(value: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_000);
    b.push(&Record {
        key: None,
        value: Some(value.as_bytes()),
        headers: &[],
        timestamp_delta: 0,
    });
    b.build()
}

fn config(durability: Durability) -> LogConfig {
    LogConfig {
        durability,
        flush_interval_ms: 60_000,
        ..LogConfig::default()
    }
}

async fn open(dir: &PathBuf, durability: Durability, epoch: i32) -> Rc<Partition> {
    Partition::open(
        dir.clone(),
        config(durability),
        LogContext::system(),
        1,
        epoch,
    )
    .await
    .expect("open")
}

async fn produce(p: &Rc<Partition>, value: &str, level: AckLevel) -> i64 {
    let t = p.append(&one_record(value)).expect("append");
    p.wait(t, level).await.expect("acknowledged");
    t.base_offset
}

/// (base offset, partition leader epoch) of every batch readable from `offset`.
async fn epochs_from(p: &Partition, offset: i64) -> Vec<(i64, i32)> {
    let r = p
        .read(offset, -1, 1 << 20, Isolation::ReadUncommitted)
        .await
        .expect("read");
    batches(&r.records)
        .map(|b| {
            let (h, _) = b.expect("whole batches");
            (h.base_offset, h.partition_leader_epoch)
        })
        .collect()
}

#[test]
fn epochs_are_stamped_cached_and_survive_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let p = open(&path, Durability::AckAll, 0).await;
        for v in ["a", "b", "c"] {
            produce(&p, v, AckLevel::All).await;
        }
        p.close().await;
        drop(p);
        let p = open(&path, Durability::AckAll, 3).await;
        produce(&p, "d", AckLevel::All).await;
        assert_eq!(
            epochs_from(&p, 0).await,
            vec![(0, 0), (1, 0), (2, 0), (3, 3)]
        );
        assert_eq!(p.end_offset_for_epoch(0), (0, 3));
        assert_eq!(
            p.end_offset_for_epoch(2),
            (0, 3),
            "a gap answers with the floor"
        );
        assert_eq!(p.end_offset_for_epoch(3), (3, 4));
        assert_eq!(p.end_offset_for_epoch(4), (-1, -1));
        p.close().await;
        drop(p);

        let text = std::fs::read_to_string(path.join("leader-epoch-checkpoint")).expect("cache");
        assert_eq!(text, "0\n2\n0 0\n3 3\n");
        // A newer epoch that writes nothing replaces nothing but itself at reopen.
        let p = open(&path, Durability::AckAll, 4).await;
        assert_eq!(p.leader_epoch(), 4);
        assert_eq!(p.end_offset_for_epoch(3), (3, 4));
        assert_eq!(p.check_leader_epoch(-1), Ok(()));
        assert_eq!(p.check_leader_epoch(4), Ok(()));
        assert_eq!(
            p.check_leader_epoch(3),
            Err(EpochError::Fenced {
                requested: 3,
                current: 4
            })
        );
        assert_eq!(
            p.check_leader_epoch(5),
            Err(EpochError::Unknown {
                requested: 5,
                current: 4
            })
        );
        let latest = p
            .find_offset(LATEST_TIMESTAMP, Isolation::ReadCommitted)
            .await
            .expect("latest");
        assert_eq!((latest.offset, latest.leader_epoch), (4, 4));
        let earliest = p
            .find_offset(EARLIEST_TIMESTAMP, Isolation::ReadUncommitted)
            .await
            .expect("earliest");
        assert_eq!((earliest.offset, earliest.leader_epoch), (0, 0));
        p.close().await;
        drop(p);

        // Leading in an epoch older than the log's newest would fence up-to-date clients.
        let err = Partition::open(
            path.clone(),
            config(Durability::AckAll),
            LogContext::system(),
            1,
            2,
        )
        .await
        .err()
        .expect("an older epoch is refused");
        assert!(err.to_string().contains("older epoch 2"), "{err}");
    });
}

#[test]
fn high_watermark_follows_the_durability_and_bounds_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        // ack-all: an acks=1 record is written but below the high watermark only once
        // synced; a reader waiting for it gets it synced at once, not at the 60 s timer.
        let p = open(&root.join("ackall-0"), Durability::AckAll, 0).await;
        produce(&p, "x", AckLevel::Leader).await;
        assert_eq!(p.log().written_offset(), 1);
        assert_eq!(p.log().synced_offset(), 0, "nothing asked for a sync yet");
        assert_eq!(p.high_watermark(), 0);
        let r = p
            .read(0, -1, 1 << 20, Isolation::ReadUncommitted)
            .await
            .expect("read");
        assert!(
            r.records.is_empty(),
            "nothing above the high watermark is served"
        );
        assert_eq!(r.high_watermark, 0);
        let started = Instant::now();
        p.wait_beyond(0, started + Duration::from_secs(30)).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the waiting reader asked for a sync"
        );
        assert_eq!(p.high_watermark(), 1);
        assert_eq!(p.last_stable_offset(), 1);
        assert_eq!(epochs_from(&p, 0).await, vec![(0, 0)]);
        p.close().await;

        // interval: the written offset is the high watermark.
        let q = open(&root.join("interval-0"), Durability::Interval, 0).await;
        produce(&q, "y", AckLevel::Leader).await;
        assert_eq!(q.high_watermark(), 1);
        assert_eq!(q.log().synced_offset(), 0, "nothing asked for a sync");
        q.close().await;
    });
}

#[test]
fn divergence_and_the_log_start_move_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d-0");
    run(move || async move {
        let p = open(&path, Durability::AckAll, 1).await;
        produce(&p, "a", AckLevel::All).await;
        produce(&p, "b", AckLevel::All).await;
        p.become_leader(2, 1, corelog_partition::Assignment::alone(1))
            .expect("new epoch");
        produce(&p, "c", AckLevel::All).await;
        // A fetcher holding offsets up to 2 in epoch 1 (which ended at 2 here) is fine at
        // 2 and diverges at 3.
        let ok = p
            .read(2, 1, 1 << 20, Isolation::ReadUncommitted)
            .await
            .expect("read");
        assert!(ok.diverging_epoch.is_none() && !ok.records.is_empty());
        let d = p
            .read(3, 1, 1 << 20, Isolation::ReadUncommitted)
            .await
            .expect("read");
        assert_eq!(d.diverging_epoch, Some((1, 2)));
        assert!(d.records.is_empty());
        assert!(
            p.read(0, 7, 1 << 20, Isolation::ReadUncommitted)
                .await
                .is_err(),
            "unknown epoch"
        );

        // DeleteRecords past the first epoch's records drops it from the cache.
        assert_eq!(p.delete_records(2).await.expect("delete"), 2);
        assert_eq!(p.epoch_cache().entries().len(), 1);
        assert_eq!(
            p.end_offset_for_epoch(1),
            (1, 2),
            "below the first entry: its start"
        );
        assert!(
            p.delete_records(9).await.is_err(),
            "past the high watermark"
        );
        p.close().await;
        let text = std::fs::read_to_string(path.join("leader-epoch-checkpoint")).expect("cache");
        assert_eq!(text, "0\n1\n2 2\n");
    });
}

/// The checkpoint of an epoch begun at open is written by the first append, before any
/// batch of that epoch reaches the log file; a partition nobody writes to writes nothing.
#[test]
fn the_first_append_writes_the_new_epochs_checkpoint_before_its_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c-0");
    run(move || async move {
        let checkpoint = path.join("leader-epoch-checkpoint");
        let p = open(&path, Durability::AckAll, 1).await;
        produce(&p, "a", AckLevel::All).await;
        p.close().await;
        let before = std::fs::read_to_string(&checkpoint).expect("checkpoint");
        assert!(before.contains("1 0"), "{before}");

        // Reopened in epoch 2 and left idle: the file is as it was.
        let p = open(&path, Durability::AckAll, 2).await;
        glommio::timer::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            std::fs::read_to_string(&checkpoint).expect("checkpoint"),
            before
        );
        // Two appends back to back, the second while the checkpoint is being written:
        // both keep their order, and by the time the first is written the checkpoint
        // names epoch 2 from offset 1.
        let t1 = p.append(&one_record("b")).expect("append");
        let t2 = p.append(&one_record("c")).expect("append");
        assert_eq!((t1.base_offset, t2.base_offset), (1, 2));
        p.wait(t1, AckLevel::Leader).await.expect("written");
        let after = std::fs::read_to_string(&checkpoint).expect("checkpoint");
        assert!(after.contains("2 1"), "{after}");
        p.wait(t2, AckLevel::All).await.expect("acknowledged");
        assert_eq!(epochs_from(&p, 0).await, vec![(0, 1), (1, 2), (2, 2)]);
        p.close().await;
    });
}

/// The leader-epoch checkpoint finding the filesystem full is tried again, as the log's
/// own writes are, instead of failing the log: meanwhile new appends are refused with a
/// no-space error, and the batch waiting on the checkpoint is written and acknowledged
/// once space returns.
#[test]
fn a_full_filesystem_at_the_epoch_checkpoint_is_waited_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c-0");
    run(move || async move {
        let faults = Arc::new(StorageFaults::new());
        let context = LogContext {
            files: FileCache::with_faults(64, Some(faults.clone())),
            ..LogContext::system()
        };
        let p = Partition::open(path.clone(), config(Durability::AckAll), context, 1, 1)
            .await
            .expect("open");
        faults
            .command("fail write enospc path=leader-epoch-checkpoint count=3")
            .expect("armed");
        let mut queued = vec![p.append(&one_record("a")).expect("queued")];
        let mut refused = None;
        for _ in 0..100 {
            glommio::timer::sleep(Duration::from_millis(10)).await;
            match p.append(&one_record("b")) {
                Ok(t) => queued.push(t), // before the first attempt failed
                Err(AppendError::Storage(e)) => {
                    refused = Some(e);
                    break;
                }
                Err(e) => panic!("refused for another reason: {e}"),
            }
        }
        let refused = refused.expect("appends refused while the filesystem is full");
        assert!(refused.no_space, "{refused}");
        for t in &queued {
            p.wait(*t, AckLevel::All)
                .await
                .expect("acknowledged once there is space");
        }
        assert_eq!(faults.injected(), 3);
        let checkpoint =
            std::fs::read_to_string(path.join("leader-epoch-checkpoint")).expect("checkpoint");
        assert!(checkpoint.contains("1 0"), "{checkpoint}");
        let next = produce(&p, "c", AckLevel::All).await;
        assert_eq!(next, queued.len() as i64, "dense offsets");
        p.close().await;
    });
}

/// acks=all with `min.insync.replicas` 2: a produce waiting on followers that never fetch
/// goes on waiting while the ISR shrinks to 2, and is answered
/// NOT_ENOUGH_REPLICAS_AFTER_APPEND as soon as it shrinks to the leader alone (the high
/// watermark cannot pass it then), not at the producer's timeout. A follower that
/// catches up commits the next one.
#[test]
fn a_waiting_acks_all_produce_hears_of_an_isr_below_min_insync_replicas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let p = Rc::new(
            Partition::open(
                path,
                LogConfig {
                    min_insync_replicas: 2,
                    ..config(Durability::AckAll)
                },
                LogContext::system(),
                1,
                0,
            )
            .await
            .expect("open"),
        );
        let isr = |isr: &[i32], partition_epoch| Assignment {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            partition_epoch,
        };
        p.become_leader(0, 1, isr(&[1, 2, 3], 1)).expect("lead");
        let t = p.append(&one_record("waits")).expect("append");
        let waiting = {
            let p = p.clone();
            glommio::spawn_local(async move { p.wait_committed(t).await })
        };
        glommio::timer::sleep(Duration::from_millis(50)).await;
        p.become_leader(0, 1, isr(&[1, 2], 2)).expect("shrink to 2");
        glommio::timer::sleep(Duration::from_millis(50)).await;
        assert!(
            p.high_watermark() < t.next_offset,
            "nobody fetched: not committed"
        );
        p.become_leader(0, 1, isr(&[1], 3)).expect("shrink to 1");
        let answer = futures_lite::future::or(async { Some(waiting.await) }, async {
            glommio::timer::sleep(Duration::from_secs(5)).await;
            None
        })
        .await;
        assert!(
            matches!(answer, Some(Err(AckError::NotEnoughReplicasAfterAppend))),
            "{answer:?}"
        );

        // Back to two in sync: follower 2 fetches past both records, and the next
        // produce is committed.
        p.become_leader(0, 1, isr(&[1, 2], 4)).expect("expand");
        let t2 = p.append(&one_record("committed")).expect("append");
        p.wait(t2, AckLevel::All).await.expect("durable here");
        p.record_follower_fetch(2, t2.next_offset, || Some(0));
        p.wait_committed(t2).await.expect("committed by 1 and 2");
        assert_eq!(p.high_watermark(), t2.next_offset);
    });
}

/// A transactional batch of one record from `pid`, sequence `seq`.
fn txn_record(pid: i64, seq: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_000)
        .producer(pid, 0, seq)
        .transactional();
    b.push(&Record {
        key: None,
        value: Some(b"t"),
        headers: &[],
        timestamp_delta: 0,
    });
    b.build()
}

#[test]
fn read_committed_stops_at_open_transactions_and_is_told_the_aborted_ones() {
    use corelog_storage::txn_marker::{MarkerKind, TxnMarker};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t-0");
    run(move || async move {
        let p = open(&path, Durability::AckAll, 0).await;
        produce(&p, "a", AckLevel::All).await; // 0
        let t = p.append(&txn_record(7, 0)).expect("txn"); // 1
        p.wait(t, AckLevel::All).await.expect("ack");
        produce(&p, "b", AckLevel::All).await; // 2
        assert_eq!(p.high_watermark(), 3);
        assert_eq!(
            p.last_stable_offset(),
            1,
            "producer 7's transaction is open"
        );
        let committed = p
            .read(0, -1, 1 << 20, Isolation::ReadCommitted)
            .await
            .expect("read");
        let offsets: Vec<i64> = batches(&committed.records)
            .map(|b| b.expect("whole").0.base_offset)
            .collect();
        assert_eq!(offsets, vec![0], "nothing at or past the open transaction");
        assert_eq!(committed.last_stable_offset, 1);
        assert_eq!(committed.aborted, Some(Vec::new()));
        let uncommitted = p
            .read(0, -1, 1 << 20, Isolation::ReadUncommitted)
            .await
            .expect("read");
        assert_eq!(uncommitted.aborted, None);
        assert_eq!(uncommitted.last_stable_offset, 1);
        assert_eq!(
            p.find_offset(LATEST_TIMESTAMP, Isolation::ReadCommitted)
                .await
                .expect("lookup")
                .offset,
            1
        );
        let marker = TxnMarker {
            producer_id: 7,
            producer_epoch: 0,
            coordinator_epoch: 0,
            kind: MarkerKind::Abort,
        };
        let t = p.append_marker(&marker).expect("marker"); // 3
        p.wait(t, AckLevel::All).await.expect("ack");
        assert_eq!(p.last_stable_offset(), 4);
        let committed = p
            .read(0, -1, 1 << 20, Isolation::ReadCommitted)
            .await
            .expect("read");
        assert_eq!(batches(&committed.records).count(), 4);
        let aborted = committed.aborted.expect("a read_committed read");
        assert_eq!(
            aborted
                .iter()
                .map(|a| (a.producer_id, a.first_offset))
                .collect::<Vec<_>>(),
            vec![(7, 1)]
        );
        // From past the marker there is nothing to be told.
        let later = p
            .read(4, -1, 1 << 20, Isolation::ReadCommitted)
            .await
            .expect("read");
        assert_eq!(later.aborted, Some(Vec::new()));
        p.close().await;
    });
}

/// The follower's rules (`follower::decide`, `take_up`): records are appended, made
/// durable and the leader's marks followed; a divergence cuts where the two logs' epochs
/// agree; a fetch below the leader's log start starts over there, one past its high
/// watermark cuts back to it; anything else waits for the backoff.
#[test]
fn a_follower_takes_up_its_leaders_records_and_cuts_where_the_epochs_say() {
    use corelog_partition::follower::{self, FollowerStep, LeaderAnswer};
    use corelog_partition::Cut;
    let dir = tempfile::tempdir().expect("tempdir");
    let (lpath, fpath) = (dir.path().join("l-0"), dir.path().join("f-0"));
    run(move || async move {
        let leader = open(&lpath, Durability::AckAll, 1).await;
        produce(&leader, "a", AckLevel::All).await;
        produce(&leader, "b", AckLevel::All).await;
        let follower =
            Partition::open_replica(fpath, config(Durability::AckAll), LogContext::system(), -1)
                .await
                .expect("open");
        follower.become_follower(1, 1);
        let records = leader
            .log()
            .read(0, 1 << 20, i64::MAX)
            .await
            .expect("read")
            .records;
        let answer = LeaderAnswer::Records {
            records: Some(&records),
            high_watermark: 2,
            log_start_offset: 0,
        };
        let step = follower::decide(&follower, 0, answer);
        let FollowerStep::TakeUp {
            records,
            high_watermark,
            log_start_offset,
        } = step
        else {
            panic!("{step:?}")
        };
        follower::take_up(&follower, records, high_watermark, log_start_offset)
            .await
            .expect("taken up");
        assert_eq!(follower.log_end_offset(), 2);
        assert_eq!(follower.high_watermark(), 2);
        assert_eq!(epochs_from(&follower, 0).await, vec![(0, 1), (1, 1)]);

        // The leader's epoch 1 ended at 1: cut there (its end here is 2).
        let diverging = LeaderAnswer::Diverging {
            epoch: 1,
            end_offset: 1,
        };
        assert_eq!(
            follower::decide(&follower, 2, diverging),
            FollowerStep::Cut(Cut::Tail(1))
        );
        // An epoch older than this log's first: where this log's first epoch starts.
        let older = LeaderAnswer::Diverging {
            epoch: 0,
            end_offset: 7,
        };
        assert_eq!(
            follower::decide(&follower, 2, older),
            FollowerStep::Cut(Cut::Tail(0))
        );
        let out_of_range = |log_start_offset, high_watermark| LeaderAnswer::OutOfRange {
            log_start_offset,
            high_watermark,
        };
        assert_eq!(
            follower::decide(&follower, 2, out_of_range(5, 9)),
            FollowerStep::Cut(Cut::Everything { new_start: 5 })
        );
        assert_eq!(
            follower::decide(&follower, 12, out_of_range(0, 9)),
            FollowerStep::Cut(Cut::Tail(9))
        );
        assert_eq!(
            follower::decide(&follower, 2, out_of_range(0, 9)),
            FollowerStep::Backoff
        );
        assert_eq!(
            follower::decide(&follower, 2, LeaderAnswer::Failed),
            FollowerStep::Backoff
        );
        follower.close().await;
        leader.close().await;
    });
}

use super::*;
use crate::share::coordinator::decide;
use crate::share::partition::AckType;
use crate::share::state::PersistedState;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::test_executor::run;
use corelog_storage::{LogConfig, LogContext};
use std::cell::Cell;

/// The share coordinator's decisions (`coordinator::decide`) over states in memory.
#[derive(Default)]
struct MemPersister {
    states: RefCell<HashMap<ShareKey, PersistedState>>,
    fail_writes: Cell<bool>,
    /// Writes take a while (the share coordinator's round trip).
    slow_writes: Cell<bool>,
}

impl Persister for MemPersister {
    fn call(
        &self,
        key: ShareKey,
        op: StateOp,
    ) -> LocalBoxFuture<'_, Result<Option<StateView>, StateFailure>> {
        Box::pin(async move {
            if self.fail_writes.get() && matches!(op, StateOp::Write(_)) {
                return Err(StateFailure::CoordinatorNotAvailable);
            }
            if self.slow_writes.get() && matches!(op, StateOp::Write(_)) {
                glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
            }
            let mut states = self.states.borrow_mut();
            let (record, view) = decide(states.get(&key), &op, 3, 0)?;
            if let Some(r) = record {
                states.entry(key).or_default().replay(&r);
            }
            Ok(view)
        })
    }
}

async fn log_with(dir: &std::path::Path, records: usize) -> Rc<Partition> {
    let log = Partition::open(
        dir.to_path_buf(),
        LogConfig::default(),
        LogContext::system(),
        1,
        0,
    )
    .await
    .expect("open");
    if records > 0 {
        append(&log, records).await;
    }
    log
}

async fn append(log: &Rc<Partition>, records: usize) {
    append_batch(log, BatchBuilder::new(0), "r", records).await;
}

/// Appends `n` records valued `{prefix}{i}` in one batch built on `b`.
async fn append_batch(log: &Rc<Partition>, mut b: BatchBuilder, prefix: &str, n: usize) {
    for i in 0..n {
        let v = format!("{prefix}{i}");
        b.push(&Record {
            key: None,
            value: Some(v.as_bytes()),
            headers: &[],
            timestamp_delta: 0,
        });
    }
    let ticket = log.append(&b.build()).expect("append");
    log.wait_committed(ticket).await.expect("committed");
}

fn tp() -> TopicPartition {
    TopicPartition {
        topic: "q".into(),
        partition: 0,
    }
}

fn ack(first: i64, last: i64, t: AckType) -> AckBatch {
    AckBatch {
        first,
        last,
        types: vec![t],
    }
}

#[test]
fn acknowledged_records_survive_a_new_leader_and_the_rest_come_back() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(dir.path(), 10).await;
        let p = MemPersister::default();
        let tp = tp();
        let t = target_from(&tp, &log, AutoOffsetReset::Earliest);
        let leader = ShareLeader::new();
        let a = leader.acquire(&t, "a", &p, 4, 0).await.expect("a acquires");
        let b = leader.acquire(&t, "b", &p, 4, 0).await.expect("b acquires");
        assert_eq!((a[0].first, a[0].last, b[0].first, b[0].last), (0, 3, 4, 7));
        // a accepts 0-1 and releases 2-3; b rejects 4 and holds 5-7 when the leader goes.
        leader
            .acknowledge(
                &t,
                "a",
                &p,
                &[ack(0, 1, AckType::Accept), ack(2, 3, AckType::Release)],
                0,
            )
            .await
            .expect("a acks");
        leader
            .acknowledge(&t, "b", &p, &[ack(4, 4, AckType::Reject)], 0)
            .await
            .expect("b acks");
        // Another member cannot acknowledge what b holds.
        let stolen = leader
            .acknowledge(&t, "a", &p, &[ack(5, 5, AckType::Accept)], 0)
            .await;
        assert!(
            matches!(stolen, Err(ShareError::InvalidRecordState(_))),
            "{stolen:?}"
        );

        let next = ShareLeader::new();
        let got = next.acquire(&t, "c", &p, 100, 0).await.expect("c acquires");
        let got: Vec<(i64, i64, u16)> = got
            .iter()
            .map(|r| (r.first, r.last, r.deliveries))
            .collect();
        // 0-1 done, 4 archived; 2-3 delivered twice now; 5-7 (held when the leader went)
        // delivered again without counting that delivery; 8-9 new.
        assert_eq!(got, vec![(2, 3, 2), (5, 9, 1)]);
        assert_eq!(next.peek("g", &tp), Some((2, 8)));
    });
}

#[test]
fn a_failed_store_undoes_the_acknowledgement() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(dir.path(), 5).await;
        let p = MemPersister::default();
        let tp = tp();
        let t = target_from(&tp, &log, AutoOffsetReset::Earliest);
        let leader = ShareLeader::new();
        leader.acquire(&t, "a", &p, 5, 0).await.expect("acquired");
        p.fail_writes.set(true);
        let refused = leader
            .acknowledge(&t, "a", &p, &[ack(0, 4, AckType::Accept)], 0)
            .await;
        assert_eq!(refused, Err(ShareError::CoordinatorNotAvailable));
        p.fail_writes.set(false);
        // Still a's, still acquired: the retry goes through.
        leader
            .acknowledge(&t, "a", &p, &[ack(0, 4, AckType::Accept)], 0)
            .await
            .expect("retried");
        assert_eq!(leader.peek("g", &tp), Some((5, 0)));
    });
}

#[test]
fn a_newer_leader_fences_the_old_one_and_latest_starts_at_the_end() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(dir.path(), 6).await;
        let p = MemPersister::default();
        let tp = tp();
        let t = target_from(&tp, &log, AutoOffsetReset::Latest);
        let old = ShareLeader::new();
        // Latest: nothing of what was written before the group came.
        assert!(old
            .acquire(&t, "a", &p, 10, 0)
            .await
            .expect("acquire")
            .is_empty());
        assert_eq!(old.peek("g", &tp), Some((6, 0)));
        append(&log, 2).await;
        let got = old
            .acquire(&t, "a", &p, 10, 0)
            .await
            .expect("the new records");
        assert_eq!((got[0].first, got[0].last), (6, 7));
        // A newer leader reads at its epoch: the old one's next store is fenced.
        let key = ShareKey {
            group: "g".into(),
            topic: t.topic_id,
            partition: 0,
        };
        p.call(
            key,
            StateOp::Read {
                leader_epoch: log.leader_epoch() + 1,
            },
        )
        .await
        .expect("read");
        let acked = old
            .acknowledge(&t, "a", &p, &[ack(6, 7, AckType::Accept)], 0)
            .await;
        assert_eq!(acked, Err(ShareError::NotLeaderOrFollower));
        assert_eq!(
            old.peek("g", &tp),
            None,
            "a fenced share partition is dropped"
        );
    });
}

/// Appends `n` records of producer `pid`'s transaction (sequence from `seq`).
async fn append_txn(log: &Rc<Partition>, pid: i64, seq: i32, n: usize) {
    let b = BatchBuilder::new(0).producer(pid, 0, seq).transactional();
    append_batch(log, b, &format!("t{pid}-"), n).await;
}

async fn end_txn(log: &Rc<Partition>, pid: i64, kind: corelog_storage::txn_marker::MarkerKind) {
    let marker = corelog_storage::txn_marker::TxnMarker {
        producer_id: pid,
        producer_epoch: 0,
        coordinator_epoch: 0,
        kind,
    };
    let ticket = log.append_marker(&marker).expect("marker");
    log.wait_committed(ticket).await.expect("committed");
}

#[test]
fn a_read_committed_group_never_gets_aborted_records_nor_open_ones() {
    use corelog_storage::txn_marker::MarkerKind;
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(dir.path(), 0).await;
        append_txn(&log, 7, 0, 3).await; // 0-2
        end_txn(&log, 7, MarkerKind::Abort).await; // 3
        append(&log, 2).await; // 4-5
        append_txn(&log, 8, 0, 2).await; // 6-7, open
        assert_eq!((log.last_stable_offset(), log.high_watermark()), (6, 8));
        let p = MemPersister::default();
        let tp = tp();
        let mut t = target(&tp, &log);
        t.delivery.read_committed = true;
        let leader = ShareLeader::new();
        let got = leader.acquire(&t, "a", &p, 100, 0).await.expect("acquires");
        // 0-2 archived (and the start moves past them); the marker and 4-5 delivered;
        // 6-7 not until their transaction ends.
        assert_eq!(
            got,
            vec![Acquired {
                first: 3,
                last: 5,
                deliveries: 1
            }]
        );
        assert_eq!(leader.peek("g", &tp), Some((3, 3)));
        // The archive was stored: the next leader starts past it.
        let next = ShareLeader::new();
        let again = next.acquire(&t, "b", &p, 100, 0).await.expect("acquires");
        assert_eq!((again[0].first, again[0].last), (3, 5));
        // The open transaction commits: its records come.
        end_txn(&log, 8, MarkerKind::Commit).await; // 8
        let later = next.acquire(&t, "b", &p, 100, 0).await.expect("acquires");
        assert_eq!((later[0].first, later[0].last), (6, 8));
        // A read_uncommitted group gets everything below the high watermark.
        let mut u = target(&tp, &log);
        u.group = "u";
        let all = leader.acquire(&u, "c", &p, 100, 0).await.expect("acquires");
        assert_eq!((all[0].first, all[0].last, all.len()), (0, 8, 1));
    });
}

/// Group "g"'s share partition of `tp` (topic id 7), starting as `reset` says.
fn target_from<'a>(
    tp: &'a TopicPartition,
    log: &'a Partition,
    reset: AutoOffsetReset,
) -> ShareTarget<'a> {
    ShareTarget {
        group: "g",
        tp,
        topic_id: uuid::Uuid::from_u128(7),
        log,
        delivery: Delivery {
            auto_offset_reset: reset,
            ..ShareLeaderConfig::default().delivery()
        },
    }
}

fn target<'a>(tp: &'a TopicPartition, log: &'a Partition) -> ShareTarget<'a> {
    target_from(tp, log, AutoOffsetReset::Earliest)
}

#[test]
fn a_share_partition_is_never_held_twice_while_tasks_wait_for_it() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(dir.path(), 10).await;
        let p = Rc::new(MemPersister::default());
        let leader = Rc::new(ShareLeader::new());
        let tp = tp();
        let t = target(&tp, &log);
        leader
            .acquire(&t, "a", &*p, 5, 0)
            .await
            .expect("a acquires 0-4");
        p.slow_writes.set(true);
        // a's session ends: its records are released (a slow store, the lock held)
        // while c waits for the lock. Then nobody holds anything: an idle share
        // partition, but one a task waits for, so it stays the one live state.
        let (l1, p1, log1, tp1) = (leader.clone(), p.clone(), log.clone(), tp.clone());
        let release =
            glommio::spawn_local(async move { l1.release(&target(&tp1, &log1), "a", &*p1).await });
        let (l2, p2, log2, tp2) = (leader.clone(), p.clone(), log.clone(), tp.clone());
        let c = glommio::spawn_local(async move {
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
            l2.acquire(&target(&tp2, &log2), "c", &*p2, 5, 0).await
        });
        release.await.expect("released");
        let got_c = c.await.expect("c acquires");
        let got_d = leader
            .acquire(&t, "d", &*p, 5, 0)
            .await
            .expect("d acquires");
        let ranges = |v: &[Acquired]| v.iter().map(|r| (r.first, r.last)).collect::<Vec<_>>();
        assert_eq!(ranges(&got_c), vec![(0, 4)], "c gets what a gave back");
        assert_eq!(
            ranges(&got_d),
            vec![(5, 9)],
            "nobody acquires c's records again"
        );
    });
}

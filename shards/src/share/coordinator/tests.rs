use super::*;
use crate::share::partition::{RecordState, StateBatch};
use corelog_storage::test_executor::run;
use corelog_storage::{LogConfig, LogContext};
use std::path::Path;

fn key(partition: i32) -> ShareKey {
    ShareKey {
        group: "orders-group".into(),
        topic: uuid::Uuid::from_u128(1),
        partition,
    }
}

#[test]
fn keys_land_where_kafka_puts_them() {
    // Values from Java: "orders-group:AAAAAAAAAAAAAAAAAAAAAQ:3".hashCode() = -878855892,
    // and Kafka's Uuid string of these bits.
    assert_eq!(
        coordinator_key(&key(3)),
        "orders-group:AAAAAAAAAAAAAAAAAAAAAQ:3"
    );
    assert_eq!(partition_for(&key(3), 50), 6);
    assert_eq!(
        topic_id_string(uuid::Uuid::from_u128(0x0123456789abcdef_0fedcba987654321)),
        "ASNFZ4mrze8P7cuph2VDIQ"
    );
}

fn batch(first: i64, last: i64, state: RecordState, count: u16) -> StateBatch {
    StateBatch {
        first,
        last,
        state,
        deliveries: count,
    }
}

fn write(leader_epoch: i32, state_epoch: i32, start: i64, batches: Vec<StateBatch>) -> StateOp {
    StateOp::Write(StateWrite {
        state_epoch,
        leader_epoch,
        start_offset: start,
        delivery_complete_count: -1,
        batches,
    })
}

#[test]
fn reads_and_writes_need_an_initialized_key_and_current_epochs() {
    let invalid = |r: Result<_, StateFailure>| matches!(r, Err(StateFailure::InvalidRequest(_)));
    assert!(invalid(decide(
        None,
        &StateOp::Read { leader_epoch: 0 },
        500,
        0
    )));
    assert!(invalid(decide(None, &write(0, 0, 0, vec![]), 500, 0)));
    let (summary, _) = (
        decide(None, &StateOp::ReadSummary { leader_epoch: -1 }, 500, 0),
        (),
    );
    assert_eq!(
        summary.expect("a summary").1.map(|v| v.start_offset),
        Some(-1)
    );

    let mut s = PersistedState::default();
    let (init, _) = decide(
        None,
        &StateOp::Initialize {
            state_epoch: 2,
            start_offset: 10,
        },
        500,
        0,
    )
    .expect("initialized");
    s.replay(&init.expect("a snapshot"));
    // A newer leader's read records its epoch; the older leader is fenced after it.
    let (bump, v) = decide(Some(&s), &StateOp::Read { leader_epoch: 4 }, 500, 0).expect("read");
    assert_eq!(v.map(|v| (v.leader_epoch, v.start_offset)), Some((4, 10)));
    s.replay(&bump.expect("the new leader epoch is recorded"));
    assert!(matches!(
        decide(Some(&s), &write(3, 2, -1, vec![]), 500, 0),
        Err(StateFailure::Fenced(StateError::FencedLeaderEpoch(3, 4)))
    ));
    assert!(matches!(
        decide(Some(&s), &StateOp::Read { leader_epoch: 3 }, 500, 0),
        Err(StateFailure::Fenced(StateError::FencedLeaderEpoch(3, 4)))
    ));
    // A reset of the offsets under an older group epoch is fenced.
    assert!(matches!(
        decide(
            Some(&s),
            &StateOp::Initialize {
                state_epoch: 1,
                start_offset: 0
            },
            500,
            0
        ),
        Err(StateFailure::Fenced(StateError::FencedStateEpoch(1, 2)))
    ));
    assert!(matches!(
        decide(Some(&s), &write(4, 1, -1, vec![]), 500, 0),
        Err(StateFailure::Fenced(StateError::FencedStateEpoch(1, 2)))
    ));
    // The same leader reading again writes nothing.
    assert_eq!(
        decide(Some(&s), &StateOp::Read { leader_epoch: 4 }, 500, 0)
            .expect("read")
            .0,
        None
    );
}

async fn open(dir: &Path) -> Rc<Partition> {
    Partition::open(
        dir.to_path_buf(),
        LogConfig::default(),
        LogContext::system(),
        1,
        0,
    )
    .await
    .expect("open")
}

/// A coordinator with every state partition served by `log` (one partition).
async fn loaded(log: &Rc<Partition>, cold: Duration) -> ShareCoordinator {
    let c = ShareCoordinator::new(ShareCoordinatorConfig {
        partitions: 1,
        updates_per_snapshot: 2,
        cold_snapshot_after: cold,
    });
    c.load_partition(0, log.clone()).await;
    c
}

async fn ask(
    c: &ShareCoordinator,
    log: &Rc<Partition>,
    k: ShareKey,
    op: StateOp,
) -> Result<Option<StateView>, StateFailure> {
    let l = log.clone();
    c.handle(k, op, move |_| Some(l.clone())).await
}

type Answer = Result<Option<StateView>, StateFailure>;

/// Reads keys 0, 1 and 2 as the leader at epoch 0.
async fn read_all(c: &ShareCoordinator, log: &Rc<Partition>) -> Vec<Answer> {
    let mut out = Vec::new();
    for p in 0..3 {
        out.push(ask(c, log, key(p), StateOp::Read { leader_epoch: 0 }).await);
    }
    out
}

#[test]
fn the_state_survives_a_reload_and_pruning_keeps_what_a_reload_needs() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path()).await;
        let c = loaded(&log, Duration::from_secs(3600)).await;
        for p in 0..3 {
            ask(
                &c,
                &log,
                key(p),
                StateOp::Initialize {
                    state_epoch: 1,
                    start_offset: 0,
                },
            )
            .await
            .expect("initialized");
        }
        // Enough writes to cross snapshots (two updates per snapshot).
        for i in 0..7i64 {
            let b = batch(i * 10, i * 10 + 4, RecordState::Acknowledged, 1);
            ask(&c, &log, key(0), write(0, 1, -1, vec![b]))
                .await
                .expect("written");
        }
        ask(
            &c,
            &log,
            key(1),
            write(0, 1, 35, vec![batch(35, 36, RecordState::Archived, 5)]),
        )
        .await
        .expect("written");
        ask(&c, &log, key(2), StateOp::Delete)
            .await
            .expect("deleted");
        let before = read_all(&c, &log).await;
        assert!(
            matches!(before[2], Err(StateFailure::InvalidRequest(_))),
            "deleted"
        );
        let b0 = before[0].clone().expect("key 0").expect("a view");
        assert_eq!(b0.batches.len(), 7);
        assert_eq!(
            before[1]
                .clone()
                .expect("key 1")
                .expect("a view")
                .start_offset,
            35
        );

        let again = loaded(&log, Duration::ZERO).await;
        assert_eq!(read_all(&again, &log).await, before);
        // Every key snapshots afresh (cold at once here), and the log before the
        // oldest snapshot goes.
        let deleted = again
            .prune({
                let l = log.clone();
                move |_| Some(l.clone())
            })
            .await;
        assert!(
            deleted > 0 && log.log_start_offset() > 0,
            "pruned {deleted}"
        );
        let third = loaded(&log, Duration::from_secs(3600)).await;
        assert_eq!(read_all(&third, &log).await, before);
    });
}

#[test]
fn a_coordinator_key_reads_back_from_the_right() {
    let key = ShareKey {
        group: "a:b:c".into(),
        topic: uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788),
        partition: 7,
    };
    assert_eq!(parse_coordinator_key(&coordinator_key(&key)), Some(key));
    for bad in [
        "",
        "g",
        "g:x:1",
        ":AAAAAAAAAAAAAAAAAAAAAA:1",
        "g:AAAAAAAAAAAAAAAAAAAAAA:-1",
        "g:AAAAAAAAAAAAAAAAAAAAAA:x",
    ] {
        assert_eq!(parse_coordinator_key(bad), None, "{bad}");
    }
}

use super::*;
use proptest::prelude::*;

const LOCK: i64 = 1_000;

fn limits() -> ShareLimits {
    ShareLimits {
        max_in_flight: 50,
        delivery_limit: 3,
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
fn records_are_acquired_once_each_then_accepted_and_the_start_moves_past_them() {
    let mut p = SharePartition::new(10, limits());
    let a = p.acquire("a", 20, 4, 0, LOCK);
    assert_eq!(
        a,
        vec![Acquired {
            first: 10,
            last: 13,
            deliveries: 1
        }]
    );
    let b = p.acquire("b", 20, 100, 0, LOCK);
    assert_eq!(
        b,
        vec![Acquired {
            first: 14,
            last: 19,
            deliveries: 1
        }]
    );
    // Nothing left to hand out.
    assert!(p.acquire("c", 20, 100, 0, LOCK).is_empty());
    // b may not settle a's records; a request with one bad batch changes nothing.
    assert_eq!(
        p.acknowledge(
            "b",
            &[ack(14, 15, AckType::Accept), ack(12, 12, AckType::Accept)],
            1,
            LOCK
        ),
        Err(AckError::InvalidRecordState(12))
    );
    assert_eq!(p.record(14), Some((RecordState::Acquired, 1, Some("b"))));
    p.acknowledge("a", &[ack(10, 13, AckType::Accept)], 1, LOCK)
        .expect("a holds them");
    assert_eq!((p.start(), p.end()), (14, 20));
    // Acknowledged twice: below the start, skipped as Kafka skips it.
    p.acknowledge("a", &[ack(10, 13, AckType::Accept)], 1, LOCK)
        .expect("below the start");
}

#[test]
fn a_released_or_timed_out_record_is_delivered_again_until_the_limit_then_archived() {
    let mut p = SharePartition::new(0, limits());
    p.acquire("a", 1, 1, 0, LOCK);
    p.acknowledge("a", &[ack(0, 0, AckType::Release)], 1, LOCK)
        .expect("release");
    assert_eq!(p.record(0), Some((RecordState::Available, 1, None)));
    let again = p.acquire("b", 1, 10, 2, LOCK);
    assert_eq!(again[0].deliveries, 2);
    // b's lock runs out: available again, its delivery counted.
    assert!(p.expire(2 + LOCK));
    assert_eq!(p.record(0), Some((RecordState::Available, 2, None)));
    // b's late acknowledgement is refused: it no longer holds the record.
    assert_eq!(
        p.acknowledge("b", &[ack(0, 0, AckType::Accept)], 2 + LOCK, LOCK),
        Err(AckError::InvalidRecordState(0))
    );
    // The third delivery is the last: released, it is archived and the start moves on.
    assert_eq!(p.acquire("c", 1, 10, 3000, LOCK)[0].deliveries, 3);
    p.acknowledge("c", &[ack(0, 0, AckType::Release)], 3001, LOCK)
        .expect("release");
    assert_eq!((p.start(), p.end()), (1, 1));
}

#[test]
fn a_member_that_leaves_gives_back_what_it_holds_uncounted() {
    let mut p = SharePartition::new(0, limits());
    p.acquire("a", 5, 5, 0, LOCK);
    assert!(p.release_member("a"));
    assert_eq!(p.record(2), Some((RecordState::Available, 0, None)));
    assert_eq!(p.acquire("b", 5, 5, 0, LOCK)[0].deliveries, 1);
}

#[test]
fn renew_keeps_the_record_and_restarts_its_lock() {
    let mut p = SharePartition::new(0, limits());
    p.acquire("a", 2, 2, 0, LOCK);
    p.acknowledge("a", &[ack(0, 0, AckType::Renew)], 900, LOCK)
        .expect("renew");
    p.expire(LOCK);
    assert_eq!(p.record(0), Some((RecordState::Acquired, 1, Some("a"))));
    assert_eq!(p.record(1), Some((RecordState::Available, 1, None)));
    assert_eq!(p.next_deadline(), Some(900 + LOCK));
}

#[test]
fn malformed_acknowledgements_are_invalid_requests() {
    let mut p = SharePartition::new(0, limits());
    p.acquire("a", 4, 4, 0, LOCK);
    let per_offset = |types: Vec<AckType>| AckBatch {
        first: 0,
        last: 3,
        types,
    };
    assert!(matches!(
        p.acknowledge("a", &[per_offset(vec![AckType::Accept; 2])], 1, LOCK),
        Err(AckError::InvalidRequest(_))
    ));
    assert!(matches!(
        p.acknowledge("a", &[ack(3, 9, AckType::Accept)], 1, LOCK),
        Err(AckError::InvalidRequest(_))
    ));
    assert!(matches!(
        p.acknowledge("a", &[ack(3, 2, AckType::Accept)], 1, LOCK),
        Err(AckError::InvalidRequest(_))
    ));
    // Per offset: accept, release, reject, gap.
    p.acknowledge(
        "a",
        &[per_offset(vec![
            AckType::Accept,
            AckType::Release,
            AckType::Reject,
            AckType::Gap,
        ])],
        1,
        LOCK,
    )
    .expect("per-offset types");
    assert_eq!((p.start(), p.end()), (1, 4));
    assert_eq!(p.record(1), Some((RecordState::Available, 1, None)));
    assert_eq!(p.record(2), Some((RecordState::Archived, 1, None)));
}

#[test]
fn the_in_flight_limit_holds_new_records_back_but_not_redeliveries() {
    let mut p = SharePartition::new(0, limits());
    assert_eq!(p.acquire("a", 1000, 1000, 0, LOCK)[0].last, 49);
    assert!(p.acquire("b", 1000, 1000, 0, LOCK).is_empty());
    p.acknowledge("a", &[ack(0, 9, AckType::Release)], 1, LOCK)
        .expect("release");
    let again = p.acquire("b", 1000, 1000, 1, LOCK);
    assert_eq!(
        again,
        vec![Acquired {
            first: 0,
            last: 9,
            deliveries: 2
        }]
    );
}

#[test]
fn a_restored_partition_delivers_again_what_was_acquired() {
    let batches = vec![
        StateBatch {
            first: 5,
            last: 6,
            state: RecordState::Acknowledged,
            deliveries: 1,
        },
        StateBatch {
            first: 9,
            last: 10,
            state: RecordState::Acquired,
            deliveries: 2,
        },
    ];
    let mut p = SharePartition::restore(5, &batches, limits());
    // 7 and 8 were never stored: available, never delivered.
    assert_eq!((p.start(), p.end()), (7, 11));
    assert_eq!(p.record(8), Some((RecordState::Available, 0, None)));
    assert_eq!(
        p.acquire("a", 11, 10, 0, LOCK),
        vec![
            Acquired {
                first: 7,
                last: 8,
                deliveries: 1
            },
            Acquired {
                first: 9,
                last: 10,
                deliveries: 3
            }
        ]
    );
    let stored = p.state_batches();
    assert_eq!(SharePartition::restore(7, &stored, limits()).end(), 11);
}

#[test]
fn unreadable_records_are_archived_where_acquired_and_never_delivered() {
    let mut p = SharePartition::new(0, limits());
    // 0..=2 aborted (the start moves past them), 5..=6 and 9..=12 aborted; 3..=4, 7..=8
    // delivered; 9.. lies past this fetch's budget and is left for the next.
    let got = p.acquire("a", 20, 9, 0, LOCK);
    let (a, archived) = p.archive_unreadable(got, &[(0, 2), (5, 6), (9, 12)]);
    assert!(archived);
    let ranges: Vec<(i64, i64)> = a.iter().map(|a| (a.first, a.last)).collect();
    assert_eq!(ranges, vec![(3, 4), (7, 8)]);
    assert_eq!((p.start(), p.end()), (3, 9));
    assert_eq!(p.record(5), Some((RecordState::Archived, 1, None)));
    // The rest: 9..=12 archived, 13.. delivered; nothing archived twice.
    let got = p.acquire("b", 20, 100, 0, LOCK);
    let (b, archived) = p.archive_unreadable(got, &[(5, 6), (9, 12)]);
    assert!(archived);
    assert_eq!(
        b,
        vec![Acquired {
            first: 13,
            last: 19,
            deliveries: 1
        }]
    );
    // Released records come back as they were; archived ones never do.
    p.acknowledge("a", &[ack(3, 4, AckType::Release)], 1, LOCK)
        .expect("a holds them");
    let got = p.acquire("c", 20, 100, 2, LOCK);
    let (c, archived) = p.archive_unreadable(got, &[(5, 6), (9, 12)]);
    assert!(!archived);
    assert_eq!(
        c,
        vec![Acquired {
            first: 3,
            last: 4,
            deliveries: 2
        }]
    );
    // With nothing unreadable nothing changes.
    let mut q = SharePartition::new(0, limits());
    let got = q.acquire("a", 5, 10, 0, LOCK);
    assert_eq!(
        q.archive_unreadable(got, &[]),
        (
            vec![Acquired {
                first: 0,
                last: 4,
                deliveries: 1
            }],
            false
        )
    );
}

#[test]
fn operations_are_counted_in_records_until_taken() {
    let mut p = SharePartition::new(0, limits());
    p.acquire("a", 10, 10, 0, LOCK);
    p.acknowledge(
        "a",
        &[
            ack(0, 3, AckType::Accept),
            AckBatch {
                first: 4,
                last: 6,
                types: vec![AckType::Reject, AckType::Release, AckType::Renew],
            },
        ],
        1,
        LOCK,
    )
    .expect("a holds them");
    assert!(p.expire(2 + LOCK)); // 6..=9 run out
    p.acquire("b", 10, 10, 3 + LOCK, LOCK); // 5..=9 again
    p.release_member("b");
    let c = p.take_counts();
    assert_eq!(
        c,
        ShareCounts {
            acquired: 15,
            accepted: 4,
            released: 1,
            rejected: 1,
            renewed: 1,
            lock_expired: 4,
            session_released: 5,
            ..ShareCounts::default()
        }
    );
    assert_eq!(
        p.take_counts(),
        ShareCounts::default(),
        "taken: from zero again"
    );
    // Released at the limit (3): archived, and counted so.
    let mut q = SharePartition::new(0, limits());
    for now in 0..3 {
        q.acquire("a", 1, 1, now, LOCK);
        q.acknowledge("a", &[ack(0, 0, AckType::Release)], now, LOCK)
            .expect("held");
    }
    assert_eq!(q.take_counts().archived_at_limit, 1);
    assert_eq!((q.start(), q.end()), (1, 1));
}

#[test]
fn records_the_log_dropped_are_archived_and_acknowledging_them_is_skipped() {
    let mut p = SharePartition::new(0, limits());
    p.acquire("a", 10, 10, 0, LOCK);
    p.move_log_start(4);
    assert_eq!((p.start(), p.end()), (4, 10));
    p.acknowledge("a", &[ack(0, 5, AckType::Accept)], 1, LOCK)
        .expect("the dropped part is skipped");
    assert_eq!(p.start(), 6);
    p.move_log_start(20);
    assert_eq!((p.start(), p.end()), (20, 20));
}

// ---------------------------------------------------------------------------------------
// The spans against a model that keeps every offset on its own.

#[derive(Debug, Clone, PartialEq)]
struct Rec {
    state: RecordState,
    deliveries: u16,
    owner: Option<String>,
    deadline: Option<i64>,
}

#[derive(Debug, Default)]
struct Model {
    start: i64,
    end: i64,
    recs: BTreeMap<i64, Rec>,
    limit: u16,
    max_in_flight: i64,
}

impl Model {
    fn advance(&mut self) {
        while let Some((&o, r)) = self.recs.iter().next() {
            if !r.state.is_terminal() {
                self.start = o;
                return;
            }
            self.recs.remove(&o);
        }
        self.start = self.end;
    }

    fn acquire(&mut self, m: &str, log_end: i64, max: i64, now: i64) -> Vec<(i64, u16)> {
        let mut out = Vec::new();
        let mut budget = max;
        for (o, r) in self.recs.iter_mut() {
            if budget == 0 {
                break;
            }
            if r.state == RecordState::Available {
                r.state = RecordState::Acquired;
                r.deliveries += 1;
                r.owner = Some(m.into());
                r.deadline = Some(now + LOCK);
                out.push((*o, r.deliveries));
                budget -= 1;
            }
        }
        let n = budget
            .min(self.max_in_flight - (self.end - self.start))
            .min(log_end - self.end);
        for _ in 0..n.max(0) {
            self.recs.insert(
                self.end,
                Rec {
                    state: RecordState::Acquired,
                    deliveries: 1,
                    owner: Some(m.into()),
                    deadline: Some(now + LOCK),
                },
            );
            out.push((self.end, 1));
            self.end += 1;
        }
        out
    }

    fn release(&mut self, o: i64) {
        let limit = self.limit;
        let r = self.recs.get_mut(&o).expect("in flight");
        r.state = if r.deliveries >= limit {
            RecordState::Archived
        } else {
            RecordState::Available
        };
        r.owner = None;
        r.deadline = None;
    }

    fn ack(&mut self, m: &str, first: i64, last: i64, t: AckType, now: i64) -> Result<(), ()> {
        if last >= self.end {
            return Err(());
        }
        for o in first.max(self.start)..=last {
            let r = &self.recs[&o];
            if r.state != RecordState::Acquired || r.owner.as_deref() != Some(m) {
                return Err(());
            }
        }
        for o in first.max(self.start)..=last {
            match t {
                AckType::Renew => {
                    self.recs.get_mut(&o).expect("checked").deadline = Some(now + LOCK)
                }
                AckType::Release => self.release(o),
                AckType::Accept | AckType::Reject | AckType::Gap => {
                    let r = self.recs.get_mut(&o).expect("checked");
                    r.state = if t == AckType::Accept {
                        RecordState::Acknowledged
                    } else {
                        RecordState::Archived
                    };
                    r.owner = None;
                    r.deadline = None;
                }
            }
        }
        self.advance();
        Ok(())
    }

    fn expire(&mut self, now: i64) {
        let due: Vec<i64> = self
            .recs
            .iter()
            .filter(|(_, r)| r.deadline.is_some_and(|d| d <= now))
            .map(|(o, _)| *o)
            .collect();
        for o in due {
            self.release(o);
        }
        self.advance();
    }

    fn release_member(&mut self, m: &str) {
        for r in self.recs.values_mut() {
            if r.owner.as_deref() == Some(m) {
                r.state = RecordState::Available;
                r.deliveries = r.deliveries.saturating_sub(1);
                r.owner = None;
                r.deadline = None;
            }
        }
    }

    fn move_log_start(&mut self, ls: i64) {
        if ls <= self.start {
            return;
        }
        self.recs.retain(|o, _| *o >= ls);
        self.start = ls;
        self.end = self.end.max(ls);
        self.advance();
    }
}

#[derive(Debug, Clone)]
enum Op {
    Produce(i64),
    Acquire(u8, i64),
    Ack(u8, i64, i64, u8),
    Time(i64),
    Leave(u8),
    LogStart(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1i64..30).prop_map(Op::Produce),
        4 => (0u8..3, 1i64..20).prop_map(|(m, n)| Op::Acquire(m, n)),
        5 => (0u8..3, 0i64..80, 0i64..8, 0u8..5).prop_map(|(m, f, n, t)| Op::Ack(m, f, n, t)),
        2 => (1i64..1500).prop_map(Op::Time),
        1 => (0u8..3).prop_map(Op::Leave),
        1 => (0i64..10).prop_map(Op::LogStart),
    ]
}

proptest! {
    /// Under any sequence of produces, fetches, acknowledgements (right or wrong),
    /// expiries, members leaving and log truncation, the spans hold exactly what a
    /// per-offset model holds, every acquisition hands out the same records, and no
    /// record is delivered more than the limit or changes after it is done.
    #[test]
    fn the_spans_behave_as_records_kept_one_by_one(ops in proptest::collection::vec(op(), 1..80)) {
        let l = limits();
        let mut p = SharePartition::new(0, l);
        let mut model = Model { limit: l.delivery_limit, max_in_flight: l.max_in_flight, ..Model::default() };
        let (mut log_end, mut log_start, mut now) = (0i64, 0i64, 0i64);
        let mut done: BTreeMap<i64, RecordState> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Produce(n) => log_end += n,
                Op::Acquire(m, n) => {
                    let member = format!("m{m}");
                    let got = p.acquire(&member, log_end, n as usize, now, LOCK);
                    let flat: Vec<(i64, u16)> = got
                        .iter()
                        .flat_map(|a| (a.first..=a.last).map(move |o| (o, a.deliveries)))
                        .collect();
                    prop_assert_eq!(flat, model.acquire(&member, log_end, n, now));
                }
                Op::Ack(m, first, n, t) => {
                    let member = format!("m{m}");
                    let t = AckType::from_id(t as i8).expect("0..5");
                    let r = p.acknowledge(&member, &[ack(first, first + n, t)], now, LOCK);
                    prop_assert_eq!(r.is_ok(), model.ack(&member, first, first + n, t, now).is_ok());
                }
                Op::Time(ms) => {
                    now += ms;
                    p.expire(now);
                    model.expire(now);
                }
                Op::Leave(m) => {
                    let member = format!("m{m}");
                    p.release_member(&member);
                    model.release_member(&member);
                }
                Op::LogStart(n) => {
                    log_start = (log_start + n).min(log_end);
                    p.move_log_start(log_start);
                    model.move_log_start(log_start);
                }
            }
            prop_assert_eq!((p.start(), p.end()), (model.start, model.end));
            for (o, r) in &model.recs {
                prop_assert_eq!(
                    p.record(*o),
                    Some((r.state, r.deliveries, r.owner.as_deref())),
                    "offset {}", o
                );
                prop_assert!(r.deliveries <= l.delivery_limit);
                if r.state.is_terminal() {
                    if let Some(before) = done.insert(*o, r.state) {
                        prop_assert_eq!(before, r.state, "a done record never changes");
                    }
                }
            }
        }
    }
}

//! One transactional id's state at its coordinator, and the transitions it may make.
//!
//! A transition is made in two steps, as the coordinator must make it: `prepare` checks
//! that the target state may follow the current one and marks it pending (a second
//! transition is refused meanwhile: CONCURRENT_TRANSACTIONS), the record of the target is
//! written to `__transaction_state`, and only once it is durable `complete` applies it
//! (or `abandon` drops it if the write failed). So what a client is told always matches
//! what a new coordinator would read back.
//!
//! Invariants, checked by `complete`:
//! - the epoch only grows, by one at a time, except that a new producer id starts at 0;
//! - partitions are only added while Ongoing, kept through Prepare*, and cleared by
//!   Complete* and Empty;
//! - Dead and PrepareEpochFence are never committed states (Dead only pends while the
//!   id's tombstone is written; PrepareEpochFence is replaced by PrepareAbort);
//! - the epoch handed to a client is at most 32766, so the coordinator can always fence
//!   it by one more bump (32767 only appears on a transaction being ended, Prepare* and
//!   the Complete* that follows it, and is never an epoch a client is given);
//! - a completion moves to a new producer id only to the one its Prepare* named
//!   (`next_producer_id`, transaction version 2 when the epoch runs out).

use std::collections::BTreeSet;

/// The highest epoch a client is given: one below `i16::MAX`, so that a fence can bump it.
pub const EPOCH_EXHAUSTED_AT: i16 = i16::MAX - 1;

/// A transactional id's state, with the id Kafka stores in `TransactionLogValue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

use TxnState::*;

impl TxnState {
    /// The byte stored in the log.
    pub fn id(self) -> i8 {
        match self {
            Empty => 0,
            Ongoing => 1,
            PrepareCommit => 2,
            PrepareAbort => 3,
            CompleteCommit => 4,
            CompleteAbort => 5,
            Dead => 6,
            PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => Empty,
            1 => Ongoing,
            2 => PrepareCommit,
            3 => PrepareAbort,
            4 => CompleteCommit,
            5 => CompleteAbort,
            6 => Dead,
            7 => PrepareEpochFence,
            _ => return None,
        })
    }

    /// The name DescribeTransactions and ListTransactions give (and take as a filter).
    pub fn name(self) -> &'static str {
        match self {
            Empty => "Empty",
            Ongoing => "Ongoing",
            PrepareCommit => "PrepareCommit",
            PrepareAbort => "PrepareAbort",
            CompleteCommit => "CompleteCommit",
            CompleteAbort => "CompleteAbort",
            Dead => "Dead",
            PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether `self` may follow `previous`. With transaction version 2 an abort may also
    /// start from Empty or a completed transaction (a client unsure of the state ends it).
    pub fn may_follow(self, previous: TxnState, version2: bool) -> bool {
        let completed = matches!(previous, Empty | CompleteCommit | CompleteAbort);
        match self {
            Empty => completed,
            Ongoing => previous == Ongoing || completed,
            PrepareCommit | PrepareEpochFence => previous == Ongoing,
            PrepareAbort => {
                matches!(previous, Ongoing | PrepareEpochFence) || (version2 && completed)
            }
            CompleteCommit => previous == PrepareCommit,
            CompleteAbort => previous == PrepareAbort,
            Dead => completed,
        }
    }

    /// Whether the id may expire in this state (no transaction in flight).
    pub fn may_expire(self) -> bool {
        matches!(self, Empty | CompleteCommit | CompleteAbort)
    }

    /// Whether the state is ever written to the log.
    pub fn is_written(self) -> bool {
        !matches!(self, Dead | PrepareEpochFence)
    }
}

pub const ALL: [TxnState; 8] = [
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
];

/// A partition of a transaction: topic and partition index.
pub type TxnPartition = (String, i32);

/// What a transition sets: the whole of a transactional id's durable state, as its log
/// record holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transit {
    pub producer_id: i64,
    /// The producer id of the state this transition was made from (Kafka's
    /// `prevProducerId`, set on every transition; -1 for an id never written). After a
    /// rotation it names the old id, which lets a client's retry with the old id be known.
    pub previous_producer_id: i64,
    /// The producer id a version 2 end moves to once its markers are written, set by a
    /// Prepare* whose epoch ran out (-1 otherwise).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so that a client retrying a bump it did not hear
    /// the answer to is given the same epoch (-1 if the bump fenced older instances).
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    /// When the ongoing transaction began (-1 if none).
    pub start_ms: i64,
    pub update_ms: i64,
    /// Whether the transition was made under transaction version 2 (Kafka's
    /// `clientTransactionVersion` 2, stored in the record; false is version 0).
    pub tv2: bool,
}

/// Why a transition was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("a transition to {pending:?} is in progress")]
    Pending { pending: TxnState },
    #[error("{to:?} cannot follow {from:?}")]
    Illegal { from: TxnState, to: TxnState },
    #[error("a transition to {0:?} sets no producer id or epoch")]
    NoProducer(TxnState),
    #[error("{0:?} is not the transition that was prepared")]
    NotPrepared(TxnState),
    #[error("the transition to {to:?} breaks an invariant: {why}")]
    Invalid { to: TxnState, why: &'static str },
}

/// A transactional id's state at its coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub current: Transit,
    /// The transition whose record is being written, if any.
    pub pending: Option<TxnState>,
    /// Checks every transition as one of transaction version 2 (an epoch bump per end).
    /// A transition made under version 2 says so itself (`Transit::tv2`), which is what
    /// the rules set; this flag forces it for a whole id.
    pub version2: bool,
}

impl TxnMetadata {
    /// A new id: no producer yet (epoch -1, so the first bump gives epoch 0).
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_owned(),
            current: Transit {
                producer_id,
                previous_producer_id: -1,
                next_producer_id: -1,
                producer_epoch: -1,
                last_producer_epoch: -1,
                timeout_ms,
                state: Empty,
                partitions: BTreeSet::new(),
                start_ms: -1,
                update_ms: now_ms,
                tv2: false,
            },
            pending: None,
            version2: false,
        }
    }

    pub fn state(&self) -> TxnState {
        self.current.state
    }

    /// Marks `to` pending if it may follow the current state.
    pub fn prepare(&mut self, to: &Transit) -> Result<(), TransitionError> {
        if let Some(pending) = self.pending {
            return Err(TransitionError::Pending { pending });
        }
        if to.producer_id < 0 || (to.producer_epoch < 0 && to.state != Dead) {
            return Err(TransitionError::NoProducer(to.state));
        }
        if !to
            .state
            .may_follow(self.current.state, self.version2 || to.tv2)
        {
            return Err(TransitionError::Illegal {
                from: self.current.state,
                to: to.state,
            });
        }
        self.pending = Some(to.state);
        Ok(())
    }

    /// Applies `to`, prepared before, now that its record is durable.
    pub fn complete(&mut self, to: Transit) -> Result<(), TransitionError> {
        if self.pending != Some(to.state) {
            return Err(TransitionError::NotPrepared(to.state));
        }
        check_invariants(&self.current, &to, self.version2 || to.tv2)?;
        self.pending = None;
        self.current = to;
        Ok(())
    }

    /// Drops the pending transition: its record could not be written.
    pub fn abandon(&mut self) {
        self.pending = None;
    }
}

/// The checks `complete` makes of a transition from `from` to `to`.
pub fn check_invariants(
    from: &Transit,
    to: &Transit,
    version2: bool,
) -> Result<(), TransitionError> {
    let invalid = |why| Err(TransitionError::Invalid { to: to.state, why });
    if !to.state.is_written() {
        return invalid("Dead and PrepareEpochFence are never committed states");
    }
    // 32767 is reached only by ending a transaction (a fence at 32766, or a version 2 end
    // bumping 32766), and the Complete* keeps the epoch its Prepare* ended under.
    if to.producer_epoch > EPOCH_EXHAUSTED_AT && matches!(to.state, Empty | Ongoing) {
        return invalid("an epoch above 32766 is never handed out");
    }
    let same_producer = to.producer_id == from.producer_id;
    let bump_ok = if same_producer {
        to.producer_epoch == from.producer_epoch || to.producer_epoch == from.producer_epoch + 1
    } else {
        to.producer_epoch == 0
    };
    match to.state {
        Empty => {
            if !bump_ok {
                return invalid("the epoch moves by one, or starts at 0 for a new producer id");
            }
            if !to.partitions.is_empty() || to.start_ms != -1 {
                return invalid("Empty has no partitions and no start");
            }
        }
        Ongoing => {
            if !same_producer || to.producer_epoch != from.producer_epoch {
                return invalid("a transaction runs under one producer id and epoch");
            }
            if !from.partitions.is_subset(&to.partitions) {
                return invalid("partitions are only added to a transaction");
            }
            if to.timeout_ms != from.timeout_ms && from.state == Ongoing {
                return invalid("the timeout is fixed while a transaction runs");
            }
            if to.start_ms < 0 {
                return invalid("an ongoing transaction has a start");
            }
        }
        PrepareCommit | PrepareAbort => {
            let empty_abort = version2 && to.state == PrepareAbort && from.state != Ongoing;
            if !empty_abort && to.partitions != from.partitions {
                return invalid("a transaction ends with the partitions it has");
            }
            if !empty_abort && to.start_ms != from.start_ms {
                return invalid("a transaction ends with the start it had");
            }
            // Version 1 ends a transaction under its own epoch, or the next one when the
            // coordinator fences the producer and aborts. Version 2 ends it under the next
            // epoch after the one it ran under, recorded as the last epoch; a fence first
            // bumps that one, so a fenced abort may end two above (and stays at 32767
            // rather than overflow).
            let next = |e: i16| e.checked_add(1);
            let ends_ok = if version2 {
                let fenced = to.state == PrepareAbort
                    && Some(to.last_producer_epoch) == next(from.producer_epoch);
                let ran_under = to.last_producer_epoch == from.producer_epoch || fenced;
                let at_max = to.state == PrepareAbort
                    && to.producer_epoch == i16::MAX
                    && to.last_producer_epoch == i16::MAX;
                ran_under && (Some(to.producer_epoch) == next(to.last_producer_epoch) || at_max)
            } else {
                Some(to.producer_epoch) == next(from.producer_epoch)
                    || to.producer_epoch == from.producer_epoch
            };
            if same_producer && !ends_ok {
                return invalid("a transaction ends under its epoch or the next");
            }
        }
        CompleteCommit | CompleteAbort => {
            if !to.partitions.is_empty() {
                return invalid("a completed transaction has no partitions left");
            }
            if to.start_ms == -1 {
                return invalid("a completed transaction had a start");
            }
            if same_producer && to.producer_epoch != from.producer_epoch {
                return invalid("completing keeps the epoch the transaction ended under");
            }
            if !same_producer && (to.producer_id != from.next_producer_id || to.producer_epoch != 0)
            {
                return invalid("a completion moves only to the next producer id, at epoch 0");
            }
        }
        Dead | PrepareEpochFence => unreachable!("checked above"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ongoing(meta: &TxnMetadata, partitions: &[(&str, i32)], now: i64) -> Transit {
        let mut t = meta.current.clone();
        t.state = Ongoing;
        t.partitions
            .extend(partitions.iter().map(|(t, p)| (t.to_string(), *p)));
        if t.start_ms < 0 {
            t.start_ms = now;
        }
        t.update_ms = now;
        t
    }

    fn bumped(meta: &TxnMetadata, state: TxnState) -> Transit {
        let mut t = meta.current.clone();
        t.state = state;
        t.last_producer_epoch = t.producer_epoch;
        t.producer_epoch += 1;
        t
    }

    fn to(meta: &mut TxnMetadata, t: Transit) -> Result<(), TransitionError> {
        meta.prepare(&t)?;
        meta.complete(t)
    }

    /// `to` the transit `make` builds from the metadata as it is.
    fn go(
        meta: &mut TxnMetadata,
        make: impl FnOnce(&TxnMetadata) -> Transit,
    ) -> Result<(), TransitionError> {
        let t = make(meta);
        to(meta, t)
    }

    #[test]
    fn ids_and_names_are_kafkas() {
        for (i, s) in ALL.iter().enumerate() {
            assert_eq!(s.id(), i as i8);
            assert_eq!(TxnState::from_id(i as i8), Some(*s));
            assert_eq!(TxnState::from_name(s.name()), Some(*s));
        }
        assert_eq!(TxnState::from_id(8), None);
        assert_eq!(TxnState::from_name("ongoing"), None, "names are exact");
    }

    #[test]
    fn the_transition_table_is_kafkas() {
        // (state, the states it may follow under version 1)
        let table = [
            (Empty, vec![Empty, CompleteCommit, CompleteAbort]),
            (Ongoing, vec![Ongoing, Empty, CompleteCommit, CompleteAbort]),
            (PrepareCommit, vec![Ongoing]),
            (PrepareAbort, vec![Ongoing, PrepareEpochFence]),
            (CompleteCommit, vec![PrepareCommit]),
            (CompleteAbort, vec![PrepareAbort]),
            (Dead, vec![Empty, CompleteAbort, CompleteCommit]),
            (PrepareEpochFence, vec![Ongoing]),
        ];
        for (state, previous) in table {
            for p in ALL {
                assert_eq!(
                    state.may_follow(p, false),
                    previous.contains(&p),
                    "{p:?} -> {state:?}"
                );
            }
        }
        for p in [Empty, CompleteCommit, CompleteAbort] {
            assert!(
                PrepareAbort.may_follow(p, true),
                "version 2 aborts from {p:?}"
            );
            assert!(!PrepareCommit.may_follow(p, true));
        }
    }

    #[test]
    fn a_transaction_goes_round_and_its_record_decides() {
        let mut m = TxnMetadata::new("t", 1000, 60_000, 0);
        go(&mut m, |m| bumped(m, Empty)).unwrap();
        assert_eq!(m.current.producer_epoch, 0);
        go(&mut m, |m| ongoing(m, &[("a", 0)], 10)).unwrap();
        go(&mut m, |m| ongoing(m, &[("b", 1)], 20)).unwrap();
        assert_eq!(m.current.partitions.len(), 2);
        assert_eq!(m.current.start_ms, 10, "the start is the first add's");

        let mut commit = m.current.clone();
        commit.state = PrepareCommit;
        m.prepare(&commit).unwrap();
        // While its record is written, nothing else may start.
        assert_eq!(
            m.prepare(&ongoing(&m, &[("c", 0)], 30)),
            Err(TransitionError::Pending {
                pending: PrepareCommit
            })
        );
        m.complete(commit).unwrap();

        let mut done = m.current.clone();
        done.state = CompleteCommit;
        done.partitions.clear();
        to(&mut m, done).unwrap();
        assert_eq!(m.state(), CompleteCommit);
        go(&mut m, |m| ongoing(m, &[("c", 0)], 40)).unwrap();
        assert_eq!(
            m.state(),
            Ongoing,
            "a new transaction after a completed one"
        );
    }

    #[test]
    fn a_failed_write_leaves_the_state_as_it_was() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        go(&mut m, |m| bumped(m, Empty)).unwrap();
        let before = m.clone();
        let t = ongoing(&m, &[("a", 0)], 5);
        m.prepare(&t).unwrap();
        m.abandon();
        assert_eq!(m, before);
        to(&mut m, t).unwrap();
    }

    #[test]
    fn invariants_refuse_what_kafka_refuses() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        go(&mut m, |m| bumped(m, Empty)).unwrap();
        go(&mut m, |m| ongoing(m, &[("a", 0), ("a", 1)], 5)).unwrap();

        let mut fewer = m.current.clone();
        fewer.partitions.remove(&("a".to_string(), 1));
        assert!(matches!(
            to(&mut m, fewer),
            Err(TransitionError::Invalid { .. })
        ));
        m.abandon();

        let mut other_epoch = ongoing(&m, &[("b", 0)], 6);
        other_epoch.producer_epoch += 1;
        assert!(matches!(
            to(&mut m, other_epoch),
            Err(TransitionError::Invalid { .. })
        ));
        m.abandon();

        let mut jump = m.current.clone();
        jump.state = PrepareAbort;
        jump.producer_epoch += 2;
        // (one more is the fence's abort, and allowed)
        assert!(matches!(
            to(&mut m, jump),
            Err(TransitionError::Invalid { .. })
        ));
        m.abandon();

        let mut no_producer = m.current.clone();
        no_producer.producer_id = -1;
        assert_eq!(
            m.prepare(&no_producer),
            Err(TransitionError::NoProducer(Ongoing))
        );

        let mut skip = m.current.clone();
        skip.state = CompleteCommit;
        assert_eq!(
            m.prepare(&skip),
            Err(TransitionError::Illegal {
                from: Ongoing,
                to: CompleteCommit
            })
        );
        assert_eq!(
            m.complete(skip),
            Err(TransitionError::NotPrepared(CompleteCommit)),
            "nothing is applied that was not prepared"
        );
    }

    #[test]
    fn version_two_ends_each_transaction_under_a_new_epoch() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        m.version2 = true;
        go(&mut m, |m| bumped(m, Empty)).unwrap();
        go(&mut m, |m| ongoing(m, &[("a", 0)], 5)).unwrap();
        let mut same_epoch = m.current.clone();
        same_epoch.state = PrepareCommit;
        assert!(matches!(
            to(&mut m, same_epoch),
            Err(TransitionError::Invalid { .. })
        ));
        m.abandon();
        go(&mut m, |m| bumped(m, PrepareCommit)).unwrap();
        assert_eq!(m.current.producer_epoch, 1);
        assert_eq!(m.current.last_producer_epoch, 0);

        // An abort from a completed transaction: no partitions, completes at once.
        let mut done = m.current.clone();
        done.state = CompleteCommit;
        done.partitions.clear();
        to(&mut m, done).unwrap();
        let mut abort = bumped(&m, PrepareAbort);
        abort.start_ms = 50;
        to(&mut m, abort).unwrap();
        assert_eq!(m.current.producer_epoch, 2);
    }

    #[test]
    fn an_end_moves_only_to_the_producer_id_it_named() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        go(&mut m, |m| bumped(m, Empty)).unwrap();
        go(&mut m, |m| ongoing(m, &[("a", 0)], 5)).unwrap();
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        let mut commit = bumped(&m, PrepareCommit);
        commit.tv2 = true;
        commit.next_producer_id = 8;
        to(&mut m, commit).unwrap();
        assert_eq!(m.current.producer_epoch, i16::MAX, "ended under 32767");

        let ended = m.current.clone();
        let done = |pid: i64, epoch: i16| {
            let mut t = ended.clone();
            t.state = CompleteCommit;
            t.partitions.clear();
            t.next_producer_id = -1;
            t.producer_id = pid;
            t.producer_epoch = epoch;
            t
        };
        for wrong in [done(9, 0), done(8, 1)] {
            let mut m = m.clone();
            assert!(matches!(
                to(&mut m, wrong),
                Err(TransitionError::Invalid { .. })
            ));
        }
        // Without a new id the completion keeps 32767, which only an ended transaction has.
        to(&mut m.clone(), done(7, i16::MAX)).unwrap();
        to(&mut m, done(8, 0)).unwrap();

        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        go(&mut m, |m| bumped(m, Empty)).unwrap();
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        assert!(matches!(
            go(&mut m, |m| bumped(m, Empty)),
            Err(TransitionError::Invalid { .. })
        ));
    }

    #[test]
    fn dead_and_the_fence_are_never_committed() {
        let mut m = TxnMetadata::new("t", 7, 60_000, 0);
        go(&mut m, |m| bumped(m, Empty)).unwrap();
        let mut dead = m.current.clone();
        dead.state = Dead;
        m.prepare(&dead).unwrap();
        assert!(matches!(
            m.complete(dead),
            Err(TransitionError::Invalid { .. })
        ));
        m.abandon();
        go(&mut m, |m| ongoing(m, &[("a", 0)], 5)).unwrap();
        let fence = bumped(&m, PrepareEpochFence);
        m.prepare(&fence).unwrap();
        assert!(matches!(
            m.complete(fence),
            Err(TransitionError::Invalid { .. })
        ));
    }
}

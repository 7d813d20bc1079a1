//! A partition leader's verification of transactional batches (KIP-890 part 1): a batch
//! that would open its producer's transaction in a partition is appended only once the
//! transaction's coordinator has confirmed the partition is in the producer's ongoing
//! transaction (AddPartitionsToTxn with verifyOnly, to the coordinator shard over the mesh
//! when this broker is the coordinator, else to the coordinator broker). Without it a
//! late batch of a transaction that had already ended would open a transaction no
//! coordinator knows, and hold the partition's last stable offset for good (a "hanging"
//! transaction).
//!
//! A guard closes the race between the answer and the append: before asking, the leader
//! takes the guard of (partition, producer, epoch) — one guard shared by every request of that
//! producer verifying there at once, as a pipelining producer sends several before the
//! first is appended (Kafka's `computeIfAbsent`); a marker for that producer appended
//! meanwhile that may end the transaction verified removes it (under version 1 one under
//! the batches' epoch or later; under version 2, whose ends bump the epoch, only a later
//! one: the marker under their own epoch ends the transaction before theirs, which a
//! version 2 producer does not wait for); a batch is appended only if the guard it
//! took is still there, synchronously with the check, and the guard goes when its last
//! request is done. Its holders append in the order they took it, each after the one
//! before is done and only if that one appended (`Turn`): a pipelining producer's later
//! batch must not land before an earlier one whose verification took longer. Only the first batches of a transaction in a partition are verified:
//! once one is appended the producer's transaction is open there and later batches need
//! no coordinator.
//!
//! Errors as Kafka's leader answers them: the coordinator's per-partition error with
//! PRODUCER_FENCED as INVALID_PRODUCER_EPOCH and TRANSACTION_ABORTABLE as
//! INVALID_TXN_STATE for producers before Produce v11 (`rules::VerifyMode`); a
//! coordinator that cannot be reached or is loading answers NOT_ENOUGH_REPLICAS
//! (retriable, `error_code`); a guard gone is INVALID_TXN_STATE.

use super::Shard;
use crate::group::coordinator::offsets_tp;
use crate::group::types::{GroupAnswer, GroupError, GroupOp, TxnCommitRequest};
use crate::group::OFFSETS_TOPIC;
use crate::mesh::{PartitionError, ProduceInput, ProduceTxn, ShardMessage, TopicPartition};
use crate::txn::rules::{ProducerIdEpoch, TxnError, VerifyMode};
use crate::txn::state::TxnPartition;
use crate::txn::types::{AddMode, TxnAnswer, TxnOp};
use crate::txn::TRANSACTION_TOPIC;
use corelog_partition::Partition;
use corelog_storage::batch::BatchHeader;
use corelog_storage::AppendTicket;
use futures::channel::oneshot;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

/// AddPartitionsToTxn v4: batched, from a broker, with verifyOnly or (transaction
/// version 2) without. The oldest such version, which every broker serving transactions
/// knows.
const VERIFY_VERSION: i16 = 4;

/// A guard's key: the partition, the producer id and the epoch of the batches verified.
type GuardKey = (TopicPartition, i64, i16);

/// The guards of verifications in flight, by (partition, producer id, epoch).
#[derive(Default)]
pub(crate) struct Guards {
    live: RefCell<HashMap<GuardKey, Guard>>,
    next: Cell<u64>,
}

/// One (partition, producer, epoch)'s guard: its token, how many requests hold it,
/// whether all of them run under transaction version 2, and the turn of the last one
/// to take it.
struct Guard {
    token: u64,
    holders: usize,
    version2: bool,
    last: Rc<Step>,
}

/// Whether a holder's batch was appended, once it knows.
#[derive(Default)]
struct Step {
    appended: Cell<Option<bool>>,
    done: event_listener::Event,
}

/// A holder's place in the order of a guard's holders: the requests of a pipelining
/// producer take it in the order they reach the partition, and each appends only after
/// the one before it is done — and not at all if that one was refused — so that a later
/// batch never lands before an earlier one whose verification took longer (Kafka reads
/// one request of a connection at a time). Dropped unfinished, it counts as refused.
pub(super) struct Turn {
    mine: Rc<Step>,
    previous: Option<Rc<Step>>,
}

impl Turn {
    /// Waits until the holder before this one is done: whether it appended.
    async fn previous_appended(&self) -> bool {
        let Some(p) = &self.previous else {
            return true;
        };
        loop {
            let listener = p.done.listen();
            if let Some(appended) = p.appended.get() {
                return appended;
            }
            listener.await;
        }
    }

    fn finish(&self, appended: bool) {
        if self.mine.appended.get().is_none() {
            self.mine.appended.set(Some(appended));
            self.mine.done.notify(usize::MAX);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.finish(false);
    }
}

/// Whether a marker under `marker_epoch` voids a guard of batches under `guard_epoch`:
/// whether it may end the transaction those batches are verified for. Under version 2
/// every end bumps the epoch, so the end of a transaction begun under an epoch carries a
/// higher one, and a marker under the batches' own epoch ends the transaction before
/// theirs (whose markers a version 2 producer does not wait for). Under version 1 the
/// epoch does not move, and a marker under it may end theirs.
fn voids(guard_epoch: i16, version2: bool, marker_epoch: i16) -> bool {
    guard_epoch < marker_epoch || (guard_epoch == marker_epoch && !version2)
}

impl Guards {
    /// Takes the guard of `key`, shared with the requests holding it already: its
    /// token, and this holder's turn after them.
    fn take(&self, key: GuardKey, version2: bool) -> (u64, Turn) {
        let mut live = self.live.borrow_mut();
        let mine = Rc::new(Step::default());
        let mut previous = None;
        let guard = live
            .entry(key)
            .and_modify(|g| previous = Some(std::mem::replace(&mut g.last, mine.clone())))
            .or_insert_with(|| {
                let token = self.next.get() + 1;
                self.next.set(token);
                Guard {
                    token,
                    holders: 0,
                    version2,
                    last: mine.clone(),
                }
            });
        guard.holders += 1;
        // A version 1 holder makes it void under its own epoch's marker too.
        guard.version2 &= version2;
        (guard.token, Turn { mine, previous })
    }

    /// Removes the guards of `producer_id` in `tp` that a marker under `epoch` voids.
    fn void(&self, tp: &TopicPartition, producer_id: i64, epoch: i16) {
        self.live
            .borrow_mut()
            .retain(|(t, p, e), g| !(t == tp && *p == producer_id && voids(*e, g.version2, epoch)));
    }

    /// Whether the guard `token` of `key` still holds (no marker came since it was
    /// taken that voids it), and lets it go: the last holder removes it.
    fn release(&self, key: &GuardKey, token: u64) -> bool {
        let mut live = self.live.borrow_mut();
        let Some(guard) = live.get_mut(key).filter(|g| g.token == token) else {
            return false;
        };
        guard.holders -= 1;
        if guard.holders == 0 {
            live.remove(key);
        }
        true
    }
}

impl Shard {
    /// The producer id and epoch of `records` if it is a transactional batch that must
    /// go through the coordinator's check: one that would open its producer's
    /// transaction in `log` (none open there yet under its epoch), or one that follows
    /// batches of that producer still being checked there (it takes its turn after
    /// them, `Turn`).
    pub(super) fn needs_verification(
        &self,
        tp: &TopicPartition,
        log: &Partition,
        records: &[u8],
    ) -> Option<ProducerIdEpoch> {
        let h = BatchHeader::parse(records).ok()?;
        if !h.is_transactional() || h.is_control() || h.producer_id < 0 {
            return None;
        }
        let opens = log
            .log()
            .open_transaction(h.producer_id, h.producer_epoch)
            .is_none();
        let behind = || {
            self.txn_guards.live.borrow().contains_key(&(
                tp.clone(),
                h.producer_id,
                h.producer_epoch,
            ))
        };
        (opens || behind()).then(|| ProducerIdEpoch::new(h.producer_id, h.producer_epoch))
    }
}

/// Whether a transactional write of a request under `mode` is checked with the
/// coordinator: always under transaction version 2, whose producers never add partitions
/// themselves (the leader's add is the only one), else as `verify_partitions` says.
pub(super) fn must_verify(mode: VerifyMode, verify_partitions: bool) -> bool {
    mode == VerifyMode::AddPartition || verify_partitions
}

type Appended = Result<(Rc<Partition>, AppendTicket), PartitionError>;

/// Batches awaiting verification by producer (id, epoch): input index and partition.
type ByProducer = BTreeMap<(i64, i16), Vec<(usize, Rc<Partition>)>>;

impl Shard {
    /// A marker of `producer_id` under `epoch` was appended in `tp`: the guards of the
    /// verifications it may have ended the transaction of no longer hold (`voids`).
    pub(super) fn clear_txn_guard(&self, tp: &TopicPartition, producer_id: i64, epoch: i16) {
        self.txn_guards.void(tp, producer_id, epoch);
    }

    /// Verifies the batches at `unverified` (input index, partition, producer) of a
    /// produce with the coordinator and appends those confirmed whose guard still holds;
    /// the outcome of each, by input index.
    pub(super) async fn verify_and_append(
        &self,
        txn: &ProduceTxn,
        inputs: &[ProduceInput],
        unverified: Vec<(usize, Rc<Partition>, ProducerIdEpoch)>,
    ) -> Vec<(usize, Appended)> {
        // One question per producer (a request comes from one producer, but nothing on
        // the wire says so).
        let mut by_producer = ByProducer::new();
        for (i, log, p) in unverified {
            by_producer
                .entry((p.producer_id, p.epoch))
                .or_default()
                .push((i, log));
        }
        let mode = VerifyMode::for_produce(txn.version);
        debug_assert!(must_verify(mode, self.config.txns.verify_partitions));
        let mut out = Vec::new();
        for ((producer_id, epoch), batches) in by_producer {
            let producer = ProducerIdEpoch::new(producer_id, epoch);
            let mut guards = Vec::with_capacity(batches.len());
            let mut partitions = BTreeSet::new();
            for (i, _) in &batches {
                let tp = inputs[*i].tp.clone();
                guards.push(
                    self.txn_guards
                        .take((tp.clone(), producer_id, epoch), !mode.verify_only()),
                );
                partitions.insert((tp.topic.to_string(), tp.partition));
            }
            let answers = self
                .verify(&txn.transactional_id, producer, &partitions, mode)
                .await;
            for ((i, log), (token, turn)) in batches.into_iter().zip(guards) {
                let tp = &inputs[i].tp;
                let key = (tp.topic.to_string(), tp.partition);
                let verdict = match &answers {
                    Err(e) => Err(*e),
                    Ok(map) => match map.get(&key) {
                        Some(None) => Ok(()),
                        Some(Some(e)) => Err(*e),
                        None => Err(TxnError::UnknownServerError),
                    },
                };
                // An earlier request's batch refused: this one, of later sequences, may
                // not go first; the producer sends both again (retriable).
                let in_order = turn.previous_appended().await;
                let held = self
                    .txn_guards
                    .release(&(tp.clone(), producer_id, epoch), token);
                let r = match verdict {
                    Err(e) => Err(PartitionError::Unverified(mode.error_for_producer(e))),
                    Ok(()) if !in_order => {
                        Err(PartitionError::Unverified(TxnError::ConcurrentTransactions))
                    }
                    Ok(()) if !held => Err(PartitionError::Unverified(TxnError::InvalidTxnState)),
                    Ok(()) if !log.is_leader() => Err(PartitionError::NotLeaderOrFollower),
                    Ok(()) => log
                        .append(&inputs[i].records)
                        .map(|t| (log.clone(), t))
                        .map_err(PartitionError::from),
                };
                turn.finish(r.is_ok());
                out.push((i, r));
            }
        }
        out
    }

    /// TxnOffsetCommit's check before the group coordinator writes the offsets (Kafka's
    /// `maybeStartTransactionVerificationForPartition` on the group's offsets partition):
    /// if the producer has no transaction open there under its epoch, the coordinator is
    /// asked whether the partition is in the transaction (or, under version 2, adds it),
    /// and the group coordinator is asked to write only if no marker came meanwhile.
    /// Runs on the shard that owns the group's offsets partition.
    pub(super) async fn txn_commit_verified(self: &Rc<Self>, req: TxnCommitRequest) -> GroupAnswer {
        let n = req.offsets.len();
        if !self.groups.serves_group(&req.group) {
            // Answered as not coordinated here, before anything joins a transaction.
            return self
                .groups
                .handle(
                    GroupOp::TxnCommit(req),
                    &crate::group::consumer::catalog::NoTopics,
                    |_| None,
                )
                .await;
        }
        let mode = VerifyMode::for_txn_offset_commit(req.version);
        let partition = self.groups.offsets_partition(&req.group);
        let tp = offsets_tp(partition);
        let producer = ProducerIdEpoch::new(req.producer_id, req.producer_epoch);
        let already_open = self.partition(&tp).is_some_and(|log| {
            log.log()
                .open_transaction(producer.producer_id, producer.epoch)
                .is_some()
        });
        let token =
            (!already_open && must_verify(mode, self.config.txns.verify_partitions)).then(|| {
                self.txn_guards.take(
                    (tp.clone(), producer.producer_id, producer.epoch),
                    !mode.verify_only(),
                )
            });
        // One TxnOffsetCommit at a time per producer (the client waits for each), so its
        // turn is not waited on.
        if let Some((token, _turn)) = token {
            let asked = BTreeSet::from([(OFFSETS_TOPIC.to_string(), partition)]);
            let verdict = self
                .verify(&req.transactional_id, producer, &asked, mode)
                .await
                .and_then(|m| match m.values().next() {
                    Some(None) => Ok(()),
                    Some(Some(e)) => Err(*e),
                    None => Err(TxnError::UnknownServerError),
                });
            let held = self
                .txn_guards
                .release(&(tp.clone(), producer.producer_id, producer.epoch), token);
            let refusal = match verdict {
                Err(e) => Some(group_error(mode.error_for_producer(e))),
                Ok(()) if !held => Some(GroupError::InvalidTxnState),
                Ok(()) => None,
            };
            if let Some(e) = refusal {
                return GroupAnswer::Commit(vec![Err(e); n]);
            }
        }
        // No await between the guard's release and the append: the group coordinator
        // appends the offsets' batch before its first wait, so no marker of this
        // producer can land in between.
        let shard = self.clone();
        self.groups
            .handle(
                GroupOp::TxnCommit(req),
                &crate::group::consumer::catalog::NoTopics,
                move |p| shard.partition(&offsets_tp(p)),
            )
            .await
    }

    /// Asks `transactional_id`'s coordinator about `partitions` for `producer`: under
    /// `mode` AddPartition it adds them to the transaction (transaction version 2), else
    /// it says whether they are in the ongoing transaction. Per partition `None` if
    /// they are (now).
    ///
    /// CONCURRENT_TRANSACTIONS comes back only after the coordinator waited for the
    /// transition in the way (`TxnCoordinator::until_settled`); the producer retries.
    async fn verify(
        &self,
        transactional_id: &str,
        producer: ProducerIdEpoch,
        partitions: &BTreeSet<TxnPartition>,
        mode: VerifyMode,
    ) -> Result<BTreeMap<TxnPartition, Option<TxnError>>, TxnError> {
        let meta = self.metadata.snapshot();
        let coordinator = meta
            .partition(TRANSACTION_TOPIC, self.txns.partition_of(transactional_id))
            .map_or(-1, |p| p.leader);
        if coordinator < 0 {
            return Err(TxnError::CoordinatorNotAvailable);
        }
        if coordinator == self.config.node_id {
            let op = TxnOp::AddPartitions {
                transactional_id: transactional_id.to_owned(),
                producer,
                partitions: partitions.clone(),
                mode: if mode.verify_only() {
                    AddMode::Verify
                } else {
                    AddMode::Implicit
                },
            };
            let (tx, rx) = oneshot::channel();
            let target = self.txn_coordinator_of(transactional_id);
            return match self
                .peers
                .call(target, ShardMessage::Txn { op, reply: tx }, rx)
                .await
            {
                Some(TxnAnswer::Verified(r)) => r,
                Some(TxnAnswer::Added(r)) => {
                    r.map(|()| partitions.iter().map(|p| (p.clone(), None)).collect())
                }
                Some(_) => Err(TxnError::UnknownServerError),
                None => Err(TxnError::CoordinatorNotAvailable),
            };
        }
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            topics.entry(t.as_str()).or_default().push(*p);
        }
        let mut txn = AddPartitionsToTxnTransaction::default();
        txn.transactional_id = TransactionalId(StrBytes::from_string(transactional_id.to_owned()));
        txn.producer_id = ProducerId(producer.producer_id);
        txn.producer_epoch = producer.epoch;
        txn.verify_only = mode.verify_only();
        for (t, ps) in topics {
            let mut topic = AddPartitionsToTxnTopic::default();
            topic.name = TopicName(StrBytes::from_string(t.to_owned()));
            topic.partitions = ps;
            txn.topics.push(topic);
        }
        let mut req = AddPartitionsToTxnRequest::default();
        req.transactions.push(txn);
        let resp: AddPartitionsToTxnResponse = self
            .txns
            .links()
            .ask(
                coordinator,
                &meta,
                ApiKey::AddPartitionsToTxn,
                VERIFY_VERSION,
                &req,
            )
            .await
            .ok_or(TxnError::CoordinatorNotAvailable)?;
        if let Some(e) = TxnError::from_code(resp.error_code) {
            return Err(e);
        }
        let mut out = BTreeMap::new();
        for r in resp.results_by_transaction {
            for t in r.topic_results {
                for p in t.results_by_partition {
                    let e = (p.partition_error_code != 0).then(|| {
                        TxnError::from_code(p.partition_error_code)
                            .unwrap_or(TxnError::UnknownServerError)
                    });
                    out.insert((t.name.0.to_string(), p.partition_index), e);
                }
            }
        }
        Ok(out)
    }
}

/// The group error a TxnOffsetCommit is answered for the coordinator's `err` (already
/// as `VerifyMode::error_for_producer` made it for the client's version). A coordinator
/// that cannot answer now is COORDINATOR_NOT_AVAILABLE, which the producer retries after
/// finding the group coordinator again (Kafka's group coordinator turns the
/// NOT_ENOUGH_REPLICAS of a failed verification into the same).
fn group_error(err: TxnError) -> GroupError {
    match err {
        TxnError::CoordinatorLoadInProgress
        | TxnError::CoordinatorNotAvailable
        | TxnError::NotCoordinator
        | TxnError::ConcurrentTransactions => GroupError::CoordinatorNotAvailable,
        TxnError::InvalidProducerEpoch | TxnError::ProducerFenced => {
            GroupError::InvalidProducerEpoch
        }
        TxnError::TransactionAbortable => GroupError::TransactionAbortable,
        TxnError::InvalidProducerIdMapping => GroupError::InvalidProducerIdMapping,
        _ => GroupError::InvalidTxnState,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition {
            topic: "t".into(),
            partition: p,
        }
    }

    fn key(p: i32) -> GuardKey {
        (tp(p), 7, 3)
    }

    #[test]
    fn pipelined_requests_share_one_guard_until_the_last_is_done() {
        let g = Guards::default();
        let (a, _) = g.take(key(0), false);
        let (b, _) = g.take(key(0), false);
        assert_eq!(a, b, "a second request in flight takes the same guard");
        assert!(g.release(&key(0), a), "the first holds");
        assert!(
            g.release(&key(0), b),
            "so does the second: nothing ended meanwhile"
        );
        assert!(g.live.borrow().is_empty(), "the last holder removes it");
        let (c, _) = g.take(key(0), false);
        assert_ne!(c, a, "a later verification gets a new guard");
    }

    #[test]
    fn a_marker_voids_every_holder() {
        let g = Guards::default();
        let (a, _) = g.take(key(1), false);
        let (b, _) = g.take(key(1), false);
        // The transaction ended (a version 1 marker under the batches' epoch).
        g.void(&tp(1), 7, 3);
        assert!(!g.release(&key(1), a));
        assert!(!g.release(&key(1), b));
        // A new guard after the marker is not the old one.
        let (c, _) = g.take(key(1), false);
        assert!(
            !g.release(&key(1), a),
            "an old token never matches a new guard"
        );
        assert!(g.release(&key(1), c));
    }

    #[test]
    fn under_version_2_only_a_marker_under_a_later_epoch_voids() {
        let g = Guards::default();
        let (a, _) = g.take(key(2), true);
        // The last transaction's marker, under the epoch its end bumped to: the one the
        // batches of the next transaction carry.
        g.void(&tp(2), 7, 3);
        // Markers of other partitions and producers change nothing either.
        g.void(&tp(1), 7, 9);
        g.void(&tp(2), 8, 9);
        assert!(g.release(&key(2), a), "the next transaction's guard holds");
        let (b, _) = g.take(key(2), true);
        // The end of the verified transaction itself bumps again.
        g.void(&tp(2), 7, 4);
        assert!(!g.release(&key(2), b));
        // A version 1 holder sharing the guard makes its own epoch's marker void it.
        let (c, _) = g.take(key(2), true);
        let (d, _) = g.take(key(2), false);
        g.void(&tp(2), 7, 3);
        assert!(!g.release(&key(2), c) && !g.release(&key(2), d));
    }

    #[test]
    fn holders_append_in_the_order_they_took_the_guard() {
        let g = Guards::default();
        let (_, first) = g.take(key(3), true);
        let (_, second) = g.take(key(3), true);
        let (_, third) = g.take(key(3), true);
        assert!(futures::executor::block_on(first.previous_appended()));
        first.finish(true);
        assert!(futures::executor::block_on(second.previous_appended()));
        // The second is dropped unfinished (its request went away): refused, so the
        // third, of later sequences, may not append either.
        drop(second);
        assert!(!futures::executor::block_on(third.previous_appended()));
    }

    #[test]
    fn voiding_follows_the_epochs() {
        assert!(voids(3, false, 3) && voids(3, true, 4) && voids(3, false, 4));
        assert!(!voids(3, true, 3) && !voids(3, false, 2) && !voids(3, true, 2));
    }
}

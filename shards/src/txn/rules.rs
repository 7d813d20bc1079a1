//! The transaction coordinator's decisions: what each request does to a transactional
//! id's state, as Apache Kafka 4.x's `TransactionCoordinator` and `TransactionMetadata`
//! decide it.
//!
//! Every function here is pure: it reads a `TxnMetadata` (or its absence) and the
//! request, and answers either a `TxnError` (which maps to the Kafka error code the client
//! is sent) or the `Transit` to prepare together with what the caller does once it is
//! durable. Nothing is written and nothing waits here; the caller prepares the transit
//! (`TxnMetadata::prepare`), writes its record to `__transaction_state`, and then applies
//! it (`complete`) or drops it (`abandon`), answering the client as the decision says.
//!
//! Decided here:
//! - InitProducerId (`init_producer_id`): a new id, an epoch bump, the fence of an
//!   ongoing transaction, a new producer id when the epoch runs out, KIP-360's recovery
//!   with the client's expected producer id and epoch, the timeout's validation;
//! - AddPartitionsToTxn (`add_partitions`, its verify-only form `verify_partitions`),
//!   AddOffsetsToTxn (`add_offsets`), and version 2's implicit add by a produce
//!   (`add_for_produce`);
//! - EndTxn (`end_txn`) under transaction versions 1 and 2, its completion once the
//!   markers are written (`complete_end`, `markers`);
//! - the coordinator's own aborts of timed out transactions (`abort_timed_out`) and the
//!   expiry of idle ids (`expire`);
//! - which error an older client is sent instead of a newer one (`TxnApi`, `VerifyMode`).
//!
//! Invariants:
//! - a request is refused with CONCURRENT_TRANSACTIONS while a transition is pending, so
//!   every transit is built from the durable state it will follow;
//! - every transit returned passes `TxnMetadata::prepare` and `complete` on the metadata
//!   it was decided from (the unit tests drive each one through both);
//! - an epoch a client is told is at most 32766 (`EPOCH_EXHAUSTED_AT`): past it the id
//!   moves to a new producer id at epoch 0, so the coordinator can always fence;
//! - a retry of a request whose answer was lost gets the same answer: InitProducerId
//!   with the epoch it was given before (KIP-360), EndTxn of an end already made.
//!
//! Producer ids come from the caller's `allocate` closure, called at most once and only
//! when a new id is needed. Kafka answers COORDINATOR_LOAD_IN_PROGRESS when its id
//! manager has no id at hand (the client retries), so a caller whose allocation is async
//! can fail the closure that way and refill meanwhile.
//!
//! Where Kafka's versions differ, this follows the 4.x trunk behaviour (4.3): a pending
//! transition is checked first on AddPartitionsToTxn, a version 2 fence rotates the
//! producer id when the epoch ran out, and EndTxn's answer carries the producer id and
//! epoch of the completed state. Deliberate differences, each so that the state never
//! breaks an invariant of `state`: a request under epoch 32767 (never handed out) is
//! fenced, and a failed fence write is not remembered (`hasFailedEpochFence`): the next
//! fence is computed again from the durable epoch, which gives the same epoch.
//!
//! Not here: the two-phase-commit extension (KIP-939), authorization, the lookup of the
//! id's partition and loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS come from
//! the caller), the marker requests themselves, and ListTransactions/DescribeTransactions.

use super::log_record::{encode_key, TxnRecordError};
use super::state::{Transit, TxnMetadata, TxnPartition, TxnState, EPOCH_EXHAUSTED_AT};
use crate::group::{partition_for_group, OFFSETS_TOPIC};
use std::collections::{BTreeMap, BTreeSet};
use TxnState::*;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Kafka's `transaction.max.timeout.ms` default (15 minutes).
pub const MAX_TIMEOUT_MS_DEFAULT: i32 = 15 * 60 * 1000;
/// Kafka's `transactional.id.expiration.ms` default (7 days).
pub const ID_EXPIRATION_MS_DEFAULT: i64 = 7 * 24 * 60 * 60 * 1000;

/// Why a request is refused, as the Kafka error the client is sent (`code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TxnError {
    /// Kafka's answer to a coordinator bug (an `IllegalStateException`).
    #[error("UNKNOWN_SERVER_ERROR")]
    UnknownServerError,
    #[error("COORDINATOR_LOAD_IN_PROGRESS")]
    CoordinatorLoadInProgress,
    #[error("COORDINATOR_NOT_AVAILABLE")]
    CoordinatorNotAvailable,
    #[error("NOT_COORDINATOR")]
    NotCoordinator,
    #[error("INVALID_REQUEST")]
    InvalidRequest,
    /// What clients before PRODUCER_FENCED are sent instead (see `TxnApi`).
    #[error("INVALID_PRODUCER_EPOCH")]
    InvalidProducerEpoch,
    #[error("INVALID_TXN_STATE")]
    InvalidTxnState,
    #[error("INVALID_PRODUCER_ID_MAPPING")]
    InvalidProducerIdMapping,
    #[error("INVALID_TRANSACTION_TIMEOUT")]
    InvalidTransactionTimeout,
    #[error("CONCURRENT_TRANSACTIONS")]
    ConcurrentTransactions,
    #[error("OPERATION_NOT_ATTEMPTED")]
    OperationNotAttempted,
    #[error("PRODUCER_FENCED")]
    ProducerFenced,
    #[error("TRANSACTIONAL_ID_NOT_FOUND")]
    TransactionalIdNotFound,
    #[error("TRANSACTION_ABORTABLE")]
    TransactionAbortable,
}

impl TxnError {
    /// The code in Kafka's `Errors.java`.
    pub fn code(self) -> i16 {
        match self {
            TxnError::UnknownServerError => -1,
            TxnError::CoordinatorLoadInProgress => 14,
            TxnError::CoordinatorNotAvailable => 15,
            TxnError::NotCoordinator => 16,
            TxnError::InvalidRequest => 42,
            TxnError::InvalidProducerEpoch => 47,
            TxnError::InvalidTxnState => 48,
            TxnError::InvalidProducerIdMapping => 49,
            TxnError::InvalidTransactionTimeout => 50,
            TxnError::ConcurrentTransactions => 51,
            TxnError::OperationNotAttempted => 55,
            TxnError::ProducerFenced => 90,
            TxnError::TransactionalIdNotFound => 105,
            TxnError::TransactionAbortable => 120,
        }
    }

    pub fn from_code(code: i16) -> Option<TxnError> {
        ALL_ERRORS.into_iter().find(|e| e.code() == code)
    }
}

const ALL_ERRORS: [TxnError; 14] = [
    TxnError::UnknownServerError,
    TxnError::CoordinatorLoadInProgress,
    TxnError::CoordinatorNotAvailable,
    TxnError::NotCoordinator,
    TxnError::InvalidRequest,
    TxnError::InvalidProducerEpoch,
    TxnError::InvalidTxnState,
    TxnError::InvalidProducerIdMapping,
    TxnError::InvalidTransactionTimeout,
    TxnError::ConcurrentTransactions,
    TxnError::OperationNotAttempted,
    TxnError::ProducerFenced,
    TxnError::TransactionalIdNotFound,
    TxnError::TransactionAbortable,
];

/// The coordinator's settings these decisions read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest timeout a client may ask for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: how long an idle id is kept.
    pub id_expiration_ms: i64,
    /// Whether the cluster's finalized `transaction.version` is 2 or more. The
    /// coordinator's own aborts (a fence, a timeout) follow it, not the client's version:
    /// under 2 they end with one more epoch bump, as a version 2 client's end does.
    pub server_tv2: bool,
}

impl TxnConfig {
    pub fn kafka_defaults(server_tv2: bool) -> Self {
        TxnConfig {
            max_timeout_ms: MAX_TIMEOUT_MS_DEFAULT,
            id_expiration_ms: ID_EXPIRATION_MS_DEFAULT,
            server_tv2,
        }
    }
}

/// A producer id and epoch, as a request carries them or an answer gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

impl ProducerIdEpoch {
    pub const NONE: ProducerIdEpoch = ProducerIdEpoch {
        producer_id: NO_PRODUCER_ID,
        epoch: NO_PRODUCER_EPOCH,
    };

    pub fn new(producer_id: i64, epoch: i16) -> Self {
        ProducerIdEpoch { producer_id, epoch }
    }
}

/// Whether an epoch may no longer be bumped for a client: one more bump must stay
/// possible for the coordinator to fence it.
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= EPOCH_EXHAUSTED_AT
}

/// A transit from the current state to `state`: everything kept, the previous producer
/// id set to the current one (Kafka sets it on every transition), updated at `now_ms`.
fn transit_from(meta: &TxnMetadata, state: TxnState, now_ms: i64) -> Transit {
    let mut t = meta.current.clone();
    t.state = state;
    t.previous_producer_id = meta.current.producer_id;
    t.update_ms = now_ms;
    t
}

// ---------------------------------------------------------------------------------------
// InitProducerId

/// The producer id and epoch an InitProducerId request (v3+) expects to resume from:
/// none when both are -1, INVALID_REQUEST when only one is (Kafka's `KafkaApis`).
pub fn expected_producer(
    producer_id: i64,
    epoch: i16,
) -> Result<Option<ProducerIdEpoch>, TxnError> {
    match (producer_id == NO_PRODUCER_ID, epoch == NO_PRODUCER_EPOCH) {
        (true, true) => Ok(None),
        (false, false) => Ok(Some(ProducerIdEpoch::new(producer_id, epoch))),
        _ => Err(TxnError::InvalidRequest),
    }
}

/// A timeout a client may ask for: positive and at most `transaction.max.timeout.ms`.
pub fn validate_timeout(timeout_ms: i32, max_timeout_ms: i32) -> Result<(), TxnError> {
    if timeout_ms > 0 && timeout_ms <= max_timeout_ms {
        Ok(())
    } else {
        Err(TxnError::InvalidTransactionTimeout)
    }
}

/// InitProducerId without a transactional id (an idempotent producer): a new producer
/// id at epoch 0, whatever else the request says.
pub fn init_idempotent(
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<ProducerIdEpoch, TxnError> {
    Ok(ProducerIdEpoch::new(allocate()?, 0))
}

/// What InitProducerId does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitAction {
    /// Write this Empty transit; once durable answer its producer id and epoch.
    Answer(Transit),
    /// The id's transaction is ongoing: write this PrepareAbort (the transaction aborted
    /// under a fenced epoch, never told to anyone), then its markers and completion as
    /// for `end_txn`. The client is answered CONCURRENT_TRANSACTIONS once the write is
    /// durable (or the write's error): it retries, and its retry bumps the epoch again.
    FenceOngoing(Transit),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitDecision {
    /// For an id not known yet: the metadata to put in the cache first (its producer
    /// id just allocated, epoch -1, Empty, nothing written), on which `action`'s transit
    /// is then prepared. Kafka keeps it even if the write fails; its next InitProducerId
    /// starts again from epoch -1.
    pub created: Option<TxnMetadata>,
    pub action: InitAction,
}

/// InitProducerId with a transactional id. `meta` is the id's metadata if the
/// coordinator has it; `expected` the producer a v3+ client resumes from
/// (`expected_producer`).
///
/// | state                  | answer                                                    |
/// |------------------------|-----------------------------------------------------------|
/// | pending transition     | CONCURRENT_TRANSACTIONS                                   |
/// | `expected` unknown     | PRODUCER_FENCED                                           |
/// | PrepareCommit/Abort    | CONCURRENT_TRANSACTIONS                                   |
/// | Empty, Complete*       | epoch + 1 (new producer id at 0 if the epoch ran out)     |
/// | Ongoing                | fence and abort, CONCURRENT_TRANSACTIONS (`FenceOngoing`) |
pub fn init_producer_id(
    meta: Option<&TxnMetadata>,
    transactional_id: &str,
    timeout_ms: i32,
    expected: Option<ProducerIdEpoch>,
    cfg: &TxnConfig,
    now_ms: i64,
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<InitDecision, TxnError> {
    // Kafka's producer refuses an empty id itself; the coordinator answers the same way.
    if transactional_id.is_empty() {
        return Err(TxnError::InvalidRequest);
    }
    validate_timeout(timeout_ms, cfg.max_timeout_ms)?;
    match meta {
        Some(meta) => Ok(InitDecision {
            created: None,
            action: init_existing(meta, timeout_ms, expected, cfg, now_ms, allocate)?,
        }),
        None => {
            let created = TxnMetadata::new(transactional_id, allocate()?, timeout_ms, now_ms);
            // Epoch -1 is never exhausted and an Empty id is never fenced, so the
            // allocator is not needed again.
            let action = init_existing(&created, timeout_ms, expected, cfg, now_ms, || {
                Err(TxnError::UnknownServerError)
            })?;
            Ok(InitDecision {
                created: Some(created),
                action,
            })
        }
    }
}

fn init_existing(
    meta: &TxnMetadata,
    timeout_ms: i32,
    expected: Option<ProducerIdEpoch>,
    cfg: &TxnConfig,
    now_ms: i64,
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<InitAction, TxnError> {
    let cur = &meta.current;
    if meta.pending.is_some() {
        return Err(TxnError::ConcurrentTransactions);
    }
    if let Some(exp) = expected {
        // KIP-360: a client may resume only as the id's current producer, as any
        // producer of an id just created (epoch -1: it recovers from
        // UNKNOWN_PRODUCER_ID), or as the previous producer id whose exhausted epoch
        // this coordinator rotated away from (a retry of that rotation).
        let known = cur.producer_epoch == NO_PRODUCER_EPOCH
            || exp.producer_id == cur.producer_id
            || (exp.producer_id == cur.previous_producer_id && is_epoch_exhausted(exp.epoch));
        if !known {
            return Err(TxnError::ProducerFenced);
        }
    }
    match cur.state {
        PrepareCommit | PrepareAbort => Err(TxnError::ConcurrentTransactions),
        Empty | CompleteCommit | CompleteAbort => {
            let mut t = transit_from(meta, Empty, now_ms);
            t.timeout_ms = timeout_ms;
            t.partitions = BTreeSet::new();
            t.start_ms = -1;
            if is_epoch_exhausted(cur.producer_epoch) {
                if expected.is_some_and(|e| e.epoch != cur.producer_epoch) {
                    // Kafka reaches an IllegalStateException here (no epoch left to bump
                    // for an epoch it did not give), answered UNKNOWN_SERVER_ERROR.
                    return Err(TxnError::UnknownServerError);
                }
                t.producer_id = allocate()?;
                t.producer_epoch = 0;
                // With an expected epoch the old epoch is kept, so that a retry of this
                // request (old id, old epoch) is recognised and given the same answer.
                t.last_producer_epoch = match expected {
                    Some(_) => cur.producer_epoch,
                    None => NO_PRODUCER_EPOCH,
                };
            } else {
                // Not exhausted: at most 32765, so one more cannot overflow.
                let bumped = cur.producer_epoch + 1;
                let (epoch, last) = match expected {
                    // A new instance: it fences every older one, so no last epoch is
                    // kept that an older one could resume with.
                    None => (bumped, NO_PRODUCER_EPOCH),
                    // The current producer resumes after an error (or the id is new).
                    Some(e)
                        if cur.producer_epoch == NO_PRODUCER_EPOCH
                            || e.epoch == cur.producer_epoch =>
                    {
                        (bumped, cur.producer_epoch)
                    }
                    // A retry of a bump whose answer was lost: the same epoch again.
                    // No other instance came since, or it would have cleared the last.
                    Some(e) if e.epoch == cur.last_producer_epoch => {
                        (cur.producer_epoch, cur.last_producer_epoch)
                    }
                    Some(_) => return Err(TxnError::ProducerFenced),
                };
                t.producer_epoch = epoch;
                t.last_producer_epoch = last;
            }
            Ok(InitAction::Answer(t))
        }
        // The epoch this bumps to is never told: the client's retry bumps it once more
        // (and moves to a new producer id if that runs out).
        Ongoing => Ok(InitAction::FenceOngoing(fence_and_abort(
            meta,
            cfg.server_tv2,
            now_ms,
            allocate,
        )?)),
        // Never a committed state (`state` checks it): Kafka treats it as a bug.
        Dead | PrepareEpochFence => Err(TxnError::UnknownServerError),
    }
}

/// The PrepareAbort with which the coordinator ends an ongoing transaction itself (an
/// InitProducerId from a new instance, or a timeout): the epoch is bumped first so that
/// the producer that ran it is fenced (Kafka's PrepareEpochFence, which is never
/// written), then the abort is prepared under the coordinator's transaction version.
fn fence_and_abort(
    meta: &TxnMetadata,
    server_tv2: bool,
    now_ms: i64,
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<Transit, TxnError> {
    let cur = &meta.current;
    // At 32767 already (a bug elsewhere) Kafka does not bump, rather than overflow.
    let fenced = cur.producer_epoch.saturating_add(1);
    let mut t = transit_from(meta, PrepareAbort, now_ms);
    t.next_producer_id = NO_PRODUCER_ID;
    if server_tv2 {
        // Version 2: the fence's bump is the end's (Kafka 4.4 bumps once, measured by
        // benches/txn_abort_against_kafka.py), and the client's epoch is the last, so
        // that its own abort of the transaction, arriving after this one, is taken as
        // a retry of it and answered with the epoch to go on with, not fenced. When the
        // epoch ran out the completion moves to a new producer id, so the next one to
        // use it does not start at 32767.
        if is_epoch_exhausted(cur.producer_epoch) {
            t.next_producer_id = allocate()?;
        }
        t.producer_epoch = fenced;
        t.last_producer_epoch = cur.producer_epoch;
        t.tv2 = true;
    } else {
        // The fence cleared the last epoch: nobody may resume with an older one.
        t.producer_epoch = fenced;
        t.last_producer_epoch = NO_PRODUCER_EPOCH;
        t.tv2 = false;
    }
    Ok(t)
}

// ---------------------------------------------------------------------------------------
// AddPartitionsToTxn, AddOffsetsToTxn, the implicit add

/// What adding partitions does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddDecision {
    /// Every partition is already in the ongoing transaction: answer OK now, nothing to
    /// write.
    AlreadyAdded,
    /// Write this Ongoing transit; once durable answer OK.
    Prepare(Transit),
}

/// AddPartitionsToTxn (`tv2`: the add comes from a version 2 client, i.e. request
/// version 4+ without verifyOnly, sent by a partition leader for a produce; see
/// `TxnApi::is_tv2`). Checked in Kafka's order: no metadata or another producer id:
/// INVALID_PRODUCER_ID_MAPPING; a pending transition: CONCURRENT_TRANSACTIONS (first, as a
/// version 2 end may be moving to a new producer id); another epoch: PRODUCER_FENCED;
/// Prepare*: CONCURRENT_TRANSACTIONS. Otherwise the partitions join the transaction,
/// which starts now if it was Empty or completed.
pub fn add_partitions(
    meta: Option<&TxnMetadata>,
    producer: ProducerIdEpoch,
    partitions: &BTreeSet<TxnPartition>,
    tv2: bool,
    now_ms: i64,
) -> Result<AddDecision, TxnError> {
    let meta = meta.ok_or(TxnError::InvalidProducerIdMapping)?;
    let cur = &meta.current;
    if meta.pending.is_some() {
        return Err(TxnError::ConcurrentTransactions);
    }
    if cur.producer_id != producer.producer_id {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if cur.producer_epoch != producer.epoch {
        return Err(TxnError::ProducerFenced);
    }
    if cur.producer_epoch < 0 {
        // An id whose first InitProducerId was never written: no producer has it.
        // Kafka's transition refuses epoch -1 with an IllegalArgumentException.
        return Err(TxnError::UnknownServerError);
    }
    if cur.producer_epoch > EPOCH_EXHAUSTED_AT {
        // 32767 is only the epoch of an ended transaction, never one a client was
        // given (Kafka would accept it and could overflow at the next end).
        return Err(TxnError::ProducerFenced);
    }
    match cur.state {
        PrepareCommit | PrepareAbort => Err(TxnError::ConcurrentTransactions),
        Ongoing if partitions.is_subset(&cur.partitions) => Ok(AddDecision::AlreadyAdded),
        Empty | CompleteCommit | CompleteAbort | Ongoing => {
            let mut t = transit_from(meta, Ongoing, now_ms);
            if cur.state != Ongoing {
                t.start_ms = now_ms;
                t.partitions = BTreeSet::new();
            }
            t.partitions.extend(partitions.iter().cloned());
            t.tv2 = tv2;
            Ok(AddDecision::Prepare(t))
        }
        Dead | PrepareEpochFence => Err(TxnError::UnknownServerError),
    }
}

/// AddOffsetsToTxn: adds the group's `__consumer_offsets` partition (`offsets_partitions`
/// is that topic's partition count), as a version 1 add (version 2 clients send
/// TxnOffsetCommit v5+ instead, whose group coordinator adds it through
/// `add_for_produce`).
pub fn add_offsets(
    meta: Option<&TxnMetadata>,
    producer: ProducerIdEpoch,
    group_id: &str,
    offsets_partitions: i32,
    now_ms: i64,
) -> Result<AddDecision, TxnError> {
    let partition = (
        OFFSETS_TOPIC.to_string(),
        partition_for_group(group_id, offsets_partitions),
    );
    add_partitions(meta, producer, &BTreeSet::from([partition]), false, now_ms)
}

/// Transaction version 2's implicit add: a produce (v12+) or TxnOffsetCommit (v5+) for a
/// partition not yet in the transaction has its partition leader send AddPartitionsToTxn
/// (v5, verifyOnly false), which adds it as any add does, marked version 2.
pub fn add_for_produce(
    meta: Option<&TxnMetadata>,
    producer: ProducerIdEpoch,
    partitions: &BTreeSet<TxnPartition>,
    now_ms: i64,
) -> Result<AddDecision, TxnError> {
    add_partitions(meta, producer, partitions, true, now_ms)
}

/// AddPartitionsToTxn v4+ with verifyOnly (KIP-890 part 1): a partition leader asks,
/// before appending a transactional batch, whether its partition is in the ongoing
/// transaction. Per partition: `None` if it is, TRANSACTION_ABORTABLE if not (the leader
/// turns that into INVALID_TXN_STATE for older producers, `VerifyMode`). The error of
/// the whole transaction applies to every partition. A pending transition is not
/// checked: the append itself is checked again against the partition's producer state.
pub fn verify_partitions(
    meta: Option<&TxnMetadata>,
    producer: ProducerIdEpoch,
    partitions: &BTreeSet<TxnPartition>,
) -> Result<BTreeMap<TxnPartition, Option<TxnError>>, TxnError> {
    let meta = meta.ok_or(TxnError::InvalidProducerIdMapping)?;
    let cur = &meta.current;
    if cur.producer_id != producer.producer_id {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if cur.producer_epoch != producer.epoch {
        return Err(TxnError::ProducerFenced);
    }
    if matches!(cur.state, PrepareCommit | PrepareAbort) {
        return Err(TxnError::ConcurrentTransactions);
    }
    Ok(partitions
        .iter()
        .map(|p| {
            let missing = (!cur.partitions.contains(p)).then_some(TxnError::TransactionAbortable);
            (p.clone(), missing)
        })
        .collect())
}

/// The per-partition answer of AddPartitionsToTxn: one outcome for every partition of
/// the transaction (a v0-v3 response holds one transaction; v4+ one result per
/// transaction, each with its partitions).
pub fn answer_all(
    partitions: &BTreeSet<TxnPartition>,
    outcome: Result<(), TxnError>,
) -> BTreeMap<TxnPartition, i16> {
    let code = match outcome {
        Ok(()) => 0,
        Err(e) => e.code(),
    };
    partitions.iter().map(|p| (p.clone(), code)).collect()
}

/// Kafka's check before the coordinator is asked: if any partition fails authorization
/// or does not exist (`failed`, with its error code), nothing is added; the others are
/// answered OPERATION_NOT_ATTEMPTED.
pub fn reject_transaction(
    failed: &BTreeMap<TxnPartition, i16>,
    others: &BTreeSet<TxnPartition>,
) -> BTreeMap<TxnPartition, i16> {
    let mut out = failed.clone();
    for p in others {
        out.entry(p.clone())
            .or_insert(TxnError::OperationNotAttempted.code());
    }
    out
}

// ---------------------------------------------------------------------------------------
// EndTxn

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    Commit,
    Abort,
}

/// What EndTxn does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndDecision {
    /// The end was already made (a retry): answer OK with this producer id and epoch
    /// (-1/-1 under version 1, whose response has no such fields), nothing to write.
    Done(ProducerIdEpoch),
    /// Write this PrepareCommit/PrepareAbort. Once durable answer OK with `answer` (the
    /// producer id and epoch the client goes on with: -1/-1 under version 1), send the
    /// markers (`markers`), and when every partition has its marker write
    /// `complete_end`'s transit (at once if there are no partitions).
    Prepare {
        transit: Transit,
        answer: ProducerIdEpoch,
    },
    /// A version 2 commit that came before its transaction's first add (EARLY in
    /// `end_txn`'s table): answer CONCURRENT_TRANSACTIONS now, without waiting for the
    /// add — the commit has to follow the append of the batch that adds, which only the
    /// client's retry, sent once its batches are answered, ensures.
    BatchesPending,
}

/// EndTxn from a client. `tv2`: the client uses transaction version 2 (EndTxn v5+,
/// `TxnApi::is_tv2`), which ends every transaction under a new epoch.
///
/// Version 1 (the request's epoch must be the current one):
///
/// | state          | Commit                  | Abort                   |
/// |----------------|-------------------------|-------------------------|
/// | Ongoing        | PrepareCommit           | PrepareAbort            |
/// | PrepareCommit  | CONCURRENT_TRANSACTIONS | INVALID_TXN_STATE       |
/// | PrepareAbort   | INVALID_TXN_STATE       | CONCURRENT_TRANSACTIONS |
/// | CompleteCommit | OK (a retry)            | INVALID_TXN_STATE       |
/// | CompleteAbort  | INVALID_TXN_STATE       | OK (a retry)            |
/// | Empty          | INVALID_TXN_STATE       | INVALID_TXN_STATE       |
///
/// Version 2: a retry is a request under the epoch before the current one (the end
/// bumped it; or the old producer id at 32766 after an end moved to a new one). In
/// Ongoing and Empty only the current epoch is valid, in Prepare* and Complete* either;
/// anything else is PRODUCER_FENCED.
///
/// | state          | Abort, retry  | Abort, current | Commit, retry | Commit, current |
/// |----------------|---------------|----------------|---------------|-----------------|
/// | Empty          | FENCED        | PrepareAbort   | FENCED        | EARLY           |
/// | PrepareCommit  | INVALID_STATE | CONCURRENT     | CONCURRENT    | CONCURRENT      |
/// | PrepareAbort   | CONCURRENT    | CONCURRENT     | CONCURRENT    | CONCURRENT      |
/// | CompleteAbort  | OK            | PrepareAbort   | FENCED        | EARLY           |
/// | CompleteCommit | INVALID_STATE | PrepareAbort   | OK            | EARLY           |
///
/// (Ongoing as under version 1.) In Prepare* the current epoch is the client's next
/// transaction, answered to it when this end was prepared: its end waits until this one
/// completes (an abort of records it never sent, say). An abort from Empty or a completed state
/// ends a transaction the client is unsure it started: no partitions, started now.
///
/// A commit under a retry epoch in an abort is one that crossed the coordinator's own
/// abort of a timed out transaction (KAFKA-20785): the client is fenced, which it
/// recovers from (Kafka Streams rebalances), rather than told INVALID_TXN_STATE, which is
/// fatal to it; in PrepareAbort it waits for the abort to complete first, as Kafka's
/// pending completion makes it.
///
/// EARLY (`EndDecision::BatchesPending`): a commit under the current epoch of a
/// transaction nothing was added to yet. The Java producer sends it when its sender
/// thread reads "no incomplete batches" just before the application appends a record and
/// commits (`nextRequest(accumulator.hasIncomplete())` is not atomic): the EndTxn goes
/// out first and the batch, whose produce adds the partition, right after. Kafka answers
/// INVALID_TXN_STATE, which is fatal to the producer; here the client is told
/// CONCURRENT_TRANSACTIONS and sends the commit again once its batches are answered —
/// so the commit is decided after their append, never before it. A transaction with
/// nothing added within its timeout of its last transition is not waiting for a batch:
/// INVALID_TXN_STATE then, as Kafka.
pub fn end_txn(
    meta: Option<&TxnMetadata>,
    producer: ProducerIdEpoch,
    outcome: TxnOutcome,
    tv2: bool,
    now_ms: i64,
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<EndDecision, TxnError> {
    let meta = meta.ok_or(TxnError::InvalidProducerIdMapping)?;
    if tv2 {
        end_txn_v2(meta, producer, outcome, now_ms, allocate)
    } else {
        end_txn_v1(meta, producer, outcome, now_ms)
    }
}

fn prepare_state(outcome: TxnOutcome) -> TxnState {
    match outcome {
        TxnOutcome::Commit => PrepareCommit,
        TxnOutcome::Abort => PrepareAbort,
    }
}

/// The refusal of an end the state cannot take: the same end already in progress is
/// retried later (CONCURRENT_TRANSACTIONS), anything else is INVALID_TXN_STATE.
fn refuse_end(state: TxnState, outcome: TxnOutcome) -> TxnError {
    match (state, outcome) {
        (PrepareCommit, TxnOutcome::Commit) | (PrepareAbort, TxnOutcome::Abort) => {
            TxnError::ConcurrentTransactions
        }
        _ => TxnError::InvalidTxnState,
    }
}

fn end_txn_v1(
    meta: &TxnMetadata,
    producer: ProducerIdEpoch,
    outcome: TxnOutcome,
    now_ms: i64,
) -> Result<EndDecision, TxnError> {
    let cur = &meta.current;
    if cur.producer_id != producer.producer_id {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    // Version 1 clients never bump their epoch themselves: only the current one is valid.
    if producer.epoch != cur.producer_epoch {
        return Err(TxnError::ProducerFenced);
    }
    if meta.pending.is_some() {
        return Err(TxnError::ConcurrentTransactions);
    }
    match (cur.state, outcome) {
        (Ongoing, _) => {
            let mut t = transit_from(meta, prepare_state(outcome), now_ms);
            t.next_producer_id = NO_PRODUCER_ID;
            t.tv2 = false;
            Ok(EndDecision::Prepare {
                transit: t,
                answer: ProducerIdEpoch::NONE,
            })
        }
        (CompleteCommit, TxnOutcome::Commit) | (CompleteAbort, TxnOutcome::Abort) => {
            Ok(EndDecision::Done(ProducerIdEpoch::NONE))
        }
        (Dead | PrepareEpochFence, _) => Err(TxnError::UnknownServerError),
        (state, _) => Err(refuse_end(state, outcome)),
    }
}

fn end_txn_v2(
    meta: &TxnMetadata,
    producer: ProducerIdEpoch,
    outcome: TxnOutcome,
    now_ms: i64,
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<EndDecision, TxnError> {
    let cur = &meta.current;
    // The end was made and moved to a new producer id (its epoch ran out at 32766): the
    // client retries with the old id and epoch, which only the previous id recalls.
    let retry_on_overflow = cur.previous_producer_id == producer.producer_id
        && producer.epoch == EPOCH_EXHAUSTED_AT
        && cur.producer_epoch == 0;
    // The end was made and bumped the epoch: the client retries with the one before.
    let retry_on_bump = i32::from(cur.producer_epoch) == i32::from(producer.epoch) + 1;
    let current = producer.epoch == cur.producer_epoch;
    // The same epoch as the state's is the *next* end, not a retry; and a higher epoch
    // than the state's is a producer this coordinator never gave it to.
    let valid_epoch = match cur.state {
        Ongoing | Empty | Dead | PrepareEpochFence => current,
        // The current epoch is the client's next transaction, whose end waits for this
        // one's (below): the client was answered this epoch when this end was prepared.
        PrepareCommit | PrepareAbort => retry_on_bump || current,
        CompleteCommit | CompleteAbort => retry_on_bump || retry_on_overflow || current,
    };
    let is_retry = retry_on_bump || retry_on_overflow;
    if cur.producer_id != producer.producer_id && !retry_on_overflow {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if !valid_epoch {
        return Err(TxnError::ProducerFenced);
    }
    if meta.pending.is_some() {
        return Err(TxnError::ConcurrentTransactions);
    }
    let here = ProducerIdEpoch::new(cur.producer_id, cur.producer_epoch);
    match (cur.state, outcome) {
        (Ongoing, _) => prepare_v2_end(meta, prepare_state(outcome), false, now_ms, allocate),
        (PrepareCommit | PrepareAbort, _) if current => Err(TxnError::ConcurrentTransactions),
        (CompleteCommit, TxnOutcome::Commit) | (CompleteAbort, TxnOutcome::Abort) if is_retry => {
            Ok(EndDecision::Done(here))
        }
        (CompleteCommit, TxnOutcome::Abort) if is_retry => Err(TxnError::InvalidTxnState),
        (PrepareAbort, TxnOutcome::Commit) => Err(TxnError::ConcurrentTransactions),
        (CompleteAbort, TxnOutcome::Commit) if is_retry => Err(TxnError::ProducerFenced),
        (Empty | CompleteCommit | CompleteAbort, TxnOutcome::Abort) => {
            prepare_v2_end(meta, PrepareAbort, true, now_ms, allocate)
        }
        (Empty | CompleteCommit | CompleteAbort, TxnOutcome::Commit) => {
            debug_assert!(current);
            if now_ms.saturating_sub(cur.update_ms) <= i64::from(cur.timeout_ms) {
                Ok(EndDecision::BatchesPending)
            } else {
                Err(TxnError::InvalidTxnState)
            }
        }
        (Dead | PrepareEpochFence, _) => Err(TxnError::UnknownServerError),
        (state, _) => Err(refuse_end(state, outcome)),
    }
}

/// The partitions an EndTxn may end as the transaction stood when the request reached
/// the coordinator: its partitions if it was Ongoing with no transition being written,
/// else none. An end decided later (it waited for a transition, `until_settled`) covers
/// only these: a partition added while it waited was added for a batch that may not be
/// appended yet — the Java producer sends its commit before a batch it appended just
/// then (EARLY below) — and the end's marker, written first, would refuse that batch
/// (INVALID_TXN_STATE, fatal to the producer). See `end_overtakes_batches`.
pub fn end_may_cover(meta: Option<&TxnMetadata>) -> BTreeSet<TxnPartition> {
    match meta {
        Some(m) if m.current.state == Ongoing && m.pending.is_none() => {
            m.current.partitions.clone()
        }
        _ => BTreeSet::new(),
    }
}

/// Whether `decision`, made for an EndTxn that arrived when it could end `covered`
/// (`end_may_cover`), would end partitions added since: answered
/// CONCURRENT_TRANSACTIONS instead, so that the client sends it again once its batches
/// are answered, which orders the end after their append.
pub fn end_overtakes_batches(covered: &BTreeSet<TxnPartition>, decision: &EndDecision) -> bool {
    match decision {
        EndDecision::Prepare { transit, .. } => !transit.partitions.is_subset(covered),
        EndDecision::Done(_) | EndDecision::BatchesPending => false,
    }
}

/// A version 2 end: under the next epoch, the one it ran under kept as the last; a new
/// producer id is named for the completion when the epoch runs out.
fn prepare_v2_end(
    meta: &TxnMetadata,
    state: TxnState,
    no_partition_added: bool,
    now_ms: i64,
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<EndDecision, TxnError> {
    let cur = &meta.current;
    let mut t = transit_from(meta, state, now_ms);
    t.next_producer_id = if is_epoch_exhausted(cur.producer_epoch) {
        allocate()?
    } else {
        NO_PRODUCER_ID
    };
    // At 32767 already (a bug elsewhere) an abort still goes through without a bump, so
    // the id can recover; a commit would overflow, which the states never allow.
    t.producer_epoch = match cur.producer_epoch.checked_add(1) {
        Some(e) => e,
        None if state == PrepareAbort => cur.producer_epoch,
        None => return Err(TxnError::UnknownServerError),
    };
    t.last_producer_epoch = cur.producer_epoch;
    if no_partition_added {
        // Kafka needs a start for a completed transaction; none was ever set for this one.
        t.start_ms = now_ms;
        t.partitions = BTreeSet::new();
    }
    t.tv2 = true;
    let answer = answer_after(&t);
    Ok(EndDecision::Prepare { transit: t, answer })
}

/// The producer id and epoch a version 2 client goes on with after an end: those of the
/// completed state (the new producer id at 0 when the end moved to it).
fn answer_after(prepared: &Transit) -> ProducerIdEpoch {
    if prepared.next_producer_id != NO_PRODUCER_ID {
        ProducerIdEpoch::new(prepared.next_producer_id, 0)
    } else {
        ProducerIdEpoch::new(prepared.producer_id, prepared.producer_epoch)
    }
}

/// The completion of an end whose markers are all written: CompleteCommit or
/// CompleteAbort, no partitions left, and under version 2 the new producer id at epoch 0
/// if the Prepare* named one. The last epoch is kept (after an overflow it is 32766, the
/// last one the client saw, which recognises its retry).
pub fn complete_end(meta: &TxnMetadata, now_ms: i64) -> Result<Transit, TxnError> {
    let cur = &meta.current;
    if meta.pending.is_some() {
        return Err(TxnError::ConcurrentTransactions);
    }
    let state = match cur.state {
        PrepareCommit => CompleteCommit,
        PrepareAbort => CompleteAbort,
        _ => return Err(TxnError::InvalidTxnState),
    };
    let mut t = transit_from(meta, state, now_ms);
    if cur.tv2 && cur.next_producer_id != NO_PRODUCER_ID {
        t.producer_id = cur.next_producer_id;
        t.producer_epoch = 0;
    }
    t.next_producer_id = NO_PRODUCER_ID;
    t.partitions = BTreeSet::new();
    Ok(t)
}

/// The markers an end writes: one per partition, under the producer id and epoch of the
/// Prepare* (the old producer id even when the completion moves to a new one; under
/// version 2 the bumped epoch, which the partitions take as the producer's new epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Markers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub partitions: BTreeSet<TxnPartition>,
}

/// The markers for a PrepareCommit or PrepareAbort transit (`None` for any other).
pub fn markers(prepared: &Transit) -> Option<Markers> {
    let commit = match prepared.state {
        PrepareCommit => true,
        PrepareAbort => false,
        _ => return None,
    };
    Some(Markers {
        producer_id: prepared.producer_id,
        producer_epoch: prepared.producer_epoch,
        commit,
        partitions: prepared.partitions.clone(),
    })
}

// ---------------------------------------------------------------------------------------
// Timeouts and expiry

/// Whether the id's ongoing transaction has run past its timeout (`now > start +
/// timeout`), with no transition pending (a pending one ends or changes it anyway).
pub fn is_timed_out(meta: &TxnMetadata, now_ms: i64) -> bool {
    let cur = &meta.current;
    meta.pending.is_none()
        && cur.state == Ongoing
        && cur.start_ms.saturating_add(i64::from(cur.timeout_ms)) < now_ms
}

/// The ids among `metas` whose transactions have timed out, with the producer each ran
/// under (Kafka checks the producer id again before aborting: `abort_timed_out`).
pub fn timed_out<'a>(
    metas: impl IntoIterator<Item = &'a TxnMetadata>,
    now_ms: i64,
) -> Vec<(&'a str, ProducerIdEpoch)> {
    metas
        .into_iter()
        .filter(|m| is_timed_out(m, now_ms))
        .map(|m| {
            let p = ProducerIdEpoch::new(m.current.producer_id, m.current.producer_epoch);
            (m.transactional_id.as_str(), p)
        })
        .collect()
}

/// The abort of a timed out transaction: a fence of its producer and a PrepareAbort,
/// written and completed as an end's (`markers`, `complete_end`); nobody is answered.
/// `None` if it is not (or no longer) timed out.
pub fn abort_timed_out(
    meta: &TxnMetadata,
    cfg: &TxnConfig,
    now_ms: i64,
    allocate: impl FnOnce() -> Result<i64, TxnError>,
) -> Result<Option<Transit>, TxnError> {
    if !is_timed_out(meta, now_ms) {
        return Ok(None);
    }
    fence_and_abort(meta, cfg.server_tv2, now_ms, allocate).map(Some)
}

/// An idle id's removal: its Dead transit (prepared, never completed: the id leaves the
/// cache once the tombstone is durable, or `abandon` if the write fails) and the key of
/// its tombstone (that key with a null value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expiry {
    pub dead: Transit,
    pub tombstone_key: Vec<u8>,
}

/// Whether the id may expire: no transaction in flight (Empty or Complete*), nothing
/// pending, and not updated for `transactional.id.expiration.ms`.
pub fn should_expire(meta: &TxnMetadata, cfg: &TxnConfig, now_ms: i64) -> bool {
    meta.pending.is_none()
        && meta.current.state.may_expire()
        && meta.current.update_ms <= now_ms.saturating_sub(cfg.id_expiration_ms)
}

/// The expiry of `meta` if it should expire (`should_expire`).
pub fn expire(
    meta: &TxnMetadata,
    cfg: &TxnConfig,
    now_ms: i64,
) -> Result<Option<Expiry>, TxnRecordError> {
    if !should_expire(meta, cfg, now_ms) {
        return Ok(None);
    }
    // Kafka's Dead keeps everything but the partitions, and its update time.
    let mut dead = transit_from(meta, Dead, meta.current.update_ms);
    dead.partitions = BTreeSet::new();
    Ok(Some(Expiry {
        dead,
        tombstone_key: encode_key(&meta.transactional_id)?,
    }))
}

// ---------------------------------------------------------------------------------------
// Client versions

/// The coordinator's APIs whose answers depend on the client's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
}

impl TxnApi {
    pub fn key(self) -> i16 {
        match self {
            TxnApi::InitProducerId => 22,
            TxnApi::AddPartitionsToTxn => 24,
            TxnApi::AddOffsetsToTxn => 25,
            TxnApi::EndTxn => 26,
        }
    }

    /// The first version whose clients know PRODUCER_FENCED (KIP-588): InitProducerId v4,
    /// AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2. Older ones are sent
    /// INVALID_PRODUCER_EPOCH, which they handle the same way.
    pub fn producer_fenced_since(self) -> i16 {
        match self {
            TxnApi::InitProducerId => 4,
            TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
        }
    }

    /// The error a client of `version` is sent for `err`.
    pub fn error_for_version(self, err: TxnError, version: i16) -> TxnError {
        if err == TxnError::ProducerFenced && version < self.producer_fenced_since() {
            TxnError::InvalidProducerEpoch
        } else {
            err
        }
    }

    /// Whether a request of `version` comes from a transaction version 2 client:
    /// EndTxn v5+; AddPartitionsToTxn v4+ (only brokers send those, and only a
    /// non-verifyOnly one adds, for a version 2 produce). Kafka's
    /// `TransactionVersion.transactionVersionForEndTxn` / `...ForAddPartitionsToTxn`.
    pub fn is_tv2(self, version: i16) -> bool {
        match self {
            TxnApi::EndTxn => version > 4,
            TxnApi::AddPartitionsToTxn => version > 3,
            TxnApi::InitProducerId | TxnApi::AddOffsetsToTxn => false,
        }
    }
}

/// How a partition leader asks the coordinator about a transactional append, and what
/// it tells the producer (Kafka's `TransactionSupportedOperation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyMode {
    /// Produce up to v10, TxnOffsetCommit up to v3: verify only; TRANSACTION_ABORTABLE is
    /// unknown to the client and sent as INVALID_TXN_STATE.
    DefaultError,
    /// Produce v11, TxnOffsetCommit v4: verify only; TRANSACTION_ABORTABLE is sent as is.
    GenericError,
    /// Produce v12+, TxnOffsetCommit v5+ (transaction version 2): the partition is added
    /// (verifyOnly false: `add_for_produce`).
    AddPartition,
}

impl VerifyMode {
    pub fn for_produce(version: i16) -> VerifyMode {
        match version {
            v if v > 11 => VerifyMode::AddPartition,
            11 => VerifyMode::GenericError,
            _ => VerifyMode::DefaultError,
        }
    }

    pub fn for_txn_offset_commit(version: i16) -> VerifyMode {
        match version {
            v if v > 4 => VerifyMode::AddPartition,
            4 => VerifyMode::GenericError,
            _ => VerifyMode::DefaultError,
        }
    }

    /// The AddPartitionsToTxn `verifyOnly` flag the leader sends.
    pub fn verify_only(self) -> bool {
        self != VerifyMode::AddPartition
    }

    /// The error the producer is sent for the coordinator's per-partition `err`:
    /// PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (what a produce is answered when
    /// fenced), and TRANSACTION_ABORTABLE INVALID_TXN_STATE for clients before it.
    pub fn error_for_producer(self, err: TxnError) -> TxnError {
        match err {
            TxnError::ProducerFenced => TxnError::InvalidProducerEpoch,
            TxnError::TransactionAbortable if self == VerifyMode::DefaultError => {
                TxnError::InvalidTxnState
            }
            e => e,
        }
    }
}

/// The error a client is sent when writing a transition's record to
/// `__transaction_state` failed with `append_code` (Kafka's `TransactionStateManager`):
/// retriable errors become COORDINATOR_NOT_AVAILABLE, a lost leadership NOT_COORDINATOR,
/// a record too large UNKNOWN_SERVER_ERROR.
pub fn coordinator_error_for_append(append_code: i16) -> i16 {
    match append_code {
        // UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        // REQUEST_TIMED_OUT
        3 | 19 | 20 | 7 => TxnError::CoordinatorNotAvailable.code(),
        // NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR
        6 | 56 => TxnError::NotCoordinator.code(),
        // MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE
        10 | 18 => TxnError::UnknownServerError.code(),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const PID: i64 = 1000;
    const NEXT_PID: i64 = 2000;
    const TIMEOUT: i32 = 60_000;

    fn v1() -> TxnConfig {
        TxnConfig::kafka_defaults(false)
    }

    fn v2() -> TxnConfig {
        TxnConfig::kafka_defaults(true)
    }

    fn parts(list: &[(&str, i32)]) -> BTreeSet<TxnPartition> {
        list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
    }

    /// Prepares and completes `t` as the caller would once its record is durable: every
    /// transit the rules build must pass `state`'s checks.
    fn apply(m: &mut TxnMetadata, t: Transit) {
        m.prepare(&t).expect("prepare");
        m.complete(t).expect("complete");
    }

    fn never() -> impl FnOnce() -> Result<i64, TxnError> {
        || panic!("no producer id is needed here")
    }

    fn gives(id: i64) -> impl FnOnce() -> Result<i64, TxnError> {
        move || Ok(id)
    }

    fn producer(m: &TxnMetadata) -> ProducerIdEpoch {
        ProducerIdEpoch::new(m.current.producer_id, m.current.producer_epoch)
    }

    fn answer(d: InitDecision) -> Transit {
        match d.action {
            InitAction::Answer(t) => t,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    /// A new id after its first InitProducerId: producer `PID`, epoch 0.
    fn new_id(cfg: &TxnConfig) -> TxnMetadata {
        let d = init_producer_id(None, "t", TIMEOUT, None, cfg, 0, gives(PID)).unwrap();
        let mut m = d.created.clone().expect("a new id is created");
        apply(&mut m, answer(d));
        m
    }

    fn init(m: &mut TxnMetadata, cfg: &TxnConfig, now: i64) {
        let t = answer(init_producer_id(Some(m), "t", TIMEOUT, None, cfg, now, never()).unwrap());
        apply(m, t);
    }

    fn begin(m: &mut TxnMetadata, p: &[(&str, i32)], tv2: bool, now: i64) {
        match add_partitions(Some(m), producer(m), &parts(p), tv2, now).unwrap() {
            AddDecision::Prepare(t) => apply(m, t),
            AddDecision::AlreadyAdded => panic!("nothing was added"),
        }
    }

    /// Prepares an end and completes it; the answer the client was given.
    fn end(m: &mut TxnMetadata, outcome: TxnOutcome, tv2: bool, now: i64) -> ProducerIdEpoch {
        match end_txn(Some(m), producer(m), outcome, tv2, now, never()).unwrap() {
            EndDecision::Prepare { transit, answer } => {
                apply(m, transit);
                let done = complete_end(m, now).unwrap();
                apply(m, done);
                answer
            }
            other => panic!("expected a prepare, got {other:?}"),
        }
    }

    fn end_err(m: &TxnMetadata, p: ProducerIdEpoch, outcome: TxnOutcome, tv2: bool) -> TxnError {
        end_txn(Some(m), p, outcome, tv2, 0, never()).unwrap_err()
    }

    use TxnOutcome::{Abort, Commit};

    #[test]
    fn error_codes_are_kafkas() {
        // From Kafka's Errors.java.
        let table = [
            (TxnError::UnknownServerError, -1),
            (TxnError::CoordinatorLoadInProgress, 14),
            (TxnError::CoordinatorNotAvailable, 15),
            (TxnError::NotCoordinator, 16),
            (TxnError::InvalidRequest, 42),
            (TxnError::InvalidProducerEpoch, 47),
            (TxnError::InvalidTxnState, 48),
            (TxnError::InvalidProducerIdMapping, 49),
            (TxnError::InvalidTransactionTimeout, 50),
            (TxnError::ConcurrentTransactions, 51),
            (TxnError::OperationNotAttempted, 55),
            (TxnError::ProducerFenced, 90),
            (TxnError::TransactionalIdNotFound, 105),
            (TxnError::TransactionAbortable, 120),
        ];
        assert_eq!(table.len(), ALL_ERRORS.len());
        for (e, code) in table {
            assert_eq!(e.code(), code, "{e:?}");
            assert_eq!(TxnError::from_code(code), Some(e));
        }
        assert_eq!(TxnError::from_code(0), None);
    }

    #[test]
    fn a_new_id_gets_a_producer_id_at_epoch_zero() {
        let calls = Cell::new(0);
        let d = init_producer_id(None, "t", TIMEOUT, None, &v1(), 5, || {
            calls.set(calls.get() + 1);
            Ok(PID)
        })
        .unwrap();
        assert_eq!(calls.get(), 1);
        let created = d.created.clone().unwrap();
        assert_eq!(created.current.producer_id, PID);
        assert_eq!(created.current.producer_epoch, -1, "nothing written yet");
        let t = answer(d);
        assert_eq!((t.state, t.producer_id, t.producer_epoch), (Empty, PID, 0));
        assert_eq!(t.last_producer_epoch, -1);
        assert_eq!((t.timeout_ms, t.start_ms, t.update_ms), (TIMEOUT, -1, 5));
        let mut m = created;
        apply(&mut m, t);

        // A failed allocation is the answer (Kafka: COORDINATOR_LOAD_IN_PROGRESS while
        // its id manager waits for a block).
        let err = init_producer_id(None, "t", TIMEOUT, None, &v1(), 5, || {
            Err(TxnError::CoordinatorLoadInProgress)
        });
        assert_eq!(err, Err(TxnError::CoordinatorLoadInProgress));

        // The idempotent path: a new id at epoch 0, nothing else.
        assert_eq!(init_idempotent(gives(7)), Ok(ProducerIdEpoch::new(7, 0)));
    }

    #[test]
    fn init_bumps_the_epoch_of_an_empty_or_completed_id() {
        let mut m = new_id(&v1());
        let t = answer(init_producer_id(Some(&m), "t", 30_000, None, &v1(), 9, never()).unwrap());
        assert_eq!(
            (t.producer_id, t.producer_epoch, t.last_producer_epoch),
            (PID, 1, -1)
        );
        assert_eq!(t.timeout_ms, 30_000, "the new timeout is taken");
        apply(&mut m, t);

        for outcome in [Commit, Abort] {
            begin(&mut m, &[("a", 0)], false, 10);
            end(&mut m, outcome, false, 20);
            let state = m.state();
            let before = m.current.producer_epoch;
            let t =
                answer(init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 30, never()).unwrap());
            assert_eq!(t.state, Empty, "from {state:?}");
            assert_eq!(t.producer_epoch, before + 1);
            assert!(t.partitions.is_empty());
            assert_eq!((t.start_ms, t.previous_producer_id), (-1, PID));
            apply(&mut m, t);
        }
    }

    #[test]
    fn init_waits_for_an_ending_transaction_and_a_pending_write() {
        let mut m = new_id(&v1());
        begin(&mut m, &[("a", 0)], false, 10);
        let pending = match add_partitions(Some(&m), producer(&m), &parts(&[("b", 0)]), false, 11) {
            Ok(AddDecision::Prepare(t)) => t,
            other => panic!("{other:?}"),
        };
        m.prepare(&pending).unwrap();
        let init =
            |m: &TxnMetadata| init_producer_id(Some(m), "t", TIMEOUT, None, &v1(), 12, never());
        assert_eq!(init(&m), Err(TxnError::ConcurrentTransactions));
        m.abandon();

        for outcome in [Commit, Abort] {
            let mut m = m.clone();
            let EndDecision::Prepare { transit, .. } =
                end_txn(Some(&m), producer(&m), outcome, false, 13, never()).unwrap()
            else {
                panic!("not prepared")
            };
            apply(&mut m, transit);
            assert_eq!(
                init(&m),
                Err(TxnError::ConcurrentTransactions),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn init_fences_and_aborts_an_ongoing_transaction() {
        let mut m = new_id(&v1());
        init(&mut m, &v1(), 1); // epoch 1
        begin(&mut m, &[("a", 0), ("b", 3)], false, 10);
        let old = producer(&m);

        let d = init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 50, never()).unwrap();
        let InitAction::FenceOngoing(t) = d.action else {
            panic!("expected the fence")
        };
        assert_eq!(
            (t.state, t.producer_id, t.producer_epoch),
            (PrepareAbort, PID, 2)
        );
        assert_eq!(
            t.last_producer_epoch, -1,
            "nobody may resume with an older epoch"
        );
        assert_eq!(
            t.partitions,
            parts(&[("a", 0), ("b", 3)]),
            "its partitions get markers"
        );
        assert_eq!((t.start_ms, t.update_ms, t.tv2), (10, 50, false));
        apply(&mut m, t);

        // The fenced producer can do nothing more.
        assert_eq!(end_err(&m, old, Commit, false), TxnError::ProducerFenced);
        assert_eq!(
            add_partitions(Some(&m), old, &parts(&[("c", 0)]), false, 51),
            Err(TxnError::ProducerFenced)
        );
        // The new instance's retry waits for the abort.
        assert_eq!(
            init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 52, never()),
            Err(TxnError::ConcurrentTransactions)
        );

        let mk = markers(&m.current).unwrap();
        assert_eq!(
            (mk.producer_id, mk.producer_epoch, mk.commit),
            (PID, 2, false)
        );
        let done = complete_end(&m, 60).unwrap();
        assert_eq!((done.state, done.producer_epoch), (CompleteAbort, 2));
        assert!(done.partitions.is_empty());
        apply(&mut m, done);

        // Its retry then bumps once more: an epoch nobody had.
        let t = answer(init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 70, never()).unwrap());
        assert_eq!(t.producer_epoch, 3);
        apply(&mut m, t);
    }

    #[test]
    fn a_version_2_coordinators_fence_is_its_ends_bump() {
        let mut m = new_id(&v2());
        begin(&mut m, &[("a", 0)], true, 10);
        let d = init_producer_id(Some(&m), "t", TIMEOUT, None, &v2(), 50, never()).unwrap();
        let InitAction::FenceOngoing(t) = d.action else {
            panic!("expected the fence")
        };
        // Fenced to 1, which is also the end's bump (Kafka 4.4 bumps once); the
        // client's epoch is the last.
        assert_eq!(
            (t.producer_epoch, t.last_producer_epoch, t.tv2),
            (1, 0, true)
        );
        assert_eq!(t.next_producer_id, -1);
        apply(&mut m, t);
        let done = complete_end(&m, 60).unwrap();
        assert_eq!((done.producer_id, done.producer_epoch), (PID, 1));
        apply(&mut m, done);
        // The old instance's own abort, after the coordinator's: a retry of it, answered
        // with the epoch to go on with (as Kafka 4.4 answers it), not fenced.
        assert_eq!(
            end_txn(
                Some(&m),
                ProducerIdEpoch::new(PID, 0),
                Abort,
                true,
                65,
                never()
            ),
            Ok(EndDecision::Done(ProducerIdEpoch::new(PID, 1)))
        );
        init(&mut m, &v2(), 70);
        assert_eq!(m.current.producer_epoch, 2);
    }

    #[test]
    fn an_exhausted_epoch_moves_to_a_new_producer_id() {
        let mut m = new_id(&v1());
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        let calls = Cell::new(0);
        let t = answer(
            init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 5, || {
                calls.set(calls.get() + 1);
                Ok(NEXT_PID)
            })
            .unwrap(),
        );
        assert_eq!(calls.get(), 1);
        assert_eq!((t.producer_id, t.producer_epoch), (NEXT_PID, 0));
        assert_eq!(t.previous_producer_id, PID, "the old id is recorded");
        assert_eq!(
            t.last_producer_epoch, -1,
            "no expected epoch: no retry to recognise"
        );
        apply(&mut m, t.clone());

        // A fence at 32766 ends under 32767, which is never handed out: the next
        // InitProducerId moves to a new id.
        let mut m = new_id(&v1());
        begin(&mut m, &[("a", 0)], false, 10);
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        let InitAction::FenceOngoing(f) =
            init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 20, never())
                .unwrap()
                .action
        else {
            panic!("expected the fence")
        };
        assert_eq!(f.producer_epoch, i16::MAX);
        apply(&mut m, f);
        let done = complete_end(&m, 30).unwrap();
        apply(&mut m, done);
        assert_eq!(
            (m.state(), m.current.producer_epoch),
            (CompleteAbort, i16::MAX)
        );
        assert_eq!(
            add_partitions(Some(&m), producer(&m), &parts(&[("a", 0)]), false, 31),
            Err(TxnError::ProducerFenced),
            "32767 is no client's epoch"
        );
        let t = answer(
            init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 40, gives(NEXT_PID)).unwrap(),
        );
        assert_eq!((t.producer_id, t.producer_epoch), (NEXT_PID, 0));
        apply(&mut m, t);

        // No id at hand: the allocator's error.
        let mut m = new_id(&v1());
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        assert_eq!(
            init_producer_id(Some(&m), "t", TIMEOUT, None, &v1(), 5, || Err(
                TxnError::CoordinatorLoadInProgress
            )),
            Err(TxnError::CoordinatorLoadInProgress)
        );
    }

    #[test]
    fn kip_360_a_producer_resumes_with_the_epoch_it_had() {
        let cfg = v1();
        let mut m = new_id(&cfg);
        init(&mut m, &cfg, 1); // epoch 1, last -1
        let resume = |m: &TxnMetadata, pid: i64, epoch: i16| {
            init_producer_id(
                Some(m),
                "t",
                TIMEOUT,
                Some(ProducerIdEpoch::new(pid, epoch)),
                &cfg,
                10,
                never(),
            )
        };

        assert_eq!(
            resume(&m, 999, 1),
            Err(TxnError::ProducerFenced),
            "not this id's producer"
        );
        assert_eq!(
            resume(&m, PID, 0),
            Err(TxnError::ProducerFenced),
            "an older epoch"
        );

        let t = answer(resume(&m, PID, 1).unwrap());
        assert_eq!((t.producer_epoch, t.last_producer_epoch), (2, 1));
        apply(&mut m, t.clone());
        // The answer was lost; the same request gets the same answer, without a bump.
        let again = answer(resume(&m, PID, 1).unwrap());
        assert_eq!(
            (again.producer_id, again.producer_epoch),
            (t.producer_id, t.producer_epoch)
        );
        assert_eq!(again.last_producer_epoch, 1);
        apply(&mut m, again);

        // Another instance starting (no expected epoch) clears the last epoch: the old one
        // is fenced for good.
        init(&mut m, &cfg, 20); // epoch 3, last -1
        assert_eq!(resume(&m, PID, 1), Err(TxnError::ProducerFenced));
        assert_eq!(resume(&m, PID, 2), Err(TxnError::ProducerFenced));

        // An id just created (epoch -1) takes any producer: it recovers from
        // UNKNOWN_PRODUCER_ID with the ids it had.
        let d = init_producer_id(
            None,
            "u",
            TIMEOUT,
            Some(ProducerIdEpoch::new(77, 12)),
            &cfg,
            0,
            gives(PID),
        )
        .unwrap();
        let t = answer(d);
        assert_eq!(
            (t.producer_id, t.producer_epoch, t.last_producer_epoch),
            (PID, 0, -1)
        );
    }

    #[test]
    fn kip_360_a_retry_of_a_rotation_gets_the_new_producer_id() {
        let cfg = v1();
        let mut m = new_id(&cfg);
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        let old = ProducerIdEpoch::new(PID, EPOCH_EXHAUSTED_AT);
        let resume =
            |m: &TxnMetadata, p: ProducerIdEpoch, ids: &dyn Fn() -> Result<i64, TxnError>| {
                init_producer_id(Some(m), "t", TIMEOUT, Some(p), &cfg, 10, ids)
            };
        let t = answer(resume(&m, old, &|| Ok(NEXT_PID)).unwrap());
        assert_eq!((t.producer_id, t.producer_epoch), (NEXT_PID, 0));
        assert_eq!(
            t.last_producer_epoch, EPOCH_EXHAUSTED_AT,
            "kept to recognise a retry"
        );
        apply(&mut m, t);

        let retry = answer(resume(&m, old, &|| panic!("no new id for a retry")).unwrap());
        assert_eq!((retry.producer_id, retry.producer_epoch), (NEXT_PID, 0));
        apply(&mut m, retry);
        // The old id with an epoch that was not exhausted is no retry.
        assert_eq!(
            resume(&m, ProducerIdEpoch::new(PID, 5), &|| Ok(3000)),
            Err(TxnError::ProducerFenced)
        );

        // An exhausted epoch the client does not hold: Kafka's IllegalStateException.
        let mut m = new_id(&cfg);
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        assert_eq!(
            resume(&m, ProducerIdEpoch::new(PID, 3), &|| Ok(3000)),
            Err(TxnError::UnknownServerError)
        );
    }

    #[test]
    fn init_checks_the_request_before_the_state() {
        let cfg = TxnConfig {
            max_timeout_ms: 1000,
            ..v1()
        };
        let init = |id: &str, timeout| init_producer_id(None, id, timeout, None, &cfg, 0, never());
        assert_eq!(init("", 100), Err(TxnError::InvalidRequest));
        for bad in [0, -1, 1001, i32::MAX] {
            assert_eq!(
                init("t", bad),
                Err(TxnError::InvalidTransactionTimeout),
                "{bad}"
            );
        }
        assert!(init_producer_id(None, "t", 1000, None, &cfg, 0, gives(PID)).is_ok());

        assert_eq!(expected_producer(-1, -1), Ok(None));
        assert_eq!(
            expected_producer(5, 3),
            Ok(Some(ProducerIdEpoch::new(5, 3)))
        );
        assert_eq!(expected_producer(-1, 3), Err(TxnError::InvalidRequest));
        assert_eq!(expected_producer(5, -1), Err(TxnError::InvalidRequest));
        assert_eq!(MAX_TIMEOUT_MS_DEFAULT, 900_000);
        assert_eq!(ID_EXPIRATION_MS_DEFAULT, 604_800_000);
    }

    #[test]
    fn add_partitions_starts_and_grows_a_transaction() {
        let mut m = new_id(&v1());
        let p = producer(&m);
        let AddDecision::Prepare(t) =
            add_partitions(Some(&m), p, &parts(&[("a", 0)]), false, 10).unwrap()
        else {
            panic!("not prepared")
        };
        assert_eq!((t.state, t.start_ms, t.update_ms), (Ongoing, 10, 10));
        apply(&mut m, t);

        let AddDecision::Prepare(t) =
            add_partitions(Some(&m), p, &parts(&[("a", 0), ("b", 1)]), false, 20).unwrap()
        else {
            panic!("not prepared")
        };
        assert_eq!(t.start_ms, 10, "the transaction started at its first add");
        assert_eq!(t.partitions, parts(&[("a", 0), ("b", 1)]));
        apply(&mut m, t);
        assert_eq!(
            add_partitions(Some(&m), p, &parts(&[("b", 1)]), false, 30),
            Ok(AddDecision::AlreadyAdded),
            "nothing to write"
        );

        // After an end, the next add starts a new transaction now.
        end(&mut m, Commit, false, 40);
        let AddDecision::Prepare(t) =
            add_partitions(Some(&m), p, &parts(&[("c", 2)]), false, 50).unwrap()
        else {
            panic!("not prepared")
        };
        assert_eq!((t.start_ms, t.partitions.clone()), (50, parts(&[("c", 2)])));
        apply(&mut m, t);
    }

    #[test]
    fn add_partitions_refuses_in_kafkas_order() {
        let mut m = new_id(&v1());
        let p = producer(&m);
        let a = parts(&[("a", 0)]);
        let add = |m: &TxnMetadata, p| add_partitions(Some(m), p, &a, false, 10);
        assert_eq!(
            add_partitions(None, p, &a, false, 10),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            add(&m, ProducerIdEpoch::new(PID + 1, 0)),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            add(&m, ProducerIdEpoch::new(PID, 1)),
            Err(TxnError::ProducerFenced)
        );

        begin(&mut m, &[("a", 0)], false, 5);
        let pending = end_txn(Some(&m), p, Commit, false, 6, never()).unwrap();
        let EndDecision::Prepare { transit, .. } = pending else {
            panic!("not prepared")
        };
        m.prepare(&transit).unwrap();
        // A pending transition comes first, even before the producer id.
        assert_eq!(
            add(&m, ProducerIdEpoch::new(PID + 1, 0)),
            Err(TxnError::ConcurrentTransactions)
        );
        m.complete(transit).unwrap();
        assert_eq!(
            add(&m, p),
            Err(TxnError::ConcurrentTransactions),
            "PrepareCommit"
        );

        // An id whose first InitProducerId was never written has no producer.
        let d = init_producer_id(None, "u", TIMEOUT, None, &v1(), 0, gives(PID)).unwrap();
        let created = d.created.unwrap();
        assert_eq!(
            add_partitions(Some(&created), ProducerIdEpoch::new(PID, -1), &a, false, 1),
            Err(TxnError::UnknownServerError)
        );
    }

    #[test]
    fn add_offsets_adds_the_groups_offsets_partition() {
        let mut m = new_id(&v1());
        let AddDecision::Prepare(t) =
            add_offsets(Some(&m), producer(&m), "my-group", 50, 10).unwrap()
        else {
            panic!("not prepared")
        };
        let want = (
            OFFSETS_TOPIC.to_string(),
            partition_for_group("my-group", 50),
        );
        assert_eq!(t.partitions, BTreeSet::from([want]));
        assert!(!t.tv2);
        apply(&mut m, t);
    }

    #[test]
    fn a_version_2_produce_adds_its_partition() {
        let mut m = new_id(&v2());
        let AddDecision::Prepare(t) =
            add_for_produce(Some(&m), producer(&m), &parts(&[("a", 0)]), 10).unwrap()
        else {
            panic!("not prepared")
        };
        assert!(t.tv2, "the transaction is marked version 2");
        assert_eq!((t.state, t.start_ms), (Ongoing, 10));
        apply(&mut m, t);
        assert_eq!(
            add_for_produce(Some(&m), producer(&m), &parts(&[("a", 0)]), 11),
            Ok(AddDecision::AlreadyAdded)
        );
    }

    #[test]
    fn verify_only_answers_per_partition() {
        let mut m = new_id(&v1());
        let p = producer(&m);
        let ab = parts(&[("a", 0), ("b", 0)]);
        let before = verify_partitions(Some(&m), p, &ab).unwrap();
        assert!(before
            .values()
            .all(|e| *e == Some(TxnError::TransactionAbortable)));

        begin(&mut m, &[("a", 0)], false, 10);
        let r = verify_partitions(Some(&m), p, &ab).unwrap();
        assert_eq!(r[&("a".to_string(), 0)], None);
        assert_eq!(
            r[&("b".to_string(), 0)],
            Some(TxnError::TransactionAbortable)
        );

        assert_eq!(
            verify_partitions(None, p, &ab),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            verify_partitions(Some(&m), ProducerIdEpoch::new(PID + 1, 0), &ab),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            verify_partitions(Some(&m), ProducerIdEpoch::new(PID, 1), &ab),
            Err(TxnError::ProducerFenced)
        );
        // A pending add is not waited for: the append is checked again at the partition.
        let AddDecision::Prepare(t) = add_partitions(Some(&m), p, &ab, false, 11).unwrap() else {
            panic!("not prepared")
        };
        m.prepare(&t).unwrap();
        assert!(verify_partitions(Some(&m), p, &ab).is_ok());
        m.abandon();
        let EndDecision::Prepare { transit, .. } =
            end_txn(Some(&m), p, Abort, false, 12, never()).unwrap()
        else {
            panic!("not prepared")
        };
        apply(&mut m, transit);
        assert_eq!(
            verify_partitions(Some(&m), p, &ab),
            Err(TxnError::ConcurrentTransactions)
        );
    }

    #[test]
    fn answers_for_every_partition_of_a_transaction() {
        let ab = parts(&[("a", 0), ("b", 1)]);
        let all = answer_all(&ab, Err(TxnError::ProducerFenced));
        assert_eq!(all.values().copied().collect::<Vec<_>>(), vec![90, 90]);
        assert!(answer_all(&ab, Ok(())).values().all(|c| *c == 0));

        let failed = BTreeMap::from([(("a".to_string(), 0), 29)]); // TOPIC_AUTHORIZATION_FAILED
        let r = reject_transaction(&failed, &parts(&[("b", 1)]));
        assert_eq!(r[&("a".to_string(), 0)], 29);
        assert_eq!(r[&("b".to_string(), 1)], 55);
    }

    #[test]
    fn end_txn_version_1_table() {
        let cfg = v1();
        let mut m = new_id(&cfg);
        let p = producer(&m);
        assert_eq!(
            end_err(&m, p, Commit, false),
            TxnError::InvalidTxnState,
            "Empty"
        );
        assert_eq!(
            end_err(&m, p, Abort, false),
            TxnError::InvalidTxnState,
            "Empty"
        );

        for (outcome, other) in [(Commit, Abort), (Abort, Commit)] {
            begin(&mut m, &[("a", 0)], false, 10);
            let EndDecision::Prepare { transit, answer } =
                end_txn(Some(&m), p, outcome, false, 20, never()).unwrap()
            else {
                panic!("not prepared")
            };
            // Version 1 ends under the transaction's own epoch.
            assert_eq!(transit.producer_epoch, p.epoch);
            assert_eq!(transit.partitions, parts(&[("a", 0)]));
            assert_eq!(
                answer,
                ProducerIdEpoch::NONE,
                "v1 responses carry no producer"
            );
            apply(&mut m, transit);
            assert_eq!(
                end_err(&m, p, outcome, false),
                TxnError::ConcurrentTransactions
            );
            assert_eq!(end_err(&m, p, other, false), TxnError::InvalidTxnState);

            let done = complete_end(&m, 30).unwrap();
            apply(&mut m, done);
            // A retry of the completed end is answered OK.
            assert_eq!(
                end_txn(Some(&m), p, outcome, false, 40, never()),
                Ok(EndDecision::Done(ProducerIdEpoch::NONE))
            );
            assert_eq!(end_err(&m, p, other, false), TxnError::InvalidTxnState);
        }

        assert_eq!(
            end_txn(None, p, Commit, false, 0, never()),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID + 1, 0), Commit, false),
            TxnError::InvalidProducerIdMapping
        );
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID, 1), Commit, false),
            TxnError::ProducerFenced
        );

        // The producer is checked before a pending write.
        begin(&mut m, &[("a", 0)], false, 50);
        let AddDecision::Prepare(t) =
            add_partitions(Some(&m), p, &parts(&[("b", 0)]), false, 51).unwrap()
        else {
            panic!("not prepared")
        };
        m.prepare(&t).unwrap();
        assert_eq!(
            end_err(&m, p, Commit, false),
            TxnError::ConcurrentTransactions
        );
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID, 7), Commit, false),
            TxnError::ProducerFenced
        );
    }

    #[test]
    fn end_txn_version_2_bumps_and_knows_its_retries() {
        let mut m = new_id(&v2());
        begin(&mut m, &[("a", 0)], true, 10);
        let e0 = producer(&m); // epoch 0
        let EndDecision::Prepare { transit, answer } =
            end_txn(Some(&m), e0, Commit, true, 20, never()).unwrap()
        else {
            panic!("not prepared")
        };
        assert_eq!(
            (transit.producer_epoch, transit.last_producer_epoch),
            (1, 0)
        );
        assert_eq!(
            answer,
            ProducerIdEpoch::new(PID, 1),
            "the client goes on with epoch 1"
        );
        let mk = markers(&transit).unwrap();
        assert_eq!(
            (mk.producer_epoch, mk.commit),
            (1, true),
            "markers carry the new epoch"
        );
        apply(&mut m, transit);

        // While the markers are written: a retry waits, and so does the end of the next
        // transaction (the client has epoch 1 already: an abort of records it never sent).
        assert_eq!(
            end_err(&m, e0, Commit, true),
            TxnError::ConcurrentTransactions
        );
        assert_eq!(end_err(&m, e0, Abort, true), TxnError::InvalidTxnState);
        for outcome in [Commit, Abort] {
            assert_eq!(
                end_err(&m, ProducerIdEpoch::new(PID, 1), outcome, true),
                TxnError::ConcurrentTransactions
            );
        }
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID, 2), Abort, true),
            TxnError::ProducerFenced
        );

        let done = complete_end(&m, 30).unwrap();
        assert_eq!((done.producer_epoch, done.last_producer_epoch), (1, 0));
        apply(&mut m, done);
        let e1 = producer(&m);

        // The retry of the commit after the bump: answered OK with the epoch it missed.
        assert_eq!(
            end_txn(Some(&m), e0, Commit, true, 40, never()),
            Ok(EndDecision::Done(e1))
        );
        assert_eq!(end_err(&m, e0, Abort, true), TxnError::InvalidTxnState);
        // The current epoch is the next end. A commit of nothing is one that overtook its
        // batch: told to come again (at once, not waited on), and refused once the
        // transaction's timeout has passed with nothing added; an abort is allowed (with
        // no partitions).
        assert_eq!(
            end_txn(Some(&m), e1, Commit, true, 40, never()),
            Ok(EndDecision::BatchesPending)
        );
        let late = 30 + i64::from(TIMEOUT);
        assert_eq!(
            end_txn(Some(&m), e1, Commit, true, late, never()),
            Ok(EndDecision::BatchesPending),
            "exactly the timeout after the completion"
        );
        assert_eq!(
            end_txn(Some(&m), e1, Commit, true, late + 1, never()),
            Err(TxnError::InvalidTxnState)
        );
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID, 2), Abort, true),
            TxnError::ProducerFenced
        );
        let EndDecision::Prepare { transit, answer } =
            end_txn(Some(&m), e1, Abort, true, 50, never()).unwrap()
        else {
            panic!("not prepared")
        };
        assert_eq!((transit.state, transit.producer_epoch), (PrepareAbort, 2));
        assert!(transit.partitions.is_empty());
        assert_eq!(transit.start_ms, 50, "started now: it had no start");
        assert_eq!(answer, ProducerIdEpoch::new(PID, 2));
        apply(&mut m, transit);
        assert_eq!(
            end_err(&m, e1, Commit, true),
            TxnError::ConcurrentTransactions,
            "a commit crossing an abort waits for it to complete (then it is fenced)"
        );
        let done = complete_end(&m, 50).unwrap();
        apply(&mut m, done);
        let e2 = producer(&m);

        // CompleteAbort: the retry is OK; a commit under the epoch before crossed the
        // abort (fenced, KAFKA-20785), one under the current epoch overtook its batch.
        assert_eq!(
            end_txn(Some(&m), e1, Abort, true, 60, never()),
            Ok(EndDecision::Done(e2))
        );
        assert_eq!(end_err(&m, e1, Commit, true), TxnError::ProducerFenced);
        assert_eq!(
            end_txn(Some(&m), e2, Commit, true, 60, never()),
            Ok(EndDecision::BatchesPending)
        );
        assert!(matches!(
            end_txn(Some(&m), e2, Abort, true, 60, never()),
            Ok(EndDecision::Prepare { .. })
        ));

        // Empty: only the current epoch, and only an abort.
        init(&mut m, &v2(), 70); // epoch 3
        let e3 = producer(&m);
        assert_eq!(e3.epoch, 3);
        assert_eq!(
            end_err(&m, e2, Abort, true),
            TxnError::ProducerFenced,
            "no retry from Empty"
        );
        assert_eq!(
            end_txn(Some(&m), e3, Commit, true, 75, never()),
            Ok(EndDecision::BatchesPending)
        );
        assert_eq!(
            end_txn(Some(&m), e3, Commit, true, 71 + i64::from(TIMEOUT), never()),
            Err(TxnError::InvalidTxnState)
        );
        let EndDecision::Prepare { transit, .. } =
            end_txn(Some(&m), e3, Abort, true, 80, never()).unwrap()
        else {
            panic!("not prepared")
        };
        assert_eq!(transit.producer_epoch, 4);
        apply(&mut m, transit);
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID + 1, 3), Abort, true),
            TxnError::InvalidProducerIdMapping
        );
    }

    /// The interleaving behind the Java producer's rare INVALID_TXN_STATE on commit: its
    /// next transaction's EndTxn comes before that transaction's one batch (EARLY), while
    /// the last end is still completing; the batch's implicit add and the end both wait
    /// for the completion, the add is written first, and an end decided then would write
    /// its marker before the batch is appended — refusing the batch. It is answered
    /// CONCURRENT_TRANSACTIONS instead, and its retry, sent after the batch's answer, ends
    /// the transaction with the batch.
    #[test]
    fn an_end_never_covers_a_partition_added_after_it_arrived() {
        let mut m = new_id(&v2());
        begin(&mut m, &[("t", 0)], true, 10);
        let EndDecision::Prepare { transit, answer } =
            end_txn(Some(&m), producer(&m), Commit, true, 20, never()).unwrap()
        else {
            panic!("not prepared")
        };
        apply(&mut m, transit);
        assert_eq!(
            m.current.state, PrepareCommit,
            "its markers are being written"
        );
        // The next transaction's EndTxn arrives now: it may end nothing yet.
        let covered = end_may_cover(Some(&m));
        assert!(covered.is_empty());
        assert_eq!(
            end_err(&m, answer, Commit, true),
            TxnError::ConcurrentTransactions
        );
        let done = complete_end(&m, 21).unwrap();
        apply(&mut m, done);
        // The batch's add is written first; while it is, the end still waits.
        let AddDecision::Prepare(add) =
            add_for_produce(Some(&m), answer, &parts(&[("t", 1)]), 22).unwrap()
        else {
            panic!("not added")
        };
        m.prepare(&add).unwrap();
        assert_eq!(
            end_err(&m, answer, Commit, true),
            TxnError::ConcurrentTransactions
        );
        assert!(
            end_may_cover(Some(&m)).is_empty(),
            "an add being written is not covered"
        );
        m.complete(add).unwrap();
        // Decided now, the end would commit the partition whose batch is not appended.
        let decision = end_txn(Some(&m), answer, Commit, true, 23, never()).unwrap();
        assert!(
            matches!(&decision, EndDecision::Prepare { transit, .. } if transit.partitions == parts(&[("t", 1)]))
        );
        assert!(end_overtakes_batches(&covered, &decision));
        // The retry, after the batch was answered, arrives with the partition in.
        let covered = end_may_cover(Some(&m));
        assert_eq!(covered, parts(&[("t", 1)]));
        assert!(!end_overtakes_batches(&covered, &decision));

        // Ongoing with one partition, a second being added: nothing is covered while a
        // transition is being written.
        let AddDecision::Prepare(add) =
            add_for_produce(Some(&m), answer, &parts(&[("t", 2)]), 25).unwrap()
        else {
            panic!("not added")
        };
        m.prepare(&add).unwrap();
        let covered = end_may_cover(Some(&m));
        assert!(covered.is_empty());
        m.complete(add).unwrap();
        let decision = end_txn(Some(&m), answer, Commit, true, 26, never()).unwrap();
        assert!(end_overtakes_batches(&covered, &decision));

        // An abort of nothing, a retry answered from the state, an early commit: none
        // ends a partition, so none is held back.
        let none = BTreeSet::new();
        assert!(!end_overtakes_batches(&none, &EndDecision::BatchesPending));
        assert!(!end_overtakes_batches(&none, &EndDecision::Done(answer)));
    }

    #[test]
    fn end_txn_version_2_moves_to_a_new_producer_id_at_the_last_epoch() {
        let mut m = new_id(&v2());
        begin(&mut m, &[("a", 0)], true, 10);
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        let old = producer(&m);
        let EndDecision::Prepare { transit, answer } =
            end_txn(Some(&m), old, Commit, true, 20, gives(NEXT_PID)).unwrap()
        else {
            panic!("not prepared")
        };
        assert_eq!(
            (transit.producer_id, transit.producer_epoch),
            (PID, i16::MAX)
        );
        assert_eq!(transit.next_producer_id, NEXT_PID);
        assert_eq!(
            answer,
            ProducerIdEpoch::new(NEXT_PID, 0),
            "told the id it goes on with"
        );
        let mk = markers(&transit).unwrap();
        assert_eq!(
            (mk.producer_id, mk.producer_epoch),
            (PID, i16::MAX),
            "markers: the old id"
        );
        apply(&mut m, transit);
        assert_eq!(
            end_err(&m, old, Commit, true),
            TxnError::ConcurrentTransactions
        );

        let done = complete_end(&m, 30).unwrap();
        assert_eq!((done.producer_id, done.producer_epoch), (NEXT_PID, 0));
        assert_eq!(
            (done.previous_producer_id, done.last_producer_epoch),
            (PID, EPOCH_EXHAUSTED_AT)
        );
        assert_eq!(done.next_producer_id, -1);
        apply(&mut m, done);

        // The retry with the old id and epoch is recognised.
        let new = ProducerIdEpoch::new(NEXT_PID, 0);
        assert_eq!(
            end_txn(Some(&m), old, Commit, true, 40, never()),
            Ok(EndDecision::Done(new))
        );
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID, 5), Commit, true),
            TxnError::InvalidProducerIdMapping
        );
        assert_eq!(
            add_partitions(Some(&m), old, &parts(&[("a", 0)]), true, 41),
            Err(TxnError::InvalidProducerIdMapping)
        );
        begin(&mut m, &[("a", 0)], true, 42);
        assert_eq!(producer(&m), new);
    }

    #[test]
    fn timed_out_transactions_are_fenced_and_aborted() {
        let cfg = v1();
        let mut m = new_id(&cfg);
        assert!(!is_timed_out(&m, i64::MAX), "Empty never times out");
        begin(&mut m, &[("a", 0)], false, 100);
        let deadline = 100 + i64::from(TIMEOUT);
        assert!(!is_timed_out(&m, deadline), "only past start + timeout");
        assert!(is_timed_out(&m, deadline + 1));
        assert_eq!(timed_out([&m], deadline + 1), vec![("t", producer(&m))]);
        assert!(timed_out([&m], deadline).is_empty());
        assert_eq!(abort_timed_out(&m, &cfg, deadline, never()), Ok(None));

        let t = abort_timed_out(&m, &cfg, deadline + 1, never())
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.state, t.producer_epoch, t.last_producer_epoch),
            (PrepareAbort, 1, -1)
        );
        assert_eq!(t.update_ms, deadline + 1);
        m.prepare(&t).unwrap();
        assert!(
            !is_timed_out(&m, deadline + 1),
            "nothing again while its abort is written"
        );
        m.complete(t).unwrap();
        let done = complete_end(&m, deadline + 2).unwrap();
        apply(&mut m, done);
        assert_eq!(
            end_err(&m, ProducerIdEpoch::new(PID, 0), Commit, false),
            TxnError::ProducerFenced
        );
    }

    #[test]
    fn a_timeout_at_the_last_epoch_moves_to_a_new_producer_id_under_version_2() {
        let cfg = v2();
        let mut m = new_id(&cfg);
        begin(&mut m, &[("a", 0)], true, 0);
        m.current.producer_epoch = EPOCH_EXHAUSTED_AT;
        let old = producer(&m);
        let now = i64::from(TIMEOUT) + 1;
        let t = abort_timed_out(&m, &cfg, now, gives(NEXT_PID))
            .unwrap()
            .unwrap();
        // Fenced to 32767, and no further: the abort does not overflow.
        assert_eq!(
            (t.producer_epoch, t.last_producer_epoch),
            (i16::MAX, EPOCH_EXHAUSTED_AT)
        );
        assert_eq!(t.next_producer_id, NEXT_PID);
        apply(&mut m, t);
        let done = complete_end(&m, now).unwrap();
        assert_eq!((done.producer_id, done.producer_epoch), (NEXT_PID, 0));
        apply(&mut m, done);

        // The client's own abort, arriving late, is taken as a retry of it.
        assert_eq!(
            end_txn(Some(&m), old, Abort, true, now + 1, never()),
            Ok(EndDecision::Done(ProducerIdEpoch::new(NEXT_PID, 0)))
        );
        // Its commit crossed the abort: fenced (KAFKA-20785).
        assert_eq!(end_err(&m, old, Commit, true), TxnError::ProducerFenced);
    }

    #[test]
    fn idle_ids_expire_with_a_tombstone() {
        let cfg = TxnConfig {
            id_expiration_ms: 1000,
            ..v1()
        };
        let mut m = new_id(&cfg); // updated at 0
        assert!(!should_expire(&m, &cfg, 999));
        assert!(
            should_expire(&m, &cfg, 1000),
            "idle for exactly the expiration"
        );
        let e = expire(&m, &cfg, 1000).unwrap().unwrap();
        assert_eq!(
            (e.dead.state, e.dead.producer_id, e.dead.update_ms),
            (Dead, PID, 0)
        );
        assert_eq!(e.tombstone_key, encode_key("t").unwrap());
        let mut dying = m.clone();
        dying.prepare(&e.dead).unwrap();
        assert!(
            !should_expire(&dying, &cfg, 5000),
            "not while a write is pending"
        );
        assert_eq!(
            init_producer_id(Some(&dying), "t", TIMEOUT, None, &cfg, 5000, never()),
            Err(TxnError::ConcurrentTransactions)
        );

        begin(&mut m, &[("a", 0)], false, 0);
        assert_eq!(
            expire(&m, &cfg, 10_000),
            Ok(None),
            "an ongoing transaction never expires"
        );
        let EndDecision::Prepare { transit, .. } =
            end_txn(Some(&m), producer(&m), Commit, false, 0, never()).unwrap()
        else {
            panic!("not prepared")
        };
        apply(&mut m, transit);
        assert_eq!(expire(&m, &cfg, 10_000), Ok(None), "nor an ending one");
        let done = complete_end(&m, 0).unwrap();
        apply(&mut m, done);
        assert!(
            expire(&m, &cfg, 10_000).unwrap().is_some(),
            "a completed one does"
        );
    }

    #[test]
    fn older_clients_get_the_errors_they_know() {
        use TxnApi::*;
        let fenced = TxnError::ProducerFenced;
        let old = TxnError::InvalidProducerEpoch;
        for (api, first) in [
            (InitProducerId, 4),
            (AddPartitionsToTxn, 2),
            (AddOffsetsToTxn, 2),
            (EndTxn, 2),
        ] {
            assert_eq!(api.error_for_version(fenced, first - 1), old, "{api:?}");
            assert_eq!(api.error_for_version(fenced, first), fenced, "{api:?}");
            assert_eq!(
                api.error_for_version(TxnError::InvalidTxnState, 0),
                TxnError::InvalidTxnState
            );
        }
        assert_eq!(
            [
                InitProducerId.key(),
                AddPartitionsToTxn.key(),
                AddOffsetsToTxn.key(),
                EndTxn.key()
            ],
            [22, 24, 25, 26]
        );

        assert!(!EndTxn.is_tv2(4) && EndTxn.is_tv2(5));
        assert!(!AddPartitionsToTxn.is_tv2(3) && AddPartitionsToTxn.is_tv2(4));

        assert_eq!(VerifyMode::for_produce(10), VerifyMode::DefaultError);
        assert_eq!(VerifyMode::for_produce(11), VerifyMode::GenericError);
        assert_eq!(VerifyMode::for_produce(12), VerifyMode::AddPartition);
        assert_eq!(
            VerifyMode::for_txn_offset_commit(3),
            VerifyMode::DefaultError
        );
        assert_eq!(
            VerifyMode::for_txn_offset_commit(4),
            VerifyMode::GenericError
        );
        assert_eq!(
            VerifyMode::for_txn_offset_commit(5),
            VerifyMode::AddPartition
        );
        assert!(VerifyMode::GenericError.verify_only() && !VerifyMode::AddPartition.verify_only());
        let abortable = TxnError::TransactionAbortable;
        assert_eq!(
            VerifyMode::DefaultError.error_for_producer(abortable),
            TxnError::InvalidTxnState
        );
        assert_eq!(
            VerifyMode::GenericError.error_for_producer(abortable),
            abortable
        );
        for mode in [
            VerifyMode::DefaultError,
            VerifyMode::GenericError,
            VerifyMode::AddPartition,
        ] {
            assert_eq!(mode.error_for_producer(fenced), old);
        }
    }

    #[test]
    fn log_append_errors_become_coordinator_errors() {
        for (append, client) in [
            (3, 15),
            (19, 15),
            (20, 15),
            (7, 15),
            (6, 16),
            (56, 16),
            (10, -1),
            (18, -1),
            (87, 87),
        ] {
            assert_eq!(coordinator_error_for_append(append), client, "{append}");
        }
    }
}

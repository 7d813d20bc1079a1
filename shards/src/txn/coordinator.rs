//! A shard's transaction coordinator: the transactional ids whose `__transaction_state`
//! partition this shard owns and this broker leads, their durable state, the markers
//! that end their transactions, and their timers.
//!
//! Every change of an id's state is made as `state` requires: decided by `rules`,
//! marked pending, written to the id's `__transaction_state` partition and committed
//! (acks=all), and only then applied and answered. An end (EndTxn, a fence by
//! InitProducerId, a timed out transaction) writes PrepareCommit or PrepareAbort; once
//! that is durable the client is answered and, in a task of its own, the markers go to
//! every partition of the transaction (`markers`) and CompleteCommit or CompleteAbort is
//! written. Until then the id answers CONCURRENT_TRANSACTIONS (retriable).
//!
//! Leadership: when this broker becomes the leader of a `__transaction_state` partition,
//! the partition is replayed (`load_partition`) and its ids come back as last written; a
//! transaction left in PrepareCommit or PrepareAbort by the previous coordinator has its
//! markers written and is completed here. The coordinator epoch written into markers is
//! the partition's leader epoch, so a partition leader refuses the markers of a deposed
//! coordinator. Until a partition is loaded its ids are answered
//! COORDINATOR_LOAD_IN_PROGRESS; once this broker no longer leads it they are forgotten
//! (`unload_partition`) and answered NOT_COORDINATOR.
//!
//! Invariants: an id is touched only on its coordinator shard, and only while its
//! partition is loaded; a change is applied only if the partition is still held with the
//! epoch and load it was written under (checked after every await); no `RefCell` borrow
//! is held across an `.await`; a client is told of a change only once it is committed.

use super::log_record::{self, decode_key, decode_value, encode_key, encode_value};
use super::markers::{BrokerLinks, MarkerError};
use super::rules::{
    self, AddDecision, EndDecision, InitAction, ProducerIdEpoch, TxnConfig, TxnError,
};
use super::state::{Transit, TxnMetadata, TxnState};
use super::types::{AddMode, TxnAnswer, TxnDescription, TxnOp};
use super::{partition_for_transactional_id, TRANSACTION_TOPIC_PARTITIONS_DEFAULT};
use crate::coordinator_log::NewerRecord;
use crate::metadata::ClusterMetadata;
use corelog_kafka_client::security::ClientSecurity;
use corelog_partition::{AckError, Partition};
use corelog_storage::batch;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::AppendError;
use futures::future::LocalBoxFuture;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a write to `__transaction_state` may wait to be committed before the client
/// is answered COORDINATOR_NOT_AVAILABLE (Kafka's `request.timeout.ms` default).
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two tries of a completion the log refused.
const COMPLETE_RETRY: Duration = Duration::from_millis(200);
/// How long an add (or an end) waits for an ending transaction of its id before it is
/// refused CONCURRENT_TRANSACTIONS (`TxnCoordinator::add`).
const ADD_WAITS_FOR_END: Duration = Duration::from_millis(100);

/// Notifies everything waiting on a transition when dropped: after the transition's
/// state is applied or dropped, on every path out of `TxnCoordinator::transition`.
struct Settled<'a>(&'a event_listener::Event);

impl Drop for Settled<'_> {
    fn drop(&mut self) {
        self.0.notify(usize::MAX);
    }
}

/// The coordinator's settings (Kafka's names in the field docs).
#[derive(Debug, Clone)]
pub struct TxnCoordinatorConfig {
    /// `transaction.state.log.num.partitions`.
    pub partitions: i32,
    /// `transaction.max.timeout.ms`, `transactional.id.expiration.ms` and the cluster's
    /// transaction version.
    pub rules: TxnConfig,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_timed_out_interval: Duration,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub remove_expired_interval: Duration,
    /// `transaction.state.log.replication.factor`.
    pub replication_factor: i32,
    /// `transaction.state.log.min.isr`.
    pub min_isr: i32,
    /// `transaction.state.log.segment.bytes`.
    pub segment_bytes: u64,
    /// `offsets.topic.num.partitions`: where AddOffsetsToTxn's group lives.
    pub offsets_partitions: i32,
    /// `transaction.partition.verification.enable`: partition leaders verify a batch
    /// that opens a transaction with its coordinator (KIP-890 part 1).
    pub verify_partitions: bool,
    /// The configured `transaction.version` (0..=2): a new cluster's, and the one served
    /// while the cluster has finalized no feature levels; otherwise the metadata log's
    /// finalized level rules (`TxnCoordinator::rules`).
    pub transaction_version: i16,
}

impl Default for TxnCoordinatorConfig {
    fn default() -> Self {
        TxnCoordinatorConfig {
            partitions: TRANSACTION_TOPIC_PARTITIONS_DEFAULT,
            rules: TxnConfig::kafka_defaults(false),
            abort_timed_out_interval: Duration::from_secs(10),
            remove_expired_interval: Duration::from_secs(3600),
            replication_factor: 3,
            min_isr: 2,
            segment_bytes: 100 << 20,
            offsets_partitions: crate::group::OFFSETS_TOPIC_PARTITIONS_DEFAULT,
            verify_partitions: true,
            transaction_version: 1,
        }
    }
}

/// What the coordinator needs of the shard it runs on.
pub trait TxnHost {
    /// This shard's replica of `__transaction_state` partition `partition`.
    fn txn_log(&self, partition: i32) -> Option<Rc<Partition>>;
    fn metadata(&self) -> Arc<ClusterMetadata>;
    /// A producer id never handed out before.
    fn allocate_producer_id(&self) -> LocalBoxFuture<'_, Result<i64, TxnError>>;
}

/// How this shard holds a `__transaction_state` partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Being replayed under `epoch` (load number `load`).
    Loading { epoch: i32, load: u64 },
    /// Served, under `epoch` (the partition's leader epoch: the coordinator epoch).
    Loaded { epoch: i32, load: u64 },
}

pub struct TxnCoordinator {
    config: TxnCoordinatorConfig,
    host: RefCell<Option<Weak<dyn TxnHost>>>,
    txns: RefCell<HashMap<String, TxnMetadata>>,
    held: RefCell<HashMap<i32, Held>>,
    loads: Cell<u64>,
    links: BrokerLinks,
    /// Notified whenever a transition ends (written and applied, or dropped): what an
    /// add held back by a transaction that is ending waits for (`add`).
    settled: event_listener::Event,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl TxnCoordinator {
    pub fn new(config: TxnCoordinatorConfig, node_id: i32, security: ClientSecurity) -> Self {
        TxnCoordinator {
            config,
            host: RefCell::new(None),
            txns: RefCell::new(HashMap::new()),
            held: RefCell::new(HashMap::new()),
            loads: Cell::new(0),
            links: BrokerLinks::new(node_id, security),
            settled: event_listener::Event::new(),
        }
    }

    pub fn set_host(&self, host: Weak<dyn TxnHost>) {
        *self.host.borrow_mut() = Some(host);
    }

    /// The connections to other brokers the coordinator's requests go over, shared with
    /// the partition leaders' verifications.
    pub fn links(&self) -> &BrokerLinks {
        &self.links
    }

    pub fn config(&self) -> &TxnCoordinatorConfig {
        &self.config
    }

    /// The `__transaction_state` partition of `transactional_id`.
    pub fn partition_of(&self, transactional_id: &str) -> i32 {
        partition_for_transactional_id(transactional_id, self.config.partitions)
    }

    /// The rules' settings, under the cluster's finalized `transaction.version` (the
    /// configured one while the cluster has finalized no feature levels).
    fn rules(&self) -> TxnConfig {
        let mut cfg = self.config.rules;
        if let Ok(host) = self.host() {
            let meta = host.metadata();
            if !meta.features.is_empty() {
                let level = meta
                    .features
                    .get(corelog_controller::features::TRANSACTION_VERSION)
                    .copied()
                    .unwrap_or(0);
                cfg.server_tv2 = level >= 2;
            }
        }
        cfg
    }

    fn host(&self) -> Result<Rc<dyn TxnHost>, TxnError> {
        self.host
            .borrow()
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or(TxnError::NotCoordinator)
    }

    /// The epoch and load `partition` is served under.
    fn serving(&self, partition: i32) -> Result<(i32, u64), TxnError> {
        match self.held.borrow().get(&partition) {
            Some(Held::Loaded { epoch, load }) => Ok((*epoch, *load)),
            Some(Held::Loading { .. }) => Err(TxnError::CoordinatorLoadInProgress),
            None => Err(TxnError::NotCoordinator),
        }
    }

    // -----------------------------------------------------------------------------------
    // Leadership

    /// Replays `__transaction_state` partition `partition` (`log`, which this broker now
    /// leads) to its log end and serves its ids; transactions left half ended are ended.
    pub async fn load_partition(self: &Rc<Self>, partition: i32, log: Rc<Partition>) {
        let load = self.loads.get() + 1;
        self.loads.set(load);
        let epoch = log.leader_epoch();
        self.held
            .borrow_mut()
            .insert(partition, Held::Loading { epoch, load });
        let mut loaded: HashMap<String, TxnMetadata> = HashMap::new();
        let end = log.log_end_offset();
        // What was appended but is not written yet is read too: the replay must hold
        // everything in the log when the leadership came.
        log.wait_beyond_log_end(end - 1, std::time::Instant::now() + COMMIT_TIMEOUT)
            .await;
        let mut records = 0usize;
        let replayed = crate::coordinator_log::replay(
            &log,
            || end,
            |h, bytes| {
                if h.is_control() {
                    return Ok(());
                }
                for r in batch::records(bytes).unwrap_or_default() {
                    records += 1;
                    apply_record(&mut loaded, r.offset, r.key, r.value)?;
                }
                Ok(())
            },
        )
        .await;
        if let Err(e) = replayed {
            // A newer record's release must serve it: what was read so far would be a
            // misread state.
            tracing::error!(
                partition = %format!("__transaction_state-{partition}"),
                error = %e,
                "the partition's transactions are not served"
            );
            if self.held.borrow().get(&partition) == Some(&Held::Loading { epoch, load }) {
                self.held.borrow_mut().remove(&partition);
            }
            return;
        }
        if self.held.borrow().get(&partition) != Some(&Held::Loading { epoch, load }) {
            return; // unloaded or loaded again meanwhile
        }
        let unfinished: Vec<String> = loaded
            .values()
            .filter(|m| matches!(m.state(), TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|m| m.transactional_id.clone())
            .collect();
        {
            let mut txns = self.txns.borrow_mut();
            let n = self.config.partitions;
            txns.retain(|id, _| partition_for_transactional_id(id, n) != partition);
            txns.extend(loaded);
        }
        self.held
            .borrow_mut()
            .insert(partition, Held::Loaded { epoch, load });
        tracing::debug!(
            partition,
            epoch,
            records,
            unfinished = unfinished.len(),
            "transaction coordinator loaded a partition"
        );
        for id in unfinished {
            self.finish_later(id);
        }
    }

    /// This broker no longer leads `partition`: its ids are forgotten; work in flight for
    /// them finds the partition gone and stops.
    pub fn unload_partition(&self, partition: i32) {
        if self.held.borrow_mut().remove(&partition).is_some() {
            let n = self.config.partitions;
            self.txns
                .borrow_mut()
                .retain(|id, _| partition_for_transactional_id(id, n) != partition);
            tracing::debug!(partition, "transaction coordinator unloaded a partition");
        }
    }

    /// The epoch a partition is served (or being loaded) under, if it is: a leadership
    /// that keeps this broker leader under a new epoch loads it again, the same epoch
    /// does not.
    pub fn served_epoch(&self, partition: i32) -> Option<i32> {
        match self.held.borrow().get(&partition) {
            Some(Held::Loaded { epoch, .. } | Held::Loading { epoch, .. }) => Some(*epoch),
            None => None,
        }
    }

    // -----------------------------------------------------------------------------------
    // Requests

    pub async fn handle(self: &Rc<Self>, op: TxnOp) -> TxnAnswer {
        match op {
            TxnOp::InitProducerId {
                transactional_id,
                timeout_ms,
                expected,
            } => TxnAnswer::Producer(
                self.init_producer_id(transactional_id, timeout_ms, expected)
                    .await,
            ),
            TxnOp::AddPartitions {
                transactional_id,
                producer,
                partitions,
                mode: AddMode::Verify,
            } => TxnAnswer::Verified(
                self.until_settled(|| async {
                    self.serving(self.partition_of(&transactional_id))?;
                    let txns = self.txns.borrow();
                    rules::verify_partitions(txns.get(&transactional_id), producer, &partitions)
                })
                .await,
            ),
            TxnOp::AddPartitions {
                transactional_id,
                producer,
                partitions,
                mode,
            } => TxnAnswer::Added(
                self.add(&transactional_id, |meta, now| {
                    rules::add_partitions(
                        meta,
                        producer,
                        &partitions,
                        mode == AddMode::Implicit,
                        now,
                    )
                })
                .await,
            ),
            TxnOp::AddOffsets {
                transactional_id,
                producer,
                group,
            } => {
                let n = self.config.offsets_partitions;
                TxnAnswer::Added(
                    self.add(&transactional_id, |meta, now| {
                        rules::add_offsets(meta, producer, &group, n, now)
                    })
                    .await,
                )
            }
            TxnOp::EndTxn {
                transactional_id,
                producer,
                outcome,
                tv2,
            } => TxnAnswer::Producer(self.end_txn(transactional_id, producer, outcome, tv2).await),
            TxnOp::Describe { ids } => TxnAnswer::Described(
                ids.into_iter()
                    .map(|id| {
                        let d = self.describe(&id);
                        (id, d)
                    })
                    .collect(),
            ),
            TxnOp::List {
                states,
                producer_ids,
                min_duration_ms,
            } => TxnAnswer::Listed(self.list(&states, &producer_ids, min_duration_ms)),
        }
    }

    /// Runs a decision that needs a new producer id only sometimes: first without one;
    /// if it asked for one, again with an id allocated meanwhile (the state may have
    /// changed during the allocation, so the decision is made anew).
    async fn decide_with_id<T>(
        &self,
        partition: i32,
        decide: impl Fn(&mut dyn FnMut() -> Result<i64, TxnError>) -> Result<T, TxnError>,
    ) -> Result<T, TxnError> {
        let mut spare: Option<i64> = None;
        for _ in 0..2 {
            self.serving(partition)?;
            let needed = Cell::new(false);
            let mut take = || {
                spare.take().ok_or_else(|| {
                    needed.set(true);
                    // Only seen when no id is at hand: the decision is made again.
                    TxnError::CoordinatorLoadInProgress
                })
            };
            let result = decide(&mut take);
            if !needed.get() {
                return result;
            }
            spare = Some(self.host()?.allocate_producer_id().await?);
        }
        Err(TxnError::CoordinatorLoadInProgress)
    }

    async fn init_producer_id(
        self: &Rc<Self>,
        id: String,
        timeout_ms: i32,
        expected: Option<ProducerIdEpoch>,
    ) -> Result<ProducerIdEpoch, TxnError> {
        let partition = self.partition_of(&id);
        // An id too long for its record key could never be written (nor expire).
        if encode_key(&id).is_err() {
            return Err(TxnError::InvalidRequest);
        }
        let cfg = self.rules();
        let decision = self
            .decide_with_id(partition, |allocate| {
                let txns = self.txns.borrow();
                rules::init_producer_id(
                    txns.get(&id),
                    &id,
                    timeout_ms,
                    expected,
                    &cfg,
                    now_ms(),
                    allocate,
                )
            })
            .await?;
        if let Some(created) = decision.created {
            self.txns.borrow_mut().entry(id.clone()).or_insert(created);
        }
        match decision.action {
            InitAction::Answer(t) => {
                let answer = ProducerIdEpoch::new(t.producer_id, t.producer_epoch);
                self.transition(&id, t).await?;
                Ok(answer)
            }
            InitAction::FenceOngoing(t) => {
                self.transition(&id, t).await?;
                self.finish_later(id);
                Err(TxnError::ConcurrentTransactions)
            }
        }
    }

    /// Runs `decide` until it is not refused CONCURRENT_TRANSACTIONS — the id's last
    /// transaction still ending (its markers being written), or another transition being
    /// written — deciding again as each transition ends, for up to
    /// [`ADD_WAITS_FOR_END`], before the refusal goes back. A producer starts its next
    /// transaction as soon as its end is answered, and under transaction version 2 its
    /// first produce arrives while the markers are still being written, which would
    /// otherwise cost it a retry after a client backoff (Kafka's partition leaders retry
    /// such adds every 20 ms).
    async fn until_settled<T, F, Fut>(&self, mut decide: F) -> Result<T, TxnError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TxnError>>,
    {
        let deadline = std::time::Instant::now() + ADD_WAITS_FOR_END;
        loop {
            // Listening before deciding: an end applied in between still wakes this.
            let settled = self.settled.listen();
            let decided = decide().await;
            let now = std::time::Instant::now();
            match decided {
                Err(TxnError::ConcurrentTransactions) if now < deadline => {
                    let timeout = async {
                        glommio::timer::sleep(deadline - now).await;
                    };
                    futures_lite::future::or(settled, timeout).await;
                }
                other => return other,
            }
        }
    }

    /// Adds partitions as `decide` says, once no other transition of the id is in the
    /// way (`until_settled`).
    async fn add(
        &self,
        id: &str,
        decide: impl Fn(Option<&TxnMetadata>, i64) -> Result<AddDecision, TxnError>,
    ) -> Result<(), TxnError> {
        let decision = self
            .until_settled(|| async {
                self.serving(self.partition_of(id))?;
                let txns = self.txns.borrow();
                decide(txns.get(id), now_ms())
            })
            .await?;
        match decision {
            AddDecision::AlreadyAdded => Ok(()),
            AddDecision::Prepare(t) => self.transition(id, t).await,
        }
    }

    async fn end_txn(
        self: &Rc<Self>,
        id: String,
        producer: ProducerIdEpoch,
        outcome: rules::TxnOutcome,
        tv2: bool,
    ) -> Result<ProducerIdEpoch, TxnError> {
        let partition = self.partition_of(&id);
        // What the end may cover is fixed as it arrives (`rules::end_may_cover`).
        let covered = rules::end_may_cover(self.txns.borrow().get(&id));
        // As an add does: an end refused because the last one is still being completed
        // waits for it.
        let decision = self
            .until_settled(|| {
                self.decide_with_id(partition, |allocate| {
                    let txns = self.txns.borrow();
                    rules::end_txn(txns.get(&id), producer, outcome, tv2, now_ms(), allocate)
                })
            })
            .await?;
        if rules::end_overtakes_batches(&covered, &decision) {
            return Err(TxnError::ConcurrentTransactions);
        }
        match decision {
            EndDecision::Done(answer) => Ok(answer),
            EndDecision::BatchesPending => Err(TxnError::ConcurrentTransactions),
            EndDecision::Prepare { transit, answer } => {
                self.transition(&id, transit).await?;
                self.finish_later(id);
                Ok(answer)
            }
        }
    }

    fn describe(&self, id: &str) -> Result<TxnDescription, TxnError> {
        self.serving(self.partition_of(id))?;
        let txns = self.txns.borrow();
        match txns.get(id) {
            Some(m) if m.pending != Some(TxnState::Dead) => Ok(description(m)),
            _ => Err(TxnError::TransactionalIdNotFound),
        }
    }

    fn list(
        &self,
        states: &[String],
        producer_ids: &[i64],
        min_duration_ms: i64,
    ) -> Result<Vec<TxnDescription>, TxnError> {
        let now = now_ms();
        let n = self.config.partitions;
        let held = self.held.borrow();
        if held.values().any(|h| matches!(h, Held::Loading { .. })) {
            return Err(TxnError::CoordinatorLoadInProgress);
        }
        let mut out: Vec<TxnDescription> = self
            .txns
            .borrow()
            .values()
            .filter(|m| {
                matches!(
                    held.get(&partition_for_transactional_id(&m.transactional_id, n)),
                    Some(Held::Loaded { .. })
                )
            })
            .filter(|m| m.pending != Some(TxnState::Dead))
            .filter(|m| states.is_empty() || states.iter().any(|s| s == m.state().name()))
            .filter(|m| producer_ids.is_empty() || producer_ids.contains(&m.current.producer_id))
            // Kafka's filter: running strictly longer than the duration, in any state (one
            // with no transaction started, start -1, always is).
            .filter(|m| {
                min_duration_ms < 0 || now.saturating_sub(m.current.start_ms) > min_duration_ms
            })
            .map(description)
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(out)
    }

    // -----------------------------------------------------------------------------------
    // Writing

    /// Makes `transit` the id's state: prepared, written and committed, then applied.
    async fn transition(&self, id: &str, transit: Transit) -> Result<(), TxnError> {
        let partition = self.partition_of(id);
        let serving = self.serving(partition)?;
        {
            let mut txns = self.txns.borrow_mut();
            let meta = txns.get_mut(id).ok_or(TxnError::InvalidProducerIdMapping)?;
            meta.prepare(&transit).map_err(|e| match e {
                super::state::TransitionError::Pending { .. } => TxnError::ConcurrentTransactions,
                e => {
                    tracing::error!(transactional_id = id, error = %e, "a transition the rules chose was refused");
                    TxnError::UnknownServerError
                }
            })?;
        }
        let written = self.write(partition, id, Some(&transit), serving).await;
        // However it ends, what waits on this id may go on (`add`).
        let _settled = Settled(&self.settled);
        if self.serving(partition) != Ok(serving) {
            // Unloaded (or loaded again) meanwhile: the state is no longer this load's.
            return Err(TxnError::NotCoordinator);
        }
        let mut txns = self.txns.borrow_mut();
        let meta = txns.get_mut(id).ok_or(TxnError::NotCoordinator)?;
        match written {
            Ok(()) => meta.complete(transit).map_err(|e| {
                tracing::error!(transactional_id = id, error = %e, "a written transition breaks an invariant");
                TxnError::UnknownServerError
            }),
            Err(e) => {
                meta.abandon();
                Err(e)
            }
        }
    }

    /// Writes the record of `id` (`None`: its tombstone) to its partition and waits for
    /// it to be committed, under the epoch and load `serving`.
    async fn write(
        &self,
        partition: i32,
        id: &str,
        transit: Option<&Transit>,
        serving: (i32, u64),
    ) -> Result<(), TxnError> {
        let log = self
            .host()?
            .txn_log(partition)
            .ok_or(TxnError::NotCoordinator)?;
        if !log.is_leader() || log.leader_epoch() != serving.0 {
            return Err(TxnError::NotCoordinator);
        }
        if log.isr_len() < log.min_insync_replicas() {
            return Err(TxnError::CoordinatorNotAvailable);
        }
        let key = encode_key(id).map_err(|_| TxnError::InvalidRequest)?;
        let value = match transit {
            Some(t) => Some(
                encode_value(&log_record::value_of(t), log_record::value_version(t))
                    .map_err(|_| TxnError::InvalidRequest)?,
            ),
            None => None,
        };
        let mut builder = BatchBuilder::new(now_ms());
        builder.push(&Record {
            key: Some(&key),
            value: value.as_deref(),
            headers: &[],
            timestamp_delta: 0,
        });
        let ticket = log.append(&builder.build()).map_err(append_error)?;
        let committed =
            futures_lite::future::or(async { Some(log.wait_committed(ticket).await) }, async {
                glommio::timer::sleep(COMMIT_TIMEOUT).await;
                None
            })
            .await;
        match committed {
            Some(Ok(())) => Ok(()),
            Some(Err(AckError::Append(e))) => Err(append_error(e)),
            Some(Err(AckError::NotLeader)) => Err(TxnError::NotCoordinator),
            Some(Err(AckError::NotEnoughReplicasAfterAppend)) | None => {
                Err(TxnError::CoordinatorNotAvailable)
            }
        }
    }

    /// Ends `id`'s prepared transaction in a task of its own: its markers, then its
    /// completion.
    fn finish_later(self: &Rc<Self>, id: String) {
        let me = self.clone();
        glommio::spawn_local(async move { me.finish(id).await }).detach();
    }

    async fn finish(&self, id: String) {
        let partition = self.partition_of(&id);
        let Ok(serving) = self.serving(partition) else {
            return;
        };
        let Some(markers) = self
            .txns
            .borrow()
            .get(&id)
            .and_then(|m| rules::markers(&m.current))
        else {
            return;
        };
        let Ok(host) = self.host() else { return };
        let written = self
            .links
            .write(
                &markers,
                serving.0,
                || host.metadata(),
                || self.serving(partition) == Ok(serving),
            )
            .await;
        match written {
            Ok(()) => {}
            Err(MarkerError::NotCoordinator) => return,
            Err(e) => {
                tracing::warn!(transactional_id = %id, error = %e, "transaction markers refused; left to the coordinator that replaced this one");
                return;
            }
        }
        loop {
            if self.serving(partition) != Ok(serving) {
                return;
            }
            let complete = self
                .txns
                .borrow()
                .get(&id)
                .map(|m| rules::complete_end(m, now_ms()));
            let transit = match complete {
                Some(Ok(t)) => t,
                // Something else is being written: try once it is.
                Some(Err(TxnError::ConcurrentTransactions)) => {
                    glommio::timer::sleep(COMPLETE_RETRY).await;
                    continue;
                }
                _ => return,
            };
            match self.transition(&id, transit).await {
                Ok(()) | Err(TxnError::NotCoordinator) => return,
                Err(e) => {
                    tracing::debug!(transactional_id = %id, error = %e, "completing a transaction; trying again");
                    glommio::timer::sleep(COMPLETE_RETRY).await;
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Timers

    /// Starts the timers: timed out transactions aborted, idle ids removed.
    pub fn start_timers(self: &Rc<Self>) {
        let me = self.clone();
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(me.config.abort_timed_out_interval).await;
                me.abort_timed_out().await;
            }
        })
        .detach();
        let me = self.clone();
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(me.config.remove_expired_interval).await;
                me.remove_expired().await;
            }
        })
        .detach();
    }

    /// Aborts every loaded transaction that has run past its timeout, as Kafka's
    /// coordinator does: its producer fenced, PrepareAbort written, then its markers and
    /// completion. Nobody is answered.
    pub async fn abort_timed_out(self: &Rc<Self>) {
        let now = now_ms();
        let ids: Vec<String> = {
            let txns = self.txns.borrow();
            rules::timed_out(txns.values(), now)
                .into_iter()
                .map(|(id, _)| id.to_owned())
                .collect()
        };
        let cfg = self.rules();
        for id in ids {
            let partition = self.partition_of(&id);
            let decided = self
                .decide_with_id(partition, |allocate| {
                    let txns = self.txns.borrow();
                    match txns.get(&id) {
                        Some(m) => rules::abort_timed_out(m, &cfg, now_ms(), allocate),
                        None => Ok(None),
                    }
                })
                .await;
            let Ok(Some(transit)) = decided else { continue };
            tracing::info!(transactional_id = %id, producer_id = transit.producer_id, "aborting a transaction past its timeout");
            match self.transition(&id, transit).await {
                Ok(()) => self.finish_later(id),
                Err(e) => {
                    tracing::debug!(transactional_id = %id, error = %e, "aborting a timed out transaction; tried again next round")
                }
            }
        }
    }

    /// Removes the ids idle for `transactional.id.expiration.ms`: a tombstone written,
    /// then the id forgotten.
    pub async fn remove_expired(&self) {
        let now = now_ms();
        let cfg = self.rules();
        let expiries: Vec<(String, Transit)> = {
            let txns = self.txns.borrow();
            txns.values()
                .filter_map(|m| {
                    let e = rules::expire(m, &cfg, now).ok()??;
                    Some((m.transactional_id.clone(), e.dead))
                })
                .collect()
        };
        for (id, dead) in expiries {
            let partition = self.partition_of(&id);
            let Ok(serving) = self.serving(partition) else {
                continue;
            };
            // Re-decided now: an earlier tombstone's write was awaited, and the id may have
            // been used again meanwhile (a new epoch: not expired any more).
            let prepared = self.txns.borrow_mut().get_mut(&id).and_then(|m| {
                let same = m.current.producer_id == dead.producer_id
                    && m.current.producer_epoch == dead.producer_epoch
                    && rules::should_expire(m, &cfg, now_ms());
                same.then(|| m.prepare(&dead))
            });
            if !matches!(prepared, Some(Ok(()))) {
                continue;
            }
            let written = self.write(partition, &id, None, serving).await;
            if self.serving(partition) != Ok(serving) {
                continue;
            }
            let mut txns = self.txns.borrow_mut();
            match written {
                Ok(()) => {
                    txns.remove(&id);
                    tracing::debug!(transactional_id = %id, "removed an expired transactional id");
                }
                Err(_) => {
                    if let Some(m) = txns.get_mut(&id) {
                        m.abandon();
                    }
                }
            }
        }
    }
}

/// Takes one `__transaction_state` record into the ids being loaded: the last record of
/// an id is its state, a tombstone removes it; a record that does not decode is skipped
/// (logged: a newer version's, or damage).
/// Replays the record at `offset` into `loaded`; one of a version newer than this
/// release reads is refused, one that does not decode otherwise skipped with a warning.
fn apply_record(
    loaded: &mut HashMap<String, TxnMetadata>,
    offset: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<(), NewerRecord> {
    let Some(key) = key else { return Ok(()) };
    let id = match decode_key(key) {
        Ok(id) => id,
        Err(e) => return skip_txn_record(e, offset),
    };
    match value.map(decode_value) {
        None => {
            loaded.remove(&id);
        }
        Some(Ok(v)) => {
            let current = log_record::transit_of(&v);
            if !current.state.is_written() {
                return Ok(());
            }
            loaded.insert(
                id.clone(),
                TxnMetadata {
                    transactional_id: id,
                    current,
                    pending: None,
                    version2: false,
                },
            );
        }
        Some(Err(e)) => return skip_txn_record(e, offset),
    }
    Ok(())
}

fn skip_txn_record(e: log_record::TxnRecordError, offset: i64) -> Result<(), NewerRecord> {
    if let log_record::TxnRecordError::UnknownVersion { what, version } = e {
        return Err(NewerRecord {
            offset,
            record: what,
            version,
        });
    }
    tracing::warn!(offset, error = %e, "skipping a __transaction_state record that does not decode");
    Ok(())
}

fn description(m: &TxnMetadata) -> TxnDescription {
    TxnDescription {
        transactional_id: m.transactional_id.clone(),
        state: m.state().name(),
        producer_id: m.current.producer_id,
        producer_epoch: m.current.producer_epoch,
        timeout_ms: m.current.timeout_ms,
        start_ms: m.current.start_ms,
        partitions: m.current.partitions.clone(),
    }
}

/// What a refused append of a coordinator record tells the client (Kafka's mapping of
/// the append's error, `rules::coordinator_error_for_append`).
fn append_error(e: AppendError) -> TxnError {
    match e {
        AppendError::Closed | AppendError::Storage(_) => TxnError::NotCoordinator,
        AppendError::InvalidBatch(_)
        | AppendError::Empty
        | AppendError::RecordsRejected(_)
        | AppendError::Sequence(_)
        | AppendError::OffsetMismatch { .. } => TxnError::UnknownServerError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::state::TxnPartition;
    use std::collections::BTreeSet;

    fn record(t: &Transit) -> Vec<u8> {
        encode_value(&log_record::value_of(t), log_record::value_version(t)).expect("encodes")
    }

    #[test]
    fn a_replay_keeps_each_ids_last_record_and_drops_tombstones() {
        let mut loaded = HashMap::new();
        let a = TxnMetadata::new("a", 7, 60_000, 1);
        let mut ongoing = a.current.clone();
        ongoing.producer_epoch = 0;
        ongoing.state = TxnState::Ongoing;
        ongoing.partitions = BTreeSet::from([("t".to_owned(), 0)] as [TxnPartition; 1]);
        ongoing.start_ms = 5;
        let mut empty = a.current.clone();
        empty.producer_epoch = 0;
        let key = encode_key("a").expect("key");
        apply_record(&mut loaded, 0, Some(&key), Some(&record(&empty))).unwrap();
        apply_record(&mut loaded, 1, Some(&key), Some(&record(&ongoing))).unwrap();
        assert_eq!(loaded.get("a").map(|m| m.state()), Some(TxnState::Ongoing));
        assert_eq!(loaded.get("a").map(|m| m.current.partitions.len()), Some(1));
        // A known version that does not decode is skipped.
        apply_record(&mut loaded, 2, Some(&key), Some(b"\x00\x01junk")).unwrap();
        assert!(loaded.contains_key("a"));
        // A newer version is refused, naming where and which.
        let newer = apply_record(&mut loaded, 3, Some(&key), Some(b"\x00\x09junk")).unwrap_err();
        assert_eq!((newer.offset, newer.version), (3, 9), "{newer}");
        let newer = apply_record(&mut loaded, 4, Some(b"\x00\x07key"), None).unwrap_err();
        assert_eq!((newer.offset, newer.version), (4, 7), "{newer}");
        assert!(loaded.contains_key("a"));
        // A tombstone removes.
        apply_record(&mut loaded, 5, Some(&key), None).unwrap();
        assert!(loaded.is_empty());
    }
}

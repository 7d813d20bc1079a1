//! Transactions across the replicated partitions of `replication` (a world each): two
//! instances of one transactional producer (each fencing the other when it starts, as a
//! restarted application fences its zombie) write transactions to some of the
//! partitions under every fault of their worlds, a coordinator decides with the broker's
//! own rules (`corelog_shards::txn::rules`, `state`) and writes its markers to each
//! partition's leader, and a read_committed consumer of each partition reads from its
//! leader as a Kafka client does (below the last stable offset, dropping what the
//! aborted-transaction list names).
//!
//! The coordinator's state is one id's `TxnMetadata`, each transition applied at once as
//! if its `__transaction_state` record were durable (that log is a replicated partition
//! like any other). Its requests and answers, and its markers, travel over the lossy
//! network; its own aborts of timed out transactions run on its timer. It fails over
//! now and then, as when its `__transaction_state` partition changes leader: the next
//! coordinator, one coordinator epoch up, loads the same state and writes an end's
//! markers again to every partition of it, while a marker the old one had sent may
//! still arrive, late, anywhere — a partition must refuse it once it has seen the new
//! coordinator's (its transaction may be over and the producer's next one open there).
//! Clients speak transaction version 1 (AddPartitionsToTxn before the first produce;
//! one epoch across transactions until a fence), so the producer epoch alone cannot
//! fence such a marker.
//!
//! Checked (any breach fails the seed):
//! - no read_committed read returns a batch at or above the last stable offset it was
//!   served with, nor a transactional batch whose marker was not below the high
//!   watermark it was served with (so the outcome it read cannot be lost with a leader),
//!   nor delivers a record of a transaction that was not committed;
//! - at the end, every transaction ended on every partition: the coordinator holds none
//!   in flight, each partition's last stable offset is its high watermark, and a
//!   read_committed read of each whole log delivers every record of committed
//!   transactions in it and none of aborted ones (so a transaction's partitions agree
//!   on its outcome), every record acknowledged in a transaction whose commit was
//!   acknowledged among them.

use crate::net::Delivery;
use crate::replication::{acked_in_time, Workload, World, BACKOFF, CLIENT};
use crate::rng::Rng;
use corelog_partition::{Isolation, Partition, Reader};
use corelog_shards::txn::rules::{
    self, AddDecision, EndDecision, InitAction, ProducerIdEpoch, TxnConfig, TxnError, TxnOutcome,
};
use corelog_shards::txn::state::{Transit, TxnMetadata, TxnState};
use corelog_storage::batch::batches;
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::batch_filter::for_each_record;
use corelog_storage::error::AppendError;
use corelog_storage::producer_state::SequenceError;
use corelog_storage::txn_index::AbortedTxn;
use corelog_storage::txn_marker::{self, MarkerKind, TxnMarker};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

const TRANSACTIONAL_ID: &str = "sim-txn";
const TOPIC: &str = "t";
/// The producers' `transaction.timeout.ms`: the coordinator aborts past it.
const TXN_TIMEOUT_MS: i32 = 800;
/// In percent, the chance at each tick of the coordinator's timer (100 ms) that it fails
/// over while faults are played.
const FAILOVER_CHANCE: u64 = 2;
/// Longest a marker of a failed coordinator may still be on its way.
const STALE_MARKER_DELAY_MS: u64 = 500;
const FIRST_PRODUCER_ID: i64 = 9_000;

/// The coordinator and what the run learnt of each transaction. A transaction is named
/// by its tag, which its records' keys carry (`x<tag>-<n>`).
#[derive(Default)]
pub(crate) struct Txns {
    meta: RefCell<Option<TxnMetadata>>,
    /// The coordinator's epoch, on its markers: one up at each failover.
    coordinator_epoch: Cell<i32>,
    /// The failovers' own chance, apart from the worlds' (a failover drawn shifts no
    /// other draw of the run).
    failover_rng: RefCell<Rng>,
    next_producer_id: Cell<i64>,
    /// The tag of the id's transaction in flight (from its first add to its end).
    current: Cell<Option<u64>>,
    /// The markers of the end in flight, and the partitions that have theirs.
    markers: RefCell<Option<(rules::Markers, BTreeSet<i32>)>>,
    /// Each ended transaction's outcome (true: committed).
    outcomes: RefCell<BTreeMap<u64, bool>>,
    next_tag: Cell<u64>,
    /// Records acknowledged in transactions whose commit was acknowledged: key →
    /// (partition, offset).
    committed_acked: RefCell<BTreeMap<String, (i32, i64)>>,
    /// Records a read_committed consumer was given: (partition, offset) → key.
    read_committed: RefCell<BTreeMap<(i32, i64), String>>,
    pub(crate) committed: Cell<usize>,
    pub(crate) aborted: Cell<usize>,
}

fn config() -> TxnConfig {
    TxnConfig {
        max_timeout_ms: rules::MAX_TIMEOUT_MS_DEFAULT,
        id_expiration_ms: rules::ID_EXPIRATION_MS_DEFAULT,
        server_tv2: false,
    }
}

fn topic_partitions(partitions: &BTreeSet<i32>) -> BTreeSet<(String, i32)> {
    partitions.iter().map(|p| (TOPIC.to_owned(), *p)).collect()
}

/// The tag a transactional record's key names.
fn tag_of(key: &str) -> Option<u64> {
    key.strip_prefix('x')?.split('-').next()?.parse().ok()
}

impl Txns {
    pub(crate) fn new(seed: u64) -> Txns {
        Txns {
            failover_rng: RefCell::new(Rng::new(seed ^ 0xC00D_1A70_F00D_0001)),
            ..Txns::default()
        }
    }

    /// The coordinator fails over: the next one, an epoch up, writes the end in flight's
    /// markers to every partition again; the failed one's marker in flight, if any, may
    /// still arrive at one partition, late.
    fn fail_over(&self, worlds: &Rc<[Rc<World>]>) {
        let old = self.coordinator_epoch.get();
        self.coordinator_epoch.set(old + 1);
        let coordinator = &worlds[0];
        coordinator.trace(|| format!("txn coordinator: fails over to epoch {}", old + 1));
        let mut markers = self.markers.borrow_mut();
        let Some((m, done)) = markers.as_mut() else {
            return;
        };
        done.clear();
        let (partition, delay) = {
            let mut rng = self.failover_rng.borrow_mut();
            let partition = m
                .partitions
                .iter()
                .nth(rng.below(m.partitions.len() as u64) as usize);
            (
                partition.map(|(_, p)| *p),
                Duration::from_millis(rng.below(STALE_MARKER_DELAY_MS)),
            )
        };
        let Some(partition) = partition else { return };
        let world = worlds[partition as usize].clone();
        let m = m.clone();
        coordinator.runtime.spawn(async move {
            world.runtime.sleep(delay).await;
            if !world.stop_faults.get() {
                write_marker(&world, &m, old, true).await;
            }
        });
    }

    fn allocate(&self) -> Result<i64, TxnError> {
        let id = self.next_producer_id.get().max(FIRST_PRODUCER_ID);
        self.next_producer_id.set(id + 1);
        Ok(id)
    }

    /// Applies a decided transit, as the coordinator does once its record is durable;
    /// an end's outcome and markers are noted.
    fn apply(&self, world: &World, transit: Transit) {
        let state = transit.state;
        if let Some(m) = rules::markers(&transit) {
            let tag = self.current.take();
            if let Some(tag) = tag {
                self.outcomes.borrow_mut().insert(tag, m.commit);
            }
            world.trace(|| format!("txn {tag:?}: {state:?} (epoch {})", m.producer_epoch));
            *self.markers.borrow_mut() = Some((m, BTreeSet::new()));
        }
        let mut meta = self.meta.borrow_mut();
        let meta = meta.as_mut().expect("an id to apply to");
        if let Err(e) = meta.prepare(&transit) {
            world.violation(format!("the coordinator cannot prepare {state:?}: {e}"));
            return;
        }
        if let Err(e) = meta.complete(transit) {
            world.violation(format!("the coordinator cannot complete {state:?}: {e}"));
        }
    }

    fn init(&self, world: &World) -> Result<ProducerIdEpoch, TxnError> {
        let now = world.clock.now_ms();
        let decision = {
            let meta = self.meta.borrow();
            rules::init_producer_id(
                meta.as_ref(),
                TRANSACTIONAL_ID,
                TXN_TIMEOUT_MS,
                None,
                &config(),
                now,
                || self.allocate(),
            )?
        };
        if let Some(created) = decision.created {
            *self.meta.borrow_mut() = Some(created);
        }
        match decision.action {
            InitAction::Answer(t) => {
                let answer = ProducerIdEpoch::new(t.producer_id, t.producer_epoch);
                self.apply(world, t);
                Ok(answer)
            }
            InitAction::FenceOngoing(t) => {
                self.apply(world, t);
                Err(TxnError::ConcurrentTransactions)
            }
        }
    }

    fn add(
        &self,
        world: &World,
        producer: ProducerIdEpoch,
        partitions: &BTreeSet<i32>,
        tag: u64,
    ) -> Result<(), TxnError> {
        let now = world.clock.now_ms();
        let decision = rules::add_partitions(
            self.meta.borrow().as_ref(),
            producer,
            &topic_partitions(partitions),
            false,
            now,
        )?;
        if let AddDecision::Prepare(t) = decision {
            let starts = self
                .meta
                .borrow()
                .as_ref()
                .is_some_and(|m| m.state() != TxnState::Ongoing);
            if starts {
                self.current.set(Some(tag));
            }
            self.apply(world, t);
        }
        Ok(())
    }

    fn end(&self, world: &World, producer: ProducerIdEpoch, commit: bool) -> Result<(), TxnError> {
        let now = world.clock.now_ms();
        let outcome = if commit {
            TxnOutcome::Commit
        } else {
            TxnOutcome::Abort
        };
        let decision = rules::end_txn(
            self.meta.borrow().as_ref(),
            producer,
            outcome,
            false,
            now,
            || self.allocate(),
        )?;
        match decision {
            EndDecision::Done(_) => Ok(()),
            EndDecision::Prepare { transit, .. } => {
                self.apply(world, transit);
                Ok(())
            }
            EndDecision::BatchesPending => Err(TxnError::ConcurrentTransactions),
        }
    }

    /// No transaction in flight: nothing ongoing, no end waiting for its markers.
    fn idle(&self) -> bool {
        self.markers.borrow().is_none()
            && self.meta.borrow().as_ref().is_none_or(|m| {
                m.pending.is_none()
                    && matches!(
                        m.state(),
                        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                    )
            })
    }
}

impl Workload for Txns {
    fn start(self: Rc<Self>, worlds: &[Rc<World>]) {
        start(self, worlds);
    }

    /// Nothing in flight, and the leader's last stable offset at its end.
    fn settled(&self, _world: &World, leader: &Partition) -> bool {
        self.idle() && leader.last_stable_offset() == leader.log_end_offset()
    }

    fn final_checks(self: Rc<Self>, worlds: Vec<Rc<World>>) -> Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(async move { final_checks(&self, &worlds).await })
    }

    fn counts(&self) -> (usize, usize) {
        (self.committed.get(), self.aborted.get())
    }
}

/// Starts the coordinator's tasks, two producer instances and a read_committed
/// consumer of each partition (`worlds[p]` is partition `p`'s). The coordinator's and
/// the producers' own events go through partition 0's world (its clock, chance and
/// reports are the run's).
fn start(txns: Rc<Txns>, worlds: &[Rc<World>]) {
    let worlds: Rc<[Rc<World>]> = worlds.into();
    let rt = worlds[0].runtime.clone();
    rt.spawn(coordinator_timer(txns.clone(), worlds.clone()));
    rt.spawn(marker_writer(txns.clone(), worlds.clone()));
    for instance in 0..2 {
        rt.spawn(producer(txns.clone(), worlds.clone(), instance));
    }
    for world in worlds.iter() {
        rt.spawn(consumer(txns.clone(), world.clone()));
    }
}

/// A request to the coordinator or its answer may be lost (then the client times out
/// and retries); the coordinator is reached through the network's client node.
async fn lost(world: &World) -> bool {
    let lost = world.rng.borrow_mut().chance(3);
    world.runtime.sleep(Duration::from_millis(1)).await;
    lost
}

/// Aborts a transaction that ran past its timeout, as the coordinator's timer does, and
/// fails the coordinator over now and then while faults are played.
async fn coordinator_timer(txns: Rc<Txns>, worlds: Rc<[Rc<World>]>) {
    let world = worlds[0].clone();
    loop {
        world.runtime.sleep(Duration::from_millis(100)).await;
        if !world.stop_faults.get() && txns.failover_rng.borrow_mut().chance(FAILOVER_CHANCE) {
            txns.fail_over(&worlds);
        }
        let now = world.clock.now_ms();
        let abort = {
            let meta = txns.meta.borrow();
            match meta.as_ref() {
                Some(m) => rules::abort_timed_out(m, &config(), now, || txns.allocate()),
                None => Ok(None),
            }
        };
        match abort {
            Ok(Some(t)) => txns.apply(&world, t),
            Ok(None) => {}
            Err(e) => world.violation(format!("the coordinator's timeout abort failed: {e}")),
        }
    }
}

/// Writes an end's markers, each to its partition's leader until one is committed
/// there, then completes the end.
async fn marker_writer(txns: Rc<Txns>, worlds: Rc<[Rc<World>]>) {
    let coordinator = worlds[0].clone();
    let rt = coordinator.runtime.clone();
    loop {
        rt.sleep(Duration::from_millis(10)).await;
        let next = txns.markers.borrow().as_ref().map(|(m, done)| {
            let todo = m
                .partitions
                .iter()
                .map(|(_, p)| *p)
                .find(|p| !done.contains(p));
            (m.clone(), todo)
        });
        let Some((m, todo)) = next else { continue };
        if let Some(partition) = todo {
            let world = &worlds[partition as usize];
            let epoch = txns.coordinator_epoch.get();
            // A failover meanwhile: the next coordinator writes this marker again.
            if write_marker(world, &m, epoch, false).await && txns.coordinator_epoch.get() == epoch
            {
                if let Some((_, done)) = txns.markers.borrow_mut().as_mut() {
                    done.insert(partition);
                }
            }
            continue;
        }
        txns.markers.borrow_mut().take();
        let now = coordinator.clock.now_ms();
        let done = {
            let meta = txns.meta.borrow();
            rules::complete_end(meta.as_ref().expect("an id"), now)
        };
        match done {
            Ok(t) => {
                if t.state == TxnState::CompleteCommit {
                    txns.committed.set(txns.committed.get() + 1);
                } else {
                    txns.aborted.set(txns.aborted.get() + 1);
                }
                txns.apply(&coordinator, t);
            }
            Err(e) => coordinator.violation(format!("the coordinator cannot complete an end: {e}")),
        }
    }
}

/// One try of a WriteTxnMarkers to `world`'s leader from the coordinator of
/// `coordinator_epoch`: whether the marker is committed there and the answer came back.
/// A `stale` one (a failed coordinator's) may be refused as fenced.
async fn write_marker(
    world: &World,
    m: &rules::Markers,
    coordinator_epoch: i32,
    stale: bool,
) -> bool {
    let rt = &world.runtime;
    let leader = world.ctl.borrow().leader;
    let Some(leader) = leader else { return false };
    if world.net.send(CLIENT, leader).await == Delivery::Lost {
        return false;
    }
    let Some(p) = world.leading(leader) else {
        return false;
    };
    let marker = TxnMarker {
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        coordinator_epoch,
        kind: if m.commit {
            MarkerKind::Commit
        } else {
            MarkerKind::Abort
        },
    };
    let ticket = match p.append_marker(&marker) {
        Ok(t) => t,
        Err(e) => {
            // A failed coordinator's marker is fenced by the next one's, or by the
            // producer's newer epoch.
            let fenced = matches!(
                e,
                AppendError::Sequence(
                    SequenceError::CoordinatorFenced { .. } | SequenceError::StaleEpoch { .. }
                )
            );
            if matches!(e, AppendError::Sequence(_)) && !(stale && fenced) {
                world.violation(format!("node {leader} refused a marker: {e}"));
            }
            rt.sleep(BACKOFF).await;
            return false;
        }
    };
    let committed = acked_in_time(rt, async { p.wait_committed(ticket).await.is_ok() }).await;
    committed && world.net.send(leader, CLIENT).await != Delivery::Lost
}

/// How a transactional produce ended.
enum Sent {
    Acked(i64),
    /// The producer's epoch is stale: it was fenced.
    Fenced,
    Failed,
}

async fn produce(world: &World, producer: ProducerIdEpoch, sequence: i32, key: &str) -> Sent {
    let rt = &world.runtime;
    let leader = world.ctl.borrow().leader;
    let Some(leader) = leader else {
        rt.sleep(BACKOFF).await;
        return Sent::Failed;
    };
    if world.net.send(CLIENT, leader).await == Delivery::Lost {
        return Sent::Failed;
    }
    let Some(p) = world.leading(leader) else {
        return Sent::Failed;
    };
    let mut b = BatchBuilder::new(world.clock.now_ms())
        .producer(producer.producer_id, producer.epoch, sequence)
        .transactional();
    b.push(&Record {
        key: Some(key.as_bytes()),
        value: Some(b"v"),
        headers: &[],
        timestamp_delta: 0,
    });
    let ticket = match p.append(&b.build()) {
        Ok(t) => t,
        Err(AppendError::Sequence(SequenceError::StaleEpoch { .. })) => return Sent::Fenced,
        Err(_) => {
            rt.sleep(BACKOFF).await;
            return Sent::Failed;
        }
    };
    let acked = acked_in_time(rt, async { p.wait_committed(ticket).await.is_ok() }).await;
    if !acked || world.net.send(leader, CLIENT).await == Delivery::Lost {
        return Sent::Failed;
    }
    Sent::Acked(ticket.base_offset)
}

/// A coordinator request, tried until it is answered (lost requests and answers, and
/// CONCURRENT_TRANSACTIONS, are retried); the answer's error otherwise.
async fn ask<T>(
    world: &World,
    mut request: impl FnMut() -> Result<T, TxnError>,
) -> Result<T, TxnError> {
    loop {
        if world.stop_producing.get() {
            return Err(TxnError::CoordinatorNotAvailable);
        }
        if lost(world).await {
            world.runtime.sleep(BACKOFF).await;
            continue;
        }
        let answer = request();
        if lost(world).await {
            world.runtime.sleep(BACKOFF).await;
            continue;
        }
        match answer {
            Err(TxnError::ConcurrentTransactions) => world.runtime.sleep(BACKOFF).await,
            other => return other,
        }
    }
}

/// One instance of the transactional producer: it starts (InitProducerId, fencing the
/// other instance), then runs transactions of a few records each over some of the
/// partitions, committing most and aborting some; fenced, it starts again.
async fn producer(txns: Rc<Txns>, worlds: Rc<[Rc<World>]>, instance: u32) {
    let world = worlds[0].clone();
    let rt = world.runtime.clone();
    let count = worlds.len() as u64;
    while !world.stop_producing.get() {
        rt.sleep(Duration::from_millis(50 + 150 * u64::from(instance)))
            .await;
        let Ok(producer) = ask(&world, || txns.init(&world)).await else {
            continue;
        };
        world.trace(|| format!("txn producer {instance}: epoch {}", producer.epoch));
        // Each partition checks its own sequence of the producer's batches.
        let mut sequences = vec![0i32; worlds.len()];
        'txns: while !world.stop_producing.get() {
            let tag = txns.next_tag.get();
            txns.next_tag.set(tag + 1);
            let (targets, commit) = {
                let mut rng = world.rng.borrow_mut();
                let records = rng.between(1, 4);
                let targets: Vec<usize> = (0..records).map(|_| rng.below(count) as usize).collect();
                (targets, rng.chance(75))
            };
            let partitions: BTreeSet<i32> = targets.iter().map(|p| *p as i32).collect();
            if ask(&world, || txns.add(&world, producer, &partitions, tag))
                .await
                .is_err()
            {
                break;
            }
            let mut acked = Vec::new();
            let mut commit = commit;
            // A produce given up may or may not be in the log, so the sequence after it
            // is unknown: the producer starts again under a new epoch after this
            // transaction (Kafka's producer bumps its epoch for the same reason).
            let mut restart = false;
            for (n, &target) in targets.iter().enumerate() {
                let key = format!("x{tag}-{n}");
                let mut tries = 0;
                loop {
                    let sequence = sequences[target];
                    match produce(&worlds[target], producer, sequence, &key).await {
                        Sent::Acked(offset) => {
                            acked.push((key.clone(), (target as i32, offset)));
                            break;
                        }
                        Sent::Fenced => break 'txns,
                        Sent::Failed if tries < 4 && !world.stop_producing.get() => {
                            tries += 1;
                        }
                        Sent::Failed => {
                            // Kafka's producer makes such a transaction abortable (the
                            // batch may still be in the log: the abort covers it).
                            commit = false;
                            restart = true;
                            break;
                        }
                    }
                }
                sequences[target] += 1;
                if !commit {
                    break;
                }
            }
            match ask(&world, || txns.end(&world, producer, commit)).await {
                Ok(()) if commit => {
                    let mut all = txns.committed_acked.borrow_mut();
                    all.extend(acked);
                }
                Ok(()) => {}
                Err(_) => break,
            }
            if restart {
                break;
            }
        }
    }
}

/// The records a read_committed consumer is given from `bytes`, with the aborted
/// transactions the leader listed, as Kafka's consumer filters them: a transactional
/// batch of a producer whose aborted transaction has begun by then is dropped until that
/// producer's abort marker.
fn deliver(bytes: &[u8], aborted: &[AbortedTxn]) -> Vec<(i64, String)> {
    let mut pending: Vec<&AbortedTxn> = aborted.iter().collect();
    pending.sort_by_key(|a| a.first_offset);
    let mut pending = pending.into_iter().peekable();
    let mut aborting = BTreeSet::new();
    let mut out = Vec::new();
    for item in batches(bytes) {
        let Ok((h, range)) = item else { break };
        let batch = &bytes[range];
        if h.is_transactional() {
            while let Some(a) = pending.next_if(|a| a.first_offset <= h.last_offset()) {
                aborting.insert(a.producer_id);
            }
        }
        if h.is_control() {
            if let Some((MarkerKind::Abort, _)) = txn_marker::parse(&h, batch) {
                aborting.remove(&h.producer_id);
            }
            continue;
        }
        if h.is_transactional() && aborting.contains(&h.producer_id) {
            continue;
        }
        let _ = for_each_record(batch, |r| {
            out.push((
                r.offset,
                String::from_utf8_lossy(r.key.unwrap_or_default()).into_owned(),
            ));
        });
    }
    out
}

/// The offset of `producer_id`'s first marker at or after `from` in `p`'s log.
async fn marker_after(p: &Partition, producer_id: i64, from: i64) -> Option<i64> {
    let mut at = from;
    while at < p.log_end_offset() {
        let r = p.read_as(at, -1, 1 << 20, Reader::Replica).await.ok()?;
        let mut last = None;
        for item in batches(&r.records) {
            let Ok((h, _)) = item else { break };
            if h.is_control() && h.producer_id == producer_id {
                return Some(h.base_offset);
            }
            last = Some(h.last_offset());
        }
        at = last? + 1;
    }
    None
}

/// Reads the leader with read_committed, checking each answer.
async fn consumer(txns: Rc<Txns>, world: Rc<World>) {
    let rt = world.runtime.clone();
    let mut position = 0i64;
    loop {
        rt.sleep(Duration::from_millis(25)).await;
        let Some(p) = world.leader_partition() else {
            continue;
        };
        let Ok(r) = p
            .read_as(
                position,
                -1,
                64 * 1024,
                Reader::Consumer(Isolation::ReadCommitted),
            )
            .await
        else {
            continue;
        };
        let epoch = p.leader_epoch();
        let mut last = None;
        let mut transactional = BTreeMap::new();
        for item in batches(&r.records) {
            let Ok((h, _)) = item else { break };
            if h.is_transactional() && !h.is_control() {
                transactional.entry(h.producer_id).or_insert(h.base_offset);
            }
            if h.last_offset() >= r.last_stable_offset {
                world.violation(format!(
                    "a read_committed read returned a batch ending at {} at a last stable offset of {}",
                    h.last_offset(),
                    r.last_stable_offset
                ));
                return;
            }
            last = Some(h.last_offset());
        }
        for (producer_id, offset) in transactional {
            let marker = marker_after(&p, producer_id, offset).await;
            // Checked only while the log cannot have changed under the scan: a leader's
            // log only grows within its epoch.
            if !p.is_leader() || p.leader_epoch() != epoch {
                break;
            }
            if marker.is_none_or(|m| m >= r.high_watermark) {
                world.violation(format!(
                    "a read_committed read was given producer {producer_id}'s batch at {offset} while its marker ({marker:?}) was not below the high watermark {}",
                    r.high_watermark
                ));
                return;
            }
        }
        let aborted = r.aborted.clone().unwrap_or_default();
        for (offset, key) in deliver(&r.records, &aborted) {
            // The transactional producer's records (the others are `replication`'s).
            let Some(tag) = tag_of(&key) else { continue };
            let outcome = txns.outcomes.borrow().get(&tag).copied();
            if outcome != Some(true) {
                world.violation(format!(
                    "a read_committed consumer of partition {} was given {key} at offset {offset}, of a transaction {}",
                    world.partition,
                    if outcome == Some(false) { "aborted" } else { "not ended" }
                ));
                return;
            }
            txns.read_committed
                .borrow_mut()
                .insert((world.partition, offset), key);
        }
        if let Some(last) = last {
            position = last + 1;
        }
    }
}

/// The end of a run: every transaction ended on every partition, and a read_committed
/// read of each whole leader log delivers exactly the committed transactions' records.
async fn final_checks(txns: &Txns, worlds: &[Rc<World>]) {
    let world = &worlds[0];
    if !txns.idle() {
        world.violation("a transaction is still in flight at the end".to_owned());
    }
    // key → (partition, offset), of every transactional record in the logs and of those
    // read_committed delivers.
    let mut in_log = BTreeMap::new();
    let mut delivered = BTreeMap::new();
    for w in worlds {
        let leader = w.ctl.borrow().leader.expect("a leader once settled");
        let lp = w.node(leader).partition().expect("the leader is up");
        read_all_committed(w, &lp, &mut in_log, &mut delivered).await;
    }
    let outcomes = txns.outcomes.borrow();
    for (key, (partition, offset)) in &in_log {
        let Some(tag) = tag_of(key) else { continue };
        let shown = delivered.contains_key(key);
        match outcomes.get(&tag) {
            Some(true) if !shown => world.violation(format!(
                "{key} at {offset} of partition {partition}, of a committed transaction, is not delivered to read_committed"
            )),
            Some(false) if shown => world.violation(format!(
                "{key} at {offset} of partition {partition}, of an aborted transaction, is delivered to read_committed"
            )),
            None => world.violation(format!(
                "{key} at {offset} of partition {partition} belongs to a transaction that never ended"
            )),
            _ => {}
        }
    }
    for (key, at) in txns.committed_acked.borrow().iter() {
        if delivered.get(key) != Some(at) {
            world.violation(format!(
                "{key}, acknowledged at {at:?} in a committed transaction, is lost (delivered at {:?})",
                delivered.get(key)
            ));
        }
    }
    for ((partition, offset), key) in txns.read_committed.borrow().iter() {
        if delivered.get(key) != Some(&(*partition, *offset)) {
            world.violation(format!(
                "{key}, given to a read_committed consumer at {offset} of partition {partition}, is not in the final log there"
            ));
        }
    }
}

/// Reads `w`'s whole leader log `leader` with read_committed, noting every record in it
/// (`in_log`) and every record delivered (`delivered`): key → (partition, offset).
async fn read_all_committed(
    w: &World,
    leader: &Partition,
    in_log: &mut BTreeMap<String, (i32, i64)>,
    delivered: &mut BTreeMap<String, (i32, i64)>,
) {
    let (lso, hw) = (leader.last_stable_offset(), leader.high_watermark());
    if lso != hw {
        w.violation(format!(
            "partition {}: the last stable offset {lso} is below the high watermark {hw} at the end",
            w.partition
        ));
    }
    let mut at = leader.log_start_offset();
    // Per producer, the newest coordinator epoch among its markers so far: a marker of
    // an older coordinator after it is one a partition should have fenced.
    let mut coordinators: BTreeMap<i64, i32> = BTreeMap::new();
    while at < lso {
        let r = match leader
            .read_as(at, -1, 1 << 20, Reader::Consumer(Isolation::ReadCommitted))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                w.violation(format!(
                    "partition {}: the final read_committed read at {at} failed: {e}",
                    w.partition
                ));
                return;
            }
        };
        let mut last = None;
        for item in batches(&r.records) {
            let Ok((h, range)) = item else { break };
            last = Some(h.last_offset());
            if h.is_control() {
                let Some((_, epoch)) = txn_marker::parse(&h, &r.records[range]) else {
                    continue;
                };
                let newest = coordinators.entry(h.producer_id).or_insert(epoch);
                if epoch < *newest {
                    w.violation(format!(
                        "partition {}: a marker of coordinator epoch {epoch} at {} follows one of epoch {newest} for producer {}",
                        w.partition,
                        h.base_offset,
                        h.producer_id
                    ));
                }
                *newest = (*newest).max(epoch);
                continue;
            }
            let _ = for_each_record(&r.records[range], |rec| {
                let key = String::from_utf8_lossy(rec.key.unwrap_or_default()).into_owned();
                if tag_of(&key).is_some() {
                    in_log.insert(key, (w.partition, rec.offset));
                }
            });
        }
        let aborted = r.aborted.clone().unwrap_or_default();
        for (offset, key) in deliver(&r.records, &aborted) {
            if tag_of(&key).is_some() {
                delivered.insert(key, (w.partition, offset));
            }
        }
        let Some(last) = last else { break };
        at = last + 1;
    }
}

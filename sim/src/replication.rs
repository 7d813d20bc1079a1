//! One replicated partition under faults: real [`Partition`]s — the real append, fetch,
//! high watermark, ISR and truncation — on three nodes, each with a disk of its own in
//! memory, a simulated controller electing leaders from the ISR and taking ISR changes,
//! three producers (acks=all, acks=all idempotent and retrying each batch until it is
//! acknowledged, acks=1) and a consumer, while nodes crash (power loss: any unsynced part
//! of what they wrote may survive) one at a time or all at once and come back, leadership
//! moves to another in-sync replica at any moment, disks fail a write or a sync (the log
//! fails for good and its node stops, as the broker does, until it is restarted) or fill
//! up, and the network loses, delays, duplicates and cuts messages. Transactions run on
//! the same partition (`transactions`); on a compacted topic (`Scenario::compacted`)
//! every replica's cleaner runs below its high watermark.
//!
//! The followers run the broker's own rules (`corelog_partition::follower`); the leader
//! answers a follower's fetch as the broker does (`read_as` for a replica, then
//! `record_follower_fetch`). Only the transport is the simulator's.
//!
//! Checked during the run and at its end, once the faults stop and the replicas have
//! caught up (any breach fails the seed):
//! - no record acknowledged at acks=all is lost: each is in the final log at its offset;
//! - no consumer reads a record at or above the high watermark it was served with, and
//!   every record a consumer read is in the final log at its offset (it was committed);
//! - a partition's high watermark never moves back while it is open;
//! - every replica holds the same batches below the high watermark;
//! - no record is in the final log twice (the idempotent producer's retries included),
//!   and an acks=1 record that survived is at the offset it was acknowledged at;
//! - every replica's producer state agrees with its log: the idempotent producer's last
//!   sequence is the last sequence of its last batch there, whatever was truncated.
//!
//! On a compacted topic replicas differ byte for byte (each cleans on its own), so the
//! last three are replaced by: each key's last offset is the same on every replica, and
//! an acknowledged or consumed record is gone only where a later record of its key
//! stands.

use crate::exec::{Executor, Stopped};
use crate::net::{Delivery, Net, NetFaults};
use crate::rng::Rng;
use bytes::Bytes;
use corelog_partition::follower::{self, FollowerStep, LeaderAnswer};
use corelog_partition::{Assignment, FollowerFetch, Isolation, IsrProposal, Partition, Reader};
use corelog_storage::batch::{batches, BatchHeader};
use corelog_storage::batch_builder::{BatchBuilder, Record};
use corelog_storage::batch_filter::for_each_record;
use corelog_storage::compaction::cleaner;
use corelog_storage::config::CleanupPolicy;
use corelog_storage::context::{Clock, NoObserver};
use corelog_storage::error::{AppendError, ReadError};
use corelog_storage::file_cache::FileCache;
use corelog_storage::fs::{DiskFault, DiskOp, MemFs};
use corelog_storage::producer_state::SequenceError;
use corelog_storage::runtime::Runtime;
use corelog_storage::{AckLevel, Durability, LogConfig, LogContext};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

/// The client side of the network.
pub(crate) const CLIENT: i32 = 0;
/// How long a leader holds a follower's fetch that finds nothing new.
const FETCH_WAIT: Duration = Duration::from_millis(50);
/// After a failed fetch or produce.
pub(crate) const BACKOFF: Duration = Duration::from_millis(30);
/// `replica.lag.time.max.ms`.
const LAG_MS: i64 = 300;
/// How long a producer waits for an acknowledgement before it gives the try up.
pub(crate) const PRODUCE_TIMEOUT: Duration = Duration::from_millis(500);
/// The keys each producer draws from on a compacted topic: enough that the record
/// superseding one is often the only later record of its key, so a superseded record
/// removed wrongly stays missing.
const COMPACTED_KEYS: u64 = 256;
/// How often each replica's cleaner looks at its log on a compacted topic.
const CLEANER_INTERVAL: Duration = Duration::from_millis(200);
/// The idempotent producer's id (its epoch is 0 throughout).
const IDEMPOTENT_PRODUCER: i64 = 4_000;

/// What a producer waits for, and whether it retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acks {
    /// acks=all; a record not acknowledged in time is given up (keys `a…`).
    All,
    /// acks=all with sequences; a batch is sent again until acknowledged (keys `i…`).
    AllIdempotent,
    /// acks=1; a record not acknowledged in time is given up (keys `l…`).
    Leader,
}

/// What one run does.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub nodes: i32,
    pub min_insync_replicas: i32,
    /// How long faults are played before the cluster is healed.
    pub faults_for: Duration,
    pub net: NetFaults,
    /// Partitions of the topic, each a world of its own (`nodes` nodes, a controller, a
    /// network, faults, producers and consumers); transactions span them.
    pub partitions: i32,
    /// Transactions too (`transactions`): a transactional producer writing to the
    /// partitions, its coordinator's markers and a read_committed consumer of each.
    pub transactions: bool,
    /// A compacted topic: the producers reuse a few keys and every replica runs the log
    /// cleaner below its high watermark, as the broker's housekeeping does. Replicas are
    /// then compared by the last offset of each key, not byte for byte.
    pub compacted: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            nodes: 3,
            min_insync_replicas: 2,
            faults_for: Duration::from_secs(5),
            net: NetFaults {
                loss: 3,
                duplicate: 2,
                max_delay_ms: 8,
            },
            partitions: 2,
            transactions: true,
            compacted: false,
        }
    }
}

/// What a run saw, for its report and for replay checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub acked: usize,
    pub acked_by_leader: usize,
    pub disk_faults: usize,
    pub cleaner_passes: usize,
    pub transactions_committed: usize,
    pub transactions_aborted: usize,
    pub final_high_watermark: i64,
    pub crashes: usize,
    pub elections: usize,
    pub elapsed_ms: u128,
}

pub(crate) struct Node {
    id: i32,
    /// The partition's directory on the node's disk; the node and the partition in it
    /// tell them apart in the engine's own log lines (`SIM_LOG`).
    dir: PathBuf,
    /// The node's disk, for what is done to it from outside (faults, capacity,
    /// crashes); its process uses `context`'s handle.
    fs: MemFs,
    /// The process's view of the disk, one per life: a crash gives the next life a new
    /// one, so what the dead process left running reaches nothing it recovers.
    context: RefCell<LogContext>,
    partition: RefCell<Option<Rc<Partition>>>,
    /// Bumped at each crash: a task of an older life stops.
    life: Cell<u64>,
    /// The high watermark last seen on the open partition (`None` after a reopen).
    hw_seen: Cell<Option<i64>>,
    /// A crash or a restart of the node is under way (they wait on its disk): another
    /// is not started meanwhile.
    changing: Cell<bool>,
    /// A disk fault (EIO armed, a capacity) was played on the node since its disk was
    /// last mended: its storage errors are expected.
    faulted: Cell<bool>,
}

impl Node {
    fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    pub(crate) fn partition(&self) -> Option<Rc<Partition>> {
        self.partition.borrow().clone()
    }
}

#[derive(Debug)]
pub(crate) struct Controller {
    pub(crate) leader: Option<i32>,
    leader_epoch: i32,
    isr: Vec<i32>,
    partition_epoch: i32,
    replicas: Vec<i32>,
    up: Vec<i32>,
    /// The metadata version, bumped at every change (an ISR proposal refused at a
    /// version is not made again before a newer one).
    version: u64,
    elections: usize,
}

impl Controller {
    /// `leader` leads (or none does) in a new leader epoch: an election.
    fn new_leader(&mut self, leader: Option<i32>) {
        self.leader = leader;
        self.leader_epoch += 1;
        self.partition_epoch += 1;
        self.version += 1;
        self.elections += 1;
    }

    fn assignment(&self) -> Assignment {
        Assignment {
            replicas: self.replicas.clone(),
            isr: self.isr.clone(),
            partition_epoch: self.partition_epoch,
        }
    }
}

pub(crate) struct World {
    scenario: Scenario,
    pub(crate) runtime: Runtime,
    pub(crate) clock: Rc<dyn Clock>,
    nodes: Vec<Rc<Node>>,
    pub(crate) ctl: RefCell<Controller>,
    pub(crate) net: Net,
    pub(crate) rng: RefCell<Rng>,
    /// This world's partition of the topic (each partition has nodes of its own).
    pub(crate) partition: i32,
    /// Records acknowledged at acks=all: offset → key.
    acked: RefCell<BTreeMap<i64, String>>,
    /// Records acknowledged at acks=1: key → offset.
    acked_by_leader: RefCell<BTreeMap<String, i64>>,
    /// Records consumers read: offset → key.
    seen: RefCell<BTreeMap<i64, String>>,
    /// Shared by the worlds of one run.
    violations: Rc<RefCell<Vec<String>>>,
    pub(crate) stop_producing: Cell<bool>,
    pub(crate) stop_faults: Cell<bool>,
    crashes: Cell<usize>,
    disk_faults: Cell<usize>,
    cleaner_passes: Cell<usize>,
    /// `SIM_TRACE` is set: events are printed.
    tracing: bool,
    started_ms: i64,
}

fn config(scenario: &Scenario) -> LogConfig {
    let cleanup = CleanupPolicy {
        delete: !scenario.compacted,
        compact: scenario.compacted,
    };
    LogConfig {
        cleanup,
        min_compaction_lag_ms: 0,
        min_cleanable_dirty_ratio: 0.0,
        segment_bytes: 16 * 1024,
        index_interval_bytes: 512,
        tail_cache_bytes: 4 * 1024,
        durability: Durability::AckAll,
        min_insync_replicas: scenario.min_insync_replicas,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    }
}

/// (offset, key) of every record in `bytes` (control records, transaction markers, left
/// out).
fn records_of(bytes: &[u8]) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for item in batches(bytes) {
        let Ok((h, range)) = item else { break };
        if h.is_control() {
            continue;
        }
        let _ = for_each_record(&bytes[range], |r| {
            out.push((
                r.offset,
                String::from_utf8_lossy(r.key.unwrap_or_default()).into_owned(),
            ));
        });
    }
    out
}

impl World {
    pub(crate) fn node(&self, id: i32) -> &Rc<Node> {
        &self.nodes[(id - 1) as usize]
    }

    /// Node `id`'s partition, if it is open and leads.
    pub(crate) fn leading(&self, id: i32) -> Option<Rc<Partition>> {
        self.node(id).partition().filter(|p| p.is_leader())
    }

    /// The partition of the leader the controller names, if it is open and leads.
    pub(crate) fn leader_partition(&self) -> Option<Rc<Partition>> {
        let leader = self.ctl.borrow().leader;
        leader.and_then(|l| self.leading(l))
    }

    pub(crate) fn violation(&self, what: String) {
        self.trace(|| format!("VIOLATION {what}"));
        self.violations.borrow_mut().push(what);
    }

    /// Prints an event of the run, with its simulated time, when `SIM_TRACE` is set (to
    /// follow a replayed seed).
    pub(crate) fn trace(&self, event: impl FnOnce() -> String) {
        if self.tracing {
            let ms = self.clock.now_ms() - self.started_ms;
            eprintln!("{ms:>8} ms  p{}  {}", self.partition, event());
        }
    }

    fn alive(&self, node: &Node, life: u64) -> bool {
        node.life.get() == life && node.partition.borrow().is_some()
    }

    /// Checks that an open partition's high watermark never went back.
    fn check_hw(&self, node: &Node, p: &Partition) {
        let hw = p.high_watermark();
        if let Some(seen) = node.hw_seen.get() {
            if hw < seen {
                self.violation(format!(
                    "node {}: high watermark went back from {seen} to {hw}",
                    node.id
                ));
            }
        }
        node.hw_seen.set(Some(hw));
    }

    /// Tells every node that is up its role, as the controller has it.
    fn push_roles(&self) {
        let (leader, epoch, assignment) = {
            let c = self.ctl.borrow();
            (c.leader, c.leader_epoch, c.assignment())
        };
        self.trace(|| {
            format!(
                "roles: leader {leader:?} epoch {epoch} isr {:?}",
                assignment.isr
            )
        });
        for node in &self.nodes {
            let Some(p) = node.partition() else { continue };
            match leader {
                Some(l) if l == node.id => {
                    if let Err(e) = p.become_leader(epoch, node.id, assignment.clone()) {
                        self.violation(format!("node {} cannot lead epoch {epoch}: {e}", node.id));
                    }
                }
                Some(l) => p.become_follower(l, epoch),
                None => p.become_follower(-1, epoch),
            }
        }
    }

    /// Elects a leader from the ISR members that are up (Kafka's clean election), or
    /// none when no ISR member is up.
    fn elect(&self) {
        {
            let mut c = self.ctl.borrow_mut();
            let candidate = c.isr.iter().copied().find(|id| c.up.contains(id));
            c.new_leader(candidate);
        }
        self.push_roles();
    }

    /// Moves leadership to `to` (a preferred election, a controlled shutdown, the
    /// balancer), when it is an in-sync replica that is up and does not lead.
    fn move_leader(&self, to: i32) {
        {
            let c = self.ctl.borrow();
            if c.leader == Some(to) || !c.isr.contains(&to) || !c.up.contains(&to) {
                return;
            }
        }
        {
            let mut c = self.ctl.borrow_mut();
            c.new_leader(Some(to));
        }
        self.push_roles();
    }

    /// Node `id` went down (its broker session expired): out of the ISR unless it is the
    /// last member, and a new leader if it led.
    fn node_down(&self, id: i32) {
        let led = {
            let mut c = self.ctl.borrow_mut();
            c.up.retain(|n| *n != id);
            if c.isr.len() > 1 {
                c.isr.retain(|n| *n != id);
            }
            c.partition_epoch += 1;
            c.version += 1;
            c.leader == Some(id)
        };
        if led {
            self.elect();
        } else {
            self.push_roles();
        }
    }

    fn node_up(&self, id: i32) {
        let offline = {
            let mut c = self.ctl.borrow_mut();
            c.up.push(id);
            c.version += 1;
            c.leader.is_none()
        };
        if offline {
            self.elect();
        } else {
            self.push_roles();
        }
    }

    /// The leader `from` proposes an ISR change.
    fn propose(&self, from: i32, proposal: IsrProposal) {
        let accepted = {
            let mut c = self.ctl.borrow_mut();
            let ok = c.leader == Some(from)
                && proposal.leader_epoch == c.leader_epoch
                && proposal.partition_epoch == c.partition_epoch
                && proposal.isr.iter().all(|id| c.up.contains(id))
                && !proposal.isr.is_empty();
            if ok {
                c.isr = proposal.isr.clone();
                c.partition_epoch += 1;
            }
            c.version += 1;
            (ok, c.version)
        };
        if accepted.0 {
            self.push_roles();
        } else if let Some(p) = self.node(from).partition() {
            p.isr_proposal_refused(accepted.1, proposal.partition_epoch);
        }
    }

    /// The leader `leader`'s answer to `follower`'s fetch, as the broker gives it.
    async fn answer_fetch(
        self: &Rc<Self>,
        leader: i32,
        follower: i32,
        fetch_offset: i64,
        last_epoch: i32,
        leader_epoch: i32,
    ) -> Answer {
        let node = self.node(leader).clone();
        let Some(p) = node.partition() else {
            return Answer::Failed;
        };
        if !p.is_leader() || p.leader_epoch() != leader_epoch {
            return Answer::Failed;
        }
        if fetch_offset >= p.log_end_offset() {
            let deadline = self.runtime.now() + FETCH_WAIT;
            p.wait_beyond_log_end(fetch_offset, deadline).await;
        }
        match p
            .read_as(fetch_offset, last_epoch, 64 * 1024, Reader::Replica)
            .await
        {
            Err(ReadError::OffsetOutOfRange { .. }) => Answer::OutOfRange {
                log_start_offset: p.log_start_offset(),
                high_watermark: p.high_watermark(),
            },
            Err(_) => Answer::Failed,
            Ok(r) => {
                if let Some((epoch, end_offset)) = r.diverging_epoch {
                    return Answer::Diverging { epoch, end_offset };
                }
                let version = self.ctl.borrow().version;
                match p.record_follower_fetch(follower, fetch_offset, || Some(version)) {
                    FollowerFetch::Recorded(Some(proposal)) => {
                        let world = self.clone();
                        self.runtime.spawn(async move {
                            if world.net.send(leader, CLIENT).await != Delivery::Lost {
                                world.propose(leader, proposal);
                            } else if let Some(p) = world.node(leader).partition() {
                                p.isr_proposal_failed();
                            }
                        });
                    }
                    FollowerFetch::Recorded(None) => {}
                    FollowerFetch::NotLeader | FollowerFetch::UnknownReplica => {
                        return Answer::Failed
                    }
                }
                self.check_hw(&node, &p);
                Answer::Records {
                    records: r.records,
                    high_watermark: p.high_watermark(),
                    log_start_offset: r.log_start_offset,
                }
            }
        }
    }
}

/// A leader's answer, owned (it travels back over the network).
#[derive(Debug, Clone)]
enum Answer {
    Records {
        records: Bytes,
        high_watermark: i64,
        log_start_offset: i64,
    },
    Diverging {
        epoch: i32,
        end_offset: i64,
    },
    OutOfRange {
        log_start_offset: i64,
        high_watermark: i64,
    },
    Failed,
}

impl Answer {
    fn as_leader_answer(&self) -> LeaderAnswer<'_> {
        match self {
            Answer::Records {
                records,
                high_watermark,
                log_start_offset,
            } => LeaderAnswer::Records {
                records: Some(records),
                high_watermark: *high_watermark,
                log_start_offset: *log_start_offset,
            },
            Answer::Diverging { epoch, end_offset } => LeaderAnswer::Diverging {
                epoch: *epoch,
                end_offset: *end_offset,
            },
            Answer::OutOfRange {
                log_start_offset,
                high_watermark,
            } => LeaderAnswer::OutOfRange {
                log_start_offset: *log_start_offset,
                high_watermark: *high_watermark,
            },
            Answer::Failed => LeaderAnswer::Failed,
        }
    }
}

/// A node's replica fetcher and its leader's ISR shrink check, for one life.
async fn replica_loop(world: Rc<World>, node: Rc<Node>, life: u64) {
    let rt = world.runtime.clone();
    while world.alive(&node, life) {
        let Some(p) = node.partition() else { return };
        if let Some(e) = p.log().failure() {
            world.trace(|| format!("node {}: log failed: {e}", node.id));
            // The broker gives up its partitions until it is restarted; here the node
            // stops (and its unsynced writes may be lost with it).
            crash(&world, node.id).await;
            return;
        }
        world.check_hw(&node, &p);
        if p.is_leader() {
            let version = world.ctl.borrow().version;
            if let Some(proposal) = p.isr_shrink(LAG_MS, version) {
                world.propose(node.id, proposal);
            }
            rt.sleep(Duration::from_millis(50)).await;
            continue;
        }
        let Some(leader) = p.following().filter(|l| *l > 0) else {
            rt.sleep(BACKOFF).await;
            continue;
        };
        let (fetch_offset, last_epoch, leader_epoch) =
            (p.log_end_offset(), p.latest_epoch(), p.leader_epoch());
        let request = world.net.send(node.id, leader).await;
        if request == Delivery::Lost {
            rt.sleep(BACKOFF).await;
            continue;
        }
        let mut answer = world
            .answer_fetch(leader, node.id, fetch_offset, last_epoch, leader_epoch)
            .await;
        if request == Delivery::Twice {
            // The copy is answered too; the follower takes whichever comes first.
            answer = world
                .answer_fetch(leader, node.id, fetch_offset, last_epoch, leader_epoch)
                .await;
        }
        if world.net.send(leader, node.id).await == Delivery::Lost {
            rt.sleep(BACKOFF).await;
            continue;
        }
        // Applied only to the partition the fetch was built for, still following the
        // same leader in the same epoch.
        let current = node.partition();
        if !world.alive(&node, life)
            || !current.is_some_and(|c| Rc::ptr_eq(&c, &p))
            || p.following() != Some(leader)
            || p.leader_epoch() != leader_epoch
        {
            continue;
        }
        match follower::decide(&p, fetch_offset, answer.as_leader_answer()) {
            FollowerStep::TakeUp {
                records,
                high_watermark,
                log_start_offset,
            } => {
                if follower::take_up(&p, records, high_watermark, log_start_offset)
                    .await
                    .is_err()
                {
                    rt.sleep(BACKOFF).await;
                }
            }
            FollowerStep::Cut(cut) => {
                world.trace(|| {
                    format!("node {}: cut {cut:?} (end {})", node.id, p.log_end_offset())
                });
                match p.truncate_and_reopen(cut).await {
                    Ok(reopened) if world.alive(&node, life) => {
                        *node.partition.borrow_mut() = Some(reopened);
                        node.hw_seen.set(None);
                        world.push_roles();
                    }
                    Ok(reopened) => reopened.close().await,
                    // The node crashed meanwhile: its disk refused the dead process.
                    Err(_) if !world.alive(&node, life) => return,
                    Err(_) if node.faulted.get() => {
                        // The broker leaves the partition closed until it is restarted.
                        crash(&world, node.id).await;
                        return;
                    }
                    Err(e) => {
                        world.violation(format!("node {}: truncation {cut:?} failed: {e}", node.id))
                    }
                }
            }
            FollowerStep::Backoff => rt.sleep(BACKOFF).await,
        }
    }
}

/// Whether `acked` answers true within `PRODUCE_TIMEOUT`, as a client waits for an
/// acknowledgement.
pub(crate) async fn acked_in_time(rt: &Runtime, acked: impl Future<Output = bool>) -> bool {
    let timeout = async {
        rt.sleep(PRODUCE_TIMEOUT).await;
        false
    };
    futures_lite::future::or(acked, timeout).await
}

/// How one try of a produce ended.
enum Produced {
    /// Acknowledged (the answer reached the client) at this offset.
    Acked(i64),
    /// Not acknowledged: lost, refused or timed out.
    Failed,
}

/// One producer: records one at a time, each its own batch; the idempotent one sends a
/// batch again, with its sequence, until it is acknowledged.
/// A replica's log cleaner, for one life: a pass below its high watermark now and then.
async fn cleaner_loop(world: Rc<World>, node: Rc<Node>, life: u64) {
    while world.alive(&node, life) {
        world.runtime.sleep(CLEANER_INTERVAL).await;
        let Some(p) = node.partition() else { return };
        let now = world.clock.now_ms();
        // A failed pass leaves the log as it was (the broker logs it and tries again).
        let bound = p.high_watermark();
        if let Ok(Some(_)) = cleaner::clean(p.log(), 1 << 20, now, bound, true, None).await {
            world.cleaner_passes.set(world.cleaner_passes.get() + 1);
        }
    }
}

async fn producer(world: Rc<World>, acks: Acks) {
    let rt = world.runtime.clone();
    let prefix = match acks {
        Acks::All => "a",
        Acks::AllIdempotent => "i",
        Acks::Leader => "l",
    };
    let mut sequence = 0i32;
    for n in 1u64.. {
        let key = if world.scenario.compacted {
            let k = world.rng.borrow_mut().below(COMPACTED_KEYS);
            format!("{prefix}{k}")
        } else {
            format!("{prefix}{n}")
        };
        loop {
            if world.stop_producing.get() {
                return;
            }
            match produce_once(&world, acks, &key, sequence).await {
                Produced::Acked(offset) => {
                    if acks == Acks::Leader {
                        world
                            .acked_by_leader
                            .borrow_mut()
                            .insert(key.clone(), offset);
                    } else {
                        world.acked.borrow_mut().insert(offset, key.clone());
                    }
                    break;
                }
                Produced::Failed if acks == Acks::AllIdempotent => rt.sleep(BACKOFF).await,
                Produced::Failed => break,
            }
        }
        if acks == Acks::AllIdempotent {
            sequence += 1;
        }
    }
}

async fn produce_once(world: &Rc<World>, acks: Acks, key: &str, sequence: i32) -> Produced {
    let rt = &world.runtime;
    let leader = world.ctl.borrow().leader;
    let Some(leader) = leader else {
        rt.sleep(BACKOFF).await;
        return Produced::Failed;
    };
    if world.net.send(CLIENT, leader).await == Delivery::Lost {
        return Produced::Failed;
    }
    let Some(p) = world.leading(leader) else {
        return Produced::Failed;
    };
    let mut b = BatchBuilder::new(world.clock.now_ms());
    if acks == Acks::AllIdempotent {
        b = b.producer(IDEMPOTENT_PRODUCER, 0, sequence);
    }
    b.push(&Record {
        key: Some(key.as_bytes()),
        value: Some(b"v"),
        headers: &[],
        timestamp_delta: 0,
    });
    let ticket = match p.append(&b.build()) {
        Ok(t) => t,
        Err(AppendError::Sequence(e @ SequenceError::OutOfOrder { .. })) => {
            // Every batch before this one was acknowledged, so committed: no leader
            // elected from the ISR can be missing it.
            world.violation(format!("node {leader} refused {key}: {e}"));
            world.stop_producing.set(true);
            return Produced::Failed;
        }
        Err(_) => {
            rt.sleep(BACKOFF).await;
            return Produced::Failed;
        }
    };
    let acked = async {
        match acks {
            Acks::Leader => p.wait(ticket, AckLevel::Leader).await.is_ok(),
            Acks::All | Acks::AllIdempotent => p.wait_committed(ticket).await.is_ok(),
        }
    };
    if !acked_in_time(rt, acked).await {
        return Produced::Failed;
    }
    if world.net.send(leader, CLIENT).await == Delivery::Lost {
        return Produced::Failed;
    }
    Produced::Acked(ticket.base_offset)
}

async fn consumer(world: Rc<World>) {
    let rt = world.runtime.clone();
    let mut position = 0i64;
    loop {
        rt.sleep(Duration::from_millis(20)).await;
        let Some(p) = world.leader_partition() else {
            continue;
        };
        let Ok(r) = p
            .read_as(
                position,
                -1,
                64 * 1024,
                Reader::Consumer(Isolation::ReadUncommitted),
            )
            .await
        else {
            continue;
        };
        let mut seen = world.seen.borrow_mut();
        for (offset, key) in records_of(&r.records) {
            if offset >= r.high_watermark {
                drop(seen);
                world.violation(format!(
                    "a consumer read offset {offset} at a high watermark of {}",
                    r.high_watermark
                ));
                return;
            }
            if let Some(before) = seen.insert(offset, key.clone()) {
                if before != key {
                    drop(seen);
                    world.violation(format!(
                        "offset {offset} was read as {before}, then as {key}"
                    ));
                    return;
                }
            }
            position = offset + 1;
        }
    }
}

/// Crashes node `id`: its process dies (its disk refuses everything it still tries),
/// then the disk keeps what it synced and any part of the rest.
async fn crash(world: &Rc<World>, id: i32) {
    let node = world.node(id).clone();
    if node.changing.replace(true) {
        return;
    }
    node.life.set(node.life.get() + 1);
    node.fs.freeze();
    let open = node.partition.borrow_mut().take();
    if let Some(p) = open {
        p.close().await;
    }
    let (keep_ops, mut keep) = {
        let mut rng = world.rng.borrow_mut();
        let ops = rng.below(node.fs.pending_ops() as u64 + 1) as usize;
        (ops, rng.fork())
    };
    world.trace(|| {
        format!(
            "node {id}: crash, keeping {keep_ops} of {} namespace changes",
            node.fs.pending_ops()
        )
    });
    node.fs.crash(keep_ops, |_, _| keep.chance(50));
    {
        let mut context = node.context.borrow_mut();
        *context = LogContext {
            files: FileCache::in_memory(64, node.fs.next_life()),
            ..context.clone()
        };
    }
    // What failed the node is fixed before it comes back (a failed disk replaced, a
    // full one given room).
    node.fs.mend();
    node.faulted.set(false);
    node.hw_seen.set(None);
    world.crashes.set(world.crashes.get() + 1);
    node.changing.set(false);
    world.node_down(id);
}

/// Starts node `id` again from what its disk kept.
async fn restart(world: &Rc<World>, id: i32) {
    let node = world.node(id).clone();
    if node.partition().is_some() || node.changing.replace(true) {
        return;
    }
    let context = node.context.borrow().clone();
    let opened = Partition::open_replica(node.dir(), config(&world.scenario), context, -1).await;
    node.changing.set(false);
    match opened {
        Ok(p) => {
            world.trace(|| {
                format!(
                    "node {id}: open, log [{}, {}) hw {}",
                    p.log_start_offset(),
                    p.log_end_offset(),
                    p.high_watermark()
                )
            });
            *node.partition.borrow_mut() = Some(p);
            let life = node.life.get();
            world.node_up(id);
            world
                .runtime
                .spawn(replica_loop(world.clone(), node.clone(), life));
            if world.scenario.compacted {
                world
                    .runtime
                    .spawn(cleaner_loop(world.clone(), node.clone(), life));
            }
        }
        Err(e) => world.violation(format!("node {id} does not open after a crash: {e}")),
    }
}

async fn faults(world: Rc<World>) {
    let rt = world.runtime.clone();
    while !world.stop_faults.get() {
        let (wait, what, target) = {
            let mut rng = world.rng.borrow_mut();
            (
                rng.between(50, 600),
                rng.below(14),
                rng.between(1, world.scenario.nodes as u64) as i32,
            )
        };
        rt.sleep(Duration::from_millis(wait)).await;
        if world.stop_faults.get() {
            break;
        }
        let up = world.node(target).partition().is_some();
        let down = world
            .nodes
            .iter()
            .filter(|n| n.partition().is_none())
            .count();
        match what {
            0..=2 if up && down == 0 => crash(&world, target).await,
            0..=4 if !up => restart(&world, target).await,
            5 | 6 => {
                let other = 1 + (target % world.scenario.nodes);
                world.net.cut(target, other);
            }
            7 => world.net.heal_all(),
            9 => world.move_leader(target),
            10 if up => {
                // The next write or sync under the partition fails with EIO.
                let op = if world.rng.borrow_mut().chance(50) {
                    DiskOp::Write
                } else {
                    DiskOp::Sync
                };
                let node = world.node(target);
                node.faulted.set(true);
                world.trace(|| format!("node {target}: the next {op:?} fails with EIO"));
                node.fs.arm(DiskFault {
                    op,
                    under: node.dir(),
                    errno: libc::EIO,
                    count: 1,
                });
                world.disk_faults.set(world.disk_faults.get() + 1);
            }
            11 if up => {
                // The disk fills up within a few of its next writes.
                let node = world.node(target);
                let room = world.rng.borrow_mut().below(16 * 1024);
                node.faulted.set(true);
                world.trace(|| format!("node {target}: disk full in {room} bytes"));
                node.fs.set_capacity(Some(node.fs.used() + room));
                world.disk_faults.set(world.disk_faults.get() + 1);
            }
            12 => world.node(target).fs.set_capacity(None),
            // A power loss of every node at once (the whole rack): what was acknowledged
            // was synced on every ISR member, so it must survive this too.
            8 if down == 0 && world.rng.borrow_mut().chance(30) => {
                for id in 1..=world.scenario.nodes {
                    crash(&world, id).await;
                }
            }
            _ => {}
        }
    }
}

/// The world of `partition`: its nodes, started by [`run`].
fn build_world(
    partition: i32,
    scenario: Scenario,
    exec: &Executor,
    rng: &mut Rng,
    violations: &Rc<RefCell<Vec<String>>>,
) -> Rc<World> {
    let runtime = exec.runtime();
    let clock: Rc<dyn Clock> = Rc::new(exec.time().clone());
    let nodes: Vec<Rc<Node>> = (1..=scenario.nodes)
        .map(|id| {
            let fs = MemFs::new();
            Rc::new(Node {
                id,
                dir: PathBuf::from(format!("/data/node-{id}/t-{partition}")),
                context: RefCell::new(LogContext {
                    clock: clock.clone(),
                    observer: Rc::new(NoObserver),
                    files: FileCache::in_memory(64, fs.next_life()),
                    runtime: runtime.clone(),
                }),
                fs,
                partition: RefCell::new(None),
                life: Cell::new(0),
                hw_seen: Cell::new(None),
                changing: Cell::new(false),
                faulted: Cell::new(false),
            })
        })
        .collect();
    let replicas: Vec<i32> = (1..=scenario.nodes).collect();
    Rc::new(World {
        scenario,
        runtime: runtime.clone(),
        clock: clock.clone(),
        nodes,
        ctl: RefCell::new(Controller {
            leader: Some(1),
            leader_epoch: 0,
            isr: replicas.clone(),
            partition_epoch: 0,
            replicas,
            up: Vec::new(),
            version: 0,
            elections: 0,
        }),
        net: Net::new(runtime, rng.fork(), scenario.net),
        rng: RefCell::new(rng.fork()),
        partition,
        acked: RefCell::default(),
        acked_by_leader: RefCell::default(),
        seen: RefCell::default(),
        violations: violations.clone(),
        stop_producing: Cell::new(false),
        stop_faults: Cell::new(false),
        crashes: Cell::new(0),
        disk_faults: Cell::new(0),
        cleaner_passes: Cell::new(0),
        tracing: std::env::var_os("SIM_TRACE").is_some(),
        started_ms: clock.now_ms(),
    })
}

/// Whether `world` has settled: every node up and in the ISR, every log at the leader's
/// end and the high watermark there, and the workload settled too.
fn settled(world: &World, workload: Option<&dyn Workload>) -> bool {
    let c = world.ctl.borrow();
    let Some(leader) = c.leader.and_then(|l| world.node(l).partition()) else {
        return false;
    };
    c.isr.len() == world.scenario.nodes as usize
        && workload.is_none_or(|w| w.settled(world, &leader))
        && world.nodes.iter().all(|n| {
            n.partition().is_some_and(|p| {
                p.log_end_offset() == leader.log_end_offset()
                    && p.high_watermark() == leader.log_end_offset()
            })
        })
}

/// What `world`'s nodes hold, for a report.
fn describe(world: &World) -> String {
    let c = world.ctl.borrow();
    let state: Vec<String> = world
        .nodes
        .iter()
        .map(|n| match n.partition() {
            Some(p) => format!(
                "node {}: end {} hw {} lso {} leader {:?}",
                n.id,
                p.log_end_offset(),
                p.high_watermark(),
                p.last_stable_offset(),
                p.following()
            ),
            None => format!("node {}: down", n.id),
        })
        .collect();
    format!("partition {}: {c:?}; {}", world.partition, state.join("; "))
}

/// What a run plays on its worlds besides their own producers and consumers
/// (`transactions`), so that this module needs none of it.
pub(crate) trait Workload {
    /// Starts its tasks, once every node is up.
    fn start(self: Rc<Self>, worlds: &[Rc<World>]);
    /// Whether `world`, led by `leader`, has settled for it (the end waits for it).
    fn settled(&self, world: &World, leader: &Partition) -> bool;
    /// Its checks, once every world has settled.
    fn final_checks(self: Rc<Self>, worlds: Vec<Rc<World>>) -> Pin<Box<dyn Future<Output = ()>>>;
    /// Transactions committed and aborted, for the outcome.
    fn counts(&self) -> (usize, usize);
}

/// Runs one seed of the scenario with `workload` on its worlds: `Ok` with what it saw,
/// or `Err` with every breach (`scenario::run` is the entry point).
pub(crate) fn run_with(
    seed: u64,
    scenario: Scenario,
    workload: Option<Rc<dyn Workload>>,
) -> Result<Outcome, Vec<String>> {
    assert!(scenario.partitions >= 1, "a topic has a partition");
    let mut exec = Executor::new();
    let time = exec.time().clone();
    let mut rng = Rng::new(seed);
    let violations = Rc::new(RefCell::new(Vec::new()));
    let worlds: Vec<Rc<World>> = (0..scenario.partitions)
        .map(|p| build_world(p, scenario, &exec, &mut rng, &violations))
        .collect();

    // Start every node, then play.
    let started = Rc::new(Cell::new(false));
    {
        let (worlds, started, workload) = (worlds.clone(), started.clone(), workload.clone());
        exec.spawn(async move {
            for world in &worlds {
                for id in 1..=world.scenario.nodes {
                    restart(world, id).await;
                }
            }
            started.set(true);
            for world in &worlds {
                for acks in [Acks::All, Acks::AllIdempotent, Acks::Leader] {
                    world.runtime.spawn(producer(world.clone(), acks));
                }
                world.runtime.spawn(consumer(world.clone()));
                world.runtime.spawn(faults(world.clone()));
            }
            if let Some(w) = workload {
                w.start(&worlds);
            }
        });
    }
    let fail = |why: String| -> Vec<String> {
        let mut v = violations.borrow().clone();
        v.push(why);
        v
    };
    exec.run_until(Duration::from_secs(5), || started.get())
        .map_err(|e| fail(format!("nodes did not start: {e:?}")))?;
    exec.run_for(scenario.faults_for);

    // Heal: no more faults, every node up, then let the replicas catch up.
    for world in &worlds {
        world.stop_faults.set(true);
        for node in &world.nodes {
            node.fs.mend();
            node.faulted.set(false);
        }
        world.net.heal_all();
        world.net.set_faults(NetFaults::NONE);
        let world = world.clone();
        exec.spawn(async move {
            // Over and over: a node whose log failed before its disk was mended still
            // stops, and a crash under way when the faults stopped ends with its node
            // down.
            loop {
                for id in 1..=world.scenario.nodes {
                    restart(&world, id).await;
                }
                world.runtime.sleep(BACKOFF).await;
            }
        });
    }
    exec.run_for(Duration::from_millis(500));
    for world in &worlds {
        world.stop_producing.set(true);
    }
    let all_settled = || worlds.iter().all(|w| settled(w, workload.as_deref()));
    match exec.run_until(Duration::from_secs(30), all_settled) {
        Ok(()) => {}
        Err(Stopped::Deadlock) | Err(Stopped::TimeLimit) => {
            let state: Vec<String> = worlds.iter().map(|w| describe(w)).collect();
            return Err(fail(format!(
                "the replicas never caught up: {}",
                state.join(" | ")
            )));
        }
    }

    // The end: check the logs.
    let checked = Rc::new(RefCell::new(None));
    {
        let (worlds, checked, workload) = (worlds.clone(), checked.clone(), workload.clone());
        exec.spawn(async move {
            let mut hw = 0;
            for world in &worlds {
                hw += final_checks(world).await;
            }
            if let Some(w) = workload {
                w.final_checks(worlds).await;
            }
            *checked.borrow_mut() = Some(hw);
        });
    }
    exec.run_until(Duration::from_secs(5), || checked.borrow().is_some())
        .map_err(|e| fail(format!("the final read did not finish: {e:?}")))?;
    let hw = checked.borrow_mut().take().expect("checked");
    let violations = violations.borrow().clone();
    if !violations.is_empty() {
        return Err(violations);
    }
    let sum = |f: &dyn Fn(&World) -> usize| worlds.iter().map(|w| f(w)).sum::<usize>();
    let (committed, aborted) = workload.map_or((0, 0), |w| w.counts());
    Ok(Outcome {
        acked: sum(&|w| w.acked.borrow().len()),
        acked_by_leader: sum(&|w| w.acked_by_leader.borrow().len()),
        disk_faults: sum(&|w| w.disk_faults.get()),
        cleaner_passes: sum(&|w| w.cleaner_passes.get()),
        transactions_committed: committed,
        transactions_aborted: aborted,
        final_high_watermark: hw,
        crashes: sum(&|w| w.crashes.get()),
        elections: sum(&|w| w.ctl.borrow().elections),
        elapsed_ms: time.elapsed().as_millis(),
    })
}

/// Reads every replica below the leader's high watermark: the same batches everywhere,
/// every acknowledged and every consumed record in them. Returns the high watermark.
async fn final_checks(world: &Rc<World>) -> i64 {
    let leader = world.ctl.borrow().leader.expect("a leader once settled");
    let lp = world.node(leader).partition().expect("the leader is up");
    let hw = lp.high_watermark();
    let mut logs = Vec::new();
    for node in &world.nodes {
        let p = node.partition().expect("every node is up");
        let mut bytes = Vec::new();
        let mut at = p.log_start_offset();
        while at < hw {
            let r = match p.read_as(at, -1, 1 << 20, Reader::Replica).await {
                Ok(r) => r,
                Err(e) => {
                    world.violation(format!("node {}: read at {at} failed: {e}", node.id));
                    break;
                }
            };
            let mut last = None;
            for item in batches(&r.records) {
                let Ok((h, range)) = item else { break };
                if h.last_offset() >= hw {
                    break;
                }
                bytes.extend_from_slice(&r.records[range]);
                last = Some(h);
            }
            let Some(h): Option<BatchHeader> = last else {
                break;
            };
            at = h.last_offset() + 1;
        }
        logs.push((node.id, bytes));
    }
    if world.scenario.compacted {
        compacted_checks(world, &logs, leader);
        return hw;
    }
    let (first_id, first) = &logs[0];
    for (id, log) in &logs[1..] {
        if log != first {
            world.violation(format!(
                "below the high watermark {hw}, node {id}'s log differs from node {first_id}'s ({} vs {} bytes)",
                log.len(),
                first.len()
            ));
        }
    }
    let mut leader_log = BTreeMap::new();
    for (offset, key) in records_of(&logs[(leader - 1) as usize].1) {
        if let Some(before) = leader_log.insert(key.clone(), offset) {
            world.violation(format!(
                "record {key} is in the log twice, at {before} and at {offset}"
            ));
        }
    }
    for (key, offset) in world.acked_by_leader.borrow().iter() {
        if leader_log.get(key).is_some_and(|at| at != offset) {
            world.violation(format!(
                "record {key}, acknowledged by a leader at offset {offset}, is at {:?}",
                leader_log.get(key)
            ));
        }
    }
    let leader_log: BTreeMap<i64, String> = leader_log.into_iter().map(|(k, o)| (o, k)).collect();
    for ((id, log), node) in logs.iter().zip(&world.nodes) {
        check_producer_state(world, *id, log, &node.partition().expect("up"));
    }
    for (offset, key) in world.acked.borrow().iter() {
        if leader_log.get(offset) != Some(key) {
            world.violation(format!(
                "acknowledged record {key} at offset {offset} is lost (the log has {:?})",
                leader_log.get(offset)
            ));
        }
    }
    for (offset, key) in world.seen.borrow().iter() {
        if leader_log.get(offset) != Some(key) {
            world.violation(format!(
                "consumed record {key} at offset {offset} is not in the final log"
            ));
        }
    }
    hw
}

/// The idempotent producer's state on node `id` agrees with its log `log` (every batch
/// it holds): the last sequence it remembers is that of the producer's last batch.
fn check_producer_state(world: &World, id: i32, log: &[u8], p: &Partition) {
    let mut last_in_log = None;
    for item in batches(log) {
        let Ok((h, _)) = item else { break };
        if h.producer_id == IDEMPOTENT_PRODUCER {
            last_in_log = Some(h.base_sequence + h.last_offset_delta);
        }
    }
    let remembered = p
        .log()
        .active_producers()
        .into_iter()
        .find(|a| a.producer_id == IDEMPOTENT_PRODUCER)
        .map(|a| a.last_sequence);
    if remembered != last_in_log {
        world.violation(format!(
            "node {id}: the idempotent producer's state has last sequence {remembered:?}, \
             its log {last_in_log:?}"
        ));
    }
}

/// The end of a compacted run: each key's last offset below the high watermark is the
/// same on every replica, and no acknowledged or consumed record is gone unless a later
/// record of its key took its place.
fn compacted_checks(world: &World, logs: &[(i32, Vec<u8>)], leader: i32) {
    let last_of = |log: &[u8]| -> BTreeMap<String, i64> {
        records_of(log).into_iter().map(|(o, k)| (k, o)).collect()
    };
    let leader_keys = last_of(&logs[(leader - 1) as usize].1);
    for (id, log) in logs {
        let keys = last_of(log);
        if keys != leader_keys {
            let differ: Vec<_> = leader_keys
                .iter()
                .filter(|(k, o)| keys.get(*k) != Some(o))
                .take(3)
                .collect();
            world.violation(format!(
                "node {id}'s last offset per key differs from its leader's (node {leader}): \
                 {differ:?} there are at {:?}",
                differ.iter().map(|(k, _)| keys.get(*k)).collect::<Vec<_>>()
            ));
        }
    }
    let kept = |what: &str, offset: i64, key: &str| {
        if leader_keys.get(key).is_none_or(|last| *last < offset) {
            world.violation(format!(
                "{what} record {key} at offset {offset} is lost: its key's last offset is {:?}",
                leader_keys.get(key)
            ));
        }
    };
    for (offset, key) in world.acked.borrow().iter() {
        kept("acknowledged", *offset, key);
    }
    for (offset, key) in world.seen.borrow().iter() {
        kept("consumed", *offset, key);
    }
}

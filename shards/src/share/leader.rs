//! The share partitions a shard leads (KIP-932): for each (share group, topic partition)
//! this shard leads and some share consumer has fetched, the in-flight state
//! (`partition::SharePartition`), loaded from the share coordinator on first use and
//! stored back there whenever records are acknowledged, released or time out.
//!
//! Loading reads the stored state at this leader's epoch — which fences the previous
//! leader's writes — and starts a share partition never seen where
//! `share.auto.offset.reset` says (the log end by default), storing that start at once.
//! A key the share coordinator has never initialized is initialized first (state epoch
//! 0), where Kafka's group coordinator would have done it before assigning the partition.
//!
//! What is stored is the whole in-flight window, each record as it would be after a
//! crash: an acquired record as AVAILABLE with the delivery count it had before this
//! delivery, since acquisitions are not stored (Kafka's rule: a record delivered to a
//! member when the leader fails is delivered again, and that delivery does not count).
//!
//! A share group's configs (`group::share::overrides`) come with each operation
//! (`ShareTarget::delivery`): the lock duration, the isolation level and whether RENEW
//! is taken apply at once; the delivery count limit and the in-flight limit when the
//! share partition is loaded. A read_committed group acquires up to the last stable
//! offset, and the records of aborted transactions it would acquire are archived instead
//! (`share::aborted`) and stored.
//!
//! A share partition that no member holds anything of once a session ends or its locks
//! run out is dropped (all of it is stored): the next use loads it again, so offsets an
//! administrator reset while the group was empty are what its next member reads.
//!
//! Invariants: every operation on one share partition runs alone (an async lock per
//! share partition), so a change and its store are never interleaved with another; an
//! acknowledgement is answered only once stored, and one whose store fails is undone
//! (the state before it is put back); a store refused as fenced drops the share
//! partition (another leader has it), and the next use loads it again.

use super::coordinator::{StateFailure, StateOp, StateView};
use super::fetch_span::{ByteBudget, Fetched};
use super::partition::{
    AckBatch, AckError, AckType, Acquirable, Acquired, FetchedSpan, RecordState, ShareCounts,
    ShareLimits, SharePartition, StateBatch,
};
use super::records::ShareKey;
use super::state::{StateError, StateWrite};
use crate::routing::TopicPartition;
use corelog_partition::Partition;
use futures::future::LocalBoxFuture;
use futures::lock::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Where share partitions' state is kept: the share coordinator, wherever it is.
pub trait Persister {
    fn call(
        &self,
        key: ShareKey,
        op: StateOp,
    ) -> LocalBoxFuture<'_, Result<Option<StateView>, StateFailure>>;
}

pub use crate::group::share::overrides::Delivery;
pub use crate::group::share::reset::{AutoOffsetReset, AUTO_OFFSET_RESET};

/// The leader's settings for share partitions (Kafka's `group.share.*`).
#[derive(Debug, Clone, Copy)]
pub struct ShareLeaderConfig {
    pub limits: ShareLimits,
    /// `group.share.record.lock.duration.ms`.
    pub lock_ms: i64,
}

impl ShareLeaderConfig {
    /// The broker's delivery settings, which a share group's configs override.
    pub fn delivery(&self) -> Delivery {
        Delivery {
            record_lock_duration_ms: self.lock_ms,
            delivery_count_limit: self.limits.delivery_limit,
            partition_max_record_locks: self.limits.max_in_flight,
            ..Delivery::default()
        }
    }
}

impl Default for ShareLeaderConfig {
    fn default() -> Self {
        ShareLeaderConfig {
            limits: ShareLimits::default(),
            lock_ms: 30_000,
        }
    }
}

/// Why a share partition's operation failed: its partition's error code at the edge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    #[error("this broker does not lead the partition")]
    NotLeaderOrFollower,
    #[error("the share coordinator is not available")]
    CoordinatorNotAvailable,
    #[error("{0}")]
    InvalidRecordState(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    Unknown(String),
}

impl From<StateFailure> for ShareError {
    fn from(e: StateFailure) -> ShareError {
        match e {
            // Kafka's `fetchPersisterError`: a fenced leader is no leader.
            StateFailure::Fenced(StateError::FencedLeaderEpoch(..))
            | StateFailure::Fenced(StateError::FencedStateEpoch(..)) => {
                ShareError::NotLeaderOrFollower
            }
            StateFailure::NotCoordinator | StateFailure::CoordinatorNotAvailable => {
                ShareError::CoordinatorNotAvailable
            }
            StateFailure::UnknownTopicOrPartition => ShareError::NotLeaderOrFollower,
            other => ShareError::Unknown(other.to_string()),
        }
    }
}

impl From<AckError> for ShareError {
    fn from(e: AckError) -> ShareError {
        match e {
            AckError::InvalidRecordState(_) => ShareError::InvalidRecordState(e.to_string()),
            AckError::InvalidRequest(m) => ShareError::InvalidRequest(m),
        }
    }
}

/// One loaded share partition.
#[derive(Debug, Clone)]
struct Loaded {
    state: SharePartition,
    /// The limits it was loaded with (the group's, then).
    limits: ShareLimits,
    state_epoch: i32,
    leader_epoch: i32,
}

type Held = Rc<Mutex<Option<Loaded>>>;

/// One share partition an operation is about, and where its records are.
#[derive(Clone, Copy)]
pub struct ShareTarget<'a> {
    pub group: &'a str,
    pub tp: &'a TopicPartition,
    pub topic_id: uuid::Uuid,
    pub log: &'a Partition,
    /// The group's delivery settings (the broker's with its configs applied).
    pub delivery: Delivery,
}

/// Where a share partition stands when an operation starts, for what the operation
/// must read of the log before it changes the state.
#[derive(Debug, Clone)]
struct Window {
    start: i64,
    end: i64,
    /// Records that may still be put in flight.
    room: i64,
    /// What an acquisition could hand out (a share fetch reads the log from its first).
    acquirable: Acquirable,
}

pub struct ShareLeader {
    held: RefCell<HashMap<(String, TopicPartition), Held>>,
    /// Counts the operations after which a share partition had records to acquire that
    /// it had not before (released, timed out, or room in flight again); `available`
    /// fires with each, for the long polls waiting on this shard.
    generation: std::cell::Cell<u64>,
    available: event_listener::Event,
}

/// Adds what an operation did to the shard's metrics.
fn record(c: ShareCounts) {
    if c == ShareCounts::default() {
        return;
    }
    corelog_metrics::record_share(|m| {
        m.acquired += c.acquired;
        for (slot, n) in m
            .acknowledged
            .iter_mut()
            .zip([c.accepted, c.released, c.rejected, c.renewed, c.gaps])
        {
            *slot += n;
        }
        m.lock_expired += c.lock_expired;
        m.archived_at_limit += c.archived_at_limit;
        m.archived_unreadable += c.archived_unreadable;
        m.session_released += c.session_released;
    });
}

/// Whether `after` has records to acquire that `before` had not: some available again,
/// or room in flight again for new ones.
fn offers_more(before: &SharePartition, after: &SharePartition, limits: ShareLimits) -> bool {
    let room = |p: &SharePartition| p.in_flight() < limits.max_in_flight;
    (after.available() > before.available()) || (room(after) && !room(before))
}

/// The records as stored: acquisitions undone (see the module doc).
fn durable(batches: Vec<StateBatch>) -> Vec<StateBatch> {
    batches
        .into_iter()
        .map(|b| match b.state {
            RecordState::Acquired => StateBatch {
                state: RecordState::Available,
                deliveries: b.deliveries.saturating_sub(1),
                ..b
            },
            _ => b,
        })
        .collect()
}

impl Default for ShareLeader {
    fn default() -> Self {
        Self::new()
    }
}

impl ShareLeader {
    pub fn new() -> ShareLeader {
        ShareLeader {
            held: RefCell::new(HashMap::new()),
            generation: std::cell::Cell::new(0),
            available: event_listener::Event::new(),
        }
    }

    /// See `generation`: a long poll takes it before it looks, then waits until it grows
    /// ([`Self::wait_available`]).
    pub fn available_generation(&self) -> u64 {
        self.generation.get()
    }

    /// Waits until some share partition of this shard gained records to acquire after
    /// `since` (an [`Self::available_generation`]), or `deadline`.
    pub async fn wait_available(&self, since: u64, deadline: std::time::Instant) {
        loop {
            let listener = self.available.listen();
            if self.generation.get() > since {
                return;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return;
            }
            futures_lite::future::or(listener, glommio::timer::sleep(deadline - now)).await;
        }
    }

    fn held(&self, group: &str, tp: &TopicPartition) -> Held {
        self.held
            .borrow_mut()
            .entry((group.to_string(), tp.clone()))
            .or_default()
            .clone()
    }

    /// Runs `f` on the share partition `t` names, loading it first if needed, and
    /// stores the result when `f` says the state changed (`Ok((answer, true))`). A
    /// failed store undoes `f`'s change.
    async fn with<T>(
        &self,
        t: &ShareTarget<'_>,
        persister: &dyn Persister,
        f: impl FnOnce(&mut SharePartition) -> Result<(T, bool), ShareError>,
    ) -> Result<T, ShareError> {
        self.with_read(t, persister, |_| std::future::ready(()), |sp, ()| f(sp))
            .await
    }

    /// [`Self::with`], where `f` also gets what `read` found, which is run first, with
    /// the share partition locked and loaded and given its window.
    async fn with_read<T, R, Fut>(
        &self,
        t: &ShareTarget<'_>,
        persister: &dyn Persister,
        read: impl FnOnce(Window) -> Fut,
        f: impl FnOnce(&mut SharePartition, R) -> Result<(T, bool), ShareError>,
    ) -> Result<T, ShareError>
    where
        Fut: std::future::Future<Output = R>,
    {
        let (group, tp, log) = (t.group, t.tp, t.log);
        if !log.is_leader() {
            return Err(ShareError::NotLeaderOrFollower);
        }
        let key = ShareKey {
            group: group.to_string(),
            topic: t.topic_id,
            partition: tp.partition,
        };
        // The share partition's one live state: one dropped from the map while this
        // task waited for its lock is not used (a new one is, or is loaded). Locking
        // again at once cannot wait: nothing runs between the release and the lock.
        let held = loop {
            let held = self.held(group, tp);
            let waited = held.lock().await;
            let current = self
                .held
                .borrow()
                .get(&(group.to_string(), tp.clone()))
                .is_some_and(|h| Rc::ptr_eq(h, &held));
            drop(waited);
            if current {
                break held;
            }
        };
        let mut slot = held.lock().await;
        let stale = slot
            .as_ref()
            .is_some_and(|l| l.leader_epoch != log.leader_epoch());
        if slot.is_none() || stale {
            *slot = Some(
                self.load(&key, log, t.delivery, persister)
                    .await
                    .inspect_err(|_| {
                        self.drop_if_same(group, tp, &held);
                    })?,
            );
        }
        let loaded = slot.as_mut().expect("loaded above");
        loaded.state.move_log_start(log.log_start_offset());
        let window = Window {
            start: loaded.state.start(),
            end: loaded.state.end(),
            room: loaded.limits.max_in_flight - loaded.state.in_flight(),
            acquirable: loaded.state.acquirable(),
        };
        let found = read(window).await;
        let loaded = slot.as_mut().expect("loaded above");
        let before = loaded.state.clone();
        let (answer, changed) = f(&mut loaded.state, found)?;
        if changed {
            if let Err(e) = self.store(&key, loaded, persister).await {
                loaded.state = before;
                if e == ShareError::NotLeaderOrFollower {
                    *slot = None;
                    self.drop_if_same(group, tp, &held);
                }
                return Err(e);
            }
            if offers_more(&before, &loaded.state, loaded.limits) {
                self.generation.set(self.generation.get() + 1);
                self.available.notify(usize::MAX);
            }
        }
        record(loaded.state.take_counts());
        Ok(answer)
    }

    fn drop_if_same(&self, group: &str, tp: &TopicPartition, held: &Held) {
        let mut all = self.held.borrow_mut();
        let k = (group.to_string(), tp.clone());
        if all.get(&k).is_some_and(|h| Rc::ptr_eq(h, held)) {
            all.remove(&k);
        }
    }

    async fn store(
        &self,
        key: &ShareKey,
        loaded: &Loaded,
        persister: &dyn Persister,
    ) -> Result<(), ShareError> {
        let write = StateWrite {
            state_epoch: loaded.state_epoch,
            leader_epoch: loaded.leader_epoch,
            start_offset: loaded.state.start(),
            delivery_complete_count: -1,
            batches: durable(loaded.state.state_batches()),
        };
        persister.call(key.clone(), StateOp::Write(write)).await?;
        Ok(())
    }

    async fn load(
        &self,
        key: &ShareKey,
        log: &Partition,
        delivery: Delivery,
        persister: &dyn Persister,
    ) -> Result<Loaded, ShareError> {
        let limits = ShareLimits {
            max_in_flight: delivery.partition_max_record_locks,
            delivery_limit: delivery.delivery_count_limit,
        };
        let leader_epoch = log.leader_epoch();
        let read = StateOp::Read { leader_epoch };
        let view = match persister.call(key.clone(), read.clone()).await {
            Err(StateFailure::InvalidRequest(_)) => {
                // Never initialized: initialized here, to start where the reset says.
                let init = StateOp::Initialize {
                    state_epoch: 0,
                    start_offset: -1,
                };
                persister.call(key.clone(), init).await?;
                persister.call(key.clone(), read).await?
            }
            other => other?,
        };
        let view = view.ok_or_else(|| ShareError::Unknown("a read without its state".into()))?;
        let mut loaded = Loaded {
            state: SharePartition::restore(view.start_offset.max(0), &view.batches, limits),
            limits,
            state_epoch: view.state_epoch,
            leader_epoch,
        };
        if view.start_offset < 0 {
            let start = match delivery.auto_offset_reset {
                AutoOffsetReset::Latest => log.high_watermark(),
                AutoOffsetReset::Earliest => log.log_start_offset(),
                AutoOffsetReset::ByDuration(ms) => {
                    let since = super::now_ms().saturating_sub(ms);
                    match log
                        .find_offset(since, corelog_partition::Isolation::ReadUncommitted)
                        .await
                    {
                        Ok(found) if found.offset >= 0 => found.offset,
                        _ => log.high_watermark(),
                    }
                }
            };
            loaded.state = SharePartition::new(start, limits);
            self.store(key, &loaded, persister).await?;
        }
        loaded.state.move_log_start(log.log_start_offset());
        tracing::debug!(group = %key.group, partition = key.partition, start = loaded.state.start(), "share partition loaded");
        Ok(loaded)
    }

    /// Acquires up to `max_records` records of the share partition for `member`, locked
    /// for the group's lock duration, up to the high watermark — or for a
    /// read_committed group up to the last stable offset, archiving the records of
    /// aborted transactions instead of delivering them (`share::aborted`).
    /// Acquisitions are not stored; archived records are.
    pub async fn acquire(
        &self,
        t: &ShareTarget<'_>,
        member: &str,
        persister: &dyn Persister,
        max_records: usize,
        now_ms: i64,
    ) -> Result<Vec<Acquired>, ShareError> {
        self.acquire_read(t, member, persister, max_records, now_ms, None)
            .await
            .map(|(acquired, _)| acquired)
    }

    /// A share fetch of this partition: reads the log from the first acquirable record
    /// within `budget` (`fetch_span`), acquires as [`Self::acquire`] does but nothing
    /// beyond what was read, and answers the acquired records with the bytes of their
    /// batches.
    pub async fn fetch(
        &self,
        t: &ShareTarget<'_>,
        member: &str,
        persister: &dyn Persister,
        max_records: usize,
        budget: ByteBudget,
        now_ms: i64,
    ) -> Result<(Vec<Acquired>, Option<bytes::Bytes>), ShareError> {
        let (acquired, fetched) = self
            .acquire_read(t, member, persister, max_records, now_ms, Some(budget))
            .await?;
        let records = fetched.and_then(|f| f.records(&acquired));
        Ok((acquired, records))
    }

    async fn acquire_read(
        &self,
        t: &ShareTarget<'_>,
        member: &str,
        persister: &dyn Persister,
        max_records: usize,
        now_ms: i64,
        budget: Option<ByteBudget>,
    ) -> Result<(Vec<Acquired>, Option<Fetched>), ShareError> {
        let lock_ms = t.delivery.record_lock_duration_ms;
        let read_committed = t.delivery.read_committed;
        let log = t.log;
        let log_end = if read_committed {
            log.last_stable_offset()
        } else {
            log.high_watermark()
        };
        let read = |w: Window| async move {
            let fetched = match (budget, w.acquirable.first(log_end)) {
                (None, _) => None,
                (Some(_), None) => Some((log_end, Fetched::default())),
                (Some(b), Some(first)) => Some((
                    first,
                    Fetched::read(log, first, &w.acquirable, log_end, max_records, b).await,
                )),
            };
            if !read_committed {
                return (Ok(Vec::new()), fetched);
            }
            let to = log_end.min(w.end.saturating_add(w.room.max(0)));
            let aborted = super::aborted::read_aborted_ranges(log, w.start, to).await;
            (aborted, fetched)
        };
        self.with_read(t, persister, read, |sp, (unreadable, fetched)| {
            let unreadable = unreadable.map_err(ShareError::Unknown)?;
            let span = fetched
                .as_ref()
                .map_or(FetchedSpan::ALL, |(first, f)| f.span(*first));
            let acquired = sp.acquire_within(member, log_end, max_records, now_ms, lock_ms, &span);
            let (acquired, changed) = sp.archive_unreadable(acquired, &unreadable);
            Ok(((acquired, fetched.map(|(_, f)| f)), changed))
        })
        .await
    }

    /// Applies `member`'s acknowledgements, all or none, and stores them.
    pub async fn acknowledge(
        &self,
        t: &ShareTarget<'_>,
        member: &str,
        persister: &dyn Persister,
        batches: &[AckBatch],
        now_ms: i64,
    ) -> Result<(), ShareError> {
        let lock_ms = t.delivery.record_lock_duration_ms;
        let renews = || {
            batches
                .iter()
                .flat_map(|b| &b.types)
                .any(|t| *t == AckType::Renew)
        };
        if !t.delivery.renew_enabled && renews() {
            // Kafka's answer when `share.renew.acknowledge.enable` is false.
            return Err(ShareError::InvalidRecordState(
                "RENEW acknowledgements are disabled for this share group".into(),
            ));
        }
        self.with(t, persister, |sp| {
            sp.acknowledge(member, batches, now_ms, lock_ms)?;
            Ok(((), true))
        })
        .await
    }

    /// `member`'s share session ended: what it holds is available again (stored). A
    /// share partition not loaded holds nothing of it.
    pub async fn release(
        &self,
        t: &ShareTarget<'_>,
        member: &str,
        persister: &dyn Persister,
    ) -> Result<(), ShareError> {
        if !self
            .held
            .borrow()
            .contains_key(&(t.group.to_string(), t.tp.clone()))
        {
            return Ok(());
        }
        self.with(t, persister, |sp| Ok(((), sp.release_member(member))))
            .await?;
        self.drop_if_idle(t.group, t.tp);
        Ok(())
    }

    /// Drops a share partition that no member holds anything of: all of it is stored,
    /// and the next use loads it again — so an administrator's reset or deletion of the
    /// offsets of an empty group is what its next member gets (Kafka drops a group's
    /// share partitions when its last share session ends, for the same reason).
    fn drop_if_idle(&self, group: &str, tp: &TopicPartition) {
        let key = (group.to_string(), tp.clone());
        // Not while a task waits for it (it holds a reference besides the map's).
        let idle = self.held.borrow().get(&key).is_some_and(|h| {
            Rc::strong_count(h) == 1
                && h.try_lock()
                    .is_some_and(|l| l.as_ref().is_none_or(|l| l.state.next_deadline().is_none()))
        });
        if idle {
            self.held.borrow_mut().remove(&key);
        }
    }

    /// The earliest lock deadline of the share partitions not busy now.
    pub fn next_deadline(&self) -> Option<i64> {
        self.held
            .borrow()
            .values()
            .filter_map(|h| {
                h.try_lock()
                    .and_then(|l| l.as_ref().and_then(|l| l.state.next_deadline()))
            })
            .min()
    }

    /// The share partitions with a lock due by `now_ms`: (group, topic partition).
    pub fn due(&self, now_ms: i64) -> Vec<(String, TopicPartition)> {
        self.held
            .borrow()
            .iter()
            .filter(|(_, h)| {
                // A share partition busy now is looked at next round.
                h.try_lock().is_some_and(|l| {
                    l.as_ref()
                        .and_then(|l| l.state.next_deadline())
                        .is_some_and(|d| d <= now_ms)
                })
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Ends the locks due by `now_ms` in one share partition, and stores the records
    /// made available or archived.
    pub async fn expire(
        &self,
        t: &ShareTarget<'_>,
        persister: &dyn Persister,
        now_ms: i64,
    ) -> Result<(), ShareError> {
        self.with(t, persister, |sp| Ok(((), sp.expire(now_ms))))
            .await?;
        self.drop_if_idle(t.group, t.tp);
        Ok(())
    }

    /// This shard no longer leads `tp`: its share partitions go (the next leader loads
    /// them from the share coordinator).
    pub fn unload(&self, tp: &TopicPartition) {
        self.held.borrow_mut().retain(|(_, t), _| t != tp);
    }

    /// The share partitions held now and their records in flight, over those not busy
    /// (the metrics' gauges).
    pub fn gauges(&self) -> (u64, u64) {
        let held = self.held.borrow();
        let in_flight: i64 = held
            .values()
            .filter_map(|h| {
                h.try_lock()
                    .and_then(|l| l.as_ref().map(|l| l.state.in_flight()))
            })
            .sum();
        (held.len() as u64, u64::try_from(in_flight).unwrap_or(0))
    }

    /// The start offset and records in flight of a loaded share partition (tests,
    /// metrics).
    pub fn peek(&self, group: &str, tp: &TopicPartition) -> Option<(i64, i64)> {
        let held = self
            .held
            .borrow()
            .get(&(group.to_string(), tp.clone()))?
            .clone();
        let l = held.try_lock()?;
        l.as_ref().map(|l| (l.state.start(), l.state.in_flight()))
    }
}

#[cfg(test)]
mod tests;

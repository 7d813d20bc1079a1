//! One share partition: the records of one topic partition as one share group consumes
//! them (KIP-932), held by the partition's leader. Several members read the partition at
//! once; each record is acquired by one member for a while, then acknowledged — accepted,
//! released for redelivery, or rejected — or its lock runs out and it is delivered again,
//! until it has been delivered `delivery_limit` times and is archived.
//!
//! The state is the share-partition start offset (SPSO, `start`: every record below it
//! is done), the end (`end`, exclusive: the next record never fetched) and between them
//! the in-flight records, kept as spans of consecutive offsets in the same state, with
//! the same delivery count, owner and lock deadline. A span is split where an operation
//! covers part of it, and merged back with its neighbour when they become alike.
//!
//! Pure: time comes in as milliseconds, the log's end as an argument, and nothing here
//! reads or writes; the caller reads the records of what [`SharePartition::acquire`]
//! returns and persists what changed.
//!
//! Invariants (checked after every operation in debug builds and by the tests):
//! - the spans cover `[start, end)` exactly, in order, without overlap, none empty, and
//!   the first one is not terminal (`start` only moves forward, past terminal records);
//! - a record is ACQUIRED exactly when it has an owner and a lock deadline;
//! - no record has been delivered more than `delivery_limit` times, and one released or
//!   timed out at the limit is ARCHIVED, never AVAILABLE;
//! - at most `max_in_flight` records are in flight, except records acquired again from
//!   inside the window.
//!
//! Acknowledgements of one request are all or nothing: any refused offset refuses them
//! all (Kafka's rollback), with INVALID_RECORD_STATE for records the member does not hold
//! (never acquired, acquired by another member, lock expired, already acknowledged) and
//! INVALID_REQUEST for malformed batches or offsets past the end.

use std::collections::BTreeMap;

/// A record's state (Kafka's `RecordState` ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available = 0,
    Acquired = 1,
    Acknowledged = 2,
    Archived = 4,
}

impl RecordState {
    pub fn id(self) -> i8 {
        self as i8
    }

    pub fn from_id(id: i8) -> Option<RecordState> {
        Some(match id {
            0 => RecordState::Available,
            1 => RecordState::Acquired,
            2 => RecordState::Acknowledged,
            4 => RecordState::Archived,
            _ => return None,
        })
    }

    /// Done with: never delivered again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// How a member acknowledges a record (Kafka's `AcknowledgeType` ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// The offset is not a record the member could deliver (compacted away, a
    /// transaction marker): archived.
    Gap = 0,
    Accept = 1,
    /// Delivered again, to any member (archived at the delivery limit).
    Release = 2,
    Reject = 3,
    /// Kept: its lock starts again (KIP-1222).
    Renew = 4,
}

impl AckType {
    pub fn from_id(id: i8) -> Option<AckType> {
        Some(match id {
            0 => AckType::Gap,
            1 => AckType::Accept,
            2 => AckType::Release,
            3 => AckType::Reject,
            4 => AckType::Renew,
            _ => return None,
        })
    }
}

/// One acknowledgement batch: `types` has one entry for every offset of
/// `first..=last`, or a single entry for them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<AckType>,
}

/// Records acquired by one fetch, with their delivery count (Kafka's `AcquiredRecords`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub deliveries: u16,
}

/// Why acknowledgements were refused (nothing of them was applied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// INVALID_RECORD_STATE.
    #[error("record {0} is not acquired by this member")]
    InvalidRecordState(i64),
    /// INVALID_REQUEST.
    #[error("{0}")]
    InvalidRequest(String),
}

/// A share partition's settings (Kafka's `group.share.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareLimits {
    /// `group.share.partition.max.record.locks`.
    pub max_in_flight: i64,
    /// `group.share.delivery.count.limit`.
    pub delivery_limit: u16,
}

impl Default for ShareLimits {
    fn default() -> Self {
        ShareLimits {
            max_in_flight: 2000,
            delivery_limit: 5,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    /// Inclusive.
    last: i64,
    state: RecordState,
    deliveries: u16,
    /// Set exactly while ACQUIRED.
    owner: Option<String>,
    lock_deadline_ms: Option<i64>,
}

impl Span {
    fn available(last: i64, deliveries: u16) -> Span {
        Span {
            last,
            state: RecordState::Available,
            deliveries,
            owner: None,
            lock_deadline_ms: None,
        }
    }
}

/// A state batch as the share coordinator stores it (Kafka's `StateBatches`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateBatch {
    pub first: i64,
    pub last: i64,
    pub state: RecordState,
    pub deliveries: u16,
}

/// What the operations on a share partition did, in records, since the counts were
/// last taken ([`SharePartition::take_counts`]: the leader's metrics). An operation
/// undone (its state put back) takes its counts with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareCounts {
    /// Deliveries: records acquired by a member.
    pub acquired: u64,
    /// Acknowledged by their member, by type.
    pub accepted: u64,
    pub released: u64,
    pub rejected: u64,
    pub renewed: u64,
    pub gaps: u64,
    /// Their lock ran out.
    pub lock_expired: u64,
    /// Released or timed out at the delivery limit, so archived.
    pub archived_at_limit: u64,
    /// Archived unread for a read_committed group (`archive_unreadable`).
    pub archived_unreadable: u64,
    /// Given back when their member's share session ended.
    pub session_released: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartition {
    start: i64,
    end: i64,
    spans: BTreeMap<i64, Span>,
    limits: ShareLimits,
    counts: ShareCounts,
}

impl SharePartition {
    /// A share partition starting at `start` (from `share.auto.offset.reset`, or what
    /// was stored), nothing in flight.
    pub fn new(start: i64, limits: ShareLimits) -> SharePartition {
        SharePartition {
            start,
            end: start,
            spans: BTreeMap::new(),
            limits,
            counts: ShareCounts::default(),
        }
    }

    /// A share partition as stored: its start and the batches in flight then (acquired
    /// records are stored as what they were before, so they are delivered again).
    /// Offsets between `start` and the last batch that no batch covers are AVAILABLE.
    pub fn restore(start: i64, batches: &[StateBatch], limits: ShareLimits) -> SharePartition {
        let mut p = SharePartition::new(start, limits);
        let mut next = start;
        let mut sorted: Vec<&StateBatch> = batches.iter().filter(|b| b.last >= start).collect();
        sorted.sort_by_key(|b| b.first);
        for b in sorted {
            let first = b.first.max(next);
            if first > b.last {
                continue;
            }
            if first > next {
                p.spans.insert(next, Span::available(first - 1, 0));
            }
            let state = match b.state {
                RecordState::Acquired => RecordState::Available,
                s => s,
            };
            p.spans.insert(
                first,
                Span {
                    last: b.last,
                    state,
                    deliveries: b.deliveries.min(limits.delivery_limit),
                    owner: None,
                    lock_deadline_ms: None,
                },
            );
            next = b.last + 1;
        }
        p.end = next;
        p.advance();
        p.check();
        p
    }

    /// The share-partition start offset (SPSO).
    pub fn start(&self) -> i64 {
        self.start
    }

    /// The next offset never fetched (SPEO + 1).
    pub fn end(&self) -> i64 {
        self.end
    }

    pub fn in_flight(&self) -> i64 {
        self.end - self.start
    }

    /// The counts since they were last taken, which start again from zero.
    pub fn take_counts(&mut self) -> ShareCounts {
        std::mem::take(&mut self.counts)
    }

    /// Records AVAILABLE to acquire again (released, or their lock ran out).
    pub fn available(&self) -> i64 {
        self.spans
            .iter()
            .filter(|(_, s)| s.state == RecordState::Available)
            .map(|(first, s)| s.last - first + 1)
            .sum()
    }

    /// The state and delivery count of `offset`: below the start, done (reported as
    /// ACKNOWLEDGED); at or past the end, never fetched (`None`).
    pub fn record(&self, offset: i64) -> Option<(RecordState, u16, Option<&str>)> {
        if offset < self.start {
            return Some((RecordState::Acknowledged, 0, None));
        }
        let (_, span) = self.spans.range(..=offset).next_back()?;
        (offset <= span.last).then_some((span.state, span.deliveries, span.owner.as_deref()))
    }

    /// Acquires up to `max_records` records for `member`, each locked until
    /// `now_ms + lock_ms`: first those available again (released, timed out), from the
    /// lowest offset, then new ones from the end up to `log_end` (the high watermark, or
    /// the last stable offset for read_committed), within the in-flight limit.
    pub fn acquire(
        &mut self,
        member: &str,
        log_end: i64,
        max_records: usize,
        now_ms: i64,
        lock_ms: i64,
    ) -> Vec<Acquired> {
        self.acquire_within(
            member,
            log_end,
            max_records,
            now_ms,
            lock_ms,
            &FetchedSpan::ALL,
        )
    }

    /// What [`Self::acquire`] could hand out, taken before a share fetch reads the log.
    pub fn acquirable(&self) -> Acquirable {
        Acquirable {
            again: self
                .spans
                .iter()
                .filter(|(_, s)| s.state == RecordState::Available)
                .map(|(first, s)| (*first, s.last))
                .collect(),
            end: self.end,
            room: (self.limits.max_in_flight - self.in_flight()).max(0),
        }
    }

    /// [`Self::acquire`] within what a share fetch read of the log (`span`): nothing at or
    /// past `span.up_to`, and with `span.batch_ends` (Kafka's batch_optimized mode) new
    /// records up to the end of the log batch holding the last one `max_records` allows,
    /// so that no batch is handed out in part. `max_records` is exact otherwise
    /// (record_limit mode).
    pub fn acquire_within(
        &mut self,
        member: &str,
        log_end: i64,
        max_records: usize,
        now_ms: i64,
        lock_ms: i64,
        span: &FetchedSpan,
    ) -> Vec<Acquired> {
        let log_end = log_end.min(span.up_to);
        let mut budget = i64::try_from(max_records).unwrap_or(i64::MAX);
        let mut out: Vec<Acquired> = Vec::new();
        let deadline = now_ms + lock_ms;
        // Records available again, in offset order.
        let again: Vec<(i64, i64)> = self
            .spans
            .iter()
            .filter(|(_, s)| s.state == RecordState::Available)
            .map(|(first, s)| (*first, s.last))
            .collect();
        for (first, last) in again {
            if budget == 0 || first >= log_end {
                break;
            }
            let last = last.min(first + budget - 1).min(log_end - 1);
            self.split_at(first);
            self.split_at(last + 1);
            let span = self.spans.get_mut(&first).expect("split above");
            span.state = RecordState::Acquired;
            span.deliveries += 1;
            span.owner = Some(member.to_string());
            span.lock_deadline_ms = Some(deadline);
            push_acquired(&mut out, first, last, span.deliveries);
            budget -= last - first + 1;
            self.counts.acquired += records(first, last);
        }
        // New records.
        let room = self.limits.max_in_flight - self.in_flight();
        let n = budget.min(room).min(log_end - self.end);
        if n > 0 {
            let first = self.end;
            // batch_optimized: the rest of the log batch of the last record allowed.
            let last = match &span.batch_ends {
                Some(ends) => {
                    let want = first + n - 1;
                    ends.iter()
                        .find(|e| **e >= want)
                        .copied()
                        .unwrap_or(want)
                        .min(log_end - 1)
                }
                None => first + n - 1,
            };
            self.spans.insert(
                first,
                Span {
                    last,
                    state: RecordState::Acquired,
                    deliveries: 1,
                    owner: Some(member.to_string()),
                    lock_deadline_ms: Some(deadline),
                },
            );
            self.end = last + 1;
            push_acquired(&mut out, first, last, 1);
            self.counts.acquired += records(first, last);
        }
        self.merge_all();
        self.check();
        out
    }

    /// Archives what [`Self::acquire`] just gave (`acquired`) of `unreadable` (inclusive
    /// ranges in order: the records of aborted transactions, for a read_committed
    /// group): those are never delivered. Returns the records to deliver and whether any
    /// was archived, a change to store.
    pub fn archive_unreadable(
        &mut self,
        acquired: Vec<Acquired>,
        unreadable: &[(i64, i64)],
    ) -> (Vec<Acquired>, bool) {
        debug_assert!(unreadable.windows(2).all(|w| w[0].1 < w[1].0), "in order");
        if unreadable.is_empty() {
            return (acquired, false);
        }
        let mut out = Vec::with_capacity(acquired.len());
        let mut archived = false;
        for a in acquired {
            let mut first = a.first;
            for &(u_first, u_last) in unreadable {
                if u_last < first {
                    continue;
                }
                if u_first > a.last {
                    break;
                }
                if u_first > first {
                    push_acquired(&mut out, first, u_first - 1, a.deliveries);
                }
                let last = u_last.min(a.last);
                self.settle(u_first.max(first), last, AckType::Gap, 0);
                self.counts.archived_unreadable += records(u_first.max(first), last);
                archived = true;
                first = last + 1;
                if first > a.last {
                    break;
                }
            }
            if first <= a.last {
                push_acquired(&mut out, first, a.last, a.deliveries);
            }
        }
        if archived {
            self.merge_all();
            self.advance();
            self.check();
        }
        (out, archived)
    }

    /// Applies one request's acknowledgements from `member`, all or none. Offsets below
    /// the start are done already and skipped, as Kafka skips them.
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        now_ms: i64,
        lock_ms: i64,
    ) -> Result<(), AckError> {
        // Checked whole first: nothing changes unless everything may.
        for b in batches {
            if b.first > b.last {
                return Err(AckError::InvalidRequest(format!(
                    "acknowledgement batch {}..{} is empty",
                    b.first, b.last
                )));
            }
            let n = b.last - b.first + 1;
            if b.types.len() != 1 && i64::try_from(b.types.len()).ok() != Some(n) {
                return Err(AckError::InvalidRequest(format!(
                    "acknowledgement batch {}..{} has {} types",
                    b.first,
                    b.last,
                    b.types.len()
                )));
            }
            if b.last >= self.end {
                return Err(AckError::InvalidRequest(format!(
                    "offset {} was never fetched (the share partition ends at {})",
                    b.last, self.end
                )));
            }
            let mut offset = b.first.max(self.start);
            while offset <= b.last {
                let (_, span) = self
                    .spans
                    .range(..=offset)
                    .next_back()
                    .expect("spans cover [start, end)");
                if span.state != RecordState::Acquired || span.owner.as_deref() != Some(member) {
                    return Err(AckError::InvalidRecordState(offset));
                }
                offset = span.last + 1;
            }
        }
        for b in batches {
            let first = b.first.max(self.start);
            if first > b.last {
                continue;
            }
            if b.types.len() == 1 {
                self.settle(first, b.last, b.types[0], now_ms + lock_ms);
                self.count_ack(b.types[0], records(first, b.last));
            } else {
                for offset in first..=b.last {
                    let t = b.types[usize::try_from(offset - b.first).expect("in range")];
                    self.settle(offset, offset, t, now_ms + lock_ms);
                    self.count_ack(t, 1);
                }
            }
        }
        self.merge_all();
        self.advance();
        self.check();
        Ok(())
    }

    /// Releases the locks that ran out by `now_ms`: the records are AVAILABLE again,
    /// or ARCHIVED at the delivery limit. Returns whether anything changed.
    pub fn expire(&mut self, now_ms: i64) -> bool {
        let due: Vec<(i64, i64)> = self
            .spans
            .iter()
            .filter(|(_, s)| s.lock_deadline_ms.is_some_and(|d| d <= now_ms))
            .map(|(first, s)| (*first, s.last))
            .collect();
        for (first, last) in &due {
            self.settle(*first, *last, AckType::Release, 0);
            self.counts.lock_expired += records(*first, *last);
        }
        if due.is_empty() {
            return false;
        }
        self.merge_all();
        self.advance();
        self.check();
        true
    }

    /// A member's share session ended (it left, or its connection closed): what it
    /// holds is AVAILABLE again and this delivery does not count, as Kafka assumes such
    /// records were not processed.
    pub fn release_member(&mut self, member: &str) -> bool {
        let held: Vec<i64> = self
            .spans
            .iter()
            .filter(|(_, s)| s.owner.as_deref() == Some(member))
            .map(|(first, _)| *first)
            .collect();
        for first in &held {
            let span = self.spans.get_mut(first).expect("listed above");
            self.counts.session_released += records(*first, span.last);
            span.state = RecordState::Available;
            span.deliveries = span.deliveries.saturating_sub(1);
            span.owner = None;
            span.lock_deadline_ms = None;
        }
        if held.is_empty() {
            return false;
        }
        self.merge_all();
        self.check();
        true
    }

    /// The log no longer has the records below `log_start` (retention, DeleteRecords):
    /// they are archived, acquired ones too, and the start moves there. An
    /// acknowledgement of one of them is then skipped, as for any record below the
    /// start (Kafka's rule).
    pub fn move_log_start(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.split_at(log_start);
        let below: Vec<i64> = self
            .spans
            .range(..log_start)
            .map(|(first, _)| *first)
            .collect();
        for first in below {
            self.spans.remove(&first);
        }
        self.start = log_start;
        self.end = self.end.max(log_start);
        self.advance();
        self.check();
    }

    /// The in-flight records as the share coordinator stores them, in offset order.
    pub fn state_batches(&self) -> Vec<StateBatch> {
        self.spans
            .iter()
            .map(|(first, s)| StateBatch {
                first: *first,
                last: s.last,
                state: s.state,
                deliveries: s.deliveries,
            })
            .collect()
    }

    /// The earliest lock deadline, for the caller's timer.
    pub fn next_deadline(&self) -> Option<i64> {
        self.spans.values().filter_map(|s| s.lock_deadline_ms).min()
    }

    /// One acknowledgement (or a lock's end, as a release) applied to `first..=last`,
    /// which one member holds.
    fn settle(&mut self, first: i64, last: i64, t: AckType, renewed_deadline: i64) {
        self.split_at(first);
        self.split_at(last + 1);
        let limit = self.limits.delivery_limit;
        let mut offset = first;
        while offset <= last {
            let span = self.spans.get_mut(&offset).expect("split at the bounds");
            debug_assert_eq!(span.state, RecordState::Acquired);
            let next = span.last + 1;
            match t {
                AckType::Renew => span.lock_deadline_ms = Some(renewed_deadline),
                _ => {
                    span.state = match t {
                        AckType::Accept => RecordState::Acknowledged,
                        AckType::Gap | AckType::Reject => RecordState::Archived,
                        AckType::Release if span.deliveries >= limit => {
                            self.counts.archived_at_limit += records(offset, span.last);
                            RecordState::Archived
                        }
                        _ => RecordState::Available,
                    };
                    span.owner = None;
                    span.lock_deadline_ms = None;
                }
            }
            offset = next;
        }
    }

    fn count_ack(&mut self, t: AckType, n: u64) {
        let c = &mut self.counts;
        match t {
            AckType::Accept => c.accepted += n,
            AckType::Release => c.released += n,
            AckType::Reject => c.rejected += n,
            AckType::Renew => c.renewed += n,
            AckType::Gap => c.gaps += n,
        }
    }

    /// Splits the span holding `offset` so that one starts there.
    fn split_at(&mut self, offset: i64) {
        if self.spans.contains_key(&offset) {
            return;
        }
        let Some((&first, span)) = self.spans.range_mut(..offset).next_back() else {
            return;
        };
        if span.last < offset {
            return;
        }
        debug_assert!(first < offset);
        let tail = span.clone();
        span.last = offset - 1;
        self.spans.insert(offset, tail);
    }

    /// Merges neighbours that are alike (state, count, owner, deadline).
    fn merge_all(&mut self) {
        let mut merged: BTreeMap<i64, Span> = BTreeMap::new();
        for (first, span) in std::mem::take(&mut self.spans) {
            if let Some((_, prev)) = merged.iter_mut().next_back() {
                let alike = prev.last + 1 == first
                    && prev.state == span.state
                    && prev.deliveries == span.deliveries
                    && prev.owner == span.owner
                    && prev.lock_deadline_ms == span.lock_deadline_ms;
                if alike {
                    prev.last = span.last;
                    continue;
                }
            }
            merged.insert(first, span);
        }
        self.spans = merged;
    }

    /// Moves the start past the leading terminal records.
    fn advance(&mut self) {
        while let Some((&first, span)) = self.spans.iter().next() {
            if !span.state.is_terminal() {
                self.start = first;
                return;
            }
            self.start = span.last + 1;
            self.spans.remove(&first);
        }
        self.start = self.end;
    }

    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let mut next = self.start;
        for (first, s) in &self.spans {
            assert_eq!(*first, next, "spans cover [start, end) in order");
            assert!(s.last >= *first, "no span is empty");
            assert_eq!(
                s.state == RecordState::Acquired,
                s.owner.is_some() && s.lock_deadline_ms.is_some(),
                "a record is acquired exactly when it has an owner and a lock"
            );
            assert!(s.deliveries <= self.limits.delivery_limit);
            next = s.last + 1;
        }
        assert_eq!(next, self.end, "spans reach the end");
        if let Some(s) = self.spans.values().next() {
            assert!(!s.state.is_terminal(), "the start is past terminal records");
        }
    }
}

/// Records in `first..=last`.
fn records(first: i64, last: i64) -> u64 {
    u64::try_from(last - first + 1).unwrap_or(0)
}

/// Adds `first..=last` to `out`, joined to the previous range when contiguous with the
/// same delivery count.
/// What a share partition could hand out ([`SharePartition::acquirable`]): its records
/// available again, where new ones begin, and the room left in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acquirable {
    again: Vec<(i64, i64)>,
    end: i64,
    room: i64,
}

impl Acquirable {
    /// The first offset to hand out with `log_end` as the log's end: the lowest record
    /// available again, else the next new one; `None` when there is none. A share fetch
    /// reads the log from here (Kafka's next fetch offset).
    pub fn first(&self, log_end: i64) -> Option<i64> {
        let again = self.again.first().map(|(first, _)| *first);
        let new = (self.end < log_end && self.room > 0).then_some(self.end);
        again.or(new)
    }

    /// How many records could be handed out below `up_to`, at most `max_records` (a
    /// share fetch reads the log until it holds that many).
    pub fn below(&self, up_to: i64, log_end: i64, max_records: usize) -> usize {
        let max = i64::try_from(max_records).unwrap_or(i64::MAX);
        let again: i64 = self
            .again
            .iter()
            .filter(|(first, _)| *first < up_to)
            .map(|(first, last)| (*last).min(up_to - 1) - first + 1)
            .sum();
        let new = (up_to.min(log_end) - self.end).clamp(0, self.room);
        usize::try_from(again.saturating_add(new).min(max)).unwrap_or(0)
    }
}

/// The part of the log a share fetch read, which bounds what it acquires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedSpan {
    /// Nothing at or past this offset is acquired: the end of the last whole batch the
    /// fetch read within its bytes.
    pub up_to: i64,
    /// The last offsets of the log batches read, ascending (batch_optimized mode), or
    /// `None` to acquire exactly `max_records` (record_limit mode).
    pub batch_ends: Option<Vec<i64>>,
}

impl FetchedSpan {
    /// No bound: the whole log, records counted one by one.
    pub const ALL: FetchedSpan = FetchedSpan {
        up_to: i64::MAX,
        batch_ends: None,
    };
}

fn push_acquired(out: &mut Vec<Acquired>, first: i64, last: i64, deliveries: u16) {
    if let Some(prev) = out.last_mut() {
        if prev.last + 1 == first && prev.deliveries == deliveries {
            prev.last = last;
            return;
        }
    }
    out.push(Acquired {
        first,
        last,
        deliveries,
    });
}

#[cfg(test)]
mod tests;

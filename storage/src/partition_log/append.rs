//! Appending: validation of every batch of a request against the format and the topic's
//! rules, idempotent producers' sequence checks, offset assignment and queueing for the
//! flusher — synchronous, so offsets follow the order produces reach the shard — and the
//! waits of `acks` on the written or synced offset.
//!
//! Two origins, as Kafka's `AppendOrigin`: a client's produce ([`PartitionLog::append`])
//! gets every check; a batch the broker writes itself for a producer — a group
//! coordinator's transactional offset commit ([`PartitionLog::append_unsequenced`]) —
//! skips the client sequence checks (it has no client sequence; Kafka's coordinator
//! writes base sequence 0 every time) but keeps the epoch check, so a fenced producer's
//! commit is still refused, and is recorded like any producer batch: a transactional
//! one opens the producer's transaction in this partition, which its marker closes.
//!
//! Invariant: a request is queued whole or not at all; a refused batch changes no state.

use super::{AckLevel, AppendTicket, LogState, PartitionLog, Pending};
use crate::batch::{self, batches, BatchHeader};
use crate::batch_filter;
use crate::config::{CompressionType, Durability, LogConfig, TimestampType};
use crate::error::{AppendError, RecordRule, RejectedRecords};
use crate::producer_state::{ProducerBatch, SequenceCheck};
use bytes::BytesMut;
use std::cell::RefMut;
use std::sync::Arc;
use std::time::Instant;

/// Who asks for an append: it decides the producer checks a batch gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A producer's request: sequences checked, retries answered as duplicates.
    Client,
    /// The broker itself, for a producer (see the module doc): the epoch checked only.
    Coordinator,
}

impl PartitionLog {
    /// Validates and queues `records` (one or more RecordBatch v2), assigning offsets.
    /// Nothing of the request is queued unless every batch is valid.
    pub fn append(&self, records: &[u8], leader_epoch: i32) -> Result<AppendTicket, AppendError> {
        self.append_from(records, leader_epoch, Origin::Client)
    }

    /// [`Self::append`] of a batch the broker writes itself for a producer (a group
    /// coordinator's transactional offset commit): validated alike, but the producer's
    /// sequences are not checked and it is never taken for a retry; a producer epoch
    /// older than the producer's current one is refused
    /// ([`crate::producer_state::SequenceError::StaleEpoch`], INVALID_PRODUCER_EPOCH),
    /// and a transactional batch opens the producer's transaction here.
    pub fn append_unsequenced(
        &self,
        records: &[u8],
        leader_epoch: i32,
    ) -> Result<AppendTicket, AppendError> {
        self.append_from(records, leader_epoch, Origin::Coordinator)
    }

    fn append_from(
        &self,
        records: &[u8],
        leader_epoch: i32,
        origin: Origin,
    ) -> Result<AppendTicket, AppendError> {
        let now_ms = self.context.now_ms();
        let config = self.config.borrow();
        let mut offsets = 0i64;
        let mut count = 0usize;
        let mut reshape = false;
        let mut producer = None;
        for item in batches(records) {
            let (_, range) = item?;
            let bytes = records.get(range).ok_or(AppendError::Empty)?;
            let header = batch::validate(bytes, config.max_batch_bytes)?;
            offsets += i64::from(header.last_offset_delta) + 1;
            count += 1;
            reshape |= check_topic_rules(&config, &header, bytes, now_ms)?;
            producer = producer.or(ProducerBatch::from_header(&header));
        }
        if count == 0 {
            return Err(AppendError::Empty);
        }
        // Sequences are checked per batch and the produce path sends one batch per
        // partition (as Kafka requires of v3+); a producer's batch among others would have
        // no single answer for a retry.
        if producer.is_some() && count > 1 {
            return Err(AppendError::InvalidBatch(batch::BatchError::InvalidRecord(
                "an idempotent producer's batch must be the only one in its request",
            )));
        }
        if let (Some(p), Origin::Coordinator) = (&producer, origin) {
            // Checked before any state changes, like a client's batch below.
            self.producers.borrow().check_unsequenced(p)?;
        }
        if let (Some(p), Origin::Client) = (&producer, origin) {
            // Kafka's LogValidator: a producer's batch has a sequence.
            if p.first_seq < 0 {
                return Err(AppendError::InvalidBatch(batch::BatchError::InvalidRecord(
                    "an idempotent producer's batch has a negative base sequence",
                )));
            }
            // A retry of a batch already given offsets is answered with them; nothing is
            // written again. Checked before any state changes, so a refused batch leaves
            // none behind.
            if let SequenceCheck::Duplicate(original) = self.producers.borrow().check(p)? {
                self.context.observer.duplicate_batch();
                return Ok(AppendTicket {
                    base_offset: original.first_offset,
                    next_offset: original.next_offset,
                });
            }
        }
        // The topic wants another codec, or the broker's clock: rebuild the request's
        // batches (a cold path; topics with default settings never take it).
        let reshaped;
        let records = if reshape || config.timestamp_type == TimestampType::LogAppendTime {
            reshaped = reshape_batches(&config, records, now_ms)?;
            &reshaped[..]
        } else {
            records
        };
        let flush_messages = config.flush_messages;
        drop(config);
        let mut st = self.state.borrow_mut();
        if let Some(f) = st.failure.as_ref().or(st.out_of_space.as_ref()) {
            return Err(AppendError::Storage(f.clone()));
        }
        if st.closing {
            return Err(AppendError::Closed);
        }
        // The one copy of the records: the request buffer is shared and immutable.
        let mut copy = BytesMut::from(records);
        let base_offset = st.next_offset;
        let mut next = base_offset;
        let mut pos = 0usize;
        while pos < copy.len() {
            let Some(rest) = copy.get_mut(pos..) else {
                break;
            };
            let Ok(header) = BatchHeader::parse(rest) else {
                break;
            };
            batch::set_base_offset(rest, next);
            batch::set_partition_leader_epoch(rest, leader_epoch);
            next += i64::from(header.last_offset_delta) + 1;
            pos += header.total_len();
        }
        assert_eq!(
            next - base_offset,
            offsets,
            "offsets assigned match the validated batches"
        );
        st.next_offset = next;
        if let Some(p) = &producer {
            let written = st.written_offset;
            self.producers
                .borrow_mut()
                .record(p, base_offset, next, now_ms, written);
        }
        self.enqueue(
            st,
            Pending {
                base_offset,
                next_offset: next,
                bytes: copy.freeze(),
            },
            flush_messages,
        );
        self.context
            .observer
            .appended(u64::try_from(next - base_offset).unwrap_or(0));
        Ok(AppendTicket {
            base_offset,
            next_offset: next,
        })
    }

    /// Queues `pending` for the flusher — its offsets are taken: `next_offset` already
    /// ends where it ends — and wakes it. Shared by `append` and `append_replicated`. The
    /// state borrow ends here, before anyone is woken.
    pub(super) fn enqueue(
        &self,
        mut st: RefMut<'_, LogState>,
        pending: Pending,
        flush_messages: i64,
    ) {
        let next = pending.next_offset;
        debug_assert_eq!(next, st.next_offset, "queued entries end at the log end");
        debug_assert!(pending.base_offset < next, "a queued entry holds offsets");
        st.pending.push_back(pending);
        // `flush.messages` holds whatever the acks (acks=0 never waits): an append that
        // leaves that many offsets unsynced asks for a sync now, as Kafka's append path
        // flushes.
        let flush_due = next.saturating_sub(st.synced_offset) >= flush_messages;
        if flush_due {
            st.sync_wanted = st.sync_wanted.max(next);
        }
        drop(st);
        self.work.notify(1);
        if flush_due {
            self.sync_work.notify(1);
        }
    }

    /// Whether the produce that got `ticket` is acknowledged only once synced: by the
    /// durability mode, or because it leaves `flush.messages` or more offsets unsynced
    /// (offsets are dense, so offsets count messages).
    fn needs_sync(&self, level: AckLevel, ticket: &AppendTicket) -> bool {
        let config = self.config.borrow();
        let by_mode = matches!(
            (config.durability, level),
            (Durability::Always, _) | (Durability::AckAll, AckLevel::All)
        );
        by_mode
            || ticket
                .next_offset
                .saturating_sub(self.state.borrow().synced_offset)
                >= config.flush_messages
    }

    /// Waits until the appended batches are acknowledged at `level`.
    pub async fn wait(&self, ticket: AppendTicket, level: AckLevel) -> Result<(), AppendError> {
        let sync = self.needs_sync(level, &ticket);
        if sync {
            let mut st = self.state.borrow_mut();
            st.sync_wanted = st.sync_wanted.max(ticket.next_offset);
            drop(st);
            self.sync_work.notify(1);
        }
        loop {
            let listener = self.progress.listen();
            {
                let st = self.state.borrow();
                let done = if sync {
                    st.synced_offset >= ticket.next_offset
                } else {
                    st.written_offset >= ticket.next_offset
                };
                if done {
                    return Ok(());
                }
                if let Some(f) = &st.failure {
                    return Err(AppendError::Storage(f.clone()));
                }
                if st.closed {
                    return Err(AppendError::Closed);
                }
            }
            listener.await;
        }
    }

    /// Waits until the written offset — with `synced`, the synced offset — passes
    /// `offset`, the log closes or fails, or `deadline`. With `synced`, written data a
    /// waiter needs is synced at once (a reader never waits for the sync timer).
    pub async fn wait_beyond(&self, offset: i64, deadline: Instant, synced: bool) {
        loop {
            let listener = self.progress.listen();
            {
                let mut st = self.state.borrow_mut();
                let end = if synced {
                    st.synced_offset
                } else {
                    st.written_offset
                };
                if end > offset || st.closed || st.failure.is_some() {
                    return;
                }
                if synced && st.written_offset > offset && st.sync_wanted < st.written_offset {
                    // Written but not yet synced: a reader is waiting for it.
                    st.sync_wanted = st.written_offset;
                    drop(st);
                    self.sync_work.notify(1);
                }
            }
            let now = self.context.runtime.now();
            if now >= deadline {
                return;
            }
            let timeout = self.context.runtime.sleep(deadline - now);
            futures_lite::future::or(listener, timeout).await;
        }
    }

    /// Forgets idle producers (`producer.id.expiration.ms`) and those whose batches were all
    /// deleted; returns how many.
    pub fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> usize {
        let start = self.log_start_offset();
        self.producers
            .borrow_mut()
            .expire(now_ms, expiration_ms, start)
    }

    /// The idempotent producers this partition remembers (DescribeProducers).
    pub fn active_producers(&self) -> Vec<crate::producer_state::ActiveProducer> {
        self.producers.borrow().active()
    }

    /// Producers this partition remembers.
    pub fn producer_count(&self) -> usize {
        self.producers.borrow().len()
    }
}

/// The codec `compression.type` asks for, if it is not "whatever the producer sent".
fn target_codec(config: &LogConfig) -> Option<batch::Compression> {
    match config.compression {
        CompressionType::Producer => None,
        CompressionType::Uncompressed => Some(batch::Compression::None),
        CompressionType::Gzip => Some(batch::Compression::Gzip),
        CompressionType::Snappy => Some(batch::Compression::Snappy),
        CompressionType::Lz4 => Some(batch::Compression::Lz4),
        CompressionType::Zstd => Some(batch::Compression::Zstd),
    }
}

/// Checks one validated batch against the topic's rules (Kafka's own checks): a
/// compacted topic takes only keyed records; create-time timestamps must lie within
/// `message.timestamp.difference.max.ms` of the broker clock (every record's, as Kafka's
/// `LogValidator`; the walk happens only when that rule is configured). A batch that
/// breaks a rule is refused whole, naming its first [`RECORD_ERRORS_MAX`] offending
/// records (Kafka's `record_errors`). Returns whether the batch must be re-encoded for
/// `compression.type`.
fn check_topic_rules(
    config: &LogConfig,
    header: &BatchHeader,
    bytes: &[u8],
    now: i64,
) -> Result<bool, AppendError> {
    if config.timestamp_type == TimestampType::CreateTime
        && config.timestamp_difference_max_ms < i64::MAX
    {
        let max_diff = config.timestamp_difference_max_ms.unsigned_abs();
        let mut bad = RecordErrors::default();
        batch_filter::for_each_record(bytes, |r| {
            if r.timestamp_ms.abs_diff(now) > max_diff {
                bad.push(|| {
                    format!(
                        "Timestamp {} of message with offset {} is out of range. The \
                         timestamp should be within [{}, {}]",
                        r.timestamp_ms,
                        r.offset,
                        now.saturating_sub(config.timestamp_difference_max_ms),
                        now.saturating_add(config.timestamp_difference_max_ms)
                    )
                    .into()
                });
            }
            bad.next();
        })?;
        bad.reject(RecordRule::TimestampOutOfRange)?;
    }
    if config.cleanup.compact && !header.is_control() {
        let message: Arc<str> = "Compacted topic cannot accept message without key".into();
        let mut bad = RecordErrors::default();
        batch_filter::for_each_record(bytes, |r| {
            if r.key.is_none() {
                bad.push(|| message.clone());
            }
            bad.next();
        })?;
        bad.reject(RecordRule::KeyRequired)?;
    }
    Ok(target_codec(config).is_some_and(|c| header.compression() != Ok(c)))
}

/// Most record errors one batch's refusal lists: a small compressed batch can hold
/// millions of records, and listing each would cost memory far beyond the request (the
/// client fails the whole batch either way; the count is in the message).
pub const RECORD_ERRORS_MAX: usize = 1000;

/// The offending records of one batch as they are found, in record order.
#[derive(Default)]
struct RecordErrors {
    index: i32,
    total: usize,
    listed: Vec<(i32, Arc<str>)>,
}

impl RecordErrors {
    /// The record at the current index breaks the rule; `message` is built only while
    /// there is room to list it.
    fn push(&mut self, message: impl FnOnce() -> Arc<str>) {
        self.total += 1;
        if self.listed.len() < RECORD_ERRORS_MAX {
            self.listed.push((self.index, message()));
        }
    }

    /// Moves to the next record.
    fn next(&mut self) {
        self.index = self.index.saturating_add(1);
    }

    /// `Err` naming the listed records when there are any (the summary is Kafka's
    /// wording, with the true total).
    fn reject(self, rule: RecordRule) -> Result<(), AppendError> {
        if self.total == 0 {
            return Ok(());
        }
        debug_assert!(!self.listed.is_empty() && self.listed.len() <= RECORD_ERRORS_MAX);
        let shown: Vec<String> = self
            .listed
            .iter()
            .take(3)
            .map(|(i, m)| format!("(batchIndex={i}, message={m})"))
            .collect();
        let message = format!(
            "One or more records have been rejected due to {} record errors in total, and \
             only showing the first three errors at most: [{}]",
            self.total,
            shown.join(", ")
        );
        Err(AppendError::RecordsRejected(RejectedRecords {
            rule,
            message: message.into(),
            records: self.listed.into(),
        }))
    }
}

/// The request's batches re-encoded per the topic: in the `compression.type` codec,
/// stamped with log-append time.
fn reshape_batches(config: &LogConfig, records: &[u8], now: i64) -> Result<Vec<u8>, AppendError> {
    let mut out = Vec::with_capacity(records.len());
    for item in batches(records) {
        let (header, range) = item?;
        let bytes = records.get(range).ok_or(AppendError::Empty)?;
        let start = out.len();
        match target_codec(config) {
            Some(c) if header.compression() != Ok(c) => {
                let recoded = batch_filter::recompress(bytes, c)?;
                // Kafka checks the batch as stored: a batch that only fits compressed
                // is too large for a topic that stores it uncompressed.
                if recoded.len() > config.max_batch_bytes {
                    return Err(AppendError::InvalidBatch(batch::BatchError::TooLarge {
                        size: recoded.len(),
                        max: config.max_batch_bytes,
                    }));
                }
                out.extend_from_slice(&recoded)
            }
            _ => out.extend_from_slice(bytes),
        }
        if config.timestamp_type == TimestampType::LogAppendTime {
            if let Some(b) = out.get_mut(start..) {
                batch_filter::stamp_log_append_time(b, now);
            }
        }
    }
    Ok(out)
}

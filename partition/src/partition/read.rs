//! Reads and waits: whole batches for a consumer (below the high watermark, or the last
//! stable offset) or a follower (up to the written end), the divergence check a
//! follower's `last_fetched_epoch` asks for, waiting until there is something to read,
//! and ListOffsets' lookups.
//!
//! Invariants: a consumer never sees records at or past its isolation level's bound,
//! nor a ListOffsets offset past it; a follower never sees records at or past the
//! written end; a read whose fetcher diverged from this log returns no records, only
//! where the divergence is; the high watermark answered with a read is taken after the
//! read, so for a consumer it covers every record returned.

use super::Partition;
use bytes::Bytes;
use corelog_storage::error::ReadError;
use corelog_storage::txn_index::AbortedTxn;
use corelog_storage::Records;
use std::time::Instant;

/// ListOffsets' special timestamps (Kafka's `ListOffsetsRequest` constants).
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// The record with the largest timestamp (v7+, KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;
/// The first offset in local storage (v8+, KIP-1005).
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// The last offset in tiered storage (v9+, KIP-1005).
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// Which records a consumer may see (Fetch and ListOffsets `isolation_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Below the high watermark.
    #[default]
    ReadUncommitted,
    /// Below the last stable offset.
    ReadCommitted,
}

impl Isolation {
    /// Kafka's wire value: 1 is `read_committed`, anything else `read_uncommitted`.
    pub fn from_wire(value: i8) -> Isolation {
        if value == 1 {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        }
    }
}

/// Who reads, which bounds what it may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A consumer: below the high watermark, or the last stable offset.
    Consumer(Isolation),
    /// A follower replica of this leader: up to the written end.
    Replica,
}

/// What a consumer's read returns.
#[derive(Debug, Clone)]
pub struct PartitionRead<R = Bytes> {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Whole batches, starting with the one containing the requested offset, all below
    /// the isolation level's bound; empty when the log diverged. `Bytes`, or for a read
    /// to send (`read_for_send`) `Records`, which may be a range of a segment file.
    pub records: R,
    /// Where the fetcher's log diverges from this one (Fetch v12+ `diverging_epoch`):
    /// the epoch and end offset it should truncate to before fetching again.
    pub diverging_epoch: Option<(i32, i64)>,
    /// For a `read_committed` consumer, the transactions aborted among the records read
    /// (Fetch's `aborted_transactions`: producer id and first offset, by marker order);
    /// `None` for any other reader.
    pub aborted: Option<Vec<AbortedTxn>>,
}

/// An offset a ListOffsets lookup found: the offset, the timestamp it was found by (-1
/// for the special lookups) and the leader epoch of the record there (-1 if unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundOffset {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

impl FoundOffset {
    /// Kafka's answer when no record matches.
    pub const NONE: FoundOffset = FoundOffset {
        offset: -1,
        timestamp: -1,
        leader_epoch: -1,
    };
}

impl Partition {
    fn bound(&self, isolation: Isolation) -> i64 {
        match isolation {
            Isolation::ReadUncommitted => self.high_watermark(),
            Isolation::ReadCommitted => self.last_stable_offset(),
        }
    }

    /// A consumer's read: whole batches from `offset`, below the isolation level's bound.
    ///
    /// With `last_fetched_epoch` (the epoch of the last batch the fetcher holds; -1: not
    /// given) the fetcher's log is checked first, as Kafka's `Partition.readRecords`: if
    /// that epoch ended here before `offset`, or this log never had it, nothing is read
    /// and the divergence is answered instead; an epoch whose end is unknown is out of
    /// range.
    pub async fn read(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<PartitionRead, ReadError> {
        self.read_as(
            offset,
            last_fetched_epoch,
            max_bytes,
            Reader::Consumer(isolation),
        )
        .await
    }

    /// [`Self::read`] for `reader`: `Reader::Replica` reads to the written end (what a
    /// new leader replays of its own log).
    pub async fn read_as(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        reader: Reader,
    ) -> Result<PartitionRead, ReadError> {
        let read = self
            .read_records(offset, last_fetched_epoch, max_bytes, reader, false)
            .await?;
        let Records::Memory(records) = read.records else {
            unreachable!("only a read for sending answers with a file range");
        };
        Ok(PartitionRead {
            high_watermark: read.high_watermark,
            last_stable_offset: read.last_stable_offset,
            log_start_offset: read.log_start_offset,
            records,
            diverging_epoch: read.diverging_epoch,
            aborted: read.aborted,
        })
    }

    /// [`Self::read`] for records that go to a socket: data read from a segment file
    /// may come as a range of it (`corelog_storage::FileRange`), sent without a copy.
    /// A follower's read (`Reader::Replica`) goes up to the written end.
    pub async fn read_for_send(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        reader: Reader,
    ) -> Result<PartitionRead<Records>, ReadError> {
        self.read_records(offset, last_fetched_epoch, max_bytes, reader, true)
            .await
    }

    async fn read_records(
        &self,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        reader: Reader,
        for_send: bool,
    ) -> Result<PartitionRead<Records>, ReadError> {
        if last_fetched_epoch >= 0 {
            let (epoch, end) = self.end_offset_for_epoch(last_fetched_epoch);
            if epoch == crate::UNDEFINED_EPOCH || end == crate::UNDEFINED_OFFSET {
                return Err(ReadError::OffsetOutOfRange {
                    offset,
                    log_start_offset: self.log_start_offset(),
                    end_offset: self.log.written_offset(),
                });
            }
            if epoch < last_fetched_epoch || end < offset {
                return Ok(PartitionRead {
                    high_watermark: self.high_watermark(),
                    last_stable_offset: self.last_stable_offset(),
                    log_start_offset: self.log_start_offset(),
                    records: Records::default(),
                    diverging_epoch: Some((epoch, end)),
                    aborted: None,
                });
            }
        }
        // Taken before the read: a read_committed bound only grows, and every transaction
        // aborted below it has its entry already.
        let bound = match reader {
            Reader::Consumer(isolation) => self.bound(isolation),
            Reader::Replica => self.log.written_offset(),
        };
        let (end_offset, log_start_offset, records) = if for_send {
            self.log.read_for_send(offset, max_bytes, bound).await?
        } else {
            let read = self.log.read(offset, max_bytes, bound).await?;
            (
                read.end_offset,
                read.log_start_offset,
                Records::Memory(read.records),
            )
        };
        // Read after the log: it only grows, and for a consumer covers everything returned.
        let high_watermark = match reader {
            Reader::Consumer(_) => self.high_watermark().max(end_offset),
            Reader::Replica => self.high_watermark(),
        };
        let (last_stable_offset, aborted) = match reader {
            Reader::Consumer(Isolation::ReadCommitted) => {
                let lso = self.last_stable_offset().max(end_offset);
                let aborted = if records.is_empty() {
                    Vec::new()
                } else {
                    self.log.aborted_transactions(offset, end_offset)
                };
                (lso, Some(aborted))
            }
            _ => (self.last_stable_offset(), None),
        };
        Ok(PartitionRead {
            high_watermark,
            last_stable_offset,
            log_start_offset,
            records,
            diverging_epoch: None,
            aborted,
        })
    }

    /// Waits until a consumer at `offset` has something to read (the high watermark
    /// passes it), the log closes, or `deadline`.
    pub async fn wait_beyond(&self, offset: i64, deadline: Instant) {
        // This replica's own progress first; beyond it only followers move the mark.
        self.log
            .wait_beyond(offset, deadline, self.hw_is_synced())
            .await;
        loop {
            let listener = self.hw_moved.listen();
            if self.high_watermark() > offset || self.log.is_closing() {
                return;
            }
            let now = self.context.runtime.now();
            if now >= deadline {
                return;
            }
            let timeout = self.context.runtime.sleep(deadline - now);
            futures_lite::future::or(listener, timeout).await;
        }
    }

    /// Waits until a follower at `offset` has something to fetch (the written end passes
    /// it), the log closes, or `deadline`.
    pub async fn wait_beyond_log_end(&self, offset: i64, deadline: Instant) {
        self.log.wait_beyond(offset, deadline, false).await
    }

    /// ListOffsets: `timestamp` is a time in ms or one of the special `*_TIMESTAMP`
    /// values. Only offsets below the isolation level's bound are found.
    pub async fn find_offset(
        &self,
        timestamp: i64,
        isolation: Isolation,
    ) -> Result<FoundOffset, ReadError> {
        let bound = self.bound(isolation);
        let epoch_at = |offset: i64| self.epochs.borrow().epoch_for_offset(offset).unwrap_or(-1);
        let found = |(offset, ts): (i64, i64)| FoundOffset {
            offset,
            timestamp: ts,
            leader_epoch: epoch_at(offset),
        };
        // With no tiered storage the local log is the whole log: "earliest local" is the
        // log start and nothing is tiered.
        Ok(match timestamp {
            LATEST_TIMESTAMP => FoundOffset {
                offset: bound,
                timestamp: -1,
                leader_epoch: self.leader_epoch.get(),
            },
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => found((self.log_start_offset(), -1)),
            LATEST_TIERED_TIMESTAMP => FoundOffset::NONE,
            MAX_TIMESTAMP => self
                .log
                .offset_of_max_timestamp()
                .await?
                .filter(|(offset, _)| *offset < bound)
                .map(found)
                .unwrap_or(FoundOffset::NONE),
            ts => self
                .log
                .offset_for_timestamp(ts)
                .await?
                .filter(|(offset, _)| *offset < bound)
                .map(found)
                .unwrap_or(FoundOffset::NONE),
        })
    }
}

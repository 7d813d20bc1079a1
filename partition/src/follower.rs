//! A follower's decisions on its leader's answer for one partition (Kafka's
//! `AbstractFetcherThread` rules), and the round that takes up records: one place for
//! the broker's replica fetcher and the simulator, which differ only in how the fetch
//! travels.
//!
//! [`decide`] is pure: from the partition's state, the offset the fetch asked from and
//! the leader's answer, what to do — append what came and take up the leader's high
//! watermark and log start, cut the log where the two agree, or sit out a backoff.
//! [`take_up`] does the first: appends, waits until the batches are durable here (so the
//! offset the next fetch asks from is never ahead of what this replica keeps across a
//! power loss, and the leader may count it for the high watermark), then follows.
//!
//! Invariants: a cut never passes this log's end and never goes below its start; a
//! follower's high watermark is the leader's capped by its own durable end
//! (`Partition::follow_high_watermark`).

use crate::leader_epoch_cache::UNDEFINED_EPOCH;
use crate::partition::{Cut, Partition};
use corelog_storage::error::ReadError;
use corelog_storage::{AckLevel, AppendError};
use std::rc::Rc;

/// What the leader answered for one partition, as far as the follower's decision goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderAnswer<'a> {
    /// Records (none when it had nothing new), with its high watermark and log start.
    Records {
        records: Option<&'a [u8]>,
        high_watermark: i64,
        log_start_offset: i64,
    },
    /// This log diverged: the leader's `epoch` (the largest it holds at or below the
    /// fetch's last epoch) ended at `end_offset` there (Fetch's `DivergingEpoch`).
    Diverging { epoch: i32, end_offset: i64 },
    /// OFFSET_OUT_OF_RANGE, with the leader's log start and high watermark.
    OutOfRange {
        log_start_offset: i64,
        high_watermark: i64,
    },
    /// Any other error: retried after a backoff.
    Failed,
}

/// What a follower does with a [`LeaderAnswer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerStep<'a> {
    /// Append `records` (if any) and follow the leader's high watermark and log start
    /// ([`take_up`]).
    TakeUp {
        records: Option<&'a [u8]>,
        high_watermark: i64,
        log_start_offset: i64,
    },
    /// Cut the log ([`Partition::truncate_and_reopen`]) and fetch again from its new end.
    Cut(Cut),
    /// Fetch this partition again after the backoff.
    Backoff,
}

/// The follower's step for `answer` to a fetch from `fetch_offset`.
pub fn decide<'a>(
    partition: &Partition,
    fetch_offset: i64,
    answer: LeaderAnswer<'a>,
) -> FollowerStep<'a> {
    match answer {
        LeaderAnswer::Records {
            records,
            high_watermark,
            log_start_offset,
        } => FollowerStep::TakeUp {
            records: records.filter(|r| !r.is_empty()),
            high_watermark,
            log_start_offset,
        },
        LeaderAnswer::Diverging { epoch, end_offset } => {
            FollowerStep::Cut(Cut::Tail(truncation_offset(partition, epoch, end_offset)))
        }
        // Behind what the leader still holds (its retention moved on): start over from
        // its log start (Kafka's truncateFullyAndStartAt).
        LeaderAnswer::OutOfRange {
            log_start_offset, ..
        } if fetch_offset < log_start_offset => FollowerStep::Cut(Cut::Everything {
            new_start: log_start_offset,
        }),
        // Ahead of the leader with no epoch to tell where: what lies below its high
        // watermark is committed, so both logs hold it.
        LeaderAnswer::OutOfRange { high_watermark, .. } if fetch_offset > high_watermark => {
            FollowerStep::Cut(Cut::Tail(high_watermark.max(0)))
        }
        LeaderAnswer::OutOfRange { .. } | LeaderAnswer::Failed => FollowerStep::Backoff,
    }
}

/// Where a follower cuts its log when its leader answers that `leader_epoch` ended at
/// `leader_end` there (Kafka's `AbstractFetcherThread.getOffsetTruncationState`): the
/// end of that epoch here, or the leader's end of it, whichever is lower, never past this
/// log's end. When this log does not know that epoch, its own end for the largest epoch
/// below is taken, and the next round asks again from there.
pub fn truncation_offset(partition: &Partition, leader_epoch: i32, leader_end: i64) -> i64 {
    let log_end = partition.log_end_offset();
    let (epoch, end) = partition.end_offset_for_epoch(leader_epoch);
    let to = if epoch == UNDEFINED_EPOCH {
        leader_end
    } else if epoch != leader_epoch {
        end
    } else {
        end.min(leader_end)
    };
    to.min(log_end).max(partition.log_start_offset())
}

/// Why [`take_up`] did not finish.
#[derive(Debug, thiserror::Error)]
pub enum TakeUpError {
    #[error("replicated batches refused: {0}")]
    Refused(AppendError),
    #[error("replicated batches not acknowledged: {0}")]
    NotAcknowledged(AppendError),
    #[error("the leader's log start not taken up: {0}")]
    LogStart(ReadError),
}

/// A follower's round with its leader's records for one partition: appends `records`
/// as they are, waits until they are durable here, then follows the leader's high
/// watermark and log start. The append happens before the first await, so rounds of
/// several partitions run together append in the order they start.
pub async fn take_up(
    partition: &Rc<Partition>,
    records: Option<&[u8]>,
    high_watermark: i64,
    log_start_offset: i64,
) -> Result<(), TakeUpError> {
    let started = partition.log().now();
    let ticket = match records {
        Some(r) => Some(
            partition
                .append_as_follower(r)
                .map_err(TakeUpError::Refused)?,
        ),
        None => None,
    };
    if let Some(ticket) = ticket {
        partition
            .wait(ticket, AckLevel::All)
            .await
            .map_err(TakeUpError::NotAcknowledged)?;
        partition
            .log()
            .observe_since(corelog_storage::Stage::FollowerAppend, started);
    }
    partition.follow_high_watermark(high_watermark);
    partition
        .follow_log_start(log_start_offset)
        .await
        .map_err(TakeUpError::LogStart)
}

//! Produce on the owning shard: every partition's batches appended first (offsets in
//! arrival order), then all acknowledgements awaited together so one sync serves them;
//! and WriteTxnMarkers' markers, appended and awaited the same way.
//!
//! A transactional batch that would open its producer's transaction in a partition is
//! appended only once the coordinator confirmed the partition is in the transaction
//! (`txn_verify`); the other batches of the request are appended at once.
//!
//! Invariants: nothing is queued for a partition that is refused (unknown, not led here,
//! too few in-sync replicas, disk budget exhausted, not in the producer's transaction);
//! each partition times out on its own; answers are in input order. A marker
//! acknowledged in a `__consumer_offsets` partition is told to the group coordinator
//! (this same shard coordinates the partition's groups) before it is answered: the
//! transaction's pending offsets there are committed or dropped by the time the
//! transaction coordinator hears of it.

use super::txn_verify::must_verify;
use super::Shard;
use crate::group::OFFSETS_TOPIC;
use crate::mesh::{
    Acks, PartitionError, ProduceAck, ProduceInput, ProduceOutput, ProduceTxn, TopicPartition,
};
use crate::txn::rules::VerifyMode;
use corelog_partition::Partition;
use corelog_storage::txn_marker::TxnMarker;
use corelog_storage::{AckLevel, AppendTicket};
use std::time::{Duration, Instant};

impl Shard {
    pub(super) async fn produce(
        &self,
        acks: Acks,
        timeout_ms: u64,
        inputs: Vec<ProduceInput>,
        transaction: Option<ProduceTxn>,
    ) -> Vec<ProduceOutput> {
        // Append everything first (offsets assigned in arrival order), then wait for all
        // acknowledgements together so one sync can serve them.
        let mut tickets = Vec::with_capacity(inputs.len());
        let mut unverified = Vec::new();
        let refused = self.produce_refused();
        for input in &inputs {
            debug_assert_eq!(self.owner_of(&input.tp.topic, input.tp.partition), self.id);
            let r = match self
                .partition(&input.tp)
                .ok_or(PartitionError::UnknownTopicOrPartition)
            {
                Err(e) => Err(e),
                // Refused before anything is queued: no partial writes near a full disk.
                Ok(_) if refused.is_some() => Err(PartitionError::DiskFull(
                    refused
                        .clone()
                        .unwrap_or_else(|| "disk budget exhausted".into()),
                )),
                // The metadata may name this broker a moment before its shard took up the
                // leadership (or after it gave it up): only the partition's role counts.
                Ok(log) if !log.is_leader() => Err(PartitionError::NotLeaderOrFollower),
                Ok(log) if acks == Acks::All && log.isr_len() < log.min_insync_replicas() => {
                    Err(PartitionError::NotEnoughReplicas {
                        isr: log.isr_len(),
                        min: log.min_insync_replicas(),
                    })
                }
                Ok(log) => match transaction
                    .as_ref()
                    .filter(|t| {
                        must_verify(
                            VerifyMode::for_produce(t.version),
                            self.config.txns.verify_partitions,
                        )
                    })
                    .and_then(|_| self.needs_verification(&input.tp, &log, &input.records))
                {
                    Some(producer) => {
                        unverified.push((tickets.len(), log, producer));
                        Err(PartitionError::ShuttingDown) // replaced once verified
                    }
                    None => log
                        .append(&input.records)
                        .map(|t| (log, t))
                        .map_err(PartitionError::from),
                },
            };
            tickets.push(r);
        }
        if let (Some(txn), false) = (&transaction, unverified.is_empty()) {
            for (i, r) in self.verify_and_append(txn, &inputs, unverified).await {
                tickets[i] = r;
            }
        }
        // Each partition times out on its own: one slow partition must not turn the
        // others' results (acknowledged, or refused for good) into a retriable timeout.
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(1));
        let waits = tickets.into_iter().map(|r| async move {
            let (log, ticket) = r?;
            acknowledged(&log, ticket, acks).await?;
            Ok(ProduceAck {
                base_offset: ticket.base_offset,
                log_start_offset: log.log_start_offset(),
            })
        });
        each_until(waits, deadline)
            .await
            .into_iter()
            .map(|result| ProduceOutput { result })
            .collect()
    }

    /// WriteTxnMarkers on the owning shard: each partition's marker appended (refused
    /// where this broker does not lead the partition), then every one awaited as
    /// acks=all, as Kafka's coordinator appends them.
    pub(super) async fn write_markers(
        &self,
        timeout_ms: u64,
        markers: Vec<(TopicPartition, TxnMarker)>,
    ) -> Vec<Result<(), PartitionError>> {
        let appended: Vec<_> = markers
            .iter()
            .map(|(tp, marker)| {
                debug_assert_eq!(self.owner_of(&tp.topic, tp.partition), self.id);
                let log = self
                    .partition(tp)
                    .ok_or(PartitionError::UnknownTopicOrPartition)?;
                if !log.is_leader() {
                    return Err(PartitionError::NotLeaderOrFollower);
                }
                // Refused before anything is written, as an acks=all produce is: a marker
                // appended under too small an ISR would only be appended again on retry.
                if log.isr_len() < log.min_insync_replicas() {
                    return Err(PartitionError::NotEnoughReplicas {
                        isr: log.isr_len(),
                        min: log.min_insync_replicas(),
                    });
                }
                let ticket = log.append_marker(marker)?;
                // A verification in flight for the producer's ended transaction no
                // longer holds: its batch must not open a transaction after the marker.
                self.clear_txn_guard(tp, marker.producer_id, marker.producer_epoch);
                Ok((log, ticket))
            })
            .collect();
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(1));
        each_until(
            markers
                .iter()
                .zip(appended)
                .map(|((tp, marker), r)| async move {
                    let (log, ticket) = r?;
                    acknowledged(&log, ticket, Acks::All).await?;
                    if &*tp.topic == OFFSETS_TOPIC {
                        self.groups.complete_transaction(
                            tp.partition,
                            marker.producer_id,
                            marker.kind.is_commit(),
                            ticket.base_offset,
                        );
                    }
                    Ok(())
                }),
            deadline,
        )
        .await
    }
}

/// Runs every wait to its end or until `deadline`, whichever is first, and answers each
/// in input order: its own result, or a timeout for one still waiting then. One timer
/// for them all, not one per partition: a produce of a thousand one-record batches arms
/// one.
async fn each_until<T>(
    waits: impl Iterator<Item = impl std::future::Future<Output = Result<T, PartitionError>>>,
    deadline: Instant,
) -> Vec<Result<T, PartitionError>> {
    let waits: Vec<_> = waits.collect();
    let results: std::cell::RefCell<Vec<Option<Result<T, PartitionError>>>> =
        std::cell::RefCell::new(waits.iter().map(|_| None).collect());
    let all = futures::future::join_all(waits.into_iter().enumerate().map(|(i, wait)| {
        let results = &results;
        async move {
            let r = wait.await;
            results.borrow_mut()[i] = Some(r);
        }
    }));
    let timer = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
    futures_lite::future::or(
        async {
            all.await;
        },
        timer,
    )
    .await;
    results
        .into_inner()
        .into_iter()
        .map(|r| r.unwrap_or(Err(PartitionError::Timeout)))
        .collect()
}

/// Waits until `ticket`'s records are acknowledged as `acks` asks (nothing for acks=0,
/// written for acks=1, committed for acks=all); the caller bounds the wait.
async fn acknowledged(
    log: &Partition,
    ticket: AppendTicket,
    acks: Acks,
) -> Result<(), PartitionError> {
    match acks {
        Acks::None => Ok(()),
        Acks::All => log
            .wait_committed(ticket)
            .await
            .map_err(PartitionError::from),
        _ => log
            .wait(ticket, AckLevel::Leader)
            .await
            .map_err(PartitionError::from),
    }
}

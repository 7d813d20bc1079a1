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
        let waits = futures::future::join_all(tickets.into_iter().map(|r| async move {
            let (log, ticket) = r?;
            acknowledged(&log, ticket, acks, deadline).await?;
            Ok(ProduceAck {
                base_offset: ticket.base_offset,
                log_start_offset: log.log_start_offset(),
            })
        }));
        waits
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
        futures::future::join_all(markers.iter().zip(appended).map(
            |((tp, marker), r)| async move {
                let (log, ticket) = r?;
                acknowledged(&log, ticket, Acks::All, deadline).await?;
                if &*tp.topic == OFFSETS_TOPIC {
                    self.groups.complete_transaction(
                        tp.partition,
                        marker.producer_id,
                        marker.kind.is_commit(),
                        ticket.base_offset,
                    );
                }
                Ok(())
            },
        ))
        .await
    }
}

/// Waits until `ticket`'s records are acknowledged as `acks` asks (nothing for acks=0,
/// written for acks=1, committed for acks=all), or `deadline`.
async fn acknowledged(
    log: &Partition,
    ticket: AppendTicket,
    acks: Acks,
    deadline: Instant,
) -> Result<(), PartitionError> {
    if acks == Acks::None {
        return Ok(());
    }
    let timer = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
    let waited = futures_lite::future::or(
        async {
            Some(match acks {
                Acks::All => log
                    .wait_committed(ticket)
                    .await
                    .map_err(PartitionError::from),
                _ => log
                    .wait(ticket, AckLevel::Leader)
                    .await
                    .map_err(PartitionError::from),
            })
        },
        async {
            timer.await;
            None
        },
    )
    .await;
    waited.unwrap_or(Err(PartitionError::Timeout))
}

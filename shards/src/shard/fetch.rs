//! Fetch on the owning shard, for consumers and follower replicas: reads in waves
//! within the request's byte budget, the leader's replication throttle for replicas
//! outside the ISR, and each follower's fetch offset recorded as its position.
//!
//! Invariants: every input gets exactly one output, in input order; a read held back by
//! the throttle, or left out because the budget is spent, answers the leader's position
//! with no records and is not recorded as the follower's position; a follower's
//! position is recorded only when its fetch did not diverge.

use super::Shard;
use crate::mesh::{FetchInput, FetchOutput, FetchReader, PartitionError};
use crate::replication_throttle::Side;
use corelog_partition::{Partition, Reader};
use std::rc::Rc;
use std::time::Instant;

impl Shard {
    /// Reads the partitions of one fetch, in request order, until about `budget` bytes
    /// are read. The reads run concurrently in waves: each wave takes the next partitions
    /// until their limits alone would fill what is left, so a catch-up fetch of many full
    /// partitions reads them all at once, while partitions after the budget is spent are
    /// answered with their position only (as a sequential read would leave them).
    pub(super) async fn fetch(
        &self,
        inputs: Vec<FetchInput>,
        budget: usize,
        reader: FetchReader,
    ) -> Vec<FetchOutput> {
        let read_as = match reader {
            FetchReader::Consumer(isolation) => Reader::Consumer(isolation),
            FetchReader::Replica(_) => Reader::Replica,
        };
        let mut out: Vec<Option<FetchOutput>> = (0..inputs.len()).map(|_| None).collect();
        let mut reads: Vec<(usize, Rc<Partition>)> = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let answer = match self.partition(&input.tp) {
                None => FetchOutput::failed(-1, -1, PartitionError::UnknownTopicOrPartition),
                Some(log) => match log.check_leader_epoch(input.current_leader_epoch) {
                    Err(e) => FetchOutput::failed(-1, -1, e.into()),
                    Ok(()) => {
                        reads.push((i, log));
                        continue;
                    }
                },
            };
            out[i] = Some(answer);
        }
        // The leader's replication throttle: which reads it counts (by input, the rate)
        // and the bytes a throttled read may take (what the bucket holds).
        let (reads, throttled, caps) = match reader {
            FetchReader::Replica(id) => self.throttle_replica_reads(id, &inputs, reads, &mut out),
            FetchReader::Consumer(_) => (reads, Vec::new(), Vec::new()),
        };
        let mut left = budget;
        let mut next = 0;
        while next < reads.len() {
            if left == 0 {
                // The response is full: the rest are answered with their position.
                for (i, log) in &reads[next..] {
                    out[*i] = Some(FetchOutput {
                        high_watermark: log.high_watermark(),
                        last_stable_offset: log.last_stable_offset(),
                        log_start_offset: log.log_start_offset(),
                        diverging_epoch: None,
                        result: Ok(corelog_storage::Records::default()),
                        throttled_for: None,
                        aborted: None,
                    });
                }
                break;
            }
            let mut planned = 0usize;
            let mut wave = Vec::new();
            while let Some((i, log)) = reads.get(next) {
                if planned >= left {
                    break;
                }
                let input = &inputs[*i];
                let cap = caps.get(*i).copied().unwrap_or(usize::MAX);
                let max_bytes = input.max_bytes.min(left - planned).min(cap);
                planned += max_bytes;
                wave.push(async move {
                    let r = log
                        .read_for_send(input.offset, input.last_fetched_epoch, max_bytes, read_as)
                        .await;
                    (*i, log, r)
                });
                next += 1;
            }
            for (i, log, r) in futures::future::join_all(wave).await {
                out[i] = Some(match r {
                    Ok(read) => {
                        left = left.saturating_sub(read.records.len());
                        if let Some(rate) = throttled.get(i).copied().flatten() {
                            self.throttles.record(
                                Side::Leader,
                                rate,
                                read.records.len(),
                                Instant::now(),
                            );
                        }
                        let mut high_watermark = read.high_watermark;
                        if let (FetchReader::Replica(id), None) = (reader, read.diverging_epoch) {
                            match self.record_follower_fetch(
                                &inputs[i].tp,
                                log,
                                id,
                                inputs[i].offset,
                            ) {
                                Ok(hw) => high_watermark = hw,
                                Err(e) => {
                                    out[i] = Some(FetchOutput::failed(
                                        read.high_watermark,
                                        read.log_start_offset,
                                        e,
                                    ));
                                    continue;
                                }
                            }
                        }
                        FetchOutput {
                            high_watermark,
                            last_stable_offset: read.last_stable_offset.min(high_watermark),
                            log_start_offset: read.log_start_offset,
                            diverging_epoch: read.diverging_epoch,
                            result: Ok(read.records),
                            throttled_for: None,
                            aborted: read.aborted,
                        }
                    }
                    Err(e) => {
                        FetchOutput::failed(log.high_watermark(), log.log_start_offset(), e.into())
                    }
                });
            }
        }
        out.into_iter()
            .map(|o| o.expect("every partition of a fetch is answered"))
            .collect()
    }

    /// The leader's replication throttle over replica `id`'s reads (Kafka's
    /// shouldLeaderThrottle): a replica outside the ISR reads at most what the bucket
    /// holds, and while the bucket is in debt is answered in `out` with the leader's
    /// position only. Returns the reads kept, and by input the rate each read is counted
    /// against and the bytes it may take. Without a rate, nothing is looked at.
    #[allow(clippy::type_complexity)]
    fn throttle_replica_reads(
        &self,
        id: i32,
        inputs: &[FetchInput],
        reads: Vec<(usize, Rc<Partition>)>,
        out: &mut [Option<FetchOutput>],
    ) -> (Vec<(usize, Rc<Partition>)>, Vec<Option<u64>>, Vec<usize>) {
        let meta = self.metadata.snapshot();
        let node = self.config.node_id;
        let rate =
            crate::replication_throttle::configured_rate(&meta.broker_configs, node, Side::Leader);
        if rate.is_none() {
            return (reads, Vec::new(), Vec::new());
        }
        let mut throttled = vec![None; inputs.len()];
        let mut caps = vec![usize::MAX; inputs.len()];
        let now = Instant::now();
        let mut kept = Vec::with_capacity(reads.len());
        for (i, log) in reads {
            let tp = &inputs[i].tp;
            let configs = meta.topic(&tp.topic).map(|t| &t.configs);
            throttled[i] = crate::replication_throttle::applies(
                rate,
                configs,
                Side::Leader,
                tp.partition,
                node,
            );
            let held = match throttled[i] {
                Some(rate) if !log.in_isr(id) => {
                    match self.throttles.allowance(Side::Leader, rate, now) {
                        Ok(bytes) => {
                            caps[i] = bytes;
                            None
                        }
                        Err(held) => Some(held),
                    }
                }
                _ => None,
            };
            let Some(held) = held else {
                kept.push((i, log));
                continue;
            };
            // Not recorded as the replica's position: its divergence is not checked on
            // this answer, so it must not count towards the ISR.
            out[i] = Some(FetchOutput {
                high_watermark: log.high_watermark(),
                last_stable_offset: log.last_stable_offset(),
                log_start_offset: log.log_start_offset(),
                diverging_epoch: None,
                result: Ok(corelog_storage::Records::default()),
                throttled_for: Some(held),
                aborted: None,
            });
        }
        (kept, throttled, caps)
    }
}

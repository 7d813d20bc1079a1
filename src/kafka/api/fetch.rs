//! Fetch (v4–v18) for consumers and for follower replicas (a `replica_id`, in
//! `replica_state` from v15; from v13 topics are named by id): whole batches from the
//! one containing the fetch offset — for a consumer below the high watermark, for a
//! follower up to the written end, its fetch offset recorded as its log end —,
//! `partition_max_bytes` and `max_bytes` as limits that only the first batch of the first
//! non-empty partition may exceed (KIP-74; at least one whole batch is always returned,
//! or a consumer could never pass a batch larger than its limit), and a real long-poll
//! on `max_wait_ms` /
//! `min_bytes`.
//!
//! Long-poll: read every partition (one message per owning shard); if fewer than
//! `min_bytes` came back, ask the same shards to wait until any of these partitions'
//! high watermark moves past what was seen, or the deadline; then read again. Fetch
//! sessions (KIP-227) are not kept: the response's session id 0 tells clients to send
//! full fetches, which every client supports.

use super::fan_out::PerShard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use crate::kafka::response_frame::{DeferredRecords, PLACEHOLDER_MAX_BYTES};
use crate::limits::{FETCH_MAX_WAIT_MS_MAX, FETCH_PARTITION_BYTES_MAX, FETCH_RESPONSE_BYTES_MAX};
use bytes::Bytes;
use corelog_storage::tail_cache::{concat_chunks, trim_chunks_to_whole_batches};
use corelog_storage::Records;
use futures::channel::oneshot;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;
use kafka_protocol::ResponseError;
use shards::mesh::{
    FetchInput, FetchOutput, FetchReader, Isolation, PartitionRequest, TopicPartition,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One partition the request asks for, with where its answer goes.
struct Wanted {
    slot: (usize, usize),
    tp: TopicPartition,
    offset: i64,
    max_bytes: usize,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
}

pub struct Fetch;

/// A fetch response and the records its placeholders stand for (segment-file ranges,
/// tail-cache entries), in encoding order (`response_frame`).
pub struct FetchAnswer {
    body: FetchResponse,
    deferred: Vec<DeferredRecords>,
}

impl Encodable for FetchAnswer {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        self.body.encode(buf, version)
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        self.body.compute_size(version)
    }
}

impl Handler for Fetch {
    const KEY: ApiKey = ApiKey::Fetch;
    const VERSIONS: (i16, i16) = (4, 18);
    type Request = FetchRequest;
    type Response = FetchAnswer;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let max_wait_ms = u64::try_from(req.max_wait_ms)
            .unwrap_or(0)
            .min(FETCH_MAX_WAIT_MS_MAX);
        let deadline = Instant::now() + Duration::from_millis(max_wait_ms);
        let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
        let max_bytes = usize::try_from(req.max_bytes)
            .ok()
            .filter(|m| *m > 0)
            .unwrap_or(FETCH_RESPONSE_BYTES_MAX)
            .min(FETCH_RESPONSE_BYTES_MAX);
        // v4+; without transactions the last stable offset is the high watermark, so both
        // levels read the same records, each bounded as Kafka bounds it.
        let isolation = Isolation::from_wire(req.isolation_level);
        // A follower replica names its broker (v15+ in `replica_state`); consumers -1.
        let replica_id = if call.version >= 15 {
            req.replica_state.replica_id.0
        } else {
            req.replica_id.0
        };
        let reader = if replica_id >= 0 {
            FetchReader::Replica(replica_id)
        } else {
            FetchReader::Consumer(isolation)
        };
        let meta = ctx.shard.metadata.snapshot();

        let mut slots: Vec<Vec<PartitionData>> = Vec::with_capacity(req.topics.len());
        let mut wanted: Vec<Wanted> = Vec::new();
        // Leaders named in NOT_LEADER_OR_FOLLOWER answers; v16+ carries their endpoints.
        let mut leaders_named = std::collections::BTreeSet::new();
        for (ti, t) in req.topics.iter().enumerate() {
            // v13+ name topics by id only; an id this cluster does not know is
            // UNKNOWN_TOPIC_ID for each of its partitions (the client refreshes metadata).
            let (name, unknown) = if call.version >= 13 {
                match meta.topic_by_id(t.topic_id) {
                    Some(m) => (m.name.as_str(), ResponseError::UnknownTopicOrPartition),
                    None => ("", ResponseError::UnknownTopicId),
                }
            } else {
                (t.topic.0.as_str(), ResponseError::UnknownTopicOrPartition)
            };
            let topic: Arc<str> = name.into();
            let mut parts = Vec::with_capacity(t.partitions.len());
            for (pi, p) in t.partitions.iter().enumerate() {
                let mut out = PartitionData::default();
                out.partition_index = p.partition;
                out.high_watermark = -1;
                out.last_stable_offset = -1;
                out.log_start_offset = -1;
                out.preferred_read_replica = kafka_protocol::messages::BrokerId(-1);
                out.aborted_transactions = None;
                let served = meta.check_leader(ctx.config.node_id, name, p.partition);
                if let Err(shards::metadata::NotServed::NotLeader {
                    leader,
                    leader_epoch,
                }) = served
                {
                    // KIP-951 (v12+ tagged): where the client should go.
                    out.error_code = ResponseError::NotLeaderOrFollower.code();
                    out.current_leader.leader_id = kafka_protocol::messages::BrokerId(leader);
                    out.current_leader.leader_epoch = leader_epoch;
                    if leader >= 0 {
                        leaders_named.insert(leader);
                    }
                } else if served.is_err() {
                    out.error_code = unknown.code();
                } else {
                    wanted.push(Wanted {
                        slot: (ti, pi),
                        tp: TopicPartition {
                            topic: topic.clone(),
                            partition: p.partition,
                        },
                        offset: p.fetch_offset,
                        // v9+ and v12+; kafka-protocol decodes -1 for older versions.
                        current_leader_epoch: p.current_leader_epoch,
                        last_fetched_epoch: p.last_fetched_epoch,
                        // No partition can contribute more than the whole response may
                        // hold (KIP-74); each shard also stops reading once its partitions
                        // together have that much (`ShardMessage::Fetch`'s budget).
                        max_bytes: usize::try_from(p.partition_max_bytes)
                            .unwrap_or(0)
                            .clamp(1, FETCH_PARTITION_BYTES_MAX)
                            .min(max_bytes),
                    });
                }
                parts.push(out);
            }
            slots.push(parts);
        }

        let mut outputs = read_round(ctx, &wanted, max_bytes, reader).await;
        loop {
            let total: usize = outputs
                .iter()
                .map(|o| o.result.as_ref().map(|b| b.len()).unwrap_or(0))
                .sum();
            let any_error = outputs
                .iter()
                .any(|o| o.result.is_err() || o.diverging_epoch.is_some());
            if wanted.is_empty() || total >= min_bytes || any_error || Instant::now() >= deadline {
                break;
            }
            wait_round(ctx, &wanted, &outputs, deadline, reader).await;
            outputs = read_round(ctx, &wanted, max_bytes, reader).await;
        }

        // Fill slots in request order, keeping the response within max_bytes (KIP-74): it is
        // exceeded only by the first batch of the first non-empty partition, so a consumer
        // can always make progress past a batch larger than its limit.
        let mut used = 0usize;
        let mut deferred: Vec<((usize, usize), DeferredRecords)> = Vec::new();
        for (w, o) in wanted.iter().zip(outputs) {
            let Some(slot) = slots.get_mut(w.slot.0).and_then(|t| t.get_mut(w.slot.1)) else {
                continue;
            };
            slot.high_watermark = o.high_watermark;
            slot.last_stable_offset = o.last_stable_offset;
            slot.log_start_offset = o.log_start_offset;
            if isolation == Isolation::ReadCommitted {
                // No transactions, so none aborted: an empty list, as Kafka sends.
                slot.aborted_transactions = Some(Vec::new());
            }
            if let Some((epoch, end_offset)) = o.diverging_epoch {
                slot.diverging_epoch.epoch = epoch;
                slot.diverging_epoch.end_offset = end_offset;
            }
            let chunks = match o.result {
                Ok(Records::File(range)) => {
                    // Whole batches within this partition's limit already (or one batch):
                    // kept whole where the response has room for it, as bytes would be.
                    let fits = used == 0
                        || (used + range.len() <= max_bytes && range.len() <= w.max_bytes);
                    let records = DeferredRecords::File(range);
                    match records.placeholder().filter(|_| fits) {
                        Some(p) => {
                            used += records.len();
                            slot.records = Some(p);
                            deferred.push((w.slot, records));
                        }
                        None => slot.records = Some(Bytes::new()),
                    }
                    continue;
                }
                Ok(Records::Memory(records)) => vec![records],
                Ok(Records::Cached(chunks)) => chunks,
                Err(e) => {
                    slot.error_code = error_code::partition(&e).code();
                    slot.records = Some(Bytes::new());
                    continue;
                }
            };
            let chunks = if used == 0 {
                trim_chunks_to_whole_batches(chunks, max_bytes)
            } else if used >= max_bytes {
                Vec::new()
            } else {
                // Only the first non-empty partition may exceed a limit, its own included:
                // here the partition's limit and what the response has left.
                let part =
                    trim_chunks_to_whole_batches(chunks, (max_bytes - used).min(w.max_bytes));
                let len: usize = part.iter().map(Bytes::len).sum();
                if used + len > max_bytes || len > w.max_bytes {
                    Vec::new()
                } else {
                    part
                }
            };
            let chunks = match Records::from_chunks(chunks) {
                Records::Memory(bytes) => {
                    used += bytes.len();
                    slot.records = Some(bytes);
                    continue;
                }
                Records::Cached(chunks) => chunks,
                Records::File(_) => unreachable!("chunks are in memory"),
            };
            let len: usize = chunks.iter().map(Bytes::len).sum();
            used += len;
            if len > PLACEHOLDER_MAX_BYTES {
                // Longer than a placeholder can stand for: one buffer.
                slot.records = Some(concat_chunks(chunks));
                continue;
            }
            let records = DeferredRecords::Cached(chunks);
            slot.records = records.placeholder();
            debug_assert!(slot.records.is_some(), "cached records are never empty");
            deferred.push((w.slot, records));
        }
        for parts in slots.iter_mut() {
            for p in parts.iter_mut() {
                if p.records.is_none() {
                    p.records = Some(Bytes::new());
                }
            }
        }

        // `wanted` is in request order, which is encoding order: topics, then partitions.
        debug_assert!(deferred.windows(2).all(|w| w[0].0 < w[1].0));
        let deferred = deferred.into_iter().map(|(_, r)| r).collect();
        let mut body = FetchResponse::default();
        body.session_id = 0;
        for (t, parts) in req.topics.iter().zip(slots) {
            let mut tr = FetchableTopicResponse::default();
            tr.topic = t.topic.clone();
            tr.topic_id = t.topic_id;
            tr.partitions = parts;
            body.responses.push(tr);
        }
        if call.version >= 16 {
            body.node_endpoints = leaders_named
                .iter()
                .filter_map(|id| meta.broker(*id))
                .map(|b| {
                    let mut e = kafka_protocol::messages::fetch_response::NodeEndpoint::default();
                    e.node_id = kafka_protocol::messages::BrokerId(b.id);
                    e.host =
                        kafka_protocol::protocol::StrBytes::from_string(b.endpoint.host.clone());
                    e.port = i32::from(b.endpoint.port);
                    e.rack = b
                        .rack
                        .clone()
                        .map(kafka_protocol::protocol::StrBytes::from_string);
                    e
                })
                .collect();
        }
        // The consumer quota counts the response's size (Kafka does the same). The data
        // is sent even when this response puts the client over: the hold that follows
        // pays it back (no second empty response). Replication is not a client's.
        if replica_id < 0
            && !ctx
                .shard
                .metadata
                .snapshot()
                .client_quotas
                .entries
                .is_empty()
        {
            let response_bytes = body.compute_size(call.version).unwrap_or(used) as u64;
            body.throttle_time_ms = ctx.quotas.charge(
                shards::client_quota::QuotaKind::Fetch,
                call.header.client_id.as_deref(),
                response_bytes,
                &call.quota.connection,
            );
        }
        Ok(FetchAnswer { body, deferred })
    }

    fn deferred_records(r: &mut Self::Response) -> Vec<DeferredRecords> {
        std::mem::take(&mut r.deferred)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        let r = &r.body;
        each(r.error_code);
        for t in &r.responses {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

/// Reads every wanted partition on its owning shard; outputs are in `wanted` order.
/// Each shard reads at most about `max_bytes` in all (see `ShardMessage::Fetch`).
async fn read_round(
    ctx: &Ctx,
    wanted: &[Wanted],
    max_bytes: usize,
    reader: FetchReader,
) -> Vec<FetchOutput> {
    let mut per_shard = PerShard::new(ctx.shard.shard_count());
    for (i, w) in wanted.iter().enumerate() {
        let input = FetchInput {
            tp: w.tp.clone(),
            offset: w.offset,
            max_bytes: w.max_bytes,
            current_leader_epoch: w.current_leader_epoch,
            last_fetched_epoch: w.last_fetched_epoch,
        };
        per_shard.push(
            ctx.shard.owner_of(&w.tp.topic, w.tp.partition),
            (i, 0),
            input,
        );
    }
    let mut outputs: Vec<Option<FetchOutput>> = (0..wanted.len()).map(|_| None).collect();
    let answers = per_shard
        .call(&ctx.shard, |partitions, reply| PartitionRequest::Fetch {
            partitions,
            budget: max_bytes,
            reader,
            reply,
        })
        .await;
    for ((i, _), answer) in answers {
        if let Some(slot) = outputs.get_mut(i) {
            *slot = answer;
        }
    }
    outputs
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                FetchOutput::failed(-1, -1, shards::mesh::PartitionError::ShuttingDown)
            })
        })
        .collect()
}

/// Waits until any wanted partition's high watermark (for a follower: its written end)
/// moves past the one just seen, a throttled partition may be read again, or the
/// deadline.
async fn wait_round(
    ctx: &Ctx,
    wanted: &[Wanted],
    seen: &[FetchOutput],
    deadline: Instant,
    reader: FetchReader,
) {
    let replica = matches!(reader, FetchReader::Replica(_));
    let mut per_shard: Vec<Vec<(TopicPartition, i64)>> =
        (0..ctx.shard.shard_count()).map(|_| Vec::new()).collect();
    // A partition the leader's replication throttle held back has data waiting: it is
    // not waited on, but read again once the throttle lets it go (or at the deadline),
    // as Kafka's DelayedFetch leaves throttled bytes out of `min_bytes`.
    let now = Instant::now();
    let deadline = seen
        .iter()
        .filter_map(|o| o.throttled_for)
        .map(|held| now + held)
        .fold(deadline, Instant::min);
    for (w, o) in wanted.iter().zip(seen) {
        if o.throttled_for.is_some() {
            continue;
        }
        let beyond = if replica {
            w.offset
        } else {
            o.high_watermark.max(w.offset)
        };
        if let Some(list) = per_shard.get_mut(ctx.shard.owner_of(&w.tp.topic, w.tp.partition)) {
            list.push((w.tp.clone(), beyond));
        }
    }
    let waits: Vec<_> = per_shard
        .into_iter()
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(target, partitions)| {
            let (tx, rx) = oneshot::channel();
            let msg = PartitionRequest::WaitForData {
                partitions,
                deadline,
                replica,
                reply: tx,
            };
            let shard = ctx.shard.clone();
            Box::pin(async move {
                shard.peers.call(target, msg, rx).await;
            })
        })
        .collect();
    if waits.is_empty() {
        glommio::timer::sleep(deadline.saturating_duration_since(now)).await;
        return;
    }
    let timeout = glommio::timer::sleep(deadline.saturating_duration_since(now));
    futures_lite::future::or(
        async {
            futures::future::select_all(waits).await;
        },
        timeout,
    )
    .await;
}

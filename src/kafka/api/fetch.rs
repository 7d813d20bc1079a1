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

use super::fan_out::{Asked, FanOut, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use crate::kafka::response_frame::{placeholder, DeferredRecords, PLACEHOLDER_MAX_BYTES};
use crate::limits::{FETCH_MAX_WAIT_MS_MAX, FETCH_PARTITION_BYTES_MAX, FETCH_RESPONSE_BYTES_MAX};
use bytes::Bytes;
use corelog_shards::mesh::{
    FetchInput, FetchOutput, FetchReader, Isolation, PartitionError, PartitionRequest,
    TopicPartition,
};
use corelog_shards::metadata::{ClusterMetadata, NotServed};
use corelog_storage::{Carried, Records};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;
use kafka_protocol::ResponseError;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The request's limits, as this broker bounds them.
struct Limits {
    deadline: Instant,
    min_bytes: usize,
    /// The response's limit (KIP-74: only its first batch may exceed it).
    max_bytes: usize,
    isolation: Isolation,
    /// A follower replica names its broker (v15+ in `replica_state`); consumers -1.
    replica_id: i32,
}

impl Limits {
    fn of(req: &FetchRequest, version: i16) -> Limits {
        let max_wait_ms = u64::try_from(req.max_wait_ms)
            .unwrap_or(0)
            .min(FETCH_MAX_WAIT_MS_MAX);
        Limits {
            deadline: Instant::now() + Duration::from_millis(max_wait_ms),
            min_bytes: usize::try_from(req.min_bytes).unwrap_or(0),
            max_bytes: usize::try_from(req.max_bytes)
                .ok()
                .filter(|m| *m > 0)
                .unwrap_or(FETCH_RESPONSE_BYTES_MAX)
                .min(FETCH_RESPONSE_BYTES_MAX),
            // v4+; without transactions the last stable offset is the high watermark, so
            // both levels read the same records, each bounded as Kafka bounds it.
            isolation: Isolation::from_wire(req.isolation_level),
            replica_id: if version >= 15 {
                req.replica_state.replica_id.0
            } else {
                req.replica_id.0
            },
        }
    }

    fn reader(&self) -> FetchReader {
        if self.replica_id >= 0 {
            FetchReader::Replica(self.replica_id)
        } else {
            FetchReader::Consumer(self.isolation)
        }
    }
}

/// One partition the request asks for.
struct Wanted {
    tp: TopicPartition,
    offset: i64,
    max_bytes: usize,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
}

impl PartitionAnswer for PartitionData {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }
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
        let limits = Limits::of(&req, call.version);
        let meta = ctx.shard.metadata.snapshot();
        let access = Access::new(ctx, call);
        let (fan, leaders_named) = partitions(
            ctx,
            &meta,
            &access,
            limits.replica_id >= 0,
            &req,
            call.version,
            limits.max_bytes,
        );
        let outputs = read_until_enough(&fan, &limits).await;
        let (answers, asked) = fan.into_parts();
        let placed = place_records(answers, &asked, outputs, &limits);
        Ok(assemble(
            ctx,
            call,
            &req,
            &meta,
            &leaders_named,
            &limits,
            placed,
        ))
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

/// Each partition's answer, in request order: refused here (unknown, or led elsewhere:
/// then also where its leader is) or asked of its owning shard. Also the leaders named
/// in NOT_LEADER_OR_FOLLOWER answers (v16+ carries their endpoints).
fn partitions<'a>(
    ctx: &'a Ctx,
    meta: &ClusterMetadata,
    access: &Access<'_>,
    replica: bool,
    req: &FetchRequest,
    version: i16,
    max_bytes: usize,
) -> (FanOut<'a, PartitionData, Wanted>, BTreeSet<i32>) {
    let mut fan = FanOut::new(ctx, req.topics.len());
    let mut leaders_named = BTreeSet::new();
    // A follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic
    // (Kafka answers TOPIC_AUTHORIZATION_FAILED per partition either way).
    let replica_allowed = replica && access.allows_cluster(Op::ClusterAction);
    for t in &req.topics {
        // v13+ name topics by id only; an id this cluster does not know is
        // UNKNOWN_TOPIC_ID for each of its partitions (the client refreshes metadata).
        let (name, unknown) = if version >= 13 {
            match meta.topic_by_id(t.topic_id) {
                Some(m) => (m.name.as_str(), ResponseError::UnknownTopicOrPartition),
                None => ("", ResponseError::UnknownTopicId),
            }
        } else {
            (t.topic.0.as_str(), ResponseError::UnknownTopicOrPartition)
        };
        let topic: Arc<str> = name.into();
        let authorized = if replica {
            replica_allowed
        } else {
            name.is_empty() || access.allows(Op::Read, Resource::Topic, name)
        };
        fan.next_topic(t.partitions.len());
        for p in &t.partitions {
            let mut out = PartitionData::default();
            out.partition_index = p.partition;
            out.high_watermark = -1;
            out.last_stable_offset = -1;
            out.log_start_offset = -1;
            out.preferred_read_replica = BrokerId(-1);
            out.aborted_transactions = None;
            if !authorized {
                fan.refuse(out, ResponseError::TopicAuthorizationFailed);
                continue;
            }
            match meta.check_leader(ctx.config.node_id, name, p.partition) {
                Err(NotServed::NotLeader {
                    leader,
                    leader_epoch,
                }) => {
                    // KIP-951 (v12+ tagged): where the client should go.
                    out.current_leader.leader_id = BrokerId(leader);
                    out.current_leader.leader_epoch = leader_epoch;
                    if leader >= 0 {
                        leaders_named.insert(leader);
                    }
                    fan.refuse(out, ResponseError::NotLeaderOrFollower);
                }
                Err(_) => fan.refuse(out, unknown),
                Ok(()) => {
                    let wanted = Wanted {
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
                    };
                    fan.ask(name, p.partition, out, wanted);
                }
            }
        }
    }
    (fan, leaders_named)
}

/// The long poll: reads every asked partition, and while fewer than `min_bytes` came back
/// (and no partition failed or diverged), waits for new data or the deadline and reads
/// again. Outputs are in asked order.
async fn read_until_enough(
    fan: &FanOut<'_, PartitionData, Wanted>,
    limits: &Limits,
) -> Vec<FetchOutput> {
    let mut outputs = read_round(fan, limits).await;
    loop {
        let total: usize = outputs
            .iter()
            .map(|o| o.result.as_ref().map(|b| b.len()).unwrap_or(0))
            .sum();
        let any_error = outputs
            .iter()
            .any(|o| o.result.is_err() || o.diverging_epoch.is_some());
        if fan.asked().is_empty()
            || total >= limits.min_bytes
            || any_error
            || Instant::now() >= limits.deadline
        {
            return outputs;
        }
        wait_round(fan, &outputs, limits).await;
        outputs = read_round(fan, limits).await;
    }
}

/// Reads every asked partition on its owning shard; outputs are in asked order. Each
/// shard reads at most about `max_bytes` in all (see `ShardMessage::Fetch`).
async fn read_round(fan: &FanOut<'_, PartitionData, Wanted>, limits: &Limits) -> Vec<FetchOutput> {
    let input = |w: &Wanted| FetchInput {
        tp: w.tp.clone(),
        offset: w.offset,
        max_bytes: w.max_bytes,
        current_leader_epoch: w.current_leader_epoch,
        last_fetched_epoch: w.last_fetched_epoch,
    };
    let reader = limits.reader();
    let make = |partitions, reply| PartitionRequest::Fetch {
        partitions,
        budget: limits.max_bytes,
        reader,
        reply,
    };
    fan.gather(input, make)
        .await
        .into_iter()
        .map(|o| o.unwrap_or_else(|| FetchOutput::failed(-1, -1, PartitionError::ShuttingDown)))
        .collect()
}

/// Waits until any asked partition's high watermark (for a follower: its written end)
/// moves past the one just seen, a throttled partition may be read again, or the
/// deadline.
async fn wait_round(
    fan: &FanOut<'_, PartitionData, Wanted>,
    seen: &[FetchOutput],
    limits: &Limits,
) {
    let replica = matches!(limits.reader(), FetchReader::Replica(_));
    // A partition the leader's replication throttle held back has data waiting: it is
    // not waited on, but read again once the throttle lets it go (or at the deadline),
    // as Kafka's DelayedFetch leaves throttled bytes out of `min_bytes`.
    let now = Instant::now();
    let deadline = seen
        .iter()
        .filter_map(|o| o.throttled_for)
        .map(|held| now + held)
        .fold(limits.deadline, Instant::min);
    let input = |i: usize, w: &Wanted| {
        let o = seen.get(i)?;
        if o.throttled_for.is_some() {
            return None;
        }
        let beyond = if replica {
            w.offset
        } else {
            o.high_watermark.max(w.offset)
        };
        Some((w.tp.clone(), beyond))
    };
    let make = |partitions, reply| PartitionRequest::WaitForData {
        partitions,
        deadline,
        replica,
        reply,
    };
    let timeout = glommio::timer::sleep(deadline.saturating_duration_since(now));
    futures_lite::future::or(
        async {
            if !fan.first_answer(input, make).await {
                // Nothing to wait on: only the deadline.
                std::future::pending::<()>().await;
            }
        },
        timeout,
    )
    .await;
}

/// Each partition's answer with its records placed, in request order, and the records
/// the placeholders stand for.
struct Placed {
    answers: Vec<Vec<PartitionData>>,
    /// In encoding order.
    deferred: Vec<DeferredRecords>,
    /// Bytes of records placed.
    used: usize,
}

/// The response from the placed answers: each topic's answers under its name and id,
/// records never null, from v16 the endpoints of the leaders named, and the consumer
/// quota charged for the response's size.
fn assemble(
    ctx: &Ctx,
    call: &Call<'_>,
    req: &FetchRequest,
    meta: &ClusterMetadata,
    leaders_named: &BTreeSet<i32>,
    limits: &Limits,
    placed: Placed,
) -> FetchAnswer {
    let Placed {
        answers,
        deferred,
        used,
    } = placed;
    let mut body = FetchResponse::default();
    body.session_id = 0;
    for (t, mut parts) in req.topics.iter().zip(answers) {
        for p in &mut parts {
            if p.records.is_none() {
                p.records = Some(Bytes::new());
            }
        }
        let mut tr = FetchableTopicResponse::default();
        tr.topic = t.topic.clone();
        tr.topic_id = t.topic_id;
        tr.partitions = parts;
        body.responses.push(tr);
    }
    if call.version >= 16 {
        body.node_endpoints = super::fan_out::node_endpoints(meta, leaders_named, &ctx.listener);
    }
    // The consumer quota counts the response's size (Kafka does the same). The data is
    // sent even when this response puts the client over: the hold that follows pays it
    // back (no second empty response). Replication is not a client's.
    if limits.replica_id < 0
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
            corelog_shards::client_quota::QuotaKind::Fetch,
            crate::quota::QuotaClient::of(
                call.session.principal(),
                call.header.client_id.as_deref(),
            ),
            response_bytes,
            &call.quota.connection,
        );
    }
    FetchAnswer { body, deferred }
}

/// Puts each read partition's answer and records into its slot, in request order,
/// keeping the response within `max_bytes` (KIP-74, see [`fit`]).
fn place_records(
    mut answers: Vec<Vec<PartitionData>>,
    asked: &[Asked<Wanted>],
    outputs: Vec<FetchOutput>,
    limits: &Limits,
) -> Placed {
    let mut used = 0usize;
    let mut deferred: Vec<((usize, usize), DeferredRecords)> = Vec::new();
    for (a, o) in asked.iter().zip(outputs) {
        let Some(slot) = answers.get_mut(a.slot.0).and_then(|t| t.get_mut(a.slot.1)) else {
            continue;
        };
        slot.high_watermark = o.high_watermark;
        slot.last_stable_offset = o.last_stable_offset;
        slot.log_start_offset = o.log_start_offset;
        if limits.isolation == Isolation::ReadCommitted {
            // The consumer drops the records of these producers from each first offset to
            // the producer's abort marker; sorted by first offset, the order it walks them.
            let mut aborted: Vec<AbortedTransaction> = o
                .aborted
                .unwrap_or_default()
                .iter()
                .map(|t| {
                    let mut a = AbortedTransaction::default();
                    a.producer_id = ProducerId(t.producer_id);
                    a.first_offset = t.first_offset;
                    a
                })
                .collect();
            aborted.sort_by_key(|a| a.first_offset);
            slot.aborted_transactions = Some(aborted);
        }
        if let Some((epoch, end_offset)) = o.diverging_epoch {
            slot.diverging_epoch.epoch = epoch;
            slot.diverging_epoch.end_offset = end_offset;
        }
        let records = match o.result {
            Ok(records) => fit(records, used, limits.max_bytes, a.input.max_bytes),
            Err(e) => {
                slot.failed(&e);
                slot.records = Some(Bytes::new());
                continue;
            }
        };
        // In the response's buffer, or by reference behind a placeholder (cached entries
        // longer than a placeholder can stand for come as one buffer).
        let records = match records.carried(PLACEHOLDER_MAX_BYTES) {
            Carried::Inline(bytes) => {
                used += bytes.len();
                slot.records = Some(bytes);
                continue;
            }
            Carried::ByReference(records) => records,
        };
        match placeholder(&records) {
            Some(p) => {
                used += records.len();
                slot.records = Some(p);
                deferred.push((a.slot, records));
            }
            None => {
                debug_assert!(
                    matches!(records, DeferredRecords::File(_)),
                    "cached records are never empty"
                );
                slot.records = Some(Bytes::new());
            }
        }
    }
    // `asked` is in request order, which is encoding order: topics, then partitions.
    debug_assert!(deferred.windows(2).all(|w| w[0].0 < w[1].0));
    Placed {
        answers,
        deferred: deferred.into_iter().map(|(_, r)| r).collect(),
        used,
    }
}

/// What of a partition's records the response takes, `used` bytes of it already placed
/// (KIP-74): the response is exceeded only by the first batch of the first non-empty
/// partition, so a consumer can always make progress past a batch larger than its limit;
/// any later partition is kept within its own limit and what the response has left, or
/// sends nothing. A file range is whole batches within the partition's limit already (or
/// one batch): taken whole where there is room for it, as bytes would be.
fn fit(records: Records, used: usize, max_bytes: usize, partition_max_bytes: usize) -> Records {
    if let Records::File(range) = &records {
        let fits =
            used == 0 || (used + range.len() <= max_bytes && range.len() <= partition_max_bytes);
        return if fits { records } else { Records::default() };
    }
    if used == 0 {
        return records.trim_to_whole_batches(max_bytes);
    }
    if used >= max_bytes {
        return Records::default();
    }
    let room = (max_bytes - used).min(partition_max_bytes);
    let part = records.trim_to_whole_batches(room);
    if part.len() > room {
        Records::default()
    } else {
        part
    }
}

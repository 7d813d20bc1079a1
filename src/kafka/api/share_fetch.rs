//! ShareFetch (v1–v2, KIP-932): a share consumer acknowledges what it processed and
//! acquires more, from every partition of its share session, on the partitions' leader.
//! v2: KIP-1222's RENEW acknowledgements (a lock starts again; such a request, IsRenewAck,
//! fetches nothing and must ask for nothing, INVALID_REQUEST otherwise) and KIP-1206's
//! acquire mode — both modes acquire at most MaxRecords records (record-limit's strict
//! bound; batch-optimized may exceed it to a batch's end in Kafka, and does not here).
//!
//! As Kafka: UNSUPPORTED_VERSION while the cluster's `share.version` is 0; READ on the
//! group (GROUP_AUTHORIZATION_FAILED for the request) and on each topic
//! (TOPIC_AUTHORIZATION_FAILED for its partitions); the session's epoch checked
//! (`share_session`: SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
//! SHARE_SESSION_LIMIT_REACHED). The acknowledgements carried are applied first, each
//! partition's result in its AcknowledgeErrorCode; then records are acquired from the
//! session's partitions, at most MaxRecords in all, and each partition answers the
//! records read with the ranges acquired (AcquiredRecords, with their delivery counts) —
//! the client hands out only records inside those ranges. With nothing acquired the
//! request waits up to MaxWaitMs for new records or for records released or timed out.
//! A partition this broker does not lead is NOT_LEADER_OR_FOLLOWER with its leader; an
//! unknown topic id UNKNOWN_TOPIC_ID. A closing request (epoch -1) fetches nothing. A
//! partition whose share coordinator is moving answers nothing this time rather than
//! COORDINATOR_NOT_AVAILABLE, which share consumers take for a fatal error.

use super::handler::{Call, Handler};
use super::share_session::{self, share_error, CLOSE_EPOCH};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{ShardMessage, ShareRequest};
use corelog_shards::mesh::{ShareFetchInput, ShareFetchLimits, ShareFetchOutput};
use corelog_shards::routing::TopicPartition;
use corelog_shards::share::leader::ShareError;
use futures::channel::oneshot;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use uuid::Uuid;

pub struct ShareFetch;

/// One partition's answer as it is built.
#[derive(Default)]
struct Answer {
    error: i16,
    message: Option<String>,
    ack: Option<(i16, Option<String>)>,
    fetched: Option<ShareFetchOutput>,
    leader: Option<(i32, i32)>,
}

impl Handler for ShareFetch {
    const KEY: ApiKey = ApiKey::ShareFetch;
    const VERSIONS: (i16, i16) = (1, 2);
    type Request = ShareFetchRequest;
    type Response = ShareFetchResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ShareFetchResponse::default();
        let refuse = |mut body: ShareFetchResponse, e: ResponseError| {
            body.error_code = e.code();
            Ok(body)
        };
        if !super::share_groups_enabled(ctx) {
            return refuse(body, ResponseError::UnsupportedVersion);
        }
        let (Some(group), Some(member)) = (&req.group_id, &req.member_id) else {
            return refuse(body, ResponseError::InvalidRequest);
        };
        let (group, member) = (group.as_str().to_string(), member.as_str().to_string());
        if member.is_empty() {
            return refuse(body, ResponseError::InvalidRequest);
        }
        let access = Access::new(ctx, call);
        if !access.allows(Op::Read, Resource::Group, &group) {
            return refuse(body, ResponseError::GroupAuthorizationFailed);
        }
        // KIP-1222: a request that renews locks fetches nothing, and says so.
        let renew = call.version >= 2 && req.is_renew_ack;
        if renew
            && (
                req.max_bytes,
                req.min_bytes,
                req.max_records,
                req.max_wait_ms,
            ) != (0, 0, 0, 0)
        {
            return refuse(body, ResponseError::InvalidRequest);
        }
        // The connection's share requests take their turns in the order they came.
        let slot = &call.session.share;
        let turn = slot.turn().await;
        let closed = match slot.advance(&group, &member, req.share_session_epoch, true) {
            Ok(c) => c,
            Err(e) => {
                body.error_code = e.code();
                return Ok(body);
            }
        };
        share_session::ensure_state_topic(ctx).await;
        let lock_ms = ctx.shard.share_delivery(&group).record_lock_duration_ms;
        body.acquisition_lock_timeout_ms = i32::try_from(lock_ms).unwrap_or(i32::MAX);
        let mut answers: BTreeMap<(Uuid, i32), Answer> = BTreeMap::new();

        // The partitions named, with their acknowledgements.
        let named = req.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| share_session::Named {
                topic_id: t.topic_id,
                partition: p.partition_index,
                batches: p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                    .collect(),
            })
        });
        let settled =
            share_session::settle(ctx, &access, &group, &member, named.collect(), renew).await;
        for (key, s) in settled {
            let a = answers.entry(key).or_default();
            a.error = s.error;
            a.ack = s.ack;
        }
        if let Some(closed) = closed {
            share_session::release(ctx, closed).await;
        }

        if req.share_session_epoch != CLOSE_EPOCH && !renew {
            let readable: Vec<(Uuid, i32)> = answers
                .iter()
                .filter(|(_, a)| a.error == 0)
                .map(|(k, _)| *k)
                .collect();
            let forgotten: Vec<(Uuid, i32)> = req
                .forgotten_topics_data
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
                .collect();
            slot.update(readable, &forgotten);
            let session = slot.get().map(|s| s.partitions).unwrap_or_default();
            if req.max_records > 0 && req.max_bytes > 0 && !session.is_empty() {
                // A later request on the connection ends this one's wait.
                let current = || !turn.others_wait();
                fetch(
                    ctx,
                    &access,
                    &group,
                    &member,
                    &req,
                    &session,
                    &mut answers,
                    &current,
                )
                .await;
            }
        }

        for ((topic_id, partition), a) in answers {
            let mut p = PartitionData::default();
            p.partition_index = partition;
            p.error_code = a.error;
            p.error_message = a.message.map(StrBytes::from_string);
            if let Some((code, message)) = a.ack {
                p.acknowledge_error_code = code;
                p.acknowledge_error_message = message.map(StrBytes::from_string);
            }
            // Records are not nullable in Kafka's schema (the Java client refuses a null).
            p.records = Some(bytes::Bytes::new());
            let (leader, epoch) = a.leader.unwrap_or((-1, -1));
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(leader)
                .with_leader_epoch(epoch);
            if let Some(f) = a.fetched {
                p.records = Some(f.records.unwrap_or_default());
                p.acquired_records = f
                    .acquired
                    .iter()
                    .map(|r| {
                        AcquiredRecords::default()
                            .with_first_offset(r.first)
                            .with_last_offset(r.last)
                            .with_delivery_count(i16::try_from(r.deliveries).unwrap_or(i16::MAX))
                    })
                    .collect();
            }
            match body.responses.last_mut().filter(|t| t.topic_id == topic_id) {
                Some(t) => t.partitions.push(p),
                None => body.responses.push(
                    ShareFetchableTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(vec![p]),
                ),
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        r.responses
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| {
                each(p.error_code);
                each(p.acknowledge_error_code);
            });
    }
}

/// Acquires records from the session's partitions this broker leads, waiting up to the
/// request's MaxWaitMs while none come and the request is still the session's latest
/// (`current`).
#[allow(clippy::too_many_arguments)]
async fn fetch(
    ctx: &Ctx,
    access: &Access<'_>,
    group: &str,
    member: &str,
    req: &ShareFetchRequest,
    session: &std::collections::BTreeSet<(Uuid, i32)>,
    answers: &mut BTreeMap<(Uuid, i32), Answer>,
    current: &dyn Fn() -> bool,
) {
    let meta = ctx.shard.metadata.snapshot();
    // Led here, by shard; the others answer their leader.
    let mut by_shard: BTreeMap<usize, Vec<ShareFetchInput>> = BTreeMap::new();
    let mut asked = 0usize;
    for (topic_id, partition) in session {
        let a = answers.entry((*topic_id, *partition)).or_default();
        if a.error != 0 {
            continue;
        }
        let Some(t) = meta.topic_by_id(*topic_id) else {
            a.error = ResponseError::UnknownTopicId.code();
            continue;
        };
        if !access.allows(Op::Read, Resource::Topic, &t.name) {
            a.error = ResponseError::TopicAuthorizationFailed.code();
            continue;
        }
        match t
            .partitions
            .get(usize::try_from(*partition).unwrap_or(usize::MAX))
        {
            None => a.error = ResponseError::UnknownTopicOrPartition.code(),
            Some(p) if p.leader != ctx.config.node_id => {
                a.error = ResponseError::NotLeaderOrFollower.code();
                a.leader = Some((p.leader, p.leader_epoch));
            }
            Some(_) => {
                asked += 1;
                by_shard
                    .entry(ctx.shard.owner_of(&t.name, *partition))
                    .or_default()
                    .push(ShareFetchInput {
                        tp: TopicPartition {
                            topic: t.name.as_str().into(),
                            partition: *partition,
                        },
                        topic_id: *topic_id,
                        max_bytes: 0,
                    });
            }
        }
    }
    if asked == 0 {
        return;
    }
    let max_bytes = usize::try_from(req.max_bytes).unwrap_or(0);
    let shares = partition_max_bytes(max_bytes, asked);
    for (i, input) in by_shard.values_mut().flatten().enumerate() {
        input.max_bytes = shares(i);
    }
    let deadline =
        Instant::now() + Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0));
    let max_records = usize::try_from(req.max_records).unwrap_or(0);
    // KIP-1206: 0 (batch_optimized, and every request before v2) or 1 (record_limit).
    let batch_optimized = req.share_acquire_mode != 1;
    loop {
        if !current() {
            return;
        }
        let mut left = ShareFetchLimits {
            max_records,
            max_bytes,
            min_one_batch: true,
            batch_optimized,
        };
        let mut got = 0usize;
        let mut seen: Vec<(usize, TopicPartition, i64, u64)> = Vec::new();
        for (shard, inputs) in &by_shard {
            if left.max_records == 0 {
                break;
            }
            let (tx, rx) = oneshot::channel();
            let message = ShardMessage::Share(ShareRequest::Fetch {
                group: group.to_string(),
                member: member.to_string(),
                partitions: inputs.clone(),
                limits: left,
                reply: tx,
            });
            let outputs = ctx
                .shard
                .peers
                .call(*shard, message, rx)
                .await
                .unwrap_or_default();
            for (input, output) in inputs.iter().zip(outputs) {
                let a = answers
                    .entry((input.topic_id, input.tp.partition))
                    .or_default();
                match output {
                    Ok(f) => {
                        let n: i64 = f.acquired.iter().map(|r| r.last - r.first + 1).sum();
                        let n = usize::try_from(n).unwrap_or(0);
                        got += n;
                        left.max_records = left.max_records.saturating_sub(n);
                        let bytes = f.records.as_ref().map_or(0, |r| r.len());
                        left.max_bytes = left.max_bytes.saturating_sub(bytes);
                        left.min_one_batch &= bytes == 0;
                        seen.push((
                            *shard,
                            input.tp.clone(),
                            f.high_watermark,
                            f.available_generation,
                        ));
                        a.fetched = Some(f);
                    }
                    // The share coordinator is moving: nothing to hand out this time (a
                    // Java client takes this code for a fatal one; the next fetch retries).
                    Err(ShareError::CoordinatorNotAvailable) => {}
                    Err(e) => {
                        let (code, message) = share_error(&e);
                        a.error = code;
                        a.message = message;
                        if e == ShareError::NotLeaderOrFollower {
                            a.leader = meta
                                .partition(&input.tp.topic, input.tp.partition)
                                .map(|p| (p.leader, p.leader_epoch));
                        }
                    }
                }
            }
        }
        let now = Instant::now();
        if got > 0 || now >= deadline || seen.is_empty() || !current() {
            return;
        }
        // Nothing yet: new records, and records released or timed out, wake the wait.
        wait_for_records(ctx, seen, deadline).await;
    }
}

/// Each partition's share of a ShareFetch's MaxBytes, by its place among the `n`
/// partitions fetched (Kafka's uniform `PartitionMaxBytesStrategy`): an even share, the
/// remainder to the first; with fewer bytes than partitions, one byte each to the first
/// ones and none to the rest. The shares add up to `max_bytes`.
pub fn partition_max_bytes(max_bytes: usize, n: usize) -> impl Fn(usize) -> usize {
    move |i| {
        if n == 0 || i >= n {
            0
        } else if max_bytes >= n {
            max_bytes / n + if i == 0 { max_bytes % n } else { 0 }
        } else {
            usize::from(i < max_bytes)
        }
    }
}

/// Waits until any of the partitions' high watermarks passes the one seen, a share
/// partition of one of their shards has records to acquire again (its generation grew
/// past the one seen), or `until`.
async fn wait_for_records(ctx: &Ctx, seen: Vec<(usize, TopicPartition, i64, u64)>, until: Instant) {
    let mut by_shard: BTreeMap<usize, (Vec<(TopicPartition, i64)>, u64)> = BTreeMap::new();
    for (shard, tp, hw, generation) in seen {
        let (partitions, since) = by_shard.entry(shard).or_insert((Vec::new(), generation));
        partitions.push((tp, hw));
        *since = (*since).min(generation);
    }
    let waits = by_shard
        .into_iter()
        .map(|(shard, (partitions, since))| async move {
            let (tx, rx) = oneshot::channel();
            let message = ShardMessage::Share(ShareRequest::Wait {
                partitions,
                since,
                deadline: until,
                reply: tx,
            });
            ctx.shard.peers.call(shard, message, rx).await;
        });
    let waits: Vec<_> = waits.map(Box::pin).collect();
    if !waits.is_empty() {
        futures::future::select_all(waits).await;
    }
}

#[cfg(test)]
mod tests {
    use super::partition_max_bytes;

    #[test]
    fn max_bytes_is_shared_as_kafkas_uniform_strategy_shares_it() {
        let share = partition_max_bytes(1000, 3);
        assert_eq!((share(0), share(1), share(2)), (334, 333, 333));
        let share = partition_max_bytes(2, 3);
        assert_eq!((share(0), share(1), share(2)), (1, 1, 0));
        let share = partition_max_bytes(1, 1);
        assert_eq!(share(0), 1);
        for (bytes, n) in [(0, 4), (7, 4), (1 << 20, 7), (3, 3)] {
            let share = partition_max_bytes(bytes, n);
            assert_eq!((0..n).map(&share).sum::<usize>(), bytes, "{bytes} over {n}");
        }
    }
}

//! TxnOffsetCommit (v0–v5): a transactional producer commits a consumer group's offsets
//! as part of its transaction (`sendOffsetsToTransaction`). The group's coordinator shard
//! writes them as one transactional batch of the producer's (its id and epoch) to the
//! group's `__consumer_offsets` partition and answers once that batch is committed; the
//! offsets stay pending — invisible to OffsetFetch — until the transaction's marker
//! there commits or aborts them (`corelog_shards::group::coordinator`).
//!
//! Authorization, in Kafka's order: WRITE on the transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group
//! (GROUP_AUTHORIZATION_FAILED) — either refuses every partition, the response having
//! no top-level error code — then READ on each topic (TOPIC_AUTHORIZATION_FAILED per
//! partition); an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION. The group is
//! routed like OffsetCommit (NOT_COORDINATOR; COORDINATOR_NOT_AVAILABLE while the
//! partition loads, the code OffsetCommit answers too, which every version's client
//! retries — Kafka maps its LOAD_IN_PROGRESS to that for v0–v1). v3 names the member
//! and generation, checked as Kafka checks them (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
//! FENCED_INSTANCE_ID) when given. A fenced producer epoch is INVALID_PRODUCER_EPOCH.
//!
//! Before the offsets are written, the shard of the group's offsets partition checks the
//! producer's transaction with its coordinator, as Kafka's partition leaders do
//! (`corelog_shards::shard::txn_verify`): whether the partition is in the ongoing
//! transaction while `transaction.partition.verification.enable` is on (INVALID_TXN_STATE
//! if not; TRANSACTION_ABORTABLE from v4), and from v5 (transaction version 2, whose
//! producers send no AddOffsetsToTxn) it adds the partition to the transaction.

use super::group_routing::{ask_coordinator, code, s, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::{GroupAnswer, GroupError, GroupOp, TxnCommitRequest};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{ApiKey, TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::ResponseError;

/// The highest version served.
pub const VERSION_MAX: i16 = 5;

pub struct TxnOffsetCommit;

impl Handler for TxnOffsetCommit {
    const KEY: ApiKey = ApiKey::TxnOffsetCommit;
    const VERSIONS: (i16, i16) = (0, VERSION_MAX);
    type Request = TxnOffsetCommitRequest;
    type Response = TxnOffsetCommitResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let group = s(&req.group_id.0);
        let transactional_id = s(&req.transactional_id.0);
        let meta = ctx.shard.metadata.snapshot();
        let access = Access::new(ctx, call);
        // Refused up front, as Kafka does: everything without WRITE on the transactional
        // id or READ on the group, the partitions of topics without READ, and those of
        // unknown topics.
        let whole = if !access.allows(Op::Write, Resource::TransactionalId, &transactional_id) {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else if !access.allows(Op::Read, Resource::Group, &group) {
            Some(ResponseError::GroupAuthorizationFailed)
        } else {
            None
        };
        let mut offsets = Vec::new();
        let mut refused: Vec<Vec<Option<ResponseError>>> = Vec::with_capacity(req.topics.len());
        for t in &req.topics {
            let topic = s(&t.name.0);
            let topic_readable =
                whole.is_none() && access.allows(Op::Read, Resource::Topic, &topic);
            let mut k = Vec::with_capacity(t.partitions.len());
            for p in &t.partitions {
                let refusal = if whole.is_some() {
                    whole
                } else if !topic_readable {
                    Some(ResponseError::TopicAuthorizationFailed)
                } else if !meta.has_partition(&topic, p.partition_index) {
                    Some(ResponseError::UnknownTopicOrPartition)
                } else {
                    None
                };
                if refusal.is_none() {
                    offsets.push((
                        topic.clone(),
                        p.partition_index,
                        p.committed_offset,
                        // The leader epoch exists from v2.
                        if v >= 2 { p.committed_leader_epoch } else { -1 },
                        p.committed_metadata.as_ref().map(s).unwrap_or_default(),
                    ));
                }
                k.push(refusal);
            }
            refused.push(k);
        }
        let n = offsets.len();
        let results: Vec<Result<(), GroupError>> = if n == 0 {
            Vec::new()
        } else {
            let op = GroupOp::TxnCommit(TxnCommitRequest {
                group: group.clone(),
                transactional_id,
                producer_id: req.producer_id.0,
                producer_epoch: req.producer_epoch,
                // v0–v2 carry no member fields: their defaults (-1, "", null) mean a
                // commit from outside the group protocol.
                generation: if v >= 3 { req.generation_id } else { -1 },
                member_id: if v >= 3 {
                    s(&req.member_id)
                } else {
                    String::new()
                },
                group_instance_id: if v >= 3 {
                    req.group_instance_id.as_ref().map(s)
                } else {
                    None
                },
                offsets,
                version: v,
            });
            match ask_coordinator(ctx, &group, op).await {
                Ok(GroupAnswer::Commit(r)) if r.len() == n => r,
                Ok(_) => vec![Err(unavailable()); n],
                Err(e) => vec![Err(e); n],
            }
        };
        let mut results = results.into_iter();
        let mut body = TxnOffsetCommitResponse::default();
        for (t, k) in req.topics.iter().zip(refused) {
            let mut tr = TxnOffsetCommitResponseTopic::default();
            tr.name = t.name.clone();
            for (p, refusal) in t.partitions.iter().zip(k) {
                let mut pr = TxnOffsetCommitResponsePartition::default();
                pr.partition_index = p.partition_index;
                pr.error_code = match refusal {
                    Some(e) => e.code(),
                    None => code(&results.next().and_then(|r| r.err())),
                };
                tr.partitions.push(pr);
            }
            body.topics.push(tr);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.topics {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

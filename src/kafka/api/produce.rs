//! Produce (v3–v12): RecordBatch v2 only, acks 0 / 1 / all; a transactional producer's
//! batches with its transactional id (WRITE on it). v10 adds where the leader is to
//! NOT_LEADER_OR_FOLLOWER answers (KIP-951); v11 lets the leader answer
//! TRANSACTION_ABORTABLE; from v12 the producer uses transaction version 2, whose
//! partitions the leader adds to the transaction itself (KIP-890 part 2,
//! `corelog_shards::shard::txn_verify`).
//!
//! Record bytes are never decoded here: each partition's `records` is a `Bytes` slice of
//! the request frame that moves to the owning shard by reference count; the shard
//! validates (CRC-32C, sizes, offsets) and appends. One mesh message per shard, all
//! shards in parallel, results put back in request order. acks=0 sends no response.

use super::admin_change::auto_create;
use super::fan_out::{leader_check, FanOut, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use bytes::Bytes;
use corelog_shards::mesh::{
    Acks, PartitionError, PartitionRequest, ProduceAck, ProduceInput, ProduceTxn, TopicPartition,
};
use corelog_shards::metadata::{validate_topic_name, ClusterMetadata, NotServed};
use corelog_storage::{AppendError, RejectedRecords};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, BrokerId, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Produce v3+ carries exactly one RecordBatch v2 per partition (Kafka's
/// `ProduceRequest.validateRecords`): none, several, or another magic is INVALID_RECORD.
/// So are control batches (only the broker writes transaction markers, as Kafka says). A
/// transactional batch needs the request's transactional id (`transactional`), which
/// the handler has authorized: without one it is TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
/// as Kafka answers. Deeper validation (CRC, sizes, records, the producer's transaction)
/// happens on the owning shard.
fn single_batch(records: &[u8], transactional: bool) -> Result<(), ResponseError> {
    use corelog_storage::batch::{magic, BatchHeader, CURRENT_MAGIC};
    match magic(records) {
        None => return Err(ResponseError::InvalidRecord),
        Some(m) if m != CURRENT_MAGIC => return Err(ResponseError::InvalidRecord),
        Some(_) => {}
    }
    let header = BatchHeader::parse(records).map_err(|_| ResponseError::CorruptMessage)?;
    if header.is_control() {
        return Err(ResponseError::InvalidRecord);
    }
    if header.is_transactional() && !transactional {
        return Err(ResponseError::TransactionalIdAuthorizationFailed);
    }
    match header.total_len().cmp(&records.len()) {
        std::cmp::Ordering::Less => Err(ResponseError::InvalidRecord),
        std::cmp::Ordering::Greater => Err(ResponseError::CorruptMessage),
        std::cmp::Ordering::Equal => Ok(()),
    }
}

/// The records of one partition of this produce that its owning shard should append, or
/// why the partition is answered here instead (checked in Kafka's order).
fn accepted<'r>(
    ctx: &Ctx,
    meta: &ClusterMetadata,
    req: &ProduceRequest,
    name: &str,
    partition: i32,
    records: &'r Option<Bytes>,
) -> Result<&'r Bytes, ResponseError> {
    // Only the broker writes its internal topics (Kafka refuses the same).
    if name == corelog_shards::group::OFFSETS_TOPIC
        || name == corelog_shards::txn::TRANSACTION_TOPIC
        || validate_topic_name(name).is_err()
    {
        return Err(ResponseError::InvalidTopicException);
    }
    leader_check(ctx, meta, name, partition)?;
    let records = records.as_ref().ok_or(ResponseError::InvalidRecord)?;
    single_batch(records, req.transactional_id.is_some())?;
    Ok(records)
}

/// KIP-467: which records made the batch fail, so clients fail only those records
/// and retry or report the rest of the batch as collateral.
fn record_errors(r: &RejectedRecords) -> Vec<BatchIndexAndErrorMessage> {
    r.records
        .iter()
        .map(|(index, message)| {
            let mut e = BatchIndexAndErrorMessage::default();
            e.batch_index = *index;
            e.batch_index_error_message = Some(StrBytes::from_string(message.to_string()));
            e
        })
        .collect()
}

impl PartitionAnswer for PartitionProduceResponse {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }

    fn failed(&mut self, e: &PartitionError) {
        self.error_code = error_code::partition(e).code();
        self.error_message = Some(StrBytes::from_string(e.to_string()));
        if let PartitionError::Append(AppendError::RecordsRejected(r)) = e {
            self.record_errors = record_errors(r);
        }
    }
}

pub struct Produce;

impl Handler for Produce {
    const KEY: ApiKey = ApiKey::Produce;
    const VERSIONS: (i16, i16) = (3, 12);
    type Request = ProduceRequest;
    type Response = ProduceResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        // First, before any other wait: this request's turn among the connection's produce
        // requests, so its batches reach their partitions before those of later requests.
        let turn = call.produce_order.turn().await;
        let acks = Acks::from_wire(req.acks);
        let timeout_ms = u64::try_from(req.timeout_ms).unwrap_or(0);

        // Authorization, per topic (never per batch): WRITE on each topic, and on the
        // transactional id a transactional producer names.
        let access = Access::new(ctx, call);
        let transaction_refused = req
            .transactional_id
            .as_deref()
            .is_some_and(|id| !access.allows(Op::Write, Resource::TransactionalId, id));
        let writable: Vec<bool> = req
            .topic_data
            .iter()
            .map(|t| !transaction_refused && access.allows(Op::Write, Resource::Topic, &t.name.0))
            .collect();

        // Auto-create unknown topics named by a produce, as Kafka's auto.create.topics.enable
        // (with CREATE on the cluster or the topic where ACLs are on).
        if ctx.config.auto_create_topics && acks.is_some() {
            let meta = ctx.shard.metadata.snapshot();
            let missing: Vec<String> = req
                .topic_data
                .iter()
                .zip(&writable)
                .filter(|(_, w)| **w)
                .map(|(t, _)| t.name.0.to_string())
                .filter(|n| meta.topic(n).is_none() && validate_topic_name(n).is_ok())
                .filter(|n| access.may_create_topic(n))
                .collect();
            if !missing.is_empty() {
                auto_create(ctx, &missing).await;
            }
        }
        let meta = ctx.shard.metadata.snapshot();

        let mut fan = FanOut::new(ctx, req.topic_data.len());
        let mut leaders_named = BTreeSet::new();
        for (t, writable) in req.topic_data.iter().zip(writable) {
            let name = t.name.0.as_str();
            let topic: Arc<str> = name.into();
            let authorized = match (writable, transaction_refused) {
                (true, _) => Ok(()),
                (false, true) => Err(ResponseError::TransactionalIdAuthorizationFailed),
                (false, false) => Err(ResponseError::TopicAuthorizationFailed),
            };
            fan.next_topic(t.partition_data.len());
            for p in &t.partition_data {
                let mut out = PartitionProduceResponse::default();
                out.index = p.index;
                out.base_offset = -1;
                out.log_append_time_ms = -1;
                out.log_start_offset = -1;
                let accepted = acks
                    .ok_or(ResponseError::InvalidRequiredAcks)
                    .and(authorized)
                    .and_then(|_| accepted(ctx, &meta, &req, name, p.index, &p.records));
                match accepted {
                    Ok(records) => {
                        let input = ProduceInput {
                            tp: TopicPartition {
                                topic: topic.clone(),
                                partition: p.index,
                            },
                            records: records.clone(),
                        };
                        fan.ask(name, p.index, out, input);
                    }
                    Err(e) => {
                        if let Err(NotServed::NotLeader {
                            leader,
                            leader_epoch,
                        }) = meta.check_leader(ctx.config.node_id, name, p.index)
                        {
                            // KIP-951 (v10+ tagged): where the producer should go.
                            out.current_leader.leader_id = BrokerId(leader);
                            out.current_leader.leader_epoch = leader_epoch;
                            if leader >= 0 {
                                leaders_named.insert(leader);
                            }
                        }
                        fan.refuse(out, e)
                    }
                }
            }
        }

        let transaction = req.transactional_id.as_ref().map(|id| ProduceTxn {
            transactional_id: id.0.as_str().into(),
            version: call.version,
        });
        let answers = match acks {
            Some(acks) => {
                let make = |partitions, reply| PartitionRequest::Produce {
                    acks,
                    timeout_ms,
                    partitions,
                    transaction: transaction.clone(),
                    reply,
                };
                let fill = |slot: &mut PartitionProduceResponse, ack: ProduceAck| {
                    slot.base_offset = ack.base_offset;
                    slot.log_start_offset = ack.log_start_offset;
                };
                fan.call_in_turn(make, turn, fill).await
            }
            // Every partition was refused (INVALID_REQUIRED_ACKS): nothing was asked.
            None => fan.into_parts().0,
        };
        let mut body = ProduceResponse::default();
        // Charged when the connection read the request (its whole size, as Kafka).
        body.throttle_time_ms = call.quota.throttle_time_ms;
        if call.version >= 10 {
            body.node_endpoints =
                super::fan_out::node_endpoints(&meta, &leaders_named, &ctx.listener);
        }
        for (t, parts) in req.topic_data.iter().zip(answers) {
            let mut tr = TopicProduceResponse::default();
            tr.name = t.name.clone();
            tr.partition_responses = parts;
            body.responses.push(tr);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.responses {
            for p in &t.partition_responses {
                each(p.error_code);
            }
        }
    }

    /// acks=0: the client waits for nothing (the quota hold still applies).
    fn responds(request: &Self::Request) -> bool {
        request.acks != 0
    }
}

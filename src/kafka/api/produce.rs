//! Produce (v3–v9): RecordBatch v2 only, acks 0 / 1 / all.
//!
//! Record bytes are never decoded here: each partition's `records` is a `Bytes` slice of
//! the request frame that moves to the owning shard by reference count; the shard
//! validates (CRC-32C, sizes, offsets) and appends. One mesh message per shard, all
//! shards in parallel, results put back in request order. acks=0 sends no response.

use super::controller_call::auto_create;
use super::fan_out::PerShard;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_storage::{AppendError, RejectedRecords};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use shards::mesh::{Acks, PartitionError, PartitionRequest, ProduceInput, TopicPartition};
use shards::metadata::validate_topic_name;
use std::sync::Arc;

/// Produce v3+ carries exactly one RecordBatch v2 per partition (Kafka's
/// `ProduceRequest.validateRecords`): none, several, or another magic is INVALID_RECORD.
/// So are control batches (only the broker writes transaction markers, as Kafka says) and
/// transactional batches (transactions are not implemented: no marker would ever end
/// them). Deeper validation (CRC, sizes, records) happens on the owning shard.
fn single_batch(records: &[u8]) -> Result<(), ResponseError> {
    use corelog_storage::batch::{BatchHeader, CURRENT_MAGIC, LOG_OVERHEAD};
    let magic_at = LOG_OVERHEAD + 4;
    match records.get(magic_at) {
        None => return Err(ResponseError::InvalidRecord),
        Some(m) if *m as i8 != CURRENT_MAGIC => return Err(ResponseError::InvalidRecord),
        Some(_) => {}
    }
    let header = BatchHeader::parse(records).map_err(|_| ResponseError::CorruptMessage)?;
    if header.is_control() || header.is_transactional() {
        return Err(ResponseError::InvalidRecord);
    }
    match header.total_len().cmp(&records.len()) {
        std::cmp::Ordering::Less => Err(ResponseError::InvalidRecord),
        std::cmp::Ordering::Greater => Err(ResponseError::CorruptMessage),
        std::cmp::Ordering::Equal => Ok(()),
    }
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

pub struct Produce;

impl Handler for Produce {
    const KEY: ApiKey = ApiKey::Produce;
    const VERSIONS: (i16, i16) = (3, 9);
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

        // Auto-create unknown topics named by a produce, as Kafka's auto.create.topics.enable.
        if ctx.config.auto_create_topics && acks.is_some() {
            let meta = ctx.shard.metadata.snapshot();
            let missing: Vec<String> = req
                .topic_data
                .iter()
                .map(|t| t.name.0.to_string())
                .filter(|n| meta.topic(n).is_none() && validate_topic_name(n).is_ok())
                .collect();
            if !missing.is_empty() {
                auto_create(ctx, &missing).await;
            }
        }
        let meta = ctx.shard.metadata.snapshot();

        // One response slot per partition, in request order.
        let mut slots: Vec<Vec<PartitionProduceResponse>> =
            Vec::with_capacity(req.topic_data.len());
        let mut per_shard = PerShard::new(ctx.shard.shard_count());
        for (ti, t) in req.topic_data.iter().enumerate() {
            let name = t.name.0.as_str();
            let topic: Arc<str> = name.into();
            let mut parts = Vec::with_capacity(t.partition_data.len());
            for (pi, p) in t.partition_data.iter().enumerate() {
                let mut out = PartitionProduceResponse::default();
                out.index = p.index;
                out.base_offset = -1;
                out.log_append_time_ms = -1;
                out.log_start_offset = -1;
                let error = match (acks, &p.records) {
                    (None, _) => Some(ResponseError::InvalidRequiredAcks),
                    _ if req.transactional_id.is_some() => {
                        Some(ResponseError::TransactionalIdAuthorizationFailed)
                    }
                    // Only the broker writes its internal topics (Kafka refuses the same).
                    _ if name == shards::group::OFFSETS_TOPIC => {
                        Some(ResponseError::InvalidTopicException)
                    }
                    _ if validate_topic_name(name).is_err() => {
                        Some(ResponseError::InvalidTopicException)
                    }
                    _ if meta
                        .check_leader(ctx.config.node_id, name, p.index)
                        .is_err() =>
                    {
                        meta.check_leader(ctx.config.node_id, name, p.index)
                            .err()
                            .map(|e| error_code::not_served(&e))
                    }
                    (_, None) => Some(ResponseError::InvalidRecord),
                    (_, Some(records)) if single_batch(records).is_err() => {
                        single_batch(records).err()
                    }
                    (Some(_), Some(records)) => {
                        let input = ProduceInput {
                            tp: TopicPartition {
                                topic: topic.clone(),
                                partition: p.index,
                            },
                            records: records.clone(),
                        };
                        per_shard.push(ctx.shard.owner_of(name, p.index), (ti, pi), input);
                        None
                    }
                };
                if let Some(e) = error {
                    out.error_code = e.code();
                }
                parts.push(out);
            }
            slots.push(parts);
        }

        if let Some(acks) = acks {
            let make = |partitions, reply| PartitionRequest::Produce {
                acks,
                timeout_ms,
                partitions,
                reply,
            };
            let answers = per_shard.call_in_turn(&ctx.shard, make, turn).await;
            for ((ti, pi), answer) in answers {
                let Some(slot) = slots.get_mut(ti).and_then(|t| t.get_mut(pi)) else {
                    continue;
                };
                match answer.map(|o| o.result) {
                    Some(Ok(ack)) => {
                        slot.base_offset = ack.base_offset;
                        slot.log_start_offset = ack.log_start_offset;
                    }
                    Some(Err(e)) => {
                        slot.error_code = error_code::partition(&e).code();
                        slot.error_message = Some(StrBytes::from_string(e.to_string()));
                        if let PartitionError::Append(AppendError::RecordsRejected(r)) = &e {
                            slot.record_errors = record_errors(r);
                        }
                    }
                    None => slot.error_code = ResponseError::NotLeaderOrFollower.code(),
                }
            }
        }
        for _p in slots.iter().flatten() {}
        let mut body = ProduceResponse::default();
        // Charged when the connection read the request (its whole size, as Kafka).
        body.throttle_time_ms = call.quota.throttle_time_ms;
        for (t, parts) in req.topic_data.iter().zip(slots) {
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

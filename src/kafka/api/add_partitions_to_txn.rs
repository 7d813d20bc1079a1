//! AddPartitionsToTxn (v0–v5): a transactional producer adds the partitions it is about
//! to write to its transaction, so that the coordinator writes their markers when the
//! transaction ends.
//!
//! Checked before the coordinator is asked, in Kafka's order: WRITE on the transactional
//! id (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED); then per partition
//! WRITE on its topic (TOPIC_AUTHORIZATION_FAILED) and its existence
//! (UNKNOWN_TOPIC_OR_PARTITION). If any partition fails, none is added and the others are
//! answered OPERATION_NOT_ATTEMPTED; otherwise every partition gets the coordinator's
//! one answer. PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH before v2.
//!
//! Version 4 is the partition leaders' (KIP-890 part 1): batched by transaction, from a
//! broker (CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED for the whole request), each
//! transaction either verified (verifyOnly: per partition, whether it is in the ongoing
//! transaction) or added for a version 2 producer. Version 5 is version 4 that may
//! answer TRANSACTION_ABORTABLE (KIP-890).

use super::handler::{Call, Handler};
use super::txn_routing::{added, ask_coordinator};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::txn::rules::{self, ProducerIdEpoch, TxnApi, TxnError};
use corelog_shards::txn::state::TxnPartition;
use corelog_shards::txn::types::{AddMode, TxnAnswer, TxnOp};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};

pub struct AddPartitionsToTxn;

impl Handler for AddPartitionsToTxn {
    const KEY: ApiKey = ApiKey::AddPartitionsToTxn;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = AddPartitionsToTxnRequest;
    type Response = AddPartitionsToTxnResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        if call.version >= 4 {
            return Ok(from_brokers(ctx, req, call).await);
        }
        let id = req.v3_and_below_transactional_id.0.to_string();
        let partitions: BTreeSet<TxnPartition> = req
            .v3_and_below_topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
            .collect();
        let access = Access::new(ctx, call);
        let codes: BTreeMap<TxnPartition, i16> =
            if !access.allows(Op::Write, Resource::TransactionalId, &id) {
                let code = ResponseError::TransactionalIdAuthorizationFailed.code();
                partitions.iter().map(|p| (p.clone(), code)).collect()
            } else {
                let meta = ctx.shard.metadata.snapshot();
                let mut failed = BTreeMap::new();
                for (topic, p) in &partitions {
                    let code = if !access.allows(Op::Write, Resource::Topic, topic) {
                        Some(ResponseError::TopicAuthorizationFailed)
                    } else if meta.partition(topic, *p).is_none() {
                        Some(ResponseError::UnknownTopicOrPartition)
                    } else {
                        None
                    };
                    if let Some(code) = code {
                        failed.insert((topic.clone(), *p), code.code());
                    }
                }
                if !failed.is_empty() {
                    rules::reject_transaction(&failed, &partitions)
                } else {
                    let op = TxnOp::AddPartitions {
                        transactional_id: id,
                        producer: ProducerIdEpoch::new(
                            req.v3_and_below_producer_id.0,
                            req.v3_and_below_producer_epoch,
                        ),
                        partitions: partitions.clone(),
                        mode: AddMode::Client,
                    };
                    let outcome = added(ask_coordinator(ctx, op).await)
                        .map_err(|e| TxnApi::AddPartitionsToTxn.error_for_version(e, call.version));
                    let code = match outcome {
                        Ok(()) => 0,
                        Err(e) => error_code::txn(e).code(),
                    };
                    partitions.iter().map(|p| (p.clone(), code)).collect()
                }
            };
        let mut body = AddPartitionsToTxnResponse::default();
        body.results_by_topic_v3_and_below = topic_results(codes);
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        let by_transaction = r
            .results_by_transaction
            .iter()
            .flat_map(|t| &t.topic_results);
        for t in r.results_by_topic_v3_and_below.iter().chain(by_transaction) {
            for p in &t.results_by_partition {
                each(p.partition_error_code);
            }
        }
    }
}

/// Version 4: each transaction verified or added by its coordinator, all at once.
async fn from_brokers(
    ctx: &Ctx,
    req: AddPartitionsToTxnRequest,
    call: &Call<'_>,
) -> AddPartitionsToTxnResponse {
    let mut body = AddPartitionsToTxnResponse::default();
    if !Access::new(ctx, call).allows_cluster(Op::ClusterAction) {
        body.error_code = ResponseError::ClusterAuthorizationFailed.code();
        return body;
    }
    let asks = req.transactions.iter().map(|t| async move {
        let partitions: BTreeSet<TxnPartition> = t
            .topics
            .iter()
            .flat_map(|topic| {
                topic
                    .partitions
                    .iter()
                    .map(move |p| (topic.name.0.to_string(), *p))
            })
            .collect();
        let op = TxnOp::AddPartitions {
            transactional_id: t.transactional_id.0.to_string(),
            producer: ProducerIdEpoch::new(t.producer_id.0, t.producer_epoch),
            partitions: partitions.clone(),
            mode: if t.verify_only {
                AddMode::Verify
            } else {
                AddMode::Implicit
            },
        };
        let codes: BTreeMap<TxnPartition, i16> = match ask_coordinator(ctx, op).await {
            Ok(TxnAnswer::Verified(Ok(map))) => map
                .into_iter()
                .map(|(p, e)| (p, e.map_or(0, |e| error_code::txn(e).code())))
                .collect(),
            Ok(TxnAnswer::Added(Ok(()))) => rules::answer_all(&partitions, Ok(())),
            Ok(TxnAnswer::Verified(Err(e)) | TxnAnswer::Added(Err(e))) | Err(e) => partitions
                .iter()
                .map(|p| (p.clone(), error_code::txn(e).code()))
                .collect(),
            Ok(_) => rules::answer_all(&partitions, Err(TxnError::UnknownServerError)),
        };
        let mut result = AddPartitionsToTxnResult::default();
        result.transactional_id = t.transactional_id.clone();
        result.topic_results = topic_results(codes);
        result
    });
    body.results_by_transaction = futures::future::join_all(asks).await;
    body
}

/// Per-partition codes as a response's topic results.
fn topic_results(codes: BTreeMap<TxnPartition, i16>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for ((topic, p), code) in codes {
        let mut r = AddPartitionsToTxnPartitionResult::default();
        r.partition_index = p;
        r.partition_error_code = code;
        by_topic.entry(topic).or_default().push(r);
    }
    by_topic
        .into_iter()
        .map(|(topic, results)| {
            let mut t = AddPartitionsToTxnTopicResult::default();
            t.name = TopicName(StrBytes::from_string(topic));
            t.results_by_partition = results;
            t
        })
        .collect()
}

//! AddPartitionsToTxn (v0–v3): a transactional producer adds the partitions it is about
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
//! Versions 4 and 5 are the partition leaders' (batched, verify-only or transaction
//! version 2 adds, KIP-890) and are not served yet.

use super::handler::{Call, Handler};
use super::txn_routing::{added, ask_coordinator};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::txn::rules::{self, ProducerIdEpoch, TxnApi};
use corelog_shards::txn::state::TxnPartition;
use corelog_shards::txn::types::{AddMode, TxnOp};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
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
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = AddPartitionsToTxnRequest;
    type Response = AddPartitionsToTxnResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
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
        let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> =
            BTreeMap::new();
        for ((topic, p), code) in codes {
            let mut r = AddPartitionsToTxnPartitionResult::default();
            r.partition_index = p;
            r.partition_error_code = code;
            by_topic.entry(topic).or_default().push(r);
        }
        let mut body = AddPartitionsToTxnResponse::default();
        for (topic, results) in by_topic {
            let mut t = AddPartitionsToTxnTopicResult::default();
            t.name = TopicName(StrBytes::from_string(topic));
            t.results_by_partition = results;
            body.results_by_topic_v3_and_below.push(t);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for t in &r.results_by_topic_v3_and_below {
            for p in &t.results_by_partition {
                each(p.partition_error_code);
            }
        }
    }
}

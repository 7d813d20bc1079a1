//! InitProducerId (v0–v5): gives an idempotent producer its id and epoch.
//!
//! Without a transactional id Kafka always hands out a fresh producer id with epoch 0,
//! whatever id and epoch the request carries (v3+ carry them for transactional
//! producers). Ids come from the shard's block (`corelog_shards::producer_ids`), which the
//! controller persisted before handing it out, so an id is never reused, even across a
//! restart; a producer that re-initialises after an error gets a new id and its old
//! sequences no longer matter.
//!
//! With a transactional id the id's coordinator answers (`corelog_shards::txn`): it
//! needs WRITE on the id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), bumps the id's epoch
//! (fencing older instances; an ongoing transaction is aborted first and the client
//! answered CONCURRENT_TRANSACTIONS meanwhile), and from v3 resumes the producer the
//! client names (KIP-360). An empty id is INVALID_REQUEST, as Kafka answers;
//! PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4; v5 only
//! lets the answer be TRANSACTION_ABORTABLE, which this coordinator never gives here.

use super::handler::{Call, Handler};
use super::txn_routing::{ask_coordinator, producer};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource, CLUSTER_NAME};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::txn::rules::{expected_producer, TxnApi};
use corelog_shards::txn::types::TxnOp;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

pub struct InitProducerId;

impl Handler for InitProducerId {
    const KEY: ApiKey = ApiKey::InitProducerId;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = InitProducerIdRequest;
    type Response = InitProducerIdResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = InitProducerIdResponse::default();
        body.producer_id = ProducerId(-1);
        body.producer_epoch = -1;
        // An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some
        // topic (KIP-679), as Kafka asks.
        let access = Access::new(ctx, call);
        let idempotent_allowed = || {
            access.may(Op::IdempotentWrite, Resource::Cluster, CLUSTER_NAME)
                || access.may_on_any(Op::Write, Resource::Topic)
        };
        let outcome = match req.transactional_id.as_ref().map(|t| t.0.as_str()) {
            Some("") => Err(ResponseError::InvalidRequest),
            Some(id) if !access.allows(Op::Write, Resource::TransactionalId, id) => {
                Err(ResponseError::TransactionalIdAuthorizationFailed)
            }
            Some(id) => {
                let answer = match expected_producer(req.producer_id.0, req.producer_epoch) {
                    Err(e) => Err(e),
                    Ok(expected) => {
                        let op = TxnOp::InitProducerId {
                            transactional_id: id.to_owned(),
                            timeout_ms: req.transaction_timeout_ms,
                            expected: if call.version >= 3 { expected } else { None },
                        };
                        producer(ask_coordinator(ctx, op).await)
                    }
                };
                match answer {
                    Ok(p) => {
                        body.producer_id = ProducerId(p.producer_id);
                        body.producer_epoch = p.epoch;
                        return Ok(body);
                    }
                    Err(e) => Err(error_code::txn(
                        TxnApi::InitProducerId.error_for_version(e, call.version),
                    )),
                }
            }
            None if !idempotent_allowed() => {
                access.audit(Op::IdempotentWrite, Resource::Cluster, CLUSTER_NAME);
                Err(ResponseError::ClusterAuthorizationFailed)
            }
            None => ctx
                .shard
                .producer_ids
                .allocate(&ctx.shard.peers)
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "no producer id could be allocated");
                    // Retriable: the client asks again.
                    ResponseError::CoordinatorNotAvailable
                }),
        };
        match outcome {
            Ok(id) => {
                body.producer_id = ProducerId(id);
                body.producer_epoch = 0;
            }
            Err(e) => body.error_code = e.code(),
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

//! EndTxn (v0–v5): commits or aborts the producer's transaction. Answered once the
//! coordinator has durably prepared the end; the markers and the completion follow, and
//! the id answers CONCURRENT_TRANSACTIONS (retriable) until they are written.
//!
//! Needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
//! PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to clients before v2. Version 5
//! is transaction version 2 (KIP-890 part 2): every end bumps the epoch, and the answer
//! carries the producer id and epoch the client goes on with.

use super::handler::{Call, Handler};
use super::txn_routing::{ask_coordinator, producer};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::txn::rules::{ProducerIdEpoch, TxnApi, TxnOutcome};
use corelog_shards::txn::types::TxnOp;
use kafka_protocol::messages::{ApiKey, EndTxnRequest, EndTxnResponse, ProducerId};
use kafka_protocol::ResponseError;

pub struct EndTxn;

impl Handler for EndTxn {
    const KEY: ApiKey = ApiKey::EndTxn;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = EndTxnRequest;
    type Response = EndTxnResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let id = req.transactional_id.0.to_string();
        let mut body = EndTxnResponse::default();
        body.producer_id = ProducerId(-1);
        body.producer_epoch = -1;
        if !Access::new(ctx, call).allows(Op::Write, Resource::TransactionalId, &id) {
            body.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
            return Ok(body);
        }
        let op = TxnOp::EndTxn {
            transactional_id: id,
            producer: ProducerIdEpoch::new(req.producer_id.0, req.producer_epoch),
            outcome: if req.committed {
                TxnOutcome::Commit
            } else {
                TxnOutcome::Abort
            },
            tv2: TxnApi::EndTxn.is_tv2(call.version),
        };
        match producer(ask_coordinator(ctx, op).await) {
            Ok(p) => {
                body.producer_id = ProducerId(p.producer_id);
                body.producer_epoch = p.epoch;
            }
            Err(e) => {
                body.error_code =
                    error_code::txn(TxnApi::EndTxn.error_for_version(e, call.version)).code()
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

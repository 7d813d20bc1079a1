//! AddOffsetsToTxn (v0–v4): adds the group's `__consumer_offsets` partition to the
//! producer's transaction, so that offsets it commits in the transaction
//! (TxnOffsetCommit) are committed or dropped with it.
//!
//! Needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on
//! the group (GROUP_AUTHORIZATION_FAILED), as Kafka asks. PRODUCER_FENCED is answered as
//! INVALID_PRODUCER_EPOCH to clients before v2.

use super::handler::{Call, Handler};
use super::txn_routing::{added, ask_coordinator};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::txn::rules::{ProducerIdEpoch, TxnApi};
use corelog_shards::txn::types::TxnOp;
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey};
use kafka_protocol::ResponseError;

pub struct AddOffsetsToTxn;

impl Handler for AddOffsetsToTxn {
    const KEY: ApiKey = ApiKey::AddOffsetsToTxn;
    const VERSIONS: (i16, i16) = (0, 4);
    type Request = AddOffsetsToTxnRequest;
    type Response = AddOffsetsToTxnResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let id = req.transactional_id.0.to_string();
        let group = req.group_id.0.to_string();
        let access = Access::new(ctx, call);
        let code = if !access.allows(Op::Write, Resource::TransactionalId, &id) {
            ResponseError::TransactionalIdAuthorizationFailed.code()
        } else if !access.allows(Op::Read, Resource::Group, &group) {
            ResponseError::GroupAuthorizationFailed.code()
        } else {
            let op = TxnOp::AddOffsets {
                transactional_id: id,
                producer: ProducerIdEpoch::new(req.producer_id.0, req.producer_epoch),
                group,
            };
            match added(ask_coordinator(ctx, op).await) {
                Ok(()) => 0,
                Err(e) => {
                    error_code::txn(TxnApi::AddOffsetsToTxn.error_for_version(e, call.version))
                        .code()
                }
            }
        };
        let mut body = AddOffsetsToTxnResponse::default();
        body.error_code = code;
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

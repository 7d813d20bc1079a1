//! ListTransactions (v0–v1, KIP-664 and KIP-994): the transactional ids this broker
//! coordinates, filtered by state, producer id and (v1) how long their transaction has
//! been running; the admin client asks every broker.
//!
//! While any `__transaction_state` partition of this broker loads, the answer is
//! COORDINATOR_LOAD_IN_PROGRESS with nothing listed, as Kafka's.
//!
//! Only ids the principal may DESCRIBE are listed (the others are left out, as Kafka
//! does). State names this broker does not know are answered in
//! `unknown_state_filters`.

use super::describe_transactions::wire_id;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::ShardMessage;
use corelog_shards::txn::state::TxnState;
use corelog_shards::txn::types::{TxnAnswer, TxnOp};
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ApiKey, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct ListTransactions;

impl Handler for ListTransactions {
    const KEY: ApiKey = ApiKey::ListTransactions;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = ListTransactionsRequest;
    type Response = ListTransactionsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ListTransactionsResponse::default();
        let mut states = Vec::new();
        for s in &req.state_filters {
            match TxnState::from_name(s) {
                Some(_) => states.push(s.to_string()),
                None => body.unknown_state_filters.push(s.clone()),
            }
        }
        // Only unknown names were given: nothing can match.
        if states.is_empty() && !req.state_filters.is_empty() {
            return Ok(body);
        }
        let op = |reply| ShardMessage::Txn {
            op: TxnOp::List {
                states: states.clone(),
                producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
                min_duration_ms: if call.version >= 1 {
                    req.duration_filter
                } else {
                    -1
                },
            },
            reply,
        };
        let access = Access::new(ctx, call);
        for answer in ctx.shard.peers.call_each(op).await {
            match answer {
                Some(TxnAnswer::Listed(Err(e))) => {
                    // One shard still loading: answered as Kafka does, nothing listed
                    // (the admin client retries).
                    body.error_code = crate::kafka::error_code::txn(e).code();
                    body.transaction_states.clear();
                    return Ok(body);
                }
                Some(TxnAnswer::Listed(Ok(list))) => {
                    for d in list {
                        if !access.may(Op::Describe, Resource::TransactionalId, &d.transactional_id)
                        {
                            continue;
                        }
                        let mut s = TransactionState::default();
                        s.transactional_id = wire_id(&d.transactional_id);
                        s.producer_id = ProducerId(d.producer_id);
                        s.transaction_state = StrBytes::from_static_str(d.state);
                        body.transaction_states.push(s);
                    }
                }
                // A shard that did not answer (shutting down): what the others hold is
                // still listed, with the error said.
                _ => body.error_code = ResponseError::CoordinatorNotAvailable.code(),
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

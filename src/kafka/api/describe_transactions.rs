//! DescribeTransactions (v0, KIP-664): the state of transactional ids this broker
//! coordinates — state, producer id and epoch, timeout, start time and partitions.
//!
//! Needs DESCRIBE on each id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); the partitions of
//! topics the principal may not DESCRIBE are left out, as Kafka leaves them out. An id
//! this broker does not coordinate is NOT_COORDINATOR, an unknown one
//! TRANSACTIONAL_ID_NOT_FOUND.

use super::handler::{Call, Handler};
use super::txn_routing::ask_shard;
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::metadata::NotServed;
use corelog_shards::txn::rules::TxnError;
use corelog_shards::txn::types::{TxnAnswer, TxnDescription, TxnOp};
use corelog_shards::txn::TRANSACTION_TOPIC;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, HashMap};

pub struct DescribeTransactions;

impl Handler for DescribeTransactions {
    const KEY: ApiKey = ApiKey::DescribeTransactions;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DescribeTransactionsRequest;
    type Response = DescribeTransactionsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let access = Access::new(ctx, call);
        let meta = ctx.shard.metadata.snapshot();
        let mut found: HashMap<String, Result<TxnDescription, TxnError>> = HashMap::new();
        let mut by_shard: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for id in &req.transactional_ids {
            let id = id.0.to_string();
            let partition = ctx.shard.txns.partition_of(&id);
            match meta.check_leader(ctx.config.node_id, TRANSACTION_TOPIC, partition) {
                Ok(()) => by_shard
                    .entry(ctx.shard.txn_coordinator_of(&id))
                    .or_default()
                    .push(id),
                Err(NotServed::NotLeader { leader, .. }) if leader >= 0 => {
                    found.insert(id, Err(TxnError::NotCoordinator));
                }
                Err(_) => {
                    found.insert(id, Err(TxnError::CoordinatorNotAvailable));
                }
            }
        }
        let asks = by_shard.into_iter().map(|(shard, ids)| async move {
            let answer = ask_shard(ctx, shard, TxnOp::Describe { ids: ids.clone() }).await;
            (ids, answer)
        });
        for (ids, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(TxnAnswer::Described(list)) => found.extend(list),
                Ok(_) => found.extend(
                    ids.into_iter()
                        .map(|i| (i, Err(TxnError::UnknownServerError))),
                ),
                Err(e) => found.extend(ids.into_iter().map(|i| (i, Err(e)))),
            }
        }
        let mut body = DescribeTransactionsResponse::default();
        for id in &req.transactional_ids {
            let mut s = TransactionState::default();
            s.transactional_id = id.clone();
            s.producer_id = ProducerId(-1);
            s.producer_epoch = -1;
            s.transaction_start_time_ms = -1;
            if !access.allows(Op::Describe, Resource::TransactionalId, &id.0) {
                s.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
                body.transaction_states.push(s);
                continue;
            }
            match found.get(id.0.as_str()) {
                Some(Ok(d)) => {
                    s.transaction_state = StrBytes::from_static_str(d.state);
                    s.transaction_timeout_ms = d.timeout_ms;
                    s.transaction_start_time_ms = d.start_ms;
                    s.producer_id = ProducerId(d.producer_id);
                    s.producer_epoch = d.producer_epoch;
                    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                    for (t, p) in &d.partitions {
                        if access.may(Op::Describe, Resource::Topic, t) {
                            topics.entry(t.as_str()).or_default().push(*p);
                        }
                    }
                    for (t, ps) in topics {
                        let mut td = TopicData::default();
                        td.topic = TopicName(StrBytes::from_string(t.to_owned()));
                        td.partitions = ps;
                        s.topics.push(td);
                    }
                }
                Some(Err(e)) => s.error_code = error_code::txn(*e).code(),
                None => s.error_code = ResponseError::CoordinatorNotAvailable.code(),
            }
            body.transaction_states.push(s);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for s in &r.transaction_states {
            each(s.error_code);
        }
    }
}

/// The wire name of a transactional id.
pub(super) fn wire_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_owned()))
}

//! FindCoordinator (v0–v6): a group's coordinator is the broker leading the group's
//! `__consumer_offsets` partition, a transactional id's the broker leading the id's
//! `__transaction_state` partition, and (v6, KIP-932) a share partition's — key
//! `group:topicId:partition` — the broker leading its `__share_group_state` partition
//! (each topic created on the first request for it, `admin_change`);
//! COORDINATOR_NOT_AVAILABLE while that partition has no leader. DESCRIBE on the group
//! (GROUP_AUTHORIZATION_FAILED) or the transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is needed, and for a share partition, which
//! only brokers ask for, CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED),
//! as Kafka asks; another key type, or a share key before v6 or malformed, is
//! INVALID_REQUEST.

use super::group_routing::sb;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// What a FindCoordinator key names (its key type).
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyType {
    Group,
    Transaction,
    Share,
}

impl KeyType {
    /// Kafka's key types: 0 a group, 1 a transactional id, 2 (v6) a share partition;
    /// anything else is INVALID_REQUEST.
    fn from_wire(key_type: i8, version: i16) -> Option<KeyType> {
        match key_type {
            0 => Some(KeyType::Group),
            1 => Some(KeyType::Transaction),
            2 if version >= 6 => Some(KeyType::Share),
            _ => None,
        }
    }

    /// The internal topic whose partition leaders coordinate these keys.
    fn topic(self) -> &'static str {
        match self {
            KeyType::Group => corelog_shards::group::OFFSETS_TOPIC,
            KeyType::Transaction => corelog_shards::txn::TRANSACTION_TOPIC,
            KeyType::Share => corelog_shards::share::coordinator::SHARE_STATE_TOPIC,
        }
    }
}

pub struct FindCoordinator;

impl Handler for FindCoordinator {
    const KEY: ApiKey = ApiKey::FindCoordinator;
    const VERSIONS: (i16, i16) = (0, 6);
    type Request = FindCoordinatorRequest;
    type Response = FindCoordinatorResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let v = call.version;
        let keys: Vec<String> = if v >= 4 {
            req.coordinator_keys.iter().map(|k| k.to_string()).collect()
        } else {
            vec![req.key.to_string()]
        };
        let kind = KeyType::from_wire(req.key_type, v);
        let ensured = match kind {
            Some(KeyType::Group) => super::admin_change::ensure_offsets_topic(ctx).await,
            Some(KeyType::Transaction) => super::admin_change::ensure_transaction_topic(ctx).await,
            Some(KeyType::Share) => super::admin_change::ensure_share_state_topic(ctx).await,
            None => Ok(()),
        };
        if let (Err(e), Some(kind)) = (ensured, kind) {
            tracing::warn!(error = %e, "creating {}", kind.topic());
        }
        let meta = ctx.shard.metadata.snapshot();
        let access = Access::new(ctx, call);
        // Kafka's error answer names no coordinator.
        let answer = |key: &str| -> (i32, StrBytes, i32, i16, Option<StrBytes>) {
            let refuse =
                |e: ResponseError, m: String| (-1, sb(String::new()), -1, e.code(), Some(sb(m)));
            let Some(kind) = kind else {
                return refuse(
                    ResponseError::InvalidRequest,
                    "unknown coordinator key type".to_owned(),
                );
            };
            let (partition, allowed) = match kind {
                KeyType::Group => (
                    ctx.shard.groups.offsets_partition(key),
                    access.allows(Op::Describe, Resource::Group, key),
                ),
                KeyType::Transaction => (
                    ctx.shard.txns.partition_of(key),
                    access.allows(Op::Describe, Resource::TransactionalId, key),
                ),
                KeyType::Share => {
                    let Some(share) =
                        corelog_shards::share::coordinator::parse_coordinator_key(key)
                    else {
                        return refuse(
                            ResponseError::InvalidRequest,
                            format!(
                                "{key:?} is not a share coordinator key (group:topicId:partition)"
                            ),
                        );
                    };
                    (
                        ctx.shard.share_state.partition_of(&share),
                        access.allows_cluster(Op::ClusterAction),
                    )
                }
            };
            if !allowed {
                return match kind {
                    KeyType::Group => refuse(
                        ResponseError::GroupAuthorizationFailed,
                        "Group authorization failed.".to_owned(),
                    ),
                    KeyType::Transaction => refuse(
                        ResponseError::TransactionalIdAuthorizationFailed,
                        "Transactional Id authorization failed.".to_owned(),
                    ),
                    KeyType::Share => refuse(
                        ResponseError::ClusterAuthorizationFailed,
                        "Cluster authorization failed.".to_owned(),
                    ),
                };
            }
            let topic = kind.topic();
            let leader = meta
                .partition(topic, partition)
                .map(|p| p.leader)
                .and_then(|l| meta.broker(l).filter(|b| !b.fenced));
            let reach = leader.and_then(|b| Some((b.id, b.endpoint_on(&ctx.listener)?)));
            match reach {
                Some((id, (host, port))) => (id, sb(host.to_string()), i32::from(port), 0, None),
                None if leader.is_some() => refuse(
                    ResponseError::CoordinatorNotAvailable,
                    format!("the coordinator has no listener {}", ctx.listener),
                ),
                None => refuse(
                    ResponseError::CoordinatorNotAvailable,
                    format!("partition {partition} of {topic} has no leader"),
                ),
            }
        };
        let mut body = FindCoordinatorResponse::default();
        if v >= 4 {
            for key in &req.coordinator_keys {
                let (node_id, host, port, code, message) = answer(key.as_str());
                let mut c = Coordinator::default();
                c.key = key.clone();
                c.node_id = BrokerId(node_id);
                c.host = host;
                c.port = port;
                c.error_code = code;
                c.error_message = message;
                body.coordinators.push(c);
            }
        } else {
            let (node_id, host, port, code, message) =
                answer(keys.first().map_or("", String::as_str));
            body.error_code = code;
            body.error_message = message;
            body.node_id = BrokerId(node_id);
            body.host = host;
            body.port = port;
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for c in &r.coordinators {
            each(c.error_code);
        }
    }
}

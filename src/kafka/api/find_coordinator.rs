//! FindCoordinator (v0–v4): a group's coordinator is the broker leading the group's
//! `__consumer_offsets` partition (created on the first request, `admin_change`);
//! COORDINATOR_NOT_AVAILABLE while that partition has no leader. A transactional id is
//! refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, another key type INVALID_REQUEST.

use super::group_routing::sb;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// FindCoordinator's key types: 0 a group, 1 a transactional id. Transactions are not
/// implemented, so a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the
/// code InitProducerId and Produce give it too. It is fatal for librdkafka and the Java
/// client alike, so a transactional producer fails at once with an error that says what
/// is refused, instead of retrying the retriable COORDINATOR_NOT_AVAILABLE until its
/// own timeout. Any other key type is INVALID_REQUEST, as Kafka answers.
fn coordinator_key_error(key_type: i8) -> Option<ResponseError> {
    match key_type {
        0 => None,
        1 => Some(ResponseError::TransactionalIdAuthorizationFailed),
        _ => Some(ResponseError::InvalidRequest),
    }
}

fn coordinator_message(e: ResponseError) -> String {
    match e {
        ResponseError::TransactionalIdAuthorizationFailed => {
            "transactions are not supported by this broker".to_owned()
        }
        _ => "unknown coordinator key type".to_owned(),
    }
}

pub struct FindCoordinator;

impl Handler for FindCoordinator {
    const KEY: ApiKey = ApiKey::FindCoordinator;
    const VERSIONS: (i16, i16) = (0, 4);
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
        let error = coordinator_key_error(req.key_type);
        if error.is_none() {
            if let Err(e) = super::admin_change::ensure_offsets_topic(ctx).await {
                tracing::warn!(error = %e, "creating {}", corelog_shards::group::OFFSETS_TOPIC);
            }
        }
        let meta = ctx.shard.metadata.snapshot();
        let access = Access::new(ctx, call);
        // Kafka's error answer names no coordinator.
        let answer = |key: &str| -> (i32, StrBytes, i32, i16, Option<StrBytes>) {
            let refuse =
                |e: ResponseError, m: String| (-1, sb(String::new()), -1, e.code(), Some(sb(m)));
            if let Some(e) = error {
                return refuse(e, coordinator_message(e));
            }
            if !access.allows(Op::Describe, Resource::Group, key) {
                return refuse(
                    ResponseError::GroupAuthorizationFailed,
                    "Group authorization failed.".to_owned(),
                );
            }
            let partition = ctx.shard.groups.offsets_partition(key);
            let leader = meta
                .partition(corelog_shards::group::OFFSETS_TOPIC, partition)
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
                    format!(
                        "partition {partition} of {} has no leader",
                        corelog_shards::group::OFFSETS_TOPIC
                    ),
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

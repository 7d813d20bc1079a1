//! FindCoordinator (v0–v4): this single node coordinates every group (the routing to
//! the group's coordinator core happens inside, see `group_routing`); a transactional id
//! is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, another key type INVALID_REQUEST.

use super::group_routing::sb;
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::*;
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
        let error = coordinator_key_error(req.key_type);
        // Kafka's error answer names no coordinator.
        let (node_id, host, port, code, message) = match error {
            None => (
                ctx.config.node_id,
                sb(ctx.config.advertise_host.clone()),
                ctx.config.advertise_port,
                0,
                None,
            ),
            Some(e) => (
                -1,
                sb(String::new()),
                -1,
                e.code(),
                Some(sb(coordinator_message(e))),
            ),
        };
        let mut body = FindCoordinatorResponse::default();
        if v >= 4 {
            for key in &req.coordinator_keys {
                let mut c = Coordinator::default();
                c.key = key.clone();
                c.node_id = BrokerId(node_id);
                c.host = host.clone();
                c.port = port;
                c.error_code = code;
                c.error_message = message.clone();
                body.coordinators.push(c);
            }
        } else {
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

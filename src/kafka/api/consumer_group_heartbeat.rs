//! ConsumerGroupHeartbeat (v0–v1, KIP-848): a consumer-protocol member joins, stays,
//! reconciles its partitions and leaves through this one API; the group's coordinator
//! computes the assignment (`corelog_shards::group::consumer`).
//!
//! As Kafka: the principal needs READ on the group (GROUP_AUTHORIZATION_FAILED) and
//! DESCRIBE on every topic it names (TOPIC_AUTHORIZATION_FAILED), checked before the
//! group hears of the request. The topics a pattern matches are filtered by the
//! principal's DESCRIBE right as the group's coordinator resolves the pattern (Kafka's
//! `TopicRegexResolver`): the heartbeat carries the check. v1 members name themselves
//! (a UUID the client makes); v0 members joining get an id from the coordinator.

use super::group_routing::{ask_coordinator_to_read, s, sb, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::group::consumer::assignment::Assignment;
use corelog_shards::group::consumer::group::Heartbeat;
use corelog_shards::group::types::{GroupAnswer, GroupError, GroupOp};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as WireAssignment, TopicPartitions,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct ConsumerGroupHeartbeat;

impl Handler for ConsumerGroupHeartbeat {
    const KEY: ApiKey = ApiKey::ConsumerGroupHeartbeat;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = ConsumerGroupHeartbeatRequest;
    type Response = ConsumerGroupHeartbeatResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ConsumerGroupHeartbeatResponse::default();
        // A cluster whose group.version is 0 does not serve the protocol (Kafka's answer).
        if !super::consumer_protocol_enabled(ctx) {
            body.error_code = ResponseError::UnsupportedVersion.code();
            body.member_epoch = -1;
            return Ok(body);
        }
        let group = s(&req.group_id.0);
        let access = Access::new(ctx, call);
        let names: Option<Vec<String>> = req
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| s(&t.0)).collect());
        if access.allows(Op::Read, Resource::Group, &group)
            && !names
                .iter()
                .flatten()
                .all(|t| access.allows(Op::Describe, Resource::Topic, t))
        {
            body.error_code = ResponseError::TopicAuthorizationFailed.code();
            body.member_epoch = -1;
            return Ok(body);
        }
        let heartbeat = Heartbeat {
            version: call.version,
            member_id: s(&req.member_id),
            member_epoch: req.member_epoch,
            instance_id: req.instance_id.as_ref().map(s),
            rack_id: req.rack_id.as_ref().map(s),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            subscribed_topic_names: names,
            subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(s),
            server_assignor: req.server_assignor.as_ref().map(s),
            owned: req.topic_partitions.as_ref().map(|tps| {
                Assignment::from_partitions(
                    tps.iter()
                        .flat_map(|tp| tp.partitions.iter().map(move |p| (tp.topic_id, *p))),
                )
            }),
            client_id: call.header.client_id.as_ref().map(s).unwrap_or_default(),
            client_host: format!("/{}", call.peer.ip()),
            describable: access.topic_describe_check(),
        };
        let op = GroupOp::ConsumerHeartbeat {
            group: group.clone(),
            heartbeat,
        };
        let result = match ask_coordinator_to_read(ctx, call, &group, op).await {
            Ok(GroupAnswer::ConsumerHeartbeat(r)) => r,
            Err(e) => Err(e),
            _ => Err(unavailable()),
        };
        match result {
            Ok(a) => {
                body.member_id = Some(sb(a.member_id));
                body.member_epoch = a.member_epoch;
                body.heartbeat_interval_ms = a.heartbeat_interval_ms;
                body.assignment = a.assignment.map(|a| {
                    WireAssignment::default().with_topic_partitions(
                        a.topics()
                            .iter()
                            .map(|(t, ps)| {
                                TopicPartitions::default()
                                    .with_topic_id(*t)
                                    .with_partitions(ps.iter().copied().collect())
                            })
                            .collect(),
                    )
                });
            }
            Err(e) => {
                body.error_code = error_code::group(&e).code();
                body.error_message = error_message(&e).map(sb);
                body.member_epoch = -1;
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

/// Kafka's message for the errors that carry one: what the client logs.
fn error_message(e: &GroupError) -> Option<String> {
    match e {
        GroupError::InvalidRequest(_)
        | GroupError::UnsupportedAssignor(_)
        | GroupError::InvalidRegularExpression(_)
        | GroupError::TooLong(_) => Some(e.to_string()),
        _ => None,
    }
}

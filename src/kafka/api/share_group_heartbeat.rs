//! ShareGroupHeartbeat (v1, KIP-932): a share-group member joins, stays and leaves
//! through this one API, and learns the partitions it reads — several members to a
//! partition — from the group's coordinator (`corelog_shards::group::share`).
//!
//! As Kafka: UNSUPPORTED_VERSION while the cluster's `share.version` is 0; the
//! principal needs READ on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every
//! topic it names (TOPIC_AUTHORIZATION_FAILED), checked before the group hears of it.
//! Members name themselves (a UUID the client makes).

use super::group_routing::{ask_coordinator_to_read, s, sb, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::group::share::group::ShareHeartbeat;
use corelog_shards::group::types::{GroupAnswer, GroupError, GroupOp};
use kafka_protocol::messages::share_group_heartbeat_response::{
    Assignment as WireAssignment, TopicPartitions,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct ShareGroupHeartbeat;

impl Handler for ShareGroupHeartbeat {
    const KEY: ApiKey = ApiKey::ShareGroupHeartbeat;
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = ShareGroupHeartbeatRequest;
    type Response = ShareGroupHeartbeatResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ShareGroupHeartbeatResponse::default();
        body.member_epoch = -1;
        if !super::share_groups_enabled(ctx) {
            body.error_code = ResponseError::UnsupportedVersion.code();
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
            return Ok(body);
        }
        let heartbeat = ShareHeartbeat {
            member_id: s(&req.member_id),
            member_epoch: req.member_epoch,
            rack_id: req.rack_id.as_ref().map(s),
            subscribed_topic_names: names,
            client_id: call.header.client_id.as_ref().map(s).unwrap_or_default(),
            client_host: format!("/{}", call.peer.ip()),
        };
        let op = GroupOp::ShareHeartbeat {
            group: group.clone(),
            heartbeat,
        };
        let result = match ask_coordinator_to_read(ctx, call, &group, op).await {
            Ok(GroupAnswer::ShareHeartbeat(r)) => r,
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
                body.error_message = error_message(&group, &e).map(sb);
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

/// Kafka's message for the errors that carry one: what the client logs.
fn error_message(group: &str, e: &GroupError) -> Option<String> {
    match e {
        GroupError::InvalidRequest(_) | GroupError::TooLong(_) => Some(e.to_string()),
        GroupError::GroupIdNotFound => Some(format!("Group {group} is not a share group.")),
        _ => None,
    }
}

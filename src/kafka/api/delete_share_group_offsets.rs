//! DeleteShareGroupOffsets (v0, KIP-932; `kafka-share-groups --delete-offsets`): an
//! empty share group forgets its state on whole topics (its next member starts them
//! where `share.auto.offset.reset` says).
//!
//! As Kafka: DELETE on the group (GROUP_AUTHORIZATION_FAILED) and READ on each topic
//! (TOPIC_AUTHORIZATION_FAILED); NON_EMPTY_GROUP while the group has members; a missing
//! group, or one of another type, GROUP_ID_NOT_FOUND; a topic the cluster does not have
//! UNKNOWN_TOPIC_OR_PARTITION. The share coordinator deletes each partition's state
//! first; the group forgets the topic once that is done.

use super::group_routing::{s, sb};
use super::handler::{Call, Handler};
use super::share_admin;
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as TopicOut;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct DeleteShareGroupOffsets;

impl Handler for DeleteShareGroupOffsets {
    const KEY: ApiKey = ApiKey::DeleteShareGroupOffsets;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DeleteShareGroupOffsetsRequest;
    type Response = DeleteShareGroupOffsetsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DeleteShareGroupOffsetsResponse::default();
        let group = s(&req.group_id.0);
        let access = Access::new(ctx, call);
        if !super::share_groups_enabled(ctx) {
            body.error_code = ResponseError::UnsupportedVersion.code();
            return Ok(body);
        }
        if !access.allows(Op::Delete, Resource::Group, &group) {
            body.error_code = ResponseError::GroupAuthorizationFailed.code();
            return Ok(body);
        }
        let scope = match share_admin::scope(ctx, &group).await {
            Ok(scope) if !scope.empty => {
                body.error_code = ResponseError::NonEmptyGroup.code();
                return Ok(body);
            }
            Ok(scope) => scope,
            Err(e) => {
                body.error_code = error_code::group(&e).code();
                return Ok(body);
            }
        };
        let meta = ctx.shard.metadata.snapshot();
        let mut forgotten = Vec::new();
        for t in &req.topics {
            let name = s(&t.topic_name.0);
            let id = meta.topic(&name).map(|m| m.id);
            let mut out = TopicOut::default()
                .with_topic_name(TopicName(sb(name.clone())))
                .with_topic_id(id.unwrap_or_default());
            out.error_code = match id {
                _ if !access.allows(Op::Read, Resource::Topic, &name) => {
                    ResponseError::TopicAuthorizationFailed.code()
                }
                None => ResponseError::UnknownTopicOrPartition.code(),
                Some(id) => {
                    let of_topic: Vec<_> = scope
                        .partitions
                        .iter()
                        .filter(|(t, ..)| *t == id)
                        .cloned()
                        .collect();
                    match share_admin::delete_state(ctx, &group, &of_topic).await {
                        Ok(()) => {
                            forgotten.push(id);
                            0
                        }
                        Err(code) => code,
                    }
                }
            };
            body.responses.push(out);
        }
        if !forgotten.is_empty() {
            if let Err(e) = share_admin::record(ctx, &group, Vec::new(), forgotten).await {
                body.error_code = error_code::group(&e).code();
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        r.responses.iter().for_each(|t| each(t.error_code));
    }
}

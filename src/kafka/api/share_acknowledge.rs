//! ShareAcknowledge (v1–v2, KIP-932): a share consumer acknowledges records it acquired —
//! ACCEPT, RELEASE, REJECT, or GAP for an offset that is no record; from v2 (KIP-1222)
//! RENEW, which starts a record's lock again, where IsRenewAck says so — without fetching
//! more; epoch -1 also closes its share session, releasing what it still holds.
//!
//! As Kafka: UNSUPPORTED_VERSION while `share.version` is 0; READ on the group and on
//! each topic; the session's epoch checked (`share_session`; an acknowledgement cannot
//! open a session: epoch 0 is INVALID_SHARE_SESSION_EPOCH). Each partition's
//! acknowledgements are applied all or none and answered once stored: records the member
//! does not hold (never acquired, another member's, their lock run out) are
//! INVALID_RECORD_STATE, malformed batches INVALID_REQUEST.

use super::handler::{Call, Handler};
use super::share_session;
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::share_acknowledge_response::{
    PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;
use uuid::Uuid;

pub struct ShareAcknowledge;

impl Handler for ShareAcknowledge {
    const KEY: ApiKey = ApiKey::ShareAcknowledge;
    const VERSIONS: (i16, i16) = (1, 2);
    type Request = ShareAcknowledgeRequest;
    type Response = ShareAcknowledgeResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ShareAcknowledgeResponse::default();
        let refuse = |mut body: ShareAcknowledgeResponse, code: i16| {
            body.error_code = code;
            Ok(body)
        };
        if !super::share_groups_enabled(ctx) {
            return refuse(body, ResponseError::UnsupportedVersion.code());
        }
        let (Some(group), Some(member)) = (&req.group_id, &req.member_id) else {
            return refuse(body, ResponseError::InvalidRequest.code());
        };
        let (group, member) = (group.as_str().to_string(), member.as_str().to_string());
        let access = Access::new(ctx, call);
        if !access.allows(Op::Read, Resource::Group, &group) {
            return refuse(body, ResponseError::GroupAuthorizationFailed.code());
        }
        // The connection's share requests take their turns in the order they came.
        let slot = &call.session.share;
        let _turn = slot.turn().await;
        let closed = match slot.advance(&group, &member, req.share_session_epoch, false) {
            Ok(c) => c,
            Err(e) => return refuse(body, e.code()),
        };
        share_session::ensure_state_topic(ctx).await;
        let meta = ctx.shard.metadata.snapshot();
        let named = req.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| share_session::Named {
                topic_id: t.topic_id,
                partition: p.partition_index,
                batches: p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                    .collect(),
            })
        });
        // KIP-1222 (v2): RENEW where the request says it carries some.
        let renew = call.version >= 2 && req.is_renew_ack;
        let lock_ms = ctx.shard.share_delivery(&group).record_lock_duration_ms;
        body.acquisition_lock_timeout_ms = i32::try_from(lock_ms).unwrap_or(i32::MAX);
        let settled =
            share_session::settle(ctx, &access, &group, &member, named.collect(), renew).await;
        let answers: BTreeMap<(Uuid, i32), (i16, Option<String>)> = settled
            .into_iter()
            .map(|(key, s)| match s.ack {
                Some(ack) if s.error == 0 => (key, ack),
                _ => (key, (s.error, None)),
            })
            .collect();
        if let Some(closed) = closed {
            share_session::release(ctx, closed).await;
        }
        for ((topic_id, partition), (code, message)) in answers {
            let mut p = PartitionData::default();
            p.partition_index = partition;
            p.error_code = code;
            p.error_message = message.map(StrBytes::from_string);
            if code == ResponseError::NotLeaderOrFollower.code() {
                if let Some(t) = meta.topic_by_id(topic_id) {
                    if let Some(l) = t
                        .partitions
                        .get(usize::try_from(partition).unwrap_or(usize::MAX))
                    {
                        p.current_leader.leader_id = l.leader;
                        p.current_leader.leader_epoch = l.leader_epoch;
                    }
                }
            }
            match body.responses.last_mut().filter(|t| t.topic_id == topic_id) {
                Some(t) => t.partitions.push(p),
                None => body.responses.push(
                    ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(vec![p]),
                ),
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        r.responses
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| each(p.error_code));
    }
}

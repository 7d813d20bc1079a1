//! OffsetDelete (v0): removes a group's committed offsets of partitions it no longer
//! consumes (GROUP_SUBSCRIBED_TO_TOPIC for those it does).

use super::group_routing::{ask_coordinator, code, s, unavailable};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::group::types::*;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

pub struct OffsetDelete;

impl Handler for OffsetDelete {
    const KEY: ApiKey = ApiKey::OffsetDelete;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = OffsetDeleteRequest;
    type Response = OffsetDeleteResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let group = s(&req.group_id.0);
        // DELETE on the group (else nothing is asked), READ on each topic (else its
        // partitions are TOPIC_AUTHORIZATION_FAILED and left out).
        let access = Access::new(ctx, call);
        let mut body = OffsetDeleteResponse::default();
        if !access.allows(Op::Delete, Resource::Group, &group) {
            body.error_code = ResponseError::GroupAuthorizationFailed.code();
            return Ok(body);
        }
        let readable: Vec<bool> = req
            .topics
            .iter()
            .map(|t| access.allows(Op::Read, Resource::Topic, &t.name.0))
            .collect();
        let partitions: Vec<(String, i32)> = req
            .topics
            .iter()
            .zip(&readable)
            .filter(|(_, r)| **r)
            .map(|(t, _)| t)
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (s(&t.name.0), p.partition_index))
            })
            .collect();
        let answer = match ask_coordinator(
            ctx,
            &group,
            GroupOp::DeleteOffsets {
                group: group.clone(),
                partitions,
            },
        )
        .await
        {
            Ok(GroupAnswer::OffsetsDeleted(r)) => r,
            Err(e) => Err(e),
            _ => Err(unavailable()),
        };
        match answer {
            Err(e) => body.error_code = error_code::group(&e).code(),
            Ok(results) => {
                let mut results = results.into_iter();
                for (t, readable) in req.topics.iter().zip(readable) {
                    let mut tr = OffsetDeleteResponseTopic::default();
                    tr.name = t.name.clone();
                    for p in &t.partitions {
                        let mut pr = OffsetDeleteResponsePartition::default();
                        pr.partition_index = p.partition_index;
                        pr.error_code = if readable {
                            code(&results.next().and_then(|r| r.err()))
                        } else {
                            ResponseError::TopicAuthorizationFailed.code()
                        };
                        tr.partitions.push(pr);
                    }
                    body.topics.push(tr);
                }
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for t in &r.topics {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

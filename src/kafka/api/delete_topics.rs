//! DeleteTopics (v0–v6): by name or (v6) by id, through the controller, which drops the
//! partitions on their shards before answering.

use super::admin_change::{message, send_admin_change};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::AdminChange;
use corelog_shards::mesh::TopicError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct DeleteTopics;

impl Handler for DeleteTopics {
    const KEY: ApiKey = ApiKey::DeleteTopics;
    const VERSIONS: (i16, i16) = (0, 6);
    type Request = DeleteTopicsRequest;
    type Response = DeleteTopicsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        // v0–v5 name topics in `topic_names`; v6 in `topics`, by name or by id.
        let named: Vec<(Option<String>, uuid::Uuid)> = if call.version >= 6 {
            req.topics
                .iter()
                .map(|t| match &t.name {
                    Some(n) => (Some(n.0.to_string()), t.topic_id),
                    None => (
                        meta.topic_by_id(t.topic_id).map(|m| m.name.clone()),
                        t.topic_id,
                    ),
                })
                .collect()
        } else {
            req.topic_names
                .iter()
                .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
                .collect()
        };
        // The broker's internal topics cannot be deleted by clients.
        let internal = |n: &str| n == corelog_shards::group::OFFSETS_TOPIC;
        // DELETE on each topic (Kafka: TOPIC_AUTHORIZATION_FAILED, checked before
        // existence so that a refusal tells nothing about what exists).
        let access = Access::new(ctx, call);
        let allowed: Vec<bool> = named
            .iter()
            .map(|(n, _)| {
                n.as_deref()
                    .is_none_or(|n| access.allows(Op::Delete, Resource::Topic, n))
            })
            .collect();
        let names: Vec<String> = named
            .iter()
            .zip(&allowed)
            .filter(|(_, a)| **a)
            .filter_map(|((n, _), _)| n.clone())
            .filter(|n| !internal(n))
            .collect();
        let results = send_admin_change(ctx, names.len(), |reply| AdminChange::DeleteTopics {
            names: names.clone(),
            reply,
        })
        .await;
        let mut results = results.into_iter();
        let mut body = DeleteTopicsResponse::default();
        for ((name, id), allowed) in named.into_iter().zip(allowed) {
            let mut out = DeletableTopicResult::default();
            out.topic_id = meta
                .topic(name.as_deref().unwrap_or_default())
                .map(|t| t.id)
                .unwrap_or(id);
            match name {
                Some(n) if !allowed => {
                    out.name = Some(TopicName(StrBytes::from_string(n)));
                    out.error_code = ResponseError::TopicAuthorizationFailed.code();
                    out.error_message = message(&TopicError::Unauthorized);
                }
                Some(n) if internal(&n) => {
                    out.name = Some(TopicName(StrBytes::from_string(n)));
                    out.error_code = ResponseError::InvalidTopicException.code();
                    out.error_message = Some(StrBytes::from_static_str(
                        "internal topics cannot be deleted",
                    ));
                }
                Some(n) => {
                    out.name = Some(TopicName(StrBytes::from_string(n)));
                    if let Some(Err(e)) = results.next() {
                        out.error_code = error_code::topic(&e).code();
                        out.error_message = message(&e);
                    }
                }
                None => out.error_code = ResponseError::UnknownTopicId.code(),
            }
            body.responses.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.responses {
            each(t.error_code);
        }
    }
}

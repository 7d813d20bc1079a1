//! CreatePartitions (v0–v3): more partitions for a topic, through the controller, placed
//! over the live brokers or on the replica lists the request gives (Kafka's checks:
//! one list per new partition, the topic's replication factor, registered brokers each
//! named once, at least one of them active).

use super::admin_change::{message, send_admin_change};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op, Resource};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{AdminChange, TopicError};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{ApiKey, CreatePartitionsRequest, CreatePartitionsResponse};
use std::collections::HashSet;

pub struct CreatePartitions;

impl Handler for CreatePartitions {
    const KEY: ApiKey = ApiKey::CreatePartitions;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = CreatePartitionsRequest;
    type Response = CreatePartitionsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        // Kafka's ControllerApis: a topic named twice is refused as a whole.
        let mut seen = HashSet::new();
        let twice: HashSet<&str> = req
            .topics
            .iter()
            .filter(|t| !seen.insert(t.name.0.as_str()))
            .map(|t| t.name.0.as_str())
            .collect();
        let mut pre: Vec<Option<TopicError>> = Vec::with_capacity(req.topics.len());
        let mut asks = Vec::new();
        let access = Access::new(ctx, call);
        for t in &req.topics {
            if twice.contains(t.name.0.as_str()) {
                pre.push(Some(TopicError::Invalid("Duplicate topic name.".into())));
                continue;
            }
            if !access.allows(Op::Alter, Resource::Topic, &t.name.0) {
                pre.push(Some(TopicError::Unauthorized));
                continue;
            }
            pre.push(None);
            // The new partitions' replica lists, checked by the controller against the
            // topic's replication factor and the registered brokers.
            let assignments = t.assignments.as_ref().map(|a| {
                a.iter()
                    .map(|x| x.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            });
            asks.push((t.name.0.to_string(), t.count, assignments));
        }
        let results = send_admin_change(ctx, asks.len(), |reply| AdminChange::CreatePartitions {
            topics: asks,
            validate_only: req.validate_only,
            reply,
        })
        .await;
        let mut results = results.into_iter();
        let mut body = CreatePartitionsResponse::default();
        for (t, p) in req.topics.iter().zip(pre) {
            let mut out = CreatePartitionsTopicResult::default();
            out.name = t.name.clone();
            let err = match p {
                Some(e) => Some(e),
                None => results.next().and_then(|r| r.err()),
            };
            if let Some(e) = err {
                out.error_code = error_code::topic(&e).code();
                out.error_message = message(&e);
            }
            body.results.push(out);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for t in &r.results {
            each(t.error_code);
        }
    }
}

//! CreatePartitions (v0–v3): more partitions for a topic, through the controller.

use super::controller_call::{ask_controller, message};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{ApiKey, CreatePartitionsRequest, CreatePartitionsResponse};
use shards::mesh::{ControllerRequest, TopicError};

pub struct CreatePartitions;

impl Handler for CreatePartitions {
    const KEY: ApiKey = ApiKey::CreatePartitions;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = CreatePartitionsRequest;
    type Response = CreatePartitionsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        _call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut pre: Vec<Option<TopicError>> = Vec::with_capacity(req.topics.len());
        let mut asks = Vec::new();
        for t in &req.topics {
            let bad_assignment = t.assignments.as_ref().is_some_and(|a| {
                !a.iter().all(|x| {
                    x.broker_ids.len() == 1
                        && x.broker_ids.first().map(|b| b.0) == Some(ctx.config.node_id)
                })
            });
            if bad_assignment {
                pre.push(Some(TopicError::InvalidReplicaAssignment(
                    "each new partition must be on this node only".into(),
                )));
            } else {
                pre.push(None);
                asks.push((t.name.0.to_string(), t.count));
            }
        }
        let results = ask_controller(ctx, asks.len(), |reply| {
            ControllerRequest::CreatePartitions {
                topics: asks,
                validate_only: req.validate_only,
                reply,
            }
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

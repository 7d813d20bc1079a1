//! DeleteShareGroupState (v0, KIP-932): the group coordinator deletes the state of a
//! share group's partitions (the group deleted, or its offsets on a topic). Served by
//! the share coordinator (`share_state_routing`): the key's tombstone; a key without
//! state is done already.

use super::handler::{Call, Handler};
use super::share_state_routing::respond;
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::share::coordinator::StateOp;
use kafka_protocol::messages::delete_share_group_state_response::{
    DeleteStateResult, PartitionResult,
};
use kafka_protocol::messages::*;

pub struct DeleteShareGroupState;

impl Handler for DeleteShareGroupState {
    const KEY: ApiKey = ApiKey::DeleteShareGroupState;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DeleteShareGroupStateRequest;
    type Response = DeleteShareGroupStateResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let topics = req
            .topics
            .iter()
            .map(|t| {
                let ops = t.partitions.iter().map(|p| (p.partition, StateOp::Delete));
                (t.topic_id, ops.collect())
            })
            .collect();
        let mut body = DeleteShareGroupStateResponse::default();
        body.results = respond(
            ctx,
            call,
            req.group_id.as_str(),
            topics,
            |partition, code, message, _| {
                PartitionResult::default()
                    .with_partition(partition)
                    .with_error_code(code)
                    .with_error_message(message)
            },
            |id, ps| {
                DeleteStateResult::default()
                    .with_topic_id(id)
                    .with_partitions(ps)
            },
        )
        .await;
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        r.results
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| each(p.error_code));
    }
}

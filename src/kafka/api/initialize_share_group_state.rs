//! InitializeShareGroupState (v0, KIP-932): the group coordinator (or an admin reset of
//! a share group's offsets) starts a share partition's state afresh at a state epoch,
//! with a start offset (-1: `share.auto.offset.reset` decides on the leader). Served by
//! the share coordinator (`share_state_routing`); an older state epoch than the stored
//! one is FENCED_STATE_EPOCH.

use super::handler::{Call, Handler};
use super::share_state_routing::respond;
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::share::coordinator::StateOp;
use kafka_protocol::messages::initialize_share_group_state_response::{
    InitializeStateResult, PartitionResult,
};
use kafka_protocol::messages::*;

pub struct InitializeShareGroupState;

impl Handler for InitializeShareGroupState {
    const KEY: ApiKey = ApiKey::InitializeShareGroupState;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = InitializeShareGroupStateRequest;
    type Response = InitializeShareGroupStateResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let topics = req
            .topics
            .iter()
            .map(|t| {
                let ops = t.partitions.iter().map(|p| {
                    let op = StateOp::Initialize {
                        state_epoch: p.state_epoch,
                        start_offset: p.start_offset,
                    };
                    (p.partition, op)
                });
                (t.topic_id, ops.collect())
            })
            .collect();
        let mut body = InitializeShareGroupStateResponse::default();
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
                InitializeStateResult::default()
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

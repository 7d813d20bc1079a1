//! ReadShareGroupState (v0, KIP-932): a share partition's leader loads its state (start
//! offset, state epoch, the batches of records in flight) when it first serves the
//! share partition. Served by the share coordinator (`share_state_routing`): the read
//! records the leader's epoch, fencing older leaders; an older epoch than the stored one
//! is FENCED_LEADER_EPOCH; a key never initialized INVALID_REQUEST.

use super::handler::{Call, Handler};
use super::share_state_routing::respond;
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::share::coordinator::StateOp;
use kafka_protocol::messages::read_share_group_state_response::{
    PartitionResult, ReadStateResult, StateBatch,
};
use kafka_protocol::messages::*;

pub struct ReadShareGroupState;

fn wire_batch(b: &corelog_shards::share::partition::StateBatch) -> StateBatch {
    StateBatch::default()
        .with_first_offset(b.first)
        .with_last_offset(b.last)
        .with_delivery_state(b.state.id())
        .with_delivery_count(i16::try_from(b.deliveries).unwrap_or(i16::MAX))
}

impl Handler for ReadShareGroupState {
    const KEY: ApiKey = ApiKey::ReadShareGroupState;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = ReadShareGroupStateRequest;
    type Response = ReadShareGroupStateResponse;

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
                    let op = StateOp::Read {
                        leader_epoch: p.leader_epoch,
                    };
                    (p.partition, op)
                });
                (t.topic_id, ops.collect())
            })
            .collect();
        let mut body = ReadShareGroupStateResponse::default();
        body.results = respond(
            ctx,
            call,
            req.group_id.as_str(),
            topics,
            |partition, code, message, view| {
                let mut p = PartitionResult::default()
                    .with_partition(partition)
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_start_offset(-1);
                if let Some(v) = view {
                    p.state_epoch = v.state_epoch;
                    p.start_offset = v.start_offset;
                    p.state_batches = v.batches.iter().map(wire_batch).collect();
                }
                p
            },
            |id, ps| {
                ReadStateResult::default()
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

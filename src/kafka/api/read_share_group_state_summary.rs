//! ReadShareGroupStateSummary (v0, KIP-932): a share partition's start offset and
//! epochs without its batches, for DescribeShareGroupOffsets. Served by the share
//! coordinator (`share_state_routing`); a key without state answers start offset -1
//! without an error, as Kafka does.

use super::handler::{Call, Handler};
use super::share_state_routing::respond;
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::share::coordinator::StateOp;
use kafka_protocol::messages::read_share_group_state_summary_response::{
    PartitionResult, ReadStateSummaryResult,
};
use kafka_protocol::messages::*;

pub struct ReadShareGroupStateSummary;

impl Handler for ReadShareGroupStateSummary {
    const KEY: ApiKey = ApiKey::ReadShareGroupStateSummary;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = ReadShareGroupStateSummaryRequest;
    type Response = ReadShareGroupStateSummaryResponse;

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
                    let op = StateOp::ReadSummary {
                        leader_epoch: p.leader_epoch,
                    };
                    (p.partition, op)
                });
                (t.topic_id, ops.collect())
            })
            .collect();
        let mut body = ReadShareGroupStateSummaryResponse::default();
        body.results = respond(
            ctx,
            call,
            req.group_id.as_str(),
            topics,
            |partition, code, message, view| {
                let p = PartitionResult::default()
                    .with_partition(partition)
                    .with_error_code(code)
                    .with_error_message(message);
                match view {
                    Some(v) => p
                        .with_state_epoch(v.state_epoch)
                        .with_leader_epoch(v.leader_epoch)
                        .with_start_offset(v.start_offset),
                    None => p.with_start_offset(-1),
                }
            },
            |id, ps| {
                ReadStateSummaryResult::default()
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

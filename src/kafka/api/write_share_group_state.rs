//! WriteShareGroupState (v0, KIP-932): a share partition's leader stores what changed
//! in its in-flight records (acknowledged, released, archived, timed out), its start
//! offset and epochs. Served by the share coordinator (`share_state_routing`): an older
//! leader epoch is FENCED_LEADER_EPOCH, an older state epoch FENCED_STATE_EPOCH, a key
//! never initialized INVALID_REQUEST; a delivery state that is not Kafka's (0, 2, 4) is
//! INVALID_REQUEST before anything is written.

use super::handler::{Call, Handler};
use super::share_state_routing::respond;
use super::Ctx;
use crate::kafka::frame::FrameError;
use corelog_shards::share::coordinator::StateOp;
use corelog_shards::share::partition::{RecordState, StateBatch};
use corelog_shards::share::state::StateWrite;
use kafka_protocol::messages::write_share_group_state_request::PartitionData;
use kafka_protocol::messages::write_share_group_state_response::{
    PartitionResult, WriteStateResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct WriteShareGroupState;

/// The write of one partition, or why its batches are not a state Kafka stores.
fn state_write(p: &PartitionData) -> Result<StateWrite, &'static str> {
    let batches = p
        .state_batches
        .iter()
        .map(|b| {
            let state = RecordState::from_id(b.delivery_state)
                .filter(|s| *s != RecordState::Acquired)
                .ok_or("a delivery state is not 0, 2 or 4")?;
            if b.first_offset < 0 || b.last_offset < b.first_offset || b.delivery_count < 0 {
                return Err("a state batch's offsets or delivery count are invalid");
            }
            Ok(StateBatch {
                first: b.first_offset,
                last: b.last_offset,
                state,
                deliveries: b.delivery_count as u16,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StateWrite {
        state_epoch: p.state_epoch,
        leader_epoch: p.leader_epoch,
        start_offset: p.start_offset,
        delivery_complete_count: -1,
        batches,
    })
}

impl Handler for WriteShareGroupState {
    const KEY: ApiKey = ApiKey::WriteShareGroupState;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = WriteShareGroupStateRequest;
    type Response = WriteShareGroupStateResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut refused = Vec::new();
        let topics = req
            .topics
            .iter()
            .map(|t| {
                let ops = t.partitions.iter().filter_map(|p| match state_write(p) {
                    Ok(w) => Some((p.partition, StateOp::Write(w))),
                    Err(why) => {
                        refused.push((t.topic_id, p.partition, why));
                        None
                    }
                });
                (t.topic_id, ops.collect())
            })
            .collect();
        let mut body = WriteShareGroupStateResponse::default();
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
                WriteStateResult::default()
                    .with_topic_id(id)
                    .with_partitions(ps)
            },
        )
        .await;
        for (topic_id, partition, why) in refused {
            let mut p = PartitionResult::default();
            p.partition = partition;
            p.error_code = ResponseError::InvalidRequest.code();
            p.error_message = Some(StrBytes::from_static_str(why));
            match body.results.iter_mut().find(|r| r.topic_id == topic_id) {
                Some(r) => r.partitions.push(p),
                None => body.results.push({
                    let mut r = WriteStateResult::default();
                    r.topic_id = topic_id;
                    r.partitions.push(p);
                    r
                }),
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        r.results
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| each(p.error_code));
    }
}

//! AlterPartitionReassignments (v0–v1, KIP-455): moves partitions to new replicas, or
//! cancels the moves in progress (a partition given no replicas), through the controller
//! like every metadata change (`admin_change`). Each partition gets its own error:
//! UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (an empty target, a broker
//! twice or one not registered, a cancel that would leave no in-sync replica),
//! INVALID_REPLICATION_FACTOR (v1 with `allowReplicationFactorChange` false and another
//! number of replicas), NO_REASSIGNMENT_IN_PROGRESS (a cancel of nothing).
//!
//! The answer comes once the move has started (committed, and this broker's shards have
//! taken it up): the added replicas then fetch, and the move completes when all of them
//! are in the ISR. ListPartitionReassignments shows it until then.

use super::admin_change::{message, send_admin_change};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_controller::command::ReassignmentItem;
use corelog_shards::mesh::AdminChange;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct AlterPartitionReassignments;

impl Handler for AlterPartitionReassignments {
    const KEY: ApiKey = ApiKey::AlterPartitionReassignments;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = AlterPartitionReassignmentsRequest;
    type Response = AlterPartitionReassignmentsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        if !Access::new(ctx, call).allows_cluster(Op::Alter) {
            let mut body = AlterPartitionReassignmentsResponse::default();
            body.error_code = ResponseError::ClusterAuthorizationFailed.code();
            body.error_message = Some(StrBytes::from_static_str("Cluster authorization failed."));
            return Ok(body);
        }
        // v0 has no such field: the replication factor may change (Kafka's default).
        let keep_replication_factor = call.version >= 1 && !req.allow_replication_factor_change;
        let items: Vec<ReassignmentItem> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| ReassignmentItem {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    target: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
                    keep_replication_factor,
                })
            })
            .collect();
        let results = send_admin_change(ctx, items.len(), |reply| {
            AdminChange::AlterPartitionReassignments { items, reply }
        })
        .await;
        let mut results = results.into_iter();
        let mut body = AlterPartitionReassignmentsResponse::default();
        body.allow_replication_factor_change = req.allow_replication_factor_change;
        for t in &req.topics {
            let mut topic = ReassignableTopicResponse::default();
            topic.name = t.name.clone();
            for p in &t.partitions {
                let mut out = ReassignablePartitionResponse::default();
                out.partition_index = p.partition_index;
                if let Some(Err(e)) = results.next() {
                    out.error_code = error_code::topic(&e).code();
                    out.error_message = message(&e);
                }
                topic.partitions.push(out);
            }
            body.responses.push(topic);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for t in &r.responses {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

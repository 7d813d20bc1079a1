//! ListPartitionReassignments (v0, KIP-455): the moves in progress, from this broker's
//! view of the metadata (every broker holds all of it): each partition's replicas (the
//! target first, then those being removed) and the replicas being added and removed.
//! All topics when none is named; of a named topic, the named partitions that are being
//! moved (others, and unknown ones, are left out, as Kafka's controller does).

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub struct ListPartitionReassignments;

impl Handler for ListPartitionReassignments {
    const KEY: ApiKey = ApiKey::ListPartitionReassignments;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = ListPartitionReassignmentsRequest;
    type Response = ListPartitionReassignmentsResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let brokers = |ids: &[i32]| ids.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
        let mut body = ListPartitionReassignmentsResponse::default();
        if !Access::new(ctx, call).allows_cluster(Op::Describe) {
            body.error_code = ResponseError::ClusterAuthorizationFailed.code();
            body.error_message = Some(StrBytes::from_static_str("Cluster authorization failed."));
            return Ok(body);
        }
        for t in meta.topics.values() {
            let named: Option<&Vec<i32>> = match &req.topics {
                None => None,
                Some(topics) => match topics.iter().find(|x| x.name.0.as_str() == t.name) {
                    Some(x) => Some(&x.partition_indexes),
                    None => continue,
                },
            };
            let mut topic = OngoingTopicReassignment::default();
            for (i, p) in (0..).zip(&t.partitions) {
                if !p.is_reassigning() || named.is_some_and(|n| !n.contains(&i)) {
                    continue;
                }
                let mut out = OngoingPartitionReassignment::default();
                out.partition_index = i;
                out.replicas = brokers(&p.replicas);
                out.adding_replicas = brokers(&p.adding);
                out.removing_replicas = brokers(&p.removing);
                topic.partitions.push(out);
            }
            if !topic.partitions.is_empty() {
                topic.name = TopicName(StrBytes::from_string(t.name.clone()));
                body.topics.push(topic);
            }
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
    }
}

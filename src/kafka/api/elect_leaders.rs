//! ElectLeaders (v0–v2, KIP-183 and KIP-460): moves leadership to each partition's
//! preferred replica (the first of its assignment) when that replica is a live ISR
//! member, or (unclean, v1+) gives a partition without a leader one, from outside the ISR
//! if need be. Committed through the controller like every metadata change
//! (`admin_change`). Each partition gets its own error: ELECTION_NOT_NEEDED,
//! PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
//! UNKNOWN_TOPIC_OR_PARTITION. With no partitions named, every partition the election
//! would change is elected, and only those are answered (Kafka leaves out the ones that
//! need no election).

use super::admin_change::{message, send_admin_change};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::error_code;
use crate::kafka::frame::FrameError;
use corelog_controller::command::Election;
use corelog_shards::mesh::AdminChange;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

pub struct ElectLeaders;

impl Handler for ElectLeaders {
    const KEY: ApiKey = ApiKey::ElectLeaders;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = ElectLeadersRequest;
    type Response = ElectLeadersResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = ElectLeadersResponse::default();
        if !Access::new(ctx, call).allows_cluster(Op::Alter) {
            body.error_code = ResponseError::ClusterAuthorizationFailed.code();
            return Ok(body);
        }
        // v0 has no election type: preferred.
        let election = match (call.version, req.election_type) {
            (0, _) | (_, 0) => Election::Preferred,
            (_, 1) => Election::Unclean,
            _ => {
                body.error_code = ResponseError::InvalidRequest.code();
                return Ok(body);
            }
        };
        let partitions: Vec<(String, i32)> = match &req.topic_partitions {
            Some(topics) => topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
                .collect(),
            None => {
                let meta = ctx.shard.metadata.snapshot();
                meta.topics
                    .values()
                    .flat_map(|t| {
                        (0..).zip(&t.partitions).filter_map(move |(i, p)| {
                            let needed = match election {
                                Election::Preferred => p.replicas.first() != Some(&p.leader),
                                Election::Unclean => !p.has_leader(),
                            };
                            needed.then(|| (t.name.clone(), i))
                        })
                    })
                    .collect()
            }
        };
        let results = send_admin_change(ctx, partitions.len(), |reply| AdminChange::ElectLeaders {
            election,
            partitions: partitions.clone(),
            reply,
        })
        .await;
        let mut by_topic: BTreeMap<&str, Vec<PartitionResult>> = BTreeMap::new();
        for ((topic, partition), result) in partitions.iter().zip(results) {
            let mut out = PartitionResult::default();
            out.partition_id = *partition;
            if let Err(e) = result {
                out.error_code = error_code::topic(&e).code();
                out.error_message = message(&e);
            }
            by_topic.entry(topic).or_default().push(out);
        }
        for (topic, partition_result) in by_topic {
            let mut r = ReplicaElectionResult::default();
            r.topic = TopicName(StrBytes::from_string(topic.to_string()));
            r.partition_result = partition_result;
            body.replica_election_results.push(r);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for t in &r.replica_election_results {
            for p in &t.partition_result {
                each(p.error_code);
            }
        }
    }
}

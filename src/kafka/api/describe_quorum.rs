//! DescribeQuorum (v0–v2, KIP-836): the metadata quorum as its active controller sees it
//! — the leader, its epoch (the Raft term), the high watermark, and every voter's and
//! observer's log end offset — for `kafka-metadata-quorum describe` and admin clients.
//!
//! Any broker answers: one that is not the active controller asks it over the controller
//! port. Only partition 0 of `__cluster_metadata` exists; another topic or partition is
//! UNKNOWN_TOPIC_OR_PARTITION. Fetch and catch-up times are not tracked (-1).

use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use corelog_controller::rpc::{QuorumDescription, ReplicaState};
use kafka_protocol::messages::describe_quorum_response::{self as resp, Listener, Node};
use kafka_protocol::messages::{ApiKey, BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// Kafka's name of the metadata log's topic.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub struct DescribeQuorum;

impl Handler for DescribeQuorum {
    const KEY: ApiKey = ApiKey::DescribeQuorum;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DescribeQuorumRequest;
    type Response = DescribeQuorumResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let mut body = DescribeQuorumResponse::default();
        if !Access::new(ctx, call).allows_cluster(Op::Describe) {
            body.error_code = ResponseError::ClusterAuthorizationFailed.code();
            return Ok(body);
        }
        let quorum = ctx.shard.node.describe_quorum().await;
        let quorum = match quorum {
            Ok(q) => q,
            Err(e) => {
                body.error_code = ResponseError::NotLeaderOrFollower.code();
                if call.version >= 2 {
                    body.error_message = Some(StrBytes::from_string(e.to_string()));
                }
                return Ok(body);
            }
        };
        for t in &req.topics {
            let mut topic = resp::TopicData::default();
            topic.topic_name = t.topic_name.clone();
            for p in &t.partitions {
                let mut part = resp::PartitionData::default();
                part.partition_index = p.partition_index;
                if t.topic_name.0.as_str() != METADATA_TOPIC || p.partition_index != 0 {
                    part.error_code = ResponseError::UnknownTopicOrPartition.code();
                } else {
                    fill(&mut part, &quorum);
                }
                topic.partitions.push(part);
            }
            body.topics.push(topic);
        }
        if call.version >= 2 {
            body.nodes = quorum.voters.iter().filter_map(node).collect();
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        each(r.error_code);
        for t in &r.topics {
            for p in &t.partitions {
                each(p.error_code);
            }
        }
    }
}

fn broker_id(id: u64) -> BrokerId {
    BrokerId(i32::try_from(id).unwrap_or(-1))
}

fn fill(part: &mut resp::PartitionData, q: &QuorumDescription) {
    part.leader_id = q.leader.map_or(BrokerId(-1), broker_id);
    part.leader_epoch = i32::try_from(q.term).unwrap_or(i32::MAX);
    part.high_watermark = q.high_watermark;
    let replica = |r: &ReplicaState| {
        let mut s = resp::ReplicaState::default();
        s.replica_id = broker_id(r.id);
        s.log_end_offset = r.log_end_offset;
        s.last_fetch_timestamp = -1;
        s.last_caught_up_timestamp = -1;
        s
    };
    part.current_voters = q.voters.iter().map(replica).collect();
    part.observers = q.observers.iter().map(replica).collect();
}

/// A voter's controller endpoint (v2's nodes).
fn node(r: &ReplicaState) -> Option<Node> {
    let (host, port) = r.addr.rsplit_once(':')?;
    let mut listener = Listener::default();
    listener.name = StrBytes::from_static_str("CONTROLLER");
    listener.host = StrBytes::from_string(host.trim_matches(|c| c == '[' || c == ']').to_string());
    listener.port = port.parse().ok()?;
    let mut n = Node::default();
    n.node_id = broker_id(r.id);
    n.listeners = vec![listener];
    Some(n)
}

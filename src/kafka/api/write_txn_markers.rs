//! WriteTxnMarkers (v1): the transaction coordinator asks this broker, as leader of the
//! partitions named, to end a producer's transaction in each with a commit or abort
//! marker carrying the coordinator's epoch.
//!
//! Only a broker (CLUSTER_ACTION on the cluster) may ask. Each partition's marker is
//! appended by its owning shard and answered once committed (acks=all), as Kafka's
//! coordinator-origin appends are; internal topics take markers too (offsets committed in
//! a transaction live in `__consumer_offsets`). A marker older than the producer's epoch
//! is INVALID_PRODUCER_EPOCH, one from a replaced coordinator
//! TRANSACTION_COORDINATOR_FENCED; a marker for a producer with no open transaction
//! there is written and harmless (the coordinator's retries after a lost answer).

use super::fan_out::{leader_check, FanOut, PartitionAnswer};
use super::handler::{Call, Handler};
use super::Ctx;
use crate::kafka::access::{Access, Op};
use crate::kafka::frame::FrameError;
use corelog_shards::mesh::{PartitionRequest, TopicPartition};
use corelog_storage::txn_marker::{MarkerKind, TxnMarker};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::ResponseError;
use std::sync::Arc;

/// How long an append waits to be committed (Kafka's `request.timeout.ms` default, which
/// its coordinator-origin appends use).
const COMMIT_TIMEOUT_MS: u64 = 30_000;

impl PartitionAnswer for WritableTxnMarkerPartitionResult {
    fn set_error(&mut self, error: ResponseError) {
        self.error_code = error.code();
    }
}

pub struct WriteTxnMarkers;

impl Handler for WriteTxnMarkers {
    const KEY: ApiKey = ApiKey::WriteTxnMarkers;
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = WriteTxnMarkersRequest;
    type Response = WriteTxnMarkersResponse;

    async fn handle(
        ctx: &Ctx,
        req: Self::Request,
        call: &Call<'_>,
    ) -> Result<Self::Response, FrameError> {
        let meta = ctx.shard.metadata.snapshot();
        let allowed = Access::new(ctx, call).allows_cluster(Op::ClusterAction);
        // One fan-out per marker, all sent at once: a marker's partitions are answered in
        // its own order.
        let mut fans = Vec::with_capacity(req.markers.len());
        for m in &req.markers {
            let marker = TxnMarker {
                producer_id: m.producer_id.0,
                producer_epoch: m.producer_epoch,
                coordinator_epoch: m.coordinator_epoch,
                kind: if m.transaction_result {
                    MarkerKind::Commit
                } else {
                    MarkerKind::Abort
                },
            };
            let mut fan = FanOut::new(ctx, m.topics.len());
            for t in &m.topics {
                let name = t.name.0.as_str();
                let topic: Arc<str> = name.into();
                fan.next_topic(t.partition_indexes.len());
                for &partition in &t.partition_indexes {
                    let mut out = WritableTxnMarkerPartitionResult::default();
                    out.partition_index = partition;
                    if !allowed {
                        fan.refuse(out, ResponseError::ClusterAuthorizationFailed);
                        continue;
                    }
                    match leader_check(ctx, &meta, name, partition) {
                        Err(e) => fan.refuse(out, e),
                        Ok(()) => {
                            let tp = TopicPartition {
                                topic: topic.clone(),
                                partition,
                            };
                            fan.ask(name, partition, out, (tp, marker));
                        }
                    }
                }
            }
            fans.push(fan.call(
                |markers, reply| PartitionRequest::WriteMarkers {
                    timeout_ms: COMMIT_TIMEOUT_MS,
                    markers,
                    reply,
                },
                |_: &mut WritableTxnMarkerPartitionResult, ()| {},
            ));
        }
        let answers = futures::future::join_all(fans).await;
        let mut body = WriteTxnMarkersResponse::default();
        for (m, topics) in req.markers.iter().zip(answers) {
            let mut result = WritableTxnMarkerResult::default();
            result.producer_id = m.producer_id;
            for (t, partitions) in m.topics.iter().zip(topics) {
                let mut tr = WritableTxnMarkerTopicResult::default();
                tr.name = t.name.clone();
                tr.partitions = partitions;
                result.topics.push(tr);
            }
            body.markers.push(result);
        }
        Ok(body)
    }

    fn error_codes(r: &Self::Response, each: &mut dyn FnMut(i16)) {
        for m in &r.markers {
            for t in &m.topics {
                for p in &t.partitions {
                    each(p.error_code);
                }
            }
        }
    }
}

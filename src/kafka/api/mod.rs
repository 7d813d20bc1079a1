//! One module per Kafka API family, each with the versions it supports and one `handle`.
//!
//! Handler shape (STYLE.md): decode (pure, bounded) → validate into domain types → group
//! partitions by owning shard, one mesh message per shard → await → map errors in
//! `error_code` → encode. A partition's failure is its own error code and never fails
//! the request.

pub mod admin;
pub mod api_versions;
pub mod client_quotas;
pub mod configs;
pub mod delete_records;
pub mod describe_cluster;
pub mod describe_partitions;
pub mod describe_topic_partitions;
pub mod fan_out;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod scram_credentials;

use super::frame::{FrameError, RequestFrame};
use crate::config::BrokerConfig;
use bytes::BytesMut;
use kafka_protocol::messages::ApiKey;
use shards::shard::Shard;
use std::rc::Rc;
use std::sync::Arc;

/// What a handler needs: its shard (for routing and the mesh) and the broker config.
pub struct Ctx {
    pub shard: Rc<Shard>,
    pub config: Arc<BrokerConfig>,
    /// This shard's client quota sensors.
    pub quotas: Rc<crate::quota::QuotaManager>,
}

/// Exactly what corelog implements, advertised by ApiVersions. Ranges are what
/// librdkafka 2.x, the Java 3.x/4.x clients, franz-go and kafka-python use, limited to
/// versions whose semantics are fully implemented: Produce from v3 and Fetch from v4
/// because only RecordBatch v2 is stored (no down-conversion); Fetch v13+ by topic id.
/// Group APIs stop below the versions of the new consumer protocol (KIP-848:
/// OffsetCommit/OffsetFetch v9); ListGroups v5 filters by type and every group here is
/// classic. Transactions (AddPartitionsToTxn, EndTxn, …) are not served.
pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 0, 7),
    (ApiKey::DeleteTopics, 0, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 0, 8),
    (ApiKey::OffsetFetch, 0, 8),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
];

pub fn supported_range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// Serves one request. `Ok(None)` means no response is sent (produce with acks=0).
/// `Err` closes the connection (after the responses before it are written).
/// `quota` is the quota decision made when the request was read, and the
/// connection's hold for handlers that charge after their work; `produce_order` keeps
/// the connection's produce requests in the order it read them.
pub async fn handle(
    ctx: &Ctx,
    mut frame: RequestFrame,
    peer: std::net::SocketAddr,
    quota: &crate::quota::RequestQuota,
    produce_order: &crate::net::produce_order::ProduceOrder,
) -> Result<Option<BytesMut>, FrameError> {
    let Some((min, max)) = supported_range(frame.api_key) else {
        return Err(FrameError::UnsupportedVersion {
            api: frame.api_key,
            version: frame.api_version,
        });
    };
    if frame.api_version < min || frame.api_version > max {
        if frame.api_key == ApiKey::ApiVersions {
            return api_versions::unsupported_version(&frame).map(Some);
        }
        return Err(FrameError::UnsupportedVersion {
            api: frame.api_key,
            version: frame.api_version,
        });
    }
    match frame.api_key {
        ApiKey::ApiVersions => api_versions::handle(&mut frame).map(Some),
        ApiKey::Metadata => metadata::handle(ctx, &mut frame).await.map(Some),
        ApiKey::Produce => produce::handle(ctx, &mut frame, quota, produce_order).await,
        ApiKey::Fetch => fetch::handle(ctx, &mut frame, &quota.connection)
            .await
            .map(Some),
        ApiKey::ListOffsets => list_offsets::handle(ctx, &mut frame).await.map(Some),
        ApiKey::OffsetForLeaderEpoch => offset_for_leader_epoch::handle(ctx, &mut frame)
            .await
            .map(Some),
        ApiKey::CreateTopics => admin::create_topics(ctx, &mut frame).await.map(Some),
        ApiKey::DeleteTopics => admin::delete_topics(ctx, &mut frame).await.map(Some),
        ApiKey::CreatePartitions => admin::create_partitions(ctx, &mut frame).await.map(Some),
        ApiKey::FindCoordinator => groups::find_coordinator(ctx, &mut frame).await.map(Some),
        ApiKey::JoinGroup => groups::join_group(ctx, &mut frame, &peer.ip().to_string())
            .await
            .map(Some),
        ApiKey::SyncGroup => groups::sync_group(ctx, &mut frame).await.map(Some),
        ApiKey::Heartbeat => groups::heartbeat(ctx, &mut frame).await.map(Some),
        ApiKey::LeaveGroup => groups::leave_group(ctx, &mut frame).await.map(Some),
        ApiKey::OffsetCommit => groups::offset_commit(ctx, &mut frame).await.map(Some),
        ApiKey::OffsetFetch => groups::offset_fetch(ctx, &mut frame).await.map(Some),
        ApiKey::DescribeGroups => groups::describe_groups(ctx, &mut frame).await.map(Some),
        ApiKey::ListGroups => groups::list_groups(ctx, &mut frame).await.map(Some),
        ApiKey::DeleteGroups => groups::delete_groups(ctx, &mut frame).await.map(Some),
        ApiKey::OffsetDelete => groups::offset_delete(ctx, &mut frame).await.map(Some),
        ApiKey::DescribeConfigs => configs::describe_configs(ctx, &mut frame).await.map(Some),
        ApiKey::AlterConfigs => configs::alter_configs(ctx, &mut frame).await.map(Some),
        ApiKey::IncrementalAlterConfigs => configs::incremental_alter_configs(ctx, &mut frame)
            .await
            .map(Some),
        ApiKey::DeleteRecords => delete_records::handle(ctx, &mut frame).await.map(Some),
        ApiKey::InitProducerId => init_producer_id::handle(ctx, &mut frame).await.map(Some),
        ApiKey::DescribeClientQuotas => client_quotas::describe(ctx, &mut frame).map(Some),
        ApiKey::AlterClientQuotas => client_quotas::alter(ctx, &mut frame).await.map(Some),
        ApiKey::DescribeLogDirs => describe_partitions::describe_log_dirs(ctx, &mut frame)
            .await
            .map(Some),
        ApiKey::DescribeCluster => describe_cluster::handle(ctx, &mut frame).map(Some),
        ApiKey::DescribeProducers => describe_partitions::describe_producers(ctx, &mut frame)
            .await
            .map(Some),
        ApiKey::DescribeUserScramCredentials => {
            scram_credentials::describe(ctx, &mut frame).map(Some)
        }
        ApiKey::DescribeTopicPartitions => {
            describe_topic_partitions::handle(ctx, &mut frame).map(Some)
        }
        other => Err(FrameError::UnsupportedVersion {
            api: other,
            version: frame.api_version,
        }),
    }
}

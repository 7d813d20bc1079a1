//! One module per Kafka API, named after it, each a [`handler::Handler`] declaring its
//! key and the versions it serves beside the code that serves them; `apis!` lists them
//! once, and ApiVersions advertises exactly that list. A few modules are shared by
//! several APIs and serve none themselves: `group_routing` (the coordinator shard of a
//! group), `txn_routing` (the coordinator shard of a transactional id), `acl_requests`
//! (the ACL APIs' gate and filters), `share_state_routing` (the share coordinator shard
//! of a share partition's state), `share_session` (share consumers' sessions),
//! `share_admin` (share groups' administration), `admin_change` (admin
//! changes sent to the admin shard), `config_resources`, `quota_entities` and `fan_out`.
//! Every handler that serves a resource asks `kafka::access` first, as Kafka's does.
//!
//! Handler shape: `handler::serve` decodes (pure, bounded); a partition-level handler
//! checks each partition and gives it to `fan_out::FanOut`, which answers it at once
//! (refused: its error code) or groups it by owning shard, sends one mesh message per
//! shard and fills the shards' answers back in request order; `serve` counts the
//! response's error codes and encodes it. A partition's failure is its own error code
//! and never fails the request.

pub mod acl_requests;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod admin_change;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod alter_share_group_offsets;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod config_resources;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_share_group_offsets;
pub mod delete_share_group_state;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_share_group_offsets;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fan_out;
pub mod fetch;
pub mod find_coordinator;
pub mod group_routing;
pub mod handler;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod initialize_share_group_state;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod quota_entities;
pub mod read_share_group_state;
pub mod read_share_group_state_summary;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod share_acknowledge;
pub mod share_admin;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod share_session;
pub mod share_state_routing;
pub mod startup_configs;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod txn_routing;
pub mod update_features;
pub mod write_share_group_state;
pub mod write_txn_markers;

use super::frame::{FrameError, RequestFrame};
use crate::config::BrokerConfig;
use crate::kafka::response_frame::ResponseFrame;
use corelog_shards::shard::Shard;
use handler::Handler;
use kafka_protocol::messages::ApiKey;
use std::rc::Rc;
use std::sync::Arc;

/// What a handler needs: its shard (for routing and the mesh) and the broker config.
pub struct Ctx {
    pub shard: Rc<Shard>,
    pub config: Arc<BrokerConfig>,
    /// This shard's client quota sensors.
    pub quotas: Rc<crate::quota::QuotaManager>,
    /// The name of the listener this connection came in on: Metadata and the other
    /// answers that name brokers give that listener's addresses.
    pub listener: Rc<str>,
    /// The listener's TLS settings when it is an SSL listener.
    pub tls: Option<crate::tls_config::TlsServerConfig>,
    /// The listener's SASL settings when it is a SASL listener.
    pub sasl: Option<crate::sasl::SaslListener>,
}

/// Declares every API served, once: `SUPPORTED_APIS` (what ApiVersions advertises, from
/// each handler's `KEY` and `VERSIONS`) and the dispatch to its handler.
macro_rules! apis {
    ($($module:ident::$handler:ident),* $(,)?) => {
        /// Exactly what corelog implements, advertised by ApiVersions, in this order.
        pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
            $((
                <$module::$handler as Handler>::KEY,
                <$module::$handler as Handler>::VERSIONS.0,
                <$module::$handler as Handler>::VERSIONS.1,
            )),*
        ];

        async fn dispatch(
            ctx: &Ctx,
            frame: RequestFrame,
            peer: std::net::SocketAddr,
            quota: &crate::quota::RequestQuota,
            produce_order: &crate::kafka::produce_order::ProduceOrder,
            session: &crate::session::Session,
        ) -> Result<Option<ResponseFrame>, FrameError> {
            let key = frame.api_key;
            $(
                if key == <$module::$handler as Handler>::KEY {
                    return handler::serve::<$module::$handler>(ctx, frame, peer, quota, produce_order, session)
                        .await;
                }
            )*
            Err(FrameError::UnsupportedVersion {
                api: key,
                version: frame.api_version,
            })
        }

        /// Decodes `frame`'s body as its handler would, without serving it (what the
        /// fuzz targets run): an API or a version that is not served is the error a
        /// connection would get.
        pub fn decode_request(mut frame: RequestFrame) -> Result<(), FrameError> {
            let key = frame.api_key;
            let version = frame.api_version;
            match supported_range(key) {
                Some((min, max)) if (min..=max).contains(&version) => {}
                _ => return Err(FrameError::UnsupportedVersion { api: key, version }),
            }
            $(
                if key == <$module::$handler as Handler>::KEY {
                    return handler::decode::<$module::$handler>(version, &mut frame.body)
                        .map(drop);
                }
            )*
            Err(FrameError::UnsupportedVersion { api: key, version })
        }
    };
}

// Ranges are what librdkafka 2.x, the Java 3.x/4.x clients, franz-go and kafka-python use,
// limited to versions whose semantics are fully implemented: Produce from v3 and Fetch
// from v4 because only RecordBatch v2 is stored (no down-conversion). The consumer
// protocol (KIP-848): ConsumerGroupHeartbeat, ConsumerGroupDescribe, and OffsetCommit v9
// (the same request as v8, its generation read as the member epoch).
// Share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe v1, the stable
// versions of Kafka 4.1+ (v0 was 4.0's early access); the share-group state APIs
// between brokers at v0 (4.2's v1 of Write and ReadSummary only adds the count of done
// records for lag).
// Transactions: transaction version 1 (AddPartitionsToTxn up to v3, EndTxn up to v4,
// TxnOffsetCommit up to v3); the
// partition leaders' verification and version 2 (KIP-890) are not served yet.
apis![
    produce::Produce,
    fetch::Fetch,
    list_offsets::ListOffsets,
    offset_for_leader_epoch::OffsetForLeaderEpoch,
    metadata::Metadata,
    api_versions::ApiVersions,
    create_topics::CreateTopics,
    delete_topics::DeleteTopics,
    create_partitions::CreatePartitions,
    find_coordinator::FindCoordinator,
    join_group::JoinGroup,
    sync_group::SyncGroup,
    heartbeat::Heartbeat,
    consumer_group_heartbeat::ConsumerGroupHeartbeat,
    consumer_group_describe::ConsumerGroupDescribe,
    share_group_heartbeat::ShareGroupHeartbeat,
    share_group_describe::ShareGroupDescribe,
    share_fetch::ShareFetch,
    share_acknowledge::ShareAcknowledge,
    initialize_share_group_state::InitializeShareGroupState,
    read_share_group_state::ReadShareGroupState,
    write_share_group_state::WriteShareGroupState,
    delete_share_group_state::DeleteShareGroupState,
    read_share_group_state_summary::ReadShareGroupStateSummary,
    describe_share_group_offsets::DescribeShareGroupOffsets,
    alter_share_group_offsets::AlterShareGroupOffsets,
    delete_share_group_offsets::DeleteShareGroupOffsets,
    leave_group::LeaveGroup,
    offset_commit::OffsetCommit,
    offset_fetch::OffsetFetch,
    describe_groups::DescribeGroups,
    list_groups::ListGroups,
    delete_groups::DeleteGroups,
    offset_delete::OffsetDelete,
    describe_configs::DescribeConfigs,
    alter_configs::AlterConfigs,
    incremental_alter_configs::IncrementalAlterConfigs,
    delete_records::DeleteRecords,
    alter_replica_log_dirs::AlterReplicaLogDirs,
    init_producer_id::InitProducerId,
    describe_client_quotas::DescribeClientQuotas,
    alter_client_quotas::AlterClientQuotas,
    describe_log_dirs::DescribeLogDirs,
    describe_cluster::DescribeCluster,
    describe_quorum::DescribeQuorum,
    describe_producers::DescribeProducers,
    describe_topic_partitions::DescribeTopicPartitions,
    describe_user_scram_credentials::DescribeUserScramCredentials,
    alter_user_scram_credentials::AlterUserScramCredentials,
    sasl_handshake::SaslHandshake,
    sasl_authenticate::SaslAuthenticate,
    alter_partition_reassignments::AlterPartitionReassignments,
    list_partition_reassignments::ListPartitionReassignments,
    elect_leaders::ElectLeaders,
    update_features::UpdateFeatures,
    describe_acls::DescribeAcls,
    create_acls::CreateAcls,
    delete_acls::DeleteAcls,
    write_txn_markers::WriteTxnMarkers,
    add_partitions_to_txn::AddPartitionsToTxn,
    add_offsets_to_txn::AddOffsetsToTxn,
    end_txn::EndTxn,
    describe_transactions::DescribeTransactions,
    list_transactions::ListTransactions,
    txn_offset_commit::TxnOffsetCommit,
];

/// The cluster's finalized level of `feature` (`corelog_controller::features`): the
/// metadata log's, or this broker's configured one while the cluster has finalized none.
pub(crate) fn feature_level(ctx: &Ctx, feature: &str) -> i16 {
    let meta = ctx.shard.metadata.snapshot();
    corelog_controller::features::level_of(
        &meta.features,
        &ctx.config.configured_feature_levels(),
        feature,
    )
}

/// Whether the cluster serves share groups (its finalized `share.version`, KIP-932).
pub(crate) fn share_groups_enabled(ctx: &Ctx) -> bool {
    feature_level(ctx, corelog_controller::features::SHARE_VERSION) >= 1
}

/// Whether the cluster serves the consumer group protocol (its finalized
/// `group.version`, KIP-848).
pub(crate) fn consumer_protocol_enabled(ctx: &Ctx) -> bool {
    feature_level(ctx, corelog_controller::features::GROUP_VERSION) >= 1
}

pub fn supported_range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// Serves one request: checks its version, dispatches it to its handler and charges the
/// time spent to the client's request quota. `Ok(None)` means no response is sent
/// (produce with acks=0).
/// `Err` closes the connection (after the responses before it are written).
/// `quota` is the quota decision made when the request was read, and the
/// connection's hold for handlers that charge after their work; `produce_order` keeps
/// the connection's produce requests in the order it read them.
pub async fn handle(
    ctx: &Ctx,
    frame: RequestFrame,
    peer: std::net::SocketAddr,
    quota: &crate::quota::RequestQuota,
    produce_order: &crate::kafka::produce_order::ProduceOrder,
    session: &crate::session::Session,
) -> Result<Option<ResponseFrame>, FrameError> {
    let Some((min, max)) = supported_range(frame.api_key) else {
        return Err(FrameError::UnsupportedVersion {
            api: frame.api_key,
            version: frame.api_version,
        });
    };
    if frame.api_version < min || frame.api_version > max {
        if frame.api_key == ApiKey::ApiVersions {
            return api_versions::unsupported_version(&frame)
                .map(|b| Some(ResponseFrame::whole(b)));
        }
        return Err(FrameError::UnsupportedVersion {
            api: frame.api_key,
            version: frame.api_version,
        });
    }
    // The request quota (`request_percentage`) is charged the time spent serving.
    let client_id = frame.header.client_id.clone();
    let serving = dispatch(ctx, frame, peer, quota, produce_order, session);
    let client = crate::quota::QuotaClient::of(session.principal(), client_id.as_deref());
    crate::quota::timed(&ctx.quotas, client, quota, serving).await
}
